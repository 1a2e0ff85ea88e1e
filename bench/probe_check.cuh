/*
 * probe_check.cuh — the standalone device probes' (bench/*_probe.cu) CUDA runtime check: a
 * failing call prints where and why and ends the probe (they measure, nothing to recover).
 */
#ifndef MEMRA_BENCH_PROBE_CHECK_CUH
#define MEMRA_BENCH_PROBE_CHECK_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
