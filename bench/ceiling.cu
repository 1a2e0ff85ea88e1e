/*
 * ceiling.cu — the copy-bandwidth probe memra-bench runs before it opens the CUDA backend,
 * so every report's "fraction of bandwidth" is against a number measured on the same device
 * in the same run (STYLE.md "Bench"; the probe of shared/tools/tick-ceiling.cu).
 *
 * What it does: copies bytes/2 from one device buffer into another with 16-byte loads and
 * stores (int4, grid-stride, 8 blocks of 512 threads per SM), 3 untimed launches, then `reps`
 * launches each timed with its own pair of CUDA events; the bandwidth of a launch counts the
 * bytes read plus the bytes written. The best launch is the ceiling (the least disturbed
 * one), the median says how steady the device was.
 *
 * Must not: touch the backend's context state beyond the device's primary context, or keep
 * memory: the buffers are freed before it returns (the backend allocates after it).
 */
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "ceiling.h"

namespace {

__global__ void __launch_bounds__(512) copy16(const int4 *__restrict__ src, int4 *__restrict__ dst,
                                               size_t n16)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n16; i += stride)
        dst[i] = src[i];
}

int cuda_fail(memra_err *err, cudaError_t e, const char *what)
{
    return MEMRA_FAIL(err, MEMRA_ERR_CUDA, "copy-bandwidth probe: %s: %s (%s)", what,
                      cudaGetErrorName(e), cudaGetErrorString(e));
}

} // namespace

#define PROBE_TRY(call, what)                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            rc = cuda_fail(err, e_, what);                                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

extern "C" int memra_bench_copy_bw_cuda(int device, uint64_t bytes, uint32_t reps,
                                        double *best_gbs, double *median_gbs, char *device_name,
                                        size_t name_n, memra_err *err)
{
    int rc = MEMRA_OK, n_sm = 0, n_dev = 0;
    int4 *buf = nullptr;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    cudaStream_t st = nullptr;
    std::vector<double> gbs;
    const size_t half = (size_t)(bytes / 2) & ~(size_t)255, n16 = half / 16;
    cudaDeviceProp prop;
    if (n16 == 0 || reps == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "copy-bandwidth probe: %llu bytes, %u reps",
                          (unsigned long long)bytes, reps);
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || device >= n_dev || device < 0) {
        (void)cudaGetLastError();
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "copy-bandwidth probe: no CUDA device %d "
                          "(%d visible; --backend cpu measures the CPU backend)", device, n_dev);
    }
    PROBE_TRY(cudaSetDevice(device), "cudaSetDevice");
    PROBE_TRY(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    n_sm = prop.multiProcessorCount;
    snprintf(device_name, name_n, "%s", prop.name);
    PROBE_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    PROBE_TRY(cudaEventCreate(&ev[0]), "cudaEventCreate");
    PROBE_TRY(cudaEventCreate(&ev[1]), "cudaEventCreate");
    PROBE_TRY(cudaMalloc(&buf, 2 * half), "cudaMalloc");
    /* never time zeros (METHOD.md): a byte pattern in the source */
    PROBE_TRY(cudaMemsetAsync(buf, 0x5b, half, st), "cudaMemset");
    for (int w = 0; w < 3; w++)
        copy16<<<n_sm * 8, 512, 0, st>>>(buf, buf + n16, n16);
    PROBE_TRY(cudaGetLastError(), "copy launch");
    for (uint32_t r = 0; r < reps; r++) {
        float ms = 0;
        PROBE_TRY(cudaEventRecord(ev[0], st), "cudaEventRecord");
        copy16<<<n_sm * 8, 512, 0, st>>>(buf, buf + n16, n16);
        PROBE_TRY(cudaGetLastError(), "copy launch");
        PROBE_TRY(cudaEventRecord(ev[1], st), "cudaEventRecord");
        PROBE_TRY(cudaEventSynchronize(ev[1]), "copy");
        PROBE_TRY(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
        if (ms > 0)
            gbs.push_back(2.0 * (double)half / (ms * 1e-3) / 1e9);
    }
    if (gbs.empty()) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_CUDA, "copy-bandwidth probe: no timed copy took time");
        goto done;
    }
    std::sort(gbs.begin(), gbs.end());
    *best_gbs = gbs.back();
    *median_gbs = gbs[gbs.size() / 2];
done:
    if (buf)
        cudaFree(buf);
    for (cudaEvent_t e : ev)
        if (e)
            cudaEventDestroy(e);
    if (st)
        cudaStreamDestroy(st);
    return rc;
}
