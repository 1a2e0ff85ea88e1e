/*
 * synth_fill.c — the CPU side of the benchmarks' synthetic session history (contract and
 * formula: kernels/synth_fill.h); the same values as the CUDA fill kernel
 * (kernels/synth_fill.cu), element by element.
 */
#include "synth_fill.h"

#include <math.h>
#include <string.h>

#include "memra.h"
#include "ops.h"
#include "quant.h"

int memra_synth_fill_ref(const memra_synth_fill_args *a)
{
    if (!a || !a->dst)
        return MEMRA_ERR_INVALID_ARG;
    uint8_t *dst = a->dst;
    if (a->dtype == MEMRA_DT_F32 && a->bytes % 4 == 0) {
        float *f = (float *)dst; /* [bytes / 4] */
        for (uint64_t i = 0; i < a->bytes / 4; i++)
            f[i] = a->amp * memra_synth_value(a->seed, a->region, i);
    } else if (a->dtype == MEMRA_DT_F16 && a->bytes % 2 == 0) {
        uint16_t *h = (uint16_t *)dst; /* [bytes / 2] */
        for (uint64_t i = 0; i < a->bytes / 2; i++)
            h[i] = memra_f32_to_fp16(memra_synth_value(a->seed, a->region, i));
    } else if (a->dtype == MEMRA_DT_Q8_0 && a->bytes % 34 == 0) {
        const uint16_t d = MEMRA_SYNTH_Q8_D;
        for (uint64_t j = 0; j < a->bytes / 34; j++) { /* 34-byte blocks: fp16 d, int8 qs[32] */
            uint8_t *blk = dst + j * 34;
            memcpy(blk, &d, 2);
            for (uint32_t k = 0; k < 32; k++)
                blk[2 + k] =
                    (uint8_t)(int8_t)lrintf(127.0f * memra_synth_value(a->seed, a->region, j * 32 + k));
        }
    } else {
        return MEMRA_ERR_INVALID_ARG;
    }
    return MEMRA_OK;
}
