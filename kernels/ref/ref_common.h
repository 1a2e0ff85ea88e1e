/*
 * ref_common.h — the primitives the CPU reference ops (kernels/ref/) and the reference model
 * (runtime/refmodel.c) share, bit-identical to the CUDA kernels: kernels/exact_math.h for
 * every transcendental, and the kernels' own reduction orders, emulated exactly:
 *   kref_warp_sum_f64/f32(v[32]): the xor butterfly of cuda_common.cuh warp_sum_f64/f32:
 *       for o = 16, 8, 4, 2, 1: v[l] = v[l] + v[l + o] for l < o; result v[0]. (On the GPU
 *       lane l adds lane l ^ o; lanes l and l ^ o hold the same bits since a + b == b + a,
 *       so lane l's value only depends on l mod o and these halving steps are exact.)
 *   kref_block_sum_f64/f32(part[threads], threads): cuda_common.cuh block_sum_f64/f32 (and
 *       block_sum_f64_last, the same order) of the per-thread values part[t] (threads a
 *       multiple of 32, <= 1024): warp w's butterfly of part[32w .. 32w+31]; then one more
 *       butterfly over the 32 values r[w] (r[w] = +0 for w >= threads / 32; every GPU warp
 *       forms it). part is clobbered.
 *   kref_sum_sq_f64_blk(x, n, threads): thread t of `threads` sums (double)x_j * x_j (exact
 *       products) for j = t, t + threads, ... in f64 starting from +0.0; then
 *       kref_block_sum_f64.
 *   kref_rms_scale_blk(x, n, eps, threads) = 1.0f / sqrtf((float)(kref_sum_sq_f64_blk / n) + eps)
 *   kref_rms_norm_blk(x, w, y, n, eps, threads): y_j = w_j * (x_j * scale), or x_j * scale
 *       when w is NULL. The engine's RMS norm (rms_norm_q8: layer norms, final norm) is
 *       threads = MEMRA_RMS_NORM_Q8_THREADS (1024): kref_rms_norm_canon.
 *   kref_exp_sum_blk(x, n, mx, threads): thread t sums memra_x_expf(x_j - mx) (f32, RN) for
 *       j = t, t + threads, ... starting from +0.0f; then kref_block_sum_f32.
 *   kref_softmax_blk(y, x, n, threads): mx = fmaxf over x; Z = kref_exp_sum_blk(x, n, mx,
 *       threads); y_j = memra_x_expf(x_j - mx) * (1.0f / Z). moe_route's softmax is
 *       threads = MEMRA_MOE_ROUTE_THREADS (256).
 *   sigmoid / silu / softplus / exp: memra_x_sigmoidf / memra_x_siluf / memra_x_softplusf /
 *       memra_x_expf (kernels/exact_math.h). silu_mul_q8: memra_x_siluf(g) * u.
 */
#ifndef MEMRA_KERNEL_REF_COMMON_H
#define MEMRA_KERNEL_REF_COMMON_H

#include <math.h>
#include <stdint.h>

/* threads: a multiple of 32 in [32, 1024]. */
double kref_warp_sum_f64(double v[32]);
float kref_warp_sum_f32(float v[32]);
double kref_block_sum_f64(double *part, int32_t threads);
float kref_block_sum_f32(float *part, int32_t threads);
double kref_sum_sq_f64_blk(const float *x, int32_t n, int32_t threads);
float kref_rms_scale_blk(const float *x, int32_t n, float eps, int32_t threads);
/* w may be NULL (no weight); y may alias x. */
void kref_rms_norm_blk(const float *x, const float *w, float *y, int32_t n, float eps,
                       int32_t threads);
/* kref_rms_norm_blk with rms_norm_q8's order (threads 1024): the engine's RMS norm. */
void kref_rms_norm_canon(const float *x, const float *w, float *y, int32_t n, float eps);
float kref_exp_sum_blk(const float *x, int32_t n, float mx, int32_t threads);
/* y may alias x. */
void kref_softmax_blk(float *y, const float *x, int32_t n, int32_t threads);

/* Emit a row of `width` values produced head by head into q8_1 blocks (and optionally f32):
 * q8_1 blocks may straddle heads, so the row is walked block by block and head(i) is called
 * exactly once per head, in increasing i, when its first value is due. head_fn writes
 * head_dim values into buf. */
typedef void (*kref_head_fn)(void *ctx, int32_t i, float *buf);
void kref_emit_heads_q8_1(kref_head_fn head, void *ctx, int32_t n_heads, int32_t head_dim,
                          float *buf, void *y_q, float *y_f32);

#endif
