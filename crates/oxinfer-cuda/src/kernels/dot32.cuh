// The int8 dot products of one 32-weight block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) with its 32
// int8 activations: the CPU's integer block sums, scaled. Included by gemv.cu after dp4a,
// ld16 and ld32_a2 (and by the host test tests/decoders_host.rs, whose shim defines them).
#ifndef OXINFER_DOT32_CUH
#define OXINFER_DOT32_CUH

// One 32-weight block times its 32 int8 activations x (eight packed words,
// their sum sx precomputed by the quantization), scaled by the activations' block scale dx: the
// CPU's integer block sums.
template <int F>
__device__ __forceinline__ float dot32_i8(const u8* blk, const int* x, int sx, float dx);

// The high bits of elements 4 k .. 4 k + 3 of a 5-bit block (bits 4 k .. 4 k + 3 of qh), each
// moved to bit 4 of its byte.
__device__ __forceinline__ int q5_high4(u32 qh, int k) {
    u32 h = qh >> (4 * k);
    return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

// The integer dot of a block's 32 unsigned 4-bit values (16 bytes at qs, 2-byte aligned:
// element j < 16 is byte j's low nibble, 16 + j its high one), each with bit 4 from qh (a Q5
// block's 32 high bits; 0 for Q4), with the 32 int8 activations x.
__device__ __forceinline__ int nibble_dot(const u8* qs, u32 qh, const int* x) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(qs + 4 * i);
        dot = dp4a((w & 0x0F0F0F0F) | q5_high4(qh, i), x[i], dot);
        dot = dp4a(((w >> 4) & 0x0F0F0F0F) | q5_high4(qh, 4 + i), x[4 + i], dot);
    }
    return dot;
}

// Q4_0 / Q5_0: values q - 8 / q - 16, the offset through the activations' sum (the CPU's
// Σ (q - offset) x); Q4_1 / Q5_1: d q + m, the minimum times the activations' sum.
template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_0>(const u8* blk, const int* x, int sx, float dx) {
    return dx * h2f(ld16(blk)) * (float)(nibble_dot(blk + 2, 0u, x) - 8 * sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_1>(const u8* blk, const int* x, int sx, float dx) {
    int dot = nibble_dot(blk + 4, 0u, x);
    return dx * (h2f(ld16(blk)) * (float)dot + h2f(ld16(blk + 2)) * (float)sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q5_0>(const u8* blk, const int* x, int sx, float dx) {
    int dot = nibble_dot(blk + 6, (u32)ld32_a2(blk + 2), x);
    return dx * h2f(ld16(blk)) * (float)(dot - 16 * sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q5_1>(const u8* blk, const int* x, int sx, float dx) {
    int dot = nibble_dot(blk + 8, (u32)ld32_a2(blk + 4), x);
    return dx * (h2f(ld16(blk)) * (float)dot + h2f(ld16(blk + 2)) * (float)sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q8_0>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 8; i++) dot = dp4a(ld32_a2(blk + 2 + 4 * i), x[i], dot);
    return dx * h2f(ld16(blk)) * (float)dot;
}

#endif  // OXINFER_DOT32_CUH
