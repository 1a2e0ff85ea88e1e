/*
 * rms_norm_q8.h — args of rms_norm_q8 (catalog: runtime/ops.def RMS_NORM_Q8):
 * y = rmsnorm(x) * w as engine q8_1 blocks (the input of the next mmvq), optionally also f32.
 *
 * Per row b (f32 unless stated, RN, no FMA), bit-identical on CPU and GPU:
 *   ss = sum_j x[b,j]^2 in f64 (each (double)x * (double)x is exact) in THIS order, with
 *        T = MEMRA_RMS_NORM_Q8_THREADS = 1024 (the CUDA block; the order depends on n only):
 *        thread t (t = 0..1023, lane l = t % 32, warp w = t / 32) sums j = t, t + T, t + 2T, ...
 *        < n, starting from +0.0, increasing j;  then each warp's 32 partials by the xor
 *        butterfly (lane l += lane l^o for o = 16, 8, 4, 2, 1: emulated as v[l] += v[l + o]
 *        for l < o, result v[0]);  then the 32 warp sums r[0..31] by the same butterfly
 *        (kref_block_sum_f64; cuda_common.cuh block_sum_f64);
 *   mean = (float)(ss / (double)n); scale = 1.0f / sqrtf(mean + eps);
 *   y[b,j] = w[j] * (x[b,j] * scale);   y_q[b] = memra_quantize_q8_1(y[b]).
 * CPU reference: kernels/ref/ref_common.c kref_rms_scale_blk(x, n, eps, 1024) (the canonical
 * primitive, also kref_rms_norm_canon for the reference model's norms).
 * eps is added to the mean, inside the sqrt (spec qwen35.md §3.1, pitfall 9). Row b reads
 * only row b. NaN / Inf inputs: same positions, NaN payloads may differ.
 */
#ifndef MEMRA_KERNEL_RMS_NORM_Q8_H
#define MEMRA_KERNEL_RMS_NORM_Q8_H

#include <stdint.h>

#define MEMRA_RMS_NORM_Q8_THREADS 1024 /* the CUDA block; part of the summation order */

typedef struct memra_rms_norm_q8_args {
    const float *x; /* [b, n] */
    const float *w; /* [n] norm weight (f32; "+1" already baked where the model has it) */
    void *y_q;      /* q8_1 blocks [b, n/32] */
    float *y_f32;   /* [b, n] or NULL */
    int32_t n;
    int32_t b;
    float eps;
    int32_t release_first; /* CUDA scheduling only, never the values: 1 = release the next
                              launch before waiting for x (backend_cuda.h norm_release_tiers) */
} memra_rms_norm_q8_args;

static inline const char *memra_rms_norm_q8_check(const memra_rms_norm_q8_args *a)
{
    if (!a->x || !a->w || !a->y_q)
        return "null pointer";
    if (a->n <= 0 || a->b <= 0)
        return "non-positive dimension";
    if (a->n % 32 != 0)
        return "n is not a multiple of the q8_1 block (32)";
    if (!(a->eps >= 0.0f))
        return "eps is negative or NaN";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_rms_norm_q8_ref(const memra_rms_norm_q8_args *a);
#ifdef __cplusplus
}
#endif

#endif
