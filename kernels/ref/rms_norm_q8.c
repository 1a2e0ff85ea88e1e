/*
 * rms_norm_q8.c — CPU reference of rms_norm_q8 (contract: kernels/rms_norm_q8.h): the sum of
 * squares in the CUDA kernel's order (kref_rms_scale_blk, 1024 threads), so the f32 values
 * and the q8_1 bytes are bit-identical to the GPU's.
 * Must not: change the summation order without changing kernels/rms_norm_q8.cu with it.
 */
#include "rms_norm_q8.h"

#include "memra.h"
#include "quant.h"
#include "ref/ref_common.h"

/* Values produced per chunk before quantization: whole q8_1 blocks (quantization is per
 * 32-block, so chunking cannot change a byte) without heap scratch. */
#define CHUNK 1024

int memra_rms_norm_q8_ref(const memra_rms_norm_q8_args *a)
{
    if (memra_rms_norm_q8_check(a))
        return MEMRA_ERR_INVALID_ARG;
    float tmp[CHUNK];
    for (int32_t b = 0; b < a->b; b++) {
        const float *x = a->x + (size_t)b * (size_t)a->n; /* [n] */
        memra_block_q8_1 *yq = (memra_block_q8_1 *)a->y_q + (size_t)b * (size_t)(a->n / 32);
        const float scale = kref_rms_scale_blk(x, a->n, a->eps, MEMRA_RMS_NORM_Q8_THREADS);
        for (int32_t j0 = 0; j0 < a->n; j0 += CHUNK) {
            const int32_t m = a->n - j0 < CHUNK ? a->n - j0 : CHUNK;
            for (int32_t j = 0; j < m; j++)
                tmp[j] = a->w[j0 + j] * (x[j0 + j] * scale);
            memra_quantize_q8_1(tmp, yq + j0 / 32, m);
            if (a->y_f32)
                for (int32_t j = 0; j < m; j++)
                    a->y_f32[(size_t)b * (size_t)a->n + (size_t)(j0 + j)] = tmp[j];
        }
    }
    return MEMRA_OK;
}
