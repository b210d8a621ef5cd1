// Quantized matrix-vector products for decode: y[t, rows] = x[t, cols] · Wᵀ for t ≤ 8 rows,
// the weights read in their GGUF blocks and decoded in registers (the dq16 decoders of
// dequant.cuh, the same as the GEMM's), f32 FMA. The activations come already quantized to
// int8 block values d·q stored as f32 (act_quant.cu, exactly as the CPU kernels quantize), so
// the sums are the CPU's integer sums up to f32 rounding order.
//
// f32 GEMV: one warp per output row; lane l decodes the 16 weights at columns 16·l + 512·i. x rows are
// read through the read-only cache (every warp of the grid reads the same x). cols must be a
// multiple of 16 (every block format's row is), x 16-byte aligned.

#include "dequant.cuh"

#define GEMV_WARPS 4

// Sums each of the T per-row partials of a warp and stores row r's at y[r * rows + row] (lane 0,
// rows r < t; with `accum`, adds it to what y holds): the one epilogue of every GEMV kernel.
template <int T>
__device__ __forceinline__ void gemv_store(const float (&acc)[T], float* __restrict__ y,
                                           int rows, int row, int t, int accum = 0) {
    int lane = threadIdx.x & 31;
    #pragma unroll
    for (int r = 0; r < T; r++) {
        float s = acc[r];
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && r < t) {
            float* yo = y + (long)r * rows + row;
            *yo = accum ? *yo + s : s;
        }
    }
}

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
            if (T == 1 || r < t) {
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
    gemv_store<T>(acc, y, rows, row, t);
}

#define GEMV_KERNEL(F, NAME, T)                                                                \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_##NAME##_##T(            \
        const u8* w, long row_bytes, const float* x, float* y, int rows, int cols, int t) {     \
        PDL_ENTER();                                                                           \
        gemv_q<F, T>(w, row_bytes, x, y, rows, cols, t);                                        \
    }
#define GEMV_INSTANTIATE(F, NAME) GEMV_KERNEL(F, NAME, 1) GEMV_KERNEL(F, NAME, 8)

#ifndef OXINFER_TEMPLATES_ONLY
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
#endif  // OXINFER_TEMPLATES_ONLY

// int8 dot product of four packed bytes (a unsigned 0..15 or signed, b signed) added to c.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// Four bytes at a 2-byte aligned address (Q6_K blocks are 210 bytes: only 2-byte aligned).
__device__ __forceinline__ int ld32_a2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// The int8 GEMV bodies below add, for each activation row r < t, share `share` of `split` of
// one weight row wr (cols weights; the `split` warps given one row take interleaved runs of its
// blocks) times the int8 activations xq [t, cols] with their block scales xd and the sums of
// each run of 32 activations xs [t, cols / 32] (quant_act_i8's layout) into acc[r] (lane
// `lane`; the caller sums over the lanes and the row's warps).

// Q4_K on int8 activations (the CPU's q4_K x q8_K dot): the activations are int8 values with
// one scale per 256 ([t, cols / 256]), exactly the CPU's Q8_K quantization, so the integer sums
// per sub-block are the CPU's and only the final f32 combination differs in order. Four lanes
// per super-block (a warp takes eight, the block's warps interleaved): lane c takes sub-block
// pair (2c, 2c + 1), i.e. 32 bytes of quants (low nibbles: sub-block 2c, high: 2c + 1) as two
// 16-byte loads, the 64 matching int8 activations as four, and their two precomputed sums
// (the mins' term), decoding the pair's scales once.
template <int T, int R>
__device__ __forceinline__ void q4k_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                            const i8* __restrict__ xq,
                                            const float* __restrict__ xd,
                                            const int* __restrict__ xs, int cols, int t,
                                            int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 8;
    int c = lane & 3;
    // Unrolled so that several blocks' loads are in flight at once.
    #pragma unroll 2
    for (int b = (lane >> 2) + 8 * share; b < nb; b += 8 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * 144;
        u32 dm = *(const u32*)blk;
        float d = h2f((u16)(dm & 0xffffu)), dmin = h2f((u16)(dm >> 16));
        const u32* s32 = (const u32*)(blk + 4);
        u32 sw[3] = {s32[0], s32[1], s32[2]};
        float sc0, mn0, sc1, mn1;
        scale_min_k4_w(2 * c, sw, &sc0, &mn0);
        scale_min_k4_w(2 * c + 1, sw, &sc1, &mn1);
        uint4 qa = *(const uint4*)(blk + 16 + c * 32);
        uint4 qb = *(const uint4*)(blk + 32 + c * 32);
        int qw[8] = {(int)qa.x, (int)qa.y, (int)qa.z, (int)qa.w,
                     (int)qb.x, (int)qb.y, (int)qb.z, (int)qb.w};
        int k0 = b * 256 + c * 64;
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                const int4* xr = (const int4*)(xq + (long)r * cols + k0);
                int4 x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3];
                int xlo[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                int xhi[8] = {x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
                int dl = 0, dh = 0;
                #pragma unroll
                for (int i = 0; i < 8; i++) {
                    dl = dp4a(qw[i] & 0x0F0F0F0F, xlo[i], dl);
                    dh = dp4a((qw[i] >> 4) & 0x0F0F0F0F, xhi[i], dh);
                }
                int2 sm = *(const int2*)(xs + (long)r * (cols >> 5) + b * 8 + 2 * c);
                float dx = xd[(long)r * nb + b];
                acc[r] += dx * (d * (sc0 * (float)dl + sc1 * (float)dh) -
                                dmin * (mn0 * (float)sm.x + mn1 * (float)sm.y));
            }
        }
      }
    }
}

// Q6_K on int8 activations (the CPU's q6_K x q8_K dot), activations as for Q4_K. Eight lanes
// per super-block: lane j takes half n = j / 4 and the 8 positions l0 = 8 (j % 4) .. + 8 of
// each of its four 32-weight quarters (32 weights), reading 16 bytes of low quants, 8 of high
// bits and four 8-byte runs of activations; each quarter's 8 weights share one scale.
template <int T, int R>
__device__ __forceinline__ void q6k_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                            const i8* __restrict__ xq,
                                            const float* __restrict__ xd,
                                            const int* __restrict__ xs, int cols, int t,
                                            int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 8;
    int j = lane & 7, n = j >> 2, part = j & 3, l0 = part * 8;
    #pragma unroll 4
    for (int b = (lane >> 3) + 4 * share; b < nb; b += 4 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * 210;
        float d = h2f(*(const u16*)(blk + 208));
        const i8* sc = (const i8*)(blk + 192) + n * 8 + (part >> 1);
        const u8* ql = blk + n * 64 + l0;
        const u8* qh = blk + 128 + n * 32 + l0;
        int lo[2][2], hb[2];
        #pragma unroll
        for (int i = 0; i < 2; i++) {
            lo[0][i] = ld32_a2(ql + 4 * i);
            lo[1][i] = ld32_a2(ql + 32 + 4 * i);
            hb[i] = ld32_a2(qh + 4 * i);
        }
        // Quarter qu: low nibbles of ql (qu 0, 1) or high nibbles (qu 2, 3), bits 2 qu of qh.
        int q6[4][2];
        #pragma unroll
        for (int qu = 0; qu < 4; qu++) {
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                int l = lo[qu & 1][i];
                int nib = qu < 2 ? (l & 0x0F0F0F0F) : ((l >> 4) & 0x0F0F0F0F);
                q6[qu][i] = nib | (((hb[i] >> (2 * qu)) & 0x03030303) << 4);
            }
        }
        float s[4];
        #pragma unroll
        for (int qu = 0; qu < 4; qu++) s[qu] = d * (float)sc[2 * qu];
        int k0 = b * 256 + n * 128 + l0;
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                const i8* xr = xq + (long)r * cols + k0;
                float sum = 0.f;
                #pragma unroll
                for (int qu = 0; qu < 4; qu++) {
                    int2 xv = *(const int2*)(xr + qu * 32);
                    int dot = dp4a(q6[qu][0], xv.x, dp4a(q6[qu][1], xv.y, 0));
                    int sx = dp4a(0x01010101, xv.x, dp4a(0x01010101, xv.y, 0));
                    sum += s[qu] * (float)(dot - 32 * sx);
                }
                acc[r] += xd[(long)r * nb + b] * sum;
            }
        }
      }
    }
}

// One 32-weight block (Q4_0, Q4_1, Q8_0) times its 32 int8 activations x (eight packed words,
// their sum sx precomputed by the quantization), scaled by the activations' block scale dx: the
// CPU's integer block sums.
template <int F>
__device__ __forceinline__ float dot32_i8(const u8* blk, const int* x, int sx, float dx);

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_0>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 2 + 4 * i);
        dot = dp4a(w & 0x0F0F0F0F, x[i], dot);
        dot = dp4a((w >> 4) & 0x0F0F0F0F, x[4 + i], dot);
    }
    return dx * h2f(ld16(blk)) * (float)(dot - 8 * sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q4_1>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int w = ld32_a2(blk + 4 + 4 * i);
        dot = dp4a(w & 0x0F0F0F0F, x[i], dot);
        dot = dp4a((w >> 4) & 0x0F0F0F0F, x[4 + i], dot);
    }
    return dx * (h2f(ld16(blk)) * (float)dot + h2f(ld16(blk + 2)) * (float)sx);
}

template <>
__device__ __forceinline__ float dot32_i8<FMT_Q8_0>(const u8* blk, const int* x, int sx, float dx) {
    int dot = 0;
    #pragma unroll
    for (int i = 0; i < 8; i++) dot = dp4a(ld32_a2(blk + 2 + 4 * i), x[i], dot);
    return dx * h2f(ld16(blk)) * (float)dot;
}

// A 32-weight block format on int8 activations in blocks of 32 (xd: one scale per 32): one lane
// per block, so a warp reads 32 consecutive blocks and their 1 KiB of activations (the block's
// warps take consecutive runs of 32).
template <int F, int T, int R>
__device__ __forceinline__ void b32_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                            const i8* __restrict__ xq,
                                            const float* __restrict__ xd,
                                            const int* __restrict__ xs, int cols, int t,
                                            int lane, int share, int split, float (&accs)[R][T]) {
    int nb = cols >> 5;
    #pragma unroll 4
    for (int b = lane + 32 * share; b < nb; b += 32 * split) {
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                const int4* xr = (const int4*)(xq + (long)r * cols + b * 32);
                int4 a = xr[0], c = xr[1];
                int x[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
                float dx = xd[(long)r * nb + b];
                int sx = F == FMT_Q8_0 ? 0 : xs[(long)r * nb + b];
                #pragma unroll
                for (int rr = 0; rr < R; rr++)
                    accs[rr][r] += dot32_i8<F>(w0 + rr * row_bytes + (long)b * Fmt<F>::BYTES, x, sx,
                                               dx);
            }
        }
    }
}

// Copies `nbytes` from global `src` into shared `dst` with 16-byte asynchronous copies
// (cp.async, compute 8.0+) by `nthreads` threads (this one is `tid`), and returns where src's
// first byte lies in dst: the copies start at the 16-byte boundary at or below src (dst keeps
// src's offset within 16 bytes, so 4- and 16-byte loads stay aligned) and may cover up to 15
// bytes past its end (device buffers have DEV_BUF_SLACK readable bytes after them). Every
// chunk is in flight at once; the caller waits (cp_async_wait_all) and synchronizes the threads.
__device__ __forceinline__ const u8* stage_bytes(u8* dst, const u8* src, long nbytes, int tid,
                                                 int nthreads) {
    unsigned long long a = (unsigned long long)src;
    int off = (int)(a & 15ull);
    const u8* base = src - off;
    long chunks = (nbytes + off + 15) >> 4;
    u32 s0 = smem_addr(dst);
    for (long c = tid; c < chunks; c += nthreads)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s0 + (u32)(c << 4)),
                     "l"(base + (c << 4))
                     : "memory");
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    return dst + off;
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Bytes of shared memory a staged int8 GEMV gives one staged unit (a warp's R rows, or a
// block's one row when split): 16-byte aligned with room for the 16-byte misalignment.
__device__ __forceinline__ long staged_unit_bytes(long row_bytes, int R) {
    return ((R * row_bytes + 15) & ~15l) + 16;
}

// The 256-weight IQ/TQ formats on int8 activations in blocks of 256 (iq_gemv.cuh; instantiated
// in the IQ program).
template <int F, int T, int R>
__device__ __forceinline__ void iq_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                           const i8* __restrict__ xq,
                                           const float* __restrict__ xd, int cols, int t,
                                           int lane, int share, int split, float (&accs)[R][T]);

// GEMV on int8 activations for format F and up to T rows, R consecutive output rows per warp
// (R > 1 keeps R rows' weight loads in flight at once and reads each activation once for them;
// only with split == 1 and row counts that are multiples of R). `split` is 1, 2 or GEMV_WARPS:
// with 1, each warp of a block computes R output rows (the fastest when the grid has several
// waves of warps); with more, each `split` warps of the block share one row's blocks and add
// their partial sums in a fixed order (more warps in flight for matrices of few rows; 2 where
// a row has too few blocks to keep four warps busy: the host picks, gemv.rs). With a
// second matrix w2 (same format and width, rows2 rows; 0 for none), rows rows .. rows + rows2 - 1
// of the grid multiply w2 into y2 (two projections of one input in one launch). With `accum`,
// the first matrix's results are added to y (y += x · Wᵀ: the residual add of the CPU's order,
// one f32 add of the same sum) instead of stored. xd holds the activations' scales [t, cols / act_block]
// (act_block = 256 for the K-quants, else 32; their count rounded up to 4) followed by their run
// sums [t, cols / 32] as i32 (ops::int8_side_bytes).
//
// STAGED: the weight rows are first copied whole into shared memory with cp.async (a warp its
// own R rows, or the block its one row when split: every byte in flight at once, each lane's
// copies contiguous 16-byte chunks), then the same dot products read them there; the host
// gives it staged_unit_bytes per warp (split 1) or per block (split) of dynamic shared memory.
template <int F, int T, int R, bool STAGED>
__device__ __forceinline__ void gemv_i8(const u8* __restrict__ w, const u8* __restrict__ w2,
                                        long row_bytes, const i8* __restrict__ xq,
                                        const float* __restrict__ xd, float* __restrict__ y,
                                        float* __restrict__ y2, int rows, int rows2, int cols,
                                        int t, int split, int accum) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int act_block = (F == FMT_Q4_K || F == FMT_Q6_K || is_iq256(F)) ? 256 : 32;
    const int* xs = (const int*)(xd + (((long)t * (cols / act_block) + 3) & ~3l));
    int row = (blockIdx.x * (GEMV_WARPS / split) + warp / split) * R;
    int share = warp % split;
    bool second = row >= rows;
    int lrow = second ? row - rows : row;
    bool valid = lrow < (second ? rows2 : rows) && (!second || w2 != 0);
    // A warp per row (split 1) has no block-wide step: an idle warp leaves now. With split
    // warps per row, every warp stays for the __syncthreads below.
    if (split == 1 && !valid) return;
    const u8* wr = (second ? w2 : w) + (long)(valid ? lrow : 0) * row_bytes;
    if constexpr (STAGED) {
        extern __shared__ __align__(16) u8 gemv_smem[];
        long unit = staged_unit_bytes(row_bytes, R);
        if (split == 1) {
            wr = stage_bytes(gemv_smem + warp * unit, wr, R * row_bytes, lane, 32);
            cp_async_wait_all();
            __syncwarp();
        } else {
            // The row's split warps copy it together.
            int u = warp / split, ut = threadIdx.x - u * 32 * split;
            if (valid) wr = stage_bytes(gemv_smem + u * unit, wr, row_bytes, ut, 32 * split);
            cp_async_wait_all();
            __syncthreads();
        }
    }
    float acc[R][T];
    #pragma unroll
    for (int rr = 0; rr < R; rr++)
        #pragma unroll
        for (int r = 0; r < T; r++) acc[rr][r] = 0.f;
    if (valid) {
        if constexpr (F == FMT_Q4_K) q4k_i8_rows<T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc);
        else if constexpr (F == FMT_Q6_K) q6k_i8_rows<T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc);
        else if constexpr (is_iq256(F)) iq_i8_rows<F, T, R>(wr, row_bytes, xq, xd, cols, t, lane, share, split, acc);
        else b32_i8_rows<F, T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc);
    }
    if (split == 1) {
        float* yy = second ? y2 : y;
        int n = second ? rows2 : rows, ac = second ? 0 : accum;
        #pragma unroll
        for (int rr = 0; rr < R; rr++) gemv_store<T>(acc[rr], yy, n, lrow + rr, t, ac);
        return;
    }
    __shared__ float partial[GEMV_WARPS][T];
    #pragma unroll
    for (int r = 0; r < T; r++) {
        float v = acc[0][r];
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) partial[warp][r] = v;
    }
    __syncthreads();
    // Thread u·T + r stores row u's result for activation row r: its split warps' partials
    // added in warp order.
    int units = GEMV_WARPS / split;
    if (threadIdx.x < units * T) {
        int u = threadIdx.x / T, r = threadIdx.x % T;
        int grow = blockIdx.x * units + u;
        bool sec = grow >= rows;
        int lr = sec ? grow - rows : grow;
        if (r < t && lr < (sec ? rows2 : rows) && (!sec || w2 != 0)) {
            float v = 0.f;
            for (int k = 0; k < split; k++) v += partial[u * split + k][r];
            float* yo = (sec ? y2 : y) + (long)r * (sec ? rows2 : rows) + lr;
            *yo = !sec && accum ? *yo + v : v;
        }
    }
}

#define GEMV_I8_KERNEL(F, NAME, T, R, STAGED, SUFFIX)                                          \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_##NAME##_i8##SUFFIX(     \
        const u8* w, const u8* w2, long row_bytes, const i8* xq, const float* xd, float* y,    \
        float* y2, int rows, int rows2, int cols, int t, int split, int accum) {               \
        PDL_ENTER();                                                                           \
        gemv_i8<F, T, R, STAGED>(w, w2, row_bytes, xq, xd, y, y2, rows, rows2, cols, t, split,  \
                                 accum);                                                       \
    }
#define GEMV_I8(F, NAME)                                                                       \
    GEMV_I8_KERNEL(F, NAME, 1, 1, false, _1) GEMV_I8_KERNEL(F, NAME, 4, 1, false, _4)           \
    GEMV_I8_KERNEL(F, NAME, 8, 1, false, _8) GEMV_I8_KERNEL(F, NAME, 1, 2, false, _r2_1)        \
    GEMV_I8_KERNEL(F, NAME, 1, 1, true, _s1)

#ifndef OXINFER_TEMPLATES_ONLY
GEMV_I8(FMT_Q4_K, q4_k)
GEMV_I8(FMT_Q6_K, q6_k)
GEMV_I8(FMT_Q4_0, q4_0)
GEMV_I8(FMT_Q4_1, q4_1)
GEMV_I8(FMT_Q8_0, q8_0)
#endif  // OXINFER_TEMPLATES_ONLY
