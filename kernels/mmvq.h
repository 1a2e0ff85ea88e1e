/*
 * mmvq.h — args of mmvq, the batched quantized mat-vec: up to MEMRA_MMVQ_MAX_W weights that
 * read the SAME q8_1 input a [b, n_in] are computed in one launch (merged projections).
 *
 *   for each weight i, row b, output o:
 *     r = memra_mmvq_dot(qtype_i, W_i row o, a[b], n_in)          (canonical order below)
 *     if (scale_i) r = r * scale_i[0]                              (NVFP4 per-tensor .scale)
 *     y_i[b, o] = r                    (mode MEMRA_MMVQ_STORE)
 *     y_i[b, o] = y_i[b, o] + r        (mode MEMRA_MMVQ_ADD: the residual x += W o)
 *
 * r is the row's q8_1 dot product summed in the CANONICAL ORDER below, which the CPU
 * reference and the GPU kernel both use, so their results are bit-identical (memcmp):
 *
 *   r_j = memra_vec_dot_block(qtype, dot block j of the row, a[b] at element j * E)
 *         (E = memra_quant_dot_block_elems: the per-block arithmetic of runtime/quant.c);
 *   step s = dot blocks [s S, s S + S) with S = memra_mmvq_step_blocks(qtype) (256 elements
 *         for the integer types, 64 for f32 / f16 / bf16), the last step possibly short;
 *   P = memra_mmvq_parts(n_in) (1, 2, 4 or 8; a function of n_in ONLY);
 *   T_p = 0; T_p = T_p + r_j for the blocks j of steps s = p, p + P, p + 2P, ... in
 *         increasing j (f32, round to nearest);
 *   r = (((T_0 + T_1) + T_2) + ...) + T_{P-1}   (parts without a step contribute +0.0).
 *
 * With P = 1 this is memra_vec_dot_q8_1 exactly. The order never depends on b, on n_out,
 * on the other weights of a merged launch, or on the device. Row b reads only a[b] and
 * writes only y_i[b].
 * Weights are GGUF tensors {n_in, n_out}: row o is the contiguous n_in-long vector at
 * o * row_bytes. Output buffers of different weights must not overlap each other or a.
 */
#ifndef MEMRA_KERNEL_MMVQ_H
#define MEMRA_KERNEL_MMVQ_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h" /* runtime/quant.h: the per-block arithmetic */

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

/* Parts of the canonical order for an input of n_in elements: the largest P in {1, 2, 4, 8}
 * with n_in >= 512 P (each part then holds at least two 256-element steps). */
static inline int memra_mmvq_parts(int32_t n_in)
{
    int p = 1;
    while (p < 8 && n_in >= 512 * 2 * p)
        p *= 2;
    return p;
}

/* Dot blocks per step of the canonical order (the unit a GPU warp stages per pipeline
 * stage): 256 elements for the integer types, 2 blocks (64 elements) for f32 / f16 / bf16;
 * 0 for a type mmvq cannot dot. Must equal nvrtc_templates/mmvq_params.h MEMRA_MMVQ_TYPES
 * (tests/test_nvrtc.c checks it). Ids are memra_qtype (ggml numbering). */
static inline int memra_mmvq_step_blocks(int32_t qtype)
{
    switch (qtype) {
    case 0:  /* f32 */
    case 1:  /* f16 */
    case 30: /* bf16 */
        return 2;
    case 2:  /* q4_0 */
    case 3:  /* q4_1 */
    case 6:  /* q5_0 */
    case 7:  /* q5_1 */
    case 8:  /* q8_0 */
    case 20: /* iq4_nl */
    case 39: /* mxfp4 */
        return 8;
    case 12: /* q4_K */
    case 13: /* q5_K */
    case 14: /* q6_K */
    case 23: /* iq4_xs */
        return 1;
    case 40: /* nvfp4 */
        return 4;
    default:
        return 0;
    }
}

/* Whether mmvq's launches of up to memra_mmvq_direct_max_b() rows of this weight type can
 * take the direct path (warps own whole rows, copied flat through shared memory,
 * nvrtc_templates/mmvq.cuh); a launch takes it when every weight does, so the planner keeps
 * such weights apart at those tiers. Must equal nvrtc_templates/mmvq_params.h
 * MEMRA_MMVQ_DIRECT and MEMRA_MMVQ_DIRECT_MAX_B (tests/test_nvrtc.c checks them). A speed
 * property only: both paths give the same bytes. */
static inline int memra_mmvq_direct(int32_t qtype)
{
    return qtype == 12 || qtype == 14; /* q4_K, q6_K */
}

static inline int memra_mmvq_direct_max_b(void)
{
    return 2;
}

/* One output in the canonical order above: the row wrow (n_in elements of qtype) against one
 * q8_1 row a (n_in / 32 blocks). NaN when qtype cannot be dotted or n_in is not a multiple
 * of its dot block. The primitive every CPU-side consumer of mmvq's contract (the CPU
 * backend through memra_mmvq_ref, the reference model, GPU tests) uses instead of
 * memra_vec_dot_q8_1; inline so that it needs only runtime/quant.c. */
static inline float memra_mmvq_dot(int32_t qtype, const void *wrow, const void *a, int32_t n_in)
{
    const memra_qtype t = (memra_qtype)qtype;
    const int S = memra_mmvq_step_blocks(qtype);
    if (S == 0 || n_in <= 0 || !memra_quant_can_dot(t))
        return NAN;
    const int de = memra_quant_dot_block_elems(t);
    if (de <= 0 || n_in % de != 0)
        return NAN;
    const size_t db = memra_quant_dot_block_bytes(t);
    const uint8_t *w = (const uint8_t *)wrow;
    const memra_block_q8_1 *act = (const memra_block_q8_1 *)a;
    const int64_t nblk = n_in / de, nsteps = (nblk + S - 1) / S;
    const int P = memra_mmvq_parts(n_in);
    float y = 0.0f;
    for (int p = 0; p < P; p++) {
        float T = 0.0f;
        for (int64_t s = p; s < nsteps; s += P)
            for (int64_t j = s * S; j < (s + 1) * S && j < nblk; j++)
                T = T + memra_vec_dot_block(t, w + (size_t)j * db, act + j * (de / 32));
        y = p == 0 ? T : y + T;
    }
    return y;
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
