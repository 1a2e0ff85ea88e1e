/*
 * moe_route.c — CPU reference of moe_route (contract: kernels/moe_route.h), bit-identical to
 * the CUDA kernel: Z in the kernel's order (kref_exp_sum_blk, 256 threads), memra_x_expf.
 * The top-k is a k-pass selection over pi, recomputing pi_e on the fly (no [n_expert]
 * scratch): pi_e is a pure function of (l_e, mx, Z), so every pass sees the same values.
 * For the reference model, memra_moe_route_ref with b = 1 is the per-row primitive.
 */
#include "moe_route.h"

#include <math.h>

#include "exact_math.h"
#include "memra.h"
#include "ref/ref_common.h"

/* pa (expert a) ranks before pb (expert b): larger, NaN after every number, lower index on
 * ties. */
static int ranks_before(float pa, int32_t a, float pb, int32_t b)
{
    if (isnan(pb))
        return !isnan(pa) || a < b;
    if (isnan(pa))
        return 0;
    return pa > pb || (pa == pb && a < b);
}

static void route_row(const memra_moe_route_args *a, const float *l, int32_t *ids, float *w)
{
    float mx = -INFINITY;
    for (int32_t e = 0; e < a->n_expert; e++)
        mx = fmaxf(mx, l[e]);
    const float z = kref_exp_sum_blk(l, a->n_expert, mx, MEMRA_MOE_ROUTE_THREADS);
    const float inv = 1.0f / z;
    for (int32_t k = 0; k < a->n_used; k++) {
        int32_t best = -1;
        float pbest = 0.0f;
        for (int32_t e = 0; e < a->n_expert; e++) {
            int taken = 0;
            for (int32_t t = 0; t < k; t++)
                taken |= ids[t] == e;
            const float pe = memra_x_expf(l[e] - mx) * inv;
            if (!taken && (best < 0 || ranks_before(pe, e, pbest, best))) {
                best = e;
                pbest = pe;
            }
        }
        ids[k] = best;
        w[k] = pbest;
    }
    float sum = 0.0f;
    for (int32_t k = 0; k < a->n_used; k++)
        sum += w[k];
    const float denom = fmaxf(sum, 6.103515625e-5f); /* 2^-14, spec §3.5 step 3 */
    for (int32_t k = 0; k < a->n_used; k++)
        w[k] = w[k] / denom;
}

int memra_moe_route_ref(const memra_moe_route_args *a)
{
    if (memra_moe_route_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int32_t b = 0; b < a->b; b++)
        route_row(a, a->logits + (size_t)b * (size_t)a->n_expert,
                  a->ids + (size_t)b * (size_t)a->n_used, a->weights + (size_t)b * (size_t)a->n_used);
    return MEMRA_OK;
}
