/*
 * embed.c — CPU reference of embed (args and contract: kernels/embed.h).
 * Plain loops; dequantization through runtime/quant.h so every row equals what the GGUF
 * ecosystem (and the GPU kernel) produces bit for bit.
 */
#include "embed.h"

#include <string.h>

#include "memra.h"
#include "quant.h"

int memra_embed_ref(const memra_embed_args *a)
{
    if (memra_embed_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int32_t b = 0; b < a->b; b++) {
        int32_t t = a->tokens[b];
        float *x = a->x + (size_t)b * (size_t)a->n_embd; /* [n_embd] */
        if (t < 0 || t >= a->n_vocab) {
            memset(x, 0, sizeof(float) * (size_t)a->n_embd);
            continue;
        }
        const uint8_t *row = (const uint8_t *)a->table + (uint64_t)t * a->row_bytes;
        if (memra_dequantize_row((memra_qtype)a->qtype, row, x, a->n_embd) != 0)
            return MEMRA_ERR_INVALID_ARG;
    }
    return MEMRA_OK;
}
