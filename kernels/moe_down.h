/*
 * moe_down.h — args of moe_down (catalog: MOE_DOWN): the routed experts' down projections
 * fused with the weighted combine and the residual add, plus the shared expert:
 *   x[b] += sum_r wts[b,r] * (W[ids[b,r]] . a[b,r]) + sigmoid(sh_gate[b]) * (sh_w . sh_a[b])
 * Per output o of row b, exactly (f32, RN, no FMA; the reference model's order,
 * runtime/refmodel.c; CPU reference and CUDA kernel alike, so x is bit-identical):
 *   f = 0
 *   for r in 0..n_used-1 (moe_route's rank order), e = ids[b, r] in [0, n_expert):
 *     d = memra_vec_dot_q8_1(W[e] row o, a[b, r], k)  (* scale[e] when given);  f = f + w_r * d
 *   if the shared expert is present (slot 1):
 *     s = memra_vec_dot_q8_1(sh_w row o, sh_a[b], k_sh)  (* sh_scale[0] when given)
 *     f = f + memra_x_sigmoidf(sh_gate[b]) * s       (kernels/exact_math.h, both sides)
 *   x[b, o] = x[b, o] + f
 * memra_vec_dot_q8_1: T = 0; T = T + r_j over the dot blocks j in increasing order, r_j =
 * memra_vec_dot_block (runtime/quant.c). An id outside [0, n_expert) contributes nothing
 * (never produced by moe_route). n_used <= MEMRA_MOE_MAX_USED (moe_route's bound).
 * CUDA (kernels/moe_down.cu): one CTA per (b, 16-output tile); its warps compute the d / s
 * of the ranks and the shared expert in parallel (kernels/moe_tile.cuh), then one thread per
 * output runs the f chain above.
 */
#ifndef MEMRA_KERNEL_MOE_DOWN_H
#define MEMRA_KERNEL_MOE_DOWN_H

#include <stdint.h>

#include "moe_route.h" /* MEMRA_MOE_MAX_USED */

typedef struct memra_moe_down_args {
    const void *a;          /* q8_1 blocks [b, n_used, k/32]: each expert's silu_mul output */
    const int32_t *ids;     /* [b, n_used] */
    const float *wts;       /* [b, n_used] */
    const void *w;          /* expert down weights {k, n, n_expert} */
    const float *scale;     /* [n_expert] or NULL */
    float *x;               /* [b, n] residual stream, updated in place */
    const void *sh_a;       /* q8_1 blocks [b, k_sh/32], or NULL (no shared expert) */
    const void *sh_w;       /* shared down weight {k_sh, n}, or NULL */
    const float *sh_scale;  /* [1] or NULL */
    const float *sh_gate;   /* [b] shared-expert gate logits, or NULL */
    uint64_t row_bytes;     /* memra_quant_row_bytes(qtype, k) */
    uint64_t expert_bytes;  /* >= n * row_bytes */
    uint64_t sh_row_bytes;  /* memra_quant_row_bytes(sh_qtype, k_sh) */
    int32_t qtype;
    int32_t sh_qtype;
    int32_t k;
    int32_t n;
    int32_t n_used;
    int32_t n_expert;
    int32_t k_sh;
    int32_t b;
} memra_moe_down_args;

static inline const char *memra_moe_down_check(const memra_moe_down_args *a)
{
    if (!a->a || !a->ids || !a->wts || !a->w || !a->x)
        return "null pointer";
    if (a->k <= 0 || a->k % 32 != 0 || a->n <= 0 || a->b <= 0 || a->n_used <= 0 ||
        a->n_expert <= 0 || a->n_used > MEMRA_MOE_MAX_USED)
        return "k must be a positive multiple of 32; n, b, n_expert positive; n_used in 1..64";
    if (a->row_bytes == 0 || a->expert_bytes < (uint64_t)a->n * a->row_bytes)
        return "expert geometry out of range";
    const int sh = a->sh_a != 0;
    if ((a->sh_w != 0) != sh || (a->sh_gate != 0) != sh)
        return "sh_a, sh_w and sh_gate must be given together";
    if (sh && (a->k_sh <= 0 || a->k_sh % 32 != 0 || a->sh_row_bytes == 0))
        return "k_sh must be a positive multiple of 32";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG (check, or a type without q8_1 dot). */
int memra_moe_down_ref(const memra_moe_down_args *a);
#ifdef __cplusplus
}
#endif

#endif
