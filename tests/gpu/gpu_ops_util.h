/*
 * gpu_ops_util.h — what the GPU op tests (tests/gpu/test_ops_gpu.c, test_moe_gpu.c) share:
 * the "is there a usable GPU" probe with its SKIP, CUDA/op assertions, and tracked host and
 * device allocations that the teardown frees (a failing assertion leaves a test by longjmp
 * under CK_FORK=no, so nothing may be owned by the test's stack).
 */
#ifndef MEMRA_GPU_OPS_UTIL_H
#define MEMRA_GPU_OPS_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda_ops.h"

/* NULL when device 0 can run the kernels (sm_90+), else why not (static text). */
const char *gpu_skip_reason(void);

#define GPU_OR_SKIP()                                                                              \
    do {                                                                                           \
        const char *why_ = gpu_skip_reason();                                                      \
        if (why_) {                                                                                \
            fprintf(stderr, "SKIP %s: %s\n", __func__, why_);                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CK_CUDA(x)                                                                                 \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                    \
    } while (0)

/* Run an entry, then synchronise so that asynchronous kernel faults surface here. */
#define CK_OP(x)                                                                                   \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        ck_assert_msg(rc_ == MEMRA_OK, "%s: rc %d (%s)", #x, rc_, memra_cuda_ops_error());         \
        CK_CUDA(cudaDeviceSynchronize());                                                          \
    } while (0)

/* memcmp of f32 arrays, the ops' exactness contract: on failure names the first differing
 * element with both values, as %.9g and as bits. */
void gpu_expect_same_f32(const char *what, const float *got, const float *want, size_t n);

/* One TCase per op (CK_RUN_CASE=<name> selects one, e.g. under compute-sanitizer), with the
 * allocations' teardown and a 600 s timeout. */
void gpu_add_case(Suite *s, const char *name, const TTest *const *tests, int n);
#define GPU_ADD_CASE(s, name, ...)                                                                 \
    do {                                                                                           \
        const TTest *const t_[] = {__VA_ARGS__};                                                   \
        gpu_add_case((s), (name), t_, (int)(sizeof t_ / sizeof t_[0]));                            \
    } while (0)

/* Tracked allocations (zeroed host memory, device memory), freed by teardown_allocs (a
 * checked fixture of every GPU op test case). */
void *halloc(size_t n);
void *dalloc(size_t n);
void *dup_h2d(const void *h, size_t n);
void teardown_allocs(void);

#endif
