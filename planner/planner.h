/*
 * planner.h — memra-plan as a library: run the arch's plan script over a checkpoint and
 * write the manifest plus one validated plan per (tier, stage). The CLI
 * (planner/memra-plan.c) is a thin wrapper; tests call memra_planner_run() directly.
 *
 * What a run does: open the GGUF; pick plans/<general.architecture>.lua (unknown arch ->
 * MEMRA_ERR_UNSUPPORTED); expose model, catalog and qtypes to a sandboxed Lua state; ask the
 * script for stage ranges (or take --cuts); call its tick() once per (tier, stage); turn each
 * returned table into canonical JSON, validate it with memra_plan_parse() (the runtime's own
 * loader) against an in-memory manifest, then write it. The manifest is written last, so a
 * directory with a manifest is complete.
 *
 * Determinism: the output bytes are a pure function of (GGUF metadata + tensor table, the
 * plan scripts, the options): JSON keys in a fixed order, floats with 9 significant digits.
 */
#ifndef MEMRA_PLANNER_H
#define MEMRA_PLANNER_H

#include <stdint.h>

#include "err.h"
#include "plan.h"

typedef void (*memra_planner_progress_fn)(const char *line, void *user);

typedef struct memra_planner_opts {
    const char *model_path;  /* GGUF checkpoint */
    const char *out_dir;     /* created if missing */
    const char *plans_dir;   /* NULL = the source tree's plans/ (MEMRA_PLANS_DIR) */
    uint32_t n_tiers;        /* 0 = default 1,2,4,8,12,16 */
    uint32_t tiers[MEMRA_PLAN_MAX_TIERS];
    uint32_t n_stages;       /* 0 or 1 = one stage; the script balances the cuts */
    uint32_t n_cuts;         /* explicit cuts (layers where stages 1.. begin); overrides */
    uint32_t cuts[MEMRA_PLAN_MAX_STAGES - 1];
    uint32_t kv_dtype;       /* MEMRA_DT_F16 (default) or MEMRA_DT_Q8_0 */
    uint64_t budget;         /* Lua instructions per script call; 0 = default */
    memra_planner_progress_fn progress; /* NULL = quiet */
    void *progress_user;
} memra_planner_opts;

void memra_planner_opts_init(memra_planner_opts *o);

typedef struct memra_planner_plan_info {
    uint32_t tier, stage, layer_begin, layer_end;
    uint64_t arena_bytes;
    uint32_t n_kernels;
    memra_plan_stats stats;
    uint32_t op_counts[MEMRA_OP_COUNT]; /* launches per op */
} memra_planner_plan_info;

typedef struct memra_planner_result {
    char arch[32];
    uint64_t model_hash;
    uint32_t n_layer;
    uint64_t file_tensor_bytes; /* sum of every tensor's bytes in the checkpoint */
    uint32_t n_plans;
    memra_planner_plan_info plans[MEMRA_PLAN_MAX_TIERS * MEMRA_PLAN_MAX_STAGES];
    uint32_t n_kernels;
    char (*kernels)[MEMRA_KERNEL_KEY_MAX]; /* union over all plans, sorted */
    double seconds;
} memra_planner_result;

/* Codes: UNSUPPORTED (architecture, weight type), SCRIPT (script error, budget), PLAN (the
 * script produced a plan the validator refuses: a planner bug), IO, FORMAT (bad GGUF),
 * INVALID_ARG (options). *res is set on success; free it with memra_planner_result_free. */
int memra_planner_run(const memra_planner_opts *o, memra_planner_result **res, memra_err *err);
void memra_planner_result_free(memra_planner_result *r);

/* Remove a plan directory (typically a temporary one a host or test planned into) and
 * everything below it. Best effort: a missing directory is fine. */
void memra_planner_remove_dir(const char *dir);

/* Print the summary block memra-plan shows (launches, bytes, arena, kernels). */
void memra_planner_print_summary(const memra_planner_result *r, void *file /* FILE * */);

/* ---- precompile (planner/precompile.c): fill the NVRTC disk cache with every
 * specialization a plan directory's manifest lists, so a serving start compiles nothing.
 * Needs a build with CUDA (library memra_nvrtc); without it MEMRA_ERR_UNSUPPORTED. ---- */

typedef struct memra_precompile_opts {
    const char *plan_dir;  /* holds manifest.json (memra_planner_run's out_dir) */
    int sm;                /* target architecture, 10 * major + minor (90 = sm_90) */
    const char *cache_dir; /* NULL = the process's NVRTC cache dir (nvrtc.h default) */
    uint32_t n_threads;    /* 0 = one per online core; each compiles one key at a time */
    uint32_t max_keys;     /* 0 = all; > 0 compiles only the first max_keys (tests) */
    memra_planner_progress_fn progress; /* one line per key, "i/n key s"; NULL = quiet */
    void *progress_user;   /* progress may be called from any worker, never concurrently */
} memra_precompile_opts;

typedef struct memra_precompile_stats {
    uint32_t n_keys;   /* NVRTC specializations compiled or found (after max_keys) */
    uint32_t n_fixed;  /* manifest keys of fixed nvcc kernels: nothing to compile */
    uint32_t compiled; /* NVRTC compilations run */
    uint32_t cached;   /* already valid in the disk cache */
    double seconds;    /* wall time */
} memra_precompile_stats;

/* Compiles every missing specialization of o->plan_dir's manifest for o->sm into the disk
 * cache (o->cache_dir, set for the call and restored afterwards: do not run other NVRTC
 * compiles in the process meanwhile). Codes: the manifest's (IO, FORMAT, ...), INVALID_ARG
 * (sm, a disabled cache), UNSUPPORTED (no CUDA in this build; a template needs a newer sm),
 * CUDA (a compile failed: the message names the key and starts the NVRTC log). *st is set
 * on success and on failure (what was done so far). */
int memra_planner_precompile(const memra_precompile_opts *o, memra_precompile_stats *st,
                             memra_err *err);

#endif
