// Kernels of a whole bidirectional encoder pass (encoder.rs): bias and activation, the gated
// activation, clamps of a product's input or output, per-head RMS norms, the residual LayerNorm
// or RMSNorm (post-norm and pre-norm), and attention of every sequence with itself (optionally
// within a local window; grouped-query heads) over a batch concatenated without padding. f32
// throughout, the CPU twin's formulas (plan/encoder.rs, nn/encoder_act.rs).

#include "common.cuh"

// Activation codes (encoder.rs `act_code`): 0 GELU (erf), 1 GELU (tanh), 2 ReLU, 3 SiLU.
__device__ __forceinline__ float enc_act(float x, int act) {
    switch (act) {
    case 0: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case 1: return gelu_tanh_value(x);
    case 2: return fmaxf(x, 0.f);
    default: return silu_value(x);
    }
}

// y[r, c] = act(y[r, c] + b[c]) over n = rows · width values; b may be null, act < 0: none.
extern "C" __global__ void enc_bias_act(float* __restrict__ y, const float* __restrict__ b, long n,
                                        int width, int act) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = y[i];
    if (b) v += b[i % width];
    if (act >= 0) v = enc_act(v, act);
    y[i] = v;
}

// g[i] = act(g[i]) · u[i] over n values (a gated MLP without biases).
extern "C" __global__ void enc_gated_act(float* __restrict__ g, const float* __restrict__ u,
                                         long n, int act) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = enc_act(g[i], act) * u[i];
}

// dst[r ld_dst + c] = clamp(src[r ld_src + c], lo, hi) for rows r < rows, columns c < w (a
// product's input into a copy, or its output in place: dst == src).
extern "C" __global__ void enc_clamp(const float* src, int ld_src, float* dst, int ld_dst,
                                     long rows, int w, float lo, float hi) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * w) return;
    long r = i / w;
    int c = (int)(i % w);
    dst[r * ld_dst + c] = fminf(fmaxf(src[r * ld_src + c], lo), hi);
}

// Per-head RMS norm in place: each of the heads heads of hd values of rows [rows] of x (row
// stride ld) becomes v / sqrt(mean(v²) + eps) · w (w [hd]). One warp per (row, head).
extern "C" __global__ void enc_head_rms_norm(float* __restrict__ x, long rows, int ld,
                                             int heads, int hd, const float* __restrict__ w,
                                             float eps) {
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (gw >= rows * heads) return;
    float* v = x + (gw / heads) * ld + (gw % heads) * (long)hd;
    float s = 0.f;
    for (int e = lane; e < hd; e += 32) s += v[e] * v[e];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float inv = 1.f / sqrtf(s / (float)hd + eps);
    for (int e = lane; e < hd; e += 32) v[e] = v[e] * inv * w[e];
}

// Rotary positions of the queries and keys in qkv (row stride ld; n_heads query heads of hd at
// column 0, then kv_heads key heads): row r rotates by row ti[r] of the tables cs / sn
// [*, half], the pairs (2j, 2j + 1) when interleaved, else those of sections blocks rotated
// each alone: angle j = s w + k (w = half / sections) the pair (2 s w + k, 2 s w + k + w) —
// one section: (j, j + half); a head's values past 2 half stay. Rope::apply's arithmetic,
// without contraction into FMAs (the same bits). One thread per (row, query or key head, pair).
extern "C" __global__ void enc_rope(float* __restrict__ qkv, const float* __restrict__ cs,
                                    const float* __restrict__ sn, const int* __restrict__ ti,
                                    long t, int n_heads, int hd, int half, int interleaved,
                                    int ld, int kv_heads, int sections) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long per_row = (long)(n_heads + kv_heads) * half;
    if (i >= t * per_row) return;
    long r = i / per_row;
    int rem = (int)(i % per_row), h = rem / half, j = rem % half;
    // Key head h - n_heads lies at n_heads hd + (h - n_heads) hd = h hd.
    float* head = qkv + r * ld + (long)h * hd;
    long at = (long)ti[r] * half + j;
    float c = cs[at], s = sn[at];
    int w = half / sections;
    int ia = interleaved ? 2 * j : 2 * w * (j / w) + j % w;
    int ib = interleaved ? 2 * j + 1 : ia + w;
    float a = head[ia], b = head[ib];
    head[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    head[ib] = interleaved ? __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c))
                           : __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float enc_block_sum(float v, float* sh) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

// The residual add and LayerNorm, one block per row of width dim: v = x + (y + yb), then
// out = LayerNorm(v) · w + b with mean and (two-pass) variance in f32; with rms an RMSNorm,
// out = v / sqrt(mean(v²) + eps) · w (b unused); w null: no norm, out = v. Post-norm: out is x
// (x becomes the normalized row). Pre-norm: out is another buffer, x keeps v (the residual
// stream) and out gets the next sublayer's normalized input. y null: v = x (a norm alone); yb
// (the product's bias) may be null. Dynamic shared memory: dim floats.
extern "C" __global__ void enc_residual_layer_norm(float* __restrict__ x,
                                                   const float* __restrict__ y,
                                                   const float* __restrict__ yb,
                                                   const float* __restrict__ w,
                                                   const float* __restrict__ b, int dim,
                                                   float eps, float* out, int rms) {
    extern __shared__ float row[];
    __shared__ float sh[32];
    float* xr = x + (long)blockIdx.x * dim;
    float* orow = out + (long)blockIdx.x * dim;
    const float* yr = y ? y + (long)blockIdx.x * dim : nullptr;
    bool keep = out != x && yr;
    float s = 0.f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = xr[c];
        if (yr) v += yb ? yr[c] + yb[c] : yr[c];
        if (keep) xr[c] = v;
        row[c] = v;
        s += v;
    }
    if (!w) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) orow[c] = row[c];
        return;
    }
    float mean = rms ? 0.f : enc_block_sum(s, sh) / (float)dim;
    float q = 0.f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float d = row[c] - mean;
        row[c] = d;
        q += d * d;
    }
    float var = enc_block_sum(q, sh) / (float)dim;
    float inv = 1.f / sqrtf(var + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x)
        orow[c] = rms ? row[c] * inv * w[c] : row[c] * inv * w[c] + b[c];
}

#define ENC_QR 4

// Attention of every sequence with itself. Row r of qkv (row stride ld floats) holds its H
// query heads at column 0, then kvh key heads at d = H·hd, then kvh value heads (query head h
// reads key / value head h / (H / kvh)); sequence s is rows seq[s] .. seq[s + 1]. out is
// [T, d]. Grid: y one per sequence, x enough warps for H heads × ⌈longest / ENC_QR⌉ query
// blocks; warp (h, qb) runs ENC_QR query rows of head h over all of the sequence's keys (with
// window ≥ 0 only those at distance ≤ window from the row) with a running max and sum. Lane l
// holds elements l, l + 32, ... of a head (hd = 32 · ME; one kernel per ME,
// enc_attention_h{32 ME}), or with PARTIAL only those below a head of hd_partial < 32 ME
// values, the elements past it idle (enc_attention_p{32 ME}, the narrowest kernel wider than
// the head: heads of 72 in Qwen 3.5's vision tower, of 8 in the tiny test models).
template <int ME, bool PARTIAL = false>
__device__ __forceinline__ void enc_attention_rows(const float* __restrict__ qkv,
                                                   float* __restrict__ out,
                                                   const int* __restrict__ seq, int H, int kvh,
                                                   int ld, float scale, int window,
                                                   int hd_partial = 0) {
    const int hd = PARTIAL ? hd_partial : 32 * ME;
    int r0 = seq[blockIdx.y];
    int n = seq[blockIdx.y + 1] - r0;
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    int qblocks = (n + ENC_QR - 1) / ENC_QR;
    if (qblocks == 0) return;
    int h = gw / qblocks, qb = gw % qblocks;
    if (h >= H) return;
    int d = H * hd, i0 = qb * ENC_QR;
    bool on[ME];
    #pragma unroll
    for (int e = 0; e < ME; e++) on[e] = !PARTIAL || lane + 32 * e < hd;
    const float* base = qkv + (long)r0 * ld + h * hd + (on[0] ? lane : 0);
    // This head's key and value columns, relative to its query's.
    int kcol = d + (h / (H / kvh)) * hd - h * hd, vcol = kcol + kvh * hd;
    float qv[ENC_QR][ME], acc[ENC_QR][ME], m[ENC_QR], l[ENC_QR];
    #pragma unroll
    for (int r = 0; r < ENC_QR; r++) {
        m[r] = __int_as_float(0xff800000);
        l[r] = 0.f;
        #pragma unroll
        for (int e = 0; e < ME; e++) {
            acc[r][e] = 0.f;
            qv[r][e] = (on[e] && i0 + r < n) ? base[(long)(i0 + r) * ld + 32 * e] : 0.f;
        }
    }
    // Unrolled so that several keys' loads are in flight before the first one's arithmetic
    // (one key at a time waited for each key and value row in turn).
    int j0 = window >= 0 ? max(0, i0 - window) : 0;
    int j1 = window >= 0 ? min(n, i0 + ENC_QR + window) : n;
    #pragma unroll (ME <= 2 ? 4 : 2)
    for (int j = j0; j < j1; j++) {
        float kk[ME], vv[ME];
        const float* kr = base + (long)j * ld + kcol;
        const float* vr = base + (long)j * ld + vcol;
        #pragma unroll
        for (int e = 0; e < ME; e++) {
            kk[e] = on[e] ? kr[32 * e] : 0.f;
            vv[e] = on[e] ? vr[32 * e] : 0.f;
        }
        #pragma unroll
        for (int r = 0; r < ENC_QR; r++) {
            float s = 0.f;
            #pragma unroll
            for (int e = 0; e < ME; e++) s += qv[r][e] * kk[e];
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (window < 0 || abs(i0 + r - j) <= window)
                online_softmax_add<ME, false>(s * scale, vv, m[r], l[r], acc[r]);
        }
    }
    #pragma unroll
    for (int r = 0; r < ENC_QR; r++) {
        if (i0 + r >= n) continue;
        float inv = 1.f / l[r];
        float* o = out + (long)(r0 + i0 + r) * d + h * hd + lane;
        #pragma unroll
        for (int e = 0; e < ME; e++)
            if (on[e]) o[32 * e] = acc[r][e] * inv;
    }
}

#define ENC_ATTENTION(HD, ME)                                                                  \
    extern "C" __global__ void enc_attention_h##HD(const float* __restrict__ qkv,              \
                                                   float* __restrict__ out,                    \
                                                   const int* __restrict__ seq, int H,         \
                                                   int kvh, int ld, float scale, int window) { \
        enc_attention_rows<ME>(qkv, out, seq, H, kvh, ld, scale, window);                      \
    }                                                                                          \
    extern "C" __global__ void enc_attention_p##HD(const float* __restrict__ qkv,              \
                                                   float* __restrict__ out,                    \
                                                   const int* __restrict__ seq, int H,         \
                                                   int kvh, int ld, float scale, int window,   \
                                                   int hd) {                                   \
        enc_attention_rows<ME, true>(qkv, out, seq, H, kvh, ld, scale, window, hd);            \
    }
ENC_ATTENTION(32, 1)
ENC_ATTENTION(64, 2)
ENC_ATTENTION(96, 3)
ENC_ATTENTION(128, 4)
ENC_ATTENTION(256, 8)
