// One head of new queries, keys or values after its projection (shared by the decoder stack's
// qkv_post and the fused decode attention).
#ifndef OXINFER_HEAD_POST_CUH
#define OXINFER_HEAD_POST_CUH

#include "common.cuh"

// RoPE pairs (j, j + half) of a head whose pairs each lie in one lane (element j = lane + 32 e
// pairs with e + D, D = half / 32), rotated in registers with the lane's table entries c[e],
// s[e] (pair lane + 32 e): the arithmetic of the shared-memory exchange below, without it.
template <int D>
__device__ __forceinline__ void rope_lane_pairs(float (&v)[8], const float (&c)[4],
                                                const float (&s)[4]) {
    #pragma unroll
    for (int e = 0; e < D; e++) {
        float a = v[e], b = v[e + D];
        v[e] = a * c[e] - b * s[e];
        v[e + D] = a * s[e] + b * c[e];
    }
}

// rope_lane_pairs when the layout allows it (not interleaved, half 32, 64 or 128); false (and
// nothing done) otherwise.
__device__ __forceinline__ bool rope_in_lane(float (&v)[8], const float (&c)[4],
                                             const float (&s)[4], int half, int interleaved) {
    if (interleaved) return false;
    switch (half) {
        case 32: rope_lane_pairs<1>(v, c, s); return true;
        case 64: rope_lane_pairs<2>(v, c, s); return true;
        case 128: rope_lane_pairs<4>(v, c, s); return true;
        default: return false;
    }
}

// One head of new queries, keys or values after its projection (the warp's lane holds
// elements lane + 32 e, e < hd / 32, hd ≤ 256): the bias (when given), the RMSNorm over the
// head with `gain` (when given; sum of squares in f64 like the CPU), then, when `rotate`, RoPE
// with the row's tables c / s [half] (pairs (2j, 2j + 1) when `interleaved`, else (j, j + half);
// elements from 2·half on unrotated), the result into v. `sh` is the warp's own 256 floats of
// shared memory for the rotation's exchange between lanes.
//
// What head_post reads besides the head itself, loaded ahead (HeadPre::load: nothing in it is
// written by the pass's kernels, so a kernel may load it before waiting for the previous one):
// the lane's gains (element lane + 32 e) and RoPE table entries (pair lane + 32 i, i < 4:
// half ≤ 128).
struct HeadPre {
    float g[8], c[4], s[4];
    __device__ __forceinline__ void load(const float* __restrict__ gain,
                                         const float* __restrict__ cs,
                                         const float* __restrict__ sn, int half, int hd,
                                         bool rotate) {
        int lane = threadIdx.x & 31, per = hd >> 5;
        #pragma unroll
        for (int e = 0; e < 8; e++) g[e] = gain && e < per ? gain[lane + 32 * e] : 0.f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int j = lane + 32 * i;
            c[i] = rotate && j < half ? cs[j] : 0.f;
            s[i] = rotate && j < half ? sn[j] : 0.f;
        }
    }
};

// head_post with its gains and table entries already in `pre` (gain: whether to normalize).
// The same arithmetic as head_post, written out twice on purpose: head_post built on HeadPre
// (or on one template over both ways of reading) costs qkv_post 4–14 bytes of spills against
// none (ptxas 12.9, sm_90, session 22), and qkv_post has no earlier point to load them at.
__device__ __forceinline__ void head_post_pre(const float* __restrict__ src,
                                              const float* __restrict__ bias, bool gain,
                                              const HeadPre& pre, int half, int interleaved,
                                              bool rotate, int hd, float eps, float* sh,
                                              float (&v)[8]) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    double ss = 0.0;
    #pragma unroll
    for (int e = 0; e < 8; e++) {
        v[e] = 0.f;
        if (e < per) {
            v[e] = src[lane + 32 * e];
            if (bias) v[e] += bias[lane + 32 * e];
            ss += (double)v[e] * (double)v[e];
        }
    }
    if (gain) {
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float inv = (float)(1.0 / sqrt(ss / (double)hd + (double)eps));
        #pragma unroll
        for (int e = 0; e < 8; e++)
            if (e < per) v[e] = v[e] * inv * pre.g[e];
    }
    if (!rotate || rope_in_lane(v, pre.c, pre.s, half, interleaved)) return;
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) sh[lane + 32 * e] = v[e];
    __syncwarp();
    // Each pair is read and written by one lane only.
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int j = lane + 32 * i;
        if (j < half) {
            int ia = interleaved ? 2 * j : j, ib = interleaved ? 2 * j + 1 : j + half;
            float a = sh[ia], b = sh[ib];
            sh[ia] = a * pre.c[i] - b * pre.s[i];
            sh[ib] = a * pre.s[i] + b * pre.c[i];
        }
    }
    __syncwarp();
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) v[e] = sh[lane + 32 * e];
    __syncwarp();
}

__device__ __forceinline__ void head_post(const float* __restrict__ src,
                                          const float* __restrict__ bias,
                                          const float* __restrict__ gain,
                                          const float* __restrict__ c,
                                          const float* __restrict__ s, int half, int interleaved,
                                          bool rotate, int hd, float eps, float* sh,
                                          float (&v)[8]) {
    int lane = threadIdx.x & 31, per = hd >> 5;
    double ss = 0.0;
    #pragma unroll
    for (int e = 0; e < 8; e++) {
        v[e] = 0.f;
        if (e < per) {
            v[e] = src[lane + 32 * e];
            if (bias) v[e] += bias[lane + 32 * e];
            ss += (double)v[e] * (double)v[e];
        }
    }
    if (gain) {
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float inv = (float)(1.0 / sqrt(ss / (double)hd + (double)eps));
        #pragma unroll
        for (int e = 0; e < 8; e++)
            if (e < per) v[e] = v[e] * inv * gain[lane + 32 * e];
    }
    if (!rotate) return;
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) sh[lane + 32 * e] = v[e];
    __syncwarp();
    // Each pair is read and written by one lane only.
    for (int j = lane; j < half; j += 32) {
        int ia = interleaved ? 2 * j : j, ib = interleaved ? 2 * j + 1 : j + half;
        float a = sh[ia], b = sh[ib];
        sh[ia] = a * c[j] - b * s[j];
        sh[ib] = a * s[j] + b * c[j];
    }
    __syncwarp();
    #pragma unroll
    for (int e = 0; e < 8; e++)
        if (e < per) v[e] = sh[lane + 32 * e];
    __syncwarp();
}

#endif  // OXINFER_HEAD_POST_CUH
