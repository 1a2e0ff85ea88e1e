/*
 * rng.h — the counter-based RNG of sampling: Philox4x32-10 (Salmon et al., SC'11), keyed by
 * the session seed, counter = the session's step. A draw is a pure function of
 * (seed, step): no state, so a row's random number cannot depend on the batch, the tier or
 * the order in which rows are processed.
 *
 * Header-only so that the CUDA sampling kernel compiles the very same code (__host__
 * __device__ under nvcc). Verified against Random123's known-answer vectors (test_ops.c).
 * Mapping: key = {seed lo32, seed hi32}, counter = {step lo32, step hi32, 0, 0}; the uniform
 * is (out[0] >> 8) * 2^-24, exactly representable, in [0, 1).
 */
#ifndef MEMRA_RNG_H
#define MEMRA_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define MEMRA_RNG_FN static inline __host__ __device__
#else
#define MEMRA_RNG_FN static inline
#endif

MEMRA_RNG_FN void memra_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                      uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0; /* Philox multipliers M0, M1 */
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u; /* Weyl key schedule W0, W1 */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Uniform in [0, 1) with 24 random bits for (seed, step). */
MEMRA_RNG_FN float memra_rng_uniform(uint64_t seed, uint64_t step)
{
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0u, 0u};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    memra_philox4x32_10(ctr, key, out);
    return (float)(out[0] >> 8) * (1.0f / 16777216.0f);
}

#endif
