/*
 * ref_common.h — the scalar primitives every CPU reference op shares (kernels/ref/), written
 * exactly as the hand-written reference model (runtime/refmodel.c) writes them, so the CPU
 * backend and the reference model round every value identically:
 *   rms scale  = 1.0f / sqrtf((float)(sum_j x_j^2 (f64, increasing j) / n) + eps)
 *   rms norm   y_j = w_j * (x_j * scale)
 *   L2 norm    y_j = x_j * (1.0f / fmaxf((float)sqrt(sum_j x_j^2 (f64)), eps))
 *   sigmoid(x) = 1.0f / (1.0f + expf(-x));  silu(x) = x * sigmoid(x)
 *   softplus(x) = x > 20 ? x : log1pf(expf(x))
 * Not part of any args contract (a GPU kernel may compute them with its own libm).
 */
#ifndef MEMRA_KERNEL_REF_COMMON_H
#define MEMRA_KERNEL_REF_COMMON_H

#include <math.h>
#include <stdint.h>

float kref_rms_scale(const float *x, int32_t n, float eps);
/* y may alias x. */
void kref_rms_norm(const float *x, const float *w, float *y, int32_t n, float eps);
/* y may alias x. */
void kref_l2_norm(const float *x, float *y, int32_t n, float eps);

static inline float kref_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float kref_silu(float x) { return x * kref_sigmoid(x); }
static inline float kref_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Emit a row of `width` values produced head by head into q8_1 blocks (and optionally f32):
 * q8_1 blocks may straddle heads, so the row is walked block by block and head(i) is called
 * exactly once per head, in increasing i, when its first value is due. head_fn writes
 * head_dim values into buf. */
typedef void (*kref_head_fn)(void *ctx, int32_t i, float *buf);
void kref_emit_heads_q8_1(kref_head_fn head, void *ctx, int32_t n_heads, int32_t head_dim,
                          float *buf, void *y_q, float *y_f32);

#endif
