/*
 * mmvq_moe.c — CPU reference of mmvq_moe (contract: kernels/mmvq_moe.h): the mmvq row
 * arithmetic over the experts moe_route selected (the CUDA kernel kernels/mmvq_moe.cu
 * produces the same bits).
 */
#include "mmvq_moe.h"

#include <string.h>

#include "memra.h"
#include "quant.h"

static void moe_one(const memra_mmvq_moe_args *a, const memra_mmvq_moe_out *o)
{
    const size_t nblk = (size_t)(a->k / 32);
    for (int32_t b = 0; b < a->b; b++) {
        const memra_block_q8_1 *ab = (const memra_block_q8_1 *)a->a + (size_t)b * nblk;
        for (int32_t r = 0; r < a->n_used; r++) {
            const int32_t e = a->ids[(size_t)b * (size_t)a->n_used + (size_t)r];
            float *y = o->y + ((size_t)b * (size_t)a->n_used + (size_t)r) * (size_t)o->n_out;
            if (e < 0 || e >= a->n_expert) {
                memset(y, 0, sizeof(float) * (size_t)o->n_out);
                continue;
            }
            const uint8_t *we = (const uint8_t *)o->w + (uint64_t)e * o->expert_bytes;
            for (int32_t i = 0; i < o->n_out; i++) {
                const float v = memra_vec_dot_q8_1((memra_qtype)o->qtype,
                                                   we + (uint64_t)i * o->row_bytes, ab, a->k);
                y[i] = o->scale ? v * o->scale[e] : v;
            }
        }
    }
}

int memra_mmvq_moe_ref(const memra_mmvq_moe_args *a)
{
    if (memra_mmvq_moe_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int i = 0; i < a->n_w; i++)
        if (!memra_quant_can_dot((memra_qtype)a->out[i].qtype) ||
            memra_quant_row_bytes((memra_qtype)a->out[i].qtype, a->k) != a->out[i].row_bytes)
            return MEMRA_ERR_INVALID_ARG;
    for (int i = 0; i < a->n_w; i++)
        moe_one(a, &a->out[i]);
    return MEMRA_OK;
}
