/*
 * sample.h — args of sample: one token per row from logits [b, n_vocab] and that row's
 * sampling parameters; out_tokens[b] in the tick block.
 *
 * The rule (CPU reference = definition; the CUDA kernel gives the same token, bit for bit:
 * every mass is an exact integer, so no summation order enters):
 *  1. temperature <= 0 (or NaN) or top_k == 1, or the largest logit is +-inf: greedy, argmax
 *     with the LOWEST index winning ties. NaN logits are never chosen (all NaN: token 0).
 *  2. Otherwise, with T = temperature, l_max = max logit:
 *     C = all non-NaN tokens, or when 0 < top_k < #non-NaN: {i : l_i >= t_k} with t_k the
 *         top_k-th largest logit (ties at the boundary are all kept);
 *     p_i = memra_x_expf((l_i - l_max) / T) (f32 sub and div, RN; kernels/exact_math.h);
 *     m_i = floor(p_i * 2^100) as a 128-bit integer (exact from p's bits; p_i < 2^-77 gives 0);
 *     Z = sum_C m_i (exact);
 *     K = C, or when 0 < top_p < 1: {i in C : bits(p_i) >= t_p} with
 *         target = floor((double)top_p * (double)Z) (the double of Z: (double)hi64 * 2^64 +
 *         (double)lo64, RN), or 1 if that is 0, and t_p the largest uint32 for which
 *         sum_{i in C, bits(p_i) >= t_p} m_i >= target (the smallest high-probability set
 *         holding top_p of the mass; ties at the boundary all kept);
 *     M = sum_K m_i; u24 = out[0] >> 8 of memra_philox4x32_10({step lo, step hi, 0, 0},
 *         {seed lo, seed hi}) (so memra_rng_uniform(seed, step) = u24 * 2^-24, runtime/rng.h);
 *     target = floor(M * u24 / 2^24) (exact);
 *     walk K in increasing token id with cum += m_i: the first i with cum > target is the
 *     token (one exists: target < M).
 * Both thresholds are the unique largest values of their definitions: the reference finds t_k
 * by bisection over order-preserving keys and t_p by an MSB-first radix select over the bits
 * of p (4 passes of 256 bins), the kernel by radix selects; no sort and no scratch in the
 * reference (the catalog's scratch [2, b, n_vocab] is for GPU kernels; the reference ignores
 * it). The token depends only on (logits row, params row): the same (seed, step) gives the
 * same token in any row of any tier.
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
