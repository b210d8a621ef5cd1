// Element-wise and row kernels of the device-resident decoder stack (stack_run.rs): norms,
// residual adds, the gated activation, row gathering, the final soft-cap, and the fused decode
// kernels (biases + QK-norm + RoPE + KV append; add + norm + int8 quantization).

#include "head_post.cuh"

// x = cap * tanh(x / cap), n elements.
extern "C" __global__ void softcap_f32(float* x, long n, float cap) {
    PDL_ENTER();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// x += y, n elements.
extern "C" __global__ void add_f32(float* x, const float* __restrict__ y, long n) {
    PDL_ENTER();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// Gated MLP middle in f32: g = act(g) * u (act 0 = SiLU, 1 = tanh-GELU), n elements.
extern "C" __global__ void gated_act_f32(float* g, const float* __restrict__ u, long n, int act) {
    PDL_ENTER();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    g[i] = gated_value(g[i], u[i], act);
}

// dst[i, :] = src[idx[i], :] for rows of width dim.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ src, const int* __restrict__ idx,
                                           float* __restrict__ dst, int n, int dim) {
    PDL_ENTER();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * dim) return;
    int r = (int)(i / dim), c = (int)(i % dim);
    dst[i] = src[(long)idx[r] * dim + c];
}

// ---- Fused decode kernels: each does the arithmetic of a run of single-op kernels in the same
// order, so its results are bit-identical to the unfused run.

// Row-wise RMSNorm, with the residual add before it and the int8 quantization of the next
// GEMV's input after it: with res != 0 first x += res (add_f32, written back), then
// y = x / sqrt(mean(x^2) + eps) · w over rows of `dim` (the sum of squares in f64 like the CPU
// reference; y may equal x), then, with q != 0, y quantized to int8 blocks of B values into
// q [rows * dim], dq [rows * dim / B] and qs [rows * dim / 32] (quant_act_i8; gnb > 0: q in the
// grouped layout, common.cuh). One block per row of up to RMS_THREADS threads holding PER
// values each (element tid + k · threads, k < PER; dim ≤ threads · PER, ops.rs picks PER):
// each thread loads its values of x and res into registers before it writes anything, so the
// loads are in flight together (a loop that stored x between loads waited for each load in
// turn: 16 µs for one 3584-wide row under ncu on the H200, 9.6 µs in `--profile` with this
// order). The sum of squares is the same for every PER that covers the row (the extra values
// are zeros), so the variants and rms_norm_q8_slices agree bit for bit.
#define RMS_THREADS 1024
#define RMS_PER 16

// The block's total of each thread's ss (f64, every block of a row the same tree: lanes, then
// warps through `part` [32]); every thread gets it.
__device__ __forceinline__ double row_total(double ss, double* part) {
    int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, lane = tid & 31;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        int nw = nt >> 5;
        ss = lane < nw ? part[lane] : 0.0;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    return part[0];
}

// The sum of squares of a row held PER values per thread (each thread's in order k = 0, 1, ...,
// then row_total).
template <int PER>
__device__ __forceinline__ double row_sum_sq(const float (&v)[PER], double* part) {
    double ss = 0.0;
    #pragma unroll
    for (int k = 0; k < PER; k++) ss += (double)v[k] * (double)v[k];
    return row_total(ss, part);
}

// The body of the add_rms_norm_q8 kernels (NORM_RES false) and add_normed_rms_norm_q8 ones
// (NORM_RES true: res is first RMS-normalized with gain res_w, as rms_norm_f32 in place would,
// then added: Gemma's post-attention / post-MLP norms and the next norm in one kernel,
// bit-identical to the three). With blocks of 32 each warp quantizes its own values from
// registers (warp w's k-th values are exactly block w + k · threads / 32); blocks of 256 span
// warps, so those are read back from y after a barrier.
template <bool NORM_RES, int PER>
__device__ __forceinline__ void add_rms_norm_q8_body(
    float* x, const float* __restrict__ res, const float* __restrict__ res_w,
    const float* __restrict__ w, float* y, i8* q, float* dq, int* qs, int rows, int dim,
    float eps, int B, int gnb) {
    int r = blockIdx.x;
    if (r >= rows) return;
    float* xr = x + (long)r * dim;
    float* yr = y + (long)r * dim;
    int tid = threadIdx.x, nt = blockDim.x;
    __shared__ double part[NORM_RES ? 2 : 1][32];
    // x (+ res) first, every load before any store; w after the reduction for wide rows
    // (loading w with x made the 16-value kernel slower on the H200: 17 µs against 9.6 in
    // `--profile`), with x for narrow ones.
    constexpr bool EARLY_W = PER <= 4;
    float v[PER], wv[PER];
    if (NORM_RES) {
        // Narrow rows keep res in registers; wider ones sum its squares as they load and read
        // it again (ptxas 12.9, sm_90: with both arrays held the 16-value variant spilled 652
        // bytes; this way the 8-value one spills none and the 16-value one, only for rows
        // wider than 8,192, 160).
        constexpr bool KEEP_RES = PER <= 4;
        float rv[KEEP_RES ? PER : 1];
        double ssr = 0.0;
        #pragma unroll
        for (int k = 0; k < PER; k++) {
            int i = tid + k * nt;
            v[k] = i < dim ? xr[i] : 0.f;
            float rk = i < dim ? res[(long)r * dim + i] : 0.f;
            ssr += (double)rk * (double)rk;
            if (KEEP_RES) rv[KEEP_RES ? k : 0] = rk;
            if (EARLY_W) wv[k] = i < dim ? w[i] : 0.f;
        }
        float inv_r = (float)(1.0 / sqrt(row_total(ssr, part[1]) / (double)dim + (double)eps));
        #pragma unroll
        for (int k = 0; k < PER; k++) {
            int i = tid + k * nt;
            float rk = KEEP_RES ? rv[KEEP_RES ? k : 0] : (i < dim ? res[(long)r * dim + i] : 0.f);
            if (i < dim) v[k] = v[k] + rk * inv_r * res_w[i];
        }
    } else {
        #pragma unroll
        for (int k = 0; k < PER; k++) {
            int i = tid + k * nt;
            float a = i < dim ? xr[i] : 0.f;
            v[k] = res != 0 && i < dim ? a + res[(long)r * dim + i] : a;
            if (EARLY_W) wv[k] = i < dim ? w[i] : 0.f;
        }
    }
    if (res != 0) {
        #pragma unroll
        for (int k = 0; k < PER; k++) {
            int i = tid + k * nt;
            if (i < dim) xr[i] = v[k];
        }
    }
    float inv = (float)(1.0 / sqrt(row_sum_sq<PER>(v, part[0]) / (double)dim + (double)eps));
    #pragma unroll
    for (int k = 0; k < PER; k++) {
        int i = tid + k * nt;
        v[k] = v[k] * inv * (EARLY_W ? wv[k] : (i < dim ? w[i] : 0.f));
        if (i < dim) yr[i] = v[k];
    }
    if (q == 0) return;
    int warp = tid >> 5, lane = tid & 31, nw = nt >> 5;
    if (B == 32) {
        #pragma unroll
        for (int k = 0; k < PER; k++) {
            long b = warp + (long)k * nw;
            if (b * 32 >= dim) break;
            float one[8] = {v[k], 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            long blk = ((long)r * dim) / 32 + b;
            warp_quant_block(one, 32, q + blk * 32, dq + blk, qs + blk);
        }
        return;
    }
    __syncthreads();
    int per = B >> 5;
    for (int b = warp; b < dim / B; b += nw) {
        float vb[8];
        #pragma unroll
        for (int i = 0; i < 8; i++) vb[i] = i < per ? yr[b * B + lane + 32 * i] : 0.f;
        long blk = ((long)r * dim) / B + b;
        warp_quant_block(vb, B, q + blk * B, dq + blk, qs + blk * per, gnb, blk);
    }
}

// add_rms_norm_q8 (PER = 16 values a thread, rows up to 16384) and its narrow variants _p1, _p4
// and _p8 (rows up to 1024, 4096 and 8192); add_normed_rms_norm_q8* the same with res (required)
// RMS-normalized with gain res_w before the add.
#define ADD_RMS_NORM_KERNELS(PER, SUFFIX)                                                      \
    extern "C" __global__ void __launch_bounds__(RMS_THREADS) add_rms_norm_q8##SUFFIX(          \
        float* x, const float* __restrict__ res, const float* __restrict__ w, float* y, i8* q,  \
        float* dq, int* qs, int rows, int dim, float eps, int B, int gnb) {                    \
        PDL_ENTER();                                                                           \
        add_rms_norm_q8_body<false, PER>(x, res, nullptr, w, y, q, dq, qs, rows, dim, eps, B,  \
                                         gnb);                                                 \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(RMS_THREADS) add_normed_rms_norm_q8##SUFFIX(   \
        float* x, const float* __restrict__ res, const float* __restrict__ res_w,              \
        const float* __restrict__ w, float* y, i8* q, float* dq, int* qs, int rows, int dim,   \
        float eps, int B, int gnb) {                                                           \
        PDL_ENTER();                                                                           \
        add_rms_norm_q8_body<true, PER>(x, res, res_w, w, y, q, dq, qs, rows, dim, eps, B,     \
                                        gnb);                                                  \
    }
ADD_RMS_NORM_KERNELS(RMS_PER, )
ADD_RMS_NORM_KERNELS(1, _p1)
ADD_RMS_NORM_KERNELS(4, _p4)
ADD_RMS_NORM_KERNELS(8, _p8)

// The RMSNorm + int8 quantization of add_rms_norm_q8 without the residual add (the decode
// stack adds the residual in the GEMV that produced it) over a grid of (rows, slices of
// RMS_SLICE values): every block reduces its whole row in exactly add_rms_norm_q8's order (same
// threads, same per-thread values, same tree), so every block gets the same bit-identical 1/rms;
// then its first warp normalizes its slice from registers, stores it to y and quantizes it in
// blocks of B (32 or 256; RMS_SLICE a multiple of both, dim a multiple of B). No value is
// written before being read back, so the whole step is one round of loads: against one block
// per row that stored y and read it again to quantize. y must not alias x (other blocks of the
// row still read x).
#define RMS_SLICE 256
extern "C" __global__ void __launch_bounds__(RMS_THREADS) rms_norm_q8_slices(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* q,
    float* dq, int* qs, int rows, int dim, float eps, int B, int gnb) {
    PDL_ENTER();
    int r = blockIdx.x, sl = blockIdx.y;
    if (r >= rows) return;
    const float* xr = x + (long)r * dim;
    int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, lane = tid & 31;
    float v[RMS_PER];
    #pragma unroll
    for (int k = 0; k < RMS_PER; k++) {
        int i = tid + k * nt;
        v[k] = i < dim ? xr[i] : 0.f;
    }
    // The slice's own values and gains (first warp), loaded with the row.
    int s0 = sl * RMS_SLICE;
    float xs[8], ws[8];
    if (warp == 0) {
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int c = s0 + lane + 32 * i;
            xs[i] = c < dim ? xr[c] : 0.f;
            ws[i] = c < dim ? w[c] : 0.f;
        }
    }
    double ss = 0.0;
    #pragma unroll
    for (int k = 0; k < RMS_PER; k++) ss += (double)v[k] * (double)v[k];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double part[32];
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp != 0) return;
    int nw = nt >> 5;
    ss = lane < nw ? part[lane] : 0.0;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    float ys[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        int c = s0 + lane + 32 * i;
        ys[i] = xs[i] * inv * ws[i];
        if (c < dim) y[(long)r * dim + c] = ys[i];
    }
    if (q == 0) return;
    long row_blocks = (long)r * (dim / B);
    if (B == 256) {
        long blk = row_blocks + s0 / 256;
        if (s0 < dim) warp_quant_block(ys, 256, q + blk * 256, dq + blk, qs + blk * 8, gnb, blk);
        return;
    }
    // Blocks of 32: sub-block i of the slice is element lane + 32 i, one per lane.
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        int c0 = s0 + 32 * i;
        if (c0 >= dim) break;
        float one[8] = {ys[i], 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        long blk = row_blocks + c0 / 32;
        warp_quant_block(one, 32, q + blk * 32, dq + blk, qs + blk);
    }
}

// The gated activation (gated_act_f32: g = act(g) · u, written back) and the int8 quantization
// of the result in blocks of B (quant_act_i8, gnb as there) in one kernel: one warp per block.
extern "C" __global__ void gated_act_q8(float* g, const float* __restrict__ u, i8* q, float* dq,
                                        int* qs, long nblocks, int B, int act, int gnb) {
    PDL_ENTER();
    long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    int per = B >> 5;
    // Every load before the first store (g is written back in place).
    float gv[8], uv[8], v[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        long j = b * B + lane + 32 * i;
        gv[i] = i < per ? g[j] : 0.f;
        uv[i] = i < per ? u[j] : 0.f;
    }
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = 0.f;
        if (i < per) {
            v[i] = gated_value(gv[i], uv[i], act);
            g[b * B + lane + 32 * i] = v[i];
        }
    }
    warp_quant_block(v, B, q + b * B, dq + b, qs + b * per, gnb, b);
}

// The new rows after the q/k/v projections, in one kernel: per (row, head) of the queries,
// keys and values, head_post (bias, the per-head RMSNorm of queries and keys, RoPE per-row
// tables cs / sn [*, half]); queries stay in q, keys and values go to the cache of the row's
// sequence (row 0 of its keys at kv[2 rseq[row]], of its values at kv[2 rseq[row] + 1]) at the
// row's position pos[row] (both read on the device, so a captured decode step stays valid as
// the positions advance and the caches move), stored in the cache's element type `kt`
// (KvF32 ... KvQ4_0::CODE, common.cuh). With krot / vrot (chunk widths, 0 for none) the
// queries and keys / the values are rotated (warp_hadamard) before they are stored, as the
// CPU stores a block-type cache (KvCache::store). Rows row0 .. row0 + n of q [*, H * hd],
// kn / vn [*, KVH * hd], cs / sn [*, half], pos; any of qb, kb, vb, qn, kw may be 0 (absent).
// One warp per (row, head), heads ordered q, k, v.
#define QKV_WARPS 4
extern "C" __global__ void __launch_bounds__(32 * QKV_WARPS) qkv_post(
    float* q, const float* __restrict__ kn, const float* __restrict__ vn,
    const unsigned long long* __restrict__ kv, const int* __restrict__ rseq,
    const float* __restrict__ qb, const float* __restrict__ kb, const float* __restrict__ vb,
    const float* __restrict__ qn, const float* __restrict__ kw, const float* __restrict__ cs,
    const float* __restrict__ sn, const int* __restrict__ pos, int row0, int n, int H, int KVH,
    int hd, int half, int interleaved, float eps, int kt, int krot, int vrot) {
    PDL_ENTER();
    __shared__ float sh[QKV_WARPS][256];
    long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    int heads = H + 2 * KVH;
    if (gw >= (long)n * heads) return;
    int row = row0 + (int)(gw / heads), h = (int)(gw % heads);
    int per = hd >> 5, q_row = H * hd, kv_row = KVH * hd;
    const float *src, *bias, *gain;
    // Where the head goes: element `at` of `dst`, f32 (the queries) or the cache's type, after
    // a rotation in chunks of `chunk` (0: none).
    void* dst;
    long at;
    int code = kt, chunk = krot;
    bool rotate;
    if (h < H) {
        src = q + (long)row * q_row + h * hd;
        dst = q;
        at = (long)row * q_row + h * hd;
        code = KvF32::CODE;
        bias = qb ? qb + h * hd : 0;
        gain = qn;
        rotate = true;
    } else if (h < H + KVH) {
        int kh = h - H;
        src = kn + (long)row * kv_row + kh * hd;
        dst = (void*)kv[2 * rseq[row]];
        at = (long)pos[row] * kv_row + kh * hd;
        bias = kb ? kb + kh * hd : 0;
        gain = kw;
        rotate = true;
    } else {
        int vh = h - H - KVH;
        src = vn + (long)row * kv_row + vh * hd;
        dst = (void*)kv[2 * rseq[row] + 1];
        at = (long)pos[row] * kv_row + vh * hd;
        bias = vb ? vb + vh * hd : 0;
        gain = 0;
        rotate = false;
        chunk = vrot;
    }
    float v[8];
    head_post(src, bias, gain, cs + (long)row * half, sn + (long)row * half, half, interleaved,
              rotate, hd, eps, sh[wi], v);
    warp_hadamard(v, per, chunk);
    kv_store_head(dst, at, v, per, code);
}

// Scores each logit row [rows, vocab] against its target (tgt: one i32 per row): out[2 r] =
// ln softmax(row)[target] and out[2 r + 1] = the first index of the row's maximum, as
// RowScore::from_logits computes them on the host (each l − max taken in f32 and widened, the
// exponentials summed in f64; only the order of that sum differs). A target outside the
// vocabulary (an argmax-only pass gives −1) scores −inf whatever the sum, so the row's f64
// exponentials are skipped (82 µs of a 7B decode step on an H100, for a 152k vocabulary).
// One block per row.
#define SCORE_THREADS 1024
extern "C" __global__ void __launch_bounds__(SCORE_THREADS) logit_scores(
    const float* __restrict__ logits, long vocab, const int* __restrict__ tgt,
    double* __restrict__ out) {
    PDL_ENTER();
    const float* row = logits + (long)blockIdx.x * vocab;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = blockDim.x >> 5;
    float mx = __int_as_float(0xff800000);
    long ix = vocab;
    #pragma unroll 8
    for (long i = tid; i < vocab; i += blockDim.x) {
        float v = row[i];
        if (v > mx || (ix == vocab && v == mx)) {
            mx = v;
            ix = i;
        }
    }
    // (max, first index) over the block: the larger value, the smaller index on ties.
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        long i2 = __shfl_xor_sync(0xffffffffu, ix, o);
        if (m2 > mx || (m2 == mx && i2 < ix)) {
            mx = m2;
            ix = i2;
        }
    }
    __shared__ float smx[32];
    __shared__ long six[32];
    __shared__ double ssum[32];
    if (lane == 0) {
        smx[warp] = mx;
        six[warp] = ix;
    }
    __syncthreads();
    mx = smx[0];
    ix = six[0];
    for (int w = 1; w < nw; w++) {
        if (smx[w] > mx || (smx[w] == mx && six[w] < ix)) {
            mx = smx[w];
            ix = six[w];
        }
    }
    int t = tgt[blockIdx.x];
    bool scored = t >= 0 && t < vocab;
    double s = 0.0;
    #pragma unroll 8
    for (long i = tid; scored && i < vocab; i += blockDim.x) s += exp((double)(row[i] - mx));
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) ssum[warp] = s;
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int w = 0; w < nw; w++) sum += ssum[w];
        out[2 * (long)blockIdx.x] =
            scored ? (double)(row[t] - mx) - log(sum) : (double)__int_as_float(0xff800000);
        out[2 * (long)blockIdx.x + 1] = (double)(ix == vocab ? 0 : ix);
    }
}
