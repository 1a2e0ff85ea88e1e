/*
 * gdn_step.h — args of gdn_step (catalog: GDN_STEP): one decode token of a Gated DeltaNet
 * layer, from the merged qkv/z/beta/alpha projections to the q8_1 input of ssm_out
 * (spec qwen35.md §3.4 steps 2-10).
 *
 * Exactness: the CUDA kernel (gdn_step.cu, both its fast and generic paths) and the CPU
 * reference (ref/gdn_step.c) produce the same bits (memcmp) for o, y_q and both states. The
 * order below is the kernel's parallel order; it depends on dk and dv only (never on b, the
 * row, the block size or the SM count). Every piece is a function of kernels/gdn_canon.h.
 *
 * Dims: Hk key heads of dk, Hv value heads of dv, Ck = Hk*dk, Cv = Hv*dv, Cc = 2*Ck + Cv conv
 * channels, K conv taps. f32 ops are single IEEE ops rounded to nearest (no FMA); "f64" sums
 * add exact products (double)x * (double)x. Per row b:
 *   conv:  u_c = memra_x_siluf(acc), acc = 0 + conv_w[c,0] C(c,0) + ... + conv_w[c,K-2] C(c,K-2)
 *          + conv_w[c,K-1] qkv[b,c] (f32, left to right; memra_gdn_conv_silu);
 *          C(c, .) <- [C(c,1..K-2), qkv[b,c]] (raw values, time fastest, t = 0 oldest)
 *   lanes: a dk-vector's element i belongs to lane L(i) = (i / 4) % 32 (lane l: i = 128 m +
 *          4 l + c, m = 0, 1, .., c = 0..3); a dv-vector's element j to lane j % 32. A lane
 *          partial starts at 0 and adds its terms in increasing index. BFLY: for off = 16, 8,
 *          4, 2, 1: p_l <- p_l + p_(l xor off) for all 32 lanes at once (every lane ends equal).
 *   q_a, k_a (a < Hk): ss = BFLY of f64 lane partials of x_i^2 (dk layout);
 *          x_i <- x_i * (1.0f / fmaxf((float)sqrt(ss), eps)); then q_i <- q_i * (1.0f /
 *          sqrtf((float)dk)) as a separate multiply
 *   value head h uses key head a = h mod Hk (TILED, qwen35) or h / (Hv/Hk) (GROUPED)
 *   beta = memra_x_sigmoidf(beta[b,h]);
 *   lambda = memra_x_expf(ssm_a[h] * memra_x_softplusf(alpha[b,h] + dt_bias[h]))
 *   for each value index j (row j of S^T), with DOT(x, y) = BFLY of f32 lane partials of
 *   x_i * y_i (dk layout):
 *     s_i <- s_i * lambda;  r = DOT(s, k);  delta = beta * (v_j - r);
 *     s_i <- s_i + k_i * delta;  o_j = DOT(s, q)
 *   gated norm over head h's dv outputs: ss = BFLY of f64 lane partials of o_j^2 (dv layout);
 *     scale = 1.0f / sqrtf((float)(ss / dv) + eps);
 *     o_j <- (norm_w[j] * (o_j * scale)) * memra_x_siluf(z[b, h*dv + j])
 *   y_q[b] = memra_quantize_q8_1(o[b])  (q8_1 [b, Cv/32]); o also stored as f32 if non-NULL.
 * State (f32, per-sequence regions, row bases from the pointer table):
 *   conv: [Cc][K-1], element (c, t) at c*(K-1) + t
 *   ssm:  [Hv][dv][dk], S_h[i, j] (i key, j value) at h*dv*dk + j*dk + i (S^T, value-major)
 * Row b touches only row b's inputs and its own state.
 * Scheduling, never the bits (the CPU reference ignores both): prefetch_tasks (the CUDA fast
 * kernel's 4-warp form, the one large grids take) has each warp pull its state-row tasks that
 * many beyond the one it holds in registers into L2; split forces the fast kernel's CTAs per
 * value head (1, 2 or 4, where the shape allows it: the cluster limit, whole q8_1 blocks per
 * CTA; 0 = the launcher's choice).
 */
#ifndef MEMRA_KERNEL_GDN_STEP_H
#define MEMRA_KERNEL_GDN_STEP_H

#include <stdint.h>

#define MEMRA_GDN_MAX_HEAD_DIM 1024
#define MEMRA_GDN_MAX_CONV_KERNEL 64
/* memra_gdn_step_args.prefetch_tasks: 0 (default, none) .. this */
#define MEMRA_GDN_MAX_PREFETCH 4

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
    int32_t prefetch_tasks;     /* CUDA scheduling only: 0..MEMRA_GDN_MAX_PREFETCH (above) */
    int32_t split;              /* CUDA scheduling only: 0, 1, 2 or 4 (above) */
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
    if (a->prefetch_tasks < 0 || a->prefetch_tasks > MEMRA_GDN_MAX_PREFETCH)
        return "prefetch_tasks out of range 0..4";
    if (a->split != 0 && a->split != 1 && a->split != 2 && a->split != 4)
        return "split must be 0 (the launcher's choice), 1, 2 or 4";
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
