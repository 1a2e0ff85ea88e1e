/*
 * silu_mul_q8.c — CPU reference of silu_mul_q8 (contract: kernels/silu_mul_q8.h):
 * memra_x_siluf(g) * u then the engine quantizer, bit-identical to the CUDA kernel.
 */
#include "silu_mul_q8.h"

#include "exact_math.h"
#include "memra.h"
#include "quant.h"

#define CHUNK 1024 /* whole q8_1 blocks per stack chunk (see rms_norm_q8.c) */

static void slot_run(const memra_silu_mul_q8_slot *s, int32_t b)
{
    float tmp[CHUNK];
    const int64_t rows = (int64_t)b * s->m;
    for (int64_t r = 0; r < rows; r++) {
        const float *g = s->g + (size_t)r * (size_t)s->n; /* [n] */
        const float *u = s->u + (size_t)r * (size_t)s->n;
        memra_block_q8_1 *yq = (memra_block_q8_1 *)s->y_q + (size_t)r * (size_t)(s->n / 32);
        for (int32_t j0 = 0; j0 < s->n; j0 += CHUNK) {
            const int32_t m = s->n - j0 < CHUNK ? s->n - j0 : CHUNK;
            for (int32_t j = 0; j < m; j++)
                tmp[j] = memra_x_siluf(g[j0 + j]) * u[j0 + j];
            memra_quantize_q8_1(tmp, yq + j0 / 32, m);
        }
    }
}

int memra_silu_mul_q8_ref(const memra_silu_mul_q8_args *a)
{
    if (memra_silu_mul_q8_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int i = 0; i < a->n_slots; i++)
        slot_run(&a->slot[i], a->b);
    return MEMRA_OK;
}
