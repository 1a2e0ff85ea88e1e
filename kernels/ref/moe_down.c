/*
 * moe_down.c — CPU reference of moe_down (contract and exact order: kernels/moe_down.h; the
 * CUDA kernel kernels/moe_down.cu produces the same bits). The shared-expert gate is
 * memra_x_sigmoidf (kernels/exact_math.h), never libm's expf.
 */
#include "moe_down.h"

#include "exact_math.h"
#include "memra.h"
#include "quant.h"

static float expert_out(const memra_moe_down_args *a, int32_t b, int32_t r, int32_t e, int32_t o)
{
    const memra_block_q8_1 *ar =
        (const memra_block_q8_1 *)a->a + ((size_t)b * (size_t)a->n_used + (size_t)r) * (size_t)(a->k / 32);
    const uint8_t *row = (const uint8_t *)a->w + (uint64_t)e * a->expert_bytes + (uint64_t)o * a->row_bytes;
    const float d = memra_vec_dot_q8_1((memra_qtype)a->qtype, row, ar, a->k);
    return a->scale ? d * a->scale[e] : d;
}

static float shared_out(const memra_moe_down_args *a, int32_t b, int32_t o)
{
    const memra_block_q8_1 *ab = (const memra_block_q8_1 *)a->sh_a + (size_t)b * (size_t)(a->k_sh / 32);
    const uint8_t *row = (const uint8_t *)a->sh_w + (uint64_t)o * a->sh_row_bytes;
    const float s = memra_vec_dot_q8_1((memra_qtype)a->sh_qtype, row, ab, a->k_sh);
    return a->sh_scale ? s * a->sh_scale[0] : s;
}

int memra_moe_down_ref(const memra_moe_down_args *a)
{
    if (memra_moe_down_check(a))
        return MEMRA_ERR_INVALID_ARG;
    if (!memra_quant_can_dot((memra_qtype)a->qtype) ||
        memra_quant_row_bytes((memra_qtype)a->qtype, a->k) != a->row_bytes)
        return MEMRA_ERR_INVALID_ARG;
    if (a->sh_a && (!memra_quant_can_dot((memra_qtype)a->sh_qtype) ||
                    memra_quant_row_bytes((memra_qtype)a->sh_qtype, a->k_sh) != a->sh_row_bytes))
        return MEMRA_ERR_INVALID_ARG;
    for (int32_t b = 0; b < a->b; b++) {
        const int32_t *ids = a->ids + (size_t)b * (size_t)a->n_used;
        const float *wts = a->wts + (size_t)b * (size_t)a->n_used;
        const float gamma = a->sh_a ? memra_x_sigmoidf(a->sh_gate[b]) : 0.0f;
        float *x = a->x + (size_t)b * (size_t)a->n; /* [n] */
        for (int32_t o = 0; o < a->n; o++) {
            float f = 0.0f;
            for (int32_t r = 0; r < a->n_used; r++)
                if (ids[r] >= 0 && ids[r] < a->n_expert)
                    f = f + wts[r] * expert_out(a, b, r, ids[r], o);
            if (a->sh_a)
                f = f + gamma * shared_out(a, b, o);
            x[o] = x[o] + f;
        }
    }
    return MEMRA_OK;
}
