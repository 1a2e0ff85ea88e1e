/*
 * plan.h — loaded, validated launch plans and their manifest (the runtime side of the
 * planner). Format: docs/plan-format.md.
 *
 * A plan directory (written by memra-plan) holds manifest.json and one plan per
 * (tier, stage): plan-b<tier>-s<stage>.json. memra_plan_load() reads one, checks it against
 * the manifest, the op catalog (runtime/ops.def) and the GGUF it will run on, and returns a
 * memra_plan whose every reference is resolved: a backend turns each launch into its args
 * struct by indexing launch->args[MEMRA_<OP>_<ARG>] — it never parses or looks anything up.
 *
 * Must not: run Lua, touch a device, or accept a plan that fails any rule. A refused plan
 * gives MEMRA_ERR_PLAN naming the launch index and the argument (or the section and entry),
 * MEMRA_ERR_STALE_PLAN when the model hash differs, MEMRA_ERR_FORMAT for malformed JSON,
 * MEMRA_ERR_UNSUPPORTED for a newer format version.
 *
 * Invariants of a loaded plan (what the validator guarantees):
 *   - every buffer lies inside [0, arena_bytes), aligned to MEMRA_PLAN_ALIGN; buffers that
 *     overlap are never live in the same launch interval; a buffer is written before it is
 *     read (except the stage input); outputs of a launch alias none of its other buffers;
 *   - every launch's op exists, every required arg is present with the catalog's kind,
 *     dtype, element count (from its INT args and the tier), weight types and shapes, state
 *     kinds and dims; kernel keys equal the catalog template filled from the launch;
 *   - weights and state belong to the plan's stage (blk.N with N in [layer_begin,
 *     layer_end); token_embd only where embedding or the tied lm_head happens);
 *   - model_hash equals memra_plan_model_hash(gguf), catalog_hash equals
 *     memra_ops_catalog_hash(), tier/stage/layers agree with the manifest.
 *
 * Changelog (while the planner session lasts; additive only):
 *   v1  initial.
 *   v1.1 memra_plan_manifest_parse() (in-memory manifest, for the fuzzer).
 */
#ifndef MEMRA_PLAN_H
#define MEMRA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "ops.h"

#define MEMRA_PLAN_VERSION 1
#define MEMRA_PLAN_ALIGN 256        /* arena offsets: 256 B (cp.async / TMA friendly) */
#define MEMRA_PLAN_MAX_TIERS 16     /* tiers are 1..16 */
#define MEMRA_PLAN_MAX_B 16
#define MEMRA_PLAN_MAX_STAGES 16
#define MEMRA_PLAN_NAME_MAX 64      /* buffer / state names, incl. NUL */

/* A named activation-arena buffer. */
typedef struct memra_plan_buffer {
    char name[MEMRA_PLAN_NAME_MAX];
    uint64_t offset; /* bytes from the arena base, multiple of MEMRA_PLAN_ALIGN */
    uint64_t bytes;
    uint32_t dtype;  /* memra_dtype */
} memra_plan_buffer;

/* A weight the plan reads; the tensor is borrowed from the gguf passed to the loader. */
typedef struct memra_plan_weight {
    char name[MEMRA_GGUF_MAX_NAME];
    const memra_gguf_tensor *tensor; /* ->data, ->type, ->ne, ->nbytes */
} memra_plan_weight;

/* A per-sequence state region. Row r's base address for the tick is ptr[region][r] in the
 * tick block's pointer table; regions are numbered in plan order, per plan. */
typedef struct memra_plan_state {
    char name[MEMRA_PLAN_NAME_MAX]; /* "blk.3.kv_k" */
    uint32_t layer;
    uint32_t kind;     /* memra_state_kind */
    uint32_t dtype;    /* memra_dtype: f16 | q8_0 for KV, f32 for conv / ssm */
    uint32_t n_dims;
    int64_t dims[4];   /* ggml ne order (dims[0] contiguous); KV: per token */
    uint64_t bytes;    /* KV: bytes per token; conv / ssm: bytes per slot */
    int per_token;     /* 1 for KV kinds: the slot holds n_ctx x bytes */
} memra_plan_state;

/* One resolved argument. Which fields mean something depends on kind. */
typedef struct memra_plan_arg {
    uint32_t kind;   /* memra_arg_kind; MEMRA_ARG_NONE = optional arg absent */
    uint32_t access; /* memra_access, resolved (never OUT_MODE) */
    uint32_t index;  /* BUF: buffer; WEIGHT: weight; STATE: region; TICK: memra_tick_field */
    uint32_t dtype;  /* BUF / STATE: memra_dtype; WEIGHT: the tensor's memra_qtype */
    uint64_t offset; /* BUF: arena offset of the buffer */
    uint64_t bytes;  /* BUF: bytes the op touches (<= buffer bytes); WEIGHT: tensor bytes;
                        STATE: region bytes (per token for KV) */
    int64_t count;   /* BUF: element count the op uses, derived from the catalog spec */
    int64_t i;       /* INT */
    float f;         /* FLOAT */
} memra_plan_arg;

typedef struct memra_plan_launch {
    uint32_t op;     /* memra_op_id */
    int32_t kernel;  /* index into memra_plan.kernels, -1 for fixed kernels */
    uint32_t n_args; /* = the op's N_ARGS */
    memra_plan_arg args[MEMRA_OP_MAX_ARGS]; /* catalog order: args[MEMRA_<OP>_<ARG>] */
} memra_plan_launch;

/* Per-tick traffic, computed by the loader from the resolved plan. */
typedef struct memra_plan_stats {
    uint32_t launches;              /* dependent kernel launches per tick */
    uint64_t weight_bytes;          /* bytes of the distinct weights the plan references */
    uint64_t weight_bytes_streamed; /* estimate actually read: embedding rows only, routed
                                       experts n_used of n_expert */
    uint64_t state_bytes_per_row;   /* recurrent state read (and written) per row */
    uint64_t kv_bytes_per_token;    /* KV read per row per cached token */
} memra_plan_stats;

typedef struct memra_plan {
    uint32_t version;
    char arch[32];
    uint64_t model_hash;
    uint64_t catalog_hash;
    uint32_t tier;       /* B */
    uint32_t stage, n_stages;
    uint32_t layer_begin, layer_end; /* the stage's layers [begin, end) */
    uint64_t arena_bytes;

    uint32_t n_buffers;
    memra_plan_buffer *buffers;
    uint32_t n_weights;
    memra_plan_weight *weights;
    uint32_t n_states;
    memra_plan_state *states;
    uint32_t n_kernels;
    char (*kernels)[MEMRA_KERNEL_KEY_MAX]; /* NVRTC specializations, sorted */
    uint32_t n_launches;
    memra_plan_launch *launches;

    int32_t input;  /* stage > 0: boundary buffer [b, n_embd] f32 filled before launch 0; -1 */
    int32_t output; /* stage < last: boundary buffer [b, n_embd] f32 read after the tick; -1 */
    int32_t logits; /* last stage: [b, n_vocab] f32, kept in the arena; -1 elsewhere */
    memra_plan_stats stats;
} memra_plan;

typedef struct memra_plan_manifest {
    uint32_t version;
    char arch[32];
    uint64_t model_hash;
    uint64_t catalog_hash;
    uint32_t n_tiers;
    uint32_t tiers[MEMRA_PLAN_MAX_TIERS]; /* increasing */
    uint32_t n_stages;
    uint32_t stage_layers[MEMRA_PLAN_MAX_STAGES][2]; /* [begin, end) per stage */
    uint32_t n_layer, n_embd, n_vocab;
    uint32_t kv_dtype; /* memra_dtype of the KV cache */
    uint32_t n_kernels;
    char (*kernels)[MEMRA_KERNEL_KEY_MAX]; /* union over all plans, sorted */
} memra_plan_manifest;

/* Content hash of a checkpoint's metadata (every KV: key, type, value) and tensor table
 * (name, type, dims, offset) — not the weight bytes. XXH3-64. */
uint64_t memra_plan_model_hash(const memra_gguf *g);

/* Read and check dir/manifest.json. */
int memra_plan_manifest_load(const char *dir, memra_plan_manifest **out, memra_err *err);
/* Same over a manifest held in memory (the fuzzer drives it). */
int memra_plan_manifest_parse(const char *text, size_t len, memra_plan_manifest **out,
                              memra_err *err);
void memra_plan_manifest_free(memra_plan_manifest *m); /* NULL is a no-op */

/* Load dir/plan-b<tier>-s<stage>.json and validate it against dir's manifest and g (g is
 * borrowed and must outlive the plan). MEMRA_ERR_STALE_PLAN when either hash does not
 * match g; MEMRA_ERR_NOT_FOUND when the manifest has no such tier or stage. */
int memra_plan_load(const char *dir, uint32_t tier, uint32_t stage, const memra_gguf *g,
                    memra_plan **out, memra_err *err);
/* Validate a plan held in memory (the planner checks what it writes with this; the fuzzer
 * drives it). m may be NULL (no manifest cross-check); g is required. */
int memra_plan_parse(const char *text, size_t len, const memra_plan_manifest *m,
                     const memra_gguf *g, memra_plan **out, memra_err *err);
void memra_plan_free(memra_plan *p); /* NULL is a no-op */

/* Whether a launch of p other than launches i and i + 1 names arena buffer buf (the CUDA
 * backend folds such a pair into one launch only when the buffers between them are theirs
 * alone). */
int memra_plan_buf_named_outside(const memra_plan *p, uint32_t i, uint32_t buf);
/* Whether arena buffers a and b share a byte (their placement overlaps: the planner places a
 * buffer over one whose live interval has ended). A fused launch whose output overlaps its
 * input would overwrite, from CUDA blocks that have finished, the input of blocks not yet
 * started; the CUDA backend folds a pair only when they are disjoint. */
int memra_plan_bufs_overlap(const memra_plan *p, uint32_t a, uint32_t b);

/* Smallest manifest tier >= b, or 0 when b exceeds every tier. */
uint32_t memra_plan_tier_for(const memra_plan_manifest *m, uint32_t b);

/* File name of a plan inside its directory: "plan-b<tier>-s<stage>.json". */
void memra_plan_file_name(char *buf, size_t n, uint32_t tier, uint32_t stage);

#endif
