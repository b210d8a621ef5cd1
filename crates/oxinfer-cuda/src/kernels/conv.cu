// Convolution as an implicit GEMM, with a GroupNorm / LayerNorm (+ SiLU) applied to its input
// on the way into shared memory (oxinfer::nn::conv is the CPU reference).
//
// x: channels-last input [h * wd, cin] f32. w: f32 weights [n_out][K], K = k * k * cin in
// (ky, kx, c) order. y: [oh * ow, n_out] f32. Padding k / 2 zeros on every side, applied AFTER
// the normalization: a padded tap is 0, not norm(0). stats: (mean, rstd) pairs, one per group
// (mode 1: channel c is in group c / cpg) or one per input pixel (mode 2); mode 0: no norm.

// Sum of a double over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the total. `sh` holds 32 doubles; safe to call repeatedly.
__device__ __forceinline__ double conv_block_sum(double v, double* sh) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double t = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

// GroupNorm statistics: one block per group over its hw * cpg values, two passes (mean, then
// the biased variance around it) with f64 sums, so a large mean against a small spread loses
// nothing. stats[2g] = mean, stats[2g + 1] = 1 / sqrt(var + eps), as the CPU computes them.
extern "C" __global__ void conv_stats_group(const float* __restrict__ x, float* __restrict__ stats,
                                            int hw, int cin, int cpg, float eps) {
    __shared__ double sh[32];
    const int g = blockIdx.x;
    const int n = hw * cpg;
    const float* base = x + (long)g * cpg;
    double s = 0.0;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        int p = e / cpg, c = e - p * cpg;
        s += (double)base[(long)p * cin + c];
    }
    const double mean = conv_block_sum(s, sh) / (double)n;
    double q = 0.0;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        int p = e / cpg, c = e - p * cpg;
        double d = (double)base[(long)p * cin + c] - mean;
        q += d * d;
    }
    const double var = conv_block_sum(q, sh) / (double)n;
    if (threadIdx.x == 0) {
        stats[2 * g] = (float)mean;
        stats[2 * g + 1] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

// LayerNorm statistics: one warp per pixel over its cin channels, two passes in f64.
extern "C" __global__ void conv_stats_layer(const float* __restrict__ x, float* __restrict__ stats,
                                            int hw, int cin, float eps) {
    const int p = (int)(((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (p >= hw) return;  // the whole warp leaves together
    const float* r = x + (long)p * cin;
    double s = 0.0;
    for (int c = lane; c < cin; c += 32) s += (double)r[c];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const double mean = s / (double)cin;
    double q = 0.0;
    for (int c = lane; c < cin; c += 32) {
        double d = (double)r[c] - mean;
        q += d * d;
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) {
        stats[2 * p] = (float)mean;
        stats[2 * p + 1] = (float)(1.0 / sqrt(q / (double)cin + (double)eps));
    }
}

// Implicit GEMM tile: CBM output pixels x CBN output channels per block of 256 threads, CBK
// columns of K per step; each thread accumulates a 4 x 4 micro-tile in registers (f32 FMA).
// Shared tiles are k-major ([CBK][CBM], rows padded to CLD floats, 16-byte aligned for the
// float4 reads) and double-buffered: the next step's values are loaded from global memory into
// registers while the current step multiplies.
#define CBM 64
#define CBN 64
#define CBK 16
#define CLD (CBM + 4)

extern "C" __global__ void __launch_bounds__(256) conv_igemm_f32(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
    const float* __restrict__ stats, const float* __restrict__ gamma,
    const float* __restrict__ beta, int h, int wd, int cin, int k, int stride, int oh, int ow,
    int n_out, int mode, int cpg, int silu) {
    __shared__ __align__(16) float as[2][CBK][CLD];
    __shared__ __align__(16) float bs[2][CBK][CLD];
    const int tid = threadIdx.x;
    const int P = oh * ow, K = k * k * cin, pad = k / 2;
    const int m0 = blockIdx.x * CBM, n0 = blockIdx.y * CBN;

    // Loading: this thread fetches column lk (of the CBK-wide step) of tile rows lr + 16 i.
    const int lk = tid & 15, lr = tid >> 4;
    int py[4], px[4];  // input coordinates of tap (0, 0) of each loaded output pixel
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int p = m0 + lr + 16 * i;
        if (p < P) {
            int oy = p / ow, ox = p - (p / ow) * ow;
            py[i] = oy * stride - pad;
            px[i] = ox * stride - pad;
        } else {
            py[i] = -(1 << 29);  // never inside the image: loads as 0
            px[i] = 0;
        }
    }
    const float* wrow[4];
    bool wok[4];
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        int n = n0 + lr + 16 * j;
        wok[j] = n < n_out;
        wrow[j] = w + (long)(wok[j] ? n : 0) * K;
    }
    // Column kidx = (ky * k + kx) * cin + c of this thread, advanced CBK per step.
    int kidx = lk;
    int c = lk % cin;
    int tap = lk / cin;
    int ky = tap / k, kx = tap - (tap / k) * k;

    float ra[4], rb[4];
    auto load = [&]() {
        const bool kin = kidx < K;
        float mean = 0.f, rstd = 1.f, ga = 1.f, be = 0.f;
        if (mode != 0 && kin) {
            ga = gamma[c];
            be = beta[c];
            if (mode == 1) {
                int gi = c / cpg;
                mean = stats[2 * gi];
                rstd = stats[2 * gi + 1];
            }
        }
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int iy = py[i] + ky, ix = px[i] + kx;
            float v = 0.f;
            if (kin && iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                long pix = (long)iy * wd + ix;
                v = x[pix * cin + c];
                if (mode != 0) {
                    if (mode == 2) {
                        mean = stats[2 * pix];
                        rstd = stats[2 * pix + 1];
                    }
                    v = (v - mean) * rstd * ga + be;
                    if (silu) v = v / (1.f + expf(-v));
                }
            }
            ra[i] = v;
        }
        #pragma unroll
        for (int j = 0; j < 4; j++) rb[j] = (kin && wok[j]) ? wrow[j][kidx] : 0.f;
    };
    auto advance = [&]() {
        kidx += CBK;
        c += CBK;
        while (c >= cin) {
            c -= cin;
            if (++kx == k) {
                kx = 0;
                ky++;
            }
        }
    };
    auto store = [&](int buf) {
        #pragma unroll
        for (int i = 0; i < 4; i++) as[buf][lk][lr + 16 * i] = ra[i];
        #pragma unroll
        for (int j = 0; j < 4; j++) bs[buf][lk][lr + 16 * j] = rb[j];
    };

    // Multiplying: this thread owns pixels ty * 4 .. +4 and channels tx * 4 .. +4 of the tile.
    const int ty = tid >> 4, tx = tid & 15;
    float acc[4][4];
    #pragma unroll
    for (int i = 0; i < 4; i++)
        #pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.f;

    const int steps = (K + CBK - 1) / CBK;
    load();
    store(0);
    __syncthreads();
    for (int s = 0; s < steps; s++) {
        const int cur = s & 1;
        const bool more = s + 1 < steps;
        if (more) {
            advance();
            load();
        }
        #pragma unroll
        for (int kk = 0; kk < CBK; kk++) {
            float4 a = *(const float4*)&as[cur][kk][ty * 4];
            float4 b = *(const float4*)&bs[cur][kk][tx * 4];
            float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
            #pragma unroll
            for (int i = 0; i < 4; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        // The other buffer was last read before the previous step's barrier.
        if (more) store(cur ^ 1);
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int p = m0 + ty * 4 + i;
        if (p >= P) continue;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int n = n0 + tx * 4 + j;
            if (n < n_out) y[(long)p * n_out + n] = acc[i][j];
        }
    }
}
