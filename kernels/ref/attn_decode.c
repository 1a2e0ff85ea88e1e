/*
 * attn_decode.c — CPU reference of attn_decode (contract and exact arithmetic:
 * kernels/attn_decode.h): two passes over the row's cache [0, positions[b]], f32 like the
 * reference model, scores recomputed rather than stored.
 */
#include "attn_decode.h"

#include <math.h>
#include <string.h>

#include "memra.h"
#include "quant.h"
#include "ref/ref_common.h"

typedef struct decode_row {
    const memra_attn_decode_args *a;
    int32_t b;
    int valid; /* positions[b] in [0, n_ctx) */
} decode_row;

/* Cache entry (position t, kv head j) of row base `base`, as f32. */
static void kv_load(const memra_attn_decode_args *a, uint64_t base, int32_t t, int32_t j,
                    float *dst)
{
    const uint64_t hb = memra_kv_head_bytes(a->kv_type, a->head_dim);
    const uint8_t *src = (const uint8_t *)(uintptr_t)base +
                         ((uint64_t)t * (uint64_t)a->n_head_kv + (uint64_t)j) * hb;
    if (a->kv_type == MEMRA_QT_F16) {
        const uint16_t *h = (const uint16_t *)src;
        for (int32_t c = 0; c < a->head_dim; c++)
            dst[c] = memra_fp16_to_f32(h[c]);
    } else {
        memra_dequantize_row(MEMRA_QT_Q8_0, src, dst, a->head_dim);
    }
}

static float score(const memra_attn_decode_args *a, const float *q, const float *k)
{
    float d = 0.0f;
    for (int32_t c = 0; c < a->head_dim; c++)
        d += q[c] * k[c];
    return d * a->scale;
}

/* o[head_dim] = gated attention output of q head i (kref_head_fn). */
static void head(void *ctx, int32_t i, float *o)
{
    const decode_row *r = ctx;
    const memra_attn_decode_args *a = r->a;
    const int32_t dh = a->head_dim, b = r->b;
    if (!r->valid) {
        memset(o, 0, sizeof(float) * (size_t)dh);
        return;
    }
    const int32_t p = a->positions[b], j = i / (a->n_head / a->n_head_kv);
    const float *q = a->q + (size_t)b * (size_t)(a->n_head * dh) + (size_t)(i * dh);
    const float *g = a->qg + (size_t)b * (size_t)(2 * a->n_head * dh) + (size_t)(2 * i * dh + dh);
    float kv[MEMRA_ATTN_MAX_HEAD_DIM];
    float mx = -INFINITY;
    for (int32_t t = 0; t <= p; t++) {
        kv_load(a, a->k_cache[b], t, j, kv);
        mx = fmaxf(mx, score(a, q, kv));
    }
    float l = 0.0f;
    memset(o, 0, sizeof(float) * (size_t)dh);
    for (int32_t t = 0; t <= p; t++) {
        kv_load(a, a->k_cache[b], t, j, kv);
        const float e = expf(score(a, q, kv) - mx);
        l += e;
        kv_load(a, a->v_cache[b], t, j, kv);
        for (int32_t c = 0; c < dh; c++)
            o[c] += e * kv[c];
    }
    const float inv = 1.0f / l;
    for (int32_t c = 0; c < dh; c++)
        o[c] *= inv;
    for (int32_t c = 0; c < dh; c++)
        o[c] *= kref_sigmoid(g[c]);
}

int memra_attn_decode_ref(const memra_attn_decode_args *a)
{
    if (memra_attn_decode_check(a))
        return MEMRA_ERR_INVALID_ARG;
    const int32_t width = a->n_head * a->head_dim;
    float buf[MEMRA_ATTN_MAX_HEAD_DIM];
    for (int32_t b = 0; b < a->b; b++) {
        decode_row r = {.a = a, .b = b,
                        .valid = a->positions[b] >= 0 && a->positions[b] < a->n_ctx};
        kref_emit_heads_q8_1(head, &r, a->n_head, a->head_dim, buf,
                             (memra_block_q8_1 *)a->y_q + (size_t)b * (size_t)(width / 32),
                             a->o ? a->o + (size_t)b * (size_t)width : NULL);
    }
    return MEMRA_OK;
}
