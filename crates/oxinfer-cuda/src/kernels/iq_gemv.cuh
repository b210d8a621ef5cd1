// int8 (dp4a) GEMV bodies of the formats whose values are a 16-entry int8 table: IQ4_NL and
// MXFP4 (32-weight blocks, activations in blocks of 32: dot32_i8 for gemv.cu's b32_i8_rows) and
// IQ4_XS (256-weight blocks with a 6-bit scale per 32, activations in blocks of 256 as the
// CPU's Q8_K: iq4xs_i8_rows). Byte permutes turn four 4-bit codes into four table bytes. The
// integer sums are the CPU's; only the f32 combination differs in order. Included after
// gemv.cu (it uses dp4a, ld32_a2 and the templates declared there).

#ifndef OXINFER_IQ_GEMV_CUH
#define OXINFER_IQ_GEMV_CUH

#include "iq_dequant.cuh"

// Four 4-bit codes (one per byte of `codes`, each 0..15) -> the four int8 table entries
// (table as four little-endian words w0..w3), packed in byte order.
__device__ __forceinline__ int lut16_x4(u32 codes, u32 w0, u32 w1, u32 w2, u32 w3) {
    u32 n = codes | (codes >> 4);
    u32 sel = (n & 0xffu) | ((n >> 8) & 0xff00u);  // the four codes as nibbles
    u32 lo = __byte_perm(w0, w1, sel & 0x7777u);   // entries 0..7
    u32 hi = __byte_perm(w2, w3, sel & 0x7777u);   // entries 8..15
    return (int)__byte_perm(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1));
}

// The 16 weights' int8 table values of four bytes of codes: low nibbles (lo) and high (hi).
#define IQ4NL_X4(c) lut16_x4((c), KVALUES_IQ4NL_W0, KVALUES_IQ4NL_W1, KVALUES_IQ4NL_W2, KVALUES_IQ4NL_W3)
#define MXFP4_X4(c) lut16_x4((c), KVALUES_MXFP4_W0, KVALUES_MXFP4_W1, KVALUES_MXFP4_W2, KVALUES_MXFP4_W3)

template <>
__device__ __forceinline__ float dot32_i8<FMT_IQ4_NL>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 w = (u32)ld32_a2(blk + 2 + 4 * i);
        dot = dp4a(IQ4NL_X4(w & 0x0F0F0F0Fu), x[i], dot);
        dot = dp4a(IQ4NL_X4((w >> 4) & 0x0F0F0F0Fu), x[4 + i], dot);
    }
    return dx * h2f(ld16(blk)) * (float)dot;
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_MXFP4>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 w = ld32_a1(blk + 1 + 4 * i);
        dot = dp4a(MXFP4_X4(w & 0x0F0F0F0Fu), x[i], dot);
        dot = dp4a(MXFP4_X4((w >> 4) & 0x0F0F0F0Fu), x[4 + i], dot);
    }
    return dx * e8m0_half(blk[0]) * (float)dot;
}

// IQ4_XS: eight lanes per super-block (a warp takes four, the block's warps interleaved): lane
// j takes 32-weight group j, 16 bytes of codes (8-byte aligned: blocks are 136 bytes) and its
// 32 int8 activations, scaled by its 6-bit scale minus 32; xd holds one scale per 256.
template <int T, int R>
__device__ __forceinline__ void iq4xs_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                              const i8* __restrict__ xq,
                                              const float* __restrict__ xd, int cols, int t,
                                              int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 8;
    int ib = lane & 7;
    #pragma unroll 2
    for (int b = (lane >> 3) + 4 * share; b < nb; b += 4 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * 136;
        float d = h2f(ld16(blk));
        u32 sh = ld16(blk + 2);
        int sc = (int)(((blk[4 + ib / 2] >> (4 * (ib & 1))) & 15u) | (((sh >> (2 * ib)) & 3u) << 4)) - 32;
        const uint2* qs = (const uint2*)(blk + 8 + 16 * ib);
        uint2 qa = qs[0], qb = qs[1];
        u32 qw[4] = {qa.x, qa.y, qb.x, qb.y};
        int lo[4], hi[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = IQ4NL_X4(qw[i] & 0x0F0F0F0Fu);
            hi[i] = IQ4NL_X4((qw[i] >> 4) & 0x0F0F0F0Fu);
        }
        int k0 = b * 256 + ib * 32;
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                const int4* xr = (const int4*)(xq + (long)r * cols + k0);
                int4 x0 = xr[0], x1 = xr[1];
                int dot = dp4a(lo[0], x0.x, dp4a(lo[1], x0.y, dp4a(lo[2], x0.z, dp4a(lo[3], x0.w, 0))));
                dot = dp4a(hi[0], x1.x, dp4a(hi[1], x1.y, dp4a(hi[2], x1.z, dp4a(hi[3], x1.w, dot))));
                acc[r] += xd[(long)r * nb + b] * (d * (float)(sc * dot));
            }
        }
      }
    }
}

#endif  // OXINFER_IQ_GEMV_CUH
