// What the stand-alone CUDA benchmarks of this folder share (nvcc builds, see their headers).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// Exits with the file, line and CUDA's message when a runtime call fails.
#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e = (x);                                                                   \
        if (e != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));          \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)
