// Quantized matrix-vector products for decode: y[t, rows] = x[t, cols] · Wᵀ for t ≤ 8 rows,
// the weights read in their GGUF blocks and decoded in registers (the dq16 decoders of
// dequant.cuh, the same as the GEMM's), f32 FMA. The activations come already quantized to
// int8 block values d·q stored as f32 (act_quant.cu, exactly as the CPU kernels quantize), so
// the sums are the CPU's integer sums up to f32 rounding order.
//
// One warp per output row; lane l decodes the 16 weights at columns 16·l + 512·i. x rows are
// read through the read-only cache (every warp of the grid reads the same x). cols must be a
// multiple of 16 (every block format's row is), x 16-byte aligned.

#include "dequant.cuh"

#define GEMV_WARPS 4

template <int F, int T>
__device__ __forceinline__ void gemv_q(const u8* __restrict__ w, long row_bytes,
                                       const float* __restrict__ x, float* __restrict__ y,
                                       int rows, int cols, int t) {
    int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const u8* wr = w + (long)row * row_bytes;
    float acc[T];
    #pragma unroll
    for (int r = 0; r < T; r++) acc[r] = 0.f;
    #pragma unroll 2
    for (int k = lane * 16; k < cols; k += 512) {
        float wv[16];
        dq16<F>(wr, k, wv);
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (r < t) {
                const float4* xr = (const float4*)(x + (long)r * cols + k);
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    float4 a = __ldg(xr + i);
                    acc[r] += wv[4 * i] * a.x + wv[4 * i + 1] * a.y + wv[4 * i + 2] * a.z +
                              wv[4 * i + 3] * a.w;
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < T; r++) {
        float s = acc[r];
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && r < t) y[(long)r * rows + row] = s;
    }
}

#define GEMV_INSTANTIATE(F, NAME)                                                              \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_##NAME##_1(              \
        const u8* w, long row_bytes, const float* x, float* y, int rows, int cols, int t) {     \
        gemv_q<F, 1>(w, row_bytes, x, y, rows, cols, t);                                        \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_##NAME##_8(              \
        const u8* w, long row_bytes, const float* x, float* y, int rows, int cols, int t) {     \
        gemv_q<F, 8>(w, row_bytes, x, y, rows, cols, t);                                        \
    }

GEMV_INSTANTIATE(FMT_Q4_0, q4_0)
GEMV_INSTANTIATE(FMT_Q4_1, q4_1)
GEMV_INSTANTIATE(FMT_Q5_0, q5_0)
GEMV_INSTANTIATE(FMT_Q5_1, q5_1)
GEMV_INSTANTIATE(FMT_Q8_0, q8_0)
GEMV_INSTANTIATE(FMT_Q2_K, q2_k)
GEMV_INSTANTIATE(FMT_Q3_K, q3_k)
GEMV_INSTANTIATE(FMT_Q4_K, q4_k)
GEMV_INSTANTIATE(FMT_Q5_K, q5_k)
GEMV_INSTANTIATE(FMT_Q6_K, q6_k)
GEMV_INSTANTIATE(FMT_Q8_K, q8_k)
