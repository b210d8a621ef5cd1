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

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_0>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 2 + 4 * i);
        dot = dp4a(w & 0x0F0F0F0F, x[i], dot);
        dot = dp4a((w >> 4) & 0x0F0F0F0F, x[4 + i], dot);
    }
    return dx * h2f(ld16(blk)) * (float)(dot - 8 * sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_1>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 4 + 4 * i);
        dot = dp4a(w & 0x0F0F0F0F, x[i], dot);
        dot = dp4a((w >> 4) & 0x0F0F0F0F, x[4 + i], dot);
    }
    return dx * (h2f(ld16(blk)) * (float)dot + h2f(ld16(blk + 2)) * (float)sx);
}

// The high bits of elements 4 k .. 4 k + 3 of a 5-bit block (bits 4 k .. 4 k + 3 of qh), each
// moved to bit 4 of its byte.
__device__ __forceinline__ int q5_high4(u32 qh, int k) {
    u32 h = qh >> (4 * k);
    return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

// Q5_0 / Q5_1: the 5-bit values 0..31 (low nibble from qs, bit 4 from qh: element j < 16 is
// byte j's low nibble and bit j, element 16 + j its high nibble and bit 16 + j) against the
// int8 activations; Q5_0's -16 offset through the activations' sum (the CPU's Σ (q - 16) x),
// Q5_1's minimum like Q4_1's.
template <>
__device__ __forceinline__ float dot32_i8<FMT_Q5_0>(const u8* blk, const int* x, int sx, float dx) {
    u32 qh = (u32)ld32_a2(blk + 2);
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 6 + 4 * i);
        dot = dp4a((w & 0x0F0F0F0F) | q5_high4(qh, i), x[i], dot);
        dot = dp4a(((w >> 4) & 0x0F0F0F0F) | q5_high4(qh, 4 + i), x[4 + i], dot);
    }
    return dx * h2f(ld16(blk)) * (float)(dot - 16 * sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q5_1>(const u8* blk, const int* x, int sx, float dx) {
    u32 qh = (u32)ld32_a2(blk + 4);
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 8 + 4 * i);
        dot = dp4a((w & 0x0F0F0F0F) | q5_high4(qh, i), x[i], dot);
        dot = dp4a(((w >> 4) & 0x0F0F0F0F) | q5_high4(qh, 4 + i), x[4 + i], dot);
    }
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
