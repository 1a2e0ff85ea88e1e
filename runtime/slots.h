/*
 * slots.h — the slot pool: per-sequence state (KV caches, conv windows, delta-rule states)
 * in fixed-size slots allocated once at start-up (DESIGN.md "State: the slot pool").
 *
 * Two parts, so that the CPU and the CUDA backend share every line of layout logic:
 *   - memra_slot_layout: where each state region of the plan set lives inside a slot, per
 *     pipeline stage (each stage's regions are in that stage's memory: one device each).
 *     Built from the stage plans' state tables and the context length (a runtime option:
 *     KV regions hold n_ctx tokens). Pure arithmetic, no memory.
 *   - memra_slot_pool: which slots are in use. It only hands out indices and computes
 *     addresses from bases the backend allocated (host malloc for the CPU backend, device
 *     memory for CUDA): memra_slot_pool_bytes() says how much, per stage.
 * Slot n_slots (one past the last usable) is the scratch slot: padded rows of a tick point
 * there, so their writes never touch a live sequence. It is never handed out.
 *
 * Must not: touch the memory (zeroing a fresh slot's recurrent regions is the backend's
 * job: memset here, a device memset there; memra_slot_region.zero_on_admit says which).
 * Invariants: region offsets and slot sizes are multiples of MEMRA_SLOT_ALIGN; regions of a
 * stage do not overlap; every byte count was overflow-checked when the layout was built.
 */
#ifndef MEMRA_SLOTS_H
#define MEMRA_SLOTS_H

#include <stdint.h>

#include "err.h"
#include "plan.h"
#include "synth_fill.h"

#define MEMRA_SLOT_ALIGN 256     /* region alignment inside a slot (as the arena) */
#define MEMRA_SLOT_MAX_CTX (1u << 24)
#define MEMRA_SLOT_MAX_SLOTS 4096

typedef struct memra_slot_region {
    char name[MEMRA_PLAN_NAME_MAX]; /* "blk.3.kv_k" */
    uint32_t stage;
    uint32_t kind;       /* memra_state_kind */
    uint32_t dtype;      /* memra_dtype */
    uint64_t unit_bytes; /* the plan's bytes: per token (KV) or per slot */
    uint64_t offset;     /* from the slot's base in its stage's memory */
    uint64_t bytes;      /* the whole region: n_ctx * unit_bytes for KV */
    int zero_on_admit;   /* recurrent state (conv, ssm): a new sequence starts from zero */
} memra_slot_region;

typedef struct memra_slot_layout {
    uint32_t n_ctx;
    uint32_t n_stages;
    uint32_t n_regions;
    memra_slot_region *regions;                 /* [n_regions], stage by stage in plan order */
    uint64_t slot_bytes[MEMRA_PLAN_MAX_STAGES]; /* per stage */
} memra_slot_layout;

/* Build the layout from one plan per stage (stage_plans[s]->stage == s, any tier: every
 * tier of a stage has the same state table, which memra_slot_layout_bind checks). */
int memra_slot_layout_build(const memra_plan *const *stage_plans, uint32_t n_stages,
                            uint32_t n_ctx, memra_slot_layout *out, memra_err *err);
void memra_slot_layout_free(memra_slot_layout *l); /* NULL is a no-op */

/* Map plan p's region indices onto layout regions: map[i] = layout index of p->states[i].
 * MEMRA_ERR_PLAN when a region is missing or differs (kind, dtype, bytes) from the layout. */
int memra_slot_layout_bind(const memra_slot_layout *l, const memra_plan *p, uint32_t *map,
                           memra_err *err);

/* Bytes of memory a pool of n_slots (+ the scratch slot) needs in stage s; 0 on overflow. */
uint64_t memra_slot_pool_bytes(const memra_slot_layout *l, uint32_t n_slots, uint32_t stage);

typedef struct memra_slot_pool {
    const memra_slot_layout *layout;        /* borrowed */
    uint32_t n_slots;                       /* usable slots; n_slots is the scratch slot */
    uint32_t n_used;
    uint64_t base[MEMRA_PLAN_MAX_STAGES];   /* per stage: address of slot 0 (host or device) */
    uint8_t *in_use;                        /* [n_slots] */
} memra_slot_pool;

/* base[s]: memory of memra_slot_pool_bytes(l, n_slots, s) bytes, aligned to
 * MEMRA_SLOT_ALIGN, owned by the caller. */
int memra_slot_pool_init(memra_slot_pool *p, const memra_slot_layout *l, uint32_t n_slots,
                         const uint64_t *base, memra_err *err);
void memra_slot_pool_free(memra_slot_pool *p); /* NULL is a no-op */

/* The lowest free slot; MEMRA_ERR_CAPACITY when all are in use. */
int memra_slot_pool_acquire(memra_slot_pool *p, uint32_t *slot, memra_err *err);
/* MEMRA_ERR_INVALID_ARG when slot is not in use. */
int memra_slot_pool_release(memra_slot_pool *p, uint32_t slot, memra_err *err);
int memra_slot_pool_in_use(const memra_slot_pool *p, uint32_t slot);

/* The synthetic history of region r at position pos (memra-bench; the contract of
 * memra_cpu_session_fill_synthetic): 0 when the region is to be zeroed (recurrent state at
 * pos 0, as at admission), else 1 with *a the fill of its first a->bytes at dst (KV: tokens
 * [0, pos); recurrent: the whole region, the delta-rule state at amplitude 1/4). Both
 * backends take their fills from here, so they write the same bytes. */
int memra_slot_synth_fill(const memra_slot_layout *l, uint32_t r, uint32_t pos, uint64_t seed,
                          void *dst, memra_synth_fill_args *a);

/* Address of region r of slot (slot <= n_slots: n_slots is the scratch slot). */
uint64_t memra_slot_region_addr(const memra_slot_pool *p, uint32_t slot, uint32_t r);
static inline uint32_t memra_slot_scratch(const memra_slot_pool *p) { return p->n_slots; }

#endif
