/*
 * ops.h — access to the op catalog declared in runtime/ops.def.
 *
 * Everything here is generated from ops.def with X-macros: the op ids (MEMRA_OP_<OP>), the
 * per-op argument indices (MEMRA_<OP>_<ARG>, the index of that arg in a loaded launch's
 * args[] array, see plan.h), and the descriptor table the validator and the planner's Lua
 * environment read. Nothing here may be written by hand per op; add ops to ops.def only.
 *
 * Changelog (while the planner session lasts; additive only):
 *   v1  initial.
 */
#ifndef MEMRA_OPS_H
#define MEMRA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* ---- the vocabulary of the catalog columns ---- */
typedef enum memra_arg_kind {
    MEMRA_ARG_NONE = 0, /* in a loaded launch: an optional arg that is absent */
    MEMRA_ARG_BUF,      /* activation-arena buffer */
    MEMRA_ARG_WEIGHT,   /* GGUF tensor */
    MEMRA_ARG_STATE,    /* per-sequence state region, reached through the pointer table */
    MEMRA_ARG_TICK,     /* a field of the tick block */
    MEMRA_ARG_INT,
    MEMRA_ARG_FLOAT,
    MEMRA_ARG_KIND_COUNT,
} memra_arg_kind;

/* Element types of arena buffers and state regions. */
typedef enum memra_dtype {
    MEMRA_DT_F32 = 0,
    MEMRA_DT_F16 = 1,
    MEMRA_DT_I32 = 2,
    MEMRA_DT_Q8_1 = 3, /* 32-element blocks of 36 bytes (memra_block_q8_1) */
    MEMRA_DT_Q8_0 = 4, /* 32-element blocks of 34 bytes (GGUF q8_0; KV cache option) */
    MEMRA_DT_COUNT,
} memra_dtype;

/* Which GGUF tensor types a weight arg accepts. */
typedef enum memra_weight_class {
    MEMRA_WC_QDOT = 0, /* any type the q8_1 mat-vec can dot (memra_quant_can_dot) */
    MEMRA_WC_F32 = 1,  /* f32 only (norm weights, small per-head vectors, conv taps) */
    MEMRA_WC_ROWS = 2, /* any type that dequantizes row-wise (memra_quant_can_dequantize) */
    MEMRA_WC_COUNT,
} memra_weight_class;

/* Per-sequence state kinds. KV regions are per token (the slot holds n_ctx of them, n_ctx
 * being a runtime option); recurrent regions are per slot. */
typedef enum memra_state_kind {
    MEMRA_SK_KV_K = 0, /* f16 | q8_0, per token [head_dim, n_head_kv] */
    MEMRA_SK_KV_V = 1, /* f16 | q8_0, per token [head_dim, n_head_kv] */
    MEMRA_SK_CONV = 2, /* f32 [conv_k - 1, conv channels] (time fastest) */
    MEMRA_SK_SSM = 3,  /* f32 [head_k_dim, head_v_dim, n_v_head] (S^T, value-major) */
    MEMRA_SK_COUNT,
} memra_state_kind;

/* Fields of the tick block (the block's byte layout belongs to the backend). */
typedef enum memra_tick_field {
    MEMRA_TICK_TOKENS = 0,     /* i32 [b] */
    MEMRA_TICK_POSITIONS = 1,  /* i32 [b] */
    MEMRA_TICK_SAMPLING = 2,   /* sampling params [b] */
    MEMRA_TICK_OUT_TOKENS = 3, /* i32 [b], written by sample */
    MEMRA_TICK_COUNT,
} memra_tick_field;

typedef enum memra_access {
    MEMRA_ACC_IN = 0,
    MEMRA_ACC_OUT = 1,
    MEMRA_ACC_INOUT = 2,
    MEMRA_ACC_SCRATCH = 3,  /* written and read inside the launch only */
    MEMRA_ACC_OUT_MODE = 4, /* catalog only: OUT or INOUT by the slot's MODE int */
} memra_access;

typedef enum memra_arg_flag {
    MEMRA_ARGF_REQ = 0,  /* required (when its slot is in use) */
    MEMRA_ARGF_OPT = 1,  /* may be absent */
    MEMRA_ARGF_MODE = 2, /* required INT choosing OUT (0) / INOUT (1) for OUT_MODE bufs */
} memra_arg_flag;

/* ---- generated ids ---- */
typedef enum memra_op_id {
#define MEMRA_OP(OP, op, key, doc) MEMRA_OP_##OP,
#include "ops.def"
    MEMRA_OP_COUNT
} memra_op_id;

/* MEMRA_<OP>_<ARG>: index of the arg in memra_plan_launch.args; MEMRA_<OP>_N_ARGS. */
#define MEMRA_OP(OP, op, key, doc) enum {
#define MEMRA_ARG(OP, ARG, arg, kind, type, acc, slot, req, spec) MEMRA_##OP##_##ARG,
#define MEMRA_OP_END(OP)                                                                           \
    MEMRA_##OP##_N_ARGS                                                                            \
    }                                                                                              \
    ;
#include "ops.def"

/* The largest N_ARGS of any op (a launch holds this many arg records). */
#define MEMRA_OP_MAX_ARGS 32
#define MEMRA_OP_MAX_SLOTS 4
#define MEMRA_KERNEL_KEY_MAX 128

/* ---- descriptors ---- */
typedef struct memra_op_arg_desc {
    const char *name;  /* JSON / Lua name */
    uint8_t kind;      /* memra_arg_kind */
    uint8_t type;      /* dtype | weight class | state kind | tick field */
    uint8_t access;    /* memra_access */
    uint8_t slot;      /* 0..3 */
    uint8_t flag;      /* memra_arg_flag */
    const char *spec;  /* count / shape / dims expressions, or "lo..hi" for INT */
} memra_op_arg_desc;

typedef struct memra_op_desc {
    const char *name;       /* "mmvq" */
    const char *key;        /* kernel key template, NULL = fixed kernel */
    const char *doc;        /* one-line semantics */
    uint32_t n_args;
    const memra_op_arg_desc *args;
} memra_op_desc;

/* NULL when id >= MEMRA_OP_COUNT. */
const memra_op_desc *memra_op_get(uint32_t id);
/* Op id by name, -1 when unknown. */
int memra_op_find(const char *name);
/* Arg index of op by name, -1 when unknown. */
int memra_op_find_arg(uint32_t op, const char *name);
/* 1 when a backend may leave op's launches out of a tick for a timing experiment
 * (memra_cpu_opts / memra_cuda_opts skip_ops, memra-bench --removal): its outputs are values
 * only, never an index, a count or a token that a later launch turns into an address, so the
 * tick stays in bounds on whatever the buffers then hold (rms_norm_q8, silu_mul_q8,
 * attn_prep, attn_decode, gdn_step). 0 for every other op (embed, mmvq: the mat-vecs are
 * what such an experiment times; moe_route's ids and sample's tokens become addresses). */
int memra_op_skippable(uint32_t op);
/* The mask of every skippable op (bit op). */
uint64_t memra_op_skippable_mask(void);
/* The lowest bit of mask that names no skippable op (an op that must run, or a bit past the
 * catalog), -1 when every bit is skippable: what a backend's open refuses. */
int memra_op_skip_refused(uint64_t mask);
/* MEMRA_OK, or MEMRA_ERR_INVALID_ARG naming the first op of mask that must run (what both
 * backends' open says of a bad opts.skip_ops). */
int memra_op_skip_check(uint64_t mask, memra_err *err);
/* XXH64 over the whole catalog (names, kinds, types, access, slots, flags, specs, keys):
 * plans record it, so a plan generated against another catalog is refused. */
uint64_t memra_ops_catalog_hash(void);

/* Names (for JSON, Lua, messages). Unknown values give "?". */
const char *memra_arg_kind_name(uint32_t kind);
const char *memra_dtype_name(uint32_t dt);        /* "f32" "f16" "i32" "q8_1" "q8_0" */
const char *memra_weight_class_name(uint32_t wc); /* "qdot" "f32" "rows" */
const char *memra_state_kind_name(uint32_t sk);   /* "kv_k" "kv_v" "conv" "ssm" */
const char *memra_tick_field_name(uint32_t f);    /* "tokens" "positions" "sampling" "out_tokens" */
const char *memra_access_name(uint32_t acc);      /* "in" "out" "inout" "scratch" "out_mode" */
/* Reverse lookups: -1 when unknown. */
int memra_dtype_from_name(const char *s);
int memra_state_kind_from_name(const char *s);
int memra_tick_field_from_name(const char *s);

/* Bytes of count elements of dt; 0 with *ok = 0 when count is negative, not a whole
 * number of blocks (q8_1 / q8_0: multiple of 32) or overflows. */
uint64_t memra_dtype_bytes(uint32_t dt, int64_t count, int *ok);

/* Does a weight of GGUF type qtype satisfy class wc? */
int memra_weight_class_accepts(uint32_t wc, uint32_t qtype);

/* ---- expressions of the spec column ---- */
/* Resolves an identifier to its value; returns 0 and sets *v, or -1 when unknown/absent. */
typedef int (*memra_expr_lookup)(void *user, const char *name, size_t len, int64_t *v);
/* Evaluate one expression (integers, identifiers, + - * / parentheses; / must be exact; no
 * overflow beyond +-2^62). Returns MEMRA_OK or MEMRA_ERR_PLAN with the reason in err. */
int memra_expr_eval(const char *expr, size_t len, memra_expr_lookup lookup, void *user,
                    int64_t *out, memra_err *err);
/* Split a comma-separated spec: returns the number of items (<= max) with start/length. */
int memra_spec_split(const char *spec, const char **item, size_t *len, int max);
/* Parse an INT range spec "lo..hi". Returns 0 or -1. */
int memra_spec_range(const char *spec, int64_t *lo, int64_t *hi);

#endif
