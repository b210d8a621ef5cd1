// Quantized GEMM with dequantization in the tile: Y[t, n] = X[t, k] . W[n, k]^T.
// W stays in its GGUF block format in device memory; each k-tile of W is decoded to bf16 into
// shared memory by the block and multiplied with the bf16 activations on the tensor cores
// (mma.cuh's tile: BM weight rows x BN tokens x BK columns). X is converted to bf16 once per
// call beforehand (act_quant.cu). Two shared buffers: the block decodes tile k+1 while its
// warps multiply tile k. Also the whole-matrix decoders of each format and of 16-bit weights.

#include "common.cuh"
#include "dequant.cuh"
#include "mma.cuh"

// Decodes this thread's share of weight tile (m0, k0) into registers (bf16 pairs). All the
// segments' loads are issued before their arithmetic, so their latencies overlap.
template <int F>
__device__ __forceinline__ void load_w(const u8* w, long row_bytes, int n, int m0, int k0, u32* p) {
    float v[W_PER_THREAD][16];
    #pragma unroll
    for (int part = 0; part < W_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int r = idx / SEGS, seg = idx % SEGS;
        if (m0 + r < n) {
            dq16<F>(w + (long)(m0 + r) * row_bytes, k0 + seg * 16, v[part]);
        } else {
            #pragma unroll
            for (int i = 0; i < 16; i++) v[part][i] = 0.f;
        }
    }
    #pragma unroll
    for (int part = 0; part < W_PER_THREAD; part++)
        #pragma unroll
        for (int i = 0; i < 8; i++) p[part * 8 + i] = pack_bf2(v[part][2 * i], v[part][2 * i + 1]);
}

__device__ __forceinline__ void load_x(const u16* x, int t, int k, int n0, int k0, uint4* p) {
    #pragma unroll
    for (int part = 0; part < X_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int r = idx / SEGS, seg = idx % SEGS;
        if (n0 + r < t) {
            const uint4* s = (const uint4*)(x + (long)(n0 + r) * k + k0 + seg * 16);
            p[part * 2] = s[0];
            p[part * 2 + 1] = s[1];
        } else {
            p[part * 2] = make_uint4(0, 0, 0, 0);
            p[part * 2 + 1] = make_uint4(0, 0, 0, 0);
        }
    }
}

__device__ __forceinline__ void store_x(u16* s, const uint4* p) {
    #pragma unroll
    for (int part = 0; part < X_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int r = idx / SEGS, seg = idx % SEGS;
        uint4* d = (uint4*)(s + r * LDS + seg * 16);
        d[0] = p[part * 2];
        d[1] = p[part * 2 + 1];
    }
}

template <int F>
__device__ void gemm_q(const u8* __restrict__ w, long row_bytes, const u16* __restrict__ x,
                       float* __restrict__ y, int t, int n, int k) {
    // Dynamic shared memory (more than the 48 KiB static limit): [2][BM*LDS] weights, then
    // [2][BN*LDS] activations.
    extern __shared__ __align__(16) u16 smem[];
    u16* sw[2] = {smem, smem + BM * LDS};
    u16* sx[2] = {smem + 2 * BM * LDS, smem + 2 * BM * LDS + BN * LDS};
    int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int wm = (warp >> 2) * 64, wn = (warp & 3) * WN;
    float acc[MT][NT][4];
    zero_acc(acc);

    u32 pw[W_PER_THREAD * 8];
    uint4 px[X_PER_THREAD * 2];
    load_w<F>(w, row_bytes, n, m0, 0, pw);
    load_x(x, t, k, n0, 0, px);
    store_w(sw[0], pw);
    store_x(sx[0], px);
    __syncthreads();

    int kt_n = k / BK;
    for (int kt = 0; kt < kt_n; kt++) {
        int cur = kt & 1;
        bool more = kt + 1 < kt_n;
        if (more) {
            load_x(x, t, k, n0, (kt + 1) * BK, px);
            load_w<F>(w, row_bytes, n, m0, (kt + 1) * BK, pw);
        }
        const u16* a_s = sw[cur];
        const u16* b_s = sx[cur];
        mma_tile_bk(acc, a_s, b_s, wm, wn, lane);
        if (more) {
            store_w(sw[cur ^ 1], pw);
            store_x(sx[cur ^ 1], px);
        }
        __syncthreads();
    }

    store_acc(y, acc, m0, n0, wm, wn, lane, n, t);
}

#define INSTANTIATE(F, NAME)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) gemm_##NAME(                             \
        const u8* w, long row_bytes, const u16* x, float* y, int t, int n, int k) {            \
        gemm_q<F>(w, row_bytes, x, y, t, n, k);                                                \
    }                                                                                          \
    extern "C" __global__ void dequant_f16_##NAME(const u8* w, u16* out, int rows, int cols,  \
                                                  long row_bytes) {                            \
        dequant_16<F, true>(w, out, rows, cols, row_bytes);                                    \
    }                                                                                          \
    extern "C" __global__ void dequant_f32_##NAME(const u8* w, float* out, int rows, int cols, \
                                                  long row_bytes) {                            \
        dequant_32<F>(w, out, rows, cols, row_bytes);                                          \
    }

#ifndef OXINFER_TEMPLATES_ONLY
INSTANTIATE(FMT_Q4_0, q4_0)
INSTANTIATE(FMT_Q4_1, q4_1)
INSTANTIATE(FMT_Q5_0, q5_0)
INSTANTIATE(FMT_Q5_1, q5_1)
INSTANTIATE(FMT_Q8_0, q8_0)
INSTANTIATE(FMT_Q2_K, q2_k)
INSTANTIATE(FMT_Q3_K, q3_k)
INSTANTIATE(FMT_Q4_K, q4_k)
INSTANTIATE(FMT_Q5_K, q5_k)
INSTANTIATE(FMT_Q6_K, q6_k)
INSTANTIATE(FMT_Q8_K, q8_k)

// 16-bit weights -> f32 (exact), n elements; bf != 0: bfloat16, else IEEE f16.
extern "C" __global__ void half_to_f32(const u16* x, float* y, long n, int bf) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = bf ? __uint_as_float((u32)x[i] << 16) : h2f(x[i]);
}
#endif  // OXINFER_TEMPLATES_ONLY
