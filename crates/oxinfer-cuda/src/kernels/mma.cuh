// Tensor-core tile machinery shared by the quantized GEMM (gemm.cu) and the tensor-core
// convolution (conv.cu): a block of 256 threads computes a BM x BN tile of the output (BM mma
// rows x BN mma columns) in BK-deep steps from two shared-memory stages; 8 warps as
// 2 (rows) x 4 (columns), each warp 64 x WN; mma.sync m16n8k16 with bf16 inputs and f32
// accumulation. Shared rows are padded to LDS bf16 so ldmatrix reads hit distinct banks.
#ifndef OXINFER_MMA_CUH
#define OXINFER_MMA_CUH

#include "common.cuh"

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

// The same with each 8 x 8 matrix transposed: a lane gets two values of one column (rows
// 2 (lane % 4) and + 1 at column lane / 4), the B fragment of a row-major [k][n] tile.
__device__ __forceinline__ void ldsm4_t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// mma.sync m16n8k16 with f16 inputs and f32 accumulation (c += a . b).
__device__ __forceinline__ void mma_f16(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Stores this thread's W_PER_THREAD segments (16 values each, packed bf16 pairs in p) of a
// BM-row tile into shared memory s (rows padded to LDS).
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

// Zeroes a warp's accumulators.
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.f;
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

#endif  // OXINFER_MMA_CUH
