/*
 * bench_backend.h — the one seam between memra-bench and the backends it measures: the
 * CPU backend (always) and the CUDA backend (builds with MEMRA_BENCH_WITH_CUDA). Each call
 * forwards to memra_cpu_* / memra_cuda_*; step additionally returns the tick's timing,
 * taken the way that backend allows (below).
 *
 * Timing of one step (bench_tick):
 *   CPU:  lat_ms = CLOCK_MONOTONIC around the step call; host_us = CLOCK_THREAD_CPUTIME_ID
 *         around it (the CPU backend has no device wait: its whole tick is host work).
 *   CUDA: lat_ms = the backend's CUDA-event time of the tick (memra_cuda_info.last_tick_ms:
 *         event before the graph launch / eager enqueue, event after the last node);
 *         host_us = CLOCK_THREAD_CPUTIME_ID around the step call minus that event time
 *         (the completion wait spins by default, so the wait costs thread CPU time about
 *         equal to its wall time). This is a lower bound of the host's work: the launch
 *         call itself runs while the start event is already timing, so it is counted in
 *         lat_ms, not here (bench_be_host_method says so in every report).
 *
 * Must not: print, or add work inside the timed step call.
 */
#ifndef MEMRA_BENCH_BACKEND_H
#define MEMRA_BENCH_BACKEND_H

#include <stdint.h>

#include "backend_cpu.h"
#include "bench.h"
#include "err.h"
#include "gguf.h"

#ifdef MEMRA_BENCH_WITH_CUDA
#include "backend_cuda.h"
#include "ceiling.h"
#endif

typedef struct bench_be_opts {
    uint32_t n_slots, n_ctx;
    int graphs; /* CUDA: capture graphs (1) or launch eagerly (0) */
    int no_fusion; /* CUDA: opts.fuse = 0 (every plan launch a kernel launch) */
    int norm_release; /* CUDA: -1 the default, else opts.norm_release_tiers */
    int attn_split_ctas; /* CUDA: MEMRA_BENCH_UNSET the default, else opts.attn_split_ctas */
    int attn_auto;       /* CUDA: -1 the default, else opts.attn_auto_tiers */
    int attn_prefetch;   /* CUDA: MEMRA_BENCH_UNSET the default, else opts.attn_prefetch */
    int gdn_prefetch;    /* CUDA: MEMRA_BENCH_UNSET the default, else opts.gdn_prefetch */
    int gdn_split;       /* CUDA: MEMRA_BENCH_UNSET the default, else opts.gdn_split */
    int l2_side;         /* CUDA: MEMRA_BENCH_UNSET the default, else opts.l2_side_mib */
    int l2_side_spread;  /* CUDA: opts.l2_side_spread */
    uint64_t skip_ops;   /* both backends: opts.skip_ops (memra-bench --removal) */
    int device;
} bench_be_opts;

typedef struct bench_be {
    memra_bench_backend kind;
    memra_cpu_backend *cpu;
#ifdef MEMRA_BENCH_WITH_CUDA
    memra_cuda_backend *cuda;
#endif
    int graphs; /* effective: 1 only for CUDA with graphs */
    uint32_t n_vocab;
    memra_bench_sched sched; /* effective (CUDA) */
} bench_be;

typedef struct bench_tick {
    double lat_ms;  /* tick latency (see the header comment) */
    double host_us; /* host time per tick */
    double launch_us; /* CUDA: of host_us, the submission (graph launch / eager enqueue); CPU: 0 */
} bench_tick;

/* Whether this build can run `kind`. */
int bench_be_available(memra_bench_backend kind);
int bench_be_open(bench_be *b, memra_bench_backend kind, const char *plan_dir, const memra_gguf *g,
                  const bench_be_opts *o, memra_err *err);
void bench_be_close(bench_be *b); /* a zeroed or closed one is a no-op */

int bench_be_admit(bench_be *b, uint32_t *session, memra_err *err);
int bench_be_retire(bench_be *b, uint32_t session, memra_err *err);
uint32_t bench_be_pos(const bench_be *b, uint32_t session);
/* Synthetic history (memra_*_session_fill_synthetic); UNSUPPORTED when the backend has no
 * such call (the bench then reaches depths with real decode ticks). */
int bench_be_fill(bench_be *b, uint32_t session, uint32_t pos, uint64_t seed, memra_err *err);
int bench_be_can_fill(const bench_be *b);

/* One tick of n_rows sessions at manifest tier `tier`; out may be NULL; t may be NULL. */
int bench_be_step(bench_be *b, uint32_t n_rows, const uint32_t *sessions, const int32_t *tokens,
                  uint32_t tier, int32_t *out, bench_tick *t, memra_err *err);
/* Logits of rows [row, row + n_rows) of the last step into dst[n_rows][n_vocab]. */
int bench_be_logits(bench_be *b, uint32_t row, uint32_t n_rows, float *dst, memra_err *err);

/* Device description for the report header (CPU: /proc/cpuinfo's model name). */
void bench_be_device(const bench_be *b, char *buf, size_t n);
/* Nodes of tier's replayed graph (0 when eager or on the CPU). */
uint32_t bench_be_graph_nodes(const bench_be *b, uint32_t tier);
/* Kernel launches per tick at tier: the CUDA backend's (the plan's less the launches it
 * folds into the one before, memra_cuda_info.launches), else plan_launches. */
uint32_t bench_be_launches(const bench_be *b, uint32_t tier, uint32_t plan_launches);
/* CUDA: attention's split CTAs per (kv head, row) at tier (memra_cuda_info.attn_split_ctas);
 * 0 on the CPU or without attention */
uint32_t bench_be_attn_split_ctas(const bench_be *b, uint32_t tier);
/* CUDA: side-branch L2 prefetch launches per tick at tier (memra_cuda_info.l2_side_forks);
 * 0 on the CPU or with the option off */
uint32_t bench_be_l2_side_forks(const bench_be *b, uint32_t tier);
/* CUDA: the bytes those launches prefetch per tick (memra_cuda_info.l2_side_bytes); 0 likewise */
uint64_t bench_be_l2_side_bytes(const bench_be *b, uint32_t tier);
/* How host_us is measured, for the report. */
const char *bench_be_host_method(memra_bench_backend kind);
const char *bench_be_name(memra_bench_backend kind);

/* Copy bandwidth of the device `kind` runs on (bytes read + written per second). */
int bench_be_copy_bw(memra_bench_backend kind, int device, uint64_t bytes, uint32_t reps,
                     double *best_gbs, double *median_gbs, char *method, size_t method_n,
                     memra_err *err);

#endif
