// Convolution as an implicit GEMM, with a GroupNorm / LayerNorm (+ SiLU) applied to its input
// on the way into shared memory (oxinfer::nn::conv is the CPU reference).
//
// x: channels-last input [h * wd, cin] f32. w: f32 weights [n_out][K], K = k * k * cin in
// (ky, kx, c) order. y: [oh * ow, n_out] f32. Padding k / 2 zeros on every side, applied AFTER
// the normalization: a padded tap is 0, not norm(0). stats: (mean, rstd) pairs, one per group
// (mode 1: channel c is in group c / cpg) or one per input pixel (mode 2); mode 0: no norm.

#include "common.cuh"
#include "mma.cuh"

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

// Tensor-core variant (opt-in; bf16 products, f32 accumulation): the tiles, warp layout and
// inner loop of gemm.cu's gemm_q (mma.cuh) (BM = 128 output channels as the mma rows, BN = 128 pixels as
// its columns, BK = 64, dynamic shared memory GEMM_SMEM, two stages), with two loaders in
// place of its decoders: weights from the f32 decoding rounded to bf16, and pixels gathered
// from the input, normalized (+ SiLU) in f32, then rounded to bf16. K is padded with zeros to
// a multiple of BK. bf16 keeps f32's range, so raw activations cannot overflow.

// The pixel tile is stored with store_w's segment layout.
static_assert(X_PER_THREAD == W_PER_THREAD, "conv_igemm_bf16 needs BM == BN");

// This thread's W_PER_THREAD segments (16 columns each) of the f32 weight tile (m0, k0) as
// packed bf16 pairs.
__device__ __forceinline__ void conv_load_w(const float* __restrict__ w, int n_out, int K,
                                            int m0, int k0, u32* p) {
    #pragma unroll
    for (int part = 0; part < W_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int r = idx / SEGS, seg = idx % SEGS;
        int row = m0 + r, col = k0 + seg * 16;
        float v[16];
        const float* src = w + (long)(row < n_out ? row : 0) * K;
        #pragma unroll
        for (int i = 0; i < 16; i++) v[i] = (row < n_out && col + i < K) ? src[col + i] : 0.f;
        #pragma unroll
        for (int i = 0; i < 8; i++) p[part * 8 + i] = pack_bf2(v[2 * i], v[2 * i + 1]);
    }
}

// The input side of one conv_igemm_bf16 block: the shape, the norm, and the input coordinates
// of tap (0, 0) of this thread's X_PER_THREAD pixel rows.
struct ConvIn {
    const float* x;
    const float* stats;
    const float* gamma;
    const float* beta;
    int h, wd, cin, k, K, mode, cpg, silu;
    int py[X_PER_THREAD], px[X_PER_THREAD];
};

// This thread's X_PER_THREAD segments of the pixel tile at column k0 (16 consecutive (ky, kx, c)
// columns of one pixel each), normalized and packed as bf16 pairs; zero outside the image, past
// K and past the last pixel.
__device__ __forceinline__ void conv_load_x(const ConvIn& a, int k0, u32* p) {
    #pragma unroll
    for (int part = 0; part < X_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int seg = idx % SEGS;
        int kidx = k0 + seg * 16;
        int tap = kidx / a.cin;
        int c = kidx - tap * a.cin;
        int ky = tap / a.k, kx = tap - (tap / a.k) * a.k;
        int gi = a.mode == 1 ? c / a.cpg : 0;
        int gc = a.mode == 1 ? c - gi * a.cpg : 0;
        float v[16];
        #pragma unroll
        for (int i = 0; i < 16; i++) {
            int iy = a.py[part] + ky, ix = a.px[part] + kx;
            float val = 0.f;
            if (kidx + i < a.K && iy >= 0 && iy < a.h && ix >= 0 && ix < a.wd) {
                long pix = (long)iy * a.wd + ix;
                val = a.x[pix * a.cin + c];
                if (a.mode != 0) {
                    long si = a.mode == 1 ? gi : pix;
                    val = (val - a.stats[2 * si]) * a.stats[2 * si + 1] * a.gamma[c] + a.beta[c];
                    if (a.silu) val = val / (1.f + expf(-val));
                }
            }
            v[i] = val;
            // Next column: channel, then tap.
            if (++c == a.cin) {
                c = 0;
                gi = 0;
                gc = 0;
                if (++kx == a.k) {
                    kx = 0;
                    ky++;
                }
            } else if (a.mode == 1 && ++gc == a.cpg) {
                gc = 0;
                gi++;
            }
        }
        #pragma unroll
        for (int i = 0; i < 8; i++) p[part * 8 + i] = pack_bf2(v[2 * i], v[2 * i + 1]);
    }
}

extern "C" __global__ void __launch_bounds__(256) conv_igemm_bf16(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
    const float* __restrict__ stats, const float* __restrict__ gamma,
    const float* __restrict__ beta, int h, int wd, int cin, int k, int stride, int oh, int ow,
    int n_out, int mode, int cpg, int silu) {
    // [2][BM * LDS] weights, then [2][BN * LDS] pixels (stage s at + s * size: plain
    // arithmetic, so no pointer array goes to local memory).
    extern __shared__ __align__(16) u16 conv_smem[];
    u16* const sw = conv_smem;
    u16* const sx = conv_smem + 2 * BM * LDS;
    const int P = oh * ow, K = k * k * cin, pad = k / 2;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    ConvIn a;
    a.x = x;
    a.stats = stats;
    a.gamma = gamma;
    a.beta = beta;
    a.h = h;
    a.wd = wd;
    a.cin = cin;
    a.k = k;
    a.K = K;
    a.mode = mode;
    a.cpg = cpg;
    a.silu = silu;
    #pragma unroll
    for (int part = 0; part < X_PER_THREAD; part++) {
        int p = n0 + (threadIdx.x + part * 256) / SEGS;
        if (p < P) {
            int oy = p / ow, ox = p - (p / ow) * ow;
            a.py[part] = oy * stride - pad;
            a.px[part] = ox * stride - pad;
        } else {
            a.py[part] = -(1 << 29);  // never inside the image: loads as 0
            a.px[part] = 0;
        }
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int wm = (warp >> 2) * 64, wn = (warp & 3) * WN;
    float acc[MT][NT][4];
    zero_acc(acc);

    u32 pw[W_PER_THREAD * 8];
    u32 px[X_PER_THREAD * 8];
    conv_load_w(w, n_out, K, m0, 0, pw);
    conv_load_x(a, 0, px);
    store_w(sw, pw);
    store_w(sx, px);  // same segment layout (X_PER_THREAD == W_PER_THREAD)
    __syncthreads();

    int kt_n = (K + BK - 1) / BK;
    for (int kt = 0; kt < kt_n; kt++) {
        int cur = kt & 1;
        bool more = kt + 1 < kt_n;
        if (more) {
            conv_load_x(a, (kt + 1) * BK, px);
            conv_load_w(w, n_out, K, m0, (kt + 1) * BK, pw);
        }
        const u16* a_s = sw + cur * (BM * LDS);
        const u16* b_s = sx + cur * (BN * LDS);
        mma_tile_bk(acc, a_s, b_s, wm, wn, lane);
        if (more) {
            store_w(sw + (cur ^ 1) * (BM * LDS), pw);
            store_w(sx + (cur ^ 1) * (BN * LDS), px);
        }
        __syncthreads();
    }

    store_acc(y, acc, m0, n0, wm, wn, lane, n_out, P);
}
