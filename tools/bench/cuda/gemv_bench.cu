// Times the one-row int8 decode GEMVs of crates/oxinfer-cuda/src/kernels/gemv.cu on the
// matrices of a Qwen2-7B Q4_K_M decode step, alone and as the step's chain of dependent
// launches, against two ceilings that do no arithmetic: the same grid staging the same rows and
// nothing else (`stage`), and a grid-stride stream over the same bytes (`stream`).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I crates/oxinfer-cuda/src/kernels \
//        tools/bench/cuda/gemv_bench.cu -o gemv_bench
//   ./gemv_bench [layers]      (default 28)
//
// Every layer's weights are their own buffers (about 4.3 GB for 28 layers and the head, random
// bytes: the speed of these kernels does not depend on the values), so each launch reads cold
// from HBM as in a decode step. Launches carry programmatic stream serialization as the
// engine's do (gpu.rs), so the staged-early kernels fetch their rows while the launch before
// runs. The split of a row between warps follows gemv.rs's `gemv_split`. Times are the best
// and the mean of 10 timed passes after 2 warm-up passes, each pass one CUDA graph.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>

#include "gemv.cu"

#include "bench_common.cuh"

// The staged kernel's prologue and nothing else: the same rows copied into shared memory by the
// same threads, then one word read so the copies are not dead.
template <bool EARLY>
__global__ void __launch_bounds__(32 * GEMV_WARPS) stage_only(GemvMats m, long row_bytes,
                                                              int split) {
    if (EARLY) {
        PDL_LAUNCH();
    } else {
        PDL_ENTER();
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int row = blockIdx.x * (GEMV_WARPS / split) + warp / split;
    int2 mr = gemv_mat_row(m, row);
    bool valid = mr.x < 3;
    if (split == 1 && !valid) return;
    const u8* wr = valid ? m.wk(mr.x) + (long)mr.y * row_bytes : m.w[0];
    extern __shared__ __align__(16) u8 stage_smem[];
    long unit = staged_unit_bytes(row_bytes, 1);
    if (split == 1) {
        wr = stage_bytes(stage_smem + warp * unit, wr, row_bytes, lane, 32);
        if (EARLY) PDL_WAIT();
        cp_async_wait_all();
        __syncwarp();
    } else {
        int u = warp / split, ut = threadIdx.x - u * 32 * split;
        wr = stage_bytes(stage_smem + u * unit, wr, valid ? row_bytes : 0, ut, 32 * split);
        if (EARLY) PDL_WAIT();
        cp_async_wait_all();
        __syncthreads();
    }
    u32 v = wr[lane * 4];
    if (valid && lane == 0 && v == (u32)split + 7u) m.yk(mr.x)[mr.y] = 1.f;
}

// stage_only with one bulk copy (the Hopper TMA's cp.async.bulk, gemv.cu's bulk_stage) per
// staged row, issued by the unit's first thread, instead of 16-byte cp.async chunks from every
// lane.
__global__ void __launch_bounds__(32 * GEMV_WARPS) stage_bulk(GemvMats m, long row_bytes,
                                                              int split) {
    PDL_LAUNCH();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int row = blockIdx.x * (GEMV_WARPS / split) + warp / split;
    int2 mr = gemv_mat_row(m, row);
    bool valid = mr.x < 3;
    const u8* wr = valid ? m.wk(mr.x) + (long)mr.y * row_bytes : m.w[0];
    extern __shared__ __align__(16) u8 bulk_smem[];
    __shared__ unsigned long long bars[GEMV_WARPS];
    long unit = staged_unit_bytes(row_bytes, 1);
    int u = warp / split, first = threadIdx.x == u * 32 * split;
    if (first) mbar_init(&bars[u]);
    __syncthreads();
    const u8* sw = bulk_smem + u * unit + (int)((unsigned long long)wr & 15ull);
    if (first && valid) bulk_stage(bulk_smem + u * unit, wr, row_bytes, &bars[u]);
    PDL_WAIT();
    if (valid) mbar_wait(&bars[u], 0);
    u32 v = sw[lane * 4];
    if (valid && lane == 0 && v == (u32)split + 7u) m.yk(mr.x)[mr.y] = 1.f;
}

// Reads [p, p + n16 · 16) with 16-byte loads, a grid-stride loop unrolled by 4.
__global__ void __launch_bounds__(512) stream_read(const int4* __restrict__ p, long n16,
                                                   float* sink) {
    PDL_ENTER();
    int acc = 0;
    long stride = (long)gridDim.x * blockDim.x;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        int4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
             d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        int4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x1234567) sink[0] = 1.f;
}

__global__ void fill_random(u32* p, long n, u32 seed) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        u32 x = (u32)i * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        // Keep the f16 scales finite: clear the top exponent bit of both halves.
        p[i] = x & 0xbfffbfffu;
    }
}

// Activation scales (and, read as i32, run sums) of a plausible size.
__global__ void fill_scales(float* p, long n) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        p[i] = 1e-3f * (float)(1 + i % 7);
}

enum WFmt { Q4K, Q6K };
static long row_bytes_of(WFmt f, int cols) { return (long)cols / 256 * (f == Q4K ? 144 : 210); }

// One GEMV launch of the step: up to three matrices of one format over one input.
struct Op {
    const char* kind;
    WFmt fmt;
    int cols;
    int nmats;
    int rows[3];
    u8* w[3];
};

static int sm_count;
// When positive, the split every op takes (the harness's own sweep).
static int forced_split = 0;

// gemv.rs's gemv_split for one activation row (a row of at most two warp steps on one warp
// where that still gives every multiprocessor two blocks).
static int split_of(const Op& op) {
    if (forced_split > 0) return forced_split;
    int total = op.rows[0] + op.rows[1] + op.rows[2];
    if (total >= 32 * sm_count) return 1;
    int per_step = op.fmt == Q4K ? 8 : 2;
    int warps = (op.cols / 256 + per_step - 1) / per_step, p = 1;
    if (warps <= 2 && total >= 2 * GEMV_WARPS * sm_count) return 1;
    while (p < warps) p <<= 1;
    return p < GEMV_WARPS ? p : GEMV_WARPS;
}

static long op_bytes(const Op& op) {
    return row_bytes_of(op.fmt, op.cols) * (op.rows[0] + op.rows[1] + op.rows[2]);
}

enum Variant { ENGINE_S1E, ENGINE_S1B, ENGINE_S1, ENGINE_1, STAGE_EARLY, STAGE_BULK, STREAM, NVARIANTS };
static const char* variant_name[] = {"engine s1e", "bulk s1b  ", "engine s1 ", "engine 1  ", "stage only",
                                     "stage bulk", "stream    "};

static i8* xq;
static float* xd;
static float* ys[3];
static float* sink;

static void launch(const Op& op, Variant v, cudaStream_t s) {
    GemvMats m = {};
    for (int i = 0; i < 3; i++) {
        m.w[i] = i < op.nmats ? op.w[i] : nullptr;
        m.y[i] = ys[i];
        m.rows[i] = i < op.nmats ? op.rows[i] : 0;
    }
    long rb = row_bytes_of(op.fmt, op.cols);
    m.row_bytes3 = rb;
    int split = split_of(op), total = op.rows[0] + op.rows[1] + op.rows[2];
    int units = GEMV_WARPS / split;
    long smem = (((rb + 15) & ~15l) + 16) * units;
    int cols = op.cols, t = 1, accum = 0, grouped = op.fmt == Q4K ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cfg.stream = s;
    cfg.blockDim = dim3(32 * GEMV_WARPS);
    cfg.gridDim = dim3((total + units - 1) / units);
    if (v == STREAM) {
        cfg.gridDim = dim3(sm_count * 4);
        cfg.blockDim = dim3(512);
        // The matrices of one op are contiguous (allocated so).
        CK(cudaLaunchKernelEx(&cfg, stream_read, (const int4*)op.w[0], op_bytes(op) / 16, sink));
        return;
    }
    if (v == STAGE_BULK) {
        cfg.dynamicSmemBytes = smem;
        CK(cudaLaunchKernelEx(&cfg, stage_bulk, m, rb, split));
        return;
    }
    if (v == STAGE_EARLY) {
        cfg.dynamicSmemBytes = smem;
        CK(cudaLaunchKernelEx(&cfg, stage_only<true>, m, rb, split));
        return;
    }
    void (*f)(GemvMats, long, const i8*, const float*, int, int, int, int, int);
    if (op.fmt == Q4K)
        f = v == ENGINE_S1E ? gemv_q4_k_i8_s1e
            : v == ENGINE_S1B ? gemv_q4_k_i8_s1b
            : v == ENGINE_S1 ? gemv_q4_k_i8_s1
                             : gemv_q4_k_i8_1;
    else
        f = v == ENGINE_S1E ? gemv_q6_k_i8_s1e
            : v == ENGINE_S1B ? gemv_q6_k_i8_s1b
            : v == ENGINE_S1 ? gemv_q6_k_i8_s1
                             : gemv_q6_k_i8_1;
    if (v != ENGINE_1) cfg.dynamicSmemBytes = smem;
    CK(cudaLaunchKernelEx(&cfg, f, m, rb, (const i8*)xq, (const float*)xd, cols, t, split, accum,
                          grouped));
}

// Times `ops` launched in order as one graph: best and mean ms of 10 passes.
static void time_ops(const std::vector<Op>& ops, Variant v, cudaStream_t s, float* best,
                     float* mean) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (const Op& op : ops) launch(op, v, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 2; i++) CK(cudaGraphLaunch(ge, s));
    *best = 1e30f;
    float sum = 0.f;
    for (int i = 0; i < 10; i++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        sum += ms;
        if (ms < *best) *best = ms;
    }
    *mean = sum / 10.f;
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main(int argc, char** argv) {
    int layers = argc > 1 ? atoi(argv[1]) : 28;
    const int dim = 3584, kv = 512, ffn = 18944, vocab = 152064;
    CK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Each op's matrices in one allocation, one after the other.
    auto alloc = [&](long bytes) {
        u8* p;
        CK(cudaMalloc(&p, bytes + 16));
        long words = (bytes + 3) / 4;
        fill_random<<<1024, 256, 0, s>>>((u32*)p, words, (u32)bytes);
        CK(cudaGetLastError());
        return p;
    };
    auto make = [&](const char* kind, WFmt f, int cols, std::vector<int> rows) {
        Op op = {kind, f, cols, (int)rows.size(), {0, 0, 0}, {nullptr, nullptr, nullptr}};
        long rb = row_bytes_of(f, cols), total = 0;
        for (size_t i = 0; i < rows.size(); i++) op.rows[i] = rows[i], total += rows[i];
        u8* p = alloc(rb * total);
        for (size_t i = 0; i < rows.size(); i++) {
            op.w[i] = p;
            p += rb * rows[i];
        }
        return op;
    };
    std::vector<Op> step;
    std::vector<std::vector<Op>> by_kind(5);
    for (int l = 0; l < layers; l++) {
        Op qkv = make("qkv", Q4K, dim, {dim, kv, kv});
        Op o = make("o", Q4K, dim, {dim});
        Op gu = make("gate+up", Q4K, dim, {ffn, ffn});
        Op down = l % 2 == 0 ? make("down Q6_K", Q6K, ffn, {dim}) : make("down Q4_K", Q4K, ffn, {dim});
        step.push_back(qkv);
        step.push_back(o);
        step.push_back(gu);
        step.push_back(down);
        by_kind[0].push_back(qkv);
        by_kind[1].push_back(o);
        by_kind[2].push_back(gu);
        by_kind[l % 2 == 0 ? 3 : 4].push_back(down);
    }
    Op head = make("head Q6_K", Q6K, dim, {vocab});
    step.push_back(head);
    CK(cudaMalloc(&xq, 1 << 20));
    CK(cudaMalloc(&xd, 1 << 20));
    fill_random<<<64, 256, 0, s>>>((u32*)xq, (1 << 20) / 4, 99u);
    fill_scales<<<64, 256, 0, s>>>(xd, (1 << 20) / 4);
    for (int i = 0; i < 3; i++) CK(cudaMalloc(&ys[i], vocab * 4));
    CK(cudaMalloc(&sink, 4));
    for (void* f : {(void*)gemv_q4_k_i8_s1e, (void*)gemv_q4_k_i8_s1, (void*)gemv_q6_k_i8_s1e,
                    (void*)gemv_q6_k_i8_s1, (void*)stage_only<true>, (void*)stage_bulk,
                    (void*)gemv_q4_k_i8_s1b, (void*)gemv_q6_k_i8_s1b})
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
    CK(cudaStreamSynchronize(s));
    long step_bytes = 0;
    for (const Op& op : step) step_bytes += op_bytes(op);
    printf("%d SMs; %d layers + head: %.1f MB of weights a step\n", sm_count, layers,
           step_bytes / 1e6);
    // The bulk-staged kernel must give the staged kernel's bits.
    for (auto& ops : by_kind) {
        if (ops.empty()) continue;
        const Op& op = ops[0];
        std::vector<float> a[3], b[3];
        for (Variant v : {ENGINE_S1E, ENGINE_S1B}) {
            for (int i = 0; i < 3; i++) CK(cudaMemsetAsync(ys[i], 0, vocab * 4, s));
            launch(op, v, s);
            CK(cudaStreamSynchronize(s));
            for (int i = 0; i < op.nmats; i++) {
                std::vector<float>& h = v == ENGINE_S1E ? a[i] : b[i];
                h.resize(op.rows[i]);
                CK(cudaMemcpy(h.data(), ys[i], op.rows[i] * 4, cudaMemcpyDeviceToHost));
            }
        }
        bool same = true;
        double amax = 0;
        for (int i = 0; i < op.nmats; i++) {
            same = same && memcmp(a[i].data(), b[i].data(), a[i].size() * 4) == 0;
            for (float x : a[i]) amax = fabs(x) > amax ? fabs(x) : amax;
        }
        printf("%-10s bulk-staged == staged bit for bit: %s (max |y| %.3g)\n", op.kind,
               same ? "yes" : "NO", amax);
        // GEMV_OUT=file: every kind's staged outputs appended there, for comparing builds.
        if (const char* path = getenv("GEMV_OUT")) {
            FILE* fo = fopen(path, "ab");
            for (int i = 0; i < op.nmats; i++) fwrite(a[i].data(), 4, a[i].size(), fo);
            fclose(fo);
        }
    }
    printf("\nalone (each kind over every layer's own weights, back to back):\n");
    for (auto& ops : by_kind) {
        if (ops.empty()) continue;
        long bytes = op_bytes(ops[0]);
        printf("%-10s %6.1f MB, split %d:", ops[0].kind, bytes / 1e6, split_of(ops[0]));
        for (int v = 0; v < NVARIANTS; v++) {
            float best, mean;
            time_ops(ops, (Variant)v, s, &best, &mean);
            float us = best * 1000.f / ops.size();
            printf("  %s %6.2f us %5.0f GB/s |", variant_name[v], us, bytes / us / 1e3);
        }
        printf("\n");
    }
    {
        std::vector<Op> h(4, head);
        long bytes = op_bytes(head);
        printf("%-10s %6.1f MB, split %d:", head.kind, bytes / 1e6, split_of(head));
        for (int v = 0; v < NVARIANTS; v++) {
            float best, mean;
            time_ops(h, (Variant)v, s, &best, &mean);
            float us = best * 1000.f / 4;
            printf("  %s %6.2f us %5.0f GB/s |", variant_name[v], us, bytes / us / 1e3);
        }
        printf("\n");
    }
    printf("\nthe row split swept (engine s1e and bulk s1b, alone):\n");
    for (int k : {0, 1, 3, 4}) {
        auto& ops = by_kind[k];
        long bytes = op_bytes(ops[0]);
        for (int sp = 1; sp <= GEMV_WARPS; sp *= 2) {
            forced_split = sp;
            printf("%-10s split %d:", ops[0].kind, sp);
            for (Variant v : {ENGINE_S1E, ENGINE_S1B}) {
                float best, mean;
                time_ops(ops, v, s, &best, &mean);
                float us = best * 1000.f / ops.size();
                printf("  %s %6.2f us %5.0f GB/s |", variant_name[v], us, bytes / us / 1e3);
            }
            printf("\n");
        }
        forced_split = 0;
    }
    printf("\nthe step's GEMV chain (%zu launches):\n", step.size());
    for (int v = 0; v < NVARIANTS; v++) {
        float best, mean;
        time_ops(step, (Variant)v, s, &best, &mean);
        printf("%s  best %.3f ms  mean %.3f ms  %5.0f GB/s\n", variant_name[v], best, mean,
               step_bytes / best / 1e6);
    }
    return 0;
}
