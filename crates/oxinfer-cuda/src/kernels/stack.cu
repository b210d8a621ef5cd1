// Element-wise and row kernels of the device-resident decoder stack (stack.rs): norms, biases,
// residual adds, RoPE, the gated activation, row gathering and the final soft-cap.

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
