/*
 * act_eval.c — what the activation format costs in accuracy, measured on a whole model: the
 * CPU reference (runtime/refmodel.h) runs the same token stream once with exact activations
 * (MEMRA_REF_ACT_F32: dequantized weights dotted in f64 with the f32 inputs) and once per
 * format, and every format's logits are compared with the exact run's, token by token.
 * Formats: "engine" (memra's arithmetic: q8_1, one scale per 32 activations, the mmvq dot)
 * and "G=N" (memra_ref_model_config.act_sim = N: one q8_1-style scale per N activations,
 * f64 dot; G=32 is the engine's rounding without its summation order). Written for the
 * grouped-activation-scale decision (bench/results/mmvq-notes.md runs 17-21). "GmL" adds
 * act_sim_mult = L (run 22). "f16" and "bf16" model a tensor-core mat-vec
 * (memra_ref_model_config.act_f16 = 1, 2): activations rounded to f16 / bfloat16 (RN-even)
 * instead of q8_1, weights dequantized to f16 as the GPU would (memra_ref_dequantize_row_f16),
 * exact products summed in f64 (an fp32-accumulating MMA); their lines also count the values
 * rounding made non-finite (activations that overflowed to Inf, f16 weights that are Inf/NaN).
 *
 *   memra-act-eval -m MODEL [--tokens N] [--seed S] [--groups 32,64,128,256] [--threads T]
 *   (--groups: a comma list of G, GmL, f16 and bf16; "engine" always runs first)
 *
 * The stream: N tokens drawn uniformly from the vocabulary by the seed, teacher-forced (every
 * format sees the same inputs, so errors do not change the path). Per format: the median and
 * largest relative L2 error of the logits, ||l - l_exact|| / ||l_exact||, the largest |d|, the
 * share of tokens whose argmax matches the exact run's, and the mean KL(p_exact || p) of the
 * softmaxes (f64). One machine-readable line per format ("act_eval format=... ..."), then a
 * table. Forged checkpoints have random weights: their activations have no outlier channels,
 * so this measures the Gaussian case (bench/analysis/act_group_error.py models outliers).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refmodel.h"

#define MAX_FORMATS 12

typedef struct eval_cfg {
    const char *model;
    int tokens, threads, n_groups;
    unsigned long long seed;
    int groups[MAX_FORMATS]; /* act_sim per format (0 with f16) */
    int mults[MAX_FORMATS];  /* act_sim_mult per format (0: none) */
    int f16[MAX_FORMATS];    /* act_f16 per format (0: none, 1: f16, 2: bf16) */
} eval_cfg;

typedef struct eval_stats {
    double *rel; /* [tokens] relative L2 error per token */
    double max_abs, kl_sum;
    int top1;
} eval_stats;

static int usage(const char *why)
{
    fprintf(stderr,
            "memra-act-eval: %s\nusage: memra-act-eval -m MODEL [--tokens N] [--seed S] "
            "[--groups 32,64,128,256] [--threads T]\n  (--groups: G, GmL, f16, bf16)\n",
            why);
    return 2;
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    const long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, eval_cfg *c)
{
    *c = (eval_cfg){
        .tokens = 32, .threads = 2, .seed = 1, .n_groups = 4, .groups = {32, 64, 128, 256}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v)
            c->model = v;
        else if (!strcmp(a, "--tokens") && !parse_int(v, 1, 4096, &c->tokens))
            ;
        else if (!strcmp(a, "--threads") && !parse_int(v, 1, 64, &c->threads))
            ;
        else if (!strcmp(a, "--seed") && v) {
            char *end = NULL;
            errno = 0;
            c->seed = strtoull(v, &end, 10);
            if (end == v || *end || errno)
                return usage("--seed: a non-negative integer");
        } else if (!strcmp(a, "--groups") && v) {
            c->n_groups = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int g, l = 0, h = !strcmp(t, "f16") ? 1 : !strcmp(t, "bf16") ? 2 : 0;
                if (h && c->n_groups < MAX_FORMATS - 1) {
                    c->f16[c->n_groups] = h;
                    c->mults[c->n_groups] = c->groups[c->n_groups] = 0;
                    c->n_groups++;
                    continue;
                }
                char *mpart = strchr(t, 'm');
                if (mpart)
                    *mpart++ = 0;
                if (c->n_groups == MAX_FORMATS - 1 || parse_int(t, 32, 1024, &g) || g % 32 ||
                    (mpart && (parse_int(mpart, 2, 64, &l) || g == 32)))
                    return usage("--groups: G, GmL (G a multiple of 32 up to 1024, L in "
                                 "2..64 with G > 32), f16 or bf16, at most 11");
                c->f16[c->n_groups] = 0;
                c->mults[c->n_groups] = l;
                c->groups[c->n_groups++] = g;
            }
        } else
            return usage(a);
        i++;
    }
    return c->model ? 0 : usage("no model (-m)");
}

/* splitmix64: the token stream */
static unsigned long long mix(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One format: memra_ref_model_config's act_sim, act_sim_mult, act_f16 (all 0: the engine). */
typedef struct eval_format {
    int act_sim, mult, f16;
} eval_format;

/* logits [tokens][V] of the stream under format f; counts: the sequence's f16 counts. */
static int run_format(const eval_cfg *c, const eval_format *f, const int32_t *toks, float *logits,
                      int64_t V, memra_ref_f16_counts *counts)
{
    memra_ref_model_config mc;
    memra_ref_model_config_default(&mc);
    mc.n_threads = c->threads;
    mc.act_sim = f->act_sim;
    mc.act_sim_mult = f->mult;
    mc.act_f16 = f->f16;
    memra_ref_model *m = NULL;
    memra_ref_seq *s = NULL;
    memra_err e;
    memra_err_clear(&e);
    int rc = memra_ref_model_open(c->model, &mc, &m, &e);
    if (rc == MEMRA_OK)
        rc = memra_ref_seq_init(m, (uint32_t)c->tokens, &s, &e);
    for (int t = 0; rc == MEMRA_OK && t < c->tokens; t++)
        rc = memra_ref_forward(m, s, toks[t], logits + (size_t)t * V, &e);
    if (rc == MEMRA_OK)
        memra_ref_seq_f16_counts(s, counts);
    if (rc != MEMRA_OK)
        fprintf(stderr, "memra-act-eval: %s\n", e.msg);
    memra_ref_seq_free(s);
    memra_ref_model_close(m);
    return rc;
}

/* KL(p || q) of softmax(a), softmax(b), f64. */
static double kl_div(const float *a, const float *b, int64_t n)
{
    double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
    for (int64_t i = 0; i < n; i++) {
        ma = fmax(ma, a[i]);
        mb = fmax(mb, b[i]);
    }
    for (int64_t i = 0; i < n; i++) {
        za += exp(a[i] - ma);
        zb += exp(b[i] - mb);
    }
    const double la = ma + log(za), lb = mb + log(zb);
    for (int64_t i = 0; i < n; i++) {
        const double pa = exp(a[i] - la);
        kl += pa * ((a[i] - la) - (b[i] - lb));
    }
    return kl;
}

static void compare(const float *exact, const float *got, int tokens, int64_t V, eval_stats *st)
{
    st->max_abs = st->kl_sum = 0;
    st->top1 = 0;
    for (int t = 0; t < tokens; t++) {
        const float *x = exact + (size_t)t * V, *y = got + (size_t)t * V;
        double num = 0, den = 0;
        for (int64_t i = 0; i < V; i++) {
            const double d = (double)y[i] - x[i];
            num += d * d;
            den += (double)x[i] * x[i];
            st->max_abs = fmax(st->max_abs, fabs(d));
        }
        st->rel[t] = den > 0 ? sqrt(num / den) : sqrt(num);
        st->top1 += memra_ref_argmax(x, V) == memra_ref_argmax(y, V);
        st->kl_sum += kl_div(x, y, V);
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    eval_cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc)
        return rc;
    memra_ref_model *m = NULL;
    memra_err e;
    memra_err_clear(&e);
    if (memra_ref_model_open(c.model, NULL, &m, &e) != MEMRA_OK) {
        fprintf(stderr, "memra-act-eval: %s\n", e.msg);
        return 1;
    }
    const int64_t V = memra_ref_model_hparams(m)->n_vocab;
    memra_ref_model_close(m);
    int32_t *toks = malloc((size_t)c.tokens * sizeof *toks);
    float *exact = malloc((size_t)c.tokens * V * sizeof(float));
    float *got = malloc((size_t)c.tokens * V * sizeof(float));
    double *rel = malloc((size_t)c.tokens * sizeof *rel);
    if (!toks || !exact || !got || !rel) {
        fprintf(stderr, "memra-act-eval: out of memory\n");
        return 1;
    }
    unsigned long long s = c.seed;
    for (int t = 0; t < c.tokens; t++)
        toks[t] = (int32_t)(mix(&s) % (unsigned long long)V);
    printf(
        "memra-act-eval\n  model   %s\n  stream  %d tokens (uniform, seed %llu), teacher-forced; "
        "%d threads\n  exact   f32 activations, dequantized weights, f64 dots\n",
        c.model, c.tokens, c.seed, c.threads);
    int any_f16 = 0;
    for (int i = 0; i < c.n_groups; i++)
        any_f16 |= c.f16[i] != 0;
    if (any_f16)
        printf("  f16     f16 / bf16 activations (RN-even), weights dequantized to f16, f64 dots "
               "(an fp32-accumulating MMA)\n");
    memra_ref_f16_counts counts[MAX_FORMATS];
    const eval_format exact_fmt = {.act_sim = MEMRA_REF_ACT_F32};
    if (run_format(&c, &exact_fmt, toks, exact, V, &counts[0]) != MEMRA_OK)
        return 1;
    eval_format formats[MAX_FORMATS] = {{0}}; /* 0 = engine, then the groups */
    for (int i = 0; i < c.n_groups; i++)
        formats[i + 1] = (eval_format){.act_sim = c.groups[i], .mult = c.mults[i], .f16 = c.f16[i]};
    char table[MAX_FORMATS][160], names[MAX_FORMATS][16];
    for (int f = 0; f <= c.n_groups; f++) {
        const eval_format *fm = &formats[f];
        if (run_format(&c, fm, toks, got, V, &counts[f]) != MEMRA_OK)
            return 1;
        eval_stats st = {.rel = rel};
        compare(exact, got, c.tokens, V, &st);
        qsort(rel, (size_t)c.tokens, sizeof *rel, cmp_double);
        char *name = names[f], extra[160] = "";
        if (fm->f16)
            snprintf(name, sizeof names[f], "%s", fm->f16 == 1 ? "f16" : "bf16");
        else if (fm->act_sim && fm->mult)
            snprintf(name, sizeof names[f], "G=%dm%d", fm->act_sim, fm->mult);
        else if (fm->act_sim)
            snprintf(name, sizeof names[f], "G=%d", fm->act_sim);
        else
            snprintf(name, sizeof names[f], "engine");
        if (fm->f16)
            snprintf(extra, sizeof extra,
                     " act_values=%llu act_inf=%llu weight_values=%llu "
                     "weight_nonfinite=%llu",
                     (unsigned long long)counts[f].act_values,
                     (unsigned long long)counts[f].act_inf,
                     (unsigned long long)counts[f].weight_values,
                     (unsigned long long)counts[f].weight_nonfinite);
        printf("act_eval format=%s tokens=%d rel_median=%.4g rel_max=%.4g max_abs=%.4g "
               "top1=%.4f kl_mean=%.4g%s\n",
               name, c.tokens, rel[c.tokens / 2], rel[c.tokens - 1], st.max_abs,
               (double)st.top1 / c.tokens, st.kl_sum / c.tokens, extra);
        snprintf(table[f], sizeof table[f], "%-8s %12.4g %12.4g %10.4g %8.1f%% %12.4g", name,
                 rel[c.tokens / 2], rel[c.tokens - 1], st.max_abs, 100.0 * st.top1 / c.tokens,
                 st.kl_sum / c.tokens);
        fflush(stdout);
    }
    printf("\n%-8s %12s %12s %10s %9s %12s\n", "format", "rel_median", "rel_max", "max|d|", "top1",
           "KL_mean");
    for (int f = 0; f <= c.n_groups; f++)
        printf("%s\n", table[f]);
    if (any_f16) /* rounding to 16 bits: what overflowed (counted once per mat-vec / row read) */
        printf("\n%-8s %14s %10s %16s %16s\n", "format", "act_values", "act_inf", "weight_values",
               "weight_nonfinite");
    for (int f = 1; any_f16 && f <= c.n_groups; f++)
        if (formats[f].f16)
            printf("%-8s %14llu %10llu %16llu %16llu\n", names[f],
                   (unsigned long long)counts[f].act_values, (unsigned long long)counts[f].act_inf,
                   (unsigned long long)counts[f].weight_values,
                   (unsigned long long)counts[f].weight_nonfinite);
    free(toks), free(exact), free(got), free(rel);
    return 0;
}
