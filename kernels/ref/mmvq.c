/*
 * mmvq.c — CPU reference of mmvq (contract: kernels/mmvq.h). Each output is one
 * memra_mmvq_dot: the per-block arithmetic of runtime/quant.c (memra_vec_dot_block, the
 * same function the GPU kernel reproduces bit for bit) summed in the canonical order of
 * kernels/mmvq.h (P interleaved parts of steps, then the parts in order), then the optional
 * scale, then store or add.
 * Must not: sum in any other order (the GPU result is compared with memcmp).
 */
#include "mmvq.h"

#include "memra.h"
#include "quant.h"

static void mmvq_one(const memra_mmvq_args *a, const memra_mmvq_out *o)
{
    const memra_block_q8_1 *act = (const memra_block_q8_1 *)a->a; /* [b, n_in/32] */
    for (int32_t b = 0; b < a->b; b++) {
        const memra_block_q8_1 *ab = act + (size_t)b * (size_t)(a->n_in / 32);
        float *y = o->y + (size_t)b * (size_t)o->n_out; /* [n_out] */
        for (int32_t r = 0; r < o->n_out; r++) {
            const uint8_t *wrow = (const uint8_t *)o->w + (uint64_t)r * o->row_bytes;
            float v = memra_mmvq_dot(o->qtype, wrow, ab, a->n_in);
            if (o->scale)
                v = v * o->scale[0];
            y[r] = o->mode == MEMRA_MMVQ_ADD ? y[r] + v : v;
        }
    }
}

int memra_mmvq_ref(const memra_mmvq_args *a)
{
    if (memra_mmvq_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int i = 0; i < a->n_w; i++) {
        const memra_qtype t = (memra_qtype)a->out[i].qtype;
        if (!memra_quant_can_dot(t) || memra_mmvq_step_blocks(a->out[i].qtype) == 0 ||
            memra_quant_row_bytes(t, a->n_in) != a->out[i].row_bytes)
            return MEMRA_ERR_INVALID_ARG;
    }
    for (int i = 0; i < a->n_w; i++)
        mmvq_one(a, &a->out[i]);
    return MEMRA_OK;
}
