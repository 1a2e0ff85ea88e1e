/*
 * backend_cpu.h — the CPU backend: executes a loaded plan set launch by launch with the CPU
 * reference ops (kernels/ref/). It is the reference the CUDA backend is compared against and
 * the engine's own oracle for plans (its logits equal the hand-written reference model's,
 * runtime/refmodel.h, bit for bit; docs/readme-cpubackend.md says why).
 *
 * The shape of this API is the one the CUDA backend mirrors (memra_cuda_*): open with a plan
 * directory and the model, admit sessions (each owns a slot of the slot pool), step a tick
 * with a rows -> sessions mapping, read a row's logits and the sampled tokens, retire.
 *
 * How a tick runs: at open every launch of every (tier, stage) plan is bound once to its
 * args struct (arena offsets -> pointers into the stage's arena, weights -> the mapped
 * GGUF, tick fields and state regions -> that plan's tick block) and checked, so nothing is
 * looked up or decided per tick (the CPU counterpart of capturing a CUDA graph). A step
 * picks the smallest tier >= rows, fills each stage's tick block (tokens, positions,
 * sampling params with step = the session's position, pointer table rows -> the sessions'
 * slots, padded rows -> the scratch slot), replays the stages in order with the
 * [b, n_embd] boundary copy between them, and reads out_tokens.
 *
 * Exactness: every op computes row b from row b's inputs with a fixed per-row order, so a
 * session's logits and tokens do not depend on the tier, its row, the other rows, or the
 * stage split (tests/test_backend_cpu.c checks all of that with memcmp).
 * Must not: print, allocate per tick, or let a bad step corrupt state: every input is
 * checked before any launch runs (a failed step changes nothing).
 */
#ifndef MEMRA_BACKEND_CPU_H
#define MEMRA_BACKEND_CPU_H

#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "plan.h"
#include "sample.h"

typedef struct memra_cpu_opts {
    uint32_t n_slots; /* sessions live at once (default 16) */
    uint32_t n_ctx;   /* tokens per session (default 4096) */
    uint64_t skip_ops; /* timing experiments only (memra-bench --removal): bit op set = that
                          op's launches are left out of every tick, so the tick's values mean
                          nothing; only memra_op_skippable ops (else open refuses:
                          MEMRA_ERR_INVALID_ARG). Default 0 */
} memra_cpu_opts;

void memra_cpu_opts_init(memra_cpu_opts *o);

typedef struct memra_cpu_backend memra_cpu_backend;

/* Load and validate every plan of plan_dir's manifest against g (borrowed: must outlive
 * the backend), lay out and allocate the slot pool and arenas, bind every launch. o NULL =
 * defaults. Codes: those of memra_plan_load, MEMRA_ERR_PLAN for a launch whose arguments an
 * op refuses (named), MEMRA_ERR_NOMEM, MEMRA_ERR_INVALID_ARG (options). */
int memra_cpu_backend_open(const char *plan_dir, const memra_gguf *g, const memra_cpu_opts *o,
                           memra_cpu_backend **out, memra_err *err);
void memra_cpu_backend_close(memra_cpu_backend *be); /* NULL is a no-op */

const memra_plan_manifest *memra_cpu_backend_manifest(const memra_cpu_backend *be);

/* Admit a session: the lowest free slot, its recurrent state zeroed, position 0. params:
 * temperature/top_k/top_p/seed (step is the session's position, set per tick); NULL =
 * greedy. MEMRA_ERR_CAPACITY when every slot is taken. */
int memra_cpu_session_admit(memra_cpu_backend *be, const memra_sample_params *params,
                            uint32_t *session, memra_err *err);
int memra_cpu_session_retire(memra_cpu_backend *be, uint32_t session, memra_err *err);
int memra_cpu_session_set_params(memra_cpu_backend *be, uint32_t session,
                                 const memra_sample_params *params, memra_err *err);
/* Tokens the session has consumed (its next position); 0 for an unknown session. */
uint32_t memra_cpu_session_pos(const memra_cpu_backend *be, uint32_t session);

/* Benchmarks (memra-bench): put an admitted session at position pos with a synthetic
 * history, as if pos tokens had been consumed, so deep-context cases start at once instead
 * of after pos ticks. Every KV region of its slot gets tokens [0, pos) filled, every
 * recurrent region (conv, ssm) is filled whole (zeroed when pos = 0, as at admission); the
 * values are finite and a pure function of (seed, slot-layout region index r, element index
 * i inside the region), never of the slot, so the same seed restores the same state in any
 * slot (memra-bench re-fills to compare a row at tier B with the same state at tier 1):
 *   h = splitmix64_mix(seed + (r + 1) * 0x9E3779B97F4A7C15 + i * 0xD1B54A32D192ED03)
 *   v = (h >> 40) * 2^-24 * 2 - 1                         (uniform in [-1, 1))
 *   f32 conv: v;  f32 ssm: v / 4;  f16 KV: fp16_RN(v);
 *   q8_0 KV block j (elements 32j..32j+31): d = fp16_RN(1/127), qs[k] = (int8)lrintf(127 v)
 * splitmix64_mix(z): z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) *
 * 0x94D049BB133111EB; z ^ z >> 31. INVALID_ARG: unknown session, pos >= n_ctx. */
int memra_cpu_session_fill_synthetic(memra_cpu_backend *be, uint32_t session, uint32_t pos,
                                     uint64_t seed, memra_err *err);

typedef struct memra_cpu_step {
    uint32_t n_rows;          /* 1 .. largest tier */
    const uint32_t *sessions; /* [n_rows] distinct admitted sessions: row r runs sessions[r] */
    const int32_t *tokens;    /* [n_rows] the token each session consumes this tick */
    uint32_t tier;            /* 0 = the smallest tier >= n_rows; else that manifest tier */
    int32_t *out_tokens;      /* [n_rows] sampled next tokens, or NULL */
} memra_cpu_step;

/* One tick. Every input is checked first (INVALID_ARG: unknown/duplicate session, token out
 * of the vocabulary, tier; CAPACITY: a session at n_ctx); on error nothing ran. */
int memra_cpu_backend_step(memra_cpu_backend *be, const memra_cpu_step *st, memra_err *err);

/* Logits [n_vocab] of row `row` of the last successful step (they stay in the arena until
 * the next step); NULL when there is none. */
const float *memra_cpu_backend_logits(const memra_cpu_backend *be, uint32_t row);
uint32_t memra_cpu_backend_n_vocab(const memra_cpu_backend *be);
/* Tier of the last successful step (0 before the first). */
uint32_t memra_cpu_backend_last_tier(const memra_cpu_backend *be);

#endif
