// Fused causal attention over a KV cache (GQA, sliding window, soft-cap), flash-style: scores
// never reach memory; each warp keeps a running max, sum and output for QR query rows of one
// head and streams that head's keys and values once. f32 throughout.
//
// q [t, H*hd], k/v [pos0+t, KVH*hd], out [t, H*hd]; hd a multiple of 32, at most 256.
// Lane l holds elements l, l+32, ... of each row (coalesced loads).

#define QR 4
#define MAXE 8

extern "C" __global__ void attention_f32(const float* __restrict__ q, const float* __restrict__ k,
                                         const float* __restrict__ v, float* __restrict__ out,
                                         int t, int pos0, int H, int KVH, int hd, float scale,
                                         int window, float softcap) {
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
        const float* kr = k + (long)j * kv_row + kvh * hd + lane;
        const float* vr = v + (long)j * kv_row + kvh * hd + lane;
        #pragma unroll
        for (int e = 0; e < MAXE; e++) {
            kk[e] = e < per ? kr[32 * e] : 0.f;
            vv[e] = e < per ? vr[32 * e] : 0.f;
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
            float mn = fmaxf(m[r], s);
            float corr = __expf(m[r] - mn);
            float p = __expf(s - mn);
            l[r] = l[r] * corr + p;
            #pragma unroll
            for (int e = 0; e < MAXE; e++) acc[r][e] = acc[r][e] * corr + p * vv[e];
            m[r] = mn;
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
