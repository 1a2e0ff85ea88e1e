/*
 * attn_prep.h — args of attn_prep (catalog: ATTN_PREP): everything between the merged
 * q/k/v projections and the attention scan of one gated full-attention layer
 * (spec qwen35.md §3.3 steps 1-5):
 *   per q head i:  q_i = qg[b, 2*dh*i .. 2*dh*i + dh) (the gate half stays in qg for
 *                  attn_decode);  q[b, i] = rope(rmsnorm(q_i) * q_norm)
 *   per kv head j: k_j = rope(rmsnorm(k_j) * k_norm); k_j and v_j are appended to the layer's
 *                  KV cache at positions[b]
 * rmsnorm is the rms_norm_q8 arithmetic over head_dim. RoPE (identical to the reference
 * model): NEOX half-split pairs (m, m + n_rot/2), m < n_rot/2,
 *   theta_m = (double)pos_m * pow(freq_base, -2m/n_rot) * freq_scale   (f64, left to right)
 *   c = (float)cos(theta), s = (float)sin(theta);  x0' = x0*c - x1*s, x1' = x0*s + x1*c (f32)
 * pos_m = positions[b], except IMRoPE (sections not all zero): pair m's sector
 * s = m mod (S0+S1+S2+S3) uses p when it is a t/h/w sector (s%3==0 && s<3*S0,
 * s%3==1 && s<3*S1, s%3==2 && s<3*S2), else the "e" position 0 (text: t = h = w = p, e = 0).
 * All-zero sections = plain NEOX with position p (qwen3next).
 *
 * KV cache: a state region per layer and row, base from the pointer table, layout
 * [n_ctx][n_head_kv][head_dim] of kv_type (F16 RN-even, or Q8_0 blocks over head_dim).
 * A position outside [0, n_ctx) is never written (the host refuses such a tick with
 * MEMRA_ERR_CAPACITY before it starts; the check here only keeps a bad tick in bounds).
 */
#ifndef MEMRA_KERNEL_ATTN_PREP_H
#define MEMRA_KERNEL_ATTN_PREP_H

#include <stdint.h>

#include "qtype.h"

#define MEMRA_ATTN_MAX_HEAD_DIM 1024

typedef struct memra_attn_prep_args {
    const float *qg;          /* [b, n_head, 2, head_dim] q/gate interleaved per head */
    const float *k;           /* [b, n_head_kv * head_dim] */
    const float *v;           /* [b, n_head_kv * head_dim] */
    const float *q_norm;      /* [head_dim] */
    const float *k_norm;      /* [head_dim] */
    const int32_t *positions; /* [b] tick block */
    const uint64_t *k_cache;  /* [b] row bases of the layer's K region (pointer table row) */
    const uint64_t *v_cache;  /* [b] row bases of the layer's V region */
    float *q;                 /* [b, n_head * head_dim] normed, rotated */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_rot;            /* rotary dims R (even, <= head_dim) */
    int32_t sections[4];      /* IMRoPE sections (t, h, w, e); all 0 = NEOX */
    int32_t kv_type;          /* MEMRA_QT_F16 | MEMRA_QT_Q8_0 */
    int32_t n_ctx;            /* positions a cache region holds */
    int32_t b;
    float eps;
    float freq_base;
    float freq_scale;         /* 1 without rope scaling */
} memra_attn_prep_args;

/* Bytes of one (position, kv head) cache entry of kv_type; 0 if unsupported. */
static inline uint64_t memra_kv_head_bytes(int32_t kv_type, int32_t head_dim)
{
    if (kv_type == MEMRA_QT_F16)
        return (uint64_t)head_dim * 2u;
    if (kv_type == MEMRA_QT_Q8_0 && head_dim % 32 == 0)
        return (uint64_t)(head_dim / 32) * 34u;
    return 0;
}

static inline const char *memra_attn_prep_check(const memra_attn_prep_args *a)
{
    if (!a->qg || !a->k || !a->v || !a->q_norm || !a->k_norm || !a->positions || !a->k_cache ||
        !a->v_cache || !a->q)
        return "null pointer";
    if (a->b <= 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return "head counts must be positive with n_head a multiple of n_head_kv";
    if (a->head_dim <= 0 || a->head_dim > MEMRA_ATTN_MAX_HEAD_DIM)
        return "head_dim out of range 1..1024";
    if (a->n_rot < 0 || a->n_rot > a->head_dim || a->n_rot % 2 != 0)
        return "n_rot must be even and <= head_dim";
    for (int i = 0; i < 4; i++)
        if (a->sections[i] < 0 || a->sections[i] > 1024)
            return "rope section out of range 0..1024";
    if (memra_kv_head_bytes(a->kv_type, a->head_dim) == 0)
        return "KV cache type must be f16, or q8_0 with head_dim % 32 == 0";
    if (a->n_ctx <= 0)
        return "n_ctx must be positive";
    if (!(a->eps >= 0.0f) || !(a->freq_base > 0.0f) || !(a->freq_scale > 0.0f))
        return "eps, freq_base or freq_scale out of range";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_attn_prep_ref(const memra_attn_prep_args *a);
#ifdef __cplusplus
}
#endif

#endif
