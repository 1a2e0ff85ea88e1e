/*
 * bind.h — launch binding: a plan launch's args (memra_plan_arg, catalog order
 * args[MEMRA_<OP>_<ARG>], plan.h) -> its op's args struct (kernels/<op>.h). The one field
 * mapping per op, shared by the CPU backend (runtime/backend_cpu.c) and the CUDA backend
 * (runtime/backend_cuda.c); only where the pointers point differs, and the backend says that
 * in a memra_bind_ctx:
 *
 *   BUF     -> arena + offset                    (host arena | device arena)
 *   WEIGHT  -> weights[index], or the tensor's own mapped data when weights is NULL
 *              (CPU: NULL, the mmap'd GGUF | CUDA: each weight's device copy); its type and
 *              row bytes always come from the plan's gguf tensor
 *   STATE   -> the tick block's pointer-table row of that region (u64 [b] slot bases)
 *   TICK    -> the tick block's section of that field
 *   INT     -> the value; FLOAT -> the value
 * An absent optional arg (MEMRA_ARG_NONE) gives a NULL pointer, 0 for an int, -1 for a type
 * and 0 row bytes. b is the plan's tier; n_ctx the backend's context length.
 *
 * Contract: the plan passed the validator (arg kinds are the catalog's); the ctx is read only
 * while binding, but the arena, tick block and weights it names must outlive the bound args
 * (ops read through them every tick). memra_bind_launch fills *out and nothing else;
 * memra_bind_check is the op's memra_<op>_check.
 * Must not: dereference a resolved address (the CUDA ones are device addresses), allocate,
 * run or launch anything, or know which backend calls it.
 */
#ifndef MEMRA_BIND_H
#define MEMRA_BIND_H

#include <stdint.h>

#include "attn_decode.h"
#include "attn_prep.h"
#include "embed.h"
#include "gdn_step.h"
#include "mmvq.h"
#include "mmvq_moe.h"
#include "moe_down.h"
#include "moe_route.h"
#include "plan.h"
#include "rms_norm_q8.h"
#include "sample.h"
#include "silu_mul_q8.h"
#include "tick.h"

/* The bound args of any op: member <op> is memra_<op>_args (one per op of ops.def). */
typedef union memra_op_args {
#define MEMRA_OP(OP, op, key, doc) memra_##op##_args op;
#include "ops.def"
} memra_op_args;

/* Where one plan's launches point (everything borrowed). */
typedef struct memra_bind_ctx {
    const memra_plan *p;        /* the plan whose launches are bound */
    uint8_t *arena;             /* its stage's arena (host or device) */
    const memra_tick *tick;     /* views of the tick block the ops read (CUDA: device copy) */
    const void *const *weights; /* [p->n_weights] address of each plan weight, or NULL: the
                                   tensors' own data (p->weights[i].tensor->data) */
    uint32_t n_ctx;             /* tokens per session */
} memra_bind_ctx;

/* Bind launch l of c->p into *out (member l->op). MEMRA_OK, or MEMRA_ERR_UNSUPPORTED for an
 * op id outside the catalog (*out untouched); every op of ops.def has a binder. */
int memra_bind_launch(const memra_bind_ctx *c, const memra_plan_launch *l, memra_op_args *out);

/* The op's check of bound args: NULL when they are valid, else static text saying why;
 * "unknown op" for an op id outside the catalog. */
const char *memra_bind_check(uint32_t id, const memra_op_args *a);

#endif
