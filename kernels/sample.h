/*
 * sample.h — args of sample: one token per row from logits [b, n_vocab] and that row's
 * sampling parameters; out_tokens[b] in the tick block.
 *
 * The rule (CPU reference = definition; a GPU kernel reproduces it up to float summation
 * order in Z and the top-p masses, which can move a top-p boundary only when two masses
 * agree to ~1 ulp):
 *  1. temperature <= 0 (or NaN) or top_k == 1, or the largest logit is +inf: greedy, argmax
 *     with the LOWEST index winning ties. NaN logits are never chosen (all NaN: token 0).
 *  2. Otherwise, with T = temperature, l_max = max logit:
 *     C = all tokens, or when 0 < top_k < n_vocab: {i : l_i >= t_k} with t_k the top_k-th
 *         largest logit (ties at the boundary are all kept);
 *     p_i = expf((l_i - l_max) / T) (f32) for i in C;  Z = sum_C p_i (f64, increasing i);
 *     K = C, or when 0 < top_p < 1: {i in C : p_i >= t_p} with t_p the largest value for
 *         which sum_{i in C, p_i >= t_p} p_i >= top_p * Z (the smallest high-probability set
 *         holding top_p of the mass; ties at the boundary all kept);
 *     u = memra_rng_uniform(seed, step) in [0, 1) (Philox4x32-10, runtime/rng.h);
 *     walk K in increasing token id with cum += p_i (f64): the first i with
 *     cum > u * sum_K p_i is the token (the last of K if rounding leaves none).
 * Thresholds are found by bisection over the ordered float bit patterns, so the CPU
 * reference needs no sort and no scratch (the catalog's scratch [2, b, n_vocab] is for GPU
 * kernels; the reference ignores it). The token depends only on (logits row, params row): the
 * same (seed, step) gives the same token in any row of any tier.
 */
#ifndef MEMRA_KERNEL_SAMPLE_H
#define MEMRA_KERNEL_SAMPLE_H

#include <stdint.h>

/* One row's sampling parameters (32 bytes; an array [b] of these lives in the tick block). */
typedef struct memra_sample_params {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0 or >= n_vocab: no top-k cut */
    float top_p;       /* outside (0, 1): no top-p cut */
    uint32_t pad_;
    uint64_t seed;     /* the session's seed */
    uint64_t step;     /* the session's own step counter (batch-independent) */
} memra_sample_params;

typedef struct memra_sample_args {
    const float *logits;               /* [b, n_vocab] */
    const memra_sample_params *params; /* [b] tick block */
    int32_t *out_tokens;               /* [b] tick block */
    float *scratch;                    /* [2, b, n_vocab] GPU scratch; unused by the reference */
    int32_t n_vocab;
    int32_t b;
} memra_sample_args;

static inline const char *memra_sample_check(const memra_sample_args *a)
{
    if (!a->logits || !a->params || !a->out_tokens)
        return "null pointer";
    if (a->n_vocab <= 0 || a->b <= 0)
        return "non-positive dimension";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
int memra_sample_ref(const memra_sample_args *a);
/* The single-row rule above (exposed for tests and host-side sampling). */
int32_t memra_sample_row_ref(const float *logits, int32_t n_vocab, const memra_sample_params *p);
#ifdef __cplusplus
}
#endif

#endif
