/*
 * backend_cuda.h — the CUDA backend: executes the validated plans of a plan directory on one
 * GPU, one captured CUDA graph per batch tier (DESIGN.md "The tick block and the pointer
 * table", "State: the slot pool", "Pipeline stages").
 *
 * The API mirrors backend_cpu.h (memra_cpu_* -> memra_cuda_*) so that hosts (memra-run,
 * memra-bench, memra-serve) switch backends by switching prefixes: open with a plan
 * directory and the model, admit sessions (each owns a slot of the slot pool), step a tick
 * with a rows -> sessions mapping, read the sampled tokens (and, when asked, a row's logits),
 * retire. The differences: logits live on the device and are copied out on request
 * (memra_cuda_backend_logits), and there is run-time information (memra_cuda_backend_info).
 *
 * Engine start (memra_cuda_backend_open), once:
 *   1. every plan of the manifest is loaded and validated against the model (plan.h);
 *   2. the weights every plan references are uploaded once into one device region (file
 *      order, 256-byte aligned, through two pinned staging chunks; progress and GB/s go to
 *      the log callback at MEMRA_LOG_INFO);
 *   3. per pipeline stage: the activation arena (the largest tier's) and the slot pool
 *      (n_slots slots + the scratch slot) are allocated on the device and zeroed;
 *   4. every NVRTC specialization of the manifest is loaded (disk cache, compiled if
 *      missing: memra-plan --precompile fills the cache ahead of time);
 *   5. every launch of every (tier, stage) plan is bound once to its args struct holding
 *      device pointers (arena offsets, weights, the device copy of that plan's tick block)
 *      and checked; mmvq launches get their NVRTC function and geometry;
 *   6. per tier, the eager launch sequence of all stages is stream-captured into one CUDA
 *      graph and instantiated (opts.graphs; else the eager sequence runs every tick).
 *
 * One tick (memra_cuda_backend_step): the host checks the inputs, writes each stage's tick
 * block (tokens, positions, sampling params, pointer table: per state region, per row, the
 * device base of that row's slot region; padded rows point at the scratch slot) into pinned
 * memory, launches the tier's graph (first node: a copy kernel that reads the block from the
 * mapped pinned memory; per stage after the first: the [b, n_embd] boundary copy; last
 * node: a copy kernel that writes the sampled tokens back into it: kernel nodes, not memcpy
 * nodes, because each memcpy node costs ~1 us of cudaGraphLaunch) and waits for one event.
 * No node is patched, nothing allocated or compiled per tick.
 *
 * Exactness: the graph replays exactly the eager sequence (same args structs, same launch
 * geometry), and stages only move where the residual lives, so graph == eager and two
 * stages == one stage bit for bit (tests/gpu/test_backend_gpu.c checks both with memcmp,
 * and isolation across tiers, and agreement with the CPU backend).
 *
 * Failure: every input is checked before anything runs (a refused step changes nothing).
 * A CUDA error during a tick returns MEMRA_ERR_CUDA naming the op, its launch index and
 * stage when known (launch-time errors; asynchronous faults in eager mode with
 * opts.sync_launches), else the tier and "graph replay". The sessions of that tick are then
 * marked failed (their state is undefined: they can only be retired); the engine keeps
 * serving the others. A sticky error (illegal address, trap, ...) poisons the CUDA context:
 * the message says so, memra_cuda_backend_poisoned() turns true, every later call that
 * needs the device fails with MEMRA_ERR_CUDA, and close resets the primary context. Whether
 * the process can then use the device again is the driver's decision: on the H200 with driver
 * 580 it cannot (the next open fails with the same CUDA error), so a host that must survive
 * kernel faults runs the engine in a worker process it can restart.
 *
 * Must not: print (logs go through memra_log), allocate or decide anything per tick,
 * patch graph nodes, or touch the GPU from more than one host thread at a time (an engine
 * belongs to one thread at a time).
 */
#ifndef MEMRA_BACKEND_CUDA_H
#define MEMRA_BACKEND_CUDA_H

#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "plan.h"
#include "sample.h"

/* memra_cuda_opts.norm_release_tiers' default: tier 2 (9b, depth 1024: B=2 3.830 -> 3.660 ms;
 * B=1 and 16 ran 0.5 % slower with it). */
#define MEMRA_CUDA_NORM_RELEASE_TIERS (1u << 2)

/* memra_cuda_opts.attn_prefetch's default: 2 (9b Q4_K_M, depth 1024, H100, 2 rounds each:
 * B=1 2.665 -> 2.635 ms, B=2 3.713 -> 3.679, B=8 and 16 within the rounds' spread;
 * bench/results/mmvq-notes.md, session 20). At depth 32768 it loses at B=1 and 2 (3.192 with
 * AUTO against the plain kernel's 3.135 ms; B=2 4.660 / 4.554) and wins at B=16: its 168
 * registers cost a CTA per SM. The same kernel at 128 registers (4 CTAs per SM; possible without
 * a spill only with its prefetches issued before the loads) lost everywhere: B=1 2.615 -> 2.669
 * ms at depth 1024, B=16 13.79 -> 14.56 at 32768 (session 21, bench/results/mmvq-notes.md). */
#define MEMRA_CUDA_ATTN_PREFETCH 2

/* memra_cuda_opts.attn_auto_tiers' default: tier 1. With the prefetching kernel (3 CTAs per
 * SM) the B = 1 grid of one CTA per split (the 9b: 512 CTAs, 396 slots on an H100) runs in
 * two waves; AUTO keeps it to one (9b, H100, session 20: depth 1024 2.576 -> 2.547 ms, 8192
 * 2.818 -> 2.799, 32768 3.220 -> 3.192). At B = 2 AUTO lost 2-3 % at depths 8192 and 32768,
 * at B = 16 0.2-3 %. */
#define MEMRA_CUDA_ATTN_AUTO_TIERS (1u << 1)

/* memra_cuda_opts.l2_side_mib's largest value: well inside the H100 / H200 L2 (50 MB), so the
 * lines are still there when the mat-vec reads them. */
#define MEMRA_CUDA_L2_SIDE_MAX_MIB 32

typedef struct memra_cuda_opts {
    uint32_t n_slots;     /* sessions live at once (default 16) */
    uint32_t n_ctx;       /* tokens per session (default 4096) */
    int device;           /* CUDA device ordinal (default 0); every stage runs on it */
    int graphs;           /* 1 (default): replay one captured graph per tier; 0: eager */
    int pdl;              /* 1 (default): launch PDL-aware kernels (mmvq) with programmatic
                             stream serialization, so their weight prefetch overlaps the
                             previous kernel's tail; 0: plain stream order */
    int fuse;             /* 1 (default): fold a direct-path mmvq {gate, up} and the
                             silu_mul_q8 that reads it into one launch (same bytes: the mmvq
                             quantizes silu(g) * u itself, memra_mmvq_fuse_swiglu) where its
                             grid of n_ff / 32 CUDA blocks covers every SM (smaller FFNs ran
                             slower fused: the 0.8b preset's 112 blocks, 1.15 -> 1.22 ms);
                             2: wherever it applies (tests); 0: never (A/B measurements) */
    uint32_t norm_release_tiers; /* bit b set: the rms_norm_q8 launches of tier b release the
                             next launch (PDL) before they wait for their input, so the mmvq
                             after them is scheduled and streams weights earlier (scheduling
                             only: the same bytes). Default MEMRA_CUDA_NORM_RELEASE_TIERS: the
                             tiers where the H200 measured it faster (bench/results/mmvq-notes.md
                             run 24) */
    int attn_split_ctas;         /* attn_decode's split kernel, CTAs per (kv head, row): 0
                                    (default) one per split up to the plan's max_split, except
                                    in attn_auto_tiers (below); N: N CTAs,
                                    each taking every N-th split of its row; -1
                                    (MEMRA_ATTN_SPLIT_CTAS_AUTO): as many as keep the grid resident
                                    at once (scheduling only: the same bytes; kernels/attn_decode.h) */
    uint32_t attn_auto_tiers;    /* bit b set: while attn_split_ctas is 0, tier b's attn_decode
                                launches take MEMRA_ATTN_SPLIT_CTAS_AUTO (a grid that stays
                                resident) and the others one CTA per split; default
                                MEMRA_CUDA_ATTN_AUTO_TIERS (scheduling only: the same bytes) */
    int attn_prefetch;    /* attn_decode's split kernel: each warp pulls the key batch this many
                             ahead of the one it computes into L2, the first ones before its
                             PDL wait (0: none, the plain kernel; 1..MEMRA_ATTN_MAX_PREFETCH,
                             default MEMRA_CUDA_ATTN_PREFETCH; a kernel of its own: scheduling
                             only, the same bytes) */
    int gdn_prefetch;     /* gdn_step's 4-warp kernel (grids past 2 CTAs per SM, e.g. the 9b at
                             B = 16): each warp pulls its state-row tasks this many beyond the
                             one it holds into L2, the first ones before its PDL wait (0, the
                             default: none; 1..MEMRA_GDN_MAX_PREFETCH; its own kernel;
                             scheduling only, the same bytes) */
    int gdn_split;        /* gdn_step's fast kernel, CTAs per value head: 0 (default) the
                             launcher's choice (up to 4 at small grids, kernels/gdn_step.cu), or
                             1, 2, 4 forced where the shape takes it (scheduling only) */
    uint32_t l2_side_mib; /* side-branch L2 prefetch (runtime/l2_side.h): at each run of small
                             kernels after a mat-vec, a prefetch kernel on a branch beside the
                             chain pulls the first l2_side_mib MiB of the next mat-vec's weights
                             into L2 while the small kernels run; 0 (default): none; at most
                             MEMRA_CUDA_L2_SIDE_MAX_MIB (scheduling only: the same bytes) */
    int l2_side_spread;   /* 0 (default): those MiB are the first bytes of the weights end to
                             end; 1: the first bytes every warp reads, the budget shared
                             equally (runtime/l2_side.h memra_l2_side_ranges); needs
                             l2_side_mib > 0 */
    int sync_launches;    /* 0 (default); 1: eager ticks synchronize after every launch, so
                             an asynchronous fault names its launch (debugging; slow) */
    uint32_t staging_mib; /* pinned staging chunk of the weight upload, MiB (default 64) */
    uint64_t skip_ops;    /* timing experiments only (memra-bench --removal): bit op set = that
                             op's launches are left out of every tick (eager and graph), so the
                             tick's values mean nothing; only memra_op_skippable ops (else open
                             refuses: MEMRA_ERR_INVALID_ARG). Default 0 */
    int profile;          /* 0 (default); 1: eager ticks time every launch with CUDA events
                             and add the times per op to memra_cuda_info.op_ms (the events
                             serialize PDL overlap: for attribution, not for speed) */
} memra_cuda_opts;

void memra_cuda_opts_init(memra_cuda_opts *o);

typedef struct memra_cuda_backend memra_cuda_backend;

/* Open device opts.device, then steps 1-6 above. g is borrowed and must outlive the
 * backend. o NULL = defaults. Codes: those of memra_plan_load; MEMRA_ERR_UNSUPPORTED when
 * there is no CUDA driver or device (the message says which) or a plan uses an op without a
 * CUDA kernel; MEMRA_ERR_PLAN for a launch its op refuses (named); MEMRA_ERR_CUDA (device
 * out of memory, NVRTC, capture), MEMRA_ERR_INVALID_ARG (options). */
int memra_cuda_backend_open(const char *plan_dir, const memra_gguf *g, const memra_cuda_opts *o,
                            memra_cuda_backend **out, memra_err *err);
/* NULL is a no-op. Frees every device resource; a poisoned engine also resets the primary
 * context (see the header comment for what that does and does not recover). */
void memra_cuda_backend_close(memra_cuda_backend *be);

const memra_plan_manifest *memra_cuda_backend_manifest(const memra_cuda_backend *be);
uint32_t memra_cuda_backend_n_vocab(const memra_cuda_backend *be);

/* Sessions: as memra_cpu_session_* (admission zeroes the slot's recurrent state on the
 * device, stream-ordered before the next tick). MEMRA_ERR_CAPACITY when every slot is
 * taken; MEMRA_ERR_CUDA when the engine is poisoned. */
int memra_cuda_session_admit(memra_cuda_backend *be, const memra_sample_params *params,
                             uint32_t *session, memra_err *err);
int memra_cuda_session_retire(memra_cuda_backend *be, uint32_t session, memra_err *err);
int memra_cuda_session_set_params(memra_cuda_backend *be, uint32_t session,
                                  const memra_sample_params *params, memra_err *err);
/* Tokens the session has consumed (its next position); 0 for an unknown session. */
uint32_t memra_cuda_session_pos(const memra_cuda_backend *be, uint32_t session);
/* Benchmarks: an admitted session at position pos with the synthetic history of
 * memra_cpu_session_fill_synthetic (backend_cpu.h; same seed, same state bytes), written on the
 * device in milliseconds. Synchronous. INVALID_ARG: unknown session, pos >= n_ctx. */
int memra_cuda_session_fill_synthetic(memra_cuda_backend *be, uint32_t session, uint32_t pos,
                                      uint64_t seed, memra_err *err);
/* 1 when the session was in a tick that failed on the device (retire it). */
int memra_cuda_session_failed(const memra_cuda_backend *be, uint32_t session);

typedef struct memra_cuda_step {
    uint32_t n_rows;          /* 1 .. largest tier */
    const uint32_t *sessions; /* [n_rows] distinct admitted sessions: row r runs sessions[r] */
    const int32_t *tokens;    /* [n_rows] the token each session consumes this tick */
    uint32_t tier;            /* 0 = the smallest tier >= n_rows; else that manifest tier */
    int32_t *out_tokens;      /* [n_rows] sampled next tokens, or NULL */
} memra_cuda_step;

/* One tick. Input errors as memra_cpu_backend_step (INVALID_ARG, CAPACITY; nothing ran);
 * device errors as described in the header comment (MEMRA_ERR_CUDA). */
int memra_cuda_backend_step(memra_cuda_backend *be, const memra_cuda_step *st, memra_err *err);

/* Copy the logits of rows [row, row + n_rows) of the last successful step into
 * dst[n_rows][n_vocab] (they stay on the device until the next step). MEMRA_ERR_INVALID_ARG
 * when there was no successful step or the rows are outside it. */
int memra_cuda_backend_logits(memra_cuda_backend *be, uint32_t row, uint32_t n_rows, float *dst,
                              memra_err *err);
/* Tier of the last successful step (0 before the first). */
uint32_t memra_cuda_backend_last_tier(const memra_cuda_backend *be);
/* 1 once a sticky CUDA error poisoned the context. */
int memra_cuda_backend_poisoned(const memra_cuda_backend *be);

typedef struct memra_cuda_info {
    char device_name[128];
    int sm;                /* 10 * major + minor */
    int n_sm;              /* multiprocessors */
    uint64_t weight_bytes; /* uploaded (the distinct tensors the plans reference) */
    double upload_ms;      /* weight upload wall time (mmap read + copies) */
    uint64_t arena_bytes;  /* activation arenas, all stages */
    uint64_t slot_bytes;   /* slot pools incl. the scratch slot, all stages */
    uint32_t n_kernels;    /* NVRTC specializations loaded */
    double kernels_ms;     /* their loading (cache reads, compiles) */
    double capture_ms;     /* graph capture + instantiation, all tiers */
    uint32_t n_tiers;
    uint32_t tiers[MEMRA_PLAN_MAX_TIERS];       /* = the manifest's */
    uint32_t launches[MEMRA_PLAN_MAX_TIERS];    /* kernel launches per tick, all stages */
    uint32_t folded[MEMRA_PLAN_MAX_TIERS];      /* plan launches folded into the one before
                                                   (opts.fuse), all stages */
    uint32_t skipped[MEMRA_PLAN_MAX_TIERS];     /* plan launches left out (opts.skip_ops),
                                                   all stages */
    uint32_t graph_nodes[MEMRA_PLAN_MAX_TIERS]; /* nodes of the tier's graph; 0 when eager */
    uint64_t tick_bytes[MEMRA_PLAN_MAX_TIERS];  /* weight bytes streamed per tick (plan stats) */
    uint32_t attn_split_ctas[MEMRA_PLAN_MAX_TIERS]; /* attn_decode's split CTAs per (kv head, row)
                                                   at the tier (opts.attn_split_ctas resolved:
                                                   the largest of its launches'); 0: none */
    uint8_t attn_split_auto[MEMRA_PLAN_MAX_TIERS];  /* 1: the tier's attn_decode launches took
                                                     MEMRA_ATTN_SPLIT_CTAS_AUTO (opts.attn_split_ctas
                                                     -1, or 0 with the tier's bit in
                                                     opts.attn_auto_tiers), resolved at bind to
                                                     attn_split_ctas; 0: the grid was given */
    uint32_t l2_side_forks[MEMRA_PLAN_MAX_TIERS];   /* side-branch L2 prefetch launches per tick
                                                     (opts.l2_side_mib), all stages; 0: none */
    uint64_t l2_side_bytes[MEMRA_PLAN_MAX_TIERS];   /* bytes those launches prefetch per tick */
    float last_tick_ms;                /* device time of the last successful step (CUDA events) */
    float last_host_us;                /* host wall time of that step outside the wait for the
                                        * device: checks + tick block + launch, then readout */
    float last_launch_us;              /* of last_host_us: the submission alone (the two event
                                        * records and the graph launch / eager enqueue) */
    int graphs, pdl;                   /* the effective options */
    double op_ms[MEMRA_OP_COUNT];      /* opts.profile: device ms per op, summed over ticks */
    uint64_t op_calls[MEMRA_OP_COUNT]; /* opts.profile: launches per op, summed over ticks */
    uint64_t profiled_ticks;           /* opts.profile: ticks summed into op_ms */
} memra_cuda_info;

const memra_cuda_info *memra_cuda_backend_info(const memra_cuda_backend *be);

/* ---- fault injection, for the failure-handling tests only ---- */
enum {
    MEMRA_CUDA_FAULT_NONE = 0,
    MEMRA_CUDA_FAULT_LAUNCH = 1, /* the launch is made with an invalid block size: a
                                    launch-time error that leaves the context usable */
    MEMRA_CUDA_FAULT_STICKY = 2, /* the launch reads an unmapped address: an asynchronous
                                    fault that poisons the context */
};
/* Arms a fault for the next step at manifest tier `tier` and stage 0: launch `launch` (which
 * must be an mmvq launch) misbehaves as `kind`; that step then runs eagerly. Fires once. */
int memra_cuda_backend_inject_fault(memra_cuda_backend *be, uint32_t tier, uint32_t launch,
                                    int kind, memra_err *err);

#endif
