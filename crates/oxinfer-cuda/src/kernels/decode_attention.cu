// The decode attention of rows that are each one sequence's only new row, in one kernel: what
// qkv_post, attention_split_f32 and attention_combine_q8 do in three (stack.cu, attention.cu),
// with the same arithmetic in the same order, so the output and its int8 blocks are theirs bit
// for bit. Saves two launches per layer and the partials' round trip through global memory.

#include "head_post.cuh"
#include "split_softmax.cuh"

// Most warps per block.
#define DA_MAX_WARPS 16

// Phase marks for tools/bench/cuda/decode_attention_bench.cu (compiled with DA_TRACE there,
// never by the engine): lane 0 of each warp stores clock64() at mark n of 8 into
// da_trace[(block · DA_MAX_WARPS + warp) · 8 + n].
#ifdef DA_TRACE
__device__ long long da_trace[4096 * DA_MAX_WARPS * 8];
#define DA_MARK(n)                                                                             \
    do {                                                                                       \
        if ((threadIdx.x & 31) == 0)                                                           \
            da_trace[((long)blockIdx.x * DA_MAX_WARPS + (threadIdx.x >> 5)) * 8 + (n)] =       \
                clock64();                                                                     \
    } while (0)
#else
#define DA_MARK(n) do {} while (0)
#endif

// One block per L = NH · hd consecutive values of out [t, H * hd] (NH heads of one row r; L a
// multiple of the int8 block B when quantizing): W = blockDim / (32 NH) warps per head.
//
// 1. Warps 0, 1 and 2 of head i (fewer warps take two or three of these in turn) post-process
//    in parallel (head_post: bias, QK-norm, RoPE; the rotations krot / vrot): the key and the
//    value head of row r that head i reads, into shared memory in the cache's element type,
//    and when head i is the first query head of its KV group also into the cache at the row's
//    position (exactly one block writes each KV head of a row; no other block reads that cache
//    row: each reads its own shared copy); and head i's query (qkv_post's, rotated by krot),
//    which every warp of the head then reads from shared memory.
// 2. Warp w of head i runs slices w, w + W, ... of the S slices of the keys the row sees
//    (slice_keys, softmax_keys: the same slices and order as attention_split_f32; the newest
//    key from the shared copy) and leaves each slice's partial in shared memory.
// 3. Warp 0 of head i merges the S partials (combine_head), undoes the values' rotation vrot,
//    and stores the head into out; with q8 non-null the block's warps then quantize its L / B
//    int8 blocks (warp_quant_block, attention_combine_q8's layout; gnb as there).
//
// Arguments as qkv_post's (q, kn, vn: the rows' raw projections; q is not written) and
// attention_split_f32's (kv, rseq, rpos: each row's cache and position, read on the device).
// Dynamic shared memory: NH · S · (hd + 2) + NH · 512 + L + 256 · W · NH floats
// (decode_attention.rs: fused_layout). The kernel enters with PDL_LAUNCH and, with `early`,
// loads what the pass's kernels never write before it waits for the previous kernels (PRE
// below); without, it waits first.
template <int ME, int KC, typename E>
__device__ __forceinline__ void decode_attention(
    const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ vn,
    const unsigned long long* __restrict__ kv, const int* __restrict__ rseq,
    const int* __restrict__ rpos, const float* __restrict__ qb, const float* __restrict__ kb,
    const float* __restrict__ vb, const float* __restrict__ qn, const float* __restrict__ kw,
    const float* __restrict__ cs, const float* __restrict__ sn, int half, int interleaved,
    float eps, int krot, int vrot, float* __restrict__ out, i8* __restrict__ q8,
    float* __restrict__ dq, int* __restrict__ qs, int B, int gnb, int H, int KVH, int hd,
    float scale, int window, float softcap, int S, int NH) {
    extern __shared__ float da_smem[];
    DA_MARK(0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int W = nw / NH, i = warp / W, w = warp % W;
    int per = hd >> 5, L = NH * hd;
    int q_row = H * hd, kv_row = KVH * hd, group = H / KVH;
    int spans = q_row / L;
    int r = blockIdx.x / spans, h = (blockIdx.x % spans) * NH + i, kvh = h / group;
    // Shared memory: the partials, then per head the new key and value (256 floats each, room
    // for any element type), the merged heads (L floats), per warp 256 floats of RoPE scratch.
    float* part = da_smem;
    float* fresh = part + NH * S * (hd + 2);
    float* vals = fresh + NH * 512;
    float* scratch = vals + L + warp * 256;
    typename E::T* knew = (typename E::T*)(fresh + i * 512);
    typename E::T* vnew = (typename E::T*)(fresh + i * 512 + 256);
    // Before waiting for the q/k/v products (PRE): what the pass's kernels never write, i.e.
    // the row's position and cache (per-pass uploads), the RoPE entries and the QK-norm gains.
    int pos = rpos[r];
    const float* c = cs + (long)r * half;
    const float* s = sn + (long)r * half;
    int seq = rseq[r];
    void* kc = (void*)kv[2 * seq];
    void* vc = (void*)kv[2 * seq + 1];
    HeadPre pk, pq;
    if (w == 0) pk.load(kw, c, s, half, hd, true);
    if (w == 2 % W) pq.load(qn, c, s, half, hd, true);
    DA_MARK(1);
    PDL_WAIT();
    DA_MARK(2);
    // The three post-processing chains of head i in parallel, on warps 0, 1 and 2 of the head
    // (fewer warps take two or three in turn): its new key, its new value, its query (into
    // vals, free until the merge).
    long src = (long)r * kv_row + kvh * hd;
    long at = (long)pos * kv_row + kvh * hd;
    bool owner = h % group == 0;
    float v[8];
    if (w == 0) {
        head_post_pre(kn + src, kb ? kb + kvh * hd : 0, kw != 0, pk, half, interleaved, true, hd,
                      eps, scratch, v);
        warp_hadamard(v, per, krot);
        kv_store_head(knew, 0, v, per, E::CODE);
        if (owner) kv_store_head(kc, at, v, per, E::CODE);
    }
    if (w == 1 % W) {
        head_post(vn + src, vb ? vb + kvh * hd : 0, 0, c, s, half, interleaved, false, hd, eps,
                  scratch, v);
        warp_hadamard(v, per, vrot);
        kv_store_head(vnew, 0, v, per, E::CODE);
        if (owner) kv_store_head(vc, at, v, per, E::CODE);
    }
    if (w == 2 % W) {
        head_post_pre(q + (long)r * q_row + h * hd, qb ? qb + h * hd : 0, qn != 0, pq, half,
                      interleaved, true, hd, eps, scratch, v);
        warp_hadamard(v, per, krot);
        #pragma unroll
        for (int e = 0; e < 8; e++)
            if (e < per) vals[i * hd + lane + 32 * e] = v[e];
    }
    DA_MARK(3);
    __syncthreads();
    DA_MARK(4);
    float qv[ME];
    #pragma unroll
    for (int e = 0; e < ME; e++) qv[e] = e < per ? vals[i * hd + lane + 32 * e] : 0.f;
    const typename E::T* k = (const typename E::T*)kc;
    const typename E::T* vv = (const typename E::T*)vc;
    int first = window > 0 ? max(0, pos - window + 1) : 0;
    for (int sl = w; sl < S; sl += W) {
        int j0, j1;
        slice_keys(first, pos - first + 1, sl, S, j0, j1);
        float acc[ME], m = __int_as_float(0xff800000), l = 0.f;
        #pragma unroll
        for (int e = 0; e < ME; e++) acc[e] = 0.f;
        softmax_keys<ME, KC, E>(k, vv, kv_row, kvh, hd, j0, j1, qv, scale, softcap, m, l, acc,
                                knew, vnew, pos);
        store_partial<ME>(part, (long)i * S + sl, hd, acc, m, l);
    }
    DA_MARK(5);
    __syncthreads();
    if (w == 0) merge_head(part, i, hd, S, vrot, out + (long)r * q_row + h * hd, vals + i * hd);
    DA_MARK(6);
    if (!q8) return;
    __syncthreads();
    quant_span(vals, L, B, q8, dq, qs, gnb);
    DA_MARK(7);
}

#define DECODE_ATTENTION_KERNEL(NAME, ME, KC, E)                                               \
    extern "C" __global__ void __launch_bounds__(32 * DA_MAX_WARPS) NAME(                     \
        const float* __restrict__ q, const float* __restrict__ kn,                            \
        const float* __restrict__ vn, const unsigned long long* __restrict__ kv,              \
        const int* __restrict__ rseq, const int* __restrict__ rpos,                           \
        const float* __restrict__ qb, const float* __restrict__ kb,                           \
        const float* __restrict__ vb, const float* __restrict__ qn,                           \
        const float* __restrict__ kw, const float* __restrict__ cs,                           \
        const float* __restrict__ sn, int half, int interleaved, float eps, int krot,         \
        int vrot, float* __restrict__ out, i8* __restrict__ q8, float* __restrict__ dq,       \
        int* __restrict__ qs, int B, int gnb, int H, int KVH, int hd, float scale,            \
        int window, float softcap, int S, int NH, int early) {                                \
        PDL_LAUNCH();                                                                         \
        if (!early) PDL_WAIT();                                                               \
        decode_attention<ME, KC, E>(q, kn, vn, kv, rseq, rpos, qb, kb, vb, qn, kw, cs, sn,    \
                                    half, interleaved, eps, krot, vrot, out, q8, dq, qs, B,   \
                                    gnb, H, KVH, hd, scale, window, softcap, S, NH);          \
    }
// Per cache type that holds values (the block types keep the three kernels: their code is
// twice the size and their caches are for long contexts), as the split attention: any head
// size up to 256, and heads up to 128.
#define DECODE_ATTENTION_KERNELS(E, SUFFIX)                                                    \
    DECODE_ATTENTION_KERNEL(decode_attention##SUFFIX, MAXE, KCH, E)                            \
    DECODE_ATTENTION_KERNEL(decode_attention_h128##SUFFIX, 4, 2 * KCH, E)
DECODE_ATTENTION_KERNELS(KvF32, )
DECODE_ATTENTION_KERNELS(KvF16, _kv_f16)
DECODE_ATTENTION_KERNELS(KvBf16, _kv_bf16)
