/*
 * exact_math.h — the engine's transcendental functions, defined once and compiled identically
 * by the C compiler (CPU reference ops, CPU backend, reference model) and by nvcc (CUDA ops),
 * so that the CPU and the GPU produce the same bits.
 *
 * Why: libm (glibc) and CUDA's math library are each accurate to an ulp or two, but not to the
 * same bits; one differing expf in a norm, a gate or a softmax flips a q8_1 code somewhere and
 * the two backends' logits part ways (measured on the H200: 1.2e-2 relative at step 0 of the
 * 0.8b preset). Every function here is a fixed sequence of IEEE-754 double operations (+, -,
 * *, /, fma, rint, exact bit manipulation), each correctly rounded on both sides, so the
 * result is a pure function of the input bits. Accuracy: a few double ulp (1e-15 relative)
 * for the argument ranges the engine uses, so the float wrappers round to the correctly
 * rounded float except when the exact value lies within ~1e-15 of a float rounding boundary.
 *
 * Build contract: C with -ffp-contract=off (CMakeLists.txt), CUDA with --fmad=false
 * -prec-div=true -prec-sqrt=true (cmake/cudakernels.cmake); every fused multiply-add below is
 * an explicit fma(). Never call expf/exp/log/sin/cos/pow directly in an op: call these.
 *
 * Ranges: memra_x_exp: any double (over/underflow to inf/0 for x > 709.78 / x < -745.13);
 * memra_x_log: x > 0 (denormals included), x == 0 -> -inf, x < 0 or NaN -> NaN;
 * memra_x_sincos: |x| < 2^20 * pi/2 (1.6e6; a rope angle is pos * inv_freq <= 2^18); sin(-0)
 * is +0. Tests: tests/test_ops.c (against libm), tests/gpu/test_ops_gpu.c (GPU == CPU bits).
 */
#ifndef MEMRA_KERNEL_EXACT_MATH_H
#define MEMRA_KERNEL_EXACT_MATH_H

#ifdef __CUDACC_RTC__ /* NVRTC (the mmvq template's SwiGLU epilogue): no system headers */
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#ifdef __CUDACC__
#define MEMRA_XM static __host__ __device__ __forceinline__
#else
#include <math.h>
#define MEMRA_XM static inline
#endif

MEMRA_XM double memra_x_bits_to_d(uint64_t u)
{
    union {
        uint64_t u;
        double d;
    } v;
    v.u = u;
    return v.d;
}

MEMRA_XM uint64_t memra_x_d_to_bits(double d)
{
    union {
        uint64_t u;
        double d;
    } v;
    v.d = d;
    return v.u;
}

/* 2^k as a double, k in [-1022, 1023] (exact). */
MEMRA_XM double memra_x_pow2i(int k)
{
    return memra_x_bits_to_d((uint64_t)(k + 1023) << 52);
}

/* x / n for n > 0, correctly rounded. Where n is a power of two 2^k this is the multiply by
 * the exact 2^-k (k <= 30): the same real number rounded once, so the same bits in every case
 * (subnormal results, infinities and NaN included), at a fraction of the division's latency
 * (bench/gdn_probe.cu --chains on an H100: ~400 cycles for the f64 division, the multiply
 * ~10). The norms' mean of squares (n = 128, 256, 4096 on the presets) is this. */
MEMRA_XM double memra_x_div_n(double x, int n)
{
    if (n > 0 && (n & (n - 1)) == 0) {
#ifdef __CUDA_ARCH__
        const int k = __ffs(n) - 1;
#else
        const int k = __builtin_ctz((unsigned)n);
#endif
        return x * memra_x_pow2i(-k);
    }
    return x / (double)n;
}

/* e^x where x is NaN (x), above the overflow bound (inf) or below the underflow one (0):
 * 1 and *r set; else 0. */
MEMRA_XM int memra_x_exp_special(double x, double *r)
{
    if (x != x)
        *r = x;
    else if (x > 709.782712893384)
        *r = 1.0 / 0.0;
    else if (x < -745.1332191019412)
        *r = 0.0;
    else
        return 0;
    return 1;
}

/* p 2^k for e^x's k (|k| <= 1075): in two exact steps beyond 2^±1000, so a subnormal result
 * is rounded once. */
MEMRA_XM double memra_x_scale2(double p, int k)
{
    if (k > 1000)
        return p * memra_x_pow2i(1000) * memra_x_pow2i(k - 1000);
    if (k < -1000)
        return p * memra_x_pow2i(-1000) * memra_x_pow2i(k + 1000);
    return p * memra_x_pow2i(k);
}

/* e^x. Cody-Waite reduction x = k ln2 + r (|r| <= 0.35, ln2 in two parts, k ln2_hi exact),
 * Taylor polynomial of degree 13 in Horner form with fma, then scaling by 2^k in two exact
 * steps (so results in the subnormal range are rounded once, identically on both sides). */
MEMRA_XM double memra_x_exp(double x)
{
    double sp;
    if (memra_x_exp_special(x, &sp))
        return sp;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double k = rint(x * 1.44269504088896338700e+00);
    double r = fma(-k, ln2_hi, x);
    r = fma(-k, ln2_lo, r);
    double p = 1.0 / 6227020800.0; /* 1/13! */
    p = fma(p, r, 1.0 / 479001600.0);
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    const int ki = (int)k;
    return memra_x_scale2(p, ki);
}

/* m in [sqrt(1/2), sqrt(2)) with x = m 2^(*e + e0), *e += e0, for a normal x > 0 (exact). */
MEMRA_XM double memra_x_log_split(double x, int *e)
{
    const uint64_t u = memra_x_d_to_bits(x);
    *e += (int)((u >> 52) & 0x7FF) - 1022;
    double m = memra_x_bits_to_d((u & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull); /* [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m = m * 2.0;
        *e -= 1;
    }
    return m;
}

/* ln(m 2^e) from s = (m - 1) / (m + 1): 2 atanh s + e ln 2 (the series below). */
MEMRA_XM double memra_x_log_tail(double s, int e)
{
    const double z = s * s;
    double p = 2.0 / 23.0;
    p = fma(p, z, 2.0 / 21.0);
    p = fma(p, z, 2.0 / 19.0);
    p = fma(p, z, 2.0 / 17.0);
    p = fma(p, z, 2.0 / 15.0);
    p = fma(p, z, 2.0 / 13.0);
    p = fma(p, z, 2.0 / 11.0);
    p = fma(p, z, 2.0 / 9.0);
    p = fma(p, z, 2.0 / 7.0);
    p = fma(p, z, 2.0 / 5.0);
    p = fma(p, z, 2.0 / 3.0);
    p = fma(p, z, 2.0);
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double de = (double)e;
    return fma(de, ln2_hi, fma(de, ln2_lo, s * p));
}

/* ln x. x = m 2^e with m in [sqrt(1/2), sqrt(2)); s = (m - 1) / (m + 1);
 * ln m = 2 atanh s = s (2 + 2/3 s^2 + 2/5 s^4 + ... + 2/23 s^22) (|s| <= 0.1716). */
MEMRA_XM double memra_x_log(double x)
{
    if (x != x || x < 0.0)
        return 0.0 / 0.0;
    if (x == 0.0)
        return -1.0 / 0.0;
    if (x == 1.0 / 0.0)
        return x;
    int e = 0;
    if (x < 2.2250738585072014e-308) { /* subnormal: scale into the normal range (exact) */
        x *= 18014398509481984.0;      /* 2^54 */
        e = -54;
    }
    const double m = memra_x_log_split(x, &e);
    return memra_x_log_tail((m - 1.0) / (m + 1.0), e);
}

/* ln(1 + x) for x > -1, accurate for small x: u = 1 + x; ln u * (x / (u - 1)). */
MEMRA_XM double memra_x_log1p(double x)
{
    const double u = 1.0 + x;
    if (u == 1.0)
        return x;
    if (u == 1.0 / 0.0)
        return u;
    return memra_x_log(u) * (x / (u - 1.0));
}

/* base^e for base > 0: exp(e ln base). */
MEMRA_XM double memra_x_pow(double base, double e)
{
    return memra_x_exp(e * memra_x_log(base));
}

/* sin x and cos x. k = rint(x 2/pi); r = x - k pi/2 with pi/2 in three 33-bit parts (fdlibm's;
 * each k * part is exact for |k| < 2^20); Taylor polynomials on |r| <= pi/4 to degree 17 / 18. */
MEMRA_XM void memra_x_sincos(double x, double *sn, double *cs)
{
    const double pio2_1 = 1.57079632673412561417e+00, pio2_2 = 6.07710050630396597660e-11,
                 pio2_3 = 2.02226624871116645580e-21;
    const double k = rint(x * 6.36619772367581382433e-01);
    double r = fma(-k, pio2_1, x);
    r = fma(-k, pio2_2, r);
    r = fma(-k, pio2_3, r);
    const double z = r * r;
    double ps = 1.0 / 355687428096000.0; /* 1/17! */
    ps = fma(ps, z, -1.0 / 1307674368000.0);
    ps = fma(ps, z, 1.0 / 6227020800.0);
    ps = fma(ps, z, -1.0 / 39916800.0);
    ps = fma(ps, z, 1.0 / 362880.0);
    ps = fma(ps, z, -1.0 / 5040.0);
    ps = fma(ps, z, 1.0 / 120.0);
    ps = fma(ps, z, -1.0 / 6.0);
    const double s = fma(ps * z, r, r);
    double pc = -1.0 / 6402373705728000.0; /* -1/18! */
    pc = fma(pc, z, 1.0 / 20922789888000.0);
    pc = fma(pc, z, -1.0 / 87178291200.0);
    pc = fma(pc, z, 1.0 / 479001600.0);
    pc = fma(pc, z, -1.0 / 3628800.0);
    pc = fma(pc, z, 1.0 / 40320.0);
    pc = fma(pc, z, -1.0 / 720.0);
    pc = fma(pc, z, 1.0 / 24.0);
    pc = fma(pc, z, -0.5);
    const double c = fma(pc, z, 1.0);
    const int q = (int)((int64_t)k & 3);
    *sn = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    *cs = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
}

/* ------------------------------- float wrappers ------------------------------------- */
/* Each: the double function of the exactly widened argument, rounded once to float. */

/* The wrappers' own e^x, ln x, ln(1 + x) and division: the same real functions as the double
 * ones above in sequences of shorter latency (each a fixed sequence of IEEE operations too),
 * for the critical paths of the small kernels (gdn_step's lambda / beta / silu(z), the
 * attention softmax, the gates). Their double results differ from memra_x_exp's in the last bit
 * for ~5 % of arguments, never enough to move a float rounding: every float wrapper below gives
 * the bits of its double-API formula (the one in its comment) for EVERY float input, checked
 * over all 2^32 by bench/xm_accuracy.c and on 4M strided inputs by tests/test_ops.c. Latency
 * on an H100 (bench/gdn_probe.cu --chains, cycles per dependent call; mmvq-notes, session 27):
 * expf 413 -> 374, softplus-based lambda (memra_gdn_decay) 1938 -> 1078, siluf 657 -> 525
 * with memra_x_div_short (the reciprocal form below is shorter still); a dependent f64 fma is
 * ~7.5 cycles, an f32 -> f64 -> f32 round trip ~40. */

/* e^c's reduction and polynomial for |c| small enough that k = nearest(c log2 e) scales in one
 * step (caller's part): k = (c log2 e + 1.5 * 2^52) - 1.5 * 2^52 (one fma and a subtract: no
 * rint on the chain; k's conversion to int runs beside the polynomial), r as memra_x_exp, the
 * same degree-13 polynomial as e^r = 1 + (r + r^2 h(r)) (the large terms added last) with h's
 * even and odd coefficients in two chains (depth 7 after r instead of 14; a full Estrin tree is
 * shorter still but holds enough doubles at once to spill attn_decode's registers). */
MEMRA_XM double memra_x_exp_poly(double c, int *ki)
{
    const double shifter = 6755399441055744.0; /* 1.5 * 2^52 */
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double t = fma(c, 1.44269504088896338700e+00, shifter);
    const double k = t - shifter;
    *ki = (int)k;
    double r = fma(-k, ln2_hi, c);
    r = fma(-k, ln2_lo, r);
    /* h = 1/2! + r/3! + ... + r^11/13! as its even and odd halves, two Horner chains in r^2 */
    const double r2 = r * r;
    double ev = 1.0 / 479001600.0, od = 1.0 / 6227020800.0;
    ev = fma(ev, r2, 1.0 / 3628800.0);
    od = fma(od, r2, 1.0 / 39916800.0);
    ev = fma(ev, r2, 1.0 / 40320.0);
    od = fma(od, r2, 1.0 / 362880.0);
    ev = fma(ev, r2, 1.0 / 720.0);
    od = fma(od, r2, 1.0 / 5040.0);
    ev = fma(ev, r2, 1.0 / 24.0);
    od = fma(od, r2, 1.0 / 120.0);
    ev = fma(ev, r2, 0.5);
    od = fma(od, r2, 1.0 / 6.0);
    const double h = fma(r, od, ev);
    return 1.0 + fma(r2, h, r);
}

/* e^x for any double: memra_x_exp's special cases and two-step scaling around the short
 * polynomial. */
MEMRA_XM double memra_x_exp_short(double x)
{
    double sp;
    if (memra_x_exp_special(x, &sp))
        return sp;
    int ki;
    const double p = memra_x_exp_poly(x, &ki);
    return memra_x_scale2(p, ki);
}

/* e^t for the float wrappers, whose t is +-(double) of a float: without branches. t is
 * clamped into [-110, 709] for the polynomial, so k lies in [-159, 1023] and 2^k scales in one
 * exact step. Below -110, e^t < 2^-158 leaves every wrapper's float result as the clamped
 * bound gives it: float +0 (expf), 1 + e^t = 1 (sigmoid, silu), ln(1 + e^t) = e^t -> +0
 * (softplus). Above 709 the result is t 2^1000 instead: > 2^1009 (inf from t >= 2^24), so
 * expf overflows to inf and 1 / (1 + e) (sigmoid) and x / (1 + e) (silu, |x| < 2^128) round to
 * float zeros of the same sign as with e^t; inf for t = inf (silu(-inf) stays -inf * 0 = NaN)
 * and NaN for NaN, as memra_x_exp_special (NaN payloads and signs aside). Checked over all
 * 2^32 floats by bench/xm_accuracy.c. */
MEMRA_XM double memra_x_exp_fw(double t)
{
    double c = t < 709.0 ? t : 709.0; /* NaN -> 709: not used */
    c = c > -110.0 ? c : -110.0;
    int ki;
    const double p = memra_x_exp_poly(c, &ki);
    const double e = p * memra_x_pow2i(ki);
    return t <= 709.0 ? e : t * memra_x_pow2i(1000);
}

/* n / d for d = md 2^e > 0, |e| <= 1000, n 2^-e normal or zero: the linear minimax seed of
 * 1 / md on [1, 2] (8/17 (3 - md), relative error <= 1/17), four Newton steps (the error
 * squares: 3.5e-3, 1.2e-5, 1.5e-10, 2e-20), q = n y, one residual step q + (n - q d) y
 * (q itself where the residual is 0, so -0 / d stays -0). In place of the IEEE division's
 * reciprocal seed, refinement and slow-path check. */
MEMRA_XM double memra_x_div_short(double n, double d)
{
    const uint64_t u = memra_x_d_to_bits(d);
    const int e = (int)(u >> 52) - 1023;
    const double md = memra_x_bits_to_d((u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
    double y = fma(md, -8.0 / 17.0, 24.0 / 17.0);
    double h = fma(-md, y, 1.0);
    y = fma(y, h, y);
    h = fma(-md, y, 1.0);
    y = fma(y, h, y);
    h = fma(-md, y, 1.0);
    y = fma(y, h, y);
    h = fma(-md, y, 1.0);
    y = fma(y, h, y);
    const double nd = n * memra_x_pow2i(-e);
    const double q = nd * y, res = fma(-q, md, nd);
    return res == 0.0 ? q : fma(res, y, q);
}

/* ln(1 + x) for x = e^a of a float a <= 20 (0 <= x < 2^29): memra_x_log1p's formula with
 * memra_x_log's s = (m - 1) / (m + 1) and the factor x / (u - 1) by memra_x_div_short. */
MEMRA_XM double memra_x_log1p_short(double x)
{
    const double u = 1.0 + x;
    if (u == 1.0)
        return x;
    int e = 0;
    const double m = memra_x_log_split(u, &e); /* u in (1, 2^29]: normal */
    return memra_x_log_tail(memra_x_div_short(m - 1.0, m + 1.0), e) * memra_x_div_short(x, u - 1.0);
}

/* (float)memra_x_exp((double)x) */
MEMRA_XM float memra_x_expf(float x)
{
    return (float)memra_x_exp_fw((double)x);
}

/* memra_x_expf by memra_x_exp_short, whose range checks are branches: the same float for
 * every input. For loops of independent exps under register pressure (attention's batch
 * softmax): the branches keep the compiler from interleaving them, where the branch-free form
 * spills six of attention's split kernels (attn_decode.cu split_exp_seq). */
MEMRA_XM float memra_x_expf_seq(float x)
{
    return (float)memra_x_exp_short((double)x);
}

/* 1 / (1 + e^-x), rounded once: (float)(1.0 / (1.0 + memra_x_exp(-(double)x))). The double
 * reciprocal stays the IEEE one: 1 / d is the short path of CUDA's division (~70 cycles on
 * an H100 against ~150 for memra_x_div_short). */
MEMRA_XM float memra_x_sigmoidf(float x)
{
    return (float)(1.0 / (1.0 + memra_x_exp_fw(-(double)x)));
}

/* x / (1 + e^-x), rounded once: (float)((double)x / (1.0 + memra_x_exp(-(double)x))), formed
 * as x * (1 / (1 + e^-x)) (the reciprocal's short path and a multiply, where the general
 * division took ~240 cycles): the same float for every input (bench/xm_accuracy.c). */
MEMRA_XM float memra_x_siluf(float x)
{
    return (float)((double)x * (1.0 / (1.0 + memra_x_exp_fw(-(double)x))));
}

/* ln(1 + e^x); x for x > 20 (the float result is x there):
 * (float)memra_x_log1p(memra_x_exp((double)x)). */
MEMRA_XM float memra_x_softplusf(float x)
{
    return x > 20.0f ? x : x != x ? x : (float)memra_x_log1p_short(memra_x_exp_fw((double)x));
}

#undef MEMRA_XM
#endif
