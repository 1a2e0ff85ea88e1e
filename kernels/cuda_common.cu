/*
 * cuda_common.cu — the thread-local failure reason of the CUDA op entries
 * (memra_cuda_ops_error, kernels/cuda_ops.h), memra_copy_words_cuda, the word copy the
 * CUDA backend moves tick blocks with, memra_l2_prefetch_cuda, its side-branch L2 prefetch,
 * and the SM count launchers size grids by.
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

namespace
{

/* Bytes per bulk prefetch instruction at most. Small, so that a range spreads over every SM:
 * one SM issues bulk prefetches at ~160 GB/s (bench/results/mmvq-notes.md, run 33). */
constexpr unsigned kL2Piece = 4u << 10;

/* Rank g = lane x CTAs + CTA (consecutive pieces on different SMs) takes pieces g,
 * g + threads, ... of the ranges laid end to end. */
__global__ void __launch_bounds__(32) l2_prefetch_kernel(memra_l2_prefetch_args a)
{
    const unsigned long long threads = (unsigned long long)gridDim.x * 32;
    unsigned long long g = (unsigned long long)threadIdx.x * gridDim.x + blockIdx.x;
    for (uint32_t r = 0; r < a.n; r++) {
        const unsigned long long ppc = (a.bytes[r] + kL2Piece - 1) / kL2Piece; /* per chunk */
        const unsigned long long pieces = ppc * (a.count[r] ? a.count[r] : 1);
        for (; g < pieces; g += threads) {
            const unsigned long long c = g / ppc, off = (g - c * ppc) * kL2Piece;
            const unsigned long long left = a.bytes[r] - off;
            const unsigned long long at = ((unsigned long long)a.p[r] + c * a.stride[r]) & ~15ull;
            prefetch_l2_bulk((const char *)at + off, left < kL2Piece ? (unsigned)left : kL2Piece);
        }
        g -= pieces; /* this thread's rank in the next range's pieces */
    }
}

} /* namespace */

extern "C" int memra_l2_prefetch_cuda(const memra_l2_prefetch_args *a, cudaStream_t s)
{
    if (!a || a->n > MEMRA_L2_PREFETCH_MAX_RANGES)
        return cuda_ops_invalid("l2_prefetch: NULL args or more than 4 ranges");
    unsigned long long pieces = 0;
    for (uint32_t r = 0; r < a->n; r++) {
        if (a->bytes[r] % 16 != 0 || (a->bytes[r] && (uintptr_t)a->p[r] < 16))
            return cuda_ops_invalid("l2_prefetch: a range not sized in 16 bytes, or NULL");
        if (a->count[r] > 1 && a->stride[r] < a->bytes[r])
            return cuda_ops_invalid("l2_prefetch: chunks overlap (stride under the chunk)");
        pieces += (a->bytes[r] + kL2Piece - 1) / kL2Piece * (a->count[r] ? a->count[r] : 1);
    }
    if (pieces == 0)
        return MEMRA_OK;
    const unsigned long long sms = (unsigned long long)memra_cuda_sm_count();
    const unsigned grid = (unsigned)(pieces < sms ? pieces : sms);
    l2_prefetch_kernel<<<grid, 32, 0, s>>>(*a);
    return cuda_ops_result(cudaGetLastError());
}
