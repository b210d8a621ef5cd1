// Causal attention of a prompt on the tensor cores (flash attention 2's scheme): scores never
// reach memory. A block of FA_WARPS warps takes FA_BQ query rows of one head (16 per warp) and
// walks that head's keys in tiles of BKV: S = Q . K^T and O += P . V are mma.sync m16n8k16
// products with f16 inputs and f32 accumulation, the online softmax (running max and sum per
// row) runs on S in registers, and P goes from the score accumulators straight into the A
// fragments of the P . V product. GQA, sliding window and soft-cap as attention_f32.
//
// q [t, H*HD], k/v [pos0+t, KVH*HD] (q f32, rows 16-byte aligned; k/v in the cache's element
// type E, common.cuh: f32, f16, bf16 (rows 8-byte aligned) or Q8_0 / Q4_0 blocks), out [t, H*HD]. Q, K and V are
// rounded to f16 in shared memory (an f16 cache's rows are copied as they are) (Q after the scale: |q . scale| and |k|, |v| must stay below
// 65504), so scores and outputs carry f16 rounding (~2^-11 relative); the exact path keeps
// attention_f32. Grid (ceil(t / FA_BQ), H), FA_WARPS * 32 threads, fa_smem_bytes(HD) bytes of
// dynamic shared memory (ops.rs).

#include "common.cuh"
#include "mma.cuh"

#define FA_WARPS 4
#define FA_BQ (16 * FA_WARPS)

// Keys per tile: 64, or 32 for heads over 128 (their output accumulators need the registers).
template <int HD>
struct FaGeom {
    static constexpr int BKV = HD > 128 ? 32 : 64;
    // Shared rows padded by 8 f16 so that ldmatrix's eight row addresses hit distinct banks.
    static constexpr int LD = HD + 8;
};

// Values i .. i + 3 of element type E at p (i a multiple of 4), as f32.
template <typename E>
__device__ __forceinline__ float4 fa_ld4(const typename E::T* p, long i) {
    if constexpr (E::CODE == KvF32::CODE) {
        return *(const float4*)(p + i);
    } else if constexpr (E::CODE == KvF16::CODE || E::CODE == KvBf16::CODE) {
        uint2 h = *(const uint2*)(p + i);
        return make_float4(E::bits((u16)(h.x & 0xffffu)), E::bits((u16)(h.x >> 16)),
                           E::bits((u16)(h.y & 0xffffu)), E::bits((u16)(h.y >> 16)));
    } else {
        return make_float4(E::ld(p, i), E::ld(p, i + 1), E::ld(p, i + 2), E::ld(p, i + 3));
    }
}

// Loads rows r0 .. r0 + ROWS - 1 (row r at src + r * stride + c0; rows from `limit` on as zeros)
// of HD values of type E each, times mul, into s as f16 (rows LD apart). Up to eight loads per
// thread are issued before their conversions.
template <int ROWS, int HD, typename E = KvF32>
__device__ __forceinline__ void fa_load(const typename E::T* __restrict__ src, long stride, int r0,
                                        int limit, int c0, u16* s, float mul) {
    constexpr int Q4 = HD / 4;
    constexpr int PER = ROWS * Q4 / (32 * FA_WARPS);
    constexpr int CH = PER < 8 ? PER : 8;
    #pragma unroll
    for (int base = 0; base < PER; base += CH) {
        float4 v[CH];
        #pragma unroll
        for (int c = 0; c < CH; c++) {
            int idx = threadIdx.x + (base + c) * 32 * FA_WARPS;
            int r = idx / Q4, col = (idx % Q4) * 4;
            v[c] = r0 + r < limit ? fa_ld4<E>(src, (long)(r0 + r) * stride + c0 + col)
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        #pragma unroll
        for (int c = 0; c < CH; c++) {
            int idx = threadIdx.x + (base + c) * 32 * FA_WARPS;
            int r = idx / Q4, col = (idx % Q4) * 4;
            *(uint2*)(s + r * FaGeom<HD>::LD + col) =
                make_uint2(pack_h2(v[c].x * mul, v[c].y * mul), pack_h2(v[c].z * mul, v[c].w * mul));
        }
    }
}

template <int HD, typename E>
__device__ __forceinline__ void flash_attention(const float* __restrict__ q,
                                                const typename E::T* __restrict__ k,
                                                const typename E::T* __restrict__ v,
                                                float* __restrict__ out, int t, int pos0, int H,
                                                int KVH, float scale, int window, float softcap) {
    constexpr int BKV = FaGeom<HD>::BKV, LD = FaGeom<HD>::LD;
    constexpr int NS = BKV / 8;  // score tiles (8 keys each) per warp
    constexpr int NO = HD / 8;   // output tiles (8 values each) per warp
    constexpr float LOG2E = 1.4426950408889634f;
    const float NEG_INF = __int_as_float(0xff800000);
    extern __shared__ __align__(16) u16 fa_smem[];
    u16* qs = fa_smem;
    u16* ks = qs + FA_BQ * LD;
    u16* vs = ks + BKV * LD;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    int h = blockIdx.y, kvh = h / (H / KVH);
    // The longest tiles (the last rows see the most keys) start first.
    int i0 = (gridDim.x - 1 - blockIdx.x) * FA_BQ;
    long q_row = (long)H * HD, kv_row = (long)KVH * HD;
    // Scores in log2 units (exp2 below): without a soft-cap, log2(e) rides in q with the scale.
    fa_load<FA_BQ, HD>(q, q_row, i0, t, h * HD, qs, softcap > 0.f ? scale : scale * LOG2E);
    int last = pos0 + min(t, i0 + FA_BQ) - 1;
    int first = window > 0 ? max(0, pos0 + i0 - window + 1) : 0;
    int n_keys = pos0 + t;
    int wr = warp * 16;
    // This lane's two query rows: wr + g (accumulator values 0, 1) and wr + g + 8 (2, 3).
    int row0 = i0 + wr + g;
    float o[NO][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    #pragma unroll
    for (int d = 0; d < NO; d++)
        #pragma unroll
        for (int c = 0; c < 4; c++) o[d][c] = 0.f;
    for (int j0 = first - first % BKV; j0 <= last; j0 += BKV) {
        __syncthreads();  // every warp is done with the previous tile
        fa_load<BKV, HD, E>(k, kv_row, j0, n_keys, kvh * HD, ks, 1.f);
        fa_load<BKV, HD, E>(v, kv_row, j0, n_keys, kvh * HD, vs, 1.f);
        __syncthreads();
        float s[NS][4];
        #pragma unroll
        for (int j = 0; j < NS; j++)
            #pragma unroll
            for (int c = 0; c < 4; c++) s[j][c] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < HD; kk += 16) {
            u32 a[4];
            ldsm4(a, smem_addr(qs + (wr + (lane & 15)) * LD + kk + (lane >> 4) * 8));
            #pragma unroll
            for (int j = 0; j < NS; j += 2) {
                u32 r[4];
                int key = j * 8 + (lane & 7) + (lane >> 4) * 8;
                ldsm4(r, smem_addr(ks + key * LD + kk + ((lane >> 3) & 1) * 8));
                mma_f16(s[j], a, r);
                mma_f16(s[j + 1], a, r + 2);
            }
        }
        // Mask, soft-cap, and the running max of each of the lane's two rows over the quad.
        float mx[2] = {m[0], m[1]};
        #pragma unroll
        for (int j = 0; j < NS; j++) {
            #pragma unroll
            for (int c = 0; c < 4; c++) {
                int key = j0 + j * 8 + tq * 2 + (c & 1);
                int qi = row0 + (c >> 1) * 8, pos = pos0 + qi;
                float x = s[j][c];
                if (softcap > 0.f) x = softcap * tanhf(x / softcap) * LOG2E;
                bool seen = qi < t && key <= pos && (window <= 0 || pos - key < window);
                s[j][c] = seen ? x : NEG_INF;
                mx[c >> 1] = fmaxf(mx[c >> 1], s[j][c]);
            }
        }
        float base[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // A row that has seen no key yet keeps m = -inf: exponents from 0 (all p are 0).
            base[r] = mx[r] == NEG_INF ? 0.f : mx[r];
            float corr = exp2f(m[r] - base[r]);
            m[r] = mx[r];
            l[r] *= corr;
            #pragma unroll
            for (int d = 0; d < NO; d++) {
                o[d][2 * r] *= corr;
                o[d][2 * r + 1] *= corr;
            }
        }
        #pragma unroll
        for (int j = 0; j < NS; j++) {
            #pragma unroll
            for (int c = 0; c < 4; c++) {
                s[j][c] = exp2f(s[j][c] - base[c >> 1]);
                l[c >> 1] += s[j][c];
            }
        }
        // O += P . V: the score accumulators of keys 16 kk .. 16 kk + 15 are the A fragment.
        #pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
            u32 a[4] = {pack_h2(s[2 * kk][0], s[2 * kk][1]), pack_h2(s[2 * kk][2], s[2 * kk][3]),
                        pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                        pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int d = 0; d < NO; d += 2) {
                u32 r[4];
                int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm4_t(r, smem_addr(vs + key * LD + d * 8 + (lane >> 4) * 8));
                mma_f16(o[d], a, r);
                mma_f16(o[d + 1], a, r + 2);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int qi = row0 + r * 8;
        if (qi >= t) continue;
        float inv = 1.f / l[r];
        float* dst = out + (long)qi * q_row + h * HD + tq * 2;
        #pragma unroll
        for (int d = 0; d < NO; d++)
            *(float2*)(dst + d * 8) = make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
}

#define FLASH_ATTENTION_KERNEL(HD, E, SUFFIX)                                                   \
    extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attention_h##HD##SUFFIX(  \
        const float* __restrict__ q, const E::T* __restrict__ k, const E::T* __restrict__ v,   \
        float* __restrict__ out, int t, int pos0, int H, int KVH, float scale, int window,     \
        float softcap) {                                                                       \
        flash_attention<HD, E>(q, k, v, out, t, pos0, H, KVH, scale, window, softcap);         \
    }

// Every head size of FLASH_ATTENTION_HEAD_DIMS (kernels.rs) for every cache type.
#define FLASH_ATTENTION_KERNELS(E, SUFFIX)                                                      \
    FLASH_ATTENTION_KERNEL(64, E, SUFFIX)                                                      \
    FLASH_ATTENTION_KERNEL(128, E, SUFFIX)                                                     \
    FLASH_ATTENTION_KERNEL(256, E, SUFFIX)
KV_TYPES(FLASH_ATTENTION_KERNELS)
