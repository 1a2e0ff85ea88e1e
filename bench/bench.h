/*
 * bench.h — the memra-bench machinery (library memra_bench; the CLI is bench/memra-bench.c,
 * the CPU-mode test tests/test_bench.c).
 *
 * What a run measures, per (batch tier B, context depth d): the decode tick of a real plan
 * set on a real backend — median and p99 tick latency (CUDA events on the GPU, CLOCK_MONOTONIC
 * on the CPU), aggregate tokens/s (B / median), host time per tick, bytes moved per tick
 * (weights streamed + KV read/appended + recurrent state read and written back, from the
 * loaded plans' stats and d), achieved GB/s and its fraction of the copy bandwidth that the
 * run measures itself before the backend opens (bench/ceiling.cu on the GPU, memcpy on the
 * host), the per-tick launch and graph-node counts, whether every row of a B-wide tick is
 * bit-identical (memcmp of logits) to the same state run alone at tier 1, graph vs eager
 * (CUDA), and optionally (phases) each op class's marginal cost.
 *
 * Deep contexts start at once: sessions are put at position d with a synthetic, seeded
 * history (memra_<backend>_session_fill_synthetic), so a 32k-token case costs a fill, not
 * 32k ticks, and the same seed restores the same state for the isolation check.
 *
 * Must not: print (the report functions write to the FILE the caller passes; progress goes
 * through memra_log at INFO), leave temporary plan directories behind, or time anything but
 * the step call.
 */
#ifndef MEMRA_BENCH_H
#define MEMRA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "ops.h"
#include "plan.h"

#define MEMRA_BENCH_MAX_DEPTHS 16
#define MEMRA_BENCH_MAX_CASES (MEMRA_PLAN_MAX_TIERS * MEMRA_BENCH_MAX_DEPTHS)

typedef enum memra_bench_backend {
    MEMRA_BENCH_CPU = 0,
    MEMRA_BENCH_CUDA = 1,
} memra_bench_backend;

/* An integer option left to the backend's default. */
#define MEMRA_BENCH_UNSET (-1000)
/* --l2-side's largest value: runtime/backend_cuda.h MEMRA_CUDA_L2_SIDE_MAX_MIB (asserted
 * equal in bench_backend.c, where both are seen) */
#define MEMRA_BENCH_L2_SIDE_MAX 32

typedef struct memra_bench_opts {
    const char *model; /* GGUF checkpoint (required) */
    const char *plans; /* plan directory (memra-plan); NULL = plan in-process into a
                          temporary directory with exactly `tiers` (removed afterwards) */
    const char *planner_scripts; /* with plans NULL: the Lua planner scripts to plan with
                                    (memra-plan --plans); NULL = the source tree's plans/. A
                                    planner variant's A/B (bench/device-ab.sh) */
    uint32_t n_tiers;
    uint32_t tiers[MEMRA_PLAN_MAX_TIERS]; /* default 1,2,4,8,16; each a manifest tier */
    uint32_t n_depths;
    uint32_t depths[MEMRA_BENCH_MAX_DEPTHS]; /* default 0,1024,8192,32768 */
    uint32_t ticks;                          /* timed ticks per case (default 100) */
    uint32_t warmup;                         /* untimed ticks before them (default 5) */
    int graphs;                  /* 1 (default): CUDA runs graph replay and eager; 0: eager only */
    int eager;                   /* 1 (default): with graphs, an eager pass after the graph pass
                                    (graph_x, the graph target); 0 (--no-eager): the graph pass
                                    alone, half the time (A/Bs) */
    int phases;                  /* 1: per-op-class marginal cost (see memra_bench_phase) */
    int removal;                 /* 1: per op class that can be left out (memra_op_skippable),
                                    and all of them at once, the tick without its launches (see
                                    memra_bench_removal) */
    int no_fusion;               /* 1: CUDA launches every plan launch as planned (no SwiGLU
                                    fold, memra_cuda_opts.fuse = 0): the A/B of the fold */
    int norm_release;            /* -1 (default): the backend's default; else a bit mask of tiers
                                    (bit b: tier b) for memra_cuda_opts.norm_release_tiers */
    int attn_prefetch;           /* MEMRA_BENCH_UNSET (default): the backend's default; else
                                    memra_cuda_opts.attn_prefetch (key batches ahead, 0..8) */
    int gdn_prefetch;            /* MEMRA_BENCH_UNSET (default): the backend's default; else
                                    memra_cuda_opts.gdn_prefetch (state-row tasks ahead, 0..4) */
    int gdn_split;               /* MEMRA_BENCH_UNSET (default): the backend's default; else
                                    memra_cuda_opts.gdn_split (0 auto, 1, 2, 4) */
    int l2_side;                 /* MEMRA_BENCH_UNSET (default): the backend's default; else
                                    memra_cuda_opts.l2_side_mib (MiB per fork, 0..32) */
    int l2_side_spread;          /* 0 (default): end to end; 1: memra_cuda_opts.l2_side_spread
                                    (every warp's first bytes a share; needs l2_side > 0) */
    int attn_split_ctas;         /* MEMRA_BENCH_UNSET (default): the backend's default; else
                                    memra_cuda_opts.attn_split_ctas (0 one CTA per split, N, or
                                    -1 auto) at every tier (attn_auto_tiers 0 unless attn_auto
                                    is given too): attention's split grid, an A/B of scheduling */
    int attn_auto;               /* -1 (default): the backend's default (or 0 with
                                    attn_split_ctas); else memra_cuda_opts.attn_auto_tiers, a
                                    bit mask of tiers (bit b: tier b) */
    int isolation;               /* 1 (default): check rows of every B > 1 tick against tier 1 */
    int synthetic;               /* 1 (default): start each case from a synthetic history at its
                                    depth; 0: reach the depth with real decode ticks (slow at depth;
                                    no isolation check then) */
    memra_bench_backend backend; /* default MEMRA_BENCH_CUDA when built with it, else CPU */
    int device;                  /* CUDA device ordinal (default 0) */
    uint64_t seed;               /* synthetic histories and first tokens (default 1) */
    uint32_t copy_mib;           /* bytes the copy-bandwidth probe copies, MiB (default 4096 on the
                                    GPU, as tick-ceiling.cu; 256 on the host) */
    uint32_t copy_reps;          /* timed copies; the best counts (default 20) */
    const char *json_path;       /* also write the JSON lines here (NULL = stdout only) */
    const char *plot_path;       /* SVG to draw with gnuplot (NULL = none); the script is
                                    written next to it as <plot_path>.gp */
} memra_bench_opts;

void memra_bench_opts_init(memra_bench_opts *o);
/* "1,2,4" -> values (each 0..max, at most cap of them); -1 when malformed. */
int memra_bench_parse_list(const char *s, uint32_t *out, uint32_t cap, uint32_t max);

/* One (tier, depth, mode) measurement. */
typedef struct memra_bench_case {
    uint32_t tier, depth;
    int graph; /* 1: graph replay; 0: eager launches (or the CPU backend) */
    uint32_t ticks;
    double median_ms, p99_ms, min_ms, mean_ms; /* tick latency */
    double tok_s;                              /* tier / median */
    double host_us; /* median host time per tick (opts: see memra_bench_report.host_method) */
    double host_p99_us;
    double launch_us; /* median of host_us's submission part (CUDA: graph launch call) */
    uint64_t weight_bytes;  /* streamed per tick (plan stats) */
    uint64_t kv_bytes;      /* KV read (mean over the timed ticks) + the appended token */
    uint64_t state_bytes;   /* recurrent state read + written back */
    uint64_t bytes;         /* their sum */
    double gbs;             /* bytes / median */
    double frac_bw;         /* gbs / the measured copy bandwidth */
    uint32_t launches;      /* kernel launches per tick (plans of all stages, less the
                               launches the CUDA backend folds into the one before) */
    uint32_t attn_ctas;     /* CUDA: attention's split CTAs per (kv head, row) at this tier
                               (memra_cuda_info.attn_split_ctas); 0: none, or the CPU */
    uint32_t l2_forks;      /* CUDA: side-branch L2 prefetch launches per tick
                               (memra_cuda_info.l2_side_forks); 0: none, or the CPU */
    uint64_t l2_bytes;      /* CUDA: the bytes they prefetch per tick (l2_side_bytes) */
    uint32_t graph_nodes;   /* nodes of the replayed graph; 0 when eager */
    int isolation;          /* 1: every row bit-identical to tier 1; 0: not; -1: not checked */
    uint32_t rows_differ;   /* rows whose logits differ from tier 1 */
    uint32_t logits_differ; /* of their logits, those whose bits differ (all rows) */
    double max_abs_diff;    /* the largest |tier B - tier 1| over them (finite pairs) */
    double eager_median_ms; /* graph cases: the eager case's median (0 when not run) */
    /* xxHash64 of the f32 logits of the case's first B-wide tick (all B rows, row after row)
     * after the synthetic fill: the same bits give the same value in any build, so two
     * builds' runs (bench/device-ab.sh) compare whole-model results; has_logits_xxh64 = 0 when
     * not computed (--no-isolation or real decode ticks) */
    uint64_t logits_xxh64;
    int has_logits_xxh64;
} memra_bench_case;

/* Marginal cost of one op class in one (tier, depth) case: the tick re-timed with every
 * launch of the class run twice (a rewritten copy of the plan set; doubling keeps every
 * plan valid, which removing would not), minus the tick as planned. */
typedef struct memra_bench_phase {
    uint32_t tier, depth;
    uint32_t op;        /* memra_op_id */
    uint32_t launches;  /* launches of the class per tick */
    double base_ms;     /* median of the tick as planned */
    double doubled_ms;  /* median with the class doubled */
    double marginal_ms; /* doubled - base */
} memra_bench_phase;

/* What one op class costs the tick at most, in one (tier, depth) case: the tick re-timed on
 * an engine that leaves every launch of the class out (memra_cuda_opts / memra_cpu_opts
 * skip_ops: the values are then meaningless, the launches that remain are the same), against
 * the tick as planned. Where doubling (memra_bench_phase) ranks what a class adds on top of
 * the tick, removal bounds what making the class faster can gain: the part of its time that
 * nothing else hides. op -1: every skippable class at once (what the rest, the mat-vecs,
 * take on their own). */
typedef struct memra_bench_removal {
    uint32_t tier, depth;
    int32_t op;        /* memra_op_id, or -1: every skippable class used */
    uint32_t launches; /* launches left out per tick (folded ones were never launched) */
    double base_ms;    /* median of the tick as planned */
    double removed_ms; /* median without them */
    double saved_ms;   /* base - removed */
} memra_bench_removal;

/* A PASS/MISS line for one of the targets, when the configuration covers it. */
typedef struct memra_bench_target {
    char name[64];
    char detail[320];
    int pass;
} memra_bench_target;

/* The CUDA backend's scheduling options as the run's engines had them (defaults included): what
 * a result means when an option was not given. */
typedef struct memra_bench_sched {
    int known; /* 1: the CUDA backend ran (the fields below are set) */
    int fuse, attn_split_ctas, attn_prefetch, gdn_prefetch, gdn_split;
    uint32_t norm_release_tiers, attn_auto_tiers, l2_side_mib;
    int l2_side_spread;
} memra_bench_sched;

typedef struct memra_bench_report {
    memra_bench_opts opts; /* effective (defaults filled in) */
    char plans_dir[512];   /* the one used (a removed temporary one when generated) */
    int plans_generated;
    char backend[16]; /* "cpu" | "cuda" */
    char device[160];
    char model_name[128]; /* general.name, or the file name */
    char arch[32];
    char file_type[32]; /* general.file_type as llama.cpp names it */
    char preset[32];    /* memra.forge.preset of forged files, else "" */
    uint64_t file_bytes, tensor_bytes, n_params;
    uint32_t n_layer, n_embd, n_vocab, n_stages;
    char kv_dtype[8];
    uint32_t n_ctx, n_slots;
    double copy_gbs, copy_median_gbs; /* best and median of the probe, bytes read + written */
    char copy_method[64];
    char host_method[128];
    char fill_method[64];
    double open_ms; /* backend open (first mode) */
    memra_bench_sched sched;
    uint32_t n_cases;
    memra_bench_case cases[2 * MEMRA_BENCH_MAX_CASES]; /* graph cases first, then eager */
    uint32_t n_phases;
    memra_bench_phase *phases; /* [n_phases] */
    uint32_t n_removals;
    memra_bench_removal *removals; /* [n_removals] */
    uint32_t n_targets;
    memra_bench_target targets[8];
} memra_bench_report;

/* Run everything opts asks for; *out (allocated, free with memra_bench_report_free) holds
 * the results. Codes: the backend's and the planner's, INVALID_ARG (a tier not in the
 * manifest, a depth the context cannot hold, bad options), UNSUPPORTED (--backend cuda in a
 * build without it, no GPU). */
int memra_bench_run(const memra_bench_opts *opts, memra_bench_report **out, memra_err *err);
void memra_bench_report_free(memra_bench_report *r); /* NULL is a no-op */

/* ---- reporting (bench/report.c) ---- */
/* The configuration block that heads every report. */
void memra_bench_print_header(const memra_bench_report *r, FILE *f);
/* The human table (and the phase and removal tables when they ran). */
void memra_bench_print_table(const memra_bench_report *r, FILE *f);
/* One JSON object per line: a "config" line, a "case" line per case, a "phase" line per
 * phase, a "removal" line per removal, a "target" line per target. */
int memra_bench_write_json(const memra_bench_report *r, FILE *f, memra_err *err);
/* PASS/MISS lines. */
void memra_bench_print_targets(const memra_bench_report *r, FILE *f);
/* Write the gnuplot script for svg_path (to script_path) and, when gnuplot is installed,
 * run it. *rendered = 1 when the SVG was drawn, 0 when gnuplot is absent (the script stays
 * for later). IO when a file cannot be written or gnuplot fails. */
int memra_bench_plot(const memra_bench_report *r, const char *svg_path, const char *script_path,
                     int *rendered, memra_err *err);
/* Fill r->targets from r->cases (called by memra_bench_run); a missed target's detail says
 * the tick it needs and, when r->phases covers its tier at depth 1024, the largest phase. */
void memra_bench_eval_targets(memra_bench_report *r);

/* ---- pieces exposed for the tests ---- */
/* How a row of logits differs from its tier-1 run: what tells a rounding difference (small
 * |d| at a few logits) from a race or a wrong read (garbage, NaN, every logit). */
typedef struct memra_bench_rowdiff {
    uint32_t n_diff;      /* logits whose bits differ */
    int64_t first;        /* index of the first of them; -1 when none */
    double max_abs;       /* max |got - ref| over the differing pairs with both sides finite */
    uint32_t n_nonfinite; /* differing pairs with either side Inf or NaN */
} memra_bench_rowdiff;
void memra_bench_row_diff(const float *ref, const float *got, size_t n, memra_bench_rowdiff *d);
/* Median / p99 (nearest rank) of v[n] (sorted in place). */
double memra_bench_quantile(double *v, uint32_t n, double q);
/* Host memcpy bandwidth, bytes read + written per second (best and median of reps). */
int memra_bench_copy_bw_host(uint64_t bytes, uint32_t reps, double *best_gbs, double *median_gbs,
                             memra_err *err);
/* Write a copy of plan directory src to dst (created) in which every launch of op `op` is
 * issued twice in a row; the manifest is written last. */
int memra_bench_plans_double_op(const char *src, const char *dst, uint32_t op, memra_err *err);

#endif
