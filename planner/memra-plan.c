/*
 * memra-plan — compile a GGUF checkpoint into launch plans (see planner/planner.h).
 *
 *   memra-plan -m MODEL -o DIR [--tiers 1,2,4,8,12,16] [--stages N | --cuts L1,L2,...]
 *              [--kv f16|q8_0] [--plans DIR] [--budget N] [-q]
 *              [--precompile sm_NN [--cache-dir PATH] [--jobs N]]
 *   memra-plan -o DIR --precompile sm_NN [--cache-dir PATH] [--jobs N]   (existing plans)
 *
 * Writes DIR/manifest.json and DIR/plan-b<tier>-s<stage>.json, prints the summary (launches
 * per tick, weight and state bytes per tick, arena size, kernel specializations) on stdout
 * and progress on stderr. --precompile then compiles every NVRTC specialization DIR's
 * manifest lists into the kernel disk cache (without -m: DIR's plans as they are), so a
 * serving start compiles nothing. Exit status: 0 ok, 1 failure (message on stderr), 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

/* Everything the command line says beyond the planner's options. */
typedef struct cli {
    int quiet;
    int sm;                /* --precompile: 10 * major + minor; 0 = no precompile */
    const char *cache_dir; /* --cache-dir; NULL = the NVRTC default */
    uint32_t jobs;         /* --jobs; 0 = one per core */
} cli;

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-plan -m MODEL -o DIR [--tiers 1,2,4,8,12,16] "
               "[--stages N | --cuts L1,L2,...]\n"
               "                  [--kv f16|q8_0] [--plans DIR] [--budget INSTRUCTIONS] [-q]\n"
               "                  [--precompile sm_NN [--cache-dir PATH] [--jobs N]]\n"
               "       memra-plan -o DIR --precompile sm_NN [--cache-dir PATH] [--jobs N]\n"
               "  --precompile sm_90 (or 90): compile every NVRTC kernel DIR's plans need into\n"
               "  the kernel disk cache (--cache-dir, default $XDG_CACHE_HOME/memra/kernels);\n"
               "  without -m, DIR's existing plans are used. NN >= 70.\n");
}

/* "1,2,4" -> values; returns the count or -1. */
static int parse_list(const char *s, uint32_t *out, int max)
{
    int n = 0;
    while (*s) {
        char *end = NULL;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || errno || v > 1000000 || n >= max || (*end && *end != ','))
            return -1;
        out[n++] = (uint32_t)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static void on_progress(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "memra-plan: %s\n", line);
}

/* "sm_90" or "90" -> 90; 0 when malformed or older than sm_70 (Volta: the oldest
 * architecture NVRTC still targets; the templates themselves need sm_90 and say so per key). */
static int parse_arch(const char *v)
{
    if (strncmp(v, "sm_", 3) == 0)
        v += 3;
    char *end = NULL;
    errno = 0;
    const long sm = strtol(v, &end, 10);
    if (end == v || *end || errno || sm < 70 || sm > 999)
        return 0;
    return (int)sm;
}

/* Options that are not the planner's; 1 = taken, 0 = not ours, -1 = bad value. */
static int parse_cli_opt(const char *a, const char *v, cli *c)
{
    uint32_t n;
    if (strcmp(a, "--precompile") == 0) {
        if ((c->sm = parse_arch(v)) != 0)
            return 1;
        fprintf(stderr, "memra-plan: --precompile '%s': want sm_NN or NN with NN >= 70\n", v);
        return -1;
    }
    if (strcmp(a, "--cache-dir") == 0) {
        c->cache_dir = v;
        return 1;
    }
    if (strcmp(a, "--jobs") == 0)
        return parse_list(v, &n, 1) == 1 && n ? (c->jobs = n, 1) : -1;
    return 0;
}

static int parse_args(int argc, char **argv, memra_planner_opts *o, cli *c)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n;
        if (strcmp(a, "-q") == 0) {
            c->quiet = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if ((n = parse_cli_opt(a, v, c)) != 0) {
            if (n < 0)
                return -1;
        } else if (strcmp(a, "-m") == 0)
            o->model_path = v;
        else if (strcmp(a, "-o") == 0)
            o->out_dir = v;
        else if (strcmp(a, "--plans") == 0)
            o->plans_dir = v;
        else if (strcmp(a, "--tiers") == 0 && (n = parse_list(v, o->tiers, MEMRA_PLAN_MAX_TIERS)) > 0)
            o->n_tiers = (uint32_t)n;
        else if (strcmp(a, "--cuts") == 0 && (n = parse_list(v, o->cuts, MEMRA_PLAN_MAX_STAGES - 1)) > 0)
            o->n_cuts = (uint32_t)n;
        else if (strcmp(a, "--stages") == 0 && parse_list(v, &o->n_stages, 1) == 1 && o->n_stages)
            continue;
        else if (strcmp(a, "--budget") == 0)
            o->budget = strtoull(v, NULL, 10);
        else if (strcmp(a, "--kv") == 0 && (strcmp(v, "f16") == 0 || strcmp(v, "q8_0") == 0))
            o->kv_dtype = strcmp(v, "f16") == 0 ? MEMRA_DT_F16 : MEMRA_DT_Q8_0;
        else
            return -1;
    }
    if (o->n_cuts && o->n_stages > 1 && o->n_stages != o->n_cuts + 1)
        return -1;
    if ((c->cache_dir || c->jobs) && !c->sm)
        return -1;
    /* -o alone is allowed with --precompile: the existing plans of DIR */
    return o->out_dir && (o->model_path || c->sm) ? 0 : -1;
}

static void on_precompile(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "memra-plan: precompile %s\n", line);
}

static int precompile(const char *dir, const cli *c)
{
    memra_precompile_opts po = {.plan_dir = dir, .sm = c->sm, .cache_dir = c->cache_dir,
                                .n_threads = c->jobs};
    memra_precompile_stats st;
    memra_err err;
    memra_err_clear(&err);
    if (!c->quiet)
        po.progress = on_precompile;
    const int rc = memra_planner_precompile(&po, &st, &err);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-plan: precompile: %s: %s\n", memra_strerror(rc), err.msg);
        return 1;
    }
    fprintf(stderr,
            "memra-plan: precompiled %u NVRTC kernel(s) for sm_%d in %.1f s: %u compiled, %u "
            "already cached (%u fixed nvcc kernel key(s) skipped), cache %s\n",
            st.n_keys, c->sm, st.seconds, st.compiled, st.cached, st.n_fixed,
            c->cache_dir ? c->cache_dir : "(default)");
    return 0;
}

int main(int argc, char **argv)
{
    memra_planner_opts o;
    memra_planner_result *res = NULL;
    memra_err err;
    cli c = {0};
    memra_planner_opts_init(&o);
    memra_err_clear(&err);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &o, &c) != 0) {
        usage(stderr);
        return 2;
    }
    if (!c.quiet)
        o.progress = on_progress;
    if (o.model_path) {
        int rc = memra_planner_run(&o, &res, &err);
        if (rc != MEMRA_OK) {
            fprintf(stderr, "memra-plan: %s: %s\n", memra_strerror(rc), err.msg);
            return 1;
        }
        memra_planner_print_summary(res, stdout);
        memra_planner_result_free(res);
    }
    return c.sm ? precompile(o.out_dir, &c) : 0;
}
