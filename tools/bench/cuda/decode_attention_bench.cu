// Times the fused decode attention (crates/oxinfer-cuda/src/kernels/decode_attention.cu) alone,
// on one row of a synthetic cache, for a head geometry, cache depths and slice counts; with
// DA_TRACE also where each warp's time goes (the kernel's DA_MARK phases, in SM cycles).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I crates/oxinfer-cuda/src/kernels \
//        tools/bench/cuda/decode_attention_bench.cu -o da_bench            # times
//   nvcc ... -DDA_TRACE -o da_trace                                         # phases
//   ./da_bench [H KVH HD]      (default 28 4 128: Qwen2-7B)
//
// Each configuration: 20 warm-up launches, then the mean of 400 back-to-back launches timed
// with events (no PDL: every launch waits for the one before).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "decode_attention.cu"

#include "bench_common.cuh"

static float* upload_random(size_t n, float scale, unsigned seed) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = scale * ((float)(seed >> 8) / (float)(1u << 24) - 0.5f);
    }
    float* d;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    return d;
}

typedef void (*Kernel)(const float*, const float*, const float*, const unsigned long long*,
                       const int*, const int*, const float*, const float*, const float*,
                       const float*, const float*, const float*, const float*, int, int, float,
                       int, int, float*, i8*, float*, int*, int, int, int, int, int, float, int,
                       float, int, int, int);

int main(int argc, char** argv) {
    int H = argc > 3 ? atoi(argv[1]) : 28, KVH = argc > 3 ? atoi(argv[2]) : 4,
        hd = argc > 3 ? atoi(argv[3]) : 128;
    const int B = 256, maxpos = 4096;
    int q_row = H * hd, kv_row = KVH * hd, half = hd / 2;
    float* q = upload_random(q_row, 2.f, 1);
    float* kn = upload_random(kv_row, 2.f, 2);
    float* vn = upload_random(kv_row, 2.f, 3);
    float* qb = upload_random(q_row, 0.2f, 4);
    float* kb = upload_random(kv_row, 0.2f, 5);
    float* vb = upload_random(kv_row, 0.2f, 6);
    float* kc = upload_random((size_t)maxpos * kv_row, 2.f, 7);
    float* vc = upload_random((size_t)maxpos * kv_row, 2.f, 8);
    float* cs = upload_random(half, 1.f, 9);
    float* sn = upload_random(half, 1.f, 10);
    float* out;
    CK(cudaMalloc(&out, q_row * 4));
    i8* q8;
    CK(cudaMalloc(&q8, q_row));
    float* dq;
    CK(cudaMalloc(&dq, q_row / 32 * 4));
    int* qs;
    CK(cudaMalloc(&qs, q_row / 32 * 4));
    unsigned long long table[2] = {(unsigned long long)kc, (unsigned long long)vc};
    unsigned long long* kv;
    CK(cudaMalloc(&kv, 16));
    CK(cudaMemcpy(kv, table, 16, cudaMemcpyHostToDevice));
    int zero = 0;
    int *rseq, *rpos;
    CK(cudaMalloc(&rseq, 4));
    CK(cudaMalloc(&rpos, 4));
    CK(cudaMemcpy(rseq, &zero, 4, cudaMemcpyHostToDevice));
    Kernel f = hd <= 128 ? (Kernel)decode_attention_h128 : (Kernel)decode_attention;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
    int NH = B > hd ? B / hd : 1, L = NH * hd;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("H %d KVH %d hd %d, f32 cache, %d heads a block, %d blocks\n", H, KVH, hd, NH,
           H / NH);
    const int depths[] = {16, 64, 128, 512, 2048};
    const int slices[] = {1, 2, 4, 8};
    for (int keys : depths) {
        int pos = keys - 1;
        CK(cudaMemcpy(rpos, &pos, 4, cudaMemcpyHostToDevice));
        for (int S : slices) {
            int W = S < 3 ? 3 : S;
            if (NH * W > DA_MAX_WARPS) continue;
            size_t smem = (size_t)(NH * S * (hd + 2) + NH * 512 + L + NH * W * 256) * 4;
            dim3 grid(H / NH), block(32 * NH * W);
            float scale = 1.f / sqrtf((float)hd);
            auto launch = [&]() {
                f<<<grid, block, smem>>>(q, kn, vn, kv, rseq, rpos, qb, kb, vb, nullptr, nullptr,
                                         cs, sn, half, 0, 1e-6f, 0, 0, out, q8, dq, qs, B, 0, H,
                                         KVH, hd, scale, 0, 0.f, S, NH, 0);
            };
            for (int i = 0; i < 20; i++) launch();
            CK(cudaGetLastError());
            CK(cudaEventRecord(e0));
            const int n = 400;
            for (int i = 0; i < n; i++) launch();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("keys %5d slices %d warps/head %2d: %7.2f us\n", keys, S, W, ms * 1000.f / n);
#ifdef DA_TRACE
            std::vector<long long> tr(4096 * DA_MAX_WARPS * 8);
            CK(cudaMemcpyFromSymbol(tr.data(), da_trace, tr.size() * 8));
            // Per warp of the block, the mean over blocks of each mark after the block's
            // earliest mark 0.
            int nw = NH * W;
            for (int w = 0; w < nw; w++) {
                double acc[8] = {0};
                for (int b = 0; b < H / NH; b++) {
                    long long t0 = tr[((long)b * DA_MAX_WARPS) * 8];
                    for (int x = 0; x < nw; x++)
                        t0 = tr[((long)b * DA_MAX_WARPS + x) * 8] < t0
                                 ? tr[((long)b * DA_MAX_WARPS + x) * 8]
                                 : t0;
                    for (int m = 0; m < 8; m++)
                        acc[m] += (double)(tr[((long)b * DA_MAX_WARPS + w) * 8 + m] - t0);
                }
                printf("    warp %2d cycles at marks:", w);
                for (int m = 0; m < 8; m++) printf(" %6.0f", acc[m] / (H / NH));
                printf("\n");
            }
#endif
        }
    }
    // With DA_OUT set: the output of one launch at 300 keys (the last step of each slice
    // partly masked) over 4 slices, written there as f32, for comparing builds.
    if (const char* path = getenv("DA_OUT")) {
        int pos = 299, S = 4, W = 4;
        CK(cudaMemcpy(rpos, &pos, 4, cudaMemcpyHostToDevice));
        size_t smem = (size_t)(NH * S * (hd + 2) + NH * 512 + L + NH * W * 256) * 4;
        f<<<H / NH, 32 * NH * W, smem>>>(q, kn, vn, kv, rseq, rpos, qb, kb, vb, nullptr, nullptr,
                                         cs, sn, half, 0, 1e-6f, 0, 0, out, q8, dq, qs, B, 0, H,
                                         KVH, hd, 1.f / sqrtf((float)hd), 0, 0.f, S, NH, 0);
        std::vector<float> h(q_row);
        CK(cudaMemcpy(h.data(), out, q_row * 4, cudaMemcpyDeviceToHost));
        FILE* fo = fopen(path, "wb");
        fwrite(h.data(), 4, q_row, fo);
        fclose(fo);
    }
    return 0;
}
