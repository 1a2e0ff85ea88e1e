/*
 * gdn_step.h — args of gdn_step (catalog: GDN_STEP): one decode token of a Gated DeltaNet
 * layer, from the merged qkv/z/beta/alpha projections to the q8_1 input of ssm_out
 * (spec qwen35.md §3.4 steps 2-10).
 *
 * Dims: Hk key heads of dk, Hv value heads of dv, Ck = Hk*dk, Cv = Hv*dv, Cc = 2*Ck + Cv conv
 * channels, K conv taps. Per row b (f32, RN, no FMA; identical to runtime/refmodel.c):
 *   conv:  u_c = sum_{j<K-1} conv_w[c,j] * C(c,j), then + conv_w[c,K-1] * qkv[b,c]
 *          (f32 accumulation in that order); u_c = silu(u_c);
 *          C(c, .) <- [C(c,1..K-2), qkv[b,c]] (raw values, time fastest, t = 0 oldest)
 *   q_a, k_a (a < Hk): L2-normed (ref_common.h), q_a *= 1.0f / sqrtf(dk)
 *   value head h uses key head a = h mod Hk (TILED, qwen35) or h / (Hv/Hk) (GROUPED)
 *   beta = sigmoid(beta[b,h]);  lambda = expf(ssm_a[h] * softplus(alpha[b,h] + dt_bias[h]))
 *   for each value index j (row j of S^T): S[.,j] *= lambda; r = sum_i S[i,j] k_i;
 *     delta = beta * (v_j - r); S[i,j] += k_i * delta; o_j = sum_i S[i,j] q_i   (f32 sums,
 *     increasing i)
 *   o_h <- rmsnorm(o_h) * norm_w * silu(z[b, h*dv ..)) (rms_norm_q8 arithmetic over dv)
 *   y_q[b] = memra_quantize_q8_1(o[b])  (q8_1 [b, Cv/32]); o also stored as f32 if non-NULL.
 * State (f32, per-sequence regions, row bases from the pointer table):
 *   conv: [Cc][K-1], element (c, t) at c*(K-1) + t
 *   ssm:  [Hv][dv][dk], S_h[i, j] (i key, j value) at h*dv*dk + j*dk + i (S^T, value-major)
 * Row b touches only row b's inputs and its own state.
 */
#ifndef MEMRA_KERNEL_GDN_STEP_H
#define MEMRA_KERNEL_GDN_STEP_H

#include <stdint.h>

#define MEMRA_GDN_MAX_HEAD_DIM 1024
#define MEMRA_GDN_MAX_CONV_KERNEL 64

enum { MEMRA_GDN_HEADS_TILED = 0, MEMRA_GDN_HEADS_GROUPED = 1 };

typedef struct memra_gdn_step_args {
    const float *qkv;           /* [b, Cc] raw conv input: [q: Ck][k: Ck][v: Cv] */
    const float *z;             /* [b, Cv] output gate */
    const float *beta;          /* [b, Hv] beta logits */
    const float *alpha;         /* [b, Hv] alpha logits */
    const float *conv_w;        /* [Cc, K] (GGUF ssm_conv1d {K, Cc}) */
    const float *dt_bias;       /* [Hv] */
    const float *ssm_a;         /* [Hv] (already -exp(A_log)) */
    const float *norm_w;        /* [dv] gated-norm weight (no +1) */
    const uint64_t *conv_state; /* [b] row bases of the layer's conv region */
    const uint64_t *ssm_state;  /* [b] row bases of the layer's ssm region */
    void *y_q;                  /* q8_1 blocks [b, Cv / 32] */
    float *o;                   /* [b, Cv] or NULL */
    int32_t n_k_head;           /* Hk */
    int32_t n_v_head;           /* Hv */
    int32_t head_k_dim;         /* dk */
    int32_t head_v_dim;         /* dv */
    int32_t conv_k;             /* K */
    int32_t head_map;           /* MEMRA_GDN_HEADS_TILED | MEMRA_GDN_HEADS_GROUPED */
    int32_t b;
    float eps;                  /* rms eps, also the L2-norm floor */
} memra_gdn_step_args;

static inline const char *memra_gdn_step_check(const memra_gdn_step_args *a)
{
    if (!a->qkv || !a->z || !a->beta || !a->alpha || !a->conv_w || !a->dt_bias || !a->ssm_a ||
        !a->norm_w || !a->conv_state || !a->ssm_state || !a->y_q)
        return "null pointer";
    if (a->b <= 0 || a->n_k_head <= 0 || a->n_v_head <= 0 || a->n_v_head % a->n_k_head != 0)
        return "head counts must be positive with Hv a multiple of Hk";
    if (a->head_k_dim <= 0 || a->head_k_dim > MEMRA_GDN_MAX_HEAD_DIM || a->head_v_dim <= 0 ||
        a->head_v_dim > MEMRA_GDN_MAX_HEAD_DIM)
        return "head dims out of range 1..1024";
    if (((int64_t)a->n_v_head * a->head_v_dim) % 32 != 0)
        return "Cv is not a multiple of 32 (q8_1 output)";
    if (a->conv_k < 2 || a->conv_k > MEMRA_GDN_MAX_CONV_KERNEL)
        return "conv_k out of range 2..64";
    if (a->head_map != MEMRA_GDN_HEADS_TILED && a->head_map != MEMRA_GDN_HEADS_GROUPED)
        return "unknown head mapping";
    if (!(a->eps >= 0.0f))
        return "eps is negative or NaN";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_gdn_step_ref(const memra_gdn_step_args *a);
#ifdef __cplusplus
}
#endif

#endif
