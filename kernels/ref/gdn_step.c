/*
 * gdn_step.c — CPU reference of gdn_step (contract and exact arithmetic: kernels/gdn_step.h):
 * the kernel's canonical order, emulated with the primitives of kernels/gdn_canon.h (lane
 * partials and the xor butterfly for the dk dot products and the norm sums).
 *
 * Walk per row: value heads in increasing h; each computes the conv outputs of the channels
 * it reads (its key head's q and k, its own v) from the OLD conv state, which is shifted only
 * after the last head. The per-channel arithmetic is that of the reference model's whole-row
 * conv, so recomputing a shared key head's channels gives the same bits every time.
 * Must not: call libm transcendentals (exact_math.h via gdn_canon.h only); let row b touch
 * another row's state.
 */
#include "gdn_step.h"

#include <string.h>

#include "gdn_canon.h"
#include "memra.h"
#include "quant.h"
#include "ref/ref_common.h"

typedef struct gdn_row {
    const memra_gdn_step_args *a;
    int32_t b;
    int32_t cc; /* conv channels */
} gdn_row;

/* silu(causal conv) of channels [c0, c0 + n) of the row into u[n] (OLD state). */
static void conv_silu(const gdn_row *r, int32_t c0, int32_t n, float *u)
{
    const memra_gdn_step_args *a = r->a;
    const int32_t K = a->conv_k;
    const float *raw = a->qkv + (size_t)r->b * (size_t)r->cc;
    const float *st = (const float *)(uintptr_t)a->conv_state[r->b]; /* [cc, K-1] */
    for (int32_t i = 0; i < n; i++) {
        const int32_t c = c0 + i;
        u[i] = memra_gdn_conv_silu(a->conv_w + (size_t)c * (size_t)K, st + (size_t)c * (size_t)(K - 1),
                                   raw[c], K);
    }
}

/* Value head h (kref_head_fn): update its S^T state, write the gated-norm output o[dv]. */
static void head(void *ctx, int32_t h, float *o)
{
    const gdn_row *r = ctx;
    const memra_gdn_step_args *a = r->a;
    const int32_t dk = a->head_k_dim, dv = a->head_v_dim, hk = a->n_k_head, hv = a->n_v_head;
    const int32_t ka = a->head_map == MEMRA_GDN_HEADS_TILED ? h % hk : h / (hv / hk);
    float q[MEMRA_GDN_MAX_HEAD_DIM], k[MEMRA_GDN_MAX_HEAD_DIM], v[MEMRA_GDN_MAX_HEAD_DIM];
    conv_silu(r, ka * dk, dk, q);
    conv_silu(r, hk * dk + ka * dk, dk, k);
    conv_silu(r, 2 * hk * dk + h * dv, dv, v);
    memra_gdn_l2_norm(q, q, dk, a->eps);
    memra_gdn_l2_norm(k, k, dk, a->eps);
    const float q_scale = memra_gdn_q_scale(dk);
    for (int32_t i = 0; i < dk; i++)
        q[i] *= q_scale;
    const size_t bh = (size_t)r->b * (size_t)hv + (size_t)h;
    const float beta = memra_gdn_beta(a->beta[bh]);
    const float lambda = memra_gdn_decay(a->ssm_a[h], a->alpha[bh], a->dt_bias[h]);
    float *St = (float *)(uintptr_t)a->ssm_state[r->b] + (size_t)h * (size_t)dv * (size_t)dk;
    memra_gdn_delta_rule(St, o, q, k, v, beta, lambda, dk, dv);
    memra_gdn_gated_norm(o, a->z + (size_t)r->b * (size_t)(hv * dv) + (size_t)(h * dv), a->norm_w, dv,
                         a->eps);
}

static void conv_shift(const gdn_row *r)
{
    const int32_t K = r->a->conv_k;
    const float *raw = r->a->qkv + (size_t)r->b * (size_t)r->cc;
    float *st = (float *)(uintptr_t)r->a->conv_state[r->b];
    for (int32_t c = 0; c < r->cc; c++) {
        float *w = st + (size_t)c * (size_t)(K - 1);
        memmove(w, w + 1, sizeof(float) * (size_t)(K - 2));
        w[K - 2] = raw[c];
    }
}

int memra_gdn_step_ref(const memra_gdn_step_args *a)
{
    if (memra_gdn_step_check(a))
        return MEMRA_ERR_INVALID_ARG;
    const int32_t width = a->n_v_head * a->head_v_dim;
    float buf[MEMRA_GDN_MAX_HEAD_DIM];
    for (int32_t b = 0; b < a->b; b++) {
        const gdn_row r = {.a = a, .b = b,
                           .cc = 2 * a->n_k_head * a->head_k_dim + width};
        kref_emit_heads_q8_1(head, (void *)&r, a->n_v_head, a->head_v_dim, buf,
                             (memra_block_q8_1 *)a->y_q + (size_t)b * (size_t)(width / 32),
                             a->o ? a->o + (size_t)b * (size_t)width : NULL);
        conv_shift(&r);
    }
    return MEMRA_OK;
}
