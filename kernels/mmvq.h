/*
 * mmvq.h — args of mmvq, the batched quantized mat-vec: up to MEMRA_MMVQ_MAX_W weights that
 * read the SAME q8_1 input a [b, n_in] are computed in one launch (merged projections).
 *
 *   for each weight i, row b, output o:
 *     r = memra_vec_dot_q8_1(qtype_i, W_i row o, a[b], n_in)      (runtime/quant.h)
 *     if (scale_i) r = r * scale_i[0]                              (NVFP4 per-tensor .scale)
 *     y_i[b, o] = r                    (mode MEMRA_MMVQ_STORE)
 *     y_i[b, o] = y_i[b, o] + r        (mode MEMRA_MMVQ_ADD: the residual x += W o)
 *
 * Exactness: each weight block's contribution is the bit-exact per-block arithmetic of
 * runtime/quant.h; the CPU reference sums the block contributions of a row in increasing
 * block order (memra_vec_dot_q8_1). A GPU kernel may use another order, fixed per (row,
 * output) and independent of b. Row b reads only a[b] and writes only y_i[b].
 * Weights are GGUF tensors {n_in, n_out}: row o is the contiguous n_in-long vector at
 * o * row_bytes. Output buffers of different weights must not overlap each other or a.
 */
#ifndef MEMRA_KERNEL_MMVQ_H
#define MEMRA_KERNEL_MMVQ_H

#include <stdint.h>

#define MEMRA_MMVQ_MAX_W 4

enum { MEMRA_MMVQ_STORE = 0, MEMRA_MMVQ_ADD = 1 };

typedef struct memra_mmvq_out {
    const void *w;      /* [n_out] rows of row_bytes (GGUF weight {n_in, n_out}) */
    const float *scale; /* [1] per-tensor output scale, or NULL */
    float *y;           /* [b, n_out] */
    int32_t qtype;      /* memra_qtype of w */
    int32_t n_out;
    int32_t mode;       /* MEMRA_MMVQ_STORE | MEMRA_MMVQ_ADD */
    int32_t pad_;
    uint64_t row_bytes; /* memra_quant_row_bytes(qtype, n_in) */
} memra_mmvq_out;

typedef struct memra_mmvq_args {
    const void *a; /* q8_1 blocks [b, n_in/32] */
    int32_t n_in;
    int32_t b;
    int32_t n_w;   /* 1..MEMRA_MMVQ_MAX_W */
    int32_t pad_;
    memra_mmvq_out out[MEMRA_MMVQ_MAX_W];
} memra_mmvq_args;

static inline const char *memra_mmvq_check(const memra_mmvq_args *a)
{
    if (!a->a)
        return "null input";
    if (a->n_in <= 0 || a->b <= 0 || a->n_in % 32 != 0)
        return "n_in must be a positive multiple of 32 and b positive";
    if (a->n_w < 1 || a->n_w > MEMRA_MMVQ_MAX_W)
        return "weight count out of range 1..4";
    for (int i = 0; i < a->n_w; i++) {
        const memra_mmvq_out *o = &a->out[i];
        if (!o->w || !o->y || o->n_out <= 0 || o->row_bytes == 0)
            return "a weight output is null or empty";
        if (o->mode != MEMRA_MMVQ_STORE && o->mode != MEMRA_MMVQ_ADD)
            return "unknown epilogue mode";
    }
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails or a weight type has
 * no q8_1 dot (memra_quant_can_dot) or row_bytes disagrees with it. */
int memra_mmvq_ref(const memra_mmvq_args *a);
#ifdef __cplusplus
}
#endif

#endif
