/*
 * xm_accuracy.c — kernels/exact_math.h's float wrappers (memra_x_expf, memra_x_sigmoidf,
 * memra_x_siluf, memra_x_softplusf, memra_x_expf_seq, built on the short-latency
 * memra_x_exp_fw / memra_x_exp_short / memra_x_div_short / memra_x_log1p_short) against the
 * double-API formulas each one's comment names, over EVERY float bit pattern (2^32; ~10 min on 2
 * cores, ~1 on 16), here, no GPU; and memra_x_exp_short's relative error against libm. Exit status
 * 1 when any float differs (NaN results compare equal whatever their payload).
 *   cc -O2 -fopenmp -ffp-contract=off -I. bench/xm_accuracy.c -lm -o /tmp/xm-accuracy
 *   /tmp/xm-accuracy
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/exact_math.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int differ(float a, float b)
{
    return fbits(a) != fbits(b) && !(a != a && b != b);
}

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    double worst = 0, worst_e = 0;
    long n_last = 0, n = 0;
    for (int i = 0; i < 20000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) * 0x1p-53;
        const double x = i & 1 ? -745.2 + 1455.0 * u : (2 * u - 1) * pow(10.0, -20 * u);
        const double w = exp(x);
        if (w == 0 || isinf(w) || w < 2.2250738585072014e-308)
            continue;
        const double a = memra_x_exp_short(x), e = memra_x_exp(x);
        worst = fmax(worst, fabs(a - w) / w);
        worst_e = fmax(worst_e, fabs(e - w) / w);
        n_last += a != e;
        n++;
    }
    printf(
        "double e^x against libm, %ld samples (tests/test_ops.c bound 3e-16): max relative error "
        "memra_x_exp %.3g, memra_x_exp_short %.3g; the two differ in %.1f %% of them\n",
        n, worst_e, worst, 100.0 * (double)n_last / (double)n);
    long nd[5] = {0, 0, 0, 0, 0};
#pragma omp parallel for reduction(+ : nd[:5]) schedule(static, 1 << 16)
    for (int64_t b = 0; b < (1ll << 32); b++) {
        const float x = bitsf((uint32_t)b);
        const double e = memra_x_exp(-(double)x);
        nd[0] += differ(memra_x_expf(x), (float)memra_x_exp((double)x));
        nd[1] += differ(memra_x_sigmoidf(x), (float)(1.0 / (1.0 + e)));
        nd[2] += differ(memra_x_siluf(x), (float)((double)x / (1.0 + e)));
        nd[3] += differ(memra_x_softplusf(x),
                        x > 20.0f ? x : (float)memra_x_log1p(memra_x_exp((double)x)));
        nd[4] += differ(memra_x_expf_seq(x), (float)memra_x_exp((double)x));
    }
    const char *nm[5] = {"expf", "sigmoidf", "siluf", "softplusf", "expf_seq"};
    printf("every float input (2^32), the wrapper against its double-API formula:\n");
    for (int k = 0; k < 5; k++)
        printf("  memra_x_%-10s differs for %ld inputs\n", nm[k], nd[k]);
    return nd[0] + nd[1] + nd[2] + nd[3] + nd[4] ? 1 : 0;
}
