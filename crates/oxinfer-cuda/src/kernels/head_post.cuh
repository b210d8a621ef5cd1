// One head of new queries, keys or values after its projection (shared by the decoder stack's
// qkv_post and the fused decode attention).
#ifndef OXINFER_HEAD_POST_CUH
#define OXINFER_HEAD_POST_CUH

#include "common.cuh"

// One head of new queries, keys or values after its projection (the warp's lane holds
// elements lane + 32 e, e < hd / 32, hd ≤ 256): the bias (when given), the RMSNorm over the
// head with `gain` (when given; sum of squares in f64 like the CPU), then, when `rotate`, RoPE
// with the row's tables c / s [half] (pairs (2j, 2j + 1) when `interleaved`, else (j, j + half);
// elements from 2·half on unrotated), the result into v. `sh` is the warp's own 256 floats of
// shared memory for the rotation's exchange between lanes.
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
