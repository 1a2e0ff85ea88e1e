/*
 * ref_common.c — shared scalar primitives of the CPU reference ops (see ref_common.h for the
 * exact arithmetic and why it is written this way).
 */
#include "ref/ref_common.h"

#include <string.h>

#include "exact_math.h"
#include "quant.h"
#include "rms_norm_q8.h"

/* ------------------------------- canonical primitives -------------------------------- */

#define KREF_MAX_THREADS 1024

double kref_warp_sum_f64(double v[32])
{
    for (int o = 16; o >= 1; o >>= 1) /* lane l < o: v_l + v_(l xor o) = v_l + v_(l+o) */
        for (int l = 0; l < o; l++)
            v[l] = v[l] + v[l + o];
    return v[0];
}

float kref_warp_sum_f32(float v[32])
{
    for (int o = 16; o >= 1; o >>= 1)
        for (int l = 0; l < o; l++)
            v[l] = v[l] + v[l + o];
    return v[0];
}

double kref_block_sum_f64(double *part, int32_t threads)
{
    double r[32];
    const int32_t nw = threads / 32;
    for (int32_t w = 0; w < 32; w++)
        r[w] = w < nw ? kref_warp_sum_f64(part + 32 * w) : 0.0;
    return kref_warp_sum_f64(r);
}

float kref_block_sum_f32(float *part, int32_t threads)
{
    float r[32];
    const int32_t nw = threads / 32;
    for (int32_t w = 0; w < 32; w++)
        r[w] = w < nw ? kref_warp_sum_f32(part + 32 * w) : 0.0f;
    return kref_warp_sum_f32(r);
}

double kref_sum_sq_f64_blk(const float *x, int32_t n, int32_t threads)
{
    double part[KREF_MAX_THREADS];
    for (int32_t t = 0; t < threads; t++)
        part[t] = 0.0;
    for (int32_t j0 = 0; j0 < n; j0 += threads) /* thread t: j = t, t + threads, ... */
        for (int32_t t = 0; t < threads && j0 + t < n; t++)
            part[t] += (double)x[j0 + t] * (double)x[j0 + t];
    return kref_block_sum_f64(part, threads);
}

float kref_rms_scale_blk(const float *x, int32_t n, float eps, int32_t threads)
{
    const float mean = (float)(kref_sum_sq_f64_blk(x, n, threads) / (double)n);
    return 1.0f / sqrtf(mean + eps); /* eps inside the sqrt, added to the mean */
}

void kref_rms_norm_blk(const float *x, const float *w, float *y, int32_t n, float eps,
                       int32_t threads)
{
    const float scale = kref_rms_scale_blk(x, n, eps, threads);
    for (int32_t j = 0; j < n; j++)
        y[j] = w ? w[j] * (x[j] * scale) : x[j] * scale;
}

void kref_rms_norm_canon(const float *x, const float *w, float *y, int32_t n, float eps)
{
    kref_rms_norm_blk(x, w, y, n, eps, MEMRA_RMS_NORM_Q8_THREADS);
}

float kref_exp_sum_blk(const float *x, int32_t n, float mx, int32_t threads)
{
    float part[KREF_MAX_THREADS];
    for (int32_t t = 0; t < threads; t++)
        part[t] = 0.0f;
    for (int32_t j0 = 0; j0 < n; j0 += threads)
        for (int32_t t = 0; t < threads && j0 + t < n; t++)
            part[t] += memra_x_expf(x[j0 + t] - mx);
    return kref_block_sum_f32(part, threads);
}

void kref_softmax_blk(float *y, const float *x, int32_t n, int32_t threads)
{
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++)
        mx = fmaxf(mx, x[j]);
    const float inv = 1.0f / kref_exp_sum_blk(x, n, mx, threads);
    for (int32_t j = 0; j < n; j++)
        y[j] = memra_x_expf(x[j] - mx) * inv;
}

void kref_emit_heads_q8_1(kref_head_fn head, void *ctx, int32_t n_heads, int32_t head_dim,
                          float *buf, void *y_q, float *y_f32)
{
    const int32_t width = n_heads * head_dim;
    memra_block_q8_1 *yq = y_q; /* [width / 32] */
    float blk[32];
    int32_t cached = -1;
    for (int32_t c0 = 0; c0 < width; c0 += 32) {
        for (int32_t c = 0; c < 32; c++) {
            const int32_t i = (c0 + c) / head_dim;
            if (i != cached) {
                head(ctx, i, buf);
                cached = i;
            }
            blk[c] = buf[(c0 + c) % head_dim];
        }
        memra_quantize_q8_1(blk, yq + c0 / 32, 32);
        if (y_f32)
            memcpy(y_f32 + c0, blk, sizeof blk);
    }
}
