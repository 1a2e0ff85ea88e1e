/*
 * cuda_util.h — the CUDA driver API, loaded at run time, and the one way CUDA errors become
 * memra_err records.
 *
 * libcuda.so.1 comes with the GPU driver, not the toolkit: a binary linked against it does
 * not even start on a machine without a driver (CI, build hosts). So nothing links it; the
 * first memra_cu_load() dlopens it and resolves every entry point by the versioned symbol
 * cuda.h maps its name to (cuMemAlloc -> cuMemAlloc_v2), and callers go through
 * memra_cu()->fn.
 * Without a driver, memra_cu_load() fails with MEMRA_ERR_UNSUPPORTED and a message saying so,
 * which is what GPU tests turn into SKIP.
 * Must not: be called before memra_cu_load() succeeded; print (errors go to memra_err).
 * Invariants: the table is filled once (pthread_once) and never changes afterwards; every
 * pointer in it is non-NULL after a successful load.
 */
#ifndef MEMRA_CUDA_UTIL_H
#define MEMRA_CUDA_UTIL_H

#include <cuda.h>

#include "err.h"

/* Entry points memra uses; the names are the unversioned API names of cuda.h. */
#define MEMRA_CU_FUNCS(X)                                                                          \
    X(cuInit)                                                                                      \
    X(cuDriverGetVersion)                                                                          \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceGetName)                                                                             \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxGetDevice)                                                                              \
    X(cuCtxSynchronize)                                                                            \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleUnload)                                                                              \
    X(cuModuleGetFunction)                                                                         \
    X(cuFuncSetAttribute)                                                                          \
    X(cuFuncGetAttribute)                                                                          \
    X(cuLaunchKernel)                                                                              \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemcpyHtoD)                                                                                \
    X(cuMemcpyDtoH)                                                                                \
    X(cuMemcpyDtoD)                                                                                \
    X(cuMemcpyDtoDAsync)                                                                           \
    X(cuMemcpyHtoDAsync)                                                                           \
    X(cuMemcpyDtoHAsync)                                                                           \
    X(cuMemsetD8)                                                                                  \
    X(cuMemGetInfo)                                                                                \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy)                                                                              \
    X(cuEventRecord)                                                                               \
    X(cuEventSynchronize)                                                                          \
    X(cuEventElapsedTime)

typedef struct memra_cu_api {
#define MEMRA_CU_MEMBER(name) __typeof__(name) *name;
    MEMRA_CU_FUNCS(MEMRA_CU_MEMBER)
#undef MEMRA_CU_MEMBER
} memra_cu_api;

/* Loads the driver library and resolves every entry point (once per process; later calls
 * return the first result). MEMRA_ERR_UNSUPPORTED when there is no driver library. */
int memra_cu_load(memra_err *err);
/* The loaded table; NULL before a successful memra_cu_load(). */
const memra_cu_api *memra_cu(void);

/* Turns a failed driver call into an error record naming the call and the CUDA error
 * ("cuMemAlloc(&p, n): CUDA_ERROR_OUT_OF_MEMORY (out of memory)"); returns MEMRA_ERR_CUDA,
 * or MEMRA_OK for CUDA_SUCCESS. */
int memra_cu_fail(memra_err *err, CUresult r, const char *call, const char *file, int line);

/* rc = the call's memra code; on failure jump to fail. Needs `int rc` and a `fail:` label. */
#define MEMRA_CU_TRY(err, call)                                                                    \
    do {                                                                                           \
        CUresult memra_cu_r_ = memra_cu()->call;                                                   \
        if (memra_cu_r_ != CUDA_SUCCESS) {                                                         \
            rc = memra_cu_fail((err), memra_cu_r_, #call, __FILE__, __LINE__);                     \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Opens device `ordinal`'s primary context and makes it current on this thread; *sm receives
 * 10 * major + minor. MEMRA_ERR_UNSUPPORTED (with the reason) when there is no driver or no
 * such device. Pair with memra_cu_device_close(ordinal). */
int memra_cu_device_open(int ordinal, int *sm, memra_err *err);
void memra_cu_device_close(int ordinal);

/* *cfg and *attr for a 1-D launch of grid x threads with smem bytes on st, with programmatic
 * stream serialization (PDL) allowed: what cuLaunchKernelEx takes for the kernels that wait
 * with griddepcontrol.wait (the backend's mmvq launches; the GPU tests' chains). */
void memra_cu_pdl_config(CUlaunchConfig *cfg, CUlaunchAttribute *attr, unsigned grid,
                         unsigned threads, unsigned smem, CUstream st);

#endif
