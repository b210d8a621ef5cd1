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

#ifndef GEMV_WARPS
#define GEMV_WARPS 4
#endif

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

// PTX prmt.b32 (default mode): byte n of the result is byte (s >> 4n) & 7 of {b, a} (a: bytes
// 0..3), or that byte's sign replicated when bit 4n + 3 of s is set. Unlike __byte_perm, the
// compiler adds no mask of the selector, so callers pass selectors whose top bits are clear.
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 s) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}

// The int8 dot product of 16 packed weights q[0..4] with 16 activations x.
__device__ __forceinline__ int dot16(const int* q, int4 x) {
    return dp4a(q[0], x.x, dp4a(q[1], x.y, dp4a(q[2], x.z, dp4a(q[3], x.w, 0))));
}

// The sum of 16 packed int8 activations x.
__device__ __forceinline__ int sum16(int4 x) {
    const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
    return dot16(ones, x);
}

// The 6-bit scales and mins of sub-blocks 2c and 2c + 1 (c = 0..3) of a Q4_K / Q5_K super-block
// from its 12 scale bytes held as three words (llama.cpp's byte-parallel unpacking): the four
// low sub-blocks' values are the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); the four
// high ones take their low 4 bits from bytes 8..11 and their top 2 from the top bits of bytes
// 0..3 / 4..7. Returns (scale 2c, scale 2c + 1, min 2c, min 2c + 1) as integers.
__device__ __forceinline__ int4 scale_min_k4_pair(int c, const u32 (&w)[3]) {
    u32 sc = c < 2 ? (w[0] & 0x3f3f3f3fu) : ((w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u));
    u32 mn = c < 2 ? (w[1] & 0x3f3f3f3fu)
                   : (((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u));
    int sh = (c & 1) * 16;
    return make_int4((int)((sc >> sh) & 0xffu), (int)((sc >> (sh + 8)) & 0xffu),
                     (int)((mn >> sh) & 0xffu), (int)((mn >> (sh + 8)) & 0xffu));
}

// The 6-bit scale and min of sub-block j (0..7) alone, as scale_min_k4_pair: (scale, min).
__device__ __forceinline__ int2 scale_min_k4_one(int j, const u32 (&w)[3]) {
    int4 p = scale_min_k4_pair(j >> 1, w);
    return (j & 1) ? make_int2(p.y, p.w) : make_int2(p.x, p.z);
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
// (the mins' term), decoding the pair's scales once. With `grouped` (T = 1 only) xq is in the
// grouped layout (common.cuh): lane 4 j + c's four chunks of block 8 g + j are then chunks
// 128 g + 4 rem i + 4 j + c, i = 0..3, so each of the four loads of the warp is 512
// contiguous bytes.
template <int T, int R>
__device__ __forceinline__ void q4k_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                            const i8* __restrict__ xq,
                                            const float* __restrict__ xd,
                                            const int* __restrict__ xs, int cols, int t,
                                            int lane, int share, int split, float (&accs)[R][T],
                                            int grouped) {
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
        uint4 qa = *(const uint4*)(blk + 16 + c * 32);
        uint4 qb = *(const uint4*)(blk + 32 + c * 32);
        int qw[8] = {(int)qa.x, (int)qa.y, (int)qa.z, (int)qa.w,
                     (int)qb.x, (int)qb.y, (int)qb.z, (int)qb.w};
        int k0 = b * 256 + c * 64;
        // The sub-block sums combined in integers (scale 63 x |dot| 60,960 x 2 < 2^24, so
        // the one conversion per term is exact: the same f32 values as scaling each sum).
        int4 sm4 = scale_min_k4_pair(c, sw);
        int lo[8], hi[8];
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            lo[i] = qw[i] & 0x0F0F0F0F;
            hi[i] = (qw[i] >> 4) & 0x0F0F0F0F;
        }
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                // The chunks' start and their distance apart, in bytes.
                const i8* xb = xq + (long)r * cols + k0;
                int st = 16;
                if (T == 1 && grouped) {
                    int g = b >> 3, rem = min(8, nb - (g << 3));
                    xb = xq + (((long)(g << 7) + lane) << 4);
                    st = rem << 6;
                }
                int4 x0 = *(const int4*)xb, x1 = *(const int4*)(xb + st);
                int4 x2 = *(const int4*)(xb + 2 * st), x3 = *(const int4*)(xb + 3 * st);
                int xlo[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                int xhi[8] = {x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
                int dl = 0, dh = 0;
                #pragma unroll
                for (int i = 0; i < 8; i++) {
                    dl = dp4a(lo[i], xlo[i], dl);
                    dh = dp4a(hi[i], xhi[i], dh);
                }
                int2 sm = *(const int2*)(xs + (long)r * (cols >> 5) + b * 8 + 2 * c);
                float dx = xd[(long)r * nb + b];
                int isc = sm4.x * dl + sm4.y * dh, imn = sm4.z * sm.x + sm4.w * sm.y;
                acc[r] += dx * (d * (float)isc - dmin * (float)imn);
            }
        }
      }
    }
}

// Q4_K as above with sixteen lanes per super-block (a warp takes two per step): lane l takes
// sub-block j = l / 2, half h = l % 2, i.e. 16 weights (the low nibbles of quant bytes
// 32 (j / 2) + 16 h .. + 16 for even j, the high ones for odd j) against the 16 int8
// activations 256 b + 16 l. So the lanes' activation loads are one contiguous run, and their
// quant loads are too (pairs of lanes read the same 16 bytes): the four-lane layout's loads
// strode 64 bytes per lane, several times the L1 wavefronts per byte. The half-h = 0 lane adds
// the sub-block's mins term (its precomputed sum of 32 activations).
template <int T, int R>
__device__ __forceinline__ void q4k16_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                              const i8* __restrict__ xq,
                                              const float* __restrict__ xd,
                                              const int* __restrict__ xs, int cols, int t,
                                              int lane, int share, int split,
                                              float (&accs)[R][T]) {
    int nb = cols >> 8;
    int l = lane & 15, j = l >> 1, h = l & 1;
    int nib = (j & 1) * 4;
    #pragma unroll 2
    for (int b = (lane >> 4) + 2 * share; b < nb; b += 2 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * 144;
        u32 dm = *(const u32*)blk;
        const u32* s32 = (const u32*)(blk + 4);
        u32 sw[3] = {s32[0], s32[1], s32[2]};
        uint4 q = *(const uint4*)(blk + 16 + 32 * (j >> 1) + 16 * h);
        int qv[4] = {(int)((q.x >> nib) & 0x0F0F0F0Fu), (int)((q.y >> nib) & 0x0F0F0F0Fu),
                     (int)((q.z >> nib) & 0x0F0F0F0Fu), (int)((q.w >> nib) & 0x0F0F0F0Fu)};
        int2 scm = scale_min_k4_one(j, sw);
        float ds = h2f((u16)(dm & 0xffffu)) * (float)scm.x;
        float dm_ = h == 0 ? h2f((u16)(dm >> 16)) * (float)scm.y : 0.f;
        int k0 = b * 256 + 16 * l;
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                int4 x = *(const int4*)(xq + (long)r * cols + k0);
                int dot = dot16(qv, x);
                int sm = h == 0 ? xs[(long)r * (cols >> 5) + b * 8 + j] : 0;
                acc[r] += xd[(long)r * nb + b] * (ds * (float)dot - dm_ * (float)sm);
            }
        }
      }
    }
}

// Q6_K on int8 activations (the CPU's q6_K x q8_K dot, activations as for Q4_K) with sixteen
// lanes per super-block (a warp takes two per step), the layout of q4k16_i8_rows: lane l takes the 16 weights 16 l .. + 16 (half n = l / 8, quarter qu = (l % 8)
// / 2, positions l0 = 16 (l % 2) .. + 16 of the quarter: one scale), i.e. 16 bytes of low quants
// (the low nibbles of ql[64 n + 32 (qu % 2) + l0 ..] for qu < 2, the high ones above), 16 of high
// bits (qh[32 n + l0 ..], bits 2 qu) and 16 contiguous activations, whose sum (4 dp4a) gives
// the -32 offset's term. Blocks are 210 bytes, so the quant words are read 2-byte aligned.
// With `grouped` (T = 1 only) xq is in the grouped layout (common.cuh), where chunk l of
// block b lies at grouped_offset(b, nb, 16 l).
template <int T, int R>
__device__ __forceinline__ void q6k16_i8_rows(const u8* __restrict__ w0, long row_bytes,
                                              const i8* __restrict__ xq,
                                              const float* __restrict__ xd,
                                              const int* __restrict__ xs, int cols, int t,
                                              int lane, int share, int split,
                                              float (&accs)[R][T], int grouped) {
    int nb = cols >> 8;
    int l = lane & 15, n = l >> 3, qu = (l & 7) >> 1, l0 = 16 * (l & 1);
    int nib = (qu >> 1) * 4, hsh = 2 * qu;
    #pragma unroll 2
    for (int b = (lane >> 4) + 2 * share; b < nb; b += 2 * split) {
      #pragma unroll
      for (int rr = 0; rr < R; rr++) {
        float (&acc)[T] = accs[rr];
        const u8* blk = w0 + rr * row_bytes + (long)b * 210;
        const u8* ql = blk + n * 64 + (qu & 1) * 32 + l0;
        const u8* qh = blk + 128 + n * 32 + l0;
        int q6[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int lo = (ld32_a2(ql + 4 * i) >> nib) & 0x0F0F0F0F;
            q6[i] = lo | (((ld32_a2(qh + 4 * i) >> hsh) & 0x03030303) << 4);
        }
        float s = h2f(*(const u16*)(blk + 208)) * (float)((const i8*)(blk + 192))[n * 8 + 2 * qu + (l & 1)];
        int k0 = b * 256 + 16 * l;
        #pragma unroll
        for (int r = 0; r < T; r++) {
            if (T == 1 || r < t) {
                long xo = T == 1 && grouped ? grouped_offset(b, nb, 16 * l) : (long)r * cols + k0;
                int4 x = *(const int4*)(xq + xo);
                int dot = dot16(q6, x), sx = sum16(x);
                acc[r] += xd[(long)r * nb + b] * (s * (float)(dot - 32 * sx));
            }
        }
      }
    }
}

#include "dot32.cuh"

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

// One bulk copy (cp.async.bulk, the Hopper TMA; compute 9.0+) of `nbytes` from global `src`
// into shared `dst`, completion counted on the mbarrier `bar` (initialized by mbar_init for one
// arrival): the alternative to stage_bytes where one thread stages a whole unit. As there, the
// copy starts at the 16-byte boundary at or below src and covers whole 16-byte chunks; returns
// where src's first byte lies in dst. The callers wait with mbar_wait(bar, 0).
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void bulk_stage(u8* dst, const u8* src, long nbytes,
                                           unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    int off = (int)((unsigned long long)src & 15ull);
    u32 bytes = (u32)((nbytes + off + 15) & ~15l);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];\n" ::"r"(smem_addr(dst)),
        "l"(src - off), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
#endif
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, u32 parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
#endif
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

// IQ4_XS at one row with four lanes per super-block (iq_gemv.cuh; FMT_IQ4_XS_W's kernels).
template <int R>
__device__ __forceinline__ void iq4xs_wide_rows(const u8* __restrict__ w0, long row_bytes,
                                                const i8* __restrict__ xq,
                                                const float* __restrict__ xd, int cols, int lane,
                                                int share, int split, float (&accs)[R][1]);

// IQ4_NL at several activation rows, its weights decoded once per block (iq_gemv.cuh).
template <int T, int R>
__device__ __forceinline__ void iq4nl_rows(const u8* __restrict__ w0, long row_bytes,
                                           const i8* __restrict__ xq,
                                           const float* __restrict__ xd, int cols, int t,
                                           int lane, int share, int split, float (&accs)[R][T]);

// GEMV on int8 activations for format F and up to T rows, R consecutive output rows per warp
// (R > 1 keeps R rows' weight loads in flight at once and reads each activation once for them;
// only with split == 1 and row counts that are multiples of R). `split` is 1, 2 or GEMV_WARPS:
// with 1, each warp of a block computes R output rows (the fastest when the grid has several
// waves of warps); with more, each `split` warps of the block share one row's blocks and add
// their partial sums in a fixed order (more warps in flight for matrices of few rows; 2 where
// a row has too few blocks to keep four warps busy: the host picks, gemv.rs). The grid's rows
// run through the matrices of m in order (up to three projections of one input in one launch:
// query, key and value; gate and up). With `accum`, the first matrix's results are added to
// its y (y += x · Wᵀ: the residual add of the CPU's order, one f32 add of the same sum) instead
// of stored. xd holds the activations' scales [t, cols / act_block]
// (act_block = 256 for the K-quants, else 32; their count rounded up to 4) followed by their run
// sums [t, cols / 32] as i32 (ops::int8_side_bytes). With `grouped` (one row, Q4_K and Q6_K;
// ignored by the other formats) the int8 values are in the grouped layout (common.cuh).
//
// STAGED: the weight rows are first copied whole into shared memory with cp.async (a warp its
// own R rows, or the block its one row when split: every byte in flight at once, each lane's
// copies contiguous 16-byte chunks), then the same dot products read them there; the host
// gives it staged_unit_bytes per warp (split 1) or per block (split) of dynamic shared memory.
//
// EARLY (with STAGED): the kernel was entered with PDL_LAUNCH only, and waits for the previous
// kernels (PDL_WAIT) after issuing its weight copies and before reading anything they write (the
// activations, y): the weights are never written during a pass, so the blocks resident while
// the previous kernel runs fetch their rows during it.
//
// Lane layouts (measured on an H200, docs/gpu.md): one activation row takes Q4_K with four lanes
// per super-block (q4k_i8_rows: sixteen lanes were 20 % slower there, bound by their
// instruction count), several take it with sixteen (q4k16_i8_rows: coalesced activation
// loads, +17-47 % at 4-8 rows); Q6_K takes sixteen lanes at any row count (q6k16_i8_rows).
// The matrices of one int8 GEMV launch: up to three weights of one format and width over the
// same input (w2 / w3 null when absent), their outputs and row counts; grid rows run through
// them in order.
struct GemvMats {
    const u8* w[3];
    float* y[3];
    int rows[3];
    // Bytes of one row of the third matrix: another format's when the kernel's F3 is not F
    // (gemv_i8's mixed launch), else the same as the others' (unused).
    long row_bytes3;
    // Element k (0..2) by selects, not by a dynamic index (which would copy the parameter
    // struct to local memory).
    __device__ __forceinline__ const u8* wk(int k) const { return k == 0 ? w[0] : k == 1 ? w[1] : w[2]; }
    __device__ __forceinline__ float* yk(int k) const { return k == 0 ? y[0] : k == 1 ? y[1] : y[2]; }
    __device__ __forceinline__ int rowsk(int k) const { return k == 0 ? rows[0] : k == 1 ? rows[1] : rows[2]; }
};

// Which matrix grid row `row` falls in (3 past the last) and its row there.
__device__ __forceinline__ int2 gemv_mat_row(const GemvMats& m, int row) {
    int k = 0;
    #pragma unroll
    for (int i = 0; i < 2; i++)
        if (k == i && row >= m.rows[i]) {
            row -= m.rows[i];
            k = i + 1;
        }
    if (k == 2 && row >= m.rows[2]) k = 3;
    if (k < 3 && m.wk(k) == nullptr) k = 3;
    return make_int2(k, row);
}

// The dot products of one warp's R rows of format F (the dispatch of gemv_i8 below).
template <int F, int T, int R>
__device__ __forceinline__ void gemv_i8_dots(const u8* __restrict__ wr, long row_bytes,
                                             const i8* __restrict__ xq,
                                             const float* __restrict__ xd,
                                             const int* __restrict__ xs, int cols, int t,
                                             int lane, int share, int split, float (&acc)[R][T],
                                             int grouped) {
    if constexpr (F == FMT_Q4_K && T == 1) q4k_i8_rows<T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc, grouped);
    else if constexpr (F == FMT_Q4_K) q4k16_i8_rows<T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc);
    else if constexpr (F == FMT_Q6_K) q6k16_i8_rows<T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc, grouped);
    else if constexpr (F == FMT_IQ4_XS_W && T == 1) iq4xs_wide_rows<R>(wr, row_bytes, xq, xd, cols, lane, share, split, acc);
    else if constexpr (F == FMT_IQ4_NL && T > 1) iq4nl_rows<T, R>(wr, row_bytes, xq, xd, cols, t, lane, share, split, acc);
    else if constexpr (is_iq256(F)) iq_i8_rows<F, T, R>(wr, row_bytes, xq, xd, cols, t, lane, share, split, acc);
    else b32_i8_rows<F, T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc);
}

// F3: the format of the third matrix of m (F: all three). A mixed launch (F3 != F) joins a
// value projection stored in another format than the query's and key's (Q8_0 beside Q5_0,
// Q6_K beside Q4_K in llama.cpp's mixes); both formats must take the same int8 input layout.
template <int F, int T, int R, bool STAGED, bool EARLY = false, int F3 = F, bool BULK = false>
__device__ __forceinline__ void gemv_i8(const GemvMats& m, long row_bytes,
                                        const i8* __restrict__ xq,
                                        const float* __restrict__ xd, int cols, int t, int split,
                                        int accum, int grouped) {
    static_assert(STAGED || !EARLY, "only a staged GEMV fetches its weights early");
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int act_block = (F == FMT_Q4_K || F == FMT_Q6_K || is_iq256(F)) ? 256 : 32;
    const int* xs = (const int*)(xd + (((long)t * (cols / act_block) + 3) & ~3l));
    int row = (blockIdx.x * (GEMV_WARPS / split) + warp / split) * R;
    int share = warp % split;
    int2 mr = gemv_mat_row(m, row);
    int mat = mr.x, lrow = mr.y;
    bool valid = mat < 3;
    // A warp per row (split 1) has no block-wide step: an idle warp leaves now. With split
    // warps per row, every warp stays for the __syncthreads below.
    if (split == 1 && !valid) return;
    // This warp's matrix's row bytes (a mixed launch's third matrix has its own).
    const bool third = F3 != F && mat == 2;
    const long rb = third ? m.row_bytes3 : row_bytes;
    const u8* wr = valid ? m.wk(mat) + (long)lrow * rb : m.w[0];
    if constexpr (STAGED) {
        extern __shared__ __align__(16) u8 gemv_smem[];
        long unit = staged_unit_bytes(F3 == F ? row_bytes : max(row_bytes, m.row_bytes3), R);
        if constexpr (BULK) {
            // One bulk copy per unit, issued by its first thread (see bulk_stage).
            __shared__ unsigned long long gemv_bars[GEMV_WARPS];
            int u = warp / split;
            bool first = threadIdx.x == u * 32 * split;
            if (first) mbar_init(&gemv_bars[u]);
            if (split == 1) __syncwarp(); else __syncthreads();
            u8* dst = gemv_smem + u * unit;
            if (first && valid) bulk_stage(dst, wr, R * rb, &gemv_bars[u]);
            wr = dst + (int)((unsigned long long)wr & 15ull);
            if constexpr (EARLY) PDL_WAIT();
            if (valid) mbar_wait(&gemv_bars[u], 0);
        } else if (split == 1) {
            wr = stage_bytes(gemv_smem + warp * unit, wr, R * rb, lane, 32);
            if constexpr (EARLY) PDL_WAIT();
            cp_async_wait_all();
            __syncwarp();
        } else {
            // The row's split warps copy it together (an idle unit copies at most the 16
            // bytes around row 0's start: wr then points into shared memory on every path,
            // so the dot products read it with shared loads, not generic ones).
            int u = warp / split, ut = threadIdx.x - u * 32 * split;
            wr = stage_bytes(gemv_smem + u * unit, wr, valid ? rb : 0, ut, 32 * split);
            if constexpr (EARLY) PDL_WAIT();
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
        if constexpr (F3 != F) {
            if (third) gemv_i8_dots<F3, T, R>(wr, rb, xq, xd, xs, cols, t, lane, share, split, acc, grouped);
            else gemv_i8_dots<F, T, R>(wr, rb, xq, xd, xs, cols, t, lane, share, split, acc, grouped);
        } else {
            gemv_i8_dots<F, T, R>(wr, row_bytes, xq, xd, xs, cols, t, lane, share, split, acc, grouped);
        }
    }
    if (split == 1) {
        int ac = mat == 0 ? accum : 0;
        #pragma unroll
        for (int rr = 0; rr < R; rr++)
            gemv_store<T>(acc[rr], m.yk(mat), m.rowsk(mat), lrow + rr, t, ac);
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
        int2 gr = gemv_mat_row(m, blockIdx.x * units + u);
        if (r < t && gr.x < 3) {
            float v = 0.f;
            for (int k = 0; k < split; k++) v += partial[u * split + k][r];
            float* yo = m.yk(gr.x) + (long)r * m.rowsk(gr.x) + gr.y;
            *yo = gr.x == 0 && accum ? *yo + v : v;
        }
    }
}

// Blocks per multiprocessor an int8 GEMV entry point is compiled for (__launch_bounds__' second
// argument, which caps its registers at 65536 / (128 n)): 12 for the one-row IQ4_XS kernels,
// whose loop otherwise takes 42 registers (10 blocks resident instead of 12: sm_90 allocates
// registers per warp in units of 256) and at 40 needs no spill (IQ4_NL's one-row kernels and
// FMT_IQ4_XS_W's spill at 40); 0 (no bound, no .minnctapersm: a bound of 1 changes the
// registers ptxas gives) for the others.
#ifndef GEMV_Q4K_MIN_BLOCKS
#define GEMV_Q4K_MIN_BLOCKS 0
#endif
#define GEMV_I8_MIN_BLOCKS(F, T, R)                                                            \
    ((F) == FMT_IQ4_XS && (T) == 1 && (R) == 1   ? 12                                          \
     : (F) == FMT_Q4_K && (T) == 1 && (R) == 1 ? GEMV_Q4K_MIN_BLOCKS                           \
                                               : 0)

// An int8 GEMV entry point. EARLY (staged only): the kernel enters with PDL_LAUNCH alone and
// waits inside gemv_i8, after issuing its weight copies. F3: the third matrix's format (a mixed
// launch when it is not F).
#define GEMV_I8_KERNEL_F3(F, F3, NAME, T, R, STAGED, EARLY, SUFFIX)                             \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, GEMV_I8_MIN_BLOCKS(F, T, R)) gemv_##NAME##_i8##SUFFIX(     \
        GemvMats m, long row_bytes, const i8* xq, const float* xd, int cols, int t, int split, \
        int accum, int grouped) {                                                              \
        if (EARLY) {                                                                           \
            PDL_LAUNCH();                                                                      \
        } else {                                                                               \
            PDL_ENTER();                                                                       \
        }                                                                                      \
        gemv_i8<F, T, R, STAGED, EARLY, F3>(m, row_bytes, xq, xd, cols, t, split, accum,       \
                                            grouped);                                          \
    }
#define GEMV_I8_KERNEL(F, NAME, T, R, STAGED, EARLY, SUFFIX)                                   \
    GEMV_I8_KERNEL_F3(F, F, NAME, T, R, STAGED, EARLY, SUFFIX)
// The one-row staged early entry point whose units are staged by one bulk copy each (BULK:
// compute 9.0+ only, the host never picks it on older devices, where bulk_stage is empty).
#define GEMV_I8_KERNEL_BULK(F, F3, NAME)                                                       \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, GEMV_I8_MIN_BLOCKS(F, 1, 1))  \
        gemv_##NAME##_i8_s1b(                                                                  \
        GemvMats m, long row_bytes, const i8* xq, const float* xd, int cols, int t, int split, \
        int accum, int grouped) {                                                              \
        PDL_LAUNCH();                                                                          \
        gemv_i8<F, 1, 1, true, true, F3, true>(m, row_bytes, xq, xd, cols, t, split, accum,    \
                                               grouped);                                       \
    }
#define GEMV_I8(F, NAME)                                                                       \
    GEMV_I8_KERNEL(F, NAME, 1, 1, false, false, _1)                                            \
    GEMV_I8_KERNEL(F, NAME, 4, 1, false, false, _4)                                            \
    GEMV_I8_KERNEL(F, NAME, 8, 1, false, false, _8)                                            \
    GEMV_I8_KERNEL(F, NAME, 1, 2, false, false, _r2_1)                                         \
    GEMV_I8_KERNEL(F, NAME, 1, 1, true, false, _s1)                                            \
    GEMV_I8_KERNEL(F, NAME, 1, 1, true, true, _s1e)                                            \
    GEMV_I8_KERNEL_BULK(F, F, NAME)
// The one-row entry points of a mixed pair (the third matrix in format F3): plain, staged,
// staged early.
#define GEMV_I8_MIXED(F, F3, NAME)                                                             \
    GEMV_I8_KERNEL_F3(F, F3, NAME, 1, 1, false, false, _1)                                     \
    GEMV_I8_KERNEL_F3(F, F3, NAME, 1, 1, true, false, _s1)                                     \
    GEMV_I8_KERNEL_F3(F, F3, NAME, 1, 1, true, true, _s1e)                                     \
    GEMV_I8_KERNEL_BULK(F, F3, NAME)

#ifndef OXINFER_TEMPLATES_ONLY
// The mixes of llama.cpp's quantization types (kernels.rs, INT8_GEMV_MIXES).
GEMV_I8_MIXED(FMT_Q5_0, FMT_Q8_0, q5_0_q8_0)
GEMV_I8_MIXED(FMT_Q4_K, FMT_Q6_K, q4_k_q6_k)
GEMV_I8(FMT_Q4_K, q4_k)
GEMV_I8(FMT_Q6_K, q6_k)
GEMV_I8(FMT_Q4_0, q4_0)
GEMV_I8(FMT_Q4_1, q4_1)
GEMV_I8(FMT_Q8_0, q8_0)
GEMV_I8(FMT_Q5_0, q5_0)
GEMV_I8(FMT_Q5_1, q5_1)
#endif  // OXINFER_TEMPLATES_ONLY
