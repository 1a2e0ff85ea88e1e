/*
 * attn_decode.h — args of attn_decode (catalog: ATTN_DECODE): gated attention of one decode
 * token over the row's own KV cache, output quantized for the o-projection
 * (spec qwen35.md §3.3 steps 6-7).
 *
 * Per row b, q head i, kv head j = i / (n_head / n_head_kv) (grouped GQA), p = positions[b]:
 *   s_t = (q_i . k_{j,t}) * scale, t in [0, p];  o_i = sum_t softmax(s)_t v_{j,t};
 *   o_i <- o_i * sigmoid(gate_i) with gate_i = qg[b, 2*dh*i + dh ..) (raw, from the q proj);
 *   y_q[b] = memra_quantize_q8_1(o[b])  (q8_1 [b, n_head*head_dim/32]).
 * CPU reference arithmetic (f32, RN, no FMA; identical to runtime/refmodel.c): d = sum_c
 * q_c k_c in increasing c; s = d * scale; mx = fmaxf over t; e_t = expf(s_t - mx);
 * l = sum_t e_t and o_c = sum_t e_t v_tc in increasing t; o_c = o_c * (1.0f / l);
 * o_c = o_c * sigmoid(gate_c). Scores are recomputed in the second pass instead of stored,
 * so the reference needs no scratch.
 * A GPU kernel splits the keys (flash-decoding) into at most max_split parts, with the split
 * count derived from THIS row's length only (partials in scratch), so a row's result never
 * depends on b or on other rows; it agrees with the reference up to float summation order.
 * Cache layout: attn_prep.h. A position outside [0, n_ctx) produces a zero row.
 */
#ifndef MEMRA_KERNEL_ATTN_DECODE_H
#define MEMRA_KERNEL_ATTN_DECODE_H

#include <stdint.h>

#include "attn_prep.h"

typedef struct memra_attn_decode_args {
    const float *q;           /* [b, n_head * head_dim] (attn_prep output) */
    const float *qg;          /* [b, n_head, 2, head_dim]: the gate halves */
    const int32_t *positions; /* [b] */
    const uint64_t *k_cache;  /* [b] row bases */
    const uint64_t *v_cache;  /* [b] row bases */
    float *scratch;           /* [b, n_head, max_split, head_dim + 2] GPU partials; unused
                                 by the CPU reference (may be NULL there) */
    void *y_q;                /* q8_1 blocks [b, n_head * head_dim / 32] */
    float *o;                 /* [b, n_head * head_dim] f32 copy of the output, or NULL */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t kv_type;
    int32_t n_ctx;
    int32_t max_split;
    int32_t b;
    float scale;              /* 1/sqrt(head_dim) for qwen35 (attention.scale is ignored) */
} memra_attn_decode_args;

static inline const char *memra_attn_decode_check(const memra_attn_decode_args *a)
{
    if (!a->q || !a->qg || !a->positions || !a->k_cache || !a->v_cache || !a->y_q)
        return "null pointer";
    if (a->b <= 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return "head counts must be positive with n_head a multiple of n_head_kv";
    if (a->head_dim <= 0 || a->head_dim > MEMRA_ATTN_MAX_HEAD_DIM)
        return "head_dim out of range 1..1024";
    if (((int64_t)a->n_head * a->head_dim) % 32 != 0)
        return "n_head * head_dim is not a multiple of 32 (q8_1 output)";
    if (memra_kv_head_bytes(a->kv_type, a->head_dim) == 0)
        return "KV cache type must be f16, or q8_0 with head_dim % 32 == 0";
    if (a->n_ctx <= 0 || a->max_split <= 0 || !(a->scale > 0.0f))
        return "n_ctx, max_split or scale out of range";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_attn_decode_ref(const memra_attn_decode_args *a);
#ifdef __cplusplus
}
#endif

#endif
