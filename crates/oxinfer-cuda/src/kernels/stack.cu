// Element-wise and row kernels of the device-resident decoder stack (stack.rs) and of the
// activation quantization that makes device matmuls agree with the CPU's int8 kernels.

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

// x = cap * tanh(x / cap), n elements.
extern "C" __global__ void softcap_f32(float* x, long n, float cap) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// Row-wise RMSNorm: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of `dim`; the sum of
// squares in f64 like the CPU reference. One block of 256 threads per row; x may equal y.
extern "C" __global__ void rms_norm_f32(const float* x, const float* __restrict__ w, float* y,
                                        int rows, int dim, float eps) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long)r * dim;
    float* yr = y + (long)r * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double part[32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x >> 5;
        ss = lane < nw ? part[lane] : 0.0;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    float inv = (float)(1.0 / sqrt(part[0] / (double)dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

// Per-head RMSNorm (QK-norm) of the first `cols` columns of rows of width `stride`, heads of
// `hd`: one warp per (row, head).
extern "C" __global__ void head_norm_f32(float* x, const float* __restrict__ w, int rows,
                                         int heads, int hd, int stride, float eps) {
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (gw >= (long)rows * heads) return;
    int r = (int)(gw / heads), h = (int)(gw % heads);
    float* p = x + (long)r * stride + h * hd;
    double ss = 0.0;
    for (int i = lane; i < hd; i += 32) ss += (double)p[i] * (double)p[i];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = (float)(1.0 / sqrt(ss / (double)hd + (double)eps));
    for (int i = lane; i < hd; i += 32) p[i] = p[i] * inv * w[i];
}

// y[r, :] += b for rows of width n.
extern "C" __global__ void add_bias_f32(float* y, const float* __restrict__ b, long rows, int n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * n) y[i] += b[i % n];
}

// x += y, n elements.
extern "C" __global__ void add_f32(float* x, const float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// RoPE in place on x [rows, heads * hd] with per-row tables cos/sin [rows, half]
// (half = rot / 2): interleaved pairs (2j, 2j+1) when `interleaved`, else (j, j + half).
extern "C" __global__ void rope_f32(float* x, const float* __restrict__ cs,
                                    const float* __restrict__ sn, int rows, int heads, int hd,
                                    int half, int interleaved) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long n = (long)rows * heads * half;
    if (i >= n) return;
    int j = (int)(i % half);
    long rh = i / half;
    int r = (int)(rh / heads);
    float* p = x + rh * hd;
    float c = cs[(long)r * half + j], s = sn[(long)r * half + j];
    int ia = interleaved ? 2 * j : j, ib = interleaved ? 2 * j + 1 : j + half;
    float a = p[ia], b = p[ib];
    p[ia] = a * c - b * s;
    p[ib] = a * s + b * c;
}

// Gated MLP middle in f32: g = act(g) * u (act 0 = SiLU, 1 = tanh-GELU), n elements.
extern "C" __global__ void gated_act_f32(float* g, const float* __restrict__ u, long n, int act) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = g[i];
    float a = act == 0 ? x / (1.f + expf(-x))
                       : 0.5f * x * (1.f + tanhf(0.7978846f * (x + 0.044715f * x * x * x)));
    g[i] = a * u[i];
}

// dst[i, :] = src[idx[i], :] for rows of width dim.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ src, const int* __restrict__ idx,
                                           float* __restrict__ dst, int n, int dim) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * dim) return;
    int r = (int)(i / dim), c = (int)(i % dim);
    dst[i] = src[(long)idx[r] * dim + c];
}
