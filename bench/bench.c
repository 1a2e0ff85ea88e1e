/*
 * bench.c — the memra-bench runner (bench.h says what is measured and why).
 *
 * Order of a run: model facts -> plan set (given, or planned in-process into a temporary
 * directory) -> per-tier traffic from the loaded plans -> the copy-bandwidth probe (before
 * the backend takes device memory) -> one pass per mode (CUDA: graph replay, then eager;
 * CPU: one) -> with phases, one pass per op class over a rewritten plan set in which that
 * class runs twice -> with removal, one pass per skippable op class on an engine that leaves
 * its launches out (then all of them at once) -> targets.
 *
 * One case (tier B, depth d): [isolation check] -> the B sessions put at position d with
 * their synthetic histories -> warmup ticks -> timed ticks, each feeding the sampled tokens
 * back. Only the step call is timed (bench_backend.h).
 *
 * Invariants: sessions are admitted once per pass (n_slots = the largest tier) and rows
 * 0..B-1 of every case use sessions sids[0..B-1]; n_ctx covers the deepest case plus every
 * tick the case adds; temporary plan directories are removed on every path.
 * Sections: helpers -> model facts -> plans -> cases -> passes -> pairs (phases, removal) -> run.
 */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bench_backend.h"
#include "gguf.h"
#include "planner.h"

/* ====================================== helpers ====================================== */

void memra_bench_opts_init(memra_bench_opts *o)
{
    static const uint32_t tiers[] = {1, 2, 4, 8, 16}, depths[] = {0, 1024, 8192, 32768};
    memset(o, 0, sizeof *o);
    o->n_tiers = 5;
    memcpy(o->tiers, tiers, sizeof tiers);
    o->n_depths = 4;
    memcpy(o->depths, depths, sizeof depths);
    o->ticks = 100;
    o->warmup = 5;
    o->graphs = 1;
    o->eager = 1;
    o->isolation = 1;
    o->norm_release = -1;
    o->attn_split_ctas = MEMRA_BENCH_UNSET;
    o->attn_prefetch = MEMRA_BENCH_UNSET;
    o->attn_auto = -1;
    o->gdn_prefetch = MEMRA_BENCH_UNSET;
    o->gdn_split = MEMRA_BENCH_UNSET;
    o->l2_side = MEMRA_BENCH_UNSET;
    o->synthetic = 1;
    o->backend = bench_be_available(MEMRA_BENCH_CUDA) ? MEMRA_BENCH_CUDA : MEMRA_BENCH_CPU;
    o->seed = 1;
    o->copy_reps = 20;
}

int memra_bench_parse_list(const char *s, uint32_t *out, uint32_t cap, uint32_t max)
{
    uint32_t n = 0;
    while (s && *s) {
        char *end = NULL;
        errno = 0;
        const unsigned long v = strtoul(s, &end, 10);
        if (end == s || errno || v > max || n >= cap || (*end && *end != ',') || *s == '-')
            return -1;
        out[n++] = (uint32_t)v;
        s = *end ? end + 1 : end;
    }
    return n ? (int)n : -1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double memra_bench_quantile(double *v, uint32_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    if (q == 0.5) /* the median: mean of the two middle values for even n */
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    uint32_t rank = (uint32_t)(q * n + 0.999999); /* nearest rank: ceil(q n), 1-based */
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return v[rank - 1];
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int memra_bench_copy_bw_host(uint64_t bytes, uint32_t reps, double *best_gbs, double *median_gbs,
                             memra_err *err)
{
    const size_t half = (size_t)(bytes / 2);
    if (half == 0 || reps == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "copy probe: %llu bytes, %u reps",
                          (unsigned long long)bytes, reps);
    uint8_t *src = malloc(half), *dst = malloc(half);
    double *gbs = calloc(reps, sizeof *gbs);
    if (!src || !dst || !gbs) {
        free(src);
        free(dst);
        free(gbs);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "copy probe: cannot allocate 2 x %zu bytes", half);
    }
    memset(src, 0x5b, half); /* touch every page before timing (and never time zeros) */
    memset(dst, 0, half);
    for (uint32_t r = 0; r < reps; r++) {
        const double t0 = now_ms();
        memcpy(dst, src, half);
        const double ms = now_ms() - t0;
        gbs[r] = ms > 0 ? 2.0 * (double)half / (ms * 1e-3) / 1e9 : 0;
        src[r % half] ^= dst[(r * 7919) % half]; /* keep the copies observable */
    }
    *median_gbs = memra_bench_quantile(gbs, reps, 0.5);
    *best_gbs = gbs[reps - 1];
    free(src);
    free(dst);
    free(gbs);
    return MEMRA_OK;
}

static int make_tmp_dir(char *buf, size_t n, const char *what, memra_err *err)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, n, "%s/memra-bench-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (!mkdtemp(buf))
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: cannot create a temporary directory: %s", buf,
                          strerror(errno));
    return MEMRA_OK;
}

/* splitmix64: the bench's seeds and first tokens. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ==================================== model facts ==================================== */

/* llama.cpp's llama_ftype names for general.file_type (the ones a checkpoint here has). */
static const char *ftype_name(uint32_t ft)
{
    static const struct {
        uint32_t id;
        const char *name;
    } k[] = {{0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {7, "Q8_0"},      {10, "Q2_K"},
             {12, "Q3_K_M"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"},   {17, "Q5_K_M"},
             {18, "Q6_K"},   {30, "IQ4_XS"}, {32, "BF16"},   {38, "MXFP4_MOE"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].id == ft)
            return k[i].name;
    return NULL;
}

static void model_facts(const memra_gguf *g, const char *path, memra_bench_report *r)
{
    uint32_t ft = 0;
    size_t size = 0;
    const char *base = strrchr(path, '/');
    if (memra_gguf_get_str(g, "general.name", r->model_name, sizeof r->model_name, NULL) !=
        MEMRA_OK)
        snprintf(r->model_name, sizeof r->model_name, "%s", base ? base + 1 : path);
    if (memra_gguf_get_str(g, "general.architecture", r->arch, sizeof r->arch, NULL) != MEMRA_OK)
        snprintf(r->arch, sizeof r->arch, "?");
    if (memra_gguf_get_str(g, "memra.forge.preset", r->preset, sizeof r->preset, NULL) != MEMRA_OK)
        r->preset[0] = 0;
    if (memra_gguf_get_u32(g, "general.file_type", &ft, NULL) == MEMRA_OK)
        snprintf(r->file_type, sizeof r->file_type, "%s (%u)",
                 ftype_name(ft) ? ftype_name(ft) : "ftype", ft);
    else
        snprintf(r->file_type, sizeof r->file_type, "unknown");
    memra_gguf_file_data(g, &size);
    r->file_bytes = size;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        r->tensor_bytes += t->nbytes;
        r->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
}

/* ======================================= plans ======================================= */

/* Per requested tier: the traffic and launches of one tick, summed over the stages. */
typedef struct tier_stats {
    uint32_t tier;
    uint32_t launches;
    uint64_t weight_streamed;
    uint64_t state_per_row;
    uint64_t kv_per_token;
    uint32_t op_launches[MEMRA_OP_COUNT];
} tier_stats;

/* One open backend and the sessions of rows 0..max_tier-1. */
typedef struct bench_eng {
    bench_be be;
    uint32_t sids[MEMRA_PLAN_MAX_B];
    uint64_t skip; /* the ops it leaves out (--removal), 0 as planned */
} bench_eng;

#define BENCH_MAX_ENG 2 /* a phase or removal pairs the tick as planned with its variant */

typedef struct bench_ctx {
    memra_bench_report *r;
    const memra_bench_opts *o; /* = &r->opts */
    memra_gguf *g;
    tier_stats stats[MEMRA_PLAN_MAX_TIERS]; /* [o->n_tiers] */
    uint32_t max_tier, tier1;               /* tier1: 1 when the manifest has tier 1 */
    uint32_t n_vocab;
    float *ref, *got; /* [max_tier][n_vocab] logits of the isolation check */
    double *lat[BENCH_MAX_ENG], *host[BENCH_MAX_ENG], *launch[BENCH_MAX_ENG]; /* [ticks] */
} bench_ctx;

static int generate_plans(bench_ctx *c, memra_err *err)
{
    int rc;
    memra_bench_report *r = c->r;
    MEMRA_TRY(make_tmp_dir(r->plans_dir, sizeof r->plans_dir, "plans", err));
    r->plans_generated = 1;
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = c->o->model;
    po.out_dir = r->plans_dir;
    po.plans_dir = c->o->planner_scripts; /* NULL: the source tree's plans/ */
    /* the requested tiers, and tier 1 for the isolation check */
    po.n_tiers = 1;
    po.tiers[0] = 1;
    for (uint32_t i = 0; i < c->o->n_tiers; i++) {
        uint32_t k = 0;
        while (k < po.n_tiers && po.tiers[k] < c->o->tiers[i])
            k++;
        if (k < po.n_tiers && po.tiers[k] == c->o->tiers[i])
            continue;
        memmove(&po.tiers[k + 1], &po.tiers[k], sizeof(uint32_t) * (po.n_tiers - k));
        po.tiers[k] = c->o->tiers[i];
        po.n_tiers++;
    }
    memra_planner_result *res = NULL;
    memra_log(MEMRA_LOG_INFO, "bench: planning %s into %s", c->o->model, r->plans_dir);
    rc = memra_planner_run(&po, &res, err);
    memra_planner_result_free(res);
fail:
    return rc;
}

/* Load every stage of a tier's plan and sum its stats. */
static int tier_traffic(bench_ctx *c, const memra_plan_manifest *m, uint32_t tier, tier_stats *ts,
                        memra_err *err)
{
    memset(ts, 0, sizeof *ts);
    ts->tier = tier;
    for (uint32_t s = 0; s < m->n_stages; s++) {
        memra_plan *p = NULL;
        const int rc = memra_plan_load(c->r->plans_dir, tier, s, c->g, &p, err);
        if (rc != MEMRA_OK)
            return rc;
        ts->launches += p->stats.launches;
        ts->weight_streamed += p->stats.weight_bytes_streamed;
        ts->state_per_row += p->stats.state_bytes_per_row;
        ts->kv_per_token += p->stats.kv_bytes_per_token;
        for (uint32_t i = 0; i < p->n_launches; i++)
            if (p->launches[i].op < MEMRA_OP_COUNT)
                ts->op_launches[p->launches[i].op]++;
        memra_plan_free(p);
    }
    return MEMRA_OK;
}

static void list_str(const uint32_t *v, uint32_t n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%u", i ? "," : "", v[i]);
}

/* The manifest has every requested tier; per-tier traffic; model dims of the report. */
static int resolve_plans(bench_ctx *c, memra_err *err)
{
    int rc;
    memra_plan_manifest *m = NULL;
    memra_bench_report *r = c->r;
    MEMRA_TRY(memra_plan_manifest_load(r->plans_dir, &m, err));
    for (uint32_t i = 0; i < c->o->n_tiers; i++) {
        if (memra_plan_tier_for(m, c->o->tiers[i]) != c->o->tiers[i]) {
            char have[96];
            list_str(m->tiers, m->n_tiers, have, sizeof have);
            rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                            "tier %u is not a tier of the plan set "
                            "%s (it has %s); re-plan with memra-plan --tiers",
                            c->o->tiers[i], r->plans_dir, have);
            goto fail;
        }
        MEMRA_TRY(tier_traffic(c, m, c->o->tiers[i], &c->stats[i], err));
        if (c->o->tiers[i] > c->max_tier)
            c->max_tier = c->o->tiers[i];
    }
    c->tier1 = memra_plan_tier_for(m, 1) == 1;
    r->n_layer = m->n_layer;
    r->n_embd = m->n_embd;
    r->n_vocab = m->n_vocab;
    r->n_stages = m->n_stages;
    snprintf(r->kv_dtype, sizeof r->kv_dtype, "%s", m->kv_dtype == MEMRA_DT_Q8_0 ? "q8_0" : "f16");
    rc = MEMRA_OK;
fail:
    memra_plan_manifest_free(m);
    return rc;
}

/* ======================================= cases ======================================= */

void memra_bench_row_diff(const float *ref, const float *got, size_t n, memra_bench_rowdiff *d)
{
    memset(d, 0, sizeof *d);
    d->first = -1;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&ref[i], &got[i], sizeof(float)) == 0)
            continue;
        if (d->n_diff++ == 0)
            d->first = (int64_t)i;
        if (!isfinite(ref[i]) || !isfinite(got[i]))
            d->n_nonfinite++;
        else if (fabs((double)got[i] - (double)ref[i]) > d->max_abs)
            d->max_abs = fabs((double)got[i] - (double)ref[i]);
    }
}

static uint64_t row_seed(const bench_ctx *c, uint32_t r)
{
    return mix64(c->o->seed * 131u + r);
}

static int32_t first_token(const bench_ctx *c, uint32_t r)
{
    return (int32_t)(mix64(c->o->seed * 977u + 1000u + r) % c->n_vocab);
}

static int fill_rows(bench_ctx *c, bench_eng *e, uint32_t b, uint32_t depth, memra_err *err)
{
    for (uint32_t r = 0; r < b; r++) {
        const int rc = bench_be_fill(&e->be, e->sids[r], depth, row_seed(c, r), err);
        if (rc != MEMRA_OK)
            return rc;
    }
    return MEMRA_OK;
}

/* Row r alone at tier 1: its synthetic fill at depth, its first token, the logits into out. */
static int row_alone(bench_ctx *c, bench_eng *e, uint32_t r, uint32_t depth, float *out,
                     memra_err *err)
{
    int rc;
    const int32_t tok = first_token(c, r);
    MEMRA_TRY(bench_be_fill(&e->be, e->sids[r], depth, row_seed(c, r), err));
    MEMRA_TRY(bench_be_step(&e->be, 1, &e->sids[r], &tok, 1, NULL, NULL, err));
    MEMRA_TRY(bench_be_logits(&e->be, 0, 1, out, err));
    return MEMRA_OK;
fail:
    return rc;
}

/* The tier-1 case's fingerprint: row 0 alone, as the isolation check runs every row (so a
 * tier-B hash covers the same computations). */
static int logits_fingerprint(bench_ctx *c, bench_eng *e, uint32_t depth, memra_bench_case *cs,
                              memra_err *err)
{
    int rc;
    MEMRA_TRY(row_alone(c, e, 0, depth, c->got, err));
    cs->logits_xxh64 = XXH64(c->got, sizeof(float) * c->n_vocab, 0);
    cs->has_logits_xxh64 = 1;
    return MEMRA_OK;
fail:
    return rc;
}

/* Rows of a B-wide tick against the same states run alone at tier 1 (memcmp of logits). */
static int isolation_check(bench_ctx *c, bench_eng *e, uint32_t b, uint32_t depth,
                           memra_bench_case *cs, memra_err *err)
{
    int rc;
    const size_t v = c->n_vocab;
    int32_t tok[MEMRA_PLAN_MAX_B];
    for (uint32_t r = 0; r < b; r++) {
        tok[r] = first_token(c, r);
        MEMRA_TRY(row_alone(c, e, r, depth, c->ref + r * v, err));
    }
    MEMRA_TRY(fill_rows(c, e, b, depth, err));
    MEMRA_TRY(bench_be_step(&e->be, b, e->sids, tok, b, NULL, NULL, err));
    MEMRA_TRY(bench_be_logits(&e->be, 0, b, c->got, err));
    cs->logits_xxh64 = XXH64(c->got, sizeof(float) * b * v, 0);
    cs->has_logits_xxh64 = 1;
    cs->rows_differ = cs->logits_differ = 0;
    cs->max_abs_diff = 0;
    for (uint32_t r = 0; r < b; r++) {
        memra_bench_rowdiff d;
        memra_bench_row_diff(c->ref + r * v, c->got + r * v, v, &d);
        if (d.n_diff == 0)
            continue;
        cs->rows_differ++;
        cs->logits_differ += d.n_diff;
        if (d.max_abs > cs->max_abs_diff)
            cs->max_abs_diff = d.max_abs;
        memra_log(MEMRA_LOG_WARN,
                  "bench: tier %u depth %u row %u: %u of %zu logits differ from tier 1 (first "
                  "%lld: %.9g, tier 1 %.9g), max |d| %.3g, %u not finite",
                  b, depth, r, d.n_diff, v, (long long)d.first, (double)c->got[r * v + d.first],
                  (double)c->ref[r * v + d.first], d.max_abs, d.n_nonfinite);
    }
    cs->isolation = cs->rows_differ == 0;
    if (!cs->isolation)
        memra_log(MEMRA_LOG_WARN, "bench: tier %u depth %u: %u of %u rows differ from tier 1", b,
                  depth, cs->rows_differ, b);
    return MEMRA_OK;
fail:
    return rc;
}

/* Put rows 0..b-1 at position depth: synthetic histories, or (synthetic off) fresh
 * sessions advanced by depth real ticks at tier b. */
static int reach_depth(bench_ctx *c, bench_eng *e, uint32_t b, uint32_t depth, memra_err *err)
{
    int rc;
    if (c->o->synthetic)
        return fill_rows(c, e, b, depth, err);
    int32_t tok[MEMRA_PLAN_MAX_B], out[MEMRA_PLAN_MAX_B];
    for (uint32_t r = 0; r < b; r++) {
        MEMRA_TRY(bench_be_retire(&e->be, e->sids[r], err));
        MEMRA_TRY(bench_be_admit(&e->be, &e->sids[r], err));
        tok[r] = first_token(c, r);
    }
    for (uint32_t k = 0; k < depth; k++) {
        MEMRA_TRY(bench_be_step(&e->be, b, e->sids, tok, b, out, NULL, err));
        memcpy(tok, out, sizeof(int32_t) * b);
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* Bytes of one tick of case cs (bench.h: memra_bench_case). */
static void case_bytes(const bench_ctx *c, const tier_stats *ts, memra_bench_case *cs)
{
    const double p0 = (double)cs->depth + c->o->warmup;
    const double kv_tokens = p0 + (cs->ticks + 1) / 2.0 + 1.0; /* mean read + 1 appended */
    cs->weight_bytes = ts->weight_streamed;
    cs->kv_bytes = (uint64_t)((double)ts->kv_per_token * cs->tier * kv_tokens + 0.5);
    cs->state_bytes = 2 * ts->state_per_row * cs->tier;
    cs->bytes = cs->weight_bytes + cs->kv_bytes + cs->state_bytes;
}

/* Latency and host-time statistics of engine k's timed ticks. */
static void tick_stats(bench_ctx *c, uint32_t k, memra_bench_case *cs)
{
    const uint32_t n = c->o->ticks;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += c->lat[k][i];
    cs->mean_ms = sum / n;
    cs->median_ms = memra_bench_quantile(c->lat[k], n, 0.5);
    cs->p99_ms = memra_bench_quantile(c->lat[k], n, 0.99);
    cs->min_ms = c->lat[k][0]; /* sorted by the quantile */
    cs->host_us = memra_bench_quantile(c->host[k], n, 0.5);
    cs->host_p99_us = memra_bench_quantile(c->host[k], n, 0.99);
    cs->launch_us = memra_bench_quantile(c->launch[k], n, 0.5);
}

/* Warmup + timed ticks of rows 0..b-1 on every engine, interleaved tick by tick (so a
 * pair is measured under the same conditions), each feeding its sampled tokens back. */
static int timed_ticks(bench_ctx *c, bench_eng *eng, uint32_t n_eng, uint32_t b,
                       memra_bench_case *cs, memra_err *err)
{
    int32_t tok[BENCH_MAX_ENG][MEMRA_PLAN_MAX_B], out[MEMRA_PLAN_MAX_B];
    for (uint32_t k = 0; k < n_eng; k++)
        for (uint32_t r = 0; r < b; r++)
            tok[k][r] = first_token(c, r);
    for (uint32_t i = 0; i < c->o->warmup + c->o->ticks; i++)
        for (uint32_t k = 0; k < n_eng; k++) {
            bench_tick t = {0};
            const int rc = bench_be_step(&eng[k].be, b, eng[k].sids, tok[k], b, out, &t, err);
            if (rc != MEMRA_OK)
                return rc;
            for (uint32_t r = 0; r < b; r++) /* feed the sampled tokens back */
                tok[k][r] = out[r] >= 0 && (uint32_t)out[r] < c->n_vocab ? out[r] : tok[k][r];
            if (i >= c->o->warmup) {
                c->lat[k][i - c->o->warmup] = t.lat_ms;
                c->host[k][i - c->o->warmup] = t.host_us;
                c->launch[k][i - c->o->warmup] = t.launch_us;
            }
        }
    for (uint32_t k = 0; k < n_eng; k++)
        tick_stats(c, k, &cs[k]);
    return MEMRA_OK;
}

/* Plan launches per tick of the ops in mask (what an engine with skip_ops = mask leaves out,
 * as the CPU backend runs them; the CUDA backend counts its own). */
static uint32_t skipped(const tier_stats *ts, uint64_t mask)
{
    uint32_t n = 0;
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++)
        if (mask >> op & 1)
            n += ts->op_launches[op];
    return n;
}

/* Case (tier index ti, depth) on n_eng engines at once; cs[k] gets engine k's result. The
 * isolation check (check) runs on engine 0. */
static int run_case(bench_ctx *c, bench_eng *eng, uint32_t n_eng, uint32_t ti, uint32_t depth,
                    int check, memra_bench_case *cs, memra_err *err)
{
    int rc;
    const tier_stats *ts = &c->stats[ti];
    const uint32_t b = ts->tier;
    for (uint32_t k = 0; k < n_eng; k++)
        cs[k] = (memra_bench_case){
            .tier = b,
            .depth = depth,
            .graph = eng[k].be.graphs,
            .ticks = c->o->ticks,
            .isolation = -1,
            .launches = bench_be_launches(&eng[k].be, b, ts->launches - skipped(ts, eng[k].skip)),
            .attn_ctas = bench_be_attn_split_ctas(&eng[k].be, b),
            .l2_forks = bench_be_l2_side_forks(&eng[k].be, b),
            .l2_bytes = bench_be_l2_side_bytes(&eng[k].be, b),
            .graph_nodes = bench_be_graph_nodes(&eng[k].be, b)};
    if (check && b > 1 && c->tier1 && c->o->isolation && c->o->synthetic)
        MEMRA_TRY(isolation_check(c, &eng[0], b, depth, &cs[0], err));
    else if (check && b == 1 && c->o->isolation && c->o->synthetic)
        MEMRA_TRY(logits_fingerprint(c, &eng[0], depth, &cs[0], err));
    for (uint32_t k = 0; k < n_eng; k++)
        MEMRA_TRY(reach_depth(c, &eng[k], b, depth, err));
    MEMRA_TRY(timed_ticks(c, eng, n_eng, b, cs, err));
    for (uint32_t k = 0; k < n_eng; k++) {
        memra_bench_case *x = &cs[k];
        x->tok_s = x->median_ms > 0 ? b / (x->median_ms * 1e-3) : 0;
        case_bytes(c, ts, x);
        x->gbs = x->median_ms > 0 ? (double)x->bytes / (x->median_ms * 1e-3) / 1e9 : 0;
        x->frac_bw = c->r->copy_gbs > 0 ? x->gbs / c->r->copy_gbs : 0;
    }
    memra_log(MEMRA_LOG_INFO,
              "bench: %s B=%u depth=%u: median %.3f ms, %.1f tok/s, %.1f%% of "
              "copy BW",
              cs[0].graph ? "graph" : "eager", b, depth, cs[0].median_ms, cs[0].tok_s,
              100 * cs[0].frac_bw);
    return MEMRA_OK;
fail:
    return rc;
}

/* ====================================== passes ======================================= */

/* Open the backend over plan_dir and admit max_tier sessions. */
static int eng_open(bench_ctx *c, bench_eng *e, const char *plan_dir, int graphs, uint64_t skip,
                    memra_err *err)
{
    int rc;
    e->skip = skip;
    const bench_be_opts bo = {.n_slots = c->max_tier,
                              .n_ctx = c->r->n_ctx,
                              .graphs = graphs,
                              .no_fusion = c->o->no_fusion,
                              .norm_release = c->o->norm_release,
                              .attn_split_ctas = c->o->attn_split_ctas,
                              .attn_auto = c->o->attn_auto,
                              .attn_prefetch = c->o->attn_prefetch,
                              .gdn_prefetch = c->o->gdn_prefetch,
                              .gdn_split = c->o->gdn_split,
                              .l2_side = c->o->l2_side,
                              .l2_side_spread = c->o->l2_side_spread,
                              .skip_ops = skip,
                              .device = c->o->device};
    const double t0 = now_ms();
    MEMRA_TRY(bench_be_open(&e->be, c->o->backend, plan_dir, c->g, &bo, err));
    if (c->r->open_ms == 0) {
        c->r->open_ms = now_ms() - t0;
        bench_be_device(&e->be, c->r->device, sizeof c->r->device);
        c->r->sched = e->be.sched;
    }
    if (c->o->synthetic && !bench_be_can_fill(&e->be)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                        "backend %s has no synthetic-history call: "
                        "run with --prefill decode",
                        bench_be_name(c->o->backend));
        goto fail;
    }
    for (uint32_t r = 0; r < c->max_tier; r++)
        MEMRA_TRY(bench_be_admit(&e->be, &e->sids[r], err));
    return MEMRA_OK;
fail:
    bench_be_close(&e->be);
    return rc;
}

/* Every (tier, depth) on one engine over plan_dir; cases[] in tier-major order. */
static int run_pass(bench_ctx *c, const char *plan_dir, int graphs, int check,
                    memra_bench_case *cases, memra_err *err)
{
    int rc;
    bench_eng e = {0};
    MEMRA_TRY(eng_open(c, &e, plan_dir, graphs, 0, err));
    uint32_t n = 0;
    for (uint32_t ti = 0; ti < c->o->n_tiers; ti++)
        for (uint32_t di = 0; di < c->o->n_depths; di++)
            MEMRA_TRY(run_case(c, &e, 1, ti, c->o->depths[di], check, &cases[n++], err));
    rc = MEMRA_OK;
fail:
    bench_be_close(&e.be);
    return rc;
}

/* The graph pass (CUDA with graphs) and the eager pass (unless --no-eager); eager medians
 * linked to graph cases. */
static int run_modes(bench_ctx *c, memra_err *err)
{
    int rc;
    memra_bench_report *r = c->r;
    const uint32_t n = c->o->n_tiers * c->o->n_depths;
    const int cuda = c->o->backend == MEMRA_BENCH_CUDA;
    if (cuda && c->o->graphs && !c->o->eager) { /* --no-eager: the graph pass alone */
        MEMRA_TRY(run_pass(c, r->plans_dir, 1, 1, r->cases, err));
        r->n_cases = n;
    } else if (cuda && c->o->graphs) {
        MEMRA_TRY(run_pass(c, r->plans_dir, 1, 1, r->cases, err));
        MEMRA_TRY(run_pass(c, r->plans_dir, 0, 0, r->cases + n, err));
        for (uint32_t i = 0; i < n; i++)
            r->cases[i].eager_median_ms = r->cases[n + i].median_ms;
        r->n_cases = 2 * n;
    } else {
        MEMRA_TRY(run_pass(c, r->plans_dir, 0, 1, r->cases, err));
        r->n_cases = n;
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* =============================== pairs: phases, removal ============================== */

/* Records one (tier index, depth) case of a pair: cs[0] the tick as planned, cs[1] the
 * variant's; what names the variant (its op). */
typedef void (*pair_record)(bench_ctx *c, uint32_t ti, const memra_bench_case *cs, int32_t what);

/* Every (tier, depth) case on the pair (pair[0] as planned, pair[1] the variant), ticks
 * interleaved, each recorded by rec; then the variant is closed (pair[0] is the caller's). */
static int pair_cases(bench_ctx *c, bench_eng *pair, pair_record rec, int32_t what, memra_err *err)
{
    int rc = MEMRA_OK;
    for (uint32_t ti = 0; ti < c->o->n_tiers && rc == MEMRA_OK; ti++)
        for (uint32_t di = 0; di < c->o->n_depths && rc == MEMRA_OK; di++) {
            memra_bench_case cs[BENCH_MAX_ENG];
            rc = run_case(c, pair, 2, ti, c->o->depths[di], 0, cs, err);
            if (rc == MEMRA_OK)
                rec(c, ti, cs, what);
        }
    bench_be_close(&pair[1].be);
    return rc;
}

/* Launches of op per tick over the requested tiers (0: no requested tier uses it). */
static uint32_t op_used(const bench_ctx *c, uint32_t op)
{
    uint32_t used = 0;
    for (uint32_t ti = 0; ti < c->o->n_tiers; ti++)
        used += c->stats[ti].op_launches[op];
    return used;
}

static void record_phase(bench_ctx *c, uint32_t ti, const memra_bench_case *cs, int32_t op)
{
    memra_bench_phase *ph = &c->r->phases[c->r->n_phases++];
    *ph = (memra_bench_phase){.tier = cs[0].tier,
                              .depth = cs[0].depth,
                              .op = (uint32_t)op,
                              .launches = c->stats[ti].op_launches[op],
                              .base_ms = cs[0].median_ms,
                              .doubled_ms = cs[1].median_ms};
    ph->marginal_ms = ph->doubled_ms - ph->base_ms;
}

/* Every case on the pair (plan set as planned, variant with op doubled). */
static int phase_op(bench_ctx *c, const bench_eng *base, uint32_t op, int graphs, memra_err *err)
{
    int rc;
    bench_eng pair[BENCH_MAX_ENG];
    memset(pair, 0, sizeof pair);
    pair[0] = *base; /* the same open backend (closed by the caller) */
    char dir[600];
    MEMRA_TRY(make_tmp_dir(dir, sizeof dir, "phase", err));
    memra_log(MEMRA_LOG_INFO, "bench: phase %s (doubled)", memra_op_get(op)->name);
    rc = memra_bench_plans_double_op(c->r->plans_dir, dir, op, err);
    if (rc == MEMRA_OK)
        rc = eng_open(c, &pair[1], dir, graphs, 0, err);
    memra_planner_remove_dir(dir); /* the backend validated and copied everything at open */
    if (rc == MEMRA_OK)
        rc = pair_cases(c, pair, record_phase, (int32_t)op, err);
fail:
    return rc;
}

static void record_removal(bench_ctx *c, uint32_t ti, const memra_bench_case *cs, int32_t op)
{
    (void)ti;
    memra_bench_removal *x = &c->r->removals[c->r->n_removals++];
    *x = (memra_bench_removal){.tier = cs[0].tier,
                               .depth = cs[0].depth,
                               .op = op,
                               .launches = cs[0].launches - cs[1].launches,
                               .base_ms = cs[0].median_ms,
                               .removed_ms = cs[1].median_ms};
    x->saved_ms = x->base_ms - x->removed_ms;
}

/* Every case on the pair (the tick as planned, the tick without the ops of mask); op names
 * the record (-1: every skippable class). */
static int removal_mask(bench_ctx *c, const bench_eng *base, uint64_t mask, int32_t op, int graphs,
                        memra_err *err)
{
    int rc;
    bench_eng pair[BENCH_MAX_ENG];
    memset(pair, 0, sizeof pair);
    pair[0] = *base; /* the same open backend (closed by the caller) */
    memra_log(MEMRA_LOG_INFO, "bench: removal of %s",
              op >= 0 ? memra_op_get((uint32_t)op)->name : "every skippable op class");
    MEMRA_TRY(eng_open(c, &pair[1], c->r->plans_dir, graphs, mask, err));
    rc = pair_cases(c, pair, record_removal, op, err);
fail:
    return rc;
}

/* --phases (every op class used by a requested tier, doubled) or --removal (every skippable
 * one left out, then all of them at once when more than one), against one engine as planned
 * kept open. */
static int run_pairs(bench_ctx *c, int removal, memra_err *err)
{
    int rc = MEMRA_OK;
    const uint32_t n = c->o->n_tiers * c->o->n_depths;
    const int graphs = c->o->backend == MEMRA_BENCH_CUDA && c->o->graphs;
    bench_eng base = {0};
    if (removal)
        c->r->removals = calloc((size_t)n * (MEMRA_OP_COUNT + 1), sizeof *c->r->removals);
    else
        c->r->phases = calloc((size_t)n * MEMRA_OP_COUNT, sizeof *c->r->phases);
    if (removal ? !c->r->removals : !c->r->phases)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: out of memory",
                          removal ? "removal" : "phases");
    MEMRA_TRY(eng_open(c, &base, c->r->plans_dir, graphs, 0, err));
    uint64_t all = 0;
    uint32_t classes = 0;
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++) {
        if (!op_used(c, op) || (removal && !memra_op_skippable(op)))
            continue;
        if (removal)
            MEMRA_TRY(removal_mask(c, &base, 1ull << op, (int32_t)op, graphs, err));
        else
            MEMRA_TRY(phase_op(c, &base, op, graphs, err));
        all |= 1ull << op;
        classes++;
    }
    if (removal && classes > 1)
        MEMRA_TRY(removal_mask(c, &base, all, -1, graphs, err));
fail:
    bench_be_close(&base.be);
    return rc;
}

/* ======================================== run ======================================== */

static int check_opts(const memra_bench_opts *o, memra_err *err)
{
    if (!o->model)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "no model (-m MODEL)");
    if (!bench_be_available(o->backend))
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "backend %s: not in this build (built "
                          "without CUDA)",
                          bench_be_name(o->backend));
    if (o->n_tiers == 0 || o->n_tiers > MEMRA_PLAN_MAX_TIERS || o->n_depths == 0 ||
        o->n_depths > MEMRA_BENCH_MAX_DEPTHS || o->ticks == 0 || o->ticks > 1000000 ||
        o->warmup > 1000000 || o->copy_reps == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "options: tiers (1..%d of them), depths "
                          "(1..%d), ticks (1..1e6), warmup (<= 1e6) or copy reps out of range",
                          MEMRA_PLAN_MAX_TIERS, MEMRA_BENCH_MAX_DEPTHS);
    for (uint32_t i = 0; i < o->n_tiers; i++)
        if (o->tiers[i] == 0 || o->tiers[i] > MEMRA_PLAN_MAX_B)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "tier %u out of range 1..%d", o->tiers[i],
                              MEMRA_PLAN_MAX_B);
    for (uint32_t i = 0; i < o->n_depths; i++)
        if (o->depths[i] > (1u << 22))
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "depth %u out of range 0..%u",
                              o->depths[i], 1u << 22);
    if (o->plans && o->planner_scripts)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "--planner-scripts plans in-process; --plans names plans already made");
    return MEMRA_OK;
}

/* Context length: the deepest case plus its isolation tick, warmup and timed ticks. */
static uint32_t bench_n_ctx(const memra_bench_opts *o)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < o->n_depths; i++)
        d = o->depths[i] > d ? o->depths[i] : d;
    const uint64_t need = (uint64_t)d + o->warmup + o->ticks + 2;
    return (uint32_t)((need + 255) / 256 * 256);
}

static int bench_setup(bench_ctx *c, memra_err *err)
{
    int rc;
    memra_bench_report *r = c->r;
    const memra_bench_opts *o = c->o;
    MEMRA_TRY(memra_gguf_open(o->model, &c->g, err));
    model_facts(c->g, o->model, r);
    if (o->plans)
        snprintf(r->plans_dir, sizeof r->plans_dir, "%s", o->plans);
    else
        MEMRA_TRY(generate_plans(c, err));
    MEMRA_TRY(resolve_plans(c, err));
    c->n_vocab = r->n_vocab;
    r->n_ctx = bench_n_ctx(o);
    r->n_slots = c->max_tier;
    c->ref = malloc(sizeof(float) * c->max_tier * c->n_vocab);
    c->got = malloc(sizeof(float) * c->max_tier * c->n_vocab);
    int ok = c->ref && c->got;
    for (uint32_t k = 0; k < BENCH_MAX_ENG; k++) {
        c->lat[k] = malloc(sizeof(double) * o->ticks);
        c->host[k] = malloc(sizeof(double) * o->ticks);
        c->launch[k] = malloc(sizeof(double) * o->ticks);
        ok = ok && c->lat[k] && c->host[k] && c->launch[k];
    }
    if (!ok) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "bench buffers: out of memory");
        goto fail;
    }
    snprintf(r->backend, sizeof r->backend, "%s", bench_be_name(o->backend));
    snprintf(r->host_method, sizeof r->host_method, "%s", bench_be_host_method(o->backend));
    snprintf(r->fill_method, sizeof r->fill_method, "%s",
             o->synthetic ? "synthetic history (seeded fill)" : "real decode ticks");
    MEMRA_TRY(bench_be_copy_bw(o->backend, o->device, (uint64_t)r->opts.copy_mib << 20,
                               o->copy_reps, &r->copy_gbs, &r->copy_median_gbs, r->copy_method,
                               sizeof r->copy_method, err));
    memra_log(MEMRA_LOG_INFO, "bench: copy bandwidth %.1f GB/s (%s)", r->copy_gbs, r->copy_method);
    return MEMRA_OK;
fail:
    return rc;
}

int memra_bench_run(const memra_bench_opts *opts, memra_bench_report **out, memra_err *err)
{
    int rc;
    *out = NULL;
    bench_ctx c = {0};
    MEMRA_TRY(check_opts(opts, err));
    c.r = calloc(1, sizeof *c.r);
    if (!c.r)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "bench report: out of memory");
    c.r->opts = *opts;
    if (c.r->opts.copy_mib == 0)
        c.r->opts.copy_mib = opts->backend == MEMRA_BENCH_CUDA ? 4096 : 256;
    if (opts->backend != MEMRA_BENCH_CUDA)
        c.r->opts.graphs = 0; /* the CPU backend has no graphs */
    c.o = &c.r->opts;
    MEMRA_TRY(bench_setup(&c, err));
    MEMRA_TRY(run_modes(&c, err));
    if (c.o->phases)
        MEMRA_TRY(run_pairs(&c, 0, err));
    if (c.o->removal)
        MEMRA_TRY(run_pairs(&c, 1, err));
    memra_bench_eval_targets(c.r);
    *out = c.r;
    c.r = NULL;
    rc = MEMRA_OK;
fail:
    if (c.r && c.r->plans_generated)
        memra_planner_remove_dir(c.r->plans_dir);
    else if (*out && (*out)->plans_generated)
        memra_planner_remove_dir((*out)->plans_dir);
    memra_bench_report_free(c.r);
    memra_gguf_close(c.g);
    free(c.ref);
    free(c.got);
    for (uint32_t k = 0; k < BENCH_MAX_ENG; k++) {
        free(c.lat[k]);
        free(c.host[k]);
        free(c.launch[k]);
    }
    return rc;
}

void memra_bench_report_free(memra_bench_report *r)
{
    if (!r)
        return;
    free(r->phases);
    free(r->removals);
    free(r);
}
