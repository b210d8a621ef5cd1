// Decoders dq16<F> (16 consecutive weights of one row from column k, a multiple of 16, into
// f32) of the table-lookup (IQ*), ternary (TQ*) and FP4 (MXFP4) formats. Block layouts as in
// llama.cpp's ggml-common.h; every value is computed with the operations of the CPU reference
// (oxinfer-kernels/src/dequant/iq.rs: the scale d * f(code) first, then times the signed
// integer quant), so the results are bit for bit the CPU's (tests/iq_decoders.rs checks it on
// the host). The grids are the generated iq_grids.cuh.

#ifndef OXINFER_IQ_DEQUANT_CUH
#define OXINFER_IQ_DEQUANT_CUH

#include "common.cuh"
#include "dequant.cuh"
#include "iq_grids.cuh"

template <> struct Fmt<FMT_IQ2_XXS> { enum { QK = 256, BYTES = 66 }; };
template <> struct Fmt<FMT_IQ2_XS> { enum { QK = 256, BYTES = 74 }; };
template <> struct Fmt<FMT_IQ3_XXS> { enum { QK = 256, BYTES = 98 }; };
template <> struct Fmt<FMT_IQ1_S> { enum { QK = 256, BYTES = 50 }; };
template <> struct Fmt<FMT_IQ4_NL> { enum { QK = 32, BYTES = 18 }; };
template <> struct Fmt<FMT_IQ3_S> { enum { QK = 256, BYTES = 110 }; };
template <> struct Fmt<FMT_IQ2_S> { enum { QK = 256, BYTES = 82 }; };
template <> struct Fmt<FMT_IQ4_XS> { enum { QK = 256, BYTES = 136 }; };
template <> struct Fmt<FMT_IQ1_M> { enum { QK = 256, BYTES = 56 }; };
template <> struct Fmt<FMT_TQ1_0> { enum { QK = 256, BYTES = 54 }; };
template <> struct Fmt<FMT_TQ2_0> { enum { QK = 256, BYTES = 66 }; };
template <> struct Fmt<FMT_MXFP4> { enum { QK = 32, BYTES = 17 }; };

// Little-endian u32 at any byte address.
__device__ __forceinline__ u32 ld32_a1(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// Entry idx (0..15) of a 16-entry int8 table held as four little-endian words.
__device__ __forceinline__ int lut16(u32 w0, u32 w1, u32 w2, u32 w3, u32 idx) {
    u32 s = idx & 7u;
    u32 v = (idx & 8u) ? __byte_perm(w2, w3, s) : __byte_perm(w0, w1, s);
    return (int)(i8)(v & 0xffu);
}

// Eight grid magnitudes (byte j of g) with sign bits `signs` (bit j set: negative), times db.
__device__ __forceinline__ void put8_signed(unsigned long long g, u32 signs, float db, float* y) {
    #pragma unroll
    for (int j = 0; j < 8; j++) {
        float v = (float)(u32)((g >> (8 * j)) & 0xffull);
        y[j] = db * (((signs >> j) & 1u) ? -v : v);
    }
}

// Two 4-magnitude grid entries (weights 0..3 from g1, 4..7 from g2) with signs, times db.
__device__ __forceinline__ void put4x2_signed(u32 g1, u32 g2, u32 signs, float db, float* y) {
    put8_signed((unsigned long long)g1 | ((unsigned long long)g2 << 32), signs, db, y);
}

// Eight IQ1 grid values (bytes of g as i8 in {-1, 0, 1}) shifted by ±1/8: db * ((8 g ± 1) / 8).
__device__ __forceinline__ void put8_iq1(unsigned long long g, bool negative, float db, float* y) {
    int delta = negative ? -1 : 1;
    #pragma unroll
    for (int j = 0; j < 8; j++) {
        int q = 8 * (int)(i8)((g >> (8 * j)) & 0xffull) + delta;
        y[j] = db * ((float)q * 0.125f);
    }
}

// The CPU's float_scale: d * (0.5 + code) * 0.25 (IQ2_*), d * (0.5 + code) * 0.5 (IQ3_XXS),
// d * (1 + 2 code) (IQ3_S, IQ1_*).
__device__ __forceinline__ float iq2_scale(float d, u32 c) { return d * (0.5f + (float)c) * 0.25f; }
__device__ __forceinline__ float iq3xxs_scale(float d, u32 c) { return d * (0.5f + (float)c) * 0.5f; }
__device__ __forceinline__ float odd_scale(float d, u32 c) { return d * (float)(1u + 2u * c); }

template <> __device__ __forceinline__ void dq16<FMT_IQ2_XXS>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 66;
    int e = k & 255, ib = e >> 5, half = (e >> 4) & 1;
    const u8* q = b + 2 + 8 * ib;
    u32 aux = ld32_a1(q + 4);
    float db = iq2_scale(h2f(ld16(b)), aux >> 28);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int l = 2 * half + h;
        unsigned long long g = __ldg(&IQ2XXS_GRID[q[l]]);
        u32 signs = __ldg(&KSIGNS_IQ2XS[(aux >> (7 * l)) & 127u]);
        put8_signed(g, signs, db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ2_XS>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 74;
    int gi = (k & 255) >> 4;
    u32 c = (b[66 + gi / 2] >> (4 * (gi & 1))) & 15u;
    float db = iq2_scale(h2f(ld16(b)), c);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        u32 v = ld16(b + 2 + 2 * (2 * gi + h));
        unsigned long long g = __ldg(&IQ2XS_GRID[v & 511u]);
        put8_signed(g, __ldg(&KSIGNS_IQ2XS[v >> 9]), db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ2_S>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 82;
    int gi = (k & 255) >> 4;
    u32 c = (b[74 + gi / 2] >> (4 * (gi & 1))) & 15u;
    float db = iq2_scale(h2f(ld16(b)), c);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = 2 * gi + h;
        u32 idx = (u32)b[2 + i] | (((u32)(b[66 + i / 4] >> (2 * (i & 3))) & 3u) << 8);
        put8_signed(__ldg(&IQ2S_GRID[idx]), b[34 + i], db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ3_XXS>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 98;
    int e = k & 255, ib = e >> 5, half = (e >> 4) & 1;
    u32 aux = ld32_a1(b + 66 + 4 * ib);
    float db = iq3xxs_scale(h2f(ld16(b)), aux >> 28);
    const u8* qs = b + 2 + 8 * ib;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int l = 2 * half + h;
        u32 g1 = __ldg(&IQ3XXS_GRID[qs[2 * l]]), g2 = __ldg(&IQ3XXS_GRID[qs[2 * l + 1]]);
        put4x2_signed(g1, g2, __ldg(&KSIGNS_IQ2XS[(aux >> (7 * l)) & 127u]), db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ3_S>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 110;
    int gi = (k & 255) >> 4, ib = gi >> 1;
    u32 c = (b[106 + ib / 2] >> (4 * (ib & 1))) & 15u;
    float db = odd_scale(h2f(ld16(b)), c);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = 2 * gi + h;
        u32 g[2];
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            int kk = 2 * i + m;
            u32 idx = (u32)b[2 + kk] | ((u32)((b[66 + kk / 8] >> (kk & 7)) & 1) << 8);
            g[m] = __ldg(&IQ3S_GRID[idx]);
        }
        put4x2_signed(g[0], g[1], b[74 + i], db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ1_S>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 50;
    int e = k & 255, ib = e >> 5, half = (e >> 4) & 1;
    u32 qh = ld16(b + 34 + 2 * ib);
    float db = odd_scale(h2f(ld16(b)), (qh >> 12) & 7u);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int l = 2 * half + h;
        u32 idx = (u32)b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
        put8_iq1(__ldg(&IQ1S_GRID[idx]), (qh & 0x8000u) != 0, db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ1_M>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 56;
    int gi = (k & 255) >> 4;
    u32 sc0 = ld16(b + 48), sc1 = ld16(b + 50), sc2 = ld16(b + 52), sc3 = ld16(b + 54);
    u32 bits = (sc0 >> 12) | ((sc1 >> 8) & 0x00F0u) | ((sc2 >> 4) & 0x0F00u) | (sc3 & 0xF000u);
    u32 sc = ld16(b + 48 + 2 * (gi / 4));
    float db = odd_scale(h2f((u16)bits), (sc >> (3 * (gi & 3))) & 7u);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = 2 * gi + h;
        u32 hb = (u32)(b[32 + i / 2] >> (4 * (i & 1)));
        u32 idx = (u32)b[i] | ((hb & 7u) << 8);
        put8_iq1(__ldg(&IQ1S_GRID[idx]), (hb & 8u) != 0, db, y + 8 * h);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_IQ4_XS>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 136;
    int e = k & 255, ib = e >> 5, sh = (e & 16) ? 4 : 0;
    u32 hi = ld16(b + 2);
    u32 c = ((b[4 + ib / 2] >> (4 * (ib & 1))) & 15u) | (((hi >> (2 * ib)) & 3u) << 4);
    float db = h2f(ld16(b)) * (float)((int)c - 32);
    const u8* qs = b + 8 + 16 * ib;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        u32 idx = (qs[i] >> sh) & 15u;
        y[i] = db * (float)lut16(KVALUES_IQ4NL_W0, KVALUES_IQ4NL_W1, KVALUES_IQ4NL_W2,
                                 KVALUES_IQ4NL_W3, idx);
    }
}

// TQ1_0: 160 weights from bytes 0..32 (five base-3 digits each, digit p of byte m is weight
// 32 p + m), 80 from bytes 32..48 (weight 160 + 16 p + m), 16 from bytes 48..52 (four digits,
// weight 240 + 4 p + m); digit p of byte v is ((v * 3^p mod 256) * 3) >> 8. Returns weight
// e + i of block b (e a multiple of 16, i < 16) as -1, 0 or 1.
__device__ __forceinline__ int tq1_q(const u8* b, int e, int i) {
    int byte, p;
    if (e < 160) {
        p = e >> 5;
        byte = (e & 31) + i;
    } else if (e < 240) {
        p = (e - 160) >> 4;
        byte = 32 + i;
    } else {
        p = i >> 2;
        byte = 48 + (i & 3);
    }
    u32 pw = p == 0 ? 1u : p == 1 ? 3u : p == 2 ? 9u : p == 3 ? 27u : 81u;
    u32 v = ((u32)b[byte] * pw) & 0xffu;
    return (int)((v * 3u) >> 8) - 1;
}

template <> __device__ __forceinline__ void dq16<FMT_TQ1_0>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 54;
    float d = h2f(ld16(b + 52));
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)tq1_q(b, k & 255, i);
}

template <> __device__ __forceinline__ void dq16<FMT_TQ2_0>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 66;
    float d = h2f(ld16(b + 64));
    int e = k & 255, c = e >> 7, s = (e >> 5) & 3, m0 = e & 31;
    const u8* q = b + 32 * c + m0;
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)((int)((q[i] >> (2 * s)) & 3) - 1);
}

template <> __device__ __forceinline__ void dq16<FMT_IQ4_NL>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 18;
    float d = h2f(ld16(b));
    int sh = (k & 16) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        u32 idx = (b[2 + i] >> sh) & 15u;
        y[i] = d * (float)lut16(KVALUES_IQ4NL_W0, KVALUES_IQ4NL_W1, KVALUES_IQ4NL_W2,
                                KVALUES_IQ4NL_W3, idx);
    }
}

// The E8M0 scale halved (ggml_e8m0_to_fp32_half): 2^(e - 128), subnormal for e < 2.
__device__ __forceinline__ float e8m0_half(u32 e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}

template <> __device__ __forceinline__ void dq16<FMT_MXFP4>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 17;
    float d = e8m0_half(b[0]);
    int sh = (k & 16) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        u32 idx = (b[1 + i] >> sh) & 15u;
        y[i] = d * (float)lut16(KVALUES_MXFP4_W0, KVALUES_MXFP4_W1, KVALUES_MXFP4_W2,
                                KVALUES_MXFP4_W3, idx);
    }
}

#endif  // OXINFER_IQ_DEQUANT_CUH
