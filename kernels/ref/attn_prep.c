/*
 * attn_prep.c — CPU reference of attn_prep (contract and exact arithmetic: kernels/attn_prep.h):
 * q/k head norms, partial NEOX / IMRoPE rotation, KV-cache append. Bit-identical to the CUDA
 * kernel: the norm emulates its 128-thread f64 block sum (kref_rms_norm_blk), the angle is
 * the shared inline memra_attn_rope_cs.
 * Must not: call libm transcendentals (exact_math.h only), or sum in another order.
 */
#include "attn_prep.h"

#include <math.h>

#include "memra.h"
#include "quant.h"
#include "ref/ref_common.h"

void memra_attn_head_norm(const float *x, const float *w, float *y, int32_t n, float eps)
{
    kref_rms_norm_blk(x, w, y, n, eps, MEMRA_ATTN_PREP_THREADS);
}

void memra_attn_rope(float *x, int32_t n_rot, const int32_t sections[4], int32_t pos,
                     float freq_base, float freq_scale)
{
    const int32_t half = n_rot / 2;
    for (int32_t m = 0; m < half; m++) {
        float c, s;
        memra_attn_rope_cs(memra_attn_rope_pos(sections, m, pos), m, n_rot, freq_base, freq_scale,
                           &c, &s);
        const float x0 = x[m], x1 = x[m + half];
        x[m] = x0 * c - x1 * s;
        x[m + half] = x0 * s + x1 * c;
    }
}

static void kv_store(int32_t kv_type, const float *src, uint8_t *dst, int32_t head_dim)
{
    if (kv_type == MEMRA_QT_F16) {
        uint16_t *h = (uint16_t *)dst;
        for (int32_t d = 0; d < head_dim; d++)
            h[d] = memra_f32_to_fp16(src[d]);
    } else {
        memra_quantize_row(MEMRA_QT_Q8_0, src, dst, head_dim);
    }
}

static void prep_row(const memra_attn_prep_args *a, int32_t b)
{
    const int32_t dh = a->head_dim, p = a->positions[b];
    const float *qg = a->qg + (size_t)b * (size_t)(2 * a->n_head * dh); /* [n_head, 2, dh] */
    float *q = a->q + (size_t)b * (size_t)(a->n_head * dh);             /* [n_head, dh] */
    for (int32_t i = 0; i < a->n_head; i++) {
        memra_attn_head_norm(qg + (size_t)(2 * i * dh), a->q_norm, q + (size_t)(i * dh), dh, a->eps);
        memra_attn_rope(q + (size_t)(i * dh), a->n_rot, a->sections, p, a->freq_base, a->freq_scale);
    }
    if (p < 0 || p >= a->n_ctx)
        return;
    const uint64_t hb = memra_kv_head_bytes(a->kv_type, dh);
    const uint64_t pos_off = (uint64_t)p * (uint64_t)a->n_head_kv * hb;
    uint8_t *kc = (uint8_t *)(uintptr_t)a->k_cache[b] + pos_off; /* [n_head_kv] entries */
    uint8_t *vc = (uint8_t *)(uintptr_t)a->v_cache[b] + pos_off;
    float kh[MEMRA_ATTN_MAX_HEAD_DIM];
    for (int32_t j = 0; j < a->n_head_kv; j++) {
        const size_t off = (size_t)b * (size_t)(a->n_head_kv * dh) + (size_t)(j * dh);
        memra_attn_head_norm(a->k + off, a->k_norm, kh, dh, a->eps);
        memra_attn_rope(kh, a->n_rot, a->sections, p, a->freq_base, a->freq_scale);
        kv_store(a->kv_type, kh, kc + (uint64_t)j * hb, dh);
        kv_store(a->kv_type, a->v + off, vc + (uint64_t)j * hb, dh);
    }
}

int memra_attn_prep_ref(const memra_attn_prep_args *a)
{
    if (memra_attn_prep_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int32_t b = 0; b < a->b; b++)
        prep_row(a, b);
    return MEMRA_OK;
}
