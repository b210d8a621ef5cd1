// Matmul inputs: f32 activations converted to bf16 / f16, or quantized to int8 blocks exactly
// as the CPU kernels quantize them (which makes device matmuls agree with the CPU's int8
// kernels), with the overflow guard of f16 inputs.

#include "common.cuh"

// Overflow guard of f16 matmul inputs: sc = [max |x| as bits, alpha, beta]. amax_f32 folds
// max |x| into sc[0] (zeroed before; non-negative floats order like their bits). The
// converters then divide by s, a power of two bringing max |x| to 2^15 or below (1 when it
// already is: then nothing changes), and set alpha = s, beta = 0 for cuBLAS.
extern "C" __global__ void amax_f32(const float* __restrict__ x, long n, u32* sc) {
    float m = 0.f;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(x[i]));
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m > 0.f) atomicMax(sc, __float_as_uint(m));
}

__device__ __forceinline__ float guard_scale(float* sc) {
    float a = __uint_as_float(*(const u32*)sc);
    float s = a > 32768.f ? exp2f(ceilf(log2f(a / 32768.f))) : 1.f;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        sc[1] = s;
        sc[2] = 0.f;
    }
    return s;
}

// f32 -> IEEE f16 divided by the guard's power of two.
extern "C" __global__ void f32_to_f16_scaled(const float* __restrict__ x, u16* __restrict__ y,
                                             long n, float* sc) {
    float inv = 1.f / guard_scale(sc);
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2h(x[i] * inv);
}

// Activations quantized to int8 blocks of B (32 or 256) values exactly as the CPU kernels do
// (oxinfer-kernels q8.rs, llama.cpp's quantize_row_q8_0/q8_K): d = amax / 127,
// q = round(x / d) clamped to ±127; written back as the values d·q, either as f16 divided by
// the guard's power of two (the f16 tensor-core GEMM) or as f32 unrounded (the exact-product
// SGEMM). x and y are [nblocks * B]; one warp per block.
template <typename T, bool H>
__device__ __forceinline__ void quant_act(const float* __restrict__ x, T* __restrict__ y,
                                          long nblocks, int B, float inv_s) {
    long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    const float* xb = x + b * B;
    T* yb = y + b * B;
    int per = B >> 5;
    float v[8];
    float amax = 0.f;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = i < per ? xb[lane + 32 * i] : 0.f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.f;
    float id = amax == 0.f ? 0.f : 1.f / d;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        if (i < per) {
            float q = fminf(fmaxf(roundf(v[i] * id), -127.f), 127.f);
            if constexpr (H) yb[lane + 32 * i] = f2h(d * q * inv_s);
            else yb[lane + 32 * i] = d * q;
        }
    }
}

extern "C" __global__ void quant_act_f16(const float* __restrict__ x, u16* __restrict__ y,
                                         long nblocks, int B, float* sc) {
    float inv_s = 1.f / guard_scale(sc);
    quant_act<u16, true>(x, y, nblocks, B, inv_s);
}

extern "C" __global__ void quant_act_f32(const float* __restrict__ x, float* __restrict__ y,
                                         long nblocks, int B) {
    quant_act<float, false>(x, y, nblocks, B, 1.f);
}

// f32 -> bf16 / f16, n elements.
extern "C" __global__ void f32_to_bf16(const float* x, u16* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (u16)f2bf(x[i]);
}

extern "C" __global__ void f32_to_f16(const float* x, u16* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2h(x[i]);
}


// The same quantization to int8 blocks of B values (32 or 256), stored as the int8 values q
// [nblocks * B], one scale d per block [nblocks] and the sum of each run of 32 int8 values
// qs [nblocks * B / 32]: the input of the int8 GEMV (gemv.cu); with gnb > 0, in the grouped
// layout of rows of gnb blocks (common.cuh).
extern "C" __global__ void quant_act_i8(const float* __restrict__ x, i8* __restrict__ q,
                                        float* __restrict__ dq, int* __restrict__ qs,
                                        long nblocks, int B, int gnb) {
    PDL_ENTER();
    long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    const float* xb = x + b * B;
    int per = B >> 5;
    float v[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) v[i] = i < per ? xb[lane + 32 * i] : 0.f;
    warp_quant_block(v, B, q + b * B, dq + b, qs + b * (B >> 5), gnb, b);
}
