/*
 * memra-plan — compile a GGUF checkpoint into launch plans (see planner/planner.h).
 *
 *   memra-plan -m MODEL -o DIR [--tiers 1,2,4,8,12,16] [--stages N | --cuts L1,L2,...]
 *              [--kv f16|q8_0] [--plans DIR] [--budget N] [-q]
 *
 * Writes DIR/manifest.json and DIR/plan-b<tier>-s<stage>.json, prints the summary (launches
 * per tick, weight and state bytes per tick, arena size, kernel specializations) on stdout
 * and progress on stderr. Exit status: 0 ok, 1 failure (message on stderr), 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-plan -m MODEL -o DIR [--tiers 1,2,4,8,12,16] "
               "[--stages N | --cuts L1,L2,...]\n"
               "                  [--kv f16|q8_0] [--plans DIR] [--budget INSTRUCTIONS] [-q]\n");
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

static int parse_args(int argc, char **argv, memra_planner_opts *o, int *quiet)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n;
        if (strcmp(a, "-q") == 0) {
            *quiet = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "-m") == 0)
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
    return o->model_path && o->out_dir ? 0 : -1;
}

int main(int argc, char **argv)
{
    memra_planner_opts o;
    memra_planner_result *res = NULL;
    memra_err err;
    int quiet = 0;
    memra_planner_opts_init(&o);
    memra_err_clear(&err);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &o, &quiet) != 0) {
        usage(stderr);
        return 2;
    }
    if (!quiet)
        o.progress = on_progress;
    int rc = memra_planner_run(&o, &res, &err);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-plan: %s: %s\n", memra_strerror(rc), err.msg);
        return 1;
    }
    memra_planner_print_summary(res, stdout);
    memra_planner_result_free(res);
    return 0;
}
