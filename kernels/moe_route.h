/*
 * moe_route.h — args of moe_route (catalog: MOE_ROUTE): softmax routing over n_expert
 * router logits, top-k, renormalisation (spec qwen35.md §3.5 steps 1-3).
 *
 * Per row b (f32, RN, no FMA), bit-identical on CPU and GPU:
 *   mx = fmaxf over l (order-free; its zero sign cannot change l - mx's exp);
 *   e_i = memra_x_expf(l_i - mx) (kernels/exact_math.h);
 *   Z = sum_i e_i in f32 in THIS order, T = MEMRA_MOE_ROUTE_THREADS = 256 (the CUDA block):
 *       thread t sums i = t, t + T, t + 2T, ... < n_expert from +0.0f, increasing i; then
 *       each of the 8 warps' 32 partials by the xor butterfly (v[l] += v[l + o] for l < o,
 *       o = 16, 8, 4, 2, 1; result v[0]); then the butterfly over r[0..31] = the 8 warp sums
 *       followed by 24 zeros (+0.0f)  (cuda_common.cuh block_sum_f32; CPU:
 *       kref_exp_sum_blk(l, n_expert, mx, 256) = kref_softmax_blk's Z);
 *   pi_i = e_i * (1.0f / Z)
 *   ids[b, 0..k) = the k largest pi, descending; equal pi: lower index first; NaN last
 *       (a total order, so the selection does not depend on any scan order)
 *   W = sum_r pi_{ids[r]} (f32, rank order from +0.0f);  w[b, r] = pi_{ids[r]} / fmaxf(W, 2^-14)
 * The moe_down op sums experts in ids order, so that order is part of the contract.
 * NaN logits: same ids, NaN weight payloads may differ.
 */
#ifndef MEMRA_KERNEL_MOE_ROUTE_H
#define MEMRA_KERNEL_MOE_ROUTE_H

#include <stdint.h>

#define MEMRA_MOE_MAX_EXPERTS 65536
#define MEMRA_MOE_MAX_USED 64
#define MEMRA_MOE_ROUTE_THREADS 256 /* the CUDA block; part of the order of Z */

typedef struct memra_moe_route_args {
    const float *logits; /* [b, n_expert] router logits */
    int32_t *ids;        /* [b, n_used] */
    float *weights;      /* [b, n_used] */
    int32_t n_expert;
    int32_t n_used;
    int32_t b;
    int32_t pad_;
} memra_moe_route_args;

static inline const char *memra_moe_route_check(const memra_moe_route_args *a)
{
    if (!a->logits || !a->ids || !a->weights)
        return "null pointer";
    if (a->b <= 0 || a->n_expert <= 0 || a->n_expert > MEMRA_MOE_MAX_EXPERTS)
        return "n_expert out of range 1..65536";
    if (a->n_used <= 0 || a->n_used > a->n_expert || a->n_used > MEMRA_MOE_MAX_USED)
        return "n_used out of range 1..min(n_expert, 64)";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_moe_route_ref(const memra_moe_route_args *a);
#ifdef __cplusplus
}
#endif

#endif
