// Fused causal attention over a KV cache (GQA, sliding window, soft-cap), flash-style: scores
// never reach memory; each warp keeps a running max, sum and output for QR query rows of one
// head and streams that head's keys and values once. f32 arithmetic; the cache holds f32, f16
// or bf16 values (the E template argument, common.cuh: one kernel per type, the type's suffix
// in its name).
//
// q [t, H*hd], k/v [pos0+t, KVH*hd], out [t, H*hd]; hd a multiple of 32, at most 256.
// Lane l holds elements l, l+32, ... of each row (coalesced loads).

#include "split_softmax.cuh"

#define QR 4

template <typename E>
__device__ __forceinline__ void attention_rows(const float* __restrict__ q,
                                               const typename E::T* __restrict__ k,
                                               const typename E::T* __restrict__ v,
                                               float* __restrict__ out, int t, int pos0, int H,
                                               int KVH, int hd, float scale, int window,
                                               float softcap) {
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    int qblocks = (t + QR - 1) / QR;
    int h = gw / qblocks, qb = gw % qblocks;
    if (h >= H) return;
    int kvh = h / (H / KVH);
    int per = hd >> 5;
    int i0 = qb * QR;
    int q_row = H * hd, kv_row = KVH * hd;

    float qv[QR][MAXE], acc[QR][MAXE], m[QR], l[QR];
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        m[r] = __int_as_float(0xff800000);
        l[r] = 0.f;
        #pragma unroll
        for (int e = 0; e < MAXE; e++) {
            acc[r][e] = 0.f;
            qv[r][e] = (e < per && i0 + r < t) ? q[(long)(i0 + r) * q_row + h * hd + lane + 32 * e] : 0.f;
        }
    }
    int last_row = min(t, i0 + QR) - 1;
    int last = pos0 + last_row;
    int first = window > 0 ? max(0, pos0 + i0 - window + 1) : 0;
    for (int j = first; j <= last; j++) {
        float kk[MAXE], vv[MAXE];
        long at = (long)j * kv_row + kvh * hd + lane;
        #pragma unroll
        for (int e = 0; e < MAXE; e++) {
            kk[e] = e < per ? E::ld(k, at + 32 * e) : 0.f;
            vv[e] = e < per ? E::ld(v, at + 32 * e) : 0.f;
        }
        #pragma unroll
        for (int r = 0; r < QR; r++) {
            float s = 0.f;
            #pragma unroll
            for (int e = 0; e < MAXE; e++) s += qv[r][e] * kk[e];
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            int pos = pos0 + i0 + r;
            bool visible = (i0 + r < t) && j <= pos && (window <= 0 || pos - j < window);
            if (!visible) continue;
            s *= scale;
            if (softcap > 0.f) s = softcap * tanhf(s / softcap);
            online_softmax_add<MAXE, true>(s, vv, m[r], l[r], acc[r]);
        }
    }
    #pragma unroll
    for (int r = 0; r < QR; r++) {
        if (i0 + r >= t) continue;
        float inv = 1.f / l[r];
        #pragma unroll
        for (int e = 0; e < MAXE; e++)
            if (e < per) out[(long)(i0 + r) * q_row + h * hd + lane + 32 * e] = acc[r][e] * inv;
    }
}

#define ATTENTION_KERNEL(E, SUFFIX)                                                            \
    extern "C" __global__ void attention_f32##SUFFIX(                                          \
        const float* __restrict__ q, const E::T* __restrict__ k, const E::T* __restrict__ v,   \
        float* __restrict__ out, int t, int pos0, int H, int KVH, int hd, float scale,         \
        int window, float softcap) {                                                           \
        attention_rows<E>(q, k, v, out, t, pos0, H, KVH, hd, scale, window, softcap);          \
    }
KV_TYPES(ATTENTION_KERNEL)

// Decode attention split over the keys (flash-decoding), for query rows that each see a long
// cache, of one sequence or of many (batched decode): warp (row r, head h, split s) runs the
// online softmax over slice s of the S slices of the keys row r sees and writes its
// unnormalized output, running max and sum to part[((r * H + h) * S + s) * (hd + 2)] (output,
// then m, then l); attention_combine_f32 merges the S partials of each (row, head). q as
// attention_f32's; row r's keys and values are the cache of its sequence (row 0 of the keys at
// kv[2 rseq[r]], of the values at kv[2 rseq[r] + 1], [*, KVH * hd] each) and its position is
// rpos[r], all read on the device, so a captured decode step stays valid as it advances; the
// slices are S equal parts of however many keys the row sees. ME: values per lane
// (hd ≤ 32 ME); KC: keys per step (softmax_keys).
template <int ME, int KC, typename E>
__device__ __forceinline__ void attention_split(const float* __restrict__ q,
                                                const unsigned long long* __restrict__ kv,
                                                const int* __restrict__ rseq,
                                                float* __restrict__ part, int t,
                                                const int* __restrict__ rpos, int H, int KVH,
                                                int hd, float scale, int window, float softcap,
                                                int S) {
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (gw >= (long)t * H * S) return;
    int s = (int)(gw % S);
    int h = (int)((gw / S) % H);
    int r = (int)(gw / ((long)S * H));
    int kvh = h / (H / KVH);
    int per = hd >> 5;
    int q_row = H * hd, kv_row = KVH * hd;
    int pos = rpos[r];
    int first = window > 0 ? max(0, pos - window + 1) : 0;
    int j0, j1;
    slice_keys(first, pos - first + 1, s, S, j0, j1);
    float qv[ME], acc[ME];
    #pragma unroll
    for (int e = 0; e < ME; e++) {
        acc[e] = 0.f;
        qv[e] = e < per ? q[(long)r * q_row + h * hd + lane + 32 * e] : 0.f;
    }
    float m = __int_as_float(0xff800000), l = 0.f;
    const typename E::T* k = (const typename E::T*)kv[2 * rseq[r]];
    const typename E::T* v = (const typename E::T*)kv[2 * rseq[r] + 1];
    softmax_keys<ME, KC, E>(k, v, kv_row, kvh, hd, j0, j1, qv, scale, softcap, m, l, acc);
    store_partial<ME>(part, gw, hd, acc, m, l);
}

#define ATTENTION_SPLIT_KERNEL(NAME, ME, KC, E)                                                \
    extern "C" __global__ void NAME(                                                          \
        const float* __restrict__ q, const unsigned long long* __restrict__ kv,               \
        const int* __restrict__ rseq, float* __restrict__ part, int t,                        \
        const int* __restrict__ rpos, int H, int KVH, int hd, float scale, int window,        \
        float softcap, int S) {                                                               \
        PDL_ENTER();                                                                          \
        attention_split<ME, KC, E>(q, kv, rseq, part, t, rpos, H, KVH, hd, scale, window,     \
                                softcap, S);                                                  \
    }
// Per cache type: any head size up to 256; and heads up to 128 (a quarter of the registers per
// key, so twice the keys per step: half the dependent rounds).
#define ATTENTION_SPLIT_KERNELS(E, SUFFIX)                                                     \
    ATTENTION_SPLIT_KERNEL(attention_split_f32##SUFFIX, MAXE, KCH, E)                          \
    ATTENTION_SPLIT_KERNEL(attention_split_f32_h128##SUFFIX, 4, 2 * KCH, E)
KV_TYPES(ATTENTION_SPLIT_KERNELS)

// Query heads per KV head the grouped split attention takes at most.
#define MAXG 8

// n ≤ 4 consecutive cached values from element i (a multiple of n) into x (zeros past n, and
// all zeros unless `in`): one 16- or 8-byte load for the value types when n = 4.
template <typename E>
__device__ __forceinline__ void kv_ld_run(const typename E::T* __restrict__ p, long i, int n,
                                          bool in, float (&x)[4]) {
    if constexpr (E::CODE == KvF32::CODE) {
        if (in && n == 4) {
            float4 f = *(const float4*)(p + i);
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
            return;
        }
    } else if constexpr (E::CODE == KvF16::CODE || E::CODE == KvBf16::CODE) {
        if (in && n == 4) {
            uint2 u = *(const uint2*)(p + i);
            x[0] = E::bits((u16)u.x), x[1] = E::bits((u16)(u.x >> 16));
            x[2] = E::bits((u16)u.y), x[3] = E::bits((u16)(u.y >> 16));
            return;
        }
    }
    #pragma unroll
    for (int e = 0; e < 4; e++) x[e] = in && e < n ? E::ld(p, i + e) : 0.f;
}

// attention_split_f32 with the query heads of a KV group together (GQA; heads of up to 128,
// G = H / KVH from 2 to MAXG): warp (row r, KV head kvh, slice s) reads each key and value of
// its slice once for the G heads' online softmaxes (the per-head kernel read them G times,
// bound by L2 bandwidth on long caches), and writes head kvh·G + g's partial where
// attention_split_f32 writes it, so the same merges follow. Lane l holds the per = hd / 32
// consecutive elements per·l .. per·l + per − 1 of a head (vector loads of the value types).
// The same slices; the sums run in another order than the per-head kernel's.
template <int KC, typename E>
__device__ __forceinline__ void attention_split_gqa(const float* __restrict__ q,
                                                    const unsigned long long* __restrict__ kv,
                                                    const int* __restrict__ rseq,
                                                    float* __restrict__ part, int t,
                                                    const int* __restrict__ rpos, int H,
                                                    int KVH, int hd, float scale, int window,
                                                    float softcap, int S) {
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (gw >= (long)t * KVH * S) return;
    int s = (int)(gw % S);
    int kvh = (int)((gw / S) % KVH);
    int r = (int)(gw / ((long)S * KVH));
    int G = H / KVH, per = hd >> 5;
    int q_row = H * hd, kv_row = KVH * hd;
    int pos = rpos[r];
    int first = window > 0 ? max(0, pos - window + 1) : 0;
    int j0, j1;
    slice_keys(first, pos - first + 1, s, S, j0, j1);
    float qv[MAXG][4], acc[MAXG][4], m[MAXG], l[MAXG];
    #pragma unroll
    for (int g = 0; g < MAXG; g++) {
        m[g] = __int_as_float(0xff800000);
        l[g] = 0.f;
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            acc[g][e] = 0.f;
            qv[g][e] = g < G && e < per
                           ? q[(long)r * q_row + (kvh * G + g) * hd + per * lane + e]
                           : 0.f;
        }
    }
    const typename E::T* k = (const typename E::T*)kv[2 * rseq[r]];
    const typename E::T* v = (const typename E::T*)kv[2 * rseq[r] + 1];
    long base = (long)kvh * hd + per * lane;
    for (int j = j0; j < j1; j += KC) {
        float kk[KC][4], vv[KC][4];
        #pragma unroll
        for (int c = 0; c < KC; c++) {
            bool in = j + c < j1;
            long at = (long)(j + c) * kv_row + base;
            kv_ld_run<E>(k, at, per, in, kk[c]);
            kv_ld_run<E>(v, at, per, in, vv[c]);
        }
        #pragma unroll
        for (int g = 0; g < MAXG; g++) {
            if (g >= G) break;
            float sc[KC];
            #pragma unroll
            for (int c = 0; c < KC; c++) {
                float d = 0.f;
                #pragma unroll
                for (int e = 0; e < 4; e++) d += qv[g][e] * kk[c][e];
                sc[c] = d;
            }
            softmax_step<4, KC>(sc, vv, j, j1, scale, softcap, m[g], l[g], acc[g]);
        }
    }
    #pragma unroll
    for (int g = 0; g < MAXG; g++) {
        if (g >= G) break;
        float* o = part + ((long)(r * H + kvh * G + g) * S + s) * (hd + 2);
        #pragma unroll
        for (int e = 0; e < 4; e++)
            if (e < per) o[per * lane + e] = acc[g][e];
        if (lane == 0) {
            o[hd] = m[g];
            o[hd + 1] = l[g];
        }
    }
}

#define ATTENTION_SPLIT_GQA_KERNEL(E, SUFFIX)                                                  \
    extern "C" __global__ void attention_split_gqa##SUFFIX(                                   \
        const float* __restrict__ q, const unsigned long long* __restrict__ kv,               \
        const int* __restrict__ rseq, float* __restrict__ part, int t,                        \
        const int* __restrict__ rpos, int H, int KVH, int hd, float scale, int window,        \
        float softcap, int S) {                                                               \
        PDL_ENTER();                                                                          \
        attention_split_gqa<KCH, E>(q, kv, rseq, part, t, rpos, H, KVH, hd, scale, window,    \
                                    softcap, S);                                              \
    }
KV_TYPES(ATTENTION_SPLIT_GQA_KERNEL)

// Merges the S partials of attention_split_f32 per (row, head) into out [t, H*hd]: one warp
// each. vrot: the chunk the cached values were rotated in (warp_hadamard; 0 for none), undone
// here on each head's output.
extern "C" __global__ void attention_combine_f32(const float* __restrict__ part,
                                                 float* __restrict__ out, int t, int H, int hd,
                                                 int S, int vrot) {
    PDL_ENTER();
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (gw >= (long)t * H) return;
    float v[MAXE];
    combine_head(part, gw, hd, S, v);
    warp_hadamard(v, hd >> 5, vrot);
    #pragma unroll
    for (int e = 0; e < MAXE; e++)
        if (e < (hd >> 5)) out[gw * hd + lane + 32 * e] = v[e];
}

// Undoes the values' rotation (warp_hadamard in chunks of n) on `heads` heads of hd values
// at x, in place: the output of a prompt's attention over a rotated cache. One warp per head.
extern "C" __global__ void rotate_heads_f32(float* __restrict__ x, long heads, int hd, int n) {
    PDL_ENTER();
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31, per = hd >> 5;
    if (gw >= heads) return;
    float v[8];
    #pragma unroll
    for (int e = 0; e < 8; e++) v[e] = e < per ? x[gw * hd + lane + 32 * e] : 0.f;
    warp_hadamard(v, per, n);
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) x[gw * hd + lane + 32 * e] = v[e];
}

// attention_combine_f32 and the int8 quantization of its output for the next GEMV
// (quant_act_i8, gnb as there) in one kernel. A block covers L = max(B, hd) consecutive values of
// out [t, H*hd] (B and hd powers of two, H*hd a multiple of L) with L / hd warps: each merges
// one head exactly as attention_combine_f32 does (so out is bit-identical to it) into out and
// shared memory, then the block's warps quantize its L / B blocks of B (32 or 256) into q / dq /
// qs (quant_act_i8's layout).
extern "C" __global__ void attention_combine_q8(const float* __restrict__ part,
                                                float* __restrict__ out, i8* __restrict__ q,
                                                float* __restrict__ dq, int* __restrict__ qs,
                                                int t, int H, int hd, int S, int B, int vrot,
                                                int gnb) {
    PDL_ENTER();
    __shared__ float vals[32 * MAXE];
    int warp = threadIdx.x >> 5, L = max(B, hd);
    long gw = (long)blockIdx.x * (L / hd) + warp;
    merge_head(part, gw, hd, S, vrot, out + gw * hd, vals + warp * hd);
    __syncthreads();
    quant_span(vals, L, B, q, dq, qs, gnb);
}
