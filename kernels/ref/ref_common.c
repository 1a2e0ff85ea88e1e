/*
 * ref_common.c — shared scalar primitives of the CPU reference ops (see ref_common.h for the
 * exact arithmetic and why it is written this way).
 */
#include "ref/ref_common.h"

#include <string.h>

#include "quant.h"

float kref_rms_scale(const float *x, int32_t n, float eps)
{
    double ss = 0.0;
    for (int32_t j = 0; j < n; j++)
        ss += (double)x[j] * (double)x[j];
    const float mean = (float)(ss / (double)n);
    return 1.0f / sqrtf(mean + eps); /* eps inside the sqrt, added to the mean */
}

void kref_rms_norm(const float *x, const float *w, float *y, int32_t n, float eps)
{
    const float scale = kref_rms_scale(x, n, eps);
    for (int32_t j = 0; j < n; j++)
        y[j] = w[j] * (x[j] * scale);
}

void kref_l2_norm(const float *x, float *y, int32_t n, float eps)
{
    double ss = 0.0;
    for (int32_t j = 0; j < n; j++)
        ss += (double)x[j] * (double)x[j];
    const float scale = 1.0f / fmaxf((float)sqrt(ss), eps);
    for (int32_t j = 0; j < n; j++)
        y[j] = x[j] * scale;
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
