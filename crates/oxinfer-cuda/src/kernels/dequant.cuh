// Per-format decoding of 16 consecutive weights of one row, starting at column k (a multiple of
// 16), into f32. Block layouts as in llama.cpp's ggml-common.h (little endian), the same as the
// CPU reference in oxinfer-kernels/src/dequant. FMT ids are the GGML type ids.

#ifndef OXINFER_DEQUANT_CUH
#define OXINFER_DEQUANT_CUH

#include "common.cuh"

#define FMT_F32 0
#define FMT_F16 1
#define FMT_Q4_0 2
#define FMT_Q4_1 3
#define FMT_Q5_0 6
#define FMT_Q5_1 7
#define FMT_Q8_0 8
#define FMT_Q2_K 10
#define FMT_Q3_K 11
#define FMT_Q4_K 12
#define FMT_Q5_K 13
#define FMT_Q6_K 14
#define FMT_Q8_K 15
#define FMT_BF16 30
// The IQ / TQ / MXFP4 formats (decoders in iq_dequant.cuh, compiled in the second program).
#define FMT_IQ2_XXS 16
#define FMT_IQ2_XS 17
#define FMT_IQ3_XXS 18
#define FMT_IQ1_S 19
#define FMT_IQ4_NL 20
#define FMT_IQ3_S 21
#define FMT_IQ2_S 22
#define FMT_IQ4_XS 23
#define FMT_IQ1_M 29
#define FMT_TQ1_0 34
#define FMT_TQ2_0 35
#define FMT_MXFP4 39
// Not GGML types: IQ4_NL and IQ4_XS decoded as in session 10 (iq_gemv.cuh), the int8 GEMV
// kernels that OXINFER_CUDA_IQ4_GEMV=old selects, and IQ4_XS with four lanes per super-block
// at one row (OXINFER_CUDA_IQ4_GEMV=wide).
#define FMT_IQ4_NL_V0 120
#define FMT_IQ4_XS_V0 123
#define FMT_IQ4_XS_W 223

// The 256-weight IQ / TQ formats (their int8 GEMV body is iq_i8_rows in iq_gemv.cuh).
__host__ __device__ constexpr bool is_iq256(int f) {
    return f == FMT_IQ2_XXS || f == FMT_IQ2_XS || f == FMT_IQ3_XXS || f == FMT_IQ1_S ||
           f == FMT_IQ3_S || f == FMT_IQ2_S || f == FMT_IQ4_XS || f == FMT_IQ1_M ||
           f == FMT_TQ1_0 || f == FMT_TQ2_0 || f == FMT_IQ4_XS_V0 || f == FMT_IQ4_XS_W;
}

template <int F> struct Fmt;
template <> struct Fmt<FMT_Q4_0> { enum { QK = 32, BYTES = 18 }; };
template <> struct Fmt<FMT_Q4_1> { enum { QK = 32, BYTES = 20 }; };
template <> struct Fmt<FMT_Q5_0> { enum { QK = 32, BYTES = 22 }; };
template <> struct Fmt<FMT_Q5_1> { enum { QK = 32, BYTES = 24 }; };
template <> struct Fmt<FMT_Q8_0> { enum { QK = 32, BYTES = 34 }; };
template <> struct Fmt<FMT_Q2_K> { enum { QK = 256, BYTES = 84 }; };
template <> struct Fmt<FMT_Q3_K> { enum { QK = 256, BYTES = 110 }; };
template <> struct Fmt<FMT_Q4_K> { enum { QK = 256, BYTES = 144 }; };
template <> struct Fmt<FMT_Q5_K> { enum { QK = 256, BYTES = 176 }; };
template <> struct Fmt<FMT_Q6_K> { enum { QK = 256, BYTES = 210 }; };
template <> struct Fmt<FMT_Q8_K> { enum { QK = 256, BYTES = 292 }; };

// 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block.
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, float* sc, float* mn) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *mn = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

template <int F> __device__ __forceinline__ void dq16(const u8* row, int k, float* y);

template <> __device__ __forceinline__ void dq16<FMT_Q4_0>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 18;
    float d = h2f(ld16(b));
    int sh = (k & 16) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)(((b[2 + i] >> sh) & 0xF) - 8);
}

template <> __device__ __forceinline__ void dq16<FMT_Q4_1>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 20;
    float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
    int sh = (k & 16) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)((b[4 + i] >> sh) & 0xF) + m;
}

template <> __device__ __forceinline__ void dq16<FMT_Q5_0>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 22;
    float d = h2f(ld16(b));
    u32 qh = (u32)b[2] | ((u32)b[3] << 8) | ((u32)b[4] << 16) | ((u32)b[5] << 24);
    int o = k & 16, sh = o ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        int q = ((b[6 + i] >> sh) & 0xF) | (((qh >> (o + i)) & 1) << 4);
        y[i] = d * (float)(q - 16);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_Q5_1>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 24;
    float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
    u32 qh = (u32)b[4] | ((u32)b[5] << 8) | ((u32)b[6] << 16) | ((u32)b[7] << 24);
    int o = k & 16, sh = o ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        int q = ((b[8 + i] >> sh) & 0xF) | (((qh >> (o + i)) & 1) << 4);
        y[i] = d * (float)q + m;
    }
}

template <> __device__ __forceinline__ void dq16<FMT_Q8_0>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 32) * 34;
    float d = h2f(ld16(b));
    const i8* q = (const i8*)(b + 2 + (k & 16));
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)q[i];
}

template <> __device__ __forceinline__ void dq16<FMT_Q2_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 84;
    float d = h2f(ld16(b + 80)), dmin = h2f(ld16(b + 82));
    int e = k & 255, n = e >> 7, r = e & 127, j = r >> 5, l0 = r & 31;
    u8 sc = b[n * 8 + j * 2 + (l0 >> 4)];
    float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
    const u8* q = b + 16 + n * 32 + l0;
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = dl * (float)((q[i] >> (2 * j)) & 3) - ml;
}

template <> __device__ __forceinline__ void dq16<FMT_Q3_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 110;
    const u8* hm = b;
    const u8* qs = b + 32;
    const u8* s = b + 96;
    float d = h2f(ld16(b + 108));
    int e = k & 255, n = e >> 7, r = e & 127, j = r >> 5, l0 = r & 31;
    int is = n * 8 + j * 2 + (l0 >> 4);
    // 16 6-bit scales: low 4 bits from s[0..8], high 2 bits from s[8..12].
    int lo = (is < 8) ? (s[is] & 0xF) : (s[is - 8] >> 4);
    int hi = (s[8 + (is & 3)] >> (2 * (is >> 2))) & 3;
    float dl = d * (float)((lo | (hi << 4)) - 32);
    int bit = n * 4 + j;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        int l = l0 + i;
        int q = ((qs[n * 32 + l] >> (2 * j)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
        y[i] = dl * (float)q;
    }
}

template <> __device__ __forceinline__ void dq16<FMT_Q4_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 144;
    float d = h2f(ld16(b)), dmin = h2f(ld16(b + 2));
    int e = k & 255, sb = e >> 5, c = e >> 6, l0 = e & 31;
    float sc, mn;
    scale_min_k4(sb, b + 4, &sc, &mn);
    float dl = d * sc, ml = dmin * mn;
    const u8* q = b + 16 + c * 32 + l0;
    int sh = (sb & 1) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = dl * (float)((q[i] >> sh) & 0xF) - ml;
}

template <> __device__ __forceinline__ void dq16<FMT_Q5_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 176;
    float d = h2f(ld16(b)), dmin = h2f(ld16(b + 2));
    int e = k & 255, sb = e >> 5, c = e >> 6, l0 = e & 31;
    float sc, mn;
    scale_min_k4(sb, b + 4, &sc, &mn);
    float dl = d * sc, ml = dmin * mn;
    const u8* qh = b + 16 + l0;
    const u8* q = b + 48 + c * 32 + l0;
    int sh = (sb & 1) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        int v = ((q[i] >> sh) & 0xF) | (((qh[i] >> sb) & 1) << 4);
        y[i] = dl * (float)v - ml;
    }
}

template <> __device__ __forceinline__ void dq16<FMT_Q6_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 210;
    float d = h2f(ld16(b + 208));
    int e = k & 255, n = e >> 7, r = e & 127, qu = r >> 5, l0 = r & 31;
    const u8* ql = b + n * 64 + l0 + (qu & 1) * 32;
    const u8* qh = b + 128 + n * 32 + l0;
    const i8* sc = (const i8*)(b + 192);
    float dl = d * (float)sc[n * 8 + (l0 >> 4) + 2 * qu];
    int sh = (qu >= 2) ? 4 : 0;
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        int q = ((ql[i] >> sh) & 0xF) | (((qh[i] >> (2 * qu)) & 3) << 4);
        y[i] = dl * (float)(q - 32);
    }
}

template <> __device__ __forceinline__ void dq16<FMT_Q8_K>(const u8* row, int k, float* y) {
    const u8* b = row + (k / 256) * 292;
    float d = __uint_as_float((u32)b[0] | ((u32)b[1] << 8) | ((u32)b[2] << 16) | ((u32)b[3] << 24));
    const i8* q = (const i8*)(b + 4 + (k & 255));
    #pragma unroll
    for (int i = 0; i < 16; i++) y[i] = d * (float)q[i];
}

// This thread's 16 weights of a whole-matrix decoding ([rows, cols] row-major, one thread per
// 16 weights) into v, and their index in the output as `at`; false past the end.
template <int F>
__device__ __forceinline__ bool dq16_thread(const u8* w, int rows, int cols, long row_bytes,
                                            float* v, long& at) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long per_row = cols / 16;
    if (idx >= (long)rows * per_row) return false;
    int r = (int)(idx / per_row), k = (int)(idx % per_row) * 16;
    dq16<F>(w + r * row_bytes, k, v);
    at = (long)r * cols + k;
    return true;
}

// Whole-matrix dequantization to bf16, or IEEE f16 when H (the one instantiated) ([rows, cols] row-major): one thread
// per 16 weights.
template <int F, bool H>
__device__ void dequant_16(const u8* w, u16* out, int rows, int cols, long row_bytes) {
    float v[16];
    long at;
    if (!dq16_thread<F>(w, rows, cols, row_bytes, v, at)) return;
    u32 p[8];
    #pragma unroll
    for (int i = 0; i < 8; i++)
        p[i] = H ? ((u32)f2h(v[2 * i]) | ((u32)f2h(v[2 * i + 1]) << 16))
                 : pack_bf2(v[2 * i], v[2 * i + 1]);
    uint4* dst = (uint4*)(out + at);
    dst[0] = make_uint4(p[0], p[1], p[2], p[3]);
    dst[1] = make_uint4(p[4], p[5], p[6], p[7]);
}

// The same decoding to f32, unrounded (the exact-product path): one thread per 16 weights.
template <int F>
__device__ void dequant_32(const u8* w, float* out, int rows, int cols, long row_bytes) {
    float v[16];
    long at;
    if (!dq16_thread<F>(w, rows, cols, row_bytes, v, at)) return;
    float4* dst = (float4*)(out + at);
    #pragma unroll
    for (int i = 0; i < 4; i++) dst[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

#endif  // OXINFER_DEQUANT_CUH
