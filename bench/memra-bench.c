/*
 * memra-bench — decode-tick benchmark over real plans on a real backend (bench/bench.h says
 * what is measured and how).
 *
 *   memra-bench -m MODEL [--plans DIR | --planner-scripts DIR] [--tiers 1,2,4,8,16]
 *               [--depths 0,1024,8192,32768]
 *               [--ticks N] [--warmup N] [--no-graph | --no-eager] [--no-fusion] [--phases]
 *               [--removal] [--json FILE]
 *               [--plot FILE.svg] [--backend cuda|cpu] [--device N] [--seed N]
 *               [--prefill synthetic|decode] [--no-isolation] [--copy-mib N]
 *               [--copy-reps N] [--norm-release TIERS|none]
 *               [--attn-split-ctas N|max|auto] [--attn-auto TIERS|none]
 *               [--attn-prefetch N] [--gdn-prefetch N]
 *               [--gdn-split auto|1|2|4] [--l2-side MIB] [--l2-side-spread] [-q]
 *
 * Prints the configuration header, the human table, the JSON lines (also to --json FILE)
 * and the PASS/MISS lines of the targets the configuration covers; progress goes to stderr
 * (-q: warnings only). With --plot, writes FILE.svg.gp and renders it with gnuplot (svg
 * terminal, headless) when gnuplot is installed. Exit status: 0 ok (also when a target is
 * missed: that is a measurement, not a failure), 1 failure (message on stderr), 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_decode.h"
#include "bench.h"
#include "gdn_step.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-bench -m MODEL [--plans DIR | --planner-scripts DIR]\n"
               "                   [--tiers 1,2,4,8,16]\n"
               "                   [--depths 0,1024,8192,32768] [--ticks N] [--warmup N]\n"
               "                   [--no-graph | --no-eager] [--no-fusion] [--phases]\n"
               "                   [--removal] [--json FILE]\n"
               "                   [--plot FILE.svg]\n"
               "                   [--backend cuda|cpu] [--device N] [--seed N]\n"
               "                   [--prefill synthetic|decode] [--no-isolation]\n"
               "                   [--copy-mib N] [--copy-reps N] [--norm-release TIERS|none]\n"
               "                   [--attn-split-ctas N|max|auto] [--attn-auto TIERS|none]\n"
               "                   [--attn-prefetch N]\n"
               "                   [--gdn-prefetch N] [--gdn-split auto|1|2|4]\n"
               "                   [--l2-side MIB] [--l2-side-spread] [-q]\n");
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    uint32_t v[1];
    if (memra_bench_parse_list(s, v, 1, max) != 1)
        return -1;
    *out = v[0];
    return 0;
}

/* A tier-mask option's value, "none" or tiers "1,2": bit b set for tier b; 0 or -1. */
static int parse_tier_mask(const char *s, int *mask)
{
    uint32_t list[MEMRA_PLAN_MAX_TIERS];
    int n = 0;
    if (strcmp(s, "none") &&
        (n = memra_bench_parse_list(s, list, MEMRA_PLAN_MAX_TIERS, MEMRA_PLAN_MAX_B)) <= 0)
        return -1;
    *mask = 0;
    for (int i = 0; i < n; i++)
        *mask |= 1 << list[i];
    return 0;
}

/* Flags without a value; 1 when a is one of them. */
static int parse_flag(const char *a, memra_bench_opts *o, int *quiet)
{
    if (!strcmp(a, "--no-graph"))
        o->graphs = 0;
    else if (!strcmp(a, "--no-eager"))
        o->eager = 0;
    else if (!strcmp(a, "--phases"))
        o->phases = 1;
    else if (!strcmp(a, "--removal"))
        o->removal = 1;
    else if (!strcmp(a, "--no-fusion"))
        o->no_fusion = 1;
    else if (!strcmp(a, "--no-isolation"))
        o->isolation = 0;
    else if (!strcmp(a, "--l2-side-spread"))
        o->l2_side_spread = 1;
    else if (!strcmp(a, "-q"))
        *quiet = 1;
    else
        return 0;
    return 1;
}

/* Options with a value; 0 ok, -1 bad value or unknown option. */
static int parse_opt(const char *a, const char *v, memra_bench_opts *o)
{
    int n = 0;
    uint32_t u = 0;
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        o->model = v;
    else if (!strcmp(a, "--plans"))
        o->plans = v;
    else if (!strcmp(a, "--planner-scripts"))
        o->planner_scripts = v;
    else if (!strcmp(a, "--tiers") &&
             (n = memra_bench_parse_list(v, o->tiers, MEMRA_PLAN_MAX_TIERS, MEMRA_PLAN_MAX_B)) > 0)
        o->n_tiers = (uint32_t)n;
    else if (!strcmp(a, "--depths") &&
             (n = memra_bench_parse_list(v, o->depths, MEMRA_BENCH_MAX_DEPTHS, 1u << 22)) > 0)
        o->n_depths = (uint32_t)n;
    else if (!strcmp(a, "--ticks") && !parse_u32(v, 1000000, &o->ticks) && o->ticks)
        ;
    else if (!strcmp(a, "--warmup") && !parse_u32(v, 1000000, &o->warmup))
        ;
    else if (!strcmp(a, "--json"))
        o->json_path = v;
    else if (!strcmp(a, "--plot"))
        o->plot_path = v;
    else if (!strcmp(a, "--backend") && (!strcmp(v, "cuda") || !strcmp(v, "cpu")))
        o->backend = !strcmp(v, "cuda") ? MEMRA_BENCH_CUDA : MEMRA_BENCH_CPU;
    else if (!strcmp(a, "--device") && !parse_u32(v, 64, &u))
        o->device = (int)u;
    else if (!strcmp(a, "--seed") && !parse_u32(v, 0xffffffffu, &u))
        o->seed = u;
    else if (!strcmp(a, "--prefill") && (!strcmp(v, "synthetic") || !strcmp(v, "decode")))
        o->synthetic = !strcmp(v, "synthetic");
    else if (!strcmp(a, "--copy-mib") && !parse_u32(v, 1u << 20, &o->copy_mib) && o->copy_mib)
        ;
    else if (!strcmp(a, "--copy-reps") && !parse_u32(v, 10000, &o->copy_reps) && o->copy_reps)
        ;
    else if (!strcmp(a, "--norm-release") && !parse_tier_mask(v, &o->norm_release))
        ;
    else if (!strcmp(a, "--attn-split-ctas") && (!strcmp(v, "max") || !strcmp(v, "auto")))
        o->attn_split_ctas = !strcmp(v, "max") ? 0 : -1;
    else if (!strcmp(a, "--attn-split-ctas") && !parse_u32(v, 65535, &u) && u)
        o->attn_split_ctas = (int)u;
    else if (!strcmp(a, "--attn-auto") && !parse_tier_mask(v, &o->attn_auto))
        ;
    else if (!strcmp(a, "--attn-prefetch") && !parse_u32(v, MEMRA_ATTN_MAX_PREFETCH, &u))
        o->attn_prefetch = (int)u;
    else if (!strcmp(a, "--gdn-prefetch") && !parse_u32(v, MEMRA_GDN_MAX_PREFETCH, &u))
        o->gdn_prefetch = (int)u;
    else if (!strcmp(a, "--gdn-split") && !strcmp(v, "auto"))
        o->gdn_split = 0;
    else if (!strcmp(a, "--gdn-split") && !parse_u32(v, 4, &u) && (u == 1 || u == 2 || u == 4))
        o->gdn_split = (int)u;
    else if (!strcmp(a, "--l2-side") && !parse_u32(v, MEMRA_BENCH_L2_SIDE_MAX, &u))
        o->l2_side = (int)u;
    else
        return -1;
    return 0;
}

static int parse_args(int argc, char **argv, memra_bench_opts *o, int *quiet)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 2;
        if (parse_flag(a, o, quiet))
            continue;
        if (i + 1 >= argc || parse_opt(a, argv[i + 1], o) != 0) {
            fprintf(stderr, "memra-bench: bad option %s%s%s (see --help)\n", a,
                    i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
            return 1;
        }
        i++;
    }
    if (!o->model) {
        fprintf(stderr, "memra-bench: need -m MODEL (see --help)\n");
        return 1;
    }
    if (o->l2_side_spread && (o->l2_side == MEMRA_BENCH_UNSET || o->l2_side == 0)) {
        fprintf(stderr, "memra-bench: --l2-side-spread shapes --l2-side MIB: give both\n");
        return 1;
    }
    return 0;
}

static void on_log(int level, const char *msg, void *user)
{
    (void)user;
    fprintf(stderr, "memra-bench: %s%s\n",
            level == MEMRA_LOG_ERROR  ? "error: "
            : level == MEMRA_LOG_WARN ? "warning: "
                                      : "",
            msg);
}

/* Header, table, JSON lines (stdout and --json), targets, plot. */
static int report(const memra_bench_report *r, memra_err *err)
{
    int rc;
    memra_bench_print_header(r, stdout);
    memra_bench_print_table(r, stdout);
    printf("\n");
    if ((rc = memra_bench_write_json(r, stdout, err)) != MEMRA_OK)
        return rc;
    if (r->opts.json_path) {
        FILE *f = fopen(r->opts.json_path, "w");
        if (!f)
            return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: %s", r->opts.json_path, strerror(errno));
        rc = memra_bench_write_json(r, f, err);
        if (fclose(f) != 0 && rc == MEMRA_OK)
            rc = MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: write failed", r->opts.json_path);
        if (rc != MEMRA_OK)
            return rc;
    }
    memra_bench_print_targets(r, stdout);
    if (r->opts.plot_path) {
        char script[1100];
        int drawn = 0;
        snprintf(script, sizeof script, "%s.gp", r->opts.plot_path);
        if ((rc = memra_bench_plot(r, r->opts.plot_path, script, &drawn, err)) != MEMRA_OK)
            return rc;
        printf("plot: %s (%s)\n", drawn ? r->opts.plot_path : script,
               drawn ? "gnuplot, svg" : "gnuplot not installed: script only");
    }
    return MEMRA_OK;
}

int main(int argc, char **argv)
{
    memra_bench_opts o;
    int quiet = 0;
    memra_bench_opts_init(&o);
    const int prc = parse_args(argc, argv, &o, &quiet);
    if (prc) {
        usage(prc == 2 ? stdout : stderr);
        return prc == 2 ? 0 : 2;
    }
    memra_log_set_callback(on_log, NULL);
    memra_log_set_level(quiet ? MEMRA_LOG_WARN : MEMRA_LOG_INFO);
    memra_err err;
    memra_err_clear(&err);
    memra_bench_report *r = NULL;
    int rc = memra_bench_run(&o, &r, &err);
    if (rc == MEMRA_OK)
        rc = report(r, &err);
    memra_bench_report_free(r);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-bench: %s: %s\n", memra_strerror(rc), err.msg);
        return 1;
    }
    return 0;
}
