/*
 * embed.h — args of the embed op: x[b, :] = dequant(token_embd row tokens[b]).
 *
 * Device-agnostic (plain C: pointers, dims, b): the CPU reference (kernels/ref/embed.c) and
 * the CUDA kernel take this same struct. The table is the GGUF tensor {n_embd, n_vocab} of
 * any dequantizable type; row t starts at t * row_bytes.
 * Exactness: dequantization is exact per element (bit-identical on CPU and GPU), row b reads
 * only tokens[b]. A token outside [0, n_vocab) (never admitted by the host, which checks
 * tokens before the tick) yields a zero row rather than an out-of-bounds read.
 */
#ifndef MEMRA_KERNEL_EMBED_H
#define MEMRA_KERNEL_EMBED_H

#include <stdint.h>

typedef struct memra_embed_args {
    const void *table;      /* [n_vocab] rows of row_bytes (GGUF token_embd) */
    const int32_t *tokens;  /* [b] tick block */
    float *x;               /* [b, n_embd] */
    int32_t qtype;          /* memra_qtype of table */
    int32_t n_embd;
    int32_t n_vocab;
    int32_t b;
    uint64_t row_bytes;     /* bytes of one table row (memra_quant_row_bytes(qtype, n_embd)) */
} memra_embed_args;

/* NULL when the args are in the op's supported range, else the reason (static text). */
static inline const char *memra_embed_check(const memra_embed_args *a)
{
    if (!a->table || !a->tokens || !a->x)
        return "null pointer";
    if (a->n_embd <= 0 || a->n_vocab <= 0 || a->b <= 0 || a->row_bytes == 0)
        return "non-positive dimension";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_embed_ref(const memra_embed_args *a);
#ifdef __cplusplus
}
#endif

#endif
