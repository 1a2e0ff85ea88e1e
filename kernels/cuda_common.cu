/*
 * cuda_common.cu — the thread-local failure reason of the CUDA op entries
 * (memra_cuda_ops_error, kernels/cuda_ops.h) and memra_copy_words_cuda, the word copy the
 * CUDA backend moves tick blocks with, and the SM count launchers size grids by.
 */
#include <atomic>

#include "cuda_common.cuh"
#include "cuda_ops.h"

static thread_local const char *g_cuda_ops_error = "";

void memra_cuda_ops_set_error(const char *why) { g_cuda_ops_error = why ? why : ""; }

extern "C" const char *memra_cuda_ops_error(void) { return g_cuda_ops_error; }

int memra_cuda_sm_count()
{
    static std::atomic<int> cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return 132;
    int n = cache[dev].load(std::memory_order_relaxed);
    if (!n) {
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            n <= 0)
            n = 132;
        cache[dev].store(n, std::memory_order_relaxed);
    }
    return n;
}

namespace {

constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kCopyThreads) copy_words_kernel(unsigned *dst, const unsigned *src,
                                                                  unsigned long long n)
{
    pdl_wait_release();
    for (unsigned long long i = (unsigned long long)blockIdx.x * kCopyThreads + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * kCopyThreads)
        dst[i] = src[i];
}

} /* namespace */

extern "C" int memra_copy_words_cuda(void *dst, const void *src, size_t bytes, cudaStream_t s)
{
    if (!dst || !src || bytes % 4 != 0 || (uintptr_t)dst % 4 != 0 || (uintptr_t)src % 4 != 0)
        return cuda_ops_invalid("copy_words: null or misaligned pointer, or bytes % 4 != 0");
    if (bytes == 0)
        return MEMRA_OK;
    const unsigned long long n = bytes / 4;
    const unsigned grid = n > 64ull * kCopyThreads ? 64u : cdiv_u(n, kCopyThreads);
    return cuda_ops_result(cuda_ops_launch(copy_words_kernel, dim3(grid), dim3(kCopyThreads), 0,
                                           s, 1, (unsigned *)dst, (const unsigned *)src, n));
}
