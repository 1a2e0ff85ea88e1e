/*
 * mmvq_moe.h — args of mmvq_moe (catalog: MMVQ_MOE): mmvq over the selected experts' slices
 * of 3-D expert tensors {k, n_s, n_expert} (expert e's matrix starts at e * expert_bytes),
 * all reading the same q8_1 input a[b] (the pre-FFN normed row):
 *   for row b, rank r < n_used, e = ids[b, r], weight s, output o:
 *     v = memra_vec_dot_q8_1(qtype_s, W_s[e] row o, a[b], k);  if (scale_s) v = v * scale_s[e]
 *     y_s[b, r, o] = v
 * Exact arithmetic (CPU reference and CUDA kernel alike, f32 RN, no FMA): T = 0; T = T + r_j
 * over the dot blocks j = 0, 1, ... in increasing order, r_j = memra_vec_dot_block (the integer
 * block sums, then runtime/quant.c's fixed per-block f32 epilogue); v = T, or T * scale_s[e].
 * So y is bit-identical between the backends, and row b depends on row b only.
 * CUDA (kernels/mmvq_moe.cu): one warp per (b, r, s, 16-output tile), the per-block r_j from
 * the mmvq template's block functions (kernels/moe_tile.cuh).
 * An id outside [0, n_expert) (a routing bug) yields zeros instead of an out-of-bounds read.
 */
#ifndef MEMRA_KERNEL_MMVQ_MOE_H
#define MEMRA_KERNEL_MMVQ_MOE_H

#include <stdint.h>

#define MEMRA_MMVQ_MOE_MAX_W 2

typedef struct memra_mmvq_moe_out {
    const void *w;         /* [n_expert][n_out] rows of row_bytes */
    const float *scale;    /* [n_expert] per-expert output scale, or NULL */
    float *y;              /* [b, n_used, n_out] */
    int32_t qtype;
    int32_t n_out;
    uint64_t row_bytes;    /* memra_quant_row_bytes(qtype, k) */
    uint64_t expert_bytes; /* >= n_out * row_bytes */
} memra_mmvq_moe_out;

typedef struct memra_mmvq_moe_args {
    const void *a;      /* q8_1 blocks [b, k/32] */
    const int32_t *ids; /* [b, n_used] (moe_route) */
    int32_t k;          /* input width */
    int32_t n_used;
    int32_t n_expert;
    int32_t b;
    int32_t n_w;        /* 1..MEMRA_MMVQ_MOE_MAX_W */
    int32_t pad_;
    memra_mmvq_moe_out out[MEMRA_MMVQ_MOE_MAX_W];
} memra_mmvq_moe_args;

static inline const char *memra_mmvq_moe_check(const memra_mmvq_moe_args *a)
{
    if (!a->a || !a->ids)
        return "null pointer";
    if (a->k <= 0 || a->k % 32 != 0 || a->b <= 0)
        return "k must be a positive multiple of 32 and b positive";
    if (a->n_used <= 0 || a->n_expert <= 0)
        return "n_used or n_expert out of range";
    if (a->n_w < 1 || a->n_w > MEMRA_MMVQ_MOE_MAX_W)
        return "weight count out of range 1..2";
    for (int i = 0; i < a->n_w; i++) {
        const memra_mmvq_moe_out *o = &a->out[i];
        if (!o->w || !o->y || o->n_out <= 0 || o->row_bytes == 0 ||
            o->expert_bytes < (uint64_t)o->n_out * o->row_bytes)
            return "an expert weight output is null, empty or overlapping";
    }
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG (check, or a type without q8_1 dot). */
int memra_mmvq_moe_ref(const memra_mmvq_moe_args *a);
#ifdef __cplusplus
}
#endif

#endif
