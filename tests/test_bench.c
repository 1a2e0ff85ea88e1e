/*
 * test_bench.c — the memra-bench machinery in CPU mode (numbers meaningless, machinery
 * tested), on a forged tiny Qwen3.5 model (the forge's "tiny" preset, Q4_K_M mix) through
 * the CPU backend:
 *
 *   - a whole run (plans made in-process, 2 tiers x 2 depths, few ticks): every JSON line
 *     parses (jansson) with every field present and sane; the bytes per tick equal the
 *     traffic computed here independently from the model's shape (weights from the GGUF's
 *     tensor table, KV and recurrent state from spec/qwen35.md's state shapes); rows of the
 *     B = 2 tick are bit-identical to tier 1; the covered targets are reported; the gnuplot
 *     script is written (and rendered when gnuplot is installed); the temporary plan
 *     directory is removed;
 *   - the synthetic history of the CPU backend (memra_cpu_session_fill_synthetic): same
 *     seed = same state in any slot, the history reaches the logits, position 0 = a fresh
 *     session, bad calls refused without effect;
 *   - the --phases plan rewriter (every launch of a class doubled, the set still valid) and
 *     a phases run; reaching depths with real decode ticks; bad input; the statistics.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn_decode.h"
#include "backend_cpu.h"
#include "bench.h"
#include "forge.h"
#include "planner.h"
#include "test_util.h"

/* ====================================== fixture ====================================== */

static char g_model[512], g_plans[512]; /* forged tiny model; its plans, tiers 1,2 */
static int g_ok;

static void fix_setup(void)
{
    memra_err err;
    memra_err_clear(&err);
    tu_tmp_path(g_model, sizeof g_model, "-bench.gguf");
    tu_tmp_path(g_plans, sizeof g_plans, "-bench-plans");
    memra_forge_opts o;
    memra_forge_opts_init(&o); /* the tiny preset, Q4_K_M mix */
    o.seed = 3;
    o.n_threads = 1;
    if (memra_forge_write(&o, g_model, &err) != MEMRA_OK) {
        fprintf(stderr, "forge failed: %s\n", err.msg);
        return;
    }
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = g_model;
    po.out_dir = g_plans;
    po.n_tiers = 2;
    po.tiers[0] = 1;
    po.tiers[1] = 2;
    memra_planner_result *res = NULL;
    const int rc = memra_planner_run(&po, &res, &err);
    memra_planner_result_free(res);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "planning failed: %s\n", err.msg);
        return;
    }
    g_ok = 1;
}

static void fix_teardown(void)
{
    unlink(g_model);
    memra_planner_remove_dir(g_plans);
}

/* A bench run on the fixture model with small settings; the caller adjusts o first. */
static void small_opts(memra_bench_opts *o)
{
    memra_bench_opts_init(o);
    o->model = g_model;
    o->backend = MEMRA_BENCH_CPU;
    o->ticks = 3;
    o->warmup = 1;
    o->copy_mib = 8; /* the host probe: 2 x 4 MiB, enough to time a memcpy */
    o->copy_reps = 3;
}

/* small_opts on the fixture's plans, one tier at one depth. */
static void one_case_opts(memra_bench_opts *o, uint32_t tier, uint32_t depth)
{
    small_opts(o);
    o->plans = g_plans;
    o->n_tiers = 1;
    o->tiers[0] = tier;
    o->n_depths = 1;
    o->depths[0] = depth;
}

/* small_opts at tiers 1, 2 and depths 0, depth. */
static void two_by_two_opts(memra_bench_opts *o, uint32_t depth)
{
    small_opts(o);
    o->n_tiers = 2;
    o->tiers[0] = 1;
    o->tiers[1] = 2;
    o->n_depths = 2;
    o->depths[0] = 0;
    o->depths[1] = depth;
}

/* The report as memra-bench prints it (the header; with full, the table and the targets too)
 * into buf [n]. */
static void report_text(const memra_bench_report *r, int full, char *buf, size_t n)
{
    char txt[512];
    tu_tmp_path(txt, sizeof txt, ".txt");
    FILE *f = fopen(txt, "w+");
    ck_assert_ptr_nonnull(f);
    memra_bench_print_header(r, f);
    if (full) {
        memra_bench_print_table(r, f);
        memra_bench_print_targets(r, f);
    }
    rewind(f);
    buf[fread(buf, 1, n - 1, f)] = 0;
    fclose(f);
    unlink(txt);
}

static memra_bench_report *bench_ok(const memra_bench_opts *o)
{
    ck_assert_msg(g_ok, "fixture (forge + planner) failed; see stderr");
    memra_err err;
    memra_err_clear(&err);
    memra_bench_report *r = NULL;
    const int rc = memra_bench_run(o, &r, &err);
    ck_assert_msg(rc == MEMRA_OK, "memra_bench_run: %s", err.msg);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* ================================ independent oracle ================================= */

/* Per-tick traffic of the tiny shape, from the model alone (spec/qwen35.md: every
 * full_attn_interval-th layer is attention with an f16 KV cache of n_head_kv x head_dim per
 * token for K and V; the others are GDN layers with a conv window of (conv_k - 1) x
 * (2 Hk dk + Hv dv) f32 and a state of dk x dv x Hv f32, read and written back). */
static uint64_t kv_per_token(const memra_forge_shape *s)
{
    const uint64_t n_attn = s->n_layer / s->full_attn_interval;
    return n_attn * 2 * s->n_head_kv * s->head_dim * 2;
}

static uint64_t state_per_row(const memra_forge_shape *s)
{
    const uint64_t n_gdn = s->n_layer - s->n_layer / s->full_attn_interval;
    const uint64_t ch =
        2ull * s->ssm_n_group * s->ssm_d_state + (uint64_t)s->ssm_dt_rank * s->ssm_d_state;
    const uint64_t conv = (s->ssm_d_conv - 1) * ch * 4;
    const uint64_t ssm = (uint64_t)s->ssm_d_state * s->ssm_d_state * s->ssm_dt_rank * 4;
    return n_gdn * (conv + ssm);
}

/* Weights one tick streams: every tensor once, of token_embd only the b rows it gathers. */
static uint64_t weight_bytes(uint32_t b)
{
    memra_gguf *g = NULL;
    ck_assert_int_eq(memra_gguf_open(g_model, &g, NULL), MEMRA_OK);
    uint64_t sum = 0;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        sum +=
            strcmp(t->name, "token_embd.weight") ? t->nbytes : t->nbytes / (uint64_t)t->ne[1] * b;
    }
    memra_gguf_close(g);
    return sum;
}

/* ==================================== JSON lines ===================================== */

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "field %s missing or not a number", key);
    return json_number_value(v);
}

/* A tier-mask option's config key: absent when not given (mask < 0), else its tiers. */
static void check_tier_mask(json_t *j, const char *key, int mask)
{
    const json_t *a = json_object_get(j, key);
    if (mask < 0) {
        ck_assert_ptr_null(a);
        return;
    }
    int got = 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        got |= 1 << json_integer_value(json_array_get(a, i));
    ck_assert_int_eq(got, mask);
}

static void check_config(json_t *j, const memra_bench_report *r)
{
    static const char *const keys[] = {
        "model",    "model_name",  "arch",        "file_type", "plans",  "backend",
        "device",   "tiers",       "depths",      "ticks",     "warmup", "graphs",
        "phases",   "removal",     "prefill",     "seed",      "n_ctx",  "n_slots",
        "copy_gbs", "copy_method", "host_method", NULL};
    for (int i = 0; keys[i]; i++)
        ck_assert_msg(json_object_get(j, keys[i]) != NULL, "config: no %s", keys[i]);
    ck_assert_str_eq(json_string_value(json_object_get(j, "backend")), "cpu");
    ck_assert_str_eq(json_string_value(json_object_get(j, "arch")), "qwen35");
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), g_model);
    /* 1e-8: 9 significant digits in the JSON */
    ck_assert(num(j, "copy_gbs") > 0 &&
              fabs(num(j, "copy_gbs") - r->copy_gbs) <= 1e-8 * r->copy_gbs);
    ck_assert_int_eq(json_array_size(json_object_get(j, "tiers")), r->opts.n_tiers);
    /* --norm-release: the tiers of the mask, absent at the default */
    check_tier_mask(j, "norm_release_tiers", r->opts.norm_release);
    /* an eager pass ran (the CPU has no graphs, so always) */
    ck_assert(json_is_true(json_object_get(j, "eager")));
    /* --attn-split-ctas: as the option reads it, absent at the default */
    const json_t *ac = json_object_get(j, "attn_split_ctas");
    if (r->opts.attn_split_ctas == MEMRA_BENCH_UNSET)
        ck_assert_ptr_null(ac);
    else {
        char want[16];
        snprintf(want, sizeof want, "%d", r->opts.attn_split_ctas);
        ck_assert_str_eq(json_string_value(ac), r->opts.attn_split_ctas == 0  ? "max"
                                                : r->opts.attn_split_ctas < 0 ? "auto"
                                                                              : want);
    }
    /* --attn-auto: the tiers of the mask, absent at the default */
    check_tier_mask(j, "attn_auto_tiers", r->opts.attn_auto);
    /* the engines' effective CUDA scheduling: only where the CUDA backend ran */
    ck_assert_int_eq(json_object_get(j, "cuda_sched") != NULL, r->sched.known);
    const json_t *ap = json_object_get(j, "attn_prefetch");
    if (r->opts.attn_prefetch == MEMRA_BENCH_UNSET)
        ck_assert_ptr_null(ap);
    else
        ck_assert_int_eq(json_integer_value(ap), r->opts.attn_prefetch);
    const json_t *gp = json_object_get(j, "gdn_prefetch"), *gs = json_object_get(j, "gdn_split");
    if (r->opts.gdn_prefetch == MEMRA_BENCH_UNSET)
        ck_assert_ptr_null(gp);
    else
        ck_assert_int_eq(json_integer_value(gp), r->opts.gdn_prefetch);
    if (r->opts.gdn_split == MEMRA_BENCH_UNSET)
        ck_assert_ptr_null(gs);
    else
        ck_assert_int_eq(json_integer_value(gs), r->opts.gdn_split);
    const json_t *l2 = json_object_get(j, "l2_side_mib");
    if (r->opts.l2_side == MEMRA_BENCH_UNSET)
        ck_assert_ptr_null(l2);
    else
        ck_assert_int_eq(json_integer_value(l2), r->opts.l2_side);
    ck_assert(json_is_true(json_object_get(j, "l2_side_spread")) == (r->opts.l2_side_spread != 0));
}

/* One "case" line: fields present, numbers consistent, bytes equal to the oracle. */
static void check_case(json_t *j, double copy_gbs, uint32_t ticks, uint32_t warmup)
{
    static const char *const keys[] = {
        "tier",  "depth",   "ticks",       "median_ms",    "p99_ms",      "min_ms",      "mean_ms",
        "tok_s", "host_us", "host_p99_us", "weight_bytes", "kv_bytes",    "state_bytes", "bytes",
        "gbs",   "frac_bw", "launches",    "graph_nodes",  "rows_differ", "host_launch_us",
        "logits_differ", "max_abs_diff", NULL};
    for (int i = 0; keys[i]; i++)
        num(j, keys[i]);
    const memra_forge_shape *s = memra_forge_preset("tiny");
    const uint32_t b = (uint32_t)num(j, "tier"), depth = (uint32_t)num(j, "depth");
    const double med = num(j, "median_ms");
    ck_assert_ptr_null(json_object_get(j, "attn_split_ctas_used")); /* CUDA only */
    ck_assert_ptr_null(json_object_get(j, "l2_side_forks"));        /* CUDA only */
    ck_assert_ptr_null(json_object_get(j, "l2_side_bytes"));
    ck_assert_str_eq(json_string_value(json_object_get(j, "mode")), "eager");
    ck_assert(med > 0 && num(j, "p99_ms") >= med && num(j, "min_ms") <= med);
    ck_assert(num(j, "host_us") > 0 && num(j, "launches") > 0 && num(j, "graph_nodes") == 0);
    ck_assert(num(j, "host_launch_us") == 0); /* the CPU backend submits nothing */
    /* 1e-6: the same double expressions on both sides, but JSON carries 9 significant
     * digits (a relative error up to 5e-9 per printed number) */
    ck_assert(fabs(num(j, "tok_s") - b / (med * 1e-3)) <= 1e-6 * num(j, "tok_s"));
    /* KV read per tick = (mean position + 1) tokens, plus the appended one: the timed ticks
     * start at depth + warmup */
    const double kv_tokens = depth + warmup + (ticks + 1) / 2.0 + 1.0;
    ck_assert_uint_eq((uint64_t)num(j, "kv_bytes"),
                      (uint64_t)(kv_per_token(s) * b * kv_tokens + 0.5));
    ck_assert_uint_eq((uint64_t)num(j, "state_bytes"), 2 * state_per_row(s) * b);
    ck_assert_uint_eq((uint64_t)num(j, "weight_bytes"), weight_bytes(b));
    ck_assert_uint_eq((uint64_t)num(j, "bytes"), (uint64_t)num(j, "weight_bytes") +
                                                     (uint64_t)num(j, "kv_bytes") +
                                                     (uint64_t)num(j, "state_bytes"));
    const double gbs = num(j, "bytes") / (med * 1e-3) / 1e9;
    ck_assert(fabs(num(j, "gbs") - gbs) <= 1e-6 * gbs);
    ck_assert(fabs(num(j, "frac_bw") - gbs / copy_gbs) <= 1e-6 * gbs / copy_gbs);
    json_t *iso = json_object_get(j, "isolation");
    if (b == 1)
        ck_assert(json_is_null(iso));
    else
        ck_assert_msg(json_is_true(iso), "tier %u depth %u: rows differ from tier 1", b, depth);
    ck_assert(json_is_null(json_object_get(j, "graph_speedup")));
    ck_assert(num(j, "logits_differ") == 0 && num(j, "max_abs_diff") == 0);
    /* synthetic fills with the isolation check: every case has its logits' fingerprint */
    const char *h = json_string_value(json_object_get(j, "logits_xxh64"));
    ck_assert_msg(h != NULL && strlen(h) == 16 && strspn(h, "0123456789abcdef") == 16,
                  "tier %u depth %u: logits_xxh64 %s", b, depth, h ? h : "(not a string)");
}

/* The report's JSON lines into a fresh temporary file, its path into path [512]. */
static void write_json_file(const memra_bench_report *r, char *path)
{
    tu_tmp_path(path, 512, ".jsonl");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(memra_bench_write_json(r, f, NULL), MEMRA_OK);
    fclose(f);
}

/* Parse every line of path; count lines per type and check each. */
static void check_json_file(const char *path, const memra_bench_report *r, int *n_case,
                            int *n_target, int *n_phase)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[8192];
    int n = 0;
    *n_case = *n_target = *n_phase = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        ck_assert_msg(j != NULL, "line %d does not parse: %s", n + 1, je.text);
        const char *type = json_string_value(json_object_get(j, "type"));
        ck_assert_ptr_nonnull(type);
        if (n == 0)
            ck_assert_str_eq(type, "config");
        if (!strcmp(type, "config"))
            check_config(j, r);
        else if (!strcmp(type, "case") && ++*n_case)
            check_case(j, r->copy_gbs, r->opts.ticks, r->opts.warmup);
        else if (!strcmp(type, "target") && ++*n_target)
            ck_assert(json_is_boolean(json_object_get(j, "pass")) &&
                      json_is_string(json_object_get(j, "name")));
        else if (!strcmp(type, "phase") && ++*n_phase)
            ck_assert(num(j, "base_ms") > 0 && num(j, "doubled_ms") > 0 && num(j, "launches") > 0);
        else if (!strcmp(type, "removal") && ++*n_phase)
            ck_assert(num(j, "base_ms") > 0 && num(j, "removed_ms") > 0 && num(j, "launches") > 0 &&
                      json_is_string(json_object_get(j, "op")));
        json_decref(j);
        n++;
    }
    fclose(f);
}

/* ===================================== the run ======================================= */

static void check_plot(const memra_bench_report *r)
{
    char svg[512], script[600];
    tu_tmp_path(svg, sizeof svg, ".svg");
    snprintf(script, sizeof script, "%s.gp", svg);
    int drawn = -1;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_bench_plot(r, svg, script, &drawn, &err) == MEMRA_OK, "%s", err.msg);
    FILE *f = fopen(script, "r");
    ck_assert_ptr_nonnull(f);
    char buf[8192];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "set terminal svg"));
    ck_assert_ptr_nonnull(strstr(buf, "title 'depth 1024'"));
    if (access("/usr/bin/gnuplot", X_OK) == 0)
        ck_assert_int_eq(drawn, 1); /* installed: it must have rendered */
    if (drawn) {
        f = fopen(svg, "r");
        ck_assert_ptr_nonnull(f);
        const size_t m = fread(buf, 1, sizeof buf - 1, f);
        buf[m] = 0;
        fclose(f);
        ck_assert_msg(strstr(buf, "<svg") != NULL, "%s is not an SVG", svg);
        unlink(svg);
    }
    unlink(script);
}

START_TEST(test_bench_cpu_run)
{
    memra_bench_opts o;
    two_by_two_opts(&o, 1024);
    o.norm_release = 1 << 2 | 1 << 16; /* CUDA scheduling options: reported, no effect here */
    o.attn_split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO;
    o.attn_auto = 1 << 1 | 1 << 2;
    o.attn_prefetch = 3;
    o.eager = 0; /* no graphs on the CPU: an eager pass regardless, so still "eager": true */
    o.gdn_prefetch = 2;
    o.gdn_split = 1;
    o.l2_side = 16;
    o.l2_side_spread = 1;
    memra_bench_report *r = bench_ok(&o);
    ck_assert_int_eq(r->n_cases, 4);
    ck_assert(r->plans_generated);
    struct stat st;
    ck_assert_msg(stat(r->plans_dir, &st) != 0, "%s was not removed", r->plans_dir);

    char json[512];
    write_json_file(r, json);
    int n_case, n_target, n_phase;
    check_json_file(json, r, &n_case, &n_target, &n_phase);
    unlink(json);
    ck_assert_int_eq(n_case, 4);
    ck_assert_int_eq(n_phase, 0);
    /* depth 1024 with tier 1 covers the bandwidth and host-time targets (not B=16, not the
     * graph one): a CPU reference backend misses both */
    ck_assert_int_eq(n_target, 2);
    ck_assert(!r->targets[0].pass && !r->targets[1].pass);

    char buf[16384];
    report_text(r, 1, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, g_model));
    ck_assert_ptr_nonnull(strstr(buf, "--tiers 1,2 --depths 0,1024 --ticks 3"));
    ck_assert_ptr_nonnull(
        strstr(buf, " --attn-split-ctas auto --attn-auto 1,2 --attn-prefetch 3 --gdn-prefetch 2 "
                    "--gdn-split 1"));
    ck_assert_ptr_null(strstr(buf, "  schedule  ")); /* CUDA only */
    ck_assert_ptr_nonnull(strstr(buf, "MISS  B=1 bandwidth"));
    check_plot(r);
    memra_bench_report_free(r);
}
END_TEST

/* The targets from a hand-built report (the H200's session-12 numbers): a missed target says
 * the tick it needs and what dominates; a met one says only its number. */
static memra_bench_case target_case(uint32_t tier, int graph, double ms, double frac, double host)
{
    return (memra_bench_case){.tier = tier, .depth = 1024, .graph = graph, .median_ms = ms,
                              .tok_s = tier * 1000.0 / ms, .frac_bw = frac, .host_us = host,
                              .launch_us = host - 0.5, .isolation = 1};
}

START_TEST(test_bench_targets)
{
    memra_bench_report *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    r->opts.isolation = 1;
    r->cases[r->n_cases++] = target_case(1, 1, 2.254, 0.58, 5.3);
    r->cases[r->n_cases++] = target_case(16, 1, 7.754, 0.237, 12.5);
    r->cases[r->n_cases++] = target_case(1, 0, 2.350, 0.556, 696.0);
    r->cases[0].eager_median_ms = 2.350;
    memra_bench_phase ph[3] = {
        {.tier = 1, .depth = 1024, .op = MEMRA_OP_RMS_NORM_Q8, .base_ms = 2.25, .marginal_ms = 0.22},
        {.tier = 1, .depth = 1024, .op = MEMRA_OP_MMVQ, .base_ms = 2.25, .marginal_ms = 1.66},
        {.tier = 16, .depth = 8, .op = MEMRA_OP_MMVQ, .base_ms = 7.7, .marginal_ms = 5.6}};
    r->phases = ph;
    r->n_phases = 3;
    memra_bench_eval_targets(r);
    ck_assert_uint_eq(r->n_targets, 4);
    const memra_bench_target *t = r->targets;
    /* 58 % -> 70 %: 2.254 x 0.58 / 0.70 = 1.868 ms */
    ck_assert(!t[0].pass);
    ck_assert_msg(strstr(t[0].detail, "58.0% of the copy bandwidth (target 70%: a 1.868 ms tick, "
                                      "0.386 ms less than this 2.254)"),
                  "%s", t[0].detail);
    ck_assert_msg(strstr(t[0].detail, "largest phase: mmvq 1.660 ms marginal of a 2.250 ms tick "
                                      "(74%)"),
                  "%s", t[0].detail);
    /* 16 rows in 1.6 B=1 ticks; no phase at (16, 1024): no phase note */
    ck_assert(!t[1].pass);
    ck_assert_msg(strstr(t[1].detail, "4.65x B=1 (target 10x: a 3.606 ms B=16 tick, this one "
                                      "7.754); 0 of 16 rows differ"),
                  "%s", t[1].detail);
    ck_assert_ptr_null(strstr(t[1].detail, "largest phase"));
    ck_assert(!t[2].pass); /* the B=16 case's 12.5 us */
    ck_assert_msg(strstr(t[2].detail, "worst median 12.50 us at B=16 (target < 10 us), 12.00 us"),
                  "%s", t[2].detail);
    ck_assert(!t[3].pass);
    ck_assert_msg(strstr(t[3].detail, "1.04x (target 1.3x); eager submits a tick in 0.696 ms, "
                                      "under its 2.350 ms on the GPU"),
                  "%s", t[3].detail);

    /* met targets: just the number */
    r->cases[0].frac_bw = 0.71;
    r->cases[1].host_us = 6.9;
    memra_bench_eval_targets(r);
    ck_assert(t[0].pass && t[2].pass);
    ck_assert_str_eq(t[0].detail, "71.0% of the copy bandwidth (target 70%)");
    ck_assert_str_eq(t[2].detail, "worst median 6.90 us (target < 10 us)");
    r->phases = NULL;
    memra_bench_report_free(r);
}
END_TEST

/* A copy of the source tree's planner scripts with `from` replaced by `to` (exactly once) in
 * FILE, into a fresh directory (dir: its path; the caller removes it). */
static void scripts_variant(char *dir, size_t n, const char *file, const char *from, const char *to)
{
    tu_tmp_path(dir, n, "-scripts");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const char *src = tu_source_path("plans");
    DIR *d = opendir(src);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int patched = 0;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".lua") != 0)
            continue;
        char in[1024], out[1024];
        snprintf(in, sizeof in, "%s/%s", src, e->d_name);
        snprintf(out, sizeof out, "%s/%s", dir, e->d_name);
        FILE *f = fopen(in, "rb");
        ck_assert_ptr_nonnull(f);
        static char text[1 << 18];
        const size_t got = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        ck_assert_uint_lt(got, sizeof text - 1);
        text[got] = 0;
        FILE *g = fopen(out, "wb");
        ck_assert_ptr_nonnull(g);
        const char *at = strcmp(e->d_name, file) == 0 ? strstr(text, from) : NULL;
        if (at) {
            ck_assert_ptr_null(strstr(at + 1, from)); /* exactly once */
            fwrite(text, 1, (size_t)(at - text), g);
            fputs(to, g);
            fputs(at + strlen(from), g);
            patched = 1;
        } else {
            fwrite(text, 1, got, g);
        }
        ck_assert_int_eq(fclose(g), 0);
    }
    closedir(d);
    ck_assert_msg(patched, "%s: '%s' not found (plans/%s changed: update this test)", file, from,
                  file);
}

/* --planner-scripts plans with another copy of the Lua planner (how bench/device-ab.sh runs a
 * planner variant). The variant here gives every mat-vec weight a launch of its own instead of
 * packing up to 4: more launches, and the same logits bits, because each output's summation
 * order is the canonical one whatever launch it sits in (kernels/mmvq.h). */
START_TEST(test_bench_planner_scripts)
{
    char dir[512];
    scripts_variant(dir, sizeof dir, "dsl.lua", "        for s = 0, 3 do\n",
                    "        for s = 0, 0 do\n");
    memra_bench_opts o;
    one_case_opts(&o, 2, 8);
    o.plans = NULL; /* plan in-process */
    memra_bench_report *a = bench_ok(&o);
    o.planner_scripts = dir;
    memra_bench_report *b = bench_ok(&o);
    ck_assert(a->plans_generated && b->plans_generated);
    const memra_bench_case *x = &a->cases[0], *y = &b->cases[0];
    ck_assert_msg(y->launches > x->launches, "launches %u with one weight per mmvq, %u packed",
                  y->launches, x->launches);
    ck_assert(x->has_logits_xxh64 && y->has_logits_xxh64);
    ck_assert_msg(x->logits_xxh64 == y->logits_xxh64, "logits %016llx packed, %016llx split",
                  (unsigned long long)x->logits_xxh64, (unsigned long long)y->logits_xxh64);
    ck_assert_uint_eq(y->rows_differ, 0);
    /* the header and the config line name the scripts */
    char buf[4096];
    report_text(b, 0, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "planned in-process by the scripts in"));
    ck_assert_ptr_nonnull(strstr(buf, dir));
    memra_bench_report_free(a);
    memra_bench_report_free(b);

    /* with --plans (plans already made) the scripts would be ignored: refused */
    o.plans = g_plans;
    memra_err err;
    memra_err_clear(&err);
    memra_bench_report *r = NULL;
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "--planner-scripts") != NULL, "%s", err.msg);
    ck_assert_ptr_null(r);
    /* scripts that are not there: the planner's error, not a crash */
    o.plans = NULL;
    o.planner_scripts = "/nonexistent/planner/scripts";
    memra_err_clear(&err);
    ck_assert_int_ne(memra_bench_run(&o, &r, &err), MEMRA_OK);
    ck_assert_msg(strstr(err.msg, "/nonexistent/planner/scripts") != NULL, "%s", err.msg);
    ck_assert_ptr_null(r);
    memra_planner_remove_dir(dir);
}
END_TEST

/* ================================= synthetic history ================================= */

typedef struct cpu_run {
    memra_gguf *g;
    memra_cpu_backend *be;
    uint32_t v;
} cpu_run;

static void cpu_open(cpu_run *c)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_gguf_open(g_model, &c->g, &err), MEMRA_OK);
    memra_cpu_opts o = {.n_slots = 3, .n_ctx = 256};
    ck_assert_msg(memra_cpu_backend_open(g_plans, c->g, &o, &c->be, &err) == MEMRA_OK, "%s",
                  err.msg);
    c->v = memra_cpu_backend_n_vocab(c->be);
}

static void cpu_close(cpu_run *c)
{
    memra_cpu_backend_close(c->be);
    memra_gguf_close(c->g);
}

/* One tick of n sessions (token 5 each); logits copied to out[n][v]. */
static void tick(cpu_run *c, const uint32_t *sids, uint32_t n, float *out)
{
    const int32_t tok[2] = {5, 5};
    memra_err err;
    memra_err_clear(&err);
    const memra_cpu_step st = {.n_rows = n, .sessions = sids, .tokens = tok};
    ck_assert_msg(memra_cpu_backend_step(c->be, &st, &err) == MEMRA_OK, "%s", err.msg);
    for (uint32_t r = 0; r < n; r++) {
        const float *l = memra_cpu_backend_logits(c->be, r);
        for (uint32_t i = 0; i < c->v; i++)
            ck_assert_msg(isfinite(l[i]), "row %u logit %u = %g", r, i, l[i]);
        memcpy(out + (size_t)r * c->v, l, sizeof(float) * c->v);
    }
}

START_TEST(test_bench_fill_synthetic)
{
    cpu_run c;
    cpu_open(&c);
    memra_err err;
    uint32_t s[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(memra_cpu_session_admit(c.be, NULL, &s[i], &err), MEMRA_OK);
    float *a = calloc(2 * (size_t)c.v, sizeof *a), *b = calloc(2 * (size_t)c.v, sizeof *b);
    ck_assert(a && b);
    /* the same seed in two slots is the same state: the two rows are identical */
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[0], 100, 42, &err), MEMRA_OK);
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[1], 100, 42, &err), MEMRA_OK);
    ck_assert_uint_eq(memra_cpu_session_pos(c.be, s[0]), 100);
    tick(&c, s, 2, a);
    ck_assert_uint_eq(memra_cpu_session_pos(c.be, s[0]), 101);
    ck_assert(memcmp(a, a + c.v, sizeof(float) * c.v) == 0);
    /* a re-fill restores it exactly; another seed is another history (the history reaches
     * the logits through attention and the recurrent state) */
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[0], 100, 42, &err), MEMRA_OK);
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[1], 100, 43, &err), MEMRA_OK);
    tick(&c, s, 2, b);
    ck_assert(memcmp(a, b, sizeof(float) * c.v) == 0);
    ck_assert(memcmp(b, b + c.v, sizeof(float) * c.v) != 0);
    /* position 0 is a fresh session, whatever it held */
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[0], 0, 42, &err), MEMRA_OK);
    tick(&c, &s[0], 1, a);
    tick(&c, &s[2], 1, b); /* s[2]: admitted, never stepped */
    ck_assert(memcmp(a, b, sizeof(float) * c.v) == 0);
    /* refused without effect (err is cleared first: a record keeps its first failure) */
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, s[0], 256, 1, &err),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_ctx"));
    ck_assert_int_eq(memra_cpu_session_fill_synthetic(c.be, 7, 10, 1, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_uint_eq(memra_cpu_session_pos(c.be, s[0]), 1);
    free(a);
    free(b);
    cpu_close(&c);
}
END_TEST

/* ====================================== phases ======================================= */

START_TEST(test_bench_double_op)
{
    ck_assert_msg(g_ok, "fixture failed");
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "-doubled");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_bench_plans_double_op(g_plans, dir, MEMRA_OP_MMVQ, &err) == MEMRA_OK, "%s",
                  err.msg);
    memra_gguf *g = NULL;
    ck_assert_int_eq(memra_gguf_open(g_model, &g, &err), MEMRA_OK);
    for (uint32_t tier = 1; tier <= 2; tier++) {
        memra_plan *p = NULL, *q = NULL;
        ck_assert_msg(memra_plan_load(g_plans, tier, 0, g, &p, &err) == MEMRA_OK, "%s", err.msg);
        ck_assert_msg(memra_plan_load(dir, tier, 0, g, &q, &err) == MEMRA_OK,
                      "the doubled "
                      "plan must stay valid: %s",
                      err.msg);
        uint32_t k = 0, n_mmvq = 0;
        for (uint32_t i = 0; i < p->n_launches; i++) {
            ck_assert_uint_eq(q->launches[k].op, p->launches[i].op);
            ck_assert(!memcmp(&q->launches[k], &p->launches[i], sizeof p->launches[i]));
            k++;
            if (p->launches[i].op == MEMRA_OP_MMVQ) {
                ck_assert(!memcmp(&q->launches[k], &p->launches[i], sizeof p->launches[i]));
                k++;
                n_mmvq++;
            }
        }
        ck_assert(n_mmvq > 0);
        ck_assert_uint_eq(q->n_launches, k);
        memra_plan_free(p);
        memra_plan_free(q);
    }
    memra_gguf_close(g);
    memra_planner_remove_dir(dir);
    ck_assert_int_eq(memra_bench_plans_double_op(g_plans, dir, MEMRA_OP_COUNT, &err),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_bench_plans_double_op("/nonexistent/plans", dir, 0, &err),
                     MEMRA_ERR_FORMAT);
}
END_TEST

/* Launches per tick of every op class in the fixture's tier-2 plan. */
static void tier2_op_counts(uint32_t counts[MEMRA_OP_COUNT])
{
    memra_gguf *g = NULL;
    memra_plan *p = NULL;
    ck_assert_int_eq(memra_gguf_open(g_model, &g, NULL), MEMRA_OK);
    ck_assert_int_eq(memra_plan_load(g_plans, 2, 0, g, &p, NULL), MEMRA_OK);
    memset(counts, 0, sizeof(uint32_t) * MEMRA_OP_COUNT);
    for (uint32_t i = 0; i < p->n_launches; i++)
        counts[p->launches[i].op]++;
    memra_plan_free(p);
    memra_gguf_close(g);
}

START_TEST(test_bench_phases)
{
    memra_bench_opts o;
    one_case_opts(&o, 2, 8);
    o.ticks = 5;
    o.phases = 1;
    memra_bench_report *r = bench_ok(&o);
    ck_assert(!r->plans_generated);
    /* one phase per op class of the tier-2 plan, with that plan's launch counts */
    uint32_t counts[MEMRA_OP_COUNT], n_classes = 0;
    tier2_op_counts(counts);
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++)
        n_classes += counts[op] > 0;
    ck_assert_uint_eq(r->n_phases, n_classes);
    for (uint32_t i = 0; i < r->n_phases; i++) {
        const memra_bench_phase *ph = &r->phases[i];
        ck_assert_uint_eq(ph->launches, counts[ph->op]);
        ck_assert(ph->base_ms > 0 && ph->doubled_ms > 0);
        ck_assert(ph->marginal_ms == ph->doubled_ms - ph->base_ms);
        /* mmvq streams every weight: doubling it adds about the whole tick (measured +107%
         * on this model), far above the noise of interleaved medians */
        if (ph->op == MEMRA_OP_MMVQ)
            ck_assert_msg(ph->doubled_ms > ph->base_ms, "mmvq doubled %.3f ms <= base %.3f ms",
                          ph->doubled_ms, ph->base_ms);
    }
    char json[512];
    write_json_file(r, json);
    int n_case, n_target, n_phase;
    check_json_file(json, r, &n_case, &n_target, &n_phase);
    unlink(json);
    ck_assert_int_eq(n_phase, (int)n_classes);
    ck_assert_int_eq(n_target, 0); /* depth 1024 not in the run */
    memra_bench_report_free(r);
}
END_TEST

/* --removal: one record per skippable op class of the tier-2 plan with that plan's launch
 * counts left out, then "(all)" with every one of them, each an interleaved pair; the JSON
 * has a "removal" line per record. Leaving out every skippable class removes most of the
 * tick's arithmetic but none of its mat-vecs, so the pair's medians must both be positive
 * and saved their difference (the ranking itself is a measurement, not asserted). */
START_TEST(test_bench_removal)
{
    memra_bench_opts o;
    one_case_opts(&o, 2, 8);
    o.ticks = 5;
    o.removal = 1;
    memra_bench_report *r = bench_ok(&o);
    uint32_t counts[MEMRA_OP_COUNT], n_classes = 0, all = 0;
    tier2_op_counts(counts);
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++)
        if (counts[op] && memra_op_skippable(op)) {
            n_classes++;
            all += counts[op];
        }
    ck_assert_uint_ge(n_classes, 3); /* norms, gdn_step, attention at least */
    ck_assert_uint_eq(r->n_removals, n_classes + 1);
    ck_assert_int_eq(r->removals[r->n_removals - 1].op, -1);
    ck_assert_uint_eq(r->removals[r->n_removals - 1].launches, all);
    for (uint32_t i = 0; i < r->n_removals; i++) {
        const memra_bench_removal *x = &r->removals[i];
        if (x->op >= 0) {
            ck_assert(memra_op_skippable((uint32_t)x->op));
            ck_assert_uint_eq(x->launches, counts[x->op]);
        }
        ck_assert_uint_eq(x->tier, 2);
        ck_assert(x->base_ms > 0 && x->removed_ms > 0);
        ck_assert(x->saved_ms == x->base_ms - x->removed_ms);
    }
    char json[512];
    write_json_file(r, json);
    int n_case, n_target, n_lines;
    check_json_file(json, r, &n_case, &n_target, &n_lines);
    unlink(json);
    ck_assert_int_eq(n_lines, (int)r->n_removals);
    memra_bench_report_free(r);
}
END_TEST

/* The logits fingerprint (what bench/device-ab.sh compares between builds): a function of the
 * computed bits, so the same run twice gives the same values, another seed (other histories,
 * other first tokens) other ones, and a tier-2 case hashes two rows, not one. */
START_TEST(test_bench_logits_hash)
{
    memra_bench_opts o;
    two_by_two_opts(&o, 40);
    o.plans = g_plans;
    memra_bench_report *a = bench_ok(&o), *b = bench_ok(&o);
    o.seed = 7;
    memra_bench_report *c = bench_ok(&o);
    ck_assert_int_eq(a->n_cases, 4);
    ck_assert_int_eq(b->n_cases, 4);
    ck_assert_int_eq(c->n_cases, 4);
    for (uint32_t i = 0; i < a->n_cases; i++) {
        const memra_bench_case *x = &a->cases[i], *y = &b->cases[i], *z = &c->cases[i];
        ck_assert(x->has_logits_xxh64 && y->has_logits_xxh64 && z->has_logits_xxh64);
        ck_assert_uint_eq(x->tier, y->tier);
        ck_assert_uint_eq(x->depth, y->depth);
        ck_assert_msg(x->logits_xxh64 == y->logits_xxh64, "tier %u depth %u: %016llx vs %016llx",
                      x->tier, x->depth, (unsigned long long)x->logits_xxh64,
                      (unsigned long long)y->logits_xxh64);
        ck_assert_msg(x->logits_xxh64 != z->logits_xxh64, "tier %u depth %u: seed 7 = seed 1",
                      x->tier, x->depth);
        for (uint32_t k = 0; k < i; k++) /* each (tier, depth) its own bits */
            ck_assert(a->cases[k].logits_xxh64 != x->logits_xxh64);
    }
    memra_bench_report_free(a);
    memra_bench_report_free(b);
    memra_bench_report_free(c);
    /* without the check (or without synthetic histories) there is none */
    one_case_opts(&o, 2, 0);
    o.isolation = 0;
    memra_bench_report *d = bench_ok(&o);
    ck_assert_int_eq(d->cases[0].has_logits_xxh64, 0);
    char json[512];
    write_json_file(d, json);
    FILE *f = fopen(json, "r");
    char line[8192];
    int n_case = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        ck_assert_ptr_nonnull(j);
        if (!strcmp(json_string_value(json_object_get(j, "type")), "case")) {
            ck_assert(json_is_null(json_object_get(j, "logits_xxh64")));
            n_case++;
        }
        json_decref(j);
    }
    fclose(f);
    unlink(json);
    ck_assert_int_eq(n_case, 1);
    memra_bench_report_free(d);
}
END_TEST

/* Depths reached with real decode ticks (no synthetic history, so no isolation check). */
START_TEST(test_bench_decode_prefill)
{
    memra_bench_opts o;
    one_case_opts(&o, 2, 6);
    o.synthetic = 0;
    memra_bench_report *r = bench_ok(&o);
    ck_assert_int_eq(r->n_cases, 1);
    ck_assert_int_eq(r->cases[0].isolation, -1);
    ck_assert_int_eq(r->cases[0].has_logits_xxh64, 0);
    ck_assert(r->cases[0].median_ms > 0);
    memra_bench_report_free(r);
}
END_TEST

/* ===================================== bad input ===================================== */

START_TEST(test_bench_bad_input)
{
    memra_bench_opts o;
    memra_err err;
    memra_bench_report *r = NULL;
    one_case_opts(&o, 4, 0); /* the plan set has tiers 1 and 2 */
    memra_err_clear(&err);
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "tier 4") && strstr(err.msg, "1,2"), "%s", err.msg);
    ck_assert_ptr_null(r);
    o.tiers[0] = 1;
    o.model = "/nonexistent/model.gguf";
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_IO);
    o.model = NULL;
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_INVALID_ARG);
    o.model = g_model;
    o.tiers[0] = 17;
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_INVALID_ARG);
    o.tiers[0] = 1;
    o.ticks = 0;
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_INVALID_ARG);
#ifndef MEMRA_BENCH_WITH_CUDA
    o.ticks = 1;
    o.backend = MEMRA_BENCH_CUDA;
    ck_assert_int_eq(memra_bench_run(&o, &r, &err), MEMRA_ERR_UNSUPPORTED);
#endif
    uint32_t v[4];
    ck_assert_int_eq(memra_bench_parse_list("1,2,16", v, 4, 16), 3);
    ck_assert_uint_eq(v[2], 16);
    ck_assert_int_eq(memra_bench_parse_list("1,17", v, 4, 16), -1);
    ck_assert_int_eq(memra_bench_parse_list("1,,2", v, 4, 16), -1);
    ck_assert_int_eq(memra_bench_parse_list("-1", v, 4, 16), -1);
    ck_assert_int_eq(memra_bench_parse_list("", v, 4, 16), -1);
    ck_assert_int_eq(memra_bench_parse_list("1,2,3,4,5", v, 4, 16), -1);
}
END_TEST

/* The isolation check's diagnostics: which logits differ, by how much, which are not finite
 * (bit differences only: -0 against +0 counts, equal NaN bits do not). */
START_TEST(test_bench_row_diff)
{
    const float ref[6] = {1.0f, -2.0f, 0.0f, NAN, 3.0f, 5.0f};
    float got[6];
    memcpy(got, ref, sizeof got);
    memra_bench_rowdiff d;
    memra_bench_row_diff(ref, got, 6, &d);
    ck_assert(d.n_diff == 0 && d.first == -1 && d.max_abs == 0 && d.n_nonfinite == 0);
    got[1] = -2.5f;      /* |d| 0.5 */
    got[2] = -0.0f;      /* a sign of zero: differs, |d| 0 */
    got[4] = INFINITY;   /* not finite */
    got[5] = 5.0000005f; /* one ulp up */
    memra_bench_row_diff(ref, got, 6, &d);
    ck_assert_uint_eq(d.n_diff, 4);
    ck_assert_int_eq(d.first, 1);
    ck_assert(d.max_abs == 0.5);
    ck_assert_uint_eq(d.n_nonfinite, 1);
}
END_TEST

START_TEST(test_bench_stats)
{
    double v[] = {5, 1, 4, 2, 3};
    ck_assert(memra_bench_quantile(v, 5, 0.5) == 3);
    double w[] = {4, 1, 3, 2};
    ck_assert(memra_bench_quantile(w, 4, 0.5) == 2.5);
    double x[200];
    for (int i = 0; i < 200; i++)
        x[i] = 199 - i;
    ck_assert(memra_bench_quantile(x, 200, 0.99) == 197); /* nearest rank: the 198th of 200 */
    ck_assert(memra_bench_quantile(x, 1, 0.99) == x[0]);
    double best = 0, med = 0;
    ck_assert_int_eq(memra_bench_copy_bw_host(1 << 20, 5, &best, &med, NULL), MEMRA_OK);
    ck_assert(best >= med && med > 0);
    ck_assert_int_eq(memra_bench_copy_bw_host(0, 5, &best, &med, NULL), MEMRA_ERR_INVALID_ARG);
}
END_TEST

Suite *make_bench_suite(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, fix_setup, fix_teardown);
    tcase_add_test(tc, test_bench_cpu_run);
    tcase_add_test(tc, test_bench_targets);
    tcase_add_test(tc, test_bench_planner_scripts);
    tcase_add_test(tc, test_bench_fill_synthetic);
    tcase_add_test(tc, test_bench_double_op);
    tcase_add_test(tc, test_bench_phases);
    tcase_add_test(tc, test_bench_removal);
    tcase_add_test(tc, test_bench_logits_hash);
    tcase_add_test(tc, test_bench_decode_prefill);
    tcase_add_test(tc, test_bench_bad_input);
    tcase_add_test(tc, test_bench_stats);
    tcase_add_test(tc, test_bench_row_diff);
    suite_add_tcase(s, tc);
    return s;
}
