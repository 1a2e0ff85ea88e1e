/* test_util.c — see test_util.h. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void tu_rng_seed(tu_rng *r, uint64_t seed) { r->s = seed; }

uint64_t tu_rng_u64(tu_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float tu_rng_uniform(tu_rng *r) { return (float)(tu_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float tu_rng_normal(tu_rng *r)
{
    double u1 = ((double)(tu_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(tu_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void tu_tmp_path(char *buf, size_t n, const char *suffix)
{
    static unsigned counter;
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/memra-test-%ld-%u%s", dir ? dir : "/tmp", (long)getpid(), counter++,
             suffix ? suffix : "");
}

const char *tu_source_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", MEMRA_SOURCE_DIR, rel);
    return buf;
}

long tu_first_mismatch(const float *a, const float *b, size_t n, double atol, double rtol,
                       double *worst)
{
    long first = -1;
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs((double)b[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        int bad = !isfinite(a[i]) || !isfinite(b[i]) || d > tol;
        double ratio = tol > 0 ? d / tol : (d > 0 ? INFINITY : 0);
        if (!isfinite(a[i]) || !isfinite(b[i]))
            ratio = INFINITY;
        if (ratio > w)
            w = ratio;
        if (bad && first < 0)
            first = (long)i;
    }
    if (worst)
        *worst = w;
    return first;
}
