// The pieces of the split (flash-decoding) attention shared by the split kernel and the fused
// decode attention: the online softmax of one warp over a run of keys, its partial, the slices,
// and the merge of one head's partials.
#ifndef OXINFER_SPLIT_SOFTMAX_CUH
#define OXINFER_SPLIT_SOFTMAX_CUH

#include "common.cuh"

// Values per lane of the widest head (hd ≤ 256).
#ifndef MAXE
#define MAXE 8
#endif
// Keys per step of the split decode attention (twice as many for heads up to 128).
#define KCH 4

// warp_sum_keys's layout of KC keys (a power of two up to 32) over the warp: key bit b,
// counted from the top, sits in lane bit 4 - b. The lane holding key c's sum (lanes differing
// in the low 5 - log2 KC bits hold the same key):
template <int KC>
__device__ __forceinline__ int lane_of_key(int c) {
    int lane = 0;
    #pragma unroll
    for (int half = KC / 2, o = 16; half >= 1; half >>= 1, o >>= 1)
        if (c & half) lane |= o;
    return lane;
}

// ... and the key whose sum a lane holds.
template <int KC>
__device__ __forceinline__ int key_of_lane(int lane) {
    int key = 0;
    #pragma unroll
    for (int half = KC / 2, o = 16; half >= 1; half >>= 1, o >>= 1)
        if (lane & o) key |= half;
    return key;
}

// The KC lane-partial scores sc summed across the warp with KC - 1 + 5 - log2 KC shuffles
// instead of 5 KC: at each of the first log2 KC levels (partners 16, 8, ... lanes apart) a lane
// keeps half of its keys and trades the other half with its partner; the levels left sum the
// one key each lane then holds (key_of_lane). Every sum adds the same pairs in the same order
// as a shuffle reduction per key, so the results are its bits. Returns the lane's key's sum.
template <int KC>
__device__ __forceinline__ float warp_sum_keys(float (&sc)[KC]) {
    int lane = threadIdx.x & 31;
    int o = 16;
    #pragma unroll
    for (int n = KC; n > 1; n >>= 1, o >>= 1) {
        bool up = lane & o;
        #pragma unroll
        for (int c = 0; c < n / 2; c++) {
            float keep = up ? sc[c + n / 2] : sc[c];
            float send = up ? sc[c] : sc[c + n / 2];
            sc[c] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float x = sc[0];
    #pragma unroll
    for (; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// One step of the online softmax over keys j .. j + KC - 1 (those from j1 on masked out): the
// lanes' partial scores sc summed across the warp (warp_sum_keys); each lane scales (and
// soft-caps) and masks the one key's score it holds and takes its exponential; the keys'
// maximum and probabilities are exchanged by shuffles, and the running max m, sum l and output
// acc (lane's values) take the keys' values vv in key order. The same arithmetic as reducing
// and exponentiating every score on every lane (which took 5 KC shuffles and KC exponentials a
// step), so the same bits: the maximum of non-NaN values does not depend on the order.
template <int ME, int KC>
__device__ __forceinline__ void softmax_step(float (&sc)[KC], const float (&vv)[KC][ME], int j,
                                             int j1, float scale, float softcap, float& m,
                                             float& l, float (&acc)[ME]) {
    float s = warp_sum_keys<KC>(sc);
    int key = key_of_lane<KC>(threadIdx.x & 31);
    s *= scale;
    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
    if (j + key >= j1) s = __int_as_float(0xff800000);
    float mx = s;
    #pragma unroll
    for (int half = KC / 2, o = 16; half >= 1; half >>= 1, o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float mn = fmaxf(m, mx);
    float corr = __expf(m - mn);
    float p = __expf(s - mn);
    l *= corr;
    #pragma unroll
    for (int e = 0; e < ME; e++) acc[e] *= corr;
    #pragma unroll
    for (int c = 0; c < KC; c++) {
        float pc = __shfl_sync(0xffffffffu, p, lane_of_key<KC>(c));
        l += pc;
        #pragma unroll
        for (int e = 0; e < ME; e++) acc[e] += pc * vv[c][e];
    }
    m = mn;
}

// The block's warps quantize the L / B int8 blocks of B (32 or 256) that vals (shared, the
// block's L values) holds for span blockIdx.x of the output into q / dq / qs
// (warp_quant_block: quant_act_i8's layout, gnb as there).
__device__ __forceinline__ void quant_span(const float* vals, int L, int B, i8* __restrict__ q,
                                           float* __restrict__ dq, int* __restrict__ qs,
                                           int gnb) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int pb = B >> 5;
    for (int b = warp; b < L / B; b += nw) {
        float x[8];
        #pragma unroll
        for (int e = 0; e < 8; e++) x[e] = e < pb ? vals[b * B + lane + 32 * e] : 0.f;
        long blk = (long)blockIdx.x * (L / B) + b;
        warp_quant_block(x, B, q + blk * B, dq + blk, qs + blk * pb, gnb, blk);
    }
}

// The online softmax of one warp's query (lane's values qv[e], e < hd / 32) over keys
// j0 .. j1 - 1 of one KV head (row j of k / v at j · kv_row + kvh · hd), KC keys per step with
// their key and value rows loaded together before any arithmetic (one key per step made a chain
// of dependent loads: ~1 µs per key, 19 µs per 32-key slice): running max m, sum l, output acc.
// Key jnew (if in range) is read instead from knew / vnew (one head, its values at 0 .. hd - 1
// in the cache's element type): the fused decode attention's new row, not yet in the cache.
template <int ME, int KC, typename E>
__device__ __forceinline__ void softmax_keys(const typename E::T* __restrict__ k,
                                             const typename E::T* __restrict__ v, int kv_row, int kvh,
                                             int hd, int j0, int j1, const float (&qv)[ME],
                                             float scale, float softcap, float& m, float& l,
                                             float (&acc)[ME],
                                             const typename E::T* knew = nullptr,
                                             const typename E::T* vnew = nullptr, int jnew = -1) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    for (int j = j0; j < j1; j += KC) {
        float kk[KC][ME], vv[KC][ME];
        #pragma unroll
        for (int c = 0; c < KC; c++) {
            bool in = j + c < j1, fresh = j + c == jnew;
            const typename E::T* kp = fresh ? knew : k;
            const typename E::T* vp = fresh ? vnew : v;
            long at = fresh ? lane : (long)(j + c) * kv_row + kvh * hd + lane;
            #pragma unroll
            for (int e = 0; e < ME; e++) {
                kk[c][e] = in && e < per ? E::ld(kp, at + 32 * e) : 0.f;
                vv[c][e] = in && e < per ? E::ld(vp, at + 32 * e) : 0.f;
            }
        }
        float sc[KC];
        #pragma unroll
        for (int c = 0; c < KC; c++) {
            float d = 0.f;
            #pragma unroll
            for (int e = 0; e < ME; e++) d += e < per ? qv[e] * kk[c][e] : 0.f;
            sc[c] = d;
        }
        softmax_step<ME, KC>(sc, vv, j, j1, scale, softcap, m, l, acc);
    }
}

// One warp's partial (unnormalized output, running max, sum) at part + gw · (hd + 2).
template <int ME>
__device__ __forceinline__ void store_partial(float* __restrict__ part, long gw, int hd,
                                              const float (&acc)[ME], float m, float l) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    float* o = part + gw * (hd + 2);
    #pragma unroll
    for (int e = 0; e < ME; e++)
        if (e < per) o[lane + 32 * e] = acc[e];
    if (lane == 0) {
        o[hd] = m;
        o[hd + 1] = l;
    }
}

// The first key of slice s of S equal slices of the n keys from `first` on, and its end.
__device__ __forceinline__ void slice_keys(int first, int n, int s, int S, int& j0, int& j1) {
    int chunk = (n + S - 1) / S;
    j0 = first + s * chunk;
    j1 = min(first + n, j0 + chunk);
}

// The merge of (row, head) gw's S partials of attention_split into v (lane's values
// lane + 32 e, e < hd / 32): the running maxima rescaled to the largest, weighted sums over the
// slices in order.
__device__ __forceinline__ void combine_head(const float* __restrict__ part, long gw, int hd,
                                             int S, float (&v)[MAXE]) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    const float* p = part + gw * S * (hd + 2);
    float mx = __int_as_float(0xff800000);
    for (int s = 0; s < S; s++)
        if (p[s * (hd + 2) + hd + 1] > 0.f) mx = fmaxf(mx, p[s * (hd + 2) + hd]);
    float sum = 0.f, acc[MAXE];
    #pragma unroll
    for (int e = 0; e < MAXE; e++) acc[e] = 0.f;
    for (int s = 0; s < S; s++) {
        const float* ps = p + s * (hd + 2);
        float l = ps[hd + 1];
        if (!(l > 0.f)) continue;
        float c = __expf(ps[hd] - mx);
        sum += l * c;
        #pragma unroll
        for (int e = 0; e < MAXE; e++)
            if (e < per) acc[e] += ps[lane + 32 * e] * c;
    }
    float inv = 1.f / sum;
    #pragma unroll
    for (int e = 0; e < MAXE; e++) v[e] = acc[e] * inv;
}

// Merges head gw's S partials (combine_head), undoes the values' rotation in chunks of vrot
// (warp_hadamard; 0 for none), and stores the head's hd values at out and at vals (shared, for
// the block's quantization): one warp.
__device__ __forceinline__ void merge_head(const float* __restrict__ part, long gw, int hd,
                                           int S, int vrot, float* __restrict__ out,
                                           float* vals) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    float v[MAXE];
    combine_head(part, gw, hd, S, v);
    warp_hadamard(v, per, vrot);
    #pragma unroll
    for (int e = 0; e < MAXE; e++) {
        if (e < per) {
            out[lane + 32 * e] = v[e];
            vals[lane + 32 * e] = v[e];
        }
    }
}

#endif  // OXINFER_SPLIT_SOFTMAX_CUH
