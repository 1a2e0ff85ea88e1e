/*
 * gpu_ops_util.c — the shared infrastructure of the GPU op tests (contract: gpu_ops_util.h).
 */
#include "gpu_ops_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char *gpu_skip_reason(void)
{
    static int probed;
    static const char *why;
    if (probed)
        return why;
    probed = 1;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        why = cudaGetErrorString(e);
        return why;
    }
    if (n == 0) {
        why = "no CUDA device";
        return why;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 9)
        why = "the kernels are built for sm_90 (Hopper); device 0 is older";
    return why;
}

void gpu_expect_same_f32(const char *what, const float *got, const float *want, size_t n)
{
    if (memcmp(got, want, n * sizeof(float)) == 0)
        return;
    size_t i = 0;
    while (memcmp(got + i, want + i, sizeof(float)) == 0)
        i++;
    uint32_t x, y;
    memcpy(&x, got + i, 4);
    memcpy(&y, want + i, 4);
    ck_abort_msg("%s: element %zu of %zu differs: gpu %.9g (0x%08x) ref %.9g (0x%08x)", what, i, n,
                 (double)got[i], x, (double)want[i], y);
}

void gpu_add_case(Suite *s, const char *name, const TTest *const *tests, int n)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, NULL, teardown_allocs);
    tcase_set_timeout(tc, 600);
    for (int i = 0; i < n; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
}

#define MAX_ALLOCS 1024
static void *g_dev[MAX_ALLOCS], *g_host[MAX_ALLOCS];
static int g_ndev, g_nhost;

void teardown_allocs(void)
{
    for (int i = 0; i < g_ndev; i++)
        cudaFree(g_dev[i]);
    for (int i = 0; i < g_nhost; i++)
        free(g_host[i]);
    g_ndev = g_nhost = 0;
}

void *halloc(size_t n)
{
    ck_assert_int_lt(g_nhost, MAX_ALLOCS);
    void *p = calloc(n ? n : 1, 1);
    ck_assert_ptr_nonnull(p);
    g_host[g_nhost++] = p;
    return p;
}

void *dalloc(size_t n)
{
    ck_assert_int_lt(g_ndev, MAX_ALLOCS);
    void *p = NULL;
    CK_CUDA(cudaMalloc(&p, n ? n : 1));
    g_dev[g_ndev++] = p;
    return p;
}

void *dup_h2d(const void *h, size_t n)
{
    void *d = dalloc(n);
    CK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}
