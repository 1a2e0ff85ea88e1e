/*
 * tick.h — the tick block: the one struct-of-arrays block a plan reads its per-tick inputs
 * from (DESIGN.md "The tick block and the pointer table"). Laid out from the plan's tier b
 * and state-region count:
 *
 *   tokens      i32 [b]                     (MEMRA_TICK_TOKENS)
 *   positions   i32 [b]                     (MEMRA_TICK_POSITIONS)
 *   params      memra_sample_params [b]     (MEMRA_TICK_SAMPLING)
 *   out_tokens  i32 [b]                     (MEMRA_TICK_OUT_TOKENS, written by sample)
 *   ptrs        u64 [n_regions][b]          row r's base of state region i at ptrs[i*b + r]
 *
 * Each section starts at a multiple of MEMRA_TICK_ALIGN. The CPU backend keeps the block in
 * host memory and passes its sections to the ops; the CUDA backend keeps the same bytes in
 * pinned memory and copies them to the device as the graph's first node, so kernels see
 * device addresses in ptrs. Addresses are u64 in both, whatever the host pointer width.
 *
 * Must not: know about sessions or slots (the backend fills the block), allocate per tick.
 */
#ifndef MEMRA_TICK_H
#define MEMRA_TICK_H

#include <stdint.h>

#include "err.h"
#include "ops.h"
#include "sample.h"

#define MEMRA_TICK_ALIGN 64
#define MEMRA_TICK_MAX_REGIONS 4096
#define MEMRA_TICK_MAX_B 64 /* tiers are 1..16 today; the layout itself allows more */

typedef struct memra_tick_layout {
    uint32_t b;
    uint32_t n_regions;
    uint64_t off[MEMRA_TICK_COUNT]; /* byte offset of each memra_tick_field section */
    uint64_t off_ptrs;              /* byte offset of the pointer table */
    uint64_t bytes;                 /* the whole block */
} memra_tick_layout;

int memra_tick_layout_init(memra_tick_layout *l, uint32_t b, uint32_t n_regions,
                           memra_err *err);

/* A tick block and typed views of its sections. */
typedef struct memra_tick {
    memra_tick_layout layout;
    void *block;                 /* layout.bytes */
    int owned;                   /* block allocated by memra_tick_alloc */
    int32_t *tokens;             /* [b] */
    int32_t *positions;          /* [b] */
    memra_sample_params *params; /* [b] */
    int32_t *out_tokens;         /* [b] */
    uint64_t *ptrs;              /* [n_regions][b] */
} memra_tick;

/* Host block (zeroed), owned by the tick. */
int memra_tick_alloc(memra_tick *t, uint32_t b, uint32_t n_regions, memra_err *err);
/* Views over a caller-owned block of layout->bytes (e.g. pinned memory), aligned to
 * MEMRA_TICK_ALIGN. */
void memra_tick_bind(memra_tick *t, const memra_tick_layout *layout, void *block);
void memra_tick_free(memra_tick *t); /* frees an owned block; NULL is a no-op */

/* The section an op's TICK arg names (field: memra_tick_field), NULL when unknown. */
void *memra_tick_field_ptr(const memra_tick *t, uint32_t field);
/* Row bases of region i: ptrs + i * b. */
static inline uint64_t *memra_tick_region_row(const memra_tick *t, uint32_t i)
{
    return t->ptrs + (uint64_t)i * t->layout.b;
}

#endif
