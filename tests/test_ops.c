/*
 * test_ops.c — every CPU reference op (kernels/ref/) against an independent f64
 * implementation of its contract (kernels/<op>.h), over tables of shapes that include size 1,
 * tails (non-multiples of 32 / of the chunk sizes, heads straddling q8_1 blocks) and several
 * batch widths; plus the Philox known-answer vectors, the exactness properties the backend
 * relies on (row b of a b-wide call == the same row alone, memcmp) and bad-argument refusal.
 *
 * Tolerances: u = 2^-24 (f32 unit roundoff). A q8_1 value d16*q of x, q = round(x/d),
 * d = amax/127, d16 = fp16(d) = d(1 + e), |e| <= 2^-11, is off by at most
 * d/2 + 127*d*2^-11 < 0.57 d: every q8_1 check uses that bound (QTOL) plus the op's f32
 * error on x. Each other bound is derived next to its check.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_decode.h"
#include "attn_prep.h"
#include "embed.h"
#include "exact_math.h"
#include "gdn_canon.h"
#include "gdn_step.h"
#include "memra.h"
#include "mmvq.h"
#include "mmvq_moe.h"
#include "moe_down.h"
#include "moe_route.h"
#include "ops.h"
#include "quant.h"
#include "ref/ref_common.h"
#include "rms_norm_q8.h"
#include "rng.h"
#include "sample.h"
#include "silu_mul_q8.h"
#include "synth_fill.h"
#include "test_util.h"

#define U32 (1.0 / 16777216.0) /* 2^-24 */
#define QTOL 0.57              /* q8_1 / q8_0 value error in units of the block scale */

/* ===================================== helpers ====================================== */

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *rand_vec(tu_rng *r, size_t n, float scale)
{
    float *v = xcalloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = tu_rng_normal(r) * scale;
    return v;
}

/* Fails with the first index where got is not finite or |got - want| > tol[i]; reports both
 * values and the worst |got - want| / tol. */
static void check_bound(const char *what, const float *got, const double *want, const double *tol,
                        size_t n)
{
    long first = -1;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double ratio = isfinite(got[i]) ? d / (tol[i] > 0 ? tol[i] : 1e-300) : INFINITY;
        if (ratio > worst)
            worst = ratio;
        if ((!isfinite(got[i]) || d > tol[i]) && first < 0)
            first = (long)i;
    }
    ck_assert_msg(first < 0, "%s: mismatch at %ld: got %.9g want %.9g tol %.3g (worst ratio %.3g)",
                  what, first, first >= 0 ? (double)got[first] : 0.0,
                  first >= 0 ? want[first] : 0.0, first >= 0 ? tol[first] : 0.0, worst);
}

/* Dequantize n q8_1 values; also the per-element bound QTOL * d16 * (1 + 2^-10). */
static void q8_1_values(const void *yq, int64_t n, float *val, double *qtol)
{
    const memra_block_q8_1 *y = yq;
    for (int64_t i = 0; i < n; i++) {
        float d = memra_fp16_to_f32(y[i / 32].d);
        val[i] = d * (float)y[i / 32].qs[i % 32];
        qtol[i] = QTOL * (double)d * (1.0 + 1.0 / 1024);
    }
}

/* The q8_1 row equals want within the quantization bound plus extra[i] (the op's own f32
 * error on the value before quantization). */
static void check_q8_1(const char *what, const void *yq, const double *want, const double *extra,
                       int64_t n)
{
    float *val = xcalloc((size_t)n, sizeof *val);
    double *tol = xcalloc((size_t)n, sizeof *tol);
    q8_1_values(yq, n, val, tol);
    for (int64_t i = 0; i < n; i++)
        tol[i] += extra[i];
    check_bound(what, val, want, tol, (size_t)n);
    free(val);
    free(tol);
}

static double sigmoid64(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu64(double x) { return x * sigmoid64(x); }

/* =================================== exact_math ===================================== */

/* kernels/exact_math.h against libm (a reference only here: glibc's exp / log / log1p / sin /
 * cos / pow are within 1 ulp). Bounds, relative: exp 2^-52 + margin (3e-16; measured
 * 2.2e-16), log 6e-16 (4.8e-16: the atanh series, a division, ln2 in two parts), log1p 8e-16
 * (6.5e-16: log's error plus the x / (u - 1) correction), sin / cos 4e-16 against
 * max(|want|, 2^-30) (2.3e-16; r = x - k pi/2 with fdlibm's three 33-bit parts is exact to
 * ~k 1e-31), pow = exp(e ln b): the log's rounding is multiplied by |y| = |e ln b|, so
 * (2 + |y|) 5e-16 (3.2e-16 measured per unit). A subnormal exp result may differ by one
 * subnormal ulp (2^-1074) besides. */
static void xm_check(const char *what, double got, double want, double rtol, double x)
{
    const double d = fabs(got - want);
    ck_assert_msg((isnan(got) && isnan(want)) || got == want || d <= rtol * fabs(want) ||
                      (fabs(want) < 2.2250738585072014e-308 && d <= 0x1p-1074),
                  "%s(%.17g): got %.17g (%a) want %.17g (%a), rel %.3g", what, x, got, got, want,
                  want, d / fabs(want));
}

static double xm_u01(tu_rng *r) { return (double)(tu_rng_u64(r) >> 11) * 0x1p-53; }

START_TEST(test_exact_math_libm)
{
    tu_rng r;
    tu_rng_seed(&r, 0xE3AC7);
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        const double xe = -745.2 + 1455.0 * xm_u01(&r);                    /* the whole range */
        xm_check("exp", memra_x_exp(xe), exp(xe), 3e-16, xe);
        const double xs = (2 * xm_u01(&r) - 1) * pow(10.0, -20 * xm_u01(&r)); /* near 0 */
        xm_check("exp", memra_x_exp(xs), exp(xs), 3e-16, xs);
        const double xl = exp(-744.4 + 1454.0 * xm_u01(&r));               /* subnormal..max */
        xm_check("log", memra_x_log(xl), log(xl), 6e-16, xl);
        const double x1 = 0.5 + 1.5 * xm_u01(&r);                         /* near 1 */
        xm_check("log", memra_x_log(x1), log(x1), 6e-16, x1);
        const double xp = (2 * xm_u01(&r) - 1) * pow(10.0, -30 * xm_u01(&r));
        xm_check("log1p", memra_x_log1p(xp), log1p(xp), 8e-16, xp);
        const double xm = -1.0 + exp(-700 * xm_u01(&r));                 /* near -1 */
        xm_check("log1p", memra_x_log1p(xm), log1p(xm), 8e-16, xm);
        const double xb = exp(700 * xm_u01(&r));
        xm_check("log1p", memra_x_log1p(xb), log1p(xb), 8e-16, xb);
        /* |x| < 2^20 pi/2, the documented range; log-spread magnitudes */
        const double xc = (2 * xm_u01(&r) - 1) * 1.6e6 * pow(10.0, -8 * xm_u01(&r));
        double sn, cs;
        memra_x_sincos(xc, &sn, &cs);
        const double ws = sin(xc), wc = cos(xc);
        ck_assert_msg(fabs(sn - ws) <= 4e-16 * fmax(fabs(ws), 0x1p-30), "sin(%.17g): %a want %a", xc, sn, ws);
        ck_assert_msg(fabs(cs - wc) <= 4e-16 * fmax(fabs(wc), 0x1p-30), "cos(%.17g): %a want %a", xc, cs, wc);
        const double b = exp(-20 + 40 * xm_u01(&r)), e = (2 * xm_u01(&r) - 1) * 20;
        xm_check("pow", memra_x_pow(b, e), pow(b, e), (2 + fabs(e * log(b))) * 5e-16, b);
        const double br = 1 + 1e7 * xm_u01(&r), er = -xm_u01(&r); /* rope: base^(-2i/d) */
        xm_check("pow", memra_x_pow(br, er), pow(br, er), (2 + fabs(er * log(br))) * 5e-16, br);
    }
}
END_TEST

START_TEST(test_exact_math_specials)
{
    const double inf = INFINITY, dmin = 2.2250738585072014e-308, sub = 4.9406564584124654e-324;
    /* exp: exact equality with libm at zeros, infinities and the overflow / underflow edges */
    const double ex[] = {0.0, -0.0, sub, -sub, inf, -inf, 709.782712893384, 709.7827128933839,
                         nextafter(709.782712893384, 1000), -708.3964185322641, -708.39641853226,
                         -744.44007192138122, -745.1332191019411, -745.1332191019412,
                         nextafter(-745.1332191019412, -1000), -1000.0, 1000.0, 1.0, -1.0};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        ck_assert_msg(memra_x_exp(ex[i]) == exp(ex[i]), "exp(%a) = %a, libm %a", ex[i], memra_x_exp(ex[i]), exp(ex[i]));
    ck_assert(isnan(memra_x_exp(NAN)));
    ck_assert(memra_x_exp(-745.2) == 0.0 && memra_x_exp(709.8) == inf);
    /* log: specials exactly, the subnormal and extreme inputs within the bound */
    ck_assert(memra_x_log(0.0) == -inf && memra_x_log(-0.0) == -inf && memra_x_log(inf) == inf);
    ck_assert(isnan(memra_x_log(-1.0)) && isnan(memra_x_log(-inf)) && isnan(memra_x_log(NAN)));
    ck_assert(memra_x_log(1.0) == 0.0 && !signbit(memra_x_log(1.0)));
    const double lx[] = {sub, 3 * sub, dmin / 3, dmin, nextafter(dmin, 0), 1.7976931348623157e308, 2.0, 0.5};
    for (size_t i = 0; i < sizeof lx / sizeof lx[0]; i++)
        xm_check("log", memra_x_log(lx[i]), log(lx[i]), 6e-16, lx[i]);
    /* log1p: signed zero kept, tiny x returned exactly, -1 -> -inf */
    ck_assert(memra_x_log1p(0.0) == 0.0 && !signbit(memra_x_log1p(0.0)));
    ck_assert(memra_x_log1p(-0.0) == 0.0 && signbit(memra_x_log1p(-0.0)));
    ck_assert(memra_x_log1p(1e-300) == 1e-300 && memra_x_log1p(sub) == sub && memra_x_log1p(-sub) == -sub);
    ck_assert(memra_x_log1p(-1.0) == -inf && memra_x_log1p(inf) == inf);
    ck_assert(isnan(memra_x_log1p(-2.0)) && isnan(memra_x_log1p(NAN)));
    const double px[] = {1e-10, -1e-10, 0.5, -0.5, 1.0, 1e300, -0.9999999999};
    for (size_t i = 0; i < sizeof px / sizeof px[0]; i++)
        xm_check("log1p", memra_x_log1p(px[i]), log1p(px[i]), 8e-16, px[i]);
    /* pow */
    ck_assert(memra_x_pow(1.0, 123.0) == 1.0 && memra_x_pow(5.0, 0.0) == 1.0 && memra_x_pow(0.0, 1.0) == 0.0);
    ck_assert(memra_x_pow(2.0, 1100.0) == inf && memra_x_pow(2.0, -1100.0) == 0.0);
    xm_check("pow", memra_x_pow(2.0, 10.0), 1024.0, 18 * 5e-16, 2.0);
    xm_check("pow", memra_x_pow(1e6, -0.5), 1e-3, 9 * 5e-16, 1e6);
    /* sincos: zeros (sin(-0) is +0 here: the value, not the sign, is compared), tiny x (sin x
     * == x exactly), the quadrant boundaries, the end of the range */
    for (int i = 0; i < 3; i++) {
        const double t = i == 0 ? 1e-300 : i == 1 ? -1e-200 : sub;
        double sn, cs;
        memra_x_sincos(t, &sn, &cs);
        ck_assert(sn == t && cs == 1.0);
    }
    const double sx[] = {0.0, -0.0, 1e-300, -1e-300, sub, 0.7853981633974483, 1.5707963267948966,
                         3.141592653589793, -3.141592653589793, 4.71238898038469, 1e5, 1.6e6, -1.6e6};
    for (size_t i = 0; i < sizeof sx / sizeof sx[0]; i++) {
        double sn, cs;
        memra_x_sincos(sx[i], &sn, &cs);
        /* near a zero the error is absolute (pi/2's three parts leave 8.5e-32 k): 2^-30 floor */
        ck_assert_msg(fabs(sn - sin(sx[i])) <= 4e-16 * fmax(fabs(sin(sx[i])), 0x1p-30) &&
                          fabs(cs - cos(sx[i])) <= 4e-16 * fmax(fabs(cos(sx[i])), 0x1p-30),
                      "sincos(%a) = %a %a, libm %a %a", sx[i], sn, cs, sin(sx[i]), cos(sx[i]));
    }
    /* float wrappers at their edges: the definitions' values */
    const float fx[] = {0.0f, -0.0f, 88.72283f, 88.7228394f, 89.0f, -87.33654f, -103.9f, -104.0f, -150.0f,
                        20.0f, 20.000002f, -20.0f, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        const float x = fx[i];
        const double e = exp(-(double)x);
        const float want[4] = {(float)exp((double)x), (float)(1.0 / (1.0 + e)), (float)((double)x / (1.0 + e)),
                               x > 20.0f ? x : (float)log1p(exp((double)x))};
        const float got[4] = {memra_x_expf(x), memra_x_sigmoidf(x), memra_x_siluf(x), memra_x_softplusf(x)};
        for (int f = 0; f < 4; f++)
            ck_assert_msg(memcmp(&got[f], &want[f], 4) == 0 || (isnan(got[f]) && isnan(want[f])),
                          "float fn %d (exp, sigmoid, silu, softplus) at %a: %a want %a", f, (double)x,
                          (double)got[f], (double)want[f]);
    }
    /* x / n: the power-of-two multiply gives the division's bits (subnormal results, the
     * largest doubles, infinities, NaN), and other n divide */
    const double dx[] = {
        0.0, -0.0,      sub,    3 * sub, dmin, nextafter(dmin, 0), 1.7976931348623157e308, 1.0, 3.0,
        0.1, 12345.678, 1e-310, inf,     -inf};
    const int dn[] = {1, 2, 3, 7, 128, 256, 4096, 4095, 1 << 30, 1000000};
    for (size_t i = 0; i < sizeof dx / sizeof dx[0]; i++)
        for (size_t j = 0; j < sizeof dn / sizeof dn[0]; j++) {
            const double got = memra_x_div_n(dx[i], dn[j]), want = dx[i] / (double)dn[j];
            ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "div_n(%a, %d) = %a, want %a",
                          dx[i], dn[j], got, want);
        }
    ck_assert(isnan(memra_x_div_n(NAN, 4096)));
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 100000; i++) { /* random bit patterns: every exponent, both signs */
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t u = st;
        double x;
        memcpy(&x, &u, sizeof x);
        if (x != x)
            continue;
        const int n = 1 << (int)((st >> 59) % 31);
        const double got = memra_x_div_n(x, n), want = x / (double)n;
        ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "div_n(%a, %d)", x, n);
    }
    ck_assert(memra_x_sigmoidf(-INFINITY) == 0.0f && memra_x_sigmoidf(INFINITY) == 1.0f);
    ck_assert(memra_x_softplusf(-INFINITY) == 0.0f && memra_x_softplusf(INFINITY) == INFINITY);
    ck_assert(isnan(memra_x_expf(NAN)) && isnan(memra_x_sigmoidf(NAN)) && isnan(memra_x_siluf(NAN)) &&
              isnan(memra_x_softplusf(NAN)));
}
END_TEST

START_TEST(test_exact_math_floats)
{
    /* Each float wrapper equals (float) of the same double formula with libm's exp / log1p
     * on 1e6 random inputs: the double results differ by ~1e-16, so the float roundings can
     * differ only when the exact value lies within ~1e-16 (relative) of a float rounding
     * boundary (probability ~2^-28 per value; none for this seed). */
    tu_rng r;
    tu_rng_seed(&r, 0xF10A7);
    for (int i = 0; i < 1000000; i++) {
        const float x = i % 2 ? (float)(-110.0 + 205.0 * xm_u01(&r)) : tu_rng_normal(&r) * 8.0f;
        const double e = exp(-(double)x);
        const float want[4] = {(float)exp((double)x), (float)(1.0 / (1.0 + e)), (float)((double)x / (1.0 + e)),
                               x > 20.0f ? x : (float)log1p(exp((double)x))};
        const float got[4] = {memra_x_expf(x), memra_x_sigmoidf(x), memra_x_siluf(x), memra_x_softplusf(x)};
        ck_assert_msg(memcmp(got, want, sizeof got) == 0, "x %a: exp %a/%a sigmoid %a/%a silu %a/%a softplus %a/%a",
                      (double)x, (double)got[0], (double)want[0], (double)got[1], (double)want[1], (double)got[2],
                      (double)want[2], (double)got[3], (double)want[3]);
    }
}
END_TEST

/* Each float wrapper runs the short-latency sequences (memra_x_exp_fw, or memra_x_exp_short for
 * memra_x_expf_seq; memra_x_div_short, memra_x_log1p_short) and must give the bits of the
 * double-API formula its comment names, for every float: bench/xm_accuracy.c checks all 2^32
 * (minutes); here every 1021st bit pattern (4.2M, all exponents and signs, NaN / inf / subnormals
 * included) plus the edges of the fallbacks. NaN results compare equal whatever their payload. */
static int xm_same(float a, float b)
{
    return memcmp(&a, &b, 4) == 0 || (a != a && b != b);
}

static void xm_check_wrappers(float x)
{
    const double e = memra_x_exp(-(double)x);
    const float want[5] = {(float)memra_x_exp((double)x), (float)(1.0 / (1.0 + e)),
                           (float)((double)x / (1.0 + e)),
                           x > 20.0f ? x : (float)memra_x_log1p(memra_x_exp((double)x)),
                           (float)memra_x_exp((double)x)};
    const float got[5] = {memra_x_expf(x), memra_x_sigmoidf(x), memra_x_siluf(x),
                          memra_x_softplusf(x), memra_x_expf_seq(x)};
    for (int k = 0; k < 5; k++)
        ck_assert_msg(xm_same(got[k], want[k]), "x %a: wrapper %d gives %a, its formula %a",
                      (double)x, k, (double)got[k], (double)want[k]);
}

START_TEST(test_exact_math_short)
{
    for (uint64_t b = 0; b < (1ull << 32); b += 1021) {
        uint32_t u = (uint32_t)b;
        float x;
        memcpy(&x, &u, 4);
        xm_check_wrappers(x);
    }
    const float edges[] = {-0.0f,         0.0f,       INFINITY,      -INFINITY,     NAN,
                           -NAN,          20.0f,      0x1.000002p4f, -693.0f,       -693.2f,
                           -693.15f,      -745.0f,    -103.97f,      88.72f,        88.73f,
                           0x1p-149f,     -0x1p-149f, 0x1p-126f,     3.4028235e38f, -3.4028235e38f,
                           -0x1.62e43p9f, -0x1.5p9f,  -110.0f,       -109.99f,      110.0f,
                           110.01f,       709.0f,     709.0001f,     -709.0f,       -709.0001f,
                           709.78f,       -709.78f,   1e10f,         -1e10f,        0x1p24f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        xm_check_wrappers(edges[i]);
    /* the double pieces: the division against IEEE where its result is exact or its range edge;
     * at random within 2^-52 relative of IEEE (one ulp: four Newton steps leave the reciprocal
     * 2e-20 off, the residual step then rounds q within an ulp of n / d), and e^x, log1p within
     * test_exact_math_libm's bounds for memra_x_exp (3e-16) and memra_x_log1p (8e-16) */
    ck_assert(memra_x_div_short(1.0, 4.0) == 0.25 && memra_x_div_short(-0.0, 3.0) == 0.0 &&
              signbit(memra_x_div_short(-0.0, 3.0)) && memra_x_div_short(6.0, 3.0) == 2.0);
    ck_assert(memra_x_div_short(1.0, 0x1p1000) == 0x1p-1000 &&
              memra_x_div_short(0x1p900, 0x1p-100) == 0x1p1000);
    tu_rng r;
    tu_rng_seed(&r, 0xD1F5);
    for (int i = 0; i < 1000000; i++) {
        const double d = exp(700 * xm_u01(&r) - 350),
                     n = (2 * xm_u01(&r) - 1) * exp(60 * xm_u01(&r) - 30);
        const double got = memra_x_div_short(n, d), want = n / d;
        ck_assert_msg(fabs(got - want) <= 0x1p-52 * fabs(want), "%a / %a: %a, IEEE %a", n, d, got,
                      want);
        const double x = -745.2 + 1455.0 * xm_u01(&r);
        xm_check("exp_short", memra_x_exp_short(x), exp(x), 3e-16, x);
        const double y = exp(50 * xm_u01(&r) - 40);
        xm_check("log1p_short", memra_x_log1p_short(y), log1p(y), 8e-16, y);
    }
}
END_TEST

/* The CPU emulation of the CUDA butterflies (ref_common.h kref_warp_sum / kref_block_sum)
 * against a literal 32-lane simulation: lane l adds lane l ^ o (its own value first), every
 * lane ends with the same bits, and the block sum is warp 0's butterfly over the per-warp
 * lane-0 values (zeros past the last warp). */
static double sim_warp_f64(const double *in)
{
    double v[32], t[32];
    memcpy(v, in, sizeof v);
    for (int o = 16; o >= 1; o >>= 1) {
        for (int l = 0; l < 32; l++)
            t[l] = v[l] + v[l ^ o];
        memcpy(v, t, sizeof v);
    }
    for (int l = 1; l < 32; l++)
        ck_assert(memcmp(&v[l], &v[0], sizeof v[0]) == 0);
    return v[0];
}

static float sim_warp_f32(const float *in)
{
    float v[32], t[32];
    memcpy(v, in, sizeof v);
    for (int o = 16; o >= 1; o >>= 1) {
        for (int l = 0; l < 32; l++)
            t[l] = v[l] + v[l ^ o];
        memcpy(v, t, sizeof v);
    }
    for (int l = 1; l < 32; l++)
        ck_assert(memcmp(&v[l], &v[0], sizeof v[0]) == 0);
    return v[0];
}

START_TEST(test_block_sum_emulation)
{
    tu_rng r;
    tu_rng_seed(&r, 0xB10C);
    static const int32_t threads[] = {32, 64, 256, 512, 1024};
    for (int rep = 0; rep < 50; rep++)
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
            const int32_t T = threads[ti];
            double pd[1024], cd[1024], wd[32] = {0};
            float pf[1024], cf[1024], wf[32] = {0};
            for (int32_t t = 0; t < T; t++) {
                /* magnitudes over 40 binades: the sums round, so the order matters */
                pd[t] = tu_rng_normal(&r) * ldexp(1.0, (int)(tu_rng_u64(&r) % 40) - 20);
                pf[t] = (float)pd[t];
            }
            memcpy(cd, pd, sizeof pd);
            memcpy(cf, pf, sizeof pf);
            for (int32_t w = 0; w < T / 32; w++) {
                wd[w] = sim_warp_f64(pd + 32 * w);
                wf[w] = sim_warp_f32(pf + 32 * w);
            }
            const double sd = sim_warp_f64(wd);
            const float sf = sim_warp_f32(wf);
            const double ed = kref_block_sum_f64(cd, T);
            const float ef = kref_block_sum_f32(cf, T);
            ck_assert_msg(memcmp(&sd, &ed, sizeof sd) == 0, "f64 T %d: %a vs %a", T, sd, ed);
            ck_assert_msg(memcmp(&sf, &ef, sizeof sf) == 0, "f32 T %d: %a vs %a", T, (double)sf, (double)ef);
        }
    /* kref_sum_sq_f64_blk: thread t's strided partials, then the block sum */
    float x[3000];
    for (int i = 0; i < 3000; i++)
        x[i] = tu_rng_normal(&r) * 3.0f;
    double part[1024] = {0};
    for (int j = 0; j < 3000; j++)
        part[j % 1024] += (double)x[j] * x[j];
    const double want = kref_block_sum_f64(part, 1024), got = kref_sum_sq_f64_blk(x, 3000, 1024);
    ck_assert(memcmp(&want, &got, sizeof got) == 0);
}
END_TEST

/* ================================== Philox / RNG ==================================== */

START_TEST(test_philox_kat)
{
    /* Random123 kat_vectors for philox4x32_10 (Salmon et al., SC'11). */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        memra_philox4x32_10(kat[i], kat[i] + 4, out);
        ck_assert_msg(memcmp(out, kat[i] + 6, sizeof out) == 0, "philox KAT %d", i);
    }
    /* uniform: in [0, 1), a pure function of (seed, step), different across steps */
    float u0 = memra_rng_uniform(7, 0), u1 = memra_rng_uniform(7, 1);
    ck_assert(u0 >= 0.0f && u0 < 1.0f && u1 >= 0.0f && u1 < 1.0f && u0 != u1);
    ck_assert(memra_rng_uniform(7, 0) == u0);
    double mean = 0;
    for (int s = 0; s < 4096; s++)
        mean += memra_rng_uniform(123, (uint64_t)s);
    /* 4096 uniforms: sd of the mean = sqrt(1/12/4096) = 0.0045; 5 sd */
    ck_assert_msg(fabs(mean / 4096 - 0.5) < 0.023, "uniform mean %g", mean / 4096);
}
END_TEST

/* ====================================== embed ======================================= */

START_TEST(test_embed)
{
    static const struct { memra_qtype t; int32_t n_embd; } cases[] = {
        {MEMRA_QT_F32, 1}, {MEMRA_QT_F32, 33}, {MEMRA_QT_F16, 64}, {MEMRA_QT_Q8_0, 96},
        {MEMRA_QT_Q4_K, 256}, {MEMRA_QT_Q6_K, 512},
    };
    tu_rng r;
    tu_rng_seed(&r, 11);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t V = 19, D = cases[c].n_embd, B = 5;
        const uint64_t rb = memra_quant_row_bytes(cases[c].t, D);
        ck_assert_uint_gt(rb, 0);
        float *src = rand_vec(&r, (size_t)V * D, 1.0f);
        uint8_t *table = xcalloc((size_t)V, rb);
        for (int32_t v = 0; v < V; v++)
            ck_assert_int_eq(memra_quantize_row(cases[c].t, src + (size_t)v * D, table + v * rb, D), 0);
        int32_t tokens[5] = {0, V - 1, 7, -3, V}; /* the last two are out of range */
        float *x = rand_vec(&r, (size_t)B * D, 1.0f), *want = xcalloc((size_t)D, sizeof *want);
        memra_embed_args a = {.table = table, .tokens = tokens, .x = x, .qtype = cases[c].t,
                              .n_embd = D, .n_vocab = V, .b = B, .row_bytes = rb};
        ck_assert_int_eq(memra_embed_ref(&a), MEMRA_OK);
        for (int32_t b = 0; b < B; b++) {
            if (tokens[b] >= 0 && tokens[b] < V)
                memra_dequantize_row(cases[c].t, table + (size_t)tokens[b] * rb, want, D);
            else
                memset(want, 0, sizeof(float) * (size_t)D);
            /* dequantization is exact: the op must give the very same floats */
            ck_assert_msg(memcmp(x + (size_t)b * D, want, sizeof(float) * (size_t)D) == 0,
                          "case %zu row %d", c, b);
        }
        free(src);
        free(table);
        free(x);
        free(want);
    }
}
END_TEST

/* =================================== rms_norm_q8 ==================================== */

START_TEST(test_rms_norm_q8)
{
    /* n: one block, a few, past the 1024 chunk with a tail chunk, a 4096-wide row */
    static const int32_t ns[] = {32, 96, 1056, 4096};
    static const int32_t bs[] = {1, 3};
    tu_rng r;
    tu_rng_seed(&r, 12);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++) {
            const int32_t n = ns[i], B = bs[j];
            float *x = rand_vec(&r, (size_t)B * n, 3.0f), *w = rand_vec(&r, (size_t)n, 1.0f);
            float *y = xcalloc((size_t)B * n, sizeof *y);
            memra_block_q8_1 *yq = xcalloc((size_t)B * n / 32, sizeof *yq);
            memra_rms_norm_q8_args a = {.x = x, .w = w, .y_q = yq, .y_f32 = y, .n = n, .b = B,
                                        .eps = 1e-6f};
            ck_assert_int_eq(memra_rms_norm_q8_ref(&a), MEMRA_OK);
            double *want = xcalloc((size_t)n, sizeof *want), *tol = xcalloc((size_t)n, sizeof *tol);
            for (int32_t b = 0; b < B; b++) {
                const float *xb = x + (size_t)b * n;
                double ss = 0;
                for (int32_t k = 0; k < n; k++)
                    ss += (double)xb[k] * xb[k];
                double s = 1.0 / sqrt(ss / n + 1e-6);
                for (int32_t k = 0; k < n; k++) {
                    want[k] = (double)w[k] * xb[k] * s;
                    /* mean rounded (u), + eps (u), sqrtf (u/2), 1/ (u), two products (2u):
                     * < 6u relative; 8u leaves margin. The f64 sum of squares (kernel order,
                     * rms_norm_q8.h) is off by < n 2^-53 relative in any order: negligible */
                    tol[k] = 8 * U32 * fabs(want[k]);
                }
                check_bound("rms_norm f32", y + (size_t)b * n, want, tol, (size_t)n);
                check_q8_1("rms_norm q8_1", yq + (size_t)b * n / 32, want, tol, n);
                /* the q8_1 bytes are exactly the engine quantizer applied to the f32 output */
                memra_block_q8_1 *ref = xcalloc((size_t)n / 32, sizeof *ref);
                memra_quantize_q8_1(y + (size_t)b * n, ref, n);
                ck_assert(memcmp(ref, yq + (size_t)b * n / 32, sizeof *ref * (size_t)n / 32) == 0);
                free(ref);
            }
            free(x);
            free(w);
            free(y);
            free(yq);
            free(want);
            free(tol);
        }
    }
}
END_TEST

/* ====================================== mmvq ======================================== */

/* A random weight {n_in, n_out} of type t: raw rows and their dequantized values. */
typedef struct test_weight {
    memra_qtype t;
    int32_t n_in, n_out;
    uint64_t row_bytes;
    uint8_t *raw; /* [n_out][row_bytes] */
    float *deq;   /* [n_out][n_in] */
} test_weight;

static void weight_make(tu_rng *r, test_weight *w, memra_qtype t, int32_t n_in, int32_t n_out)
{
    w->t = t;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = memra_quant_row_bytes(t, n_in);
    ck_assert_msg(w->row_bytes > 0, "type %d n_in %d", t, n_in);
    float *src = rand_vec(r, (size_t)n_in * n_out, 0.5f);
    w->raw = xcalloc((size_t)n_out, w->row_bytes);
    w->deq = xcalloc((size_t)n_in * n_out, sizeof(float));
    for (int32_t o = 0; o < n_out; o++) {
        ck_assert_int_eq(memra_quantize_row(t, src + (size_t)o * n_in, w->raw + o * w->row_bytes, n_in), 0);
        ck_assert_int_eq(memra_dequantize_row(t, w->raw + o * w->row_bytes, w->deq + (size_t)o * n_in, n_in), 0);
    }
    free(src);
}

static void weight_free(test_weight *w)
{
    free(w->raw);
    free(w->deq);
}

/* f64 dot of weight row o with the dequantized q8_1 activations a[n_in], and the bound on
 * the engine's f32 result. Each weight block's contribution is a few f32 operations on
 * products of fp16/fp8 scales and exact integer sums (<= 8 roundings, each relative to the
 * terms |d*sc*n| and |dmin*m| that make up |w| -- bounded by 4 max|w| of the 256-block), then
 * summed in f32 over nb blocks (nb u relative): tol = 8 (nb + 8) u * sum_j 4 M_blk(j) |a_j|. */
static void weight_dot(const test_weight *w, int32_t o, const float *a, double *dot, double *tol)
{
    const float *row = w->deq + (size_t)o * w->n_in;
    const int32_t blk = 256, nb = w->n_in / 32;
    double s = 0, mag = 0;
    for (int32_t j0 = 0; j0 < w->n_in; j0 += blk) {
        double m = 0;
        for (int32_t j = j0; j < j0 + blk && j < w->n_in; j++)
            m = fmax(m, fabs(row[j]));
        for (int32_t j = j0; j < j0 + blk && j < w->n_in; j++) {
            s += (double)row[j] * a[j];
            mag += 4 * m * fabs(a[j]);
        }
    }
    *dot = s;
    *tol = 8.0 * (nb + 8) * U32 * mag + 1e-30;
}

static const memra_qtype k_dot_types[] = {MEMRA_QT_F32, MEMRA_QT_F16, MEMRA_QT_BF16, MEMRA_QT_Q8_0,
                                          MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4, MEMRA_QT_NVFP4,
                                          MEMRA_QT_Q4_K, MEMRA_QT_Q5_K, MEMRA_QT_Q6_K,
                                          MEMRA_QT_IQ4_XS};

static int32_t type_block(memra_qtype t) { return (int32_t)memra_qtype_get(t)->block_elems; }

/* Run one mmvq case: n_w weights of types ts (n_in a multiple of every block), b rows. */
static void mmvq_case(tu_rng *r, const memra_qtype *ts, int n_w, int32_t n_in, const int32_t *n_out,
                      int32_t B, int with_scale)
{
    test_weight w[MEMRA_MMVQ_MAX_W];
    float *y[MEMRA_MMVQ_MAX_W], *y0[MEMRA_MMVQ_MAX_W];
    float scale[MEMRA_MMVQ_MAX_W];
    float *x = rand_vec(r, (size_t)B * n_in, 1.0f);
    memra_block_q8_1 *aq = xcalloc((size_t)B * n_in / 32, sizeof *aq);
    memra_quantize_q8_1(x, aq, (int64_t)B * n_in);
    memra_mmvq_args a = {.a = aq, .n_in = n_in, .b = B, .n_w = n_w};
    for (int i = 0; i < n_w; i++) {
        weight_make(r, &w[i], ts[i], n_in, n_out[i]);
        y[i] = rand_vec(r, (size_t)B * n_out[i], 1.0f);
        y0[i] = xcalloc((size_t)B * n_out[i], sizeof(float));
        memcpy(y0[i], y[i], sizeof(float) * (size_t)B * n_out[i]);
        scale[i] = 0.5f + (float)i;
        a.out[i] = (memra_mmvq_out){.w = w[i].raw, .scale = with_scale ? &scale[i] : NULL,
                                    .y = y[i], .qtype = ts[i], .n_out = n_out[i],
                                    .mode = i % 2 ? MEMRA_MMVQ_ADD : MEMRA_MMVQ_STORE,
                                    .row_bytes = w[i].row_bytes};
    }
    ck_assert_int_eq(memra_mmvq_ref(&a), MEMRA_OK);
    float *av = xcalloc((size_t)n_in, sizeof *av);
    double *qt = xcalloc((size_t)n_in, sizeof *qt);
    for (int i = 0; i < n_w; i++) {
        double *want = xcalloc((size_t)n_out[i], sizeof *want), *tol = xcalloc((size_t)n_out[i], sizeof *tol);
        for (int32_t b = 0; b < B; b++) {
            q8_1_values(aq + (size_t)b * n_in / 32, n_in, av, qt);
            for (int32_t o = 0; o < n_out[i]; o++) {
                double d, t;
                weight_dot(&w[i], o, av, &d, &t);
                double sc = with_scale ? scale[i] : 1.0;
                double base = a.out[i].mode == MEMRA_MMVQ_ADD ? y0[i][(size_t)b * n_out[i] + o] : 0.0;
                want[o] = base + sc * d;
                /* + one rounding for the scale and one for the add */
                tol[o] = sc * t + 2 * U32 * (fabs(want[o]) + fabs(sc * d));
            }
            check_bound("mmvq", y[i] + (size_t)b * n_out[i], want, tol, (size_t)n_out[i]);
        }
        free(want);
        free(tol);
    }
    free(av);
    free(qt);
    for (int i = 0; i < n_w; i++) {
        weight_free(&w[i]);
        free(y[i]);
        free(y0[i]);
    }
    free(x);
    free(aq);
}

START_TEST(test_mmvq_types)
{
    tu_rng r;
    tu_rng_seed(&r, 13);
    for (size_t i = 0; i < sizeof k_dot_types / sizeof k_dot_types[0]; i++) {
        const memra_qtype t = k_dot_types[i];
        const int32_t blk = type_block(t) < 32 ? 32 : type_block(t);
        const int32_t n_outs[] = {1, 7};
        const int32_t n_ins[] = {blk, 3 * blk};
        for (int k = 0; k < 2; k++)
            for (int o = 0; o < 2; o++)
                mmvq_case(&r, &t, 1, n_ins[k], &n_outs[o], k + 1 + 2 * o, 0);
    }
}
END_TEST

START_TEST(test_mmvq_merged)
{
    /* 4 weights of mixed types over one input, add and store modes, per-tensor scales */
    tu_rng r;
    tu_rng_seed(&r, 14);
    const memra_qtype ts[4] = {MEMRA_QT_Q4_K, MEMRA_QT_Q6_K, MEMRA_QT_Q8_0, MEMRA_QT_NVFP4};
    const int32_t n_out[4] = {33, 1, 64, 5};
    const int32_t bs[] = {1, 2, 5, 16};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        mmvq_case(&r, ts, 4, 512, n_out, bs[i], 1);
        mmvq_case(&r, ts, 3, 256, n_out, bs[i], 0);
    }
}
END_TEST

/* =================================== silu_mul_q8 ==================================== */

START_TEST(test_silu_mul_q8)
{
    static const struct { int32_t n, m; } cases[] = {{32, 1}, {96, 3}, {1056, 1}, {2080, 2}};
    tu_rng r;
    tu_rng_seed(&r, 15);
    for (int32_t B = 1; B <= 3; B += 2) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            memra_silu_mul_q8_args a = {.b = B, .n_slots = c % 2 ? 2 : 1};
            float *g[2], *u[2];
            memra_block_q8_1 *y[2];
            for (int s = 0; s < a.n_slots; s++) {
                const size_t k = (c + (size_t)s) % (sizeof cases / sizeof cases[0]);
                const int32_t n = cases[k].n, m = cases[k].m;
                g[s] = rand_vec(&r, (size_t)B * m * n, 3.0f);
                u[s] = rand_vec(&r, (size_t)B * m * n, 1.0f);
                y[s] = xcalloc((size_t)B * m * n / 32, sizeof(memra_block_q8_1));
                a.slot[s] = (memra_silu_mul_q8_slot){.g = g[s], .u = u[s], .y_q = y[s], .n = n, .m = m};
            }
            ck_assert_int_eq(memra_silu_mul_q8_ref(&a), MEMRA_OK);
            for (int s = 0; s < a.n_slots; s++) {
                const size_t len = (size_t)B * a.slot[s].m * a.slot[s].n;
                double *want = xcalloc(len, sizeof *want), *tol = xcalloc(len, sizeof *tol);
                for (size_t i = 0; i < len; i++) {
                    want[i] = silu64(g[s][i]) * u[s][i];
                    /* memra_x_siluf: a double formula (~1e-16) rounded once (u/2), then
                     * the product (u/2): < 2u relative; 8u leaves margin */
                    tol[i] = 8 * U32 * fabs(want[i]);
                }
                /* rows are quantized independently: one long check covers every row */
                check_q8_1("silu_mul", y[s], want, tol, (int64_t)len);
                free(want);
                free(tol);
                free(g[s]);
                free(u[s]);
                free(y[s]);
            }
        }
    }
}
END_TEST

/* ==================================== attention ===================================== */

typedef struct attn_shape {
    int32_t n_head, n_head_kv, head_dim, n_rot;
    int32_t sections[4];
    int32_t kv_type;
} attn_shape;

static const attn_shape k_attn_shapes[] = {
    {1, 1, 32, 32, {0, 0, 0, 0}, MEMRA_QT_F16},      /* plain NEOX, full rotation */
    {4, 2, 64, 16, {3, 3, 2, 0}, MEMRA_QT_F16},      /* Qwen3.5-like IMRoPE, partial */
    {6, 2, 48, 16, {1, 1, 1, 3}, MEMRA_QT_F16},      /* "e" sectors (angle 0); 48: heads
                                                       straddle q8_1 blocks */
    {4, 1, 64, 64, {11, 11, 10, 0}, MEMRA_QT_Q8_0},  /* q8_0 cache */
    {2, 2, 256, 64, {11, 11, 10, 0}, MEMRA_QT_F16},  /* Qwen3.5 head geometry */
};

/* f64 rope position of pair m (the contract in attn_prep.h). */
static int32_t rope_pos64(const int32_t s[4], int32_t m, int32_t p)
{
    int32_t sum = s[0] + s[1] + s[2] + s[3];
    if (sum == 0)
        return p;
    int32_t k = m % sum;
    return (k % 3 == 0 && k < 3 * s[0]) || (k % 3 == 1 && k < 3 * s[1]) ||
                   (k % 3 == 2 && k < 3 * s[2]) ? p : 0;
}

/* want[dh] = rope(rmsnorm(x) * w) in f64; tol from the op's f32 chain. */
static void norm_rope64(const attn_shape *sh, const float *x, const float *w, int32_t p,
                        double *want, double *tol)
{
    const int32_t dh = sh->head_dim, half = sh->n_rot / 2;
    double ss = 0;
    for (int32_t c = 0; c < dh; c++)
        ss += (double)x[c] * x[c];
    const double s = 1.0 / sqrt(ss / dh + 1e-6);
    double *n = xcalloc((size_t)dh, sizeof *n);
    for (int32_t c = 0; c < dh; c++)
        n[c] = (double)w[c] * x[c] * s;
    for (int32_t c = 0; c < dh; c++) {
        want[c] = n[c];
        tol[c] = 8 * U32 * fabs(n[c]); /* the rms_norm chain, see test_rms_norm_q8 */
    }
    for (int32_t m = 0; m < half; m++) {
        const double th = rope_pos64(sh->sections, m, p) * pow(1e4, -2.0 * m / sh->n_rot);
        want[m] = n[m] * cos(th) - n[m + half] * sin(th);
        want[m + half] = n[m] * sin(th) + n[m + half] * cos(th);
        /* normed inputs (8u each), cos/sin rounded to f32 (u), two products and a sum
         * (3u): < 16u of |x0| + |x1| */
        tol[m] = tol[m + half] = 16 * U32 * (fabs(n[m]) + fabs(n[m + half]));
    }
    free(n);
}

/* Cache entry values as stored (f16 or q8_0), f32. */
static void kv_read(int32_t kv_type, const uint8_t *src, float *dst, int32_t dh)
{
    if (kv_type == MEMRA_QT_F16)
        for (int32_t c = 0; c < dh; c++)
            dst[c] = memra_fp16_to_f32(((const uint16_t *)src)[c]);
    else
        memra_dequantize_row(MEMRA_QT_Q8_0, src, dst, dh);
}

/* Bound of a cache value against its f64 source x (plus the f32 error tol_x of the value
 * before it was stored): f16 RN-even: 2^-11 |x| + 2^-25 (subnormal spacing 2^-24 / 2);
 * q8_0: QTOL d16 of the value's 32-block. */
static void kv_tol(int32_t kv_type, const uint8_t *src, const double *x, const double *tol_x,
                   double *tol, int32_t dh)
{
    for (int32_t c = 0; c < dh; c++) {
        if (kv_type == MEMRA_QT_F16) {
            tol[c] = tol_x[c] + fabs(x[c]) / 2048 + 1.0 / 33554432.0;
        } else {
            const uint8_t *blk = src + (size_t)(c / 32) * 34;
            uint16_t d16;
            memcpy(&d16, blk, 2);
            tol[c] = tol_x[c] + QTOL * memra_fp16_to_f32(d16) * (1.0 + 1.0 / 1024);
        }
    }
}

typedef struct attn_fixture {
    attn_shape sh;
    int32_t B, n_ctx;
    int32_t pos[16];
    uint64_t hb, slot_bytes;
    uint8_t *cache_k, *cache_v; /* [B][n_ctx][n_head_kv][hb] */
    uint64_t kptr[16], vptr[16];
} attn_fixture;

static void attn_fixture_init(attn_fixture *f, const attn_shape *sh, int32_t B, int32_t n_ctx)
{
    memset(f, 0, sizeof *f);
    f->sh = *sh;
    f->B = B;
    f->n_ctx = n_ctx;
    f->hb = memra_kv_head_bytes(sh->kv_type, sh->head_dim);
    f->slot_bytes = (uint64_t)n_ctx * (uint64_t)sh->n_head_kv * f->hb;
    f->cache_k = xcalloc((size_t)B, f->slot_bytes);
    f->cache_v = xcalloc((size_t)B, f->slot_bytes);
    memset(f->cache_k, 0x5a, (size_t)B * f->slot_bytes); /* sentinel: untouched entries */
    memset(f->cache_v, 0x5a, (size_t)B * f->slot_bytes);
    for (int32_t b = 0; b < B; b++) {
        f->kptr[b] = (uint64_t)(uintptr_t)(f->cache_k + (size_t)b * f->slot_bytes);
        f->vptr[b] = (uint64_t)(uintptr_t)(f->cache_v + (size_t)b * f->slot_bytes);
    }
}

static void attn_fixture_free(attn_fixture *f)
{
    free(f->cache_k);
    free(f->cache_v);
}

START_TEST(test_attn_prep)
{
    tu_rng r;
    tu_rng_seed(&r, 16);
    for (size_t si = 0; si < sizeof k_attn_shapes / sizeof k_attn_shapes[0]; si++) {
        const attn_shape *sh = &k_attn_shapes[si];
        const int32_t B = si % 2 ? 3 : 1, n_ctx = 40, dh = sh->head_dim;
        const int32_t Hq = sh->n_head, Hkv = sh->n_head_kv;
        attn_fixture f;
        attn_fixture_init(&f, sh, B, n_ctx);
        for (int32_t b = 0; b < B; b++)
            f.pos[b] = (int32_t)((b * 17 + 5 * si) % n_ctx);
        float *qg = rand_vec(&r, (size_t)B * 2 * Hq * dh, 2.0f), *k = rand_vec(&r, (size_t)B * Hkv * dh, 2.0f);
        float *v = rand_vec(&r, (size_t)B * Hkv * dh, 2.0f), *q = xcalloc((size_t)B * Hq * dh, sizeof(float));
        float *qn = rand_vec(&r, (size_t)dh, 1.0f), *kn = rand_vec(&r, (size_t)dh, 1.0f);
        memra_attn_prep_args a = {.qg = qg, .k = k, .v = v, .q_norm = qn, .k_norm = kn,
                                  .positions = f.pos, .k_cache = f.kptr, .v_cache = f.vptr, .q = q,
                                  .n_head = Hq, .n_head_kv = Hkv, .head_dim = dh,
                                  .n_rot = sh->n_rot, .kv_type = sh->kv_type, .n_ctx = n_ctx,
                                  .b = B, .eps = 1e-6f, .freq_base = 1e4f, .freq_scale = 1.0f};
        memcpy(a.sections, sh->sections, sizeof a.sections);
        ck_assert_int_eq(memra_attn_prep_ref(&a), MEMRA_OK);
        double *want = xcalloc((size_t)dh, sizeof *want), *tol = xcalloc((size_t)dh, sizeof *tol);
        double *tol2 = xcalloc((size_t)dh, sizeof *tol2), *vw = xcalloc((size_t)dh, sizeof *vw);
        float *got = xcalloc((size_t)dh, sizeof *got);
        for (int32_t b = 0; b < B; b++) {
            for (int32_t i = 0; i < Hq; i++) {
                norm_rope64(sh, qg + ((size_t)b * 2 * Hq + 2 * (size_t)i) * dh, qn, f.pos[b], want, tol);
                check_bound("attn_prep q", q + ((size_t)b * Hq + i) * dh, want, tol, (size_t)dh);
            }
            for (int32_t j = 0; j < Hkv; j++) {
                const uint8_t *ke = (uint8_t *)(uintptr_t)f.kptr[b] + ((uint64_t)f.pos[b] * Hkv + j) * f.hb;
                const uint8_t *ve = (uint8_t *)(uintptr_t)f.vptr[b] + ((uint64_t)f.pos[b] * Hkv + j) * f.hb;
                norm_rope64(sh, k + ((size_t)b * Hkv + j) * dh, kn, f.pos[b], want, tol);
                kv_read(sh->kv_type, ke, got, dh);
                kv_tol(sh->kv_type, ke, want, tol, tol2, dh);
                check_bound("attn_prep k cache", got, want, tol2, (size_t)dh);
                for (int32_t c = 0; c < dh; c++) {
                    vw[c] = v[((size_t)b * Hkv + j) * dh + c];
                    tol[c] = 0;
                }
                kv_read(sh->kv_type, ve, got, dh);
                kv_tol(sh->kv_type, ve, vw, tol, tol2, dh);
                check_bound("attn_prep v cache", got, vw, tol2, (size_t)dh);
            }
            /* every other position of the row is untouched */
            for (int32_t t = 0; t < n_ctx; t++) {
                if (t == f.pos[b])
                    continue;
                const uint8_t *e = f.cache_k + (size_t)b * f.slot_bytes + (size_t)t * Hkv * f.hb;
                for (uint64_t x = 0; x < Hkv * f.hb; x++)
                    ck_assert_uint_eq(e[x], 0x5a);
            }
        }
        free(want);
        free(tol);
        free(tol2);
        free(vw);
        free(got);
        free(qg);
        free(k);
        free(v);
        free(q);
        free(qn);
        free(kn);
        attn_fixture_free(&f);
    }
}
END_TEST

/* Fill every cache entry of the fixture with random values (stored as kv_type). */
static void attn_fill_cache(tu_rng *r, attn_fixture *f)
{
    const int32_t dh = f->sh.head_dim;
    float *tmp = rand_vec(r, (size_t)dh, 1.0f);
    for (int32_t b = 0; b < f->B; b++)
        for (int32_t t = 0; t < f->n_ctx * f->sh.n_head_kv; t++)
            for (int kv = 0; kv < 2; kv++) {
                for (int32_t c = 0; c < dh; c++)
                    tmp[c] = tu_rng_normal(r);
                uint8_t *dst = (kv ? f->cache_v : f->cache_k) + (size_t)b * f->slot_bytes + (size_t)t * f->hb;
                if (f->sh.kv_type == MEMRA_QT_F16)
                    for (int32_t c = 0; c < dh; c++)
                        ((uint16_t *)dst)[c] = memra_f32_to_fp16(tmp[c]);
                else
                    memra_quantize_row(MEMRA_QT_Q8_0, tmp, dst, dh);
            }
    free(tmp);
}

/* f64 gated attention of q head i of row b over the fixture's cache; tol from the op's f32
 * chain (the flash-decoding order of attn_decode.h): each score is an f32 dot of dh terms
 * (lane partials + butterfly: <= dh u of sum|q k| scale) and every weight e^s inherits that
 * absolute error as a relative one; a key's term then sees at most p + 1 fmaf additions and
 * p + 1 batch corrections in its stream, <= 4 merge levels (sub butterfly, warps, splits) of
 * 3 roundings each, and the exps, the normalisation and the gate (< 8u):
 * tol_c = (4 E_s + (2 p + 32) u) sum_t alpha_t |v_tc| g + 4u |want_c|. */
static void attn_head64(const attn_fixture *f, const float *q, const float *gate, int32_t b,
                        int32_t i, float scale, double *want, double *tol)
{
    const int32_t dh = f->sh.head_dim, Hkv = f->sh.n_head_kv, p = f->pos[b];
    const int32_t j = i / (f->sh.n_head / Hkv);
    float *kv = xcalloc((size_t)dh, sizeof *kv);
    double *s = xcalloc((size_t)p + 1, sizeof *s), es = 0, mx = -INFINITY, l = 0;
    for (int32_t t = 0; t <= p; t++) {
        kv_read(f->sh.kv_type, (uint8_t *)(uintptr_t)f->kptr[b] + ((uint64_t)t * Hkv + j) * f->hb, kv, dh);
        double d = 0, mag = 0;
        for (int32_t c = 0; c < dh; c++) {
            d += (double)q[c] * kv[c];
            mag += fabs((double)q[c] * kv[c]);
        }
        s[t] = d * scale;
        es = fmax(es, (dh + 2) * U32 * mag * scale);
        mx = fmax(mx, s[t]);
    }
    double *o = xcalloc((size_t)dh, sizeof *o), *mag = xcalloc((size_t)dh, sizeof *mag);
    for (int32_t t = 0; t <= p; t++)
        l += exp(s[t] - mx);
    for (int32_t t = 0; t <= p; t++) {
        kv_read(f->sh.kv_type, (uint8_t *)(uintptr_t)f->vptr[b] + ((uint64_t)t * Hkv + j) * f->hb, kv, dh);
        const double al = exp(s[t] - mx) / l;
        for (int32_t c = 0; c < dh; c++) {
            o[c] += al * kv[c];
            mag[c] += al * fabs(kv[c]);
        }
    }
    for (int32_t c = 0; c < dh; c++) {
        const double g = sigmoid64(gate[c]);
        want[c] = o[c] * g;
        tol[c] = ((4 * es + (2.0 * p + 32) * U32) * mag[c]) * g + 4 * U32 * fabs(want[c]);
    }
    free(kv);
    free(s);
    free(o);
    free(mag);
}

START_TEST(test_attn_decode)
{
    tu_rng r;
    tu_rng_seed(&r, 17);
    /* n_ctx 37: one split; n_ctx 700 with max_split 3: rows of 700 and 301 keys use 3 and 2
     * splits (the split merge of the flash-decoding order) */
    for (size_t ci = 0; ci < 2 * sizeof k_attn_shapes / sizeof k_attn_shapes[0]; ci++) {
        const size_t si = ci % (sizeof k_attn_shapes / sizeof k_attn_shapes[0]);
        const attn_shape *sh = &k_attn_shapes[si];
        const int long_ctx = ci >= sizeof k_attn_shapes / sizeof k_attn_shapes[0];
        const int32_t B = 4, n_ctx = long_ctx ? 700 : 37, dh = sh->head_dim, Hq = sh->n_head;
        const int32_t width = Hq * dh, max_split = long_ctx ? 3 : 4;
        attn_fixture f;
        attn_fixture_init(&f, sh, B, n_ctx);
        attn_fill_cache(&r, &f);
        /* position 0 (one key), the last position, one in the middle, one out of range */
        f.pos[0] = 0;
        f.pos[1] = n_ctx - 1;
        f.pos[2] = long_ctx ? 300 : 13;
        f.pos[3] = n_ctx;
        const float scale = 1.0f / sqrtf((float)dh);
        float *q = rand_vec(&r, (size_t)B * width, 1.0f), *qg = rand_vec(&r, (size_t)B * 2 * width, 2.0f);
        float *o = xcalloc((size_t)B * width, sizeof *o);
        memra_block_q8_1 *yq = xcalloc((size_t)B * width / 32, sizeof *yq);
        memra_attn_decode_args a = {.q = q, .qg = qg, .positions = f.pos, .k_cache = f.kptr,
                                    .v_cache = f.vptr, .y_q = yq, .o = o, .n_head = Hq,
                                    .n_head_kv = sh->n_head_kv, .head_dim = dh,
                                    .kv_type = sh->kv_type, .n_ctx = n_ctx, .max_split = max_split,
                                    .b = B, .scale = scale};
        ck_assert_int_eq(memra_attn_decode_ref(&a), MEMRA_OK);
        double *want = xcalloc((size_t)width, sizeof *want), *tol = xcalloc((size_t)width, sizeof *tol);
        for (int32_t b = 0; b < B; b++) {
            for (int32_t i = 0; i < Hq; i++) {
                if (f.pos[b] < n_ctx)
                    attn_head64(&f, q + (size_t)b * width + (size_t)i * dh,
                                qg + (size_t)b * 2 * width + (size_t)(2 * i + 1) * dh, b, i, scale,
                                want + (size_t)i * dh, tol + (size_t)i * dh);
                else
                    for (int32_t c = 0; c < dh; c++)
                        want[(size_t)i * dh + c] = tol[(size_t)i * dh + c] = 0;
            }
            check_bound("attn_decode o", o + (size_t)b * width, want, tol, (size_t)width);
            check_q8_1("attn_decode q8_1", yq + (size_t)b * width / 32, want, tol, width);
        }
        free(want);
        free(tol);
        free(q);
        free(qg);
        free(o);
        free(yq);
        attn_fixture_free(&f);
    }
}
END_TEST

/* ===================================== gdn_step ===================================== */

typedef struct gdn_shape {
    int32_t hk, hv, dk, dv, K, map;
} gdn_shape;

static const gdn_shape k_gdn_shapes[] = {
    {1, 1, 32, 32, 4, MEMRA_GDN_HEADS_TILED},   /* single head */
    {2, 4, 16, 16, 4, MEMRA_GDN_HEADS_TILED},   /* Hv = 2 Hk, qwen35 mapping */
    {2, 6, 16, 16, 2, MEMRA_GDN_HEADS_GROUPED}, /* Hv = 3 Hk, qwen3next mapping, K = 2 */
    {1, 2, 16, 48, 3, MEMRA_GDN_HEADS_TILED},   /* dk != dv; dv = 48 straddles q8_1 blocks */
    {2, 4, 128, 128, 4, MEMRA_GDN_HEADS_TILED}, /* Qwen3.5 head size */
};

typedef struct gdn_io {
    float *qkv, *z, *beta, *alpha, *conv_w, *dt_bias, *ssm_a, *norm;
} gdn_io;

/* One f64 step of row b for every value head, from the op's state BEFORE the step (conv0,
 * S0: copies); writes want o [Cv], the new conv state and S in f64. */
static void gdn_step64(const gdn_shape *s, const gdn_io *io, int32_t b, const float *conv0,
                       const float *S0, double *o, double *conv1, double *S1, double *omag,
                       double *smag)
{
    const int32_t Ck = s->hk * s->dk, Cv = s->hv * s->dv, Cc = 2 * Ck + Cv, K = s->K;
    double *u = xcalloc((size_t)Cc, sizeof *u);
    const float *raw = io->qkv + (size_t)b * Cc;
    for (int32_t c = 0; c < Cc; c++) {
        double acc = 0;
        for (int32_t j = 0; j < K - 1; j++)
            acc += (double)io->conv_w[c * K + j] * conv0[c * (K - 1) + j];
        acc += (double)io->conv_w[c * K + K - 1] * raw[c];
        u[c] = silu64(acc);
        for (int32_t j = 0; j < K - 2; j++)
            conv1[c * (K - 1) + j] = conv0[c * (K - 1) + j + 1];
        conv1[c * (K - 1) + K - 2] = raw[c];
    }
    for (int32_t a = 0; a < s->hk; a++)
        for (int part = 0; part < 2; part++) {
            double *x = u + part * Ck + a * s->dk, ss = 0;
            for (int32_t i = 0; i < s->dk; i++)
                ss += x[i] * x[i];
            const double den = fmax(sqrt(ss), 1e-6) * (part == 0 ? sqrt((double)s->dk) : 1.0);
            for (int32_t i = 0; i < s->dk; i++)
                x[i] /= den;
        }
    for (int32_t h = 0; h < s->hv; h++) {
        const int32_t a = s->map == MEMRA_GDN_HEADS_TILED ? h % s->hk : h / (s->hv / s->hk);
        const double *q = u + a * s->dk, *k = u + Ck + a * s->dk, *v = u + 2 * Ck + h * s->dv;
        const double beta = sigmoid64(io->beta[b * s->hv + h]);
        const double x = (double)io->alpha[b * s->hv + h] + io->dt_bias[h];
        const double lam = exp(io->ssm_a[h] * (x > 20 ? x : log1p(exp(x))));
        const size_t base = (size_t)h * s->dv * s->dk;
        double *oh = o + (size_t)h * s->dv, ss = 0;
        for (int32_t j = 0; j < s->dv; j++) {
            double rr = 0, acc = 0, mag = 0, rmag = 0;
            for (int32_t i = 0; i < s->dk; i++) {
                S1[base + (size_t)j * s->dk + i] = lam * S0[base + (size_t)j * s->dk + i];
                rr += S1[base + (size_t)j * s->dk + i] * k[i];
                rmag += fabs(S1[base + (size_t)j * s->dk + i] * k[i]);
            }
            const double delta = beta * (v[j] - rr);
            for (int32_t i = 0; i < s->dk; i++) {
                /* magnitude the f32 update errs against: |lambda S| + |k| |delta| with delta's
                 * own error relative to beta (|v| + sum |S k|) */
                smag[base + (size_t)j * s->dk + i] =
                    fabs(S1[base + (size_t)j * s->dk + i]) + fabs(k[i]) * beta * (fabs(v[j]) + rmag);
                S1[base + (size_t)j * s->dk + i] += k[i] * delta;
                acc += S1[base + (size_t)j * s->dk + i] * q[i];
                mag += fabs(S1[base + (size_t)j * s->dk + i] * q[i]);
            }
            oh[j] = acc;
            omag[h * s->dv + j] = mag;
            ss += acc * acc;
        }
        const double sc = 1.0 / sqrt(ss / s->dv + 1e-6);
        for (int32_t j = 0; j < s->dv; j++) {
            oh[j] = io->norm[j] * (oh[j] * sc) * silu64(io->z[(size_t)b * Cv + h * s->dv + j]);
            omag[h * s->dv + j] *= sc * fabs(io->norm[j] * silu64(io->z[(size_t)b * Cv + h * s->dv + j]));
        }
    }
    free(u);
}

START_TEST(test_gdn_step)
{
    tu_rng r;
    tu_rng_seed(&r, 18);
    for (size_t si = 0; si < sizeof k_gdn_shapes / sizeof k_gdn_shapes[0]; si++) {
        const gdn_shape *s = &k_gdn_shapes[si];
        const int32_t B = si % 2 ? 3 : 1, Ck = s->hk * s->dk, Cv = s->hv * s->dv;
        const int32_t Cc = 2 * Ck + Cv, K = s->K;
        const size_t conv_n = (size_t)Cc * (K - 1), ssm_n = (size_t)s->hv * s->dv * s->dk;
        gdn_io io = {.conv_w = rand_vec(&r, (size_t)Cc * K, 0.5f), .dt_bias = rand_vec(&r, (size_t)s->hv, 1.0f),
                     .ssm_a = rand_vec(&r, (size_t)s->hv, 1.0f), .norm = rand_vec(&r, (size_t)s->dv, 1.0f)};
        for (int32_t h = 0; h < s->hv; h++)
            io.ssm_a[h] = -fabsf(io.ssm_a[h]); /* -exp(A_log) < 0 */
        float *conv = xcalloc((size_t)B * conv_n, sizeof *conv), *ssm = xcalloc((size_t)B * ssm_n, sizeof *ssm);
        uint64_t cp[16], sp[16];
        for (int32_t b = 0; b < B; b++) {
            cp[b] = (uint64_t)(uintptr_t)(conv + (size_t)b * conv_n);
            sp[b] = (uint64_t)(uintptr_t)(ssm + (size_t)b * ssm_n);
        }
        float *o = xcalloc((size_t)B * Cv, sizeof *o);
        memra_block_q8_1 *yq = xcalloc((size_t)B * Cv / 32, sizeof *yq);
        double *want = xcalloc((size_t)Cv, sizeof *want), *tol = xcalloc((size_t)Cv, sizeof *tol);
        double *omag = xcalloc((size_t)Cv, sizeof *omag), *conv1 = xcalloc(conv_n, sizeof *conv1);
        double *S1 = xcalloc(ssm_n, sizeof *S1), *stol = xcalloc(ssm_n, sizeof *stol);
        double *smag = xcalloc(ssm_n, sizeof *smag);
        float *conv0 = xcalloc(conv_n, sizeof *conv0), *S0 = xcalloc(ssm_n, sizeof *S0);
        for (int step = 0; step < 4; step++) { /* state carried from zero over 4 tokens */
            io.qkv = rand_vec(&r, (size_t)B * Cc, 1.0f);
            io.z = rand_vec(&r, (size_t)B * Cv, 1.0f);
            io.beta = rand_vec(&r, (size_t)B * s->hv, 1.0f);
            io.alpha = rand_vec(&r, (size_t)B * s->hv, 1.0f);
            float *conv_before = xcalloc((size_t)B * conv_n, sizeof(float));
            float *ssm_before = xcalloc((size_t)B * ssm_n, sizeof(float));
            memcpy(conv_before, conv, sizeof(float) * (size_t)B * conv_n);
            memcpy(ssm_before, ssm, sizeof(float) * (size_t)B * ssm_n);
            memra_gdn_step_args a = {.qkv = io.qkv, .z = io.z, .beta = io.beta, .alpha = io.alpha,
                                     .conv_w = io.conv_w, .dt_bias = io.dt_bias, .ssm_a = io.ssm_a,
                                     .norm_w = io.norm, .conv_state = cp, .ssm_state = sp,
                                     .y_q = yq, .o = o, .n_k_head = s->hk, .n_v_head = s->hv,
                                     .head_k_dim = s->dk, .head_v_dim = s->dv, .conv_k = K,
                                     .head_map = s->map, .b = B, .eps = 1e-6f};
            ck_assert_int_eq(memra_gdn_step_ref(&a), MEMRA_OK);
            for (int32_t b = 0; b < B; b++) {
                memcpy(conv0, conv_before + (size_t)b * conv_n, sizeof(float) * conv_n);
                memcpy(S0, ssm_before + (size_t)b * ssm_n, sizeof(float) * ssm_n);
                gdn_step64(s, &io, b, conv0, S0, want, conv1, S1, omag, smag);
                /* f32 chain per output: conv (K terms) -> silu -> L2 (dk terms) -> delta rule
                 * (two dk-term sums) -> RMS over dv -> two products. Each sum of n terms errs
                 * by n u of its magnitude in any order (so in the canonical lane/butterfly
                 * order of gdn_step.h too); the L2/RMS scales carry their sums' errors as
                 * relative ones: 8 (dk + dv + K + 16) u of sum_i |S q| scaled like o. */
                const double rel = 8.0 * (s->dk + s->dv + K + 16) * U32;
                double rowmag = 0;
                for (int32_t c = 0; c < Cv; c++)
                    rowmag = fmax(rowmag, omag[c]);
                for (int32_t c = 0; c < Cv; c++)
                    tol[c] = rel * (omag[c] + 1e-3 * rowmag) + 4 * U32 * fabs(want[c]);
                check_bound("gdn o", o + (size_t)b * Cv, want, tol, (size_t)Cv);
                check_q8_1("gdn q8_1", yq + (size_t)b * Cv / 32, want, tol, Cv);
                /* conv state: a pure shift of raw values, exact */
                float *c1 = xcalloc(conv_n, sizeof *c1);
                for (size_t x = 0; x < conv_n; x++)
                    c1[x] = (float)conv1[x];
                ck_assert(memcmp(c1, conv + (size_t)b * conv_n, sizeof(float) * conv_n) == 0);
                free(c1);
                for (size_t x = 0; x < ssm_n; x++)
                    stol[x] = 8.0 * (s->dk + 16) * U32 * smag[x];
                check_bound("gdn ssm state", ssm + (size_t)b * ssm_n, S1, stol, ssm_n);
            }
            free(conv_before);
            free(ssm_before);
            free(io.qkv);
            free(io.z);
            free(io.beta);
            free(io.alpha);
        }
        free(io.conv_w);
        free(io.dt_bias);
        free(io.ssm_a);
        free(io.norm);
        free(conv);
        free(ssm);
        free(o);
        free(yq);
        free(want);
        free(tol);
        free(omag);
        free(conv1);
        free(S1);
        free(stol);
        free(smag);
        free(conv0);
        free(S0);
    }
}
END_TEST

/* Bit-identical f32 arrays; names the first differing index with both values and bits. */
static void gdn_same_f32(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, got + i, 4);
        memcpy(&y, want + i, 4);
        ck_assert_msg(x == y, "%s: element %zu of %zu: %.9g (0x%08x) vs %.9g (0x%08x)", what, i, n,
                      (double)got[i], x, (double)want[i], y);
    }
}

/* The canonical order itself (gdn_canon.h), pinned by one sum whose value depends on it:
 * terms 2^24 at i = 0 (lane 0) and 1 at i = 4 l (lane l = 1..31). Sequentially every + 1 is a
 * tie that rounds back to 2^24; the butterfly pairs lane 0 with 1, then with 2, 4, 8, 16
 * (sums of ones), landing on 2^24 + 30 (exact: 2^24 + 31). */
START_TEST(test_gdn_canon_order)
{
    float x[128] = {0}, y[128];
    for (int i = 0; i < 128; i++)
        y[i] = 1.0f;
    x[0] = 16777216.0f;
    for (int l = 1; l < 32; l++)
        x[4 * l] = 1.0f;
    ck_assert_float_eq(memra_gdn_dot(x, y, 128), 16777246.0f);
    float seq = 0.0f;
    for (int i = 0; i < 128; i++)
        seq += x[i] * y[i];
    ck_assert_float_eq(seq, 16777216.0f); /* the order matters for this sum */
    /* dv layout (lane j % 32): the same terms moved to j = 0 and j = l */
    float w[64] = {0};
    w[0] = 4096.0f; /* 4096^2 = 2^24 */
    for (int l = 1; l < 32; l++)
        w[l] = 1.0f;
    ck_assert(memra_gdn_ss_dv(w, 64) == 16777247.0); /* f64: exact whatever the order */
}
END_TEST

/* The reference model's composition (runtime/refmodel.c block_gdn: whole-row conv, silu, per
 * key head L2 norm and q scale, per value head beta / decay / delta rule / gated norm, one
 * q8_1 quantization of the row) written with the gdn_canon.h primitives is bit-identical to
 * memra_gdn_step_ref: o, y_q and both states, over 3 steps and two rows. This is the recipe
 * refmodel.c is to follow. */
static void gdn_compose_row(const gdn_shape *s, const gdn_io *io, int32_t b, float *conv, float *S,
                            float *o, memra_block_q8_1 *yq)
{
    const int32_t Ck = s->hk * s->dk, Cv = s->hv * s->dv, Cc = 2 * Ck + Cv, K = s->K;
    float *u = xcalloc((size_t)Cc, sizeof *u);
    for (int32_t c = 0; c < Cc; c++) { /* memra_ref_conv_step, then silu */
        float *w = conv + (size_t)c * (K - 1);
        const float *t = io->conv_w + (size_t)c * K;
        float acc = 0.0f;
        for (int32_t j = 0; j < K - 1; j++)
            acc += t[j] * w[j];
        acc += t[K - 1] * io->qkv[(size_t)b * Cc + c];
        for (int32_t j = 0; j + 1 < K - 1; j++)
            w[j] = w[j + 1];
        w[K - 2] = io->qkv[(size_t)b * Cc + c];
        u[c] = memra_x_siluf(acc);
    }
    const float q_scale = 1.0f / sqrtf((float)s->dk);
    for (int32_t a = 0; a < s->hk; a++) {
        float *qa = u + a * s->dk, *ka = u + Ck + a * s->dk;
        memra_gdn_l2_norm(qa, qa, s->dk, 1e-6f);
        memra_gdn_l2_norm(ka, ka, s->dk, 1e-6f);
        for (int32_t i = 0; i < s->dk; i++)
            qa[i] *= q_scale;
    }
    for (int32_t h = 0; h < s->hv; h++) {
        const int32_t a = s->map == MEMRA_GDN_HEADS_TILED ? h % s->hk : h / (s->hv / s->hk);
        const float beta = memra_x_sigmoidf(io->beta[b * s->hv + h]);
        const float g = io->ssm_a[h] * memra_x_softplusf(io->alpha[b * s->hv + h] + io->dt_bias[h]);
        memra_gdn_delta_rule(S + (size_t)h * s->dv * s->dk, o + h * s->dv, u + a * s->dk, u + Ck + a * s->dk,
                             u + 2 * Ck + h * s->dv, beta, memra_x_expf(g), s->dk, s->dv);
        memra_gdn_gated_norm(o + h * s->dv, io->z + (size_t)b * Cv + h * s->dv, io->norm, s->dv, 1e-6f);
    }
    memra_quantize_q8_1(o, yq, Cv);
    free(u);
}

START_TEST(test_gdn_canon_compose)
{
    static const gdn_shape shapes[] = {
        {2, 4, 128, 128, 4, MEMRA_GDN_HEADS_TILED}, {2, 6, 16, 16, 2, MEMRA_GDN_HEADS_GROUPED},
        {1, 2, 160, 48, 3, MEMRA_GDN_HEADS_TILED}, /* lanes 0..7 hold two groups of 4 */
    };
    tu_rng r;
    tu_rng_seed(&r, 0x6dc);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const gdn_shape *s = &shapes[si];
        const int32_t B = 2, Cv = s->hv * s->dv, Cc = 2 * s->hk * s->dk + Cv;
        const size_t conv_n = (size_t)Cc * (s->K - 1), ssm_n = (size_t)s->hv * s->dv * s->dk;
        gdn_io io = {.conv_w = rand_vec(&r, (size_t)Cc * s->K, 0.5f), .dt_bias = rand_vec(&r, (size_t)s->hv, 1.0f),
                     .ssm_a = rand_vec(&r, (size_t)s->hv, 1.0f), .norm = rand_vec(&r, (size_t)s->dv, 1.0f)};
        for (int32_t h = 0; h < s->hv; h++)
            io.ssm_a[h] = -fabsf(io.ssm_a[h]);
        float *conv = rand_vec(&r, (size_t)B * conv_n, 1.0f), *ssm = rand_vec(&r, (size_t)B * ssm_n, 0.3f);
        float *conv2 = xcalloc((size_t)B * conv_n, sizeof *conv2), *ssm2 = xcalloc((size_t)B * ssm_n, sizeof *ssm2);
        memcpy(conv2, conv, sizeof(float) * (size_t)B * conv_n);
        memcpy(ssm2, ssm, sizeof(float) * (size_t)B * ssm_n);
        uint64_t cp[2], sp[2];
        for (int32_t b = 0; b < B; b++) {
            cp[b] = (uint64_t)(uintptr_t)(conv + (size_t)b * conv_n);
            sp[b] = (uint64_t)(uintptr_t)(ssm + (size_t)b * ssm_n);
        }
        float *o = xcalloc((size_t)B * Cv, sizeof *o), *o2 = xcalloc((size_t)Cv, sizeof *o2);
        memra_block_q8_1 *yq = xcalloc((size_t)B * Cv / 32, sizeof *yq), *yq2 = xcalloc((size_t)Cv / 32, sizeof *yq2);
        for (int step = 0; step < 3; step++) {
            io.qkv = rand_vec(&r, (size_t)B * Cc, 1.0f);
            io.z = rand_vec(&r, (size_t)B * Cv, 1.0f);
            io.beta = rand_vec(&r, (size_t)B * s->hv, 1.0f);
            io.alpha = rand_vec(&r, (size_t)B * s->hv, 1.0f);
            memra_gdn_step_args a = {.qkv = io.qkv, .z = io.z, .beta = io.beta, .alpha = io.alpha,
                                     .conv_w = io.conv_w, .dt_bias = io.dt_bias, .ssm_a = io.ssm_a,
                                     .norm_w = io.norm, .conv_state = cp, .ssm_state = sp, .y_q = yq, .o = o,
                                     .n_k_head = s->hk, .n_v_head = s->hv, .head_k_dim = s->dk,
                                     .head_v_dim = s->dv, .conv_k = s->K, .head_map = s->map, .b = B,
                                     .eps = 1e-6f};
            ck_assert_int_eq(memra_gdn_step_ref(&a), MEMRA_OK);
            for (int32_t b = 0; b < B; b++) {
                gdn_compose_row(s, &io, b, conv2 + (size_t)b * conv_n, ssm2 + (size_t)b * ssm_n, o2, yq2);
                gdn_same_f32("gdn compose o", o + (size_t)b * Cv, o2, (size_t)Cv);
                ck_assert(memcmp(yq + (size_t)b * Cv / 32, yq2, sizeof *yq2 * (size_t)Cv / 32) == 0);
            }
            gdn_same_f32("gdn compose ssm state", ssm, ssm2, (size_t)B * ssm_n);
            gdn_same_f32("gdn compose conv state", conv, conv2, (size_t)B * conv_n);
            free(io.qkv);
            free(io.z);
            free(io.beta);
            free(io.alpha);
        }
        free(io.conv_w);
        free(io.dt_bias);
        free(io.ssm_a);
        free(io.norm);
        free(conv);
        free(ssm);
        free(conv2);
        free(ssm2);
        free(o);
        free(o2);
        free(yq);
        free(yq2);
    }
}
END_TEST

/* ======================================= MoE ======================================== */

START_TEST(test_moe_route)
{
    static const struct { int32_t E, k; } cases[] = {{1, 1}, {8, 2}, {33, 5}, {256, 8}, {1000, 16}};
    tu_rng r;
    tu_rng_seed(&r, 19);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t E = cases[c].E, k = cases[c].k, B = 3;
        float *l = rand_vec(&r, (size_t)B * E, 2.0f);
        if (E >= 8) { /* row 1: ties, equal logits must go to the lower index first */
            for (int32_t e = 0; e < E; e++)
                l[E + e] = (float)(e % 3);
        }
        int32_t *ids = xcalloc((size_t)B * k, sizeof *ids);
        float *w = xcalloc((size_t)B * k, sizeof *w);
        memra_moe_route_args a = {.logits = l, .ids = ids, .weights = w, .n_expert = E, .n_used = k, .b = B};
        ck_assert_int_eq(memra_moe_route_ref(&a), MEMRA_OK);
        for (int32_t b = 0; b < B; b++) {
            const float *lb = l + (size_t)b * E;
            double mx = -INFINITY, z = 0, sel = 0;
            for (int32_t e = 0; e < E; e++)
                mx = fmax(mx, lb[e]);
            for (int32_t e = 0; e < E; e++)
                z += exp(lb[e] - mx);
            int32_t want_ids[64];
            char *taken = xcalloc((size_t)E, 1);
            for (int32_t i = 0; i < k; i++) { /* f64 ranking: larger logit, then lower index */
                int32_t best = -1;
                for (int32_t e = 0; e < E; e++)
                    if (!taken[e] && (best < 0 || lb[e] > lb[best]))
                        best = e;
                taken[best] = 1;
                want_ids[i] = best;
                sel += exp(lb[best] - mx) / z;
            }
            free(taken);
            ck_assert_msg(memcmp(ids + (size_t)b * k, want_ids, sizeof(int32_t) * (size_t)k) == 0,
                          "case %zu row %d: expert ids differ", c, b);
            double want[64], tol[64];
            for (int32_t i = 0; i < k; i++) {
                want[i] = exp(lb[want_ids[i]] - mx) / z / fmax(sel, 6.103515625e-5);
                /* memra_x_expf (u/2), an E-term f32 sum of positive terms in the kernel's
                 * tree order (< E u, any order), 1/Z, product, a k-term sum, a division:
                 * (E + k + 8) u relative, doubled for margin */
                tol[i] = 2.0 * (E + k + 8) * U32 * fabs(want[i]);
            }
            check_bound("moe_route weights", w + (size_t)b * k, want, tol, (size_t)k);
        }
        free(l);
        free(ids);
        free(w);
    }
}
END_TEST

START_TEST(test_mmvq_moe)
{
    tu_rng r;
    tu_rng_seed(&r, 20);
    const int32_t E = 5, U = 3, K = 256, B = 4;
    const int32_t n_out[2] = {32, 7};
    const memra_qtype ts[2] = {MEMRA_QT_Q4_K, MEMRA_QT_Q8_0};
    test_weight w[2];
    float *x = rand_vec(&r, (size_t)B * K, 1.0f), *y[2], scale[2][5];
    memra_block_q8_1 *aq = xcalloc((size_t)B * K / 32, sizeof *aq);
    memra_quantize_q8_1(x, aq, (int64_t)B * K);
    int32_t ids[4 * 3] = {0, 4, 2, 1, 1, 3, 4, 3, 2, 9, 0, -1}; /* row 3: two bad ids */
    memra_mmvq_moe_args a = {.a = aq, .ids = ids, .k = K, .n_used = U, .n_expert = E, .b = B, .n_w = 2};
    for (int i = 0; i < 2; i++) {
        weight_make(&r, &w[i], ts[i], K, n_out[i] * E); /* E experts stacked {K, n, E} */
        y[i] = rand_vec(&r, (size_t)B * U * n_out[i], 1.0f);
        for (int e = 0; e < E; e++)
            scale[i][e] = 0.25f * (float)(e + 1);
        a.out[i] = (memra_mmvq_moe_out){.w = w[i].raw, .scale = i ? scale[i] : NULL, .y = y[i],
                                        .qtype = ts[i], .n_out = n_out[i],
                                        .row_bytes = w[i].row_bytes,
                                        .expert_bytes = w[i].row_bytes * (uint64_t)n_out[i]};
    }
    ck_assert_int_eq(memra_mmvq_moe_ref(&a), MEMRA_OK);
    float *av = xcalloc((size_t)K, sizeof *av);
    double *qt = xcalloc((size_t)K, sizeof *qt), want[32], tol[32];
    for (int i = 0; i < 2; i++)
        for (int32_t b = 0; b < B; b++) {
            q8_1_values(aq + (size_t)b * K / 32, K, av, qt);
            for (int32_t k = 0; k < U; k++) {
                const int32_t e = ids[b * U + k];
                for (int32_t o = 0; o < n_out[i]; o++) {
                    if (e < 0 || e >= E) {
                        want[o] = tol[o] = 0;
                        continue;
                    }
                    double d, t, sc = i ? scale[i][e] : 1.0;
                    weight_dot(&w[i], e * n_out[i] + o, av, &d, &t);
                    want[o] = sc * d;
                    tol[o] = sc * t + 2 * U32 * fabs(want[o]);
                }
                check_bound("mmvq_moe", y[i] + ((size_t)b * U + k) * n_out[i], want, tol, (size_t)n_out[i]);
            }
        }
    for (int i = 0; i < 2; i++) {
        weight_free(&w[i]);
        free(y[i]);
    }
    free(x);
    free(aq);
    free(av);
    free(qt);
}
END_TEST

START_TEST(test_moe_down)
{
    tu_rng r;
    tu_rng_seed(&r, 21);
    const int32_t E = 4, U = 2, K = 64, KSH = 96, N = 40, B = 3;
    test_weight w, sh;
    weight_make(&r, &w, MEMRA_QT_Q8_0, K, N * E);
    weight_make(&r, &sh, MEMRA_QT_F16, KSH, N);
    float *xa = rand_vec(&r, (size_t)B * U * K, 1.0f), *xs = rand_vec(&r, (size_t)B * KSH, 1.0f);
    memra_block_q8_1 *aq = xcalloc((size_t)B * U * K / 32, sizeof *aq), *sq = xcalloc((size_t)B * KSH / 32, sizeof *sq);
    memra_quantize_q8_1(xa, aq, (int64_t)B * U * K);
    memra_quantize_q8_1(xs, sq, (int64_t)B * KSH);
    int32_t ids[6] = {3, 0, 1, 2, 2, 1};
    float wts[6] = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f}, gate[3] = {-1.0f, 0.0f, 2.5f};
    float scale[4] = {1.0f, 0.5f, 2.0f, 0.25f}, sh_scale = 0.75f;
    for (int with_shared = 0; with_shared < 2; with_shared++) {
        float *x = rand_vec(&r, (size_t)B * N, 1.0f), *x0 = xcalloc((size_t)B * N, sizeof *x0);
        memcpy(x0, x, sizeof(float) * (size_t)B * N);
        memra_moe_down_args a = {.a = aq, .ids = ids, .wts = wts, .w = w.raw, .scale = scale, .x = x,
                                 .row_bytes = w.row_bytes, .expert_bytes = w.row_bytes * (uint64_t)N,
                                 .qtype = MEMRA_QT_Q8_0, .k = K, .n = N, .n_used = U, .n_expert = E, .b = B};
        if (with_shared) {
            a.sh_a = sq;
            a.sh_w = sh.raw;
            a.sh_scale = &sh_scale;
            a.sh_gate = gate;
            a.sh_row_bytes = sh.row_bytes;
            a.sh_qtype = MEMRA_QT_F16;
            a.k_sh = KSH;
        }
        ck_assert_int_eq(memra_moe_down_ref(&a), MEMRA_OK);
        float *av = xcalloc((size_t)KSH, sizeof *av);
        double *qt = xcalloc((size_t)KSH, sizeof *qt), want[40], tol[40];
        for (int32_t b = 0; b < B; b++) {
            for (int32_t o = 0; o < N; o++) {
                want[o] = x0[b * N + o];
                tol[o] = 0;
            }
            for (int32_t k = 0; k < U; k++) {
                const int32_t e = ids[b * U + k];
                q8_1_values(aq + ((size_t)b * U + k) * K / 32, K, av, qt);
                for (int32_t o = 0; o < N; o++) {
                    double d, t;
                    weight_dot(&w, e * N + o, av, &d, &t);
                    want[o] += (double)wts[b * U + k] * scale[e] * d;
                    tol[o] += wts[b * U + k] * scale[e] * t + 4 * U32 * fabs(wts[b * U + k] * scale[e] * d);
                }
            }
            if (with_shared) {
                q8_1_values(sq + (size_t)b * KSH / 32, KSH, av, qt);
                const double g = sigmoid64(gate[b]);
                for (int32_t o = 0; o < N; o++) {
                    double d, t;
                    weight_dot(&sh, o, av, &d, &t);
                    want[o] += g * sh_scale * d;
                    tol[o] += g * sh_scale * t + 6 * U32 * fabs(g * sh_scale * d);
                }
            }
            for (int32_t o = 0; o < N; o++)
                tol[o] += 4 * U32 * (fabs(want[o]) + fabs(x0[b * N + o])); /* the final adds */
            check_bound("moe_down", x + (size_t)b * N, want, tol, (size_t)N);
        }
        free(av);
        free(qt);
        free(x);
        free(x0);
    }
    weight_free(&w);
    weight_free(&sh);
    free(xa);
    free(xs);
    free(aq);
    free(sq);
}
END_TEST

/* ====================================== sample ====================================== */

/* The f64 implementation of the rule in sample.h: sort-based, probabilities in f64. */
static int cmp_desc(const void *pa, const void *pb)
{
    const double *a = pa, *b = pb; /* {value, index} */
    if (a[0] != b[0])
        return a[0] > b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : 1;
}

static int32_t sample64(const float *l, int32_t n, const memra_sample_params *p)
{
    double (*v)[2] = xcalloc((size_t)n, sizeof *v);
    for (int32_t i = 0; i < n; i++) {
        v[i][0] = l[i];
        v[i][1] = i;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_desc);
    if (!(p->temperature > 0) || p->top_k == 1) {
        int32_t t = (int32_t)v[0][1];
        free(v);
        return t;
    }
    int32_t nc = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    while (nc < n && v[nc][0] == v[nc - 1][0]) /* boundary ties are kept */
        nc++;
    double z = 0;
    for (int32_t i = 0; i < nc; i++) {
        v[i][0] = exp((v[i][0] - l[(int32_t)v[0][1]]) / p->temperature);
        z += v[i][0];
    }
    int32_t nk = nc;
    if (p->top_p > 0 && p->top_p < 1) {
        double cum = 0;
        for (nk = 0; nk < nc && cum < p->top_p * z; nk++)
            cum += v[nk][0];
        while (nk < nc && v[nk][0] == v[nk - 1][0])
            nk++;
    }
    char *keep = xcalloc((size_t)n, 1);
    double *pr = xcalloc((size_t)n, sizeof *pr), zk = 0;
    for (int32_t i = 0; i < nk; i++) {
        keep[(int32_t)v[i][1]] = 1;
        pr[(int32_t)v[i][1]] = v[i][0];
        zk += v[i][0];
    }
    const double target = memra_rng_uniform(p->seed, p->step) * zk;
    double cum = 0;
    int32_t tok = -1;
    for (int32_t i = 0; i < n && tok < 0; i++)
        if (keep[i] && (cum += pr[i]) > target)
            tok = i;
    free(v);
    free(keep);
    free(pr);
    return tok;
}

typedef int32_t (*sample_oracle)(const float *l, int32_t n, const memra_sample_params *p);

/* The reference's token equals the oracle's for every params row and steps 0..steps-1 of the
 * seed `seed` (the step varies the draw). */
static void sample_sweep(const float *l, int32_t V, const memra_sample_params *ps, size_t n_ps,
                         uint64_t seed, uint64_t steps, sample_oracle oracle)
{
    for (size_t pi = 0; pi < n_ps; pi++)
        for (uint64_t step = 0; step < steps; step++) {
            memra_sample_params p = ps[pi];
            p.seed = seed;
            p.step = step;
            const int32_t got = memra_sample_row_ref(l, V, &p), want = oracle(l, V, &p);
            ck_assert_msg(got == want, "V %d params %zu step %llu: got %d want %d", V, pi,
                          (unsigned long long)step, got, want);
        }
}

START_TEST(test_sample_rule)
{
    static const memra_sample_params ps[] = {
        {.temperature = 0.0f}, {.temperature = 1.0f}, {.temperature = 0.7f, .top_k = 5},
        {.temperature = 1.3f, .top_p = 0.9f}, {.temperature = 0.8f, .top_k = 20, .top_p = 0.5f},
        {.temperature = 1.0f, .top_k = 1}, {.temperature = 2.0f, .top_k = 3, .top_p = 0.99f},
    };
    static const int32_t vs[] = {1, 2, 7, 100, 1000};
    tu_rng r;
    tu_rng_seed(&r, 22);
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        const int32_t V = vs[vi];
        float *l = rand_vec(&r, (size_t)V, 2.0f);
        sample_sweep(l, V, ps, sizeof ps / sizeof ps[0], 1000 + vi, 40, sample64);
        free(l);
    }
}
END_TEST

/* sample.h's integer rule written out literally (u128 masses, both thresholds by bisection
 * over all uint32 values, the draw as a linear walk): the reference's radix select must give
 * the same tokens. */
__extension__ typedef unsigned __int128 t_u128;

static t_u128 t_fx(float p)
{
    uint32_t b;
    memcpy(&b, &p, 4);
    const uint32_t E = b >> 23;
    const uint64_t m = (b & 0x7FFFFFu) | (E ? 0x800000u : 0u);
    const int sh = (int)(E ? E : 1) - 50;
    return sh >= 0 ? (t_u128)m << sh : (t_u128)(m >> -sh);
}

static int32_t sample_int_rule(const float *l, int32_t n, const memra_sample_params *p)
{
    int32_t best = 0, nok = 0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(l[i]) && (nok++ == 0 || l[i] > l[best]))
            best = i;
    if (!(p->temperature > 0.0f) || p->top_k == 1 || nok == 0 || isinf(l[best]))
        return best;
    /* C: the logits >= t_k, t_k found by walking down the distinct values from the top until
     * at least top_k logits are >= it (or all non-NaN ones when there is no cut) */
    float tk = -INFINITY;
    if (p->top_k > 0 && p->top_k < nok) {
        tk = l[best];
        for (;;) {
            int32_t c = 0;
            float nx = -INFINITY; /* the next smaller logit value */
            for (int32_t i = 0; i < n; i++) {
                c += !isnan(l[i]) && l[i] >= tk;
                if (!isnan(l[i]) && l[i] < tk && l[i] > nx)
                    nx = l[i];
            }
            if (c >= p->top_k)
                break;
            tk = nx;
        }
    }
    float *pr = xcalloc((size_t)n, sizeof *pr); /* p_i, or -1: not in C */
    t_u128 z = 0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(l[i]) || l[i] < tk) {
            pr[i] = -1.0f;
            continue;
        }
        pr[i] = memra_x_expf((l[i] - l[best]) / p->temperature);
        z += t_fx(pr[i]);
    }
    uint32_t pmin = 0;
    t_u128 total = z;
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        const double zd = (double)(uint64_t)(z >> 64) * 18446744073709551616.0 + (double)(uint64_t)z;
        const double td = (double)p->top_p * zd, two64 = 18446744073709551616.0;
        const uint64_t thi = (uint64_t)(td / two64); /* floor(td), exactly, in two halves */
        t_u128 target = ((t_u128)thi << 64) | (uint64_t)(td - (double)thi * two64);
        if (!target)
            target = 1;
        uint64_t lo = 0, hi = 0x100000000ull; /* mass(lo) >= target > mass(hi) */
        while (hi - lo > 1) {
            const uint64_t mid = (lo + hi) / 2;
            t_u128 m = 0;
            for (int32_t i = 0; i < n; i++) {
                uint32_t b;
                memcpy(&b, &pr[i], 4);
                if (pr[i] >= 0.0f && b >= mid)
                    m += t_fx(pr[i]);
            }
            if (m >= target)
                lo = mid;
            else
                hi = mid;
        }
        pmin = (uint32_t)lo;
        total = 0;
        for (int32_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &pr[i], 4);
            if (pr[i] >= 0.0f && b >= pmin)
                total += t_fx(pr[i]);
        }
    }
    const uint32_t u24 = (uint32_t)(memra_rng_uniform(p->seed, p->step) * 16777216.0f);
    const t_u128 target = total * u24 >> 24; /* total < 2^124: no overflow */
    t_u128 cum = 0;
    int32_t tok = -1;
    for (int32_t i = 0; i < n && tok < 0; i++) {
        uint32_t b;
        memcpy(&b, &pr[i], 4);
        if (pr[i] >= 0.0f && b >= pmin && (cum += t_fx(pr[i])) > target)
            tok = i;
    }
    free(pr);
    return tok;
}

START_TEST(test_sample_integer_rule)
{
    static const memra_sample_params ps[] = {
        {.temperature = 1.0f}, {.temperature = 0.7f, .top_k = 5}, {.temperature = 1.3f, .top_p = 0.9f},
        {.temperature = 0.8f, .top_k = 20, .top_p = 0.5f}, {.temperature = 2.0f, .top_k = 3, .top_p = 0.99f},
        {.temperature = 0.05f, .top_p = 0.999f}, {.temperature = 1.0f, .top_p = 1e-6f},
    };
    static const int32_t vs[] = {2, 7, 100, 3000};
    tu_rng r;
    tu_rng_seed(&r, 0x1A7E);
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        const int32_t V = vs[vi];
        float *l = rand_vec(&r, (size_t)V, 3.0f);
        for (int32_t i = 0; i < V; i += 5)
            l[i] = l[(i * 7) % V]; /* ties */
        if (V > 10)
            l[3] = NAN;
        sample_sweep(l, V, ps, sizeof ps / sizeof ps[0], 77 + vi, 12, sample_int_rule);
        free(l);
    }
}
END_TEST

START_TEST(test_sample_greedy_edges)
{
    const memra_sample_params g = {.temperature = 0.0f};
    const float ties[5] = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
    ck_assert_int_eq(memra_sample_row_ref(ties, 5, &g), 1); /* lowest index wins ties */
    const float nan_first[3] = {NAN, -1.0f, -2.0f};
    ck_assert_int_eq(memra_sample_row_ref(nan_first, 3, &g), 1); /* NaN never chosen */
    const float all_nan[2] = {NAN, NAN};
    ck_assert_int_eq(memra_sample_row_ref(all_nan, 2, &g), 0);
    const memra_sample_params t = {.temperature = 1.0f, .seed = 3};
    const float inf[3] = {0.0f, INFINITY, 5.0f};
    ck_assert_int_eq(memra_sample_row_ref(inf, 3, &t), 1); /* +inf: greedy */
    const float minus_inf[3] = {-INFINITY, 0.0f, -INFINITY};
    for (uint64_t s = 0; s < 16; s++) {
        memra_sample_params q = t;
        q.step = s;
        ck_assert_int_eq(memra_sample_row_ref(minus_inf, 3, &q), 1); /* p = 0 is never drawn */
    }
}
END_TEST

START_TEST(test_sample_distribution)
{
    /* logits ln(4), ln(3), ln(2), ln(1): probabilities 0.4 0.3 0.2 0.1 */
    const float l[4] = {logf(4.0f), logf(3.0f), logf(2.0f), 0.0f};
    int cnt[4] = {0}, cnt_k2[4] = {0}, cnt_p[4] = {0};
    const int n = 4000;
    for (int s = 0; s < n; s++) {
        memra_sample_params p = {.temperature = 1.0f, .seed = 99, .step = (uint64_t)s};
        cnt[memra_sample_row_ref(l, 4, &p)]++;
        p.top_k = 2;
        cnt_k2[memra_sample_row_ref(l, 4, &p)]++;
        p.top_k = 0;
        p.top_p = 0.65f; /* 0.4 + 0.3 = 0.7 is the smallest prefix >= 0.65 */
        cnt_p[memra_sample_row_ref(l, 4, &p)]++;
    }
    const double pr[4] = {0.4, 0.3, 0.2, 0.1};
    for (int i = 0; i < 4; i++) {
        /* binomial sd sqrt(p(1-p)/n) <= 0.0079 at n = 4000: 4 sd = 0.032 */
        ck_assert_msg(fabs(cnt[i] / (double)n - pr[i]) < 0.032, "token %d freq %g", i, cnt[i] / (double)n);
    }
    ck_assert_int_eq(cnt_k2[2] + cnt_k2[3], 0);
    ck_assert_int_eq(cnt_p[2] + cnt_p[3], 0);
    ck_assert_msg(fabs(cnt_k2[0] / (double)n - 4.0 / 7) < 0.032, "top-k renormalised %g", cnt_k2[0] / (double)n);
    ck_assert_msg(fabs(cnt_p[0] / (double)n - 4.0 / 7) < 0.032, "top-p renormalised %g", cnt_p[0] / (double)n);
}
END_TEST

START_TEST(test_sample_batch_independent)
{
    /* 16 rows hold the same logits and the same params in a rotated order: every row's token
     * equals the single-row result for its params (the draw is a function of seed and step). */
    tu_rng r;
    tu_rng_seed(&r, 23);
    const int32_t V = 300, B = 16;
    float *row = rand_vec(&r, (size_t)V, 2.0f), *l = xcalloc((size_t)B * V, sizeof *l);
    memra_sample_params p[16];
    int32_t out[16];
    for (int32_t b = 0; b < B; b++) {
        memcpy(l + (size_t)b * V, row, sizeof(float) * (size_t)V);
        p[b] = (memra_sample_params){.temperature = 0.9f, .top_k = 40, .top_p = 0.95f,
                                     .seed = (uint64_t)(b % 4), .step = (uint64_t)(b / 4)};
    }
    for (int32_t width = 1; width <= B; width *= 2) {
        memra_sample_args a = {.logits = l, .params = p, .out_tokens = out, .n_vocab = V, .b = width};
        ck_assert_int_eq(memra_sample_ref(&a), MEMRA_OK);
        for (int32_t b = 0; b < width; b++)
            ck_assert_int_eq(out[b], memra_sample_row_ref(row, V, &p[b]));
    }
    free(row);
    free(l);
}
END_TEST

/* ============================ exactness across b, bad args ========================== */

START_TEST(test_rows_independent_of_b)
{
    /* Row 2 of a 5-wide gdn_step + attn_decode call is bit-identical to the same row run
     * alone (b = 1): the property the backend's isolation gate rests on, op by op. */
    tu_rng r;
    tu_rng_seed(&r, 24);
    const gdn_shape *s = &k_gdn_shapes[1];
    const int32_t B = 5, Ck = s->hk * s->dk, Cv = s->hv * s->dv, Cc = 2 * Ck + Cv;
    const size_t conv_n = (size_t)Cc * (s->K - 1), ssm_n = (size_t)s->hv * s->dv * s->dk;
    float *qkv = rand_vec(&r, (size_t)B * Cc, 1.0f), *z = rand_vec(&r, (size_t)B * Cv, 1.0f);
    float *be = rand_vec(&r, (size_t)B * s->hv, 1.0f), *al = rand_vec(&r, (size_t)B * s->hv, 1.0f);
    float *cw = rand_vec(&r, (size_t)Cc * s->K, 0.5f), *dt = rand_vec(&r, (size_t)s->hv, 1.0f);
    float *sa = rand_vec(&r, (size_t)s->hv, 1.0f), *nw = rand_vec(&r, (size_t)s->dv, 1.0f);
    float *conv = rand_vec(&r, (size_t)(B + 1) * conv_n, 1.0f), *ssm = rand_vec(&r, (size_t)(B + 1) * ssm_n, 0.1f);
    memcpy(conv + B * conv_n, conv + 2 * conv_n, sizeof(float) * conv_n); /* row 2's state */
    memcpy(ssm + B * ssm_n, ssm + 2 * ssm_n, sizeof(float) * ssm_n);
    uint64_t cp[6], sp[6];
    for (int32_t b = 0; b <= B; b++) {
        cp[b] = (uint64_t)(uintptr_t)(conv + b * conv_n);
        sp[b] = (uint64_t)(uintptr_t)(ssm + b * ssm_n);
    }
    memra_block_q8_1 *y5 = xcalloc((size_t)B * Cv / 32, sizeof *y5), *y1 = xcalloc((size_t)Cv / 32, sizeof *y1);
    memra_gdn_step_args a = {.qkv = qkv, .z = z, .beta = be, .alpha = al, .conv_w = cw,
                             .dt_bias = dt, .ssm_a = sa, .norm_w = nw, .conv_state = cp,
                             .ssm_state = sp, .y_q = y5, .n_k_head = s->hk, .n_v_head = s->hv,
                             .head_k_dim = s->dk, .head_v_dim = s->dv, .conv_k = s->K,
                             .head_map = s->map, .b = B, .eps = 1e-6f};
    ck_assert_int_eq(memra_gdn_step_ref(&a), MEMRA_OK);
    memra_gdn_step_args one = a;
    one.qkv = qkv + 2 * Cc;
    one.z = z + 2 * Cv;
    one.beta = be + 2 * s->hv;
    one.alpha = al + 2 * s->hv;
    one.conv_state = cp + B; /* the copy of row 2's state */
    one.ssm_state = sp + B;
    one.y_q = y1;
    one.b = 1;
    ck_assert_int_eq(memra_gdn_step_ref(&one), MEMRA_OK);
    ck_assert(memcmp(y1, y5 + 2 * Cv / 32, sizeof *y1 * (size_t)Cv / 32) == 0);
    ck_assert(memcmp(conv + B * conv_n, conv + 2 * conv_n, sizeof(float) * conv_n) == 0);
    ck_assert(memcmp(ssm + B * ssm_n, ssm + 2 * ssm_n, sizeof(float) * ssm_n) == 0);
    free(qkv);
    free(z);
    free(be);
    free(al);
    free(cw);
    free(dt);
    free(sa);
    free(nw);
    free(conv);
    free(ssm);
    free(y5);
    free(y1);
}
END_TEST

START_TEST(test_bad_args)
{
    /* Every op refuses out-of-range args with MEMRA_ERR_INVALID_ARG instead of touching
     * memory; the backend turns this into an error naming the launch. */
    float f[64] = {0};
    int32_t t[4] = {0};
    uint64_t p[4] = {0};
    memra_block_q8_1 q[4];
    memra_embed_args e = {.table = f, .tokens = t, .x = f, .qtype = MEMRA_QT_F32, .n_embd = 0,
                          .n_vocab = 1, .b = 1, .row_bytes = 4};
    ck_assert_int_eq(memra_embed_ref(&e), MEMRA_ERR_INVALID_ARG);
    memra_rms_norm_q8_args rn = {.x = f, .w = f, .y_q = q, .n = 33, .b = 1, .eps = 1e-6f};
    ck_assert_int_eq(memra_rms_norm_q8_ref(&rn), MEMRA_ERR_INVALID_ARG);
    memra_mmvq_args mv = {.a = q, .n_in = 32, .b = 1, .n_w = 1};
    mv.out[0] = (memra_mmvq_out){.w = f, .y = f, .qtype = MEMRA_QT_Q4_K, .n_out = 1, .row_bytes = 144};
    ck_assert_int_eq(memra_mmvq_ref(&mv), MEMRA_ERR_INVALID_ARG); /* q4_K needs 256 | n_in */
    mv.n_w = 5;
    ck_assert_int_eq(memra_mmvq_ref(&mv), MEMRA_ERR_INVALID_ARG);
    memra_attn_prep_args ap = {.qg = f, .k = f, .v = f, .q_norm = f, .k_norm = f, .positions = t,
                               .k_cache = p, .v_cache = p, .q = f, .n_head = 3, .n_head_kv = 2,
                               .head_dim = 8, .n_rot = 8, .kv_type = MEMRA_QT_F16, .n_ctx = 1,
                               .b = 1, .eps = 1e-6f, .freq_base = 1e4f, .freq_scale = 1};
    ck_assert_int_eq(memra_attn_prep_ref(&ap), MEMRA_ERR_INVALID_ARG); /* 3 % 2 != 0 */
    memra_attn_decode_args ad = {.q = f, .qg = f, .positions = t, .k_cache = p, .v_cache = p,
                                 .y_q = q, .n_head = 1, .n_head_kv = 1, .head_dim = 40,
                                 .kv_type = MEMRA_QT_Q8_0, .n_ctx = 1, .max_split = 1, .b = 1,
                                 .scale = 1};
    ck_assert_int_eq(memra_attn_decode_ref(&ad), MEMRA_ERR_INVALID_ARG); /* q8_0 needs 32 | dh */
    ad.head_dim = 64;
    ad.split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO;
    ck_assert_ptr_null(memra_attn_decode_check(&ad)); /* scheduling: any count, or auto */
    ad.split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO - 1;
    ck_assert_str_eq(memra_attn_decode_check(&ad),
                     "split_ctas must be 0, positive or MEMRA_ATTN_SPLIT_CTAS_AUTO");
    ck_assert_int_eq(memra_attn_decode_ref(&ad), MEMRA_ERR_INVALID_ARG);
    ad.split_ctas = 0;
    ad.prefetch_batches = MEMRA_ATTN_MAX_PREFETCH;
    ck_assert_ptr_null(memra_attn_decode_check(&ad));
    ad.prefetch_batches = MEMRA_ATTN_MAX_PREFETCH + 1;
    ck_assert_str_eq(memra_attn_decode_check(&ad), "prefetch_batches out of range 0..8");
    ad.prefetch_batches = -1;
    ck_assert_int_eq(memra_attn_decode_ref(&ad), MEMRA_ERR_INVALID_ARG);
    memra_gdn_step_args gd = {.qkv = f, .z = f, .beta = f, .alpha = f, .conv_w = f, .dt_bias = f,
                              .ssm_a = f, .norm_w = f, .conv_state = p, .ssm_state = p, .y_q = q,
                              .n_k_head = 2, .n_v_head = 3, .head_k_dim = 32, .head_v_dim = 32,
                              .conv_k = 4, .b = 1, .eps = 1e-6f};
    ck_assert_int_eq(memra_gdn_step_ref(&gd), MEMRA_ERR_INVALID_ARG);
    gd.n_v_head = 2;
    gd.prefetch_tasks = MEMRA_GDN_MAX_PREFETCH;
    ck_assert_ptr_null(memra_gdn_step_check(&gd)); /* scheduling: the reference ignores it */
    gd.prefetch_tasks = MEMRA_GDN_MAX_PREFETCH + 1;
    ck_assert_str_eq(memra_gdn_step_check(&gd), "prefetch_tasks out of range 0..4");
    gd.prefetch_tasks = 0;
    gd.split = 4;
    ck_assert_ptr_null(memra_gdn_step_check(&gd));
    gd.split = 3;
    ck_assert_str_eq(memra_gdn_step_check(&gd),
                     "split must be 0 (the launcher's choice), 1, 2 or 4");
    memra_silu_mul_q8_args sm = {.b = 1, .n_slots = 1};
    sm.slot[0] = (memra_silu_mul_q8_slot){.g = f, .u = f, .y_q = q, .n = 16, .m = 1};
    ck_assert_int_eq(memra_silu_mul_q8_ref(&sm), MEMRA_ERR_INVALID_ARG);
    memra_moe_route_args mr = {.logits = f, .ids = t, .weights = f, .n_expert = 2, .n_used = 3, .b = 1};
    ck_assert_int_eq(memra_moe_route_ref(&mr), MEMRA_ERR_INVALID_ARG);
    memra_moe_down_args md = {.a = q, .ids = t, .wts = f, .w = f, .x = f, .sh_a = q, .k = 32, .n = 1,
                              .n_used = 1, .n_expert = 1, .b = 1, .row_bytes = 128,
                              .expert_bytes = 128, .qtype = MEMRA_QT_F32};
    ck_assert_int_eq(memra_moe_down_ref(&md), MEMRA_ERR_INVALID_ARG); /* sh_a without sh_w */
    memra_mmvq_moe_args mm = {.a = q, .ids = t, .k = 32, .n_used = 1, .n_expert = 1, .b = 1, .n_w = 0};
    ck_assert_int_eq(memra_mmvq_moe_ref(&mm), MEMRA_ERR_INVALID_ARG);
    memra_sample_args sa = {.logits = f, .params = NULL, .out_tokens = t, .n_vocab = 4, .b = 1};
    ck_assert_int_eq(memra_sample_ref(&sa), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ===================================== synth_fill ===================================== */

/* The benchmarks' synthetic history on the CPU (kernels/synth_fill.h): the q8_0 scale constant
 * is fp16_RN(1/127); every element follows the formula (f32: amp v, f16: fp16_RN(v), q8_0:
 * round-half-even(127 v)) and lies in [-1, 1); bad arguments are refused. */
START_TEST(test_synth_fill)
{
    ck_assert_uint_eq(memra_f32_to_fp16(1.0f / 127.0f), MEMRA_SYNTH_Q8_D);
    enum { N = 4099, NB = 37 };
    float f[N];
    uint16_t h[N];
    uint8_t q[34 * NB];
    memra_synth_fill_args a = {.dst = f, .bytes = sizeof f, .seed = 7, .region = 2,
                               .dtype = MEMRA_DT_F32, .amp = 0.25f};
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_OK);
    a = (memra_synth_fill_args){.dst = h, .bytes = sizeof h, .seed = 7, .region = 2,
                                .dtype = MEMRA_DT_F16, .amp = 1.0f};
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_OK);
    a = (memra_synth_fill_args){.dst = q, .bytes = sizeof q, .seed = 7, .region = 2,
                                .dtype = MEMRA_DT_Q8_0, .amp = 1.0f};
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_OK);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        const float v = memra_synth_value(7, 2, (uint64_t)i);
        ck_assert(v >= -1.0f && v < 1.0f);
        ck_assert(f[i] == 0.25f * v);
        ck_assert_uint_eq(h[i], memra_f32_to_fp16(v));
        sum += v;
    }
    /* uniform on [-1, 1): sd 1/sqrt(3) per value, so the mean of N = 4099 has sd 0.009;
     * 0.05 is 5.5 sd (a fixed seed: this either always passes or the generator broke) */
    ck_assert(fabs(sum / N) < 0.05);
    ck_assert(memra_synth_value(7, 2, 0) != memra_synth_value(7, 3, 0)); /* regions differ */
    ck_assert(memra_synth_value(7, 2, 0) != memra_synth_value(8, 2, 0)); /* seeds differ */
    for (int j = 0; j < NB; j++) {
        uint16_t d;
        memcpy(&d, q + 34 * j, 2);
        ck_assert_uint_eq(d, MEMRA_SYNTH_Q8_D);
        for (int k = 0; k < 32; k++) {
            const float v = 127.0f * memra_synth_value(7, 2, (uint64_t)(32 * j + k));
            ck_assert_int_eq((int8_t)q[34 * j + 2 + k], (int)lrintf(v));
        }
    }
    a.bytes = 33; /* not whole blocks */
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_ERR_INVALID_ARG);
    a.bytes = 34;
    a.dtype = MEMRA_DT_I32; /* not a region dtype */
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_ERR_INVALID_ARG);
    a.dtype = MEMRA_DT_Q8_0;
    a.dst = NULL;
    ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_ERR_INVALID_ARG);
}
END_TEST

Suite *make_ops_suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ref");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_philox_kat);
    tcase_add_test(tc, test_exact_math_libm);
    tcase_add_test(tc, test_exact_math_specials);
    tcase_add_test(tc, test_exact_math_floats);
    tcase_add_test(tc, test_exact_math_short);
    tcase_add_test(tc, test_block_sum_emulation);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_rms_norm_q8);
    tcase_add_test(tc, test_mmvq_types);
    tcase_add_test(tc, test_mmvq_merged);
    tcase_add_test(tc, test_silu_mul_q8);
    tcase_add_test(tc, test_attn_prep);
    tcase_add_test(tc, test_attn_decode);
    tcase_add_test(tc, test_gdn_step);
    tcase_add_test(tc, test_gdn_canon_order);
    tcase_add_test(tc, test_gdn_canon_compose);
    tcase_add_test(tc, test_moe_route);
    tcase_add_test(tc, test_mmvq_moe);
    tcase_add_test(tc, test_moe_down);
    tcase_add_test(tc, test_sample_rule);
    tcase_add_test(tc, test_sample_integer_rule);
    tcase_add_test(tc, test_sample_greedy_edges);
    tcase_add_test(tc, test_sample_distribution);
    tcase_add_test(tc, test_sample_batch_independent);
    tcase_add_test(tc, test_rows_independent_of_b);
    tcase_add_test(tc, test_synth_fill);
    tcase_add_test(tc, test_bad_args);
    suite_add_tcase(s, tc);
    return s;
}
