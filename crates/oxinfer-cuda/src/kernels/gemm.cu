// Quantized GEMM with dequantization in the tile: Y[t, n] = X[t, k] . W[n, k]^T.
// W stays in its GGUF block format in device memory; each k-tile of W is decoded to bf16 into
// shared memory by the block and multiplied with the bf16 activations on the tensor cores
// (mma.sync m16n8k16, f32 accumulation). X is converted to bf16 once per call beforehand.
//
// Tile: BM weight rows x BN tokens x BK columns, 8 warps as 2 (rows) x 4 (tokens), each warp
// 64 x (BN/4). Shared rows are padded to LDS bf16 so ldmatrix reads hit distinct banks.
// Two shared buffers: the block decodes tile k+1 while its warps multiply tile k.

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 64
#endif
#define LDS (BK + 8)
// 16-value segments per tile row, and segments each of the 256 threads loads per operand.
#define SEGS (BK / 16)
#define W_PER_THREAD (BM * SEGS / 256)
#define X_PER_THREAD (BN * SEGS / 256)
#define WN (BN / 4)
#define MT 4
#define NT (WN / 8)

__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldsm4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

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

__device__ __forceinline__ void store_w(u16* s, const u32* p) {
    #pragma unroll
    for (int part = 0; part < W_PER_THREAD; part++) {
        int idx = threadIdx.x + part * 256;
        int r = idx / SEGS, seg = idx % SEGS;
        uint4* d = (uint4*)(s + r * LDS + seg * 16);
        d[0] = make_uint4(p[part * 8 + 0], p[part * 8 + 1], p[part * 8 + 2], p[part * 8 + 3]);
        d[1] = make_uint4(p[part * 8 + 4], p[part * 8 + 5], p[part * 8 + 6], p[part * 8 + 7]);
    }
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

// One BK-deep step of a block's tile product from shared memory (rows padded to LDS): each
// warp multiplies its 64 x WN share, weight rows wm.. of a_s by token rows wn.. of b_s, into
// acc (mma.sync m16n8k16, bf16 in, f32 accumulation). Shared by gemm_q and conv_igemm_bf16.
__device__ __forceinline__ void mma_tile_bk(float (&acc)[MT][NT][4], const u16* a_s,
                                            const u16* b_s, int wm, int wn, int lane) {
    #pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        u32 af[MT][4], bf[NT][2];
        #pragma unroll
        for (int i = 0; i < MT; i++) {
            int row = wm + i * 16 + (lane & 15);
            int col = kk + (lane >> 4) * 8;
            ldsm4(af[i], smem_addr(a_s + row * LDS + col));
        }
        #pragma unroll
        for (int j = 0; j < NT; j += 2) {
            int row = wn + j * 8 + (lane & 7) + (lane >> 4) * 8;
            int col = kk + ((lane >> 3) & 1) * 8;
            u32 r[4];
            ldsm4(r, smem_addr(b_s + row * LDS + col));
            bf[j][0] = r[0];
            bf[j][1] = r[1];
            bf[j + 1][0] = r[2];
            bf[j + 1][1] = r[3];
        }
        #pragma unroll
        for (int i = 0; i < MT; i++)
            #pragma unroll
            for (int j = 0; j < NT; j++) mma_bf16(acc[i][j], af[i], bf[j]);
    }
}

// Writes a warp's accumulators (the 64 x WN share at weight rows m0 + wm.., token rows
// n0 + wn..) to y [t, n] (token-major), skipping rows >= n and tokens >= t. Shared by gemm_q
// and conv_igemm_bf16.
__device__ __forceinline__ void store_acc(float* y, const float (&acc)[MT][NT][4], int m0, int n0,
                                          int wm, int wn, int lane, int n, int t) {
int g = lane >> 2, tq = lane & 3;
#pragma unroll
for (int i = 0; i < MT; i++) {
    #pragma unroll
    for (int j = 0; j < NT; j++) {
        int row = m0 + wm + i * 16 + g;
        int col = n0 + wn + j * 8 + tq * 2;
        #pragma unroll
        for (int c = 0; c < 4; c++) {
            int r = row + (c >> 1) * 8, cc = col + (c & 1);
            if (r < n && cc < t) y[(long)cc * n + r] = acc[i][j][c];
        }
    }
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
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;

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

// Activations: f32 -> bf16 / f16, n elements.
extern "C" __global__ void f32_to_bf16(const float* x, u16* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (u16)f2bf(x[i]);
}

extern "C" __global__ void f32_to_f16(const float* x, u16* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2h(x[i]);
}

// 16-bit weights -> f32 (exact), n elements; bf != 0: bfloat16, else IEEE f16.
extern "C" __global__ void half_to_f32(const u16* x, float* y, long n, int bf) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = bf ? __uint_as_float((u32)x[i] << 16) : h2f(x[i]);
}
