/*
 * sample.c — CPU reference of sample (the rule is defined in kernels/sample.h).
 *
 * No sort, no scratch: both cut-offs are found by bisection over float bit patterns mapped
 * to an order-preserving uint32 key; every pass is a plain scan in increasing token id, so
 * each step reads like the definition (and like the GPU kernel's block reductions).
 */
#include "sample.h"

#include <math.h>
#include <string.h>

#include "memra.h"
#include "rng.h"

/* Order-preserving key of a non-NaN float: a < b  <=>  key(a) < key(b). */
static uint32_t fkey(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
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

static float prob(const sample_row *r, int32_t i) { return expf((r->l[i] - r->lmax) / r->temp); }

static int in_c(const sample_row *r, int32_t i) { return !isnan(r->l[i]) && fkey(r->l[i]) >= r->kmin; }

/* Mass of {i in C : p_i >= pmin} (p_i >= 0, so its bits order like the value), f64. */
static double mass(const sample_row *r, uint32_t pmin)
{
    double s = 0.0;
    for (int32_t i = 0; i < r->n; i++) {
        if (!in_c(r, i))
            continue;
        float p = prob(r, i);
        uint32_t pb;
        memcpy(&pb, &p, sizeof pb);
        if (pb >= pmin)
            s += (double)p;
    }
    return s;
}

/* Largest p-threshold whose kept mass is still >= top_p * Z. */
static uint32_t topp_threshold(const sample_row *r, double target)
{
    uint64_t lo = 0, hi = 0x3F800001ull; /* bits(1.0f) + 1: p <= 1, so mass(hi) = 0 */
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (mass(r, (uint32_t)mid) >= target)
            lo = mid;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

int32_t memra_sample_row_ref(const float *logits, int32_t n_vocab, const memra_sample_params *p)
{
    int32_t best = argmax(logits, n_vocab);
    if (!(p->temperature > 0.0f) || p->top_k == 1 || isnan(logits[best]) || isinf(logits[best]))
        return best; /* greedy; a +inf logit also makes the row greedy */
    int32_t n_ok = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        n_ok += !isnan(logits[i]);
    sample_row r = {.l = logits, .n = n_vocab, .kmin = 0, .lmax = logits[best], .temp = p->temperature};
    if (p->top_k > 0 && p->top_k < n_ok)
        r.kmin = topk_threshold(logits, n_vocab, p->top_k);
    uint32_t pmin = 0;
    if (p->top_p > 0.0f && p->top_p < 1.0f)
        pmin = topp_threshold(&r, (double)p->top_p * mass(&r, 0));
    double target = (double)memra_rng_uniform(p->seed, p->step) * mass(&r, pmin);
    double cum = 0.0;
    int32_t last = best;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (!in_c(&r, i))
            continue;
        float pi = prob(&r, i);
        uint32_t pb;
        memcpy(&pb, &pi, sizeof pb);
        if (pb < pmin)
            continue;
        cum += (double)pi;
        last = i;
        if (cum > target)
            return i;
    }
    return last;
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
