/*
 * report.c — what memra-bench prints and writes: the configuration header, the human table,
 * one JSON object per line (config, case, phase, removal, target), the PASS/MISS lines of the
 * issue's targets, and the gnuplot script + SVG (tokens/s and fraction of copy bandwidth
 * against the tier, one line per depth).
 *
 * Must not: measure or recompute anything (every number comes from the report), or need a
 * display: the plot uses gnuplot's svg terminal, run as a child process.
 */
#include <errno.h>
#include <jansson.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"

extern char **environ;

/* ====================================== header ======================================= */

static void list_str(const uint32_t *v, uint32_t n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%u", i ? "," : "", v[i]);
}

/* printf onto the end of buf (size n), truncating. */
static void append(char *buf, size_t n, const char *fmt, ...)
{
    const size_t k = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

/* --attn-split-ctas' value as the option reads it: max, auto or the count. */
static const char *attn_split_ctas_str(int v)
{
    static char buf[16];
    if (v <= 0)
        return v == 0 ? "max" : "auto";
    snprintf(buf, sizeof buf, "%d", v);
    return buf;
}

/* The tiers of a tier mask (--norm-release, --attn-auto; bit b: tier b) into out
 * [MEMRA_PLAN_MAX_B]; their count. */
static uint32_t tier_mask_list(int mask, uint32_t *out)
{
    uint32_t n = 0;
    for (uint32_t b = 1; mask > 0 && b <= MEMRA_PLAN_MAX_B; b++)
        if ((mask >> b) & 1)
            out[n++] = b;
    return n;
}

/* A tier mask as text: "1,2", or "none" for no tier. */
static void tier_mask_str(int mask, char *buf, size_t n)
{
    uint32_t t[MEMRA_PLAN_MAX_B];
    const uint32_t k = tier_mask_list(mask, t);
    if (k)
        list_str(t, k, buf, n);
    else
        snprintf(buf, n, "none");
}

/* Appends " OPT none" / " OPT 1,2" for a tier-mask option given (mask >= 0; -1: not given). */
static void append_tier_mask(char *buf, size_t n, const char *opt, int mask)
{
    char list[96];
    if (mask < 0)
        return;
    tier_mask_str(mask, list, sizeof list);
    append(buf, n, " %s %s", opt, list);
}

void memra_bench_print_header(const memra_bench_report *r, FILE *f)
{
    const memra_bench_opts *o = &r->opts;
    char tiers[96], depths[160], norm_release[120] = "", sched[256] = "";
    list_str(o->tiers, o->n_tiers, tiers, sizeof tiers);
    list_str(o->depths, o->n_depths, depths, sizeof depths);
    append_tier_mask(norm_release, sizeof norm_release, "--norm-release", o->norm_release);
    /* the scheduling options given (absent: the backend's defaults) */
    if (o->attn_split_ctas != MEMRA_BENCH_UNSET)
        append(sched, sizeof sched, " --attn-split-ctas %s",
               attn_split_ctas_str(o->attn_split_ctas));
    append_tier_mask(sched, sizeof sched, "--attn-auto", o->attn_auto);
    if (o->attn_prefetch != MEMRA_BENCH_UNSET)
        append(sched, sizeof sched, " --attn-prefetch %d", o->attn_prefetch);
    if (o->gdn_prefetch != MEMRA_BENCH_UNSET)
        append(sched, sizeof sched, " --gdn-prefetch %d", o->gdn_prefetch);
    if (o->gdn_split == 0)
        append(sched, sizeof sched, " --gdn-split auto");
    else if (o->gdn_split != MEMRA_BENCH_UNSET)
        append(sched, sizeof sched, " --gdn-split %d", o->gdn_split);
    if (o->l2_side != MEMRA_BENCH_UNSET)
        append(sched, sizeof sched, " --l2-side %d", o->l2_side);
    if (o->l2_side_spread)
        append(sched, sizeof sched, " --l2-side-spread");
    fprintf(f, "memra-bench\n");
    fprintf(f,
            "  model     %s: \"%s\", %s, %u layers, n_embd %u, n_vocab %u, %s, %.3g %s "
            "file, %.3g params%s%s\n",
            o->model, r->model_name, r->arch, r->n_layer, r->n_embd, r->n_vocab, r->file_type,
            r->file_bytes >= 1e9 ? r->file_bytes / 1e9 : r->file_bytes / 1e6,
            r->file_bytes >= 1e9 ? "GB" : "MB", (double)r->n_params,
            r->preset[0] ? ", forge preset " : "", r->preset);
    char how[600] = "";
    if (r->plans_generated && o->planner_scripts)
        snprintf(how, sizeof how, " (planned in-process by the scripts in %s, removed after the run)",
                 o->planner_scripts);
    else if (r->plans_generated)
        snprintf(how, sizeof how, " (planned in-process, removed after the run)");
    fprintf(f, "  plans     %s%s, %u stage(s), KV %s\n", r->plans_dir, how, r->n_stages,
            r->kv_dtype);
    fprintf(f, "  backend   %s on %s\n", r->backend, r->device);
    fprintf(f,
            "  options   --tiers %s --depths %s --ticks %u --warmup %u%s%s%s%s%s%s --seed %llu "
            "--prefill %s%s --copy-mib %u --copy-reps %u\n",
            tiers, depths, o->ticks, o->warmup,
            !o->graphs ? " --no-graph"
            : o->eager ? ""
                       : " --no-eager",
            o->no_fusion ? " --no-fusion" : "", norm_release, sched, o->phases ? " --phases" : "",
            o->removal ? " --removal" : "", (unsigned long long)o->seed,
            o->synthetic ? "synthetic" : "decode", o->isolation ? "" : " --no-isolation",
            o->copy_mib, o->copy_reps);
    fprintf(f, "  engine    n_ctx %u, %u slots, opened in %.0f ms%s\n", r->n_ctx, r->n_slots,
            r->open_ms,
            o->backend != MEMRA_BENCH_CUDA || !o->graphs ? ""
            : o->eager                                   ? " (graph pass, then an eager pass)"
                                                         : " (graph pass only: --no-eager)");
    fprintf(f, "  copy BW   %.1f GB/s best, %.1f median (%s; bytes read + written)\n", r->copy_gbs,
            r->copy_median_gbs, r->copy_method);
    if (r->sched.known) { /* what the engines ran with, the defaults included */
        const memra_bench_sched *s = &r->sched;
        char nrl[96], atl[96];
        tier_mask_str((int)s->norm_release_tiers, nrl, sizeof nrl);
        tier_mask_str((int)s->attn_auto_tiers, atl, sizeof atl);
        fprintf(f,
                "  schedule  attention split CTAs %s (AUTO at tiers %s), prefetch %d; "
                "norm release at tiers %s; gdn prefetch %d, split %d; L2 side %u MiB%s; fuse "
                "%d\n",
                attn_split_ctas_str(s->attn_split_ctas), s->attn_split_ctas ? "none" : atl,
                s->attn_prefetch, nrl, s->gdn_prefetch, s->gdn_split, s->l2_side_mib,
                s->l2_side_spread ? " spread" : "", s->fuse);
    }
    fprintf(f, "  host time %s\n", r->host_method);
    fprintf(f, "  contexts  %s\n", r->fill_method);
}

/* ======================================= table ======================================= */

static const char *iso_str(const memra_bench_case *c, char *buf, size_t n)
{
    if (c->isolation < 0)
        return c->tier == 1 ? "(B=1)" : "-";
    if (c->isolation)
        return "ok";
    snprintf(buf, n, "%u DIFF", c->rows_differ);
    return buf;
}

static int cmp_marginal(const void *a, const void *b)
{
    const double x = (*(const memra_bench_phase *const *)a)->marginal_ms;
    const double y = (*(const memra_bench_phase *const *)b)->marginal_ms;
    return (x < y) - (x > y); /* descending */
}

/* Per case, the op classes ranked by marginal cost, and how much of the tick they explain. */
static void print_phases(const memra_bench_report *r, FILE *f)
{
    fprintf(f,
            "\nphases (%s): marginal cost of an op class = median tick with each of its "
            "launches issued twice - median tick as planned,\nmeasured as interleaved pairs "
            "(a ranking, not a partition of wall time)\n",
            r->opts.backend == MEMRA_BENCH_CUDA && r->opts.graphs ? "graph replay" : "eager");
    fprintf(f, "%4s %6s %-12s %8s %10s %10s %10s %7s\n", "B", "depth", "op", "launches", "base_ms",
            "doubled_ms", "marginal", "share");
    const memra_bench_phase *list[MEMRA_OP_COUNT];
    for (uint32_t i = 0; i < r->n_phases; i++) {
        const memra_bench_phase *p0 = &r->phases[i];
        uint32_t n = 0, seen = 0;
        for (uint32_t k = 0; k < i; k++)
            seen |= r->phases[k].tier == p0->tier && r->phases[k].depth == p0->depth;
        if (seen)
            continue;
        double sum = 0, base = 0;
        for (uint32_t k = i; k < r->n_phases && n < MEMRA_OP_COUNT; k++)
            if (r->phases[k].tier == p0->tier && r->phases[k].depth == p0->depth)
                list[n++] = &r->phases[k];
        qsort(list, n, sizeof *list, cmp_marginal);
        for (uint32_t k = 0; k < n; k++) {
            const memra_bench_phase *p = list[k];
            fprintf(f, "%4u %6u %-12s %8u %10.3f %10.3f %10.3f %6.1f%%\n", p->tier, p->depth,
                    memra_op_get(p->op)->name, p->launches, p->base_ms, p->doubled_ms,
                    p->marginal_ms, p->base_ms > 0 ? 100 * p->marginal_ms / p->base_ms : 0);
            sum += p->marginal_ms;
            base += p->base_ms / n;
        }
        fprintf(f, "%4u %6u %-12s %8s %10.3f %10s %10.3f %6.1f%%\n", p0->tier, p0->depth, "(sum)",
                "", base, "", sum, base > 0 ? 100 * sum / base : 0);
    }
}

static const char *removal_name(const memra_bench_removal *x)
{
    return x->op >= 0 ? memra_op_get((uint32_t)x->op)->name : "(all)";
}

/* Per case, what each skippable class costs the tick at most (largest first), then all of
 * them at once: what the mat-vecs and the rest take alone. */
static void print_removals(const memra_bench_report *r, FILE *f)
{
    fprintf(f,
            "\nremoval (%s): the tick with every launch of an op class left out (values "
            "meaningless) against the tick as planned,\nmeasured as interleaved pairs: "
            "saved = the most that making the class faster can gain; (all) = every class "
            "listed at once\n",
            r->opts.backend == MEMRA_BENCH_CUDA && r->opts.graphs ? "graph replay" : "eager");
    fprintf(f, "%4s %6s %-12s %8s %10s %10s %10s %7s\n", "B", "depth", "op", "launches", "base_ms",
            "removed_ms", "saved", "share");
    for (uint32_t i = 0; i < r->n_removals; i++) {
        const memra_bench_removal *x0 = &r->removals[i];
        uint32_t seen = 0;
        for (uint32_t k = 0; k < i; k++)
            seen |= r->removals[k].tier == x0->tier && r->removals[k].depth == x0->depth;
        if (seen)
            continue;
        const memra_bench_removal *list[MEMRA_OP_COUNT + 1], *all = NULL;
        uint32_t n = 0;
        for (uint32_t k = i; k < r->n_removals && n < MEMRA_OP_COUNT; k++) {
            const memra_bench_removal *x = &r->removals[k];
            if (x->tier != x0->tier || x->depth != x0->depth)
                continue;
            if (x->op < 0)
                all = x;
            else
                list[n++] = x;
        }
        for (uint32_t a = 1; a < n; a++) /* insertion sort, saved descending */
            for (uint32_t b = a; b > 0 && list[b]->saved_ms > list[b - 1]->saved_ms; b--) {
                const memra_bench_removal *t = list[b];
                list[b] = list[b - 1];
                list[b - 1] = t;
            }
        if (all)
            list[n++] = all;
        for (uint32_t k = 0; k < n; k++) {
            const memra_bench_removal *x = list[k];
            fprintf(f, "%4u %6u %-12s %8u %10.3f %10.3f %10.3f %6.1f%%\n", x->tier, x->depth,
                    removal_name(x), x->launches, x->base_ms, x->removed_ms, x->saved_ms,
                    x->base_ms > 0 ? 100 * x->saved_ms / x->base_ms : 0);
        }
    }
}

void memra_bench_print_table(const memra_bench_report *r, FILE *f)
{
    fprintf(f, "\n%4s %6s %-5s %9s %9s %10s %8s %8s %9s %8s %6s %6s %6s %-7s %7s\n", "B",
            "depth", "mode", "median_ms", "p99_ms", "tok/s", "host_us", "submit", "MB/tick", "GB/s",
            "%BW", "launch", "nodes", "rows=t1", "graph_x");
    for (uint32_t i = 0; i < r->n_cases; i++) {
        const memra_bench_case *c = &r->cases[i];
        char iso[32], gx[16] = "-";
        if (c->graph && c->eager_median_ms > 0)
            snprintf(gx, sizeof gx, "%.2f", c->eager_median_ms / c->median_ms);
        fprintf(f,
                "%4u %6u %-5s %9.3f %9.3f %10.1f %8.1f %8.1f %9.1f %8.1f %5.1f%% %6u %6u %-7s %7s\n",
                c->tier, c->depth, c->graph ? "graph" : "eager", c->median_ms, c->p99_ms, c->tok_s,
                c->host_us, c->launch_us, c->bytes / 1e6, c->gbs, 100 * c->frac_bw, c->launches,
                c->graph_nodes, iso_str(c, iso, sizeof iso), gx);
    }
    if (r->n_phases)
        print_phases(r, f);
    if (r->n_removals)
        print_removals(r, f);
}

/* ======================================== JSON ======================================= */

static json_t *u32_array(const uint32_t *v, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *config_json(const memra_bench_report *r)
{
    const memra_bench_opts *o = &r->opts;
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("config"));
    json_object_set_new(j, "model", json_string(o->model));
    json_object_set_new(j, "model_name", json_string(r->model_name));
    json_object_set_new(j, "arch", json_string(r->arch));
    json_object_set_new(j, "file_type", json_string(r->file_type));
    json_object_set_new(j, "forge_preset", json_string(r->preset));
    json_object_set_new(j, "file_bytes", json_integer((json_int_t)r->file_bytes));
    json_object_set_new(j, "n_params", json_integer((json_int_t)r->n_params));
    json_object_set_new(j, "n_layer", json_integer(r->n_layer));
    json_object_set_new(j, "n_embd", json_integer(r->n_embd));
    json_object_set_new(j, "n_vocab", json_integer(r->n_vocab));
    json_object_set_new(j, "plans", json_string(r->plans_dir));
    json_object_set_new(j, "plans_generated", json_boolean(r->plans_generated));
    json_object_set_new(j, "planner_scripts",
                        r->opts.planner_scripts ? json_string(r->opts.planner_scripts) : json_null());
    json_object_set_new(j, "n_stages", json_integer(r->n_stages));
    json_object_set_new(j, "kv", json_string(r->kv_dtype));
    json_object_set_new(j, "backend", json_string(r->backend));
    json_object_set_new(j, "device", json_string(r->device));
    json_object_set_new(j, "tiers", u32_array(o->tiers, o->n_tiers));
    json_object_set_new(j, "depths", u32_array(o->depths, o->n_depths));
    json_object_set_new(j, "ticks", json_integer(o->ticks));
    json_object_set_new(j, "warmup", json_integer(o->warmup));
    json_object_set_new(j, "graphs", json_boolean(o->graphs));
    json_object_set_new(j, "eager", json_boolean(!o->graphs || o->eager)); /* an eager pass ran */
    json_object_set_new(j, "fusion", json_boolean(!o->no_fusion));
    if (o->norm_release >= 0) { /* the tiers of --norm-release; absent: the backend default */
        uint32_t nr[MEMRA_PLAN_MAX_B];
        json_object_set_new(j, "norm_release_tiers",
                            u32_array(nr, tier_mask_list(o->norm_release, nr)));
    }
    if (o->attn_split_ctas != MEMRA_BENCH_UNSET) /* absent: the backend default (auto at tier 1) */
        json_object_set_new(j, "attn_split_ctas",
                            json_string(attn_split_ctas_str(o->attn_split_ctas)));
    if (o->attn_auto >= 0) { /* the tiers of --attn-auto; absent: the backend default */
        uint32_t at[MEMRA_PLAN_MAX_B];
        json_object_set_new(j, "attn_auto_tiers", u32_array(at, tier_mask_list(o->attn_auto, at)));
    }
    if (o->attn_prefetch != MEMRA_BENCH_UNSET) /* absent: the backend default (2) */
        json_object_set_new(j, "attn_prefetch", json_integer(o->attn_prefetch));
    if (o->gdn_prefetch != MEMRA_BENCH_UNSET) /* absent: the backend default (0) */
        json_object_set_new(j, "gdn_prefetch", json_integer(o->gdn_prefetch));
    if (o->gdn_split != MEMRA_BENCH_UNSET) /* 0: the launcher's choice; absent: the default */
        json_object_set_new(j, "gdn_split", json_integer(o->gdn_split));
    if (o->l2_side != MEMRA_BENCH_UNSET) /* absent: the backend default (0, off) */
        json_object_set_new(j, "l2_side_mib", json_integer(o->l2_side));
    if (o->l2_side_spread) /* absent: end to end */
        json_object_set_new(j, "l2_side_spread", json_true());
    if (r->sched.known) { /* the CUDA engines' scheduling options, defaults included */
        const memra_bench_sched *s = &r->sched;
        uint32_t nr[MEMRA_PLAN_MAX_B], at[MEMRA_PLAN_MAX_B];
        json_t *c = json_object();
        json_object_set_new(c, "fuse", json_integer(s->fuse));
        json_object_set_new(c, "attn_split_ctas",
                            json_string(attn_split_ctas_str(s->attn_split_ctas)));
        json_object_set_new(c, "attn_auto_tiers",
                            u32_array(at, tier_mask_list((int)s->attn_auto_tiers, at)));
        json_object_set_new(c, "attn_prefetch", json_integer(s->attn_prefetch));
        json_object_set_new(c, "norm_release_tiers",
                            u32_array(nr, tier_mask_list((int)s->norm_release_tiers, nr)));
        json_object_set_new(c, "gdn_prefetch", json_integer(s->gdn_prefetch));
        json_object_set_new(c, "gdn_split", json_integer(s->gdn_split));
        json_object_set_new(c, "l2_side_mib", json_integer(s->l2_side_mib));
        json_object_set_new(c, "l2_side_spread", json_boolean(s->l2_side_spread));
        json_object_set_new(j, "cuda_sched", c);
    }
    json_object_set_new(j, "phases", json_boolean(o->phases));
    json_object_set_new(j, "removal", json_boolean(o->removal));
    json_object_set_new(j, "isolation", json_boolean(o->isolation));
    json_object_set_new(j, "prefill", json_string(o->synthetic ? "synthetic" : "decode"));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(j, "n_slots", json_integer(r->n_slots));
    json_object_set_new(j, "open_ms", json_real(r->open_ms));
    json_object_set_new(j, "copy_gbs", json_real(r->copy_gbs));
    json_object_set_new(j, "copy_median_gbs", json_real(r->copy_median_gbs));
    json_object_set_new(j, "copy_method", json_string(r->copy_method));
    json_object_set_new(j, "host_method", json_string(r->host_method));
    return j;
}

static json_t *case_json(const memra_bench_report *r, const memra_bench_case *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("case"));
    json_object_set_new(j, "backend", json_string(r->backend));
    json_object_set_new(j, "model_name", json_string(r->model_name));
    json_object_set_new(j, "tier", json_integer(c->tier));
    json_object_set_new(j, "depth", json_integer(c->depth));
    json_object_set_new(j, "mode", json_string(c->graph ? "graph" : "eager"));
    json_object_set_new(j, "ticks", json_integer(c->ticks));
    json_object_set_new(j, "median_ms", json_real(c->median_ms));
    json_object_set_new(j, "p99_ms", json_real(c->p99_ms));
    json_object_set_new(j, "min_ms", json_real(c->min_ms));
    json_object_set_new(j, "mean_ms", json_real(c->mean_ms));
    json_object_set_new(j, "tok_s", json_real(c->tok_s));
    json_object_set_new(j, "host_us", json_real(c->host_us));
    json_object_set_new(j, "host_p99_us", json_real(c->host_p99_us));
    json_object_set_new(j, "host_launch_us", json_real(c->launch_us));
    json_object_set_new(j, "weight_bytes", json_integer((json_int_t)c->weight_bytes));
    json_object_set_new(j, "kv_bytes", json_integer((json_int_t)c->kv_bytes));
    json_object_set_new(j, "state_bytes", json_integer((json_int_t)c->state_bytes));
    json_object_set_new(j, "bytes", json_integer((json_int_t)c->bytes));
    json_object_set_new(j, "gbs", json_real(c->gbs));
    json_object_set_new(j, "frac_bw", json_real(c->frac_bw));
    json_object_set_new(j, "launches", json_integer(c->launches));
    if (c->attn_ctas) /* CUDA with attention: the split grid this case ran */
        json_object_set_new(j, "attn_split_ctas_used", json_integer(c->attn_ctas));
    if (c->l2_forks) { /* CUDA with the side-branch prefetch: its launches and bytes per tick */
        json_object_set_new(j, "l2_side_forks", json_integer(c->l2_forks));
        json_object_set_new(j, "l2_side_bytes", json_integer((json_int_t)c->l2_bytes));
    }
    json_object_set_new(j, "graph_nodes", json_integer(c->graph_nodes));
    json_object_set_new(j, "isolation",
                        c->isolation < 0 ? json_null() : json_boolean(c->isolation));
    json_object_set_new(j, "rows_differ", json_integer(c->rows_differ));
    json_object_set_new(j, "logits_differ", json_integer(c->logits_differ));
    json_object_set_new(j, "max_abs_diff", json_real(c->max_abs_diff));
    if (c->has_logits_xxh64) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->logits_xxh64);
        json_object_set_new(j, "logits_xxh64", json_string(hex));
    } else {
        json_object_set_new(j, "logits_xxh64", json_null());
    }
    json_object_set_new(j, "eager_median_ms",
                        c->eager_median_ms > 0 ? json_real(c->eager_median_ms) : json_null());
    json_object_set_new(j, "graph_speedup",
                        c->graph && c->eager_median_ms > 0
                            ? json_real(c->eager_median_ms / c->median_ms)
                            : json_null());
    return j;
}

static json_t *phase_json(const memra_bench_phase *p)
{
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("phase"));
    json_object_set_new(j, "tier", json_integer(p->tier));
    json_object_set_new(j, "depth", json_integer(p->depth));
    json_object_set_new(j, "op", json_string(memra_op_get(p->op)->name));
    json_object_set_new(j, "launches", json_integer(p->launches));
    json_object_set_new(j, "base_ms", json_real(p->base_ms));
    json_object_set_new(j, "doubled_ms", json_real(p->doubled_ms));
    json_object_set_new(j, "marginal_ms", json_real(p->marginal_ms));
    return j;
}

static json_t *removal_json(const memra_bench_removal *x)
{
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("removal"));
    json_object_set_new(j, "tier", json_integer(x->tier));
    json_object_set_new(j, "depth", json_integer(x->depth));
    json_object_set_new(j, "op", json_string(removal_name(x)));
    json_object_set_new(j, "launches", json_integer(x->launches));
    json_object_set_new(j, "base_ms", json_real(x->base_ms));
    json_object_set_new(j, "removed_ms", json_real(x->removed_ms));
    json_object_set_new(j, "saved_ms", json_real(x->saved_ms));
    return j;
}

static json_t *target_json(const memra_bench_target *t)
{
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("target"));
    json_object_set_new(j, "name", json_string(t->name));
    json_object_set_new(j, "pass", json_boolean(t->pass));
    json_object_set_new(j, "detail", json_string(t->detail));
    return j;
}

static int emit(json_t *j, FILE *f, memra_err *err)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "JSON line: out of memory");
    const int ok = fprintf(f, "%s\n", s) > 0;
    free(s);
    return ok ? MEMRA_OK : MEMRA_FAIL(err, MEMRA_ERR_IO, "JSON line: write failed");
}

int memra_bench_write_json(const memra_bench_report *r, FILE *f, memra_err *err)
{
    int rc = emit(config_json(r), f, err);
    for (uint32_t i = 0; i < r->n_cases && rc == MEMRA_OK; i++)
        rc = emit(case_json(r, &r->cases[i]), f, err);
    for (uint32_t i = 0; i < r->n_phases && rc == MEMRA_OK; i++)
        rc = emit(phase_json(&r->phases[i]), f, err);
    for (uint32_t i = 0; i < r->n_removals && rc == MEMRA_OK; i++)
        rc = emit(removal_json(&r->removals[i]), f, err);
    for (uint32_t i = 0; i < r->n_targets && rc == MEMRA_OK; i++)
        rc = emit(target_json(&r->targets[i]), f, err);
    return rc;
}

/* ====================================== targets ====================================== */

#define TARGET_DEPTH 1024 /* the targets are stated at depth 1024 */

/* The primary-mode case (graph when it ran) of (tier, depth), NULL when not run. */
static const memra_bench_case *find_case(const memra_bench_report *r, uint32_t tier, uint32_t depth)
{
    for (uint32_t i = 0; i < r->n_cases; i++)
        if (r->cases[i].tier == tier && r->cases[i].depth == depth)
            return &r->cases[i]; /* graph cases come first */
    return NULL;
}

static void add_target(memra_bench_report *r, const char *name, int pass, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add_target(memra_bench_report *r, const char *name, int pass, const char *fmt, ...)
{
    memra_bench_target *t = &r->targets[r->n_targets++];
    va_list ap;
    va_start(ap, fmt);
    snprintf(t->name, sizeof t->name, "%s", name);
    vsnprintf(t->detail, sizeof t->detail, fmt, ap);
    va_end(ap);
    t->pass = pass;
}

/* The eager case of (tier, depth), NULL when not run. */
static const memra_bench_case *find_eager(const memra_bench_report *r, uint32_t tier, uint32_t depth)
{
    for (uint32_t i = 0; i < r->n_cases; i++)
        if (!r->cases[i].graph && r->cases[i].tier == tier && r->cases[i].depth == depth)
            return &r->cases[i];
    return NULL;
}

/* "; largest phase: OP X ms marginal of a Y ms tick (Z%)" for (tier, depth) when --phases
 * measured it there, else "": what dominates a missed target. */
static void phase_note(const memra_bench_report *r, uint32_t tier, uint32_t depth, char *buf,
                       size_t n)
{
    const memra_bench_phase *top = NULL;
    for (uint32_t i = 0; i < r->n_phases; i++) {
        const memra_bench_phase *p = &r->phases[i];
        if (p->tier == tier && p->depth == depth && (!top || p->marginal_ms > top->marginal_ms))
            top = p;
    }
    buf[0] = 0;
    if (top && top->base_ms > 0)
        snprintf(buf, n, "; largest phase: %s %.3f ms marginal of a %.3f ms tick (%.0f%%)",
                 memra_op_get(top->op)->name, top->marginal_ms, top->base_ms,
                 100 * top->marginal_ms / top->base_ms);
}

/* Each target line says, when it is missed, by how much (the tick it needs) and, with
 * --phases, which op class dominates the tier it is stated at. */
void memra_bench_eval_targets(memra_bench_report *r)
{
    const memra_bench_case *b1 = find_case(r, 1, TARGET_DEPTH),
                           *b16 = find_case(r, 16, TARGET_DEPTH);
    char note[128];
    r->n_targets = 0;
    if (b1) {
        const int pass = b1->frac_bw >= 0.70;
        phase_note(r, 1, TARGET_DEPTH, note, sizeof note);
        if (pass || b1->frac_bw <= 0)
            add_target(r, "B=1 bandwidth >= 70% of copy BW", pass,
                       "%.1f%% of the copy bandwidth (target 70%%)", 100 * b1->frac_bw);
        else /* the same bytes at 70 % of the copy rate */
            add_target(r, "B=1 bandwidth >= 70% of copy BW", 0,
                       "%.1f%% of the copy bandwidth (target 70%%: a %.3f ms tick, %.3f ms "
                       "less than this %.3f)%s",
                       100 * b1->frac_bw, b1->median_ms * b1->frac_bw / 0.70,
                       b1->median_ms * (1 - b1->frac_bw / 0.70), b1->median_ms, note);
    }
    if (b1 && b16) {
        const double x = b1->tok_s > 0 ? b16->tok_s / b1->tok_s : 0;
        const char *name = "B=16 tok/s >= 10x B=1, rows bit-identical to tier 1";
        /* 16 rows in the time of 1.6 B=1 ticks */
        const double need_ms = 1.6 * b1->median_ms;
        phase_note(r, 16, TARGET_DEPTH, note, sizeof note);
        if (b16->isolation < 0)
            add_target(r, name, 0,
                       "%.2fx B=1 (target 10x); rows NOT compared with tier 1 (%s)", x,
                       !r->opts.isolation ? "--no-isolation"
                                          : "needs synthetic histories, not --prefill decode");
        else if (x >= 10.0)
            add_target(r, name, b16->isolation == 1,
                       "%.2fx B=1 (target 10x); %u of 16 rows differ from tier 1", x,
                       b16->rows_differ);
        else
            add_target(r, name, 0,
                       "%.2fx B=1 (target 10x: a %.3f ms B=16 tick, this one %.3f); "
                       "%u of 16 rows differ from tier 1%s",
                       x, need_ms, b16->median_ms, b16->rows_differ, note);
    }
    const memra_bench_case *worst = NULL;
    for (uint32_t i = 0; i < r->n_cases; i++) /* the primary mode: graph replay when it ran */
        if (r->cases[i].depth == TARGET_DEPTH && r->cases[i].graph == r->cases[0].graph &&
            (!worst || r->cases[i].host_us > worst->host_us))
            worst = &r->cases[i];
    if (worst && worst->host_us < 10.0)
        add_target(r, "host time per tick < 10 us at every tier", 1,
                   "worst median %.2f us (target < 10 us)", worst->host_us);
    else if (worst && worst->launch_us > 0) /* CUDA: the graph launch / eager enqueue */
        add_target(r, "host time per tick < 10 us at every tier", 0,
                   "worst median %.2f us at B=%u (target < 10 us), %.2f us of it the "
                   "submission",
                   worst->host_us, worst->tier, worst->launch_us);
    else if (worst)
        add_target(r, "host time per tick < 10 us at every tier", 0,
                   "worst median %.2f us at B=%u (target < 10 us)", worst->host_us, worst->tier);
    if (b1 && b1->graph && b1->eager_median_ms > 0) {
        const double x = b1->eager_median_ms / b1->median_ms;
        const memra_bench_case *e1 = find_eager(r, 1, TARGET_DEPTH);
        if (x >= 1.3 || !e1)
            add_target(r, "graph >= 1.3x eager at B=1", x >= 1.3, "%.2fx (target 1.3x)", x);
        else /* eager launches only cost the tick when their submission outruns the GPU */
            add_target(r, "graph >= 1.3x eager at B=1", 0,
                       "%.2fx (target 1.3x); eager submits a tick in %.3f ms, %s its %.3f ms "
                       "on the GPU",
                       x, e1->host_us / 1000, e1->host_us / 1000 < e1->median_ms ? "under" : "over",
                       e1->median_ms);
    }
}

void memra_bench_print_targets(const memra_bench_report *r, FILE *f)
{
    fprintf(f, "\n");
    if (!r->n_targets)
        fprintf(f, "targets: none covered (they are stated at depth %d: run with it in --depths)\n",
                TARGET_DEPTH);
    for (uint32_t i = 0; i < r->n_targets; i++)
        fprintf(f, "%s  %s: %s\n", r->targets[i].pass ? "PASS" : "MISS", r->targets[i].name,
                r->targets[i].detail);
}

/* ======================================== plot ======================================= */

/* A gnuplot single-quoted string: ' is doubled. */
static void gp_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* One inline data block per depth: tier, tokens/s, fraction of copy bandwidth. */
static void gp_data(const memra_bench_report *r, FILE *f)
{
    const int graph = r->n_cases && r->cases[0].graph;
    for (uint32_t d = 0; d < r->opts.n_depths; d++) {
        fprintf(f, "$d%u << EOD\n", d);
        for (uint32_t i = 0; i < r->n_cases; i++) {
            const memra_bench_case *c = &r->cases[i];
            if (c->depth == r->opts.depths[d] && c->graph == graph)
                fprintf(f, "%u %.6g %.6g\n", c->tier, c->tok_s, c->frac_bw);
        }
        fprintf(f, "EOD\n");
    }
}

static void gp_plot(const memra_bench_report *r, FILE *f, int col)
{
    fprintf(f, "plot ");
    for (uint32_t d = 0; d < r->opts.n_depths; d++)
        fprintf(f, "%s$d%u using 1:%d with linespoints lw 2 pt 7 title 'depth %u'",
                d ? ", \\\n     " : "", d, col, r->opts.depths[d]);
    fprintf(f, "\n");
}

static int write_script(const memra_bench_report *r, const char *svg, const char *script,
                        memra_err *err)
{
    FILE *f = fopen(script, "w");
    if (!f)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: %s", script, strerror(errno));
    char title[512], xt[128];
    snprintf(title, sizeof title, "memra-bench: %s (%s) on %s, %s", r->model_name, r->arch,
             r->device, r->n_cases && r->cases[0].graph ? "graph replay" : "eager");
    list_str(r->opts.tiers, r->opts.n_tiers, xt, sizeof xt);
    fprintf(f, "# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)\n");
    fprintf(
        f,
        "set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'\n");
    fprintf(f, "set output ");
    gp_str(f, svg);
    fprintf(f, "\nset multiplot layout 1,2 title ");
    gp_str(f, title);
    fprintf(f, " noenhanced\n");
    gp_data(r, f);
    uint32_t lo = r->opts.tiers[0], hi = r->opts.tiers[0];
    for (uint32_t i = 1; i < r->opts.n_tiers; i++) {
        lo = r->opts.tiers[i] < lo ? r->opts.tiers[i] : lo;
        hi = r->opts.tiers[i] > hi ? r->opts.tiers[i] : hi;
    }
    /* a margin on both ends, so the end tiers get their tics and points */
    fprintf(f,
            "set logscale x 2\nset xrange [%g:%g]\nset xtics (%s)\nset grid\n"
            "set key top left\n",
            lo / 1.25, hi * 1.25, xt);
    fprintf(f, "set xlabel 'batch tier B'\nset ylabel 'tokens/s (all rows)'\nset yrange [0:*]\n");
    gp_plot(r, f, 2);
    fprintf(f, "set ylabel 'fraction of copy bandwidth (%.0f GB/s)'\nset yrange [0:1.05]\n",
            r->copy_gbs);
    gp_plot(r, f, 3);
    fprintf(f, "unset multiplot\n");
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: write failed", script);
    return MEMRA_OK;
}

int memra_bench_plot(const memra_bench_report *r, const char *svg_path, const char *script_path,
                     int *rendered, memra_err *err)
{
    *rendered = 0;
    int rc = write_script(r, svg_path, script_path, err);
    if (rc != MEMRA_OK)
        return rc;
    pid_t pid;
    char *argv[] = {"gnuplot", (char *)script_path, NULL};
    const int e = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (e == ENOENT)
        return MEMRA_OK; /* no gnuplot: the script stays for later */
    if (e != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "gnuplot: %s", strerror(e));
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "gnuplot %s failed (status %d)", script_path, status);
    struct stat st;
    if (stat(svg_path, &st) != 0 || st.st_size == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "gnuplot ran but %s is missing or empty", svg_path);
    *rendered = 1;
    return MEMRA_OK;
}
