/*
 * sample.c — CPU reference of sample (the rule is defined in kernels/sample.h).
 *
 * No sort, no scratch: the top-k cut-off is found by bisection over float bit patterns mapped
 * to an order-preserving uint32 key, the top-p cut-off by an MSB-first radix select over the
 * bits of p (4 passes, 256 bins on the stack); every pass is a plain scan in increasing token
 * id. Masses are exact 128-bit integers (floor(p * 2^100)), exactly as kernels/sample.cu
 * computes them, so the CUDA kernel picks the same token bit for bit.
 * Must not: sum masses in floating point, or use libm's expf (memra_x_expf only).
 */
#include "sample.h"

#include <math.h>
#include <string.h>

#include "exact_math.h"
#include "memra.h"
#include "rng.h"

__extension__ typedef unsigned __int128 u128;

/* Order-preserving key of a non-NaN float: a < b  <=>  key(a) < key(b). */
static uint32_t fkey(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* floor(p * 2^100) for p in [0, 1] (sample.cu fx): p = m 2^(E - 150), exact shifts. */
static u128 fx(float p)
{
    const uint32_t bits = fbits(p), E = bits >> 23;
    const uint64_t m = (bits & 0x7FFFFFu) | (E ? 0x800000u : 0u);
    const int sh = (int)(E ? E : 1) - 50;
    return sh >= 0 ? (u128)m << sh : (u128)(m >> -sh);
}

/* (double)x as sample.cu u128_to_f64: (double)hi * 2^64 + (double)lo (each RN). */
static double u128_to_f64(u128 x)
{
    return (double)(uint64_t)(x >> 64) * 18446744073709551616.0 + (double)(uint64_t)x;
}

/* floor(d) for 0 <= d < 2^127 (sample.cu f64_to_u128; exact). */
static u128 f64_to_u128(double d)
{
    if (d < 18446744073709551616.0)
        return (u128)(uint64_t)d;
    const uint64_t hi = (uint64_t)(d / 18446744073709551616.0);
    return ((u128)hi << 64) | (uint64_t)(d - (double)hi * 18446744073709551616.0);
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(l[i]) && (best < 0 || l[i] > l[best]))
            best = i; /* strict >: the lowest index wins ties */
    return best < 0 ? 0 : best;
}

/* Largest key t with #{i : key(l_i) >= t} >= k (k <= number of non-NaN logits). */
static uint32_t topk_threshold(const float *l, int32_t n, int32_t k)
{
    uint64_t lo = 0, hi = 0x100000000ull; /* invariant: count(lo) >= k, count(hi) < k */
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        int32_t cnt = 0;
        for (int32_t i = 0; i < n; i++)
            cnt += !isnan(l[i]) && fkey(l[i]) >= mid;
        if (cnt >= k)
            lo = mid;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

typedef struct sample_row {
    const float *l;
    int32_t n;
    uint32_t kmin;  /* candidate set C: key(l_i) >= kmin */
    float lmax;
    float temp;
} sample_row;

static float prob(const sample_row *r, int32_t i)
{
    return memra_x_expf((r->l[i] - r->lmax) / r->temp);
}

static int in_c(const sample_row *r, int32_t i)
{
    return !isnan(r->l[i]) && fkey(r->l[i]) >= r->kmin;
}

/* Z = sum over C of fx(p_i) (exact). */
static u128 mass_c(const sample_row *r)
{
    u128 s = 0;
    for (int32_t i = 0; i < r->n; i++)
        if (in_c(r, i))
            s += fx(prob(r, i));
    return s;
}

/* The largest t with mass{i in C : bits(p_i) >= t} >= target (target in [1, Z]), by an
 * MSB-first radix select over the 4 bytes of bits(p) (p >= +0, so its bits order like its
 * value): each pass keeps the largest digit whose suffix mass (plus the mass above the
 * current prefix) still reaches target. *total = mass{bits(p) >= t}. */
static uint32_t topp_threshold(const sample_row *r, u128 target, u128 *total)
{
    uint32_t prefix = 0;
    u128 above = 0; /* mass of the p whose bits lie above the current prefix's range */
    for (int round = 0; round < 4; round++) {
        const int shift = 24 - 8 * round;
        u128 hist[256];
        memset(hist, 0, sizeof hist);
        for (int32_t i = 0; i < r->n; i++) {
            if (!in_c(r, i))
                continue;
            const float p = prob(r, i);
            const uint32_t pb = fbits(p);
            if (round == 0 || (pb >> (shift + 8)) == (prefix >> (shift + 8)))
                hist[(pb >> shift) & 255] += fx(p);
        }
        int d = 255;
        u128 cum = above;
        while (d > 0 && cum + hist[d] < target) {
            cum += hist[d];
            d--;
        }
        prefix |= (uint32_t)d << shift;
        above = cum;
        *total = cum + hist[d];
    }
    return prefix;
}

int32_t memra_sample_row_ref(const float *logits, int32_t n_vocab, const memra_sample_params *p)
{
    int32_t best = argmax(logits, n_vocab);
    if (!(p->temperature > 0.0f) || p->top_k == 1 || isnan(logits[best]) || isinf(logits[best]))
        return best; /* greedy; a +inf logit also makes the row greedy */
    int32_t n_ok = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        n_ok += !isnan(logits[i]);
    sample_row r = {.l = logits, .n = n_vocab, .kmin = 0, .lmax = logits[best],
                    .temp = p->temperature};
    if (p->top_k > 0 && p->top_k < n_ok)
        r.kmin = topk_threshold(logits, n_vocab, p->top_k);
    uint32_t pmin = 0;
    u128 total = mass_c(&r);
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        u128 target = f64_to_u128((double)p->top_p * u128_to_f64(total));
        pmin = topp_threshold(&r, target ? target : 1, &total);
    }
    /* the draw: target = floor(total * u24 / 2^24), exactly */
    const uint32_t ctr[4] = {(uint32_t)p->step, (uint32_t)(p->step >> 32), 0u, 0u};
    const uint32_t key[2] = {(uint32_t)p->seed, (uint32_t)(p->seed >> 32)};
    uint32_t rnd[4];
    memra_philox4x32_10(ctr, key, rnd);
    const uint32_t u24 = rnd[0] >> 8;
    const u128 target = (total >> 24) * u24 + (((total & 0xFFFFFFu) * u24) >> 24);
    u128 cum = 0;
    int32_t last = best;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (!in_c(&r, i))
            continue;
        const float pi = prob(&r, i);
        if (fbits(pi) < pmin)
            continue;
        cum += fx(pi);
        last = i;
        if (cum > target)
            return i;
    }
    return last; /* unreachable: target < total */
}

int memra_sample_ref(const memra_sample_args *a)
{
    if (memra_sample_check(a))
        return MEMRA_ERR_INVALID_ARG;
    for (int32_t b = 0; b < a->b; b++)
        a->out_tokens[b] =
            memra_sample_row_ref(a->logits + (size_t)b * (size_t)a->n_vocab, a->n_vocab, &a->params[b]);
    return MEMRA_OK;
}
