/*
 * test_util.h — helpers shared by the Check suites: a seeded RNG (so every random test is
 * reproducible from its seed), temporary paths, and float comparison that reports the
 * index, both values and the worst ratio on failure.
 */
#ifndef MEMRA_TEST_UTIL_H
#define MEMRA_TEST_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* splitmix64: tiny, seedable, identical on every platform. */
typedef struct { uint64_t s; } tu_rng;
void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *r);
float tu_rng_uniform(tu_rng *r); /* [0, 1) */
float tu_rng_normal(tu_rng *r);  /* N(0, 1), Box-Muller */

/* A fresh path under $TMPDIR (or /tmp) unique to this process; the caller removes it. */
void tu_tmp_path(char *buf, size_t n, const char *suffix);
/* MEMRA_SOURCE_DIR "/" rel, for committed test data. */
const char *tu_source_path(const char *rel);

/* Returns the index of the first element where |a-b| > atol + rtol*|b| or either is not
 * finite, -1 when all agree. *worst receives max |a-b| / (atol + rtol*|b|). */
long tu_first_mismatch(const float *a, const float *b, size_t n, double atol, double rtol,
                       double *worst);
/* ck_assert-style wrapper: fails the test with index, both values and worst ratio. */
#define TU_ASSERT_CLOSE(a, b, n, atol, rtol)                                                      \
    do {                                                                                           \
        double tu_w_ = 0;                                                                          \
        long tu_i_ = tu_first_mismatch((a), (b), (n), (atol), (rtol), &tu_w_);                     \
        ck_assert_msg(tu_i_ < 0, "mismatch at %ld: got %.9g want %.9g (worst ratio %.3g)", tu_i_,   \
                      tu_i_ >= 0 ? (double)(a)[tu_i_] : 0.0, tu_i_ >= 0 ? (double)(b)[tu_i_] : 0.0, \
                      tu_w_);                                                                      \
    } while (0)

#endif
