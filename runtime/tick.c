/*
 * tick.c — tick block layout and views (see tick.h).
 */
#include "tick.h"

#include <stdlib.h>
#include <string.h>

static uint64_t align_up(uint64_t x) { return (x + MEMRA_TICK_ALIGN - 1) / MEMRA_TICK_ALIGN * MEMRA_TICK_ALIGN; }

int memra_tick_layout_init(memra_tick_layout *l, uint32_t b, uint32_t n_regions, memra_err *err)
{
    memset(l, 0, sizeof *l);
    if (b == 0 || b > MEMRA_TICK_MAX_B)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "tick: b = %u out of range 1..%d", b,
                          MEMRA_TICK_MAX_B);
    if (n_regions > MEMRA_TICK_MAX_REGIONS)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "tick: %u state regions (at most %d)",
                          n_regions, MEMRA_TICK_MAX_REGIONS);
    static const uint64_t elem[MEMRA_TICK_COUNT] = {
        [MEMRA_TICK_TOKENS] = sizeof(int32_t), [MEMRA_TICK_POSITIONS] = sizeof(int32_t),
        [MEMRA_TICK_SAMPLING] = sizeof(memra_sample_params), [MEMRA_TICK_OUT_TOKENS] = sizeof(int32_t)};
    uint64_t off = 0;
    for (int f = 0; f < MEMRA_TICK_COUNT; f++) {
        l->off[f] = off;
        off = align_up(off + elem[f] * b);
    }
    l->off_ptrs = off;
    l->bytes = align_up(off + sizeof(uint64_t) * (uint64_t)n_regions * b);
    l->b = b;
    l->n_regions = n_regions;
    return MEMRA_OK;
}

void memra_tick_bind(memra_tick *t, const memra_tick_layout *layout, void *block)
{
    uint8_t *p = block;
    memset(t, 0, sizeof *t);
    t->layout = *layout;
    t->block = block;
    t->tokens = (int32_t *)(p + layout->off[MEMRA_TICK_TOKENS]);
    t->positions = (int32_t *)(p + layout->off[MEMRA_TICK_POSITIONS]);
    t->params = (memra_sample_params *)(p + layout->off[MEMRA_TICK_SAMPLING]);
    t->out_tokens = (int32_t *)(p + layout->off[MEMRA_TICK_OUT_TOKENS]);
    t->ptrs = (uint64_t *)(p + layout->off_ptrs);
}

int memra_tick_alloc(memra_tick *t, uint32_t b, uint32_t n_regions, memra_err *err)
{
    memra_tick_layout l;
    memset(t, 0, sizeof *t);
    int rc = memra_tick_layout_init(&l, b, n_regions, err);
    if (rc != MEMRA_OK)
        return rc;
    void *block = aligned_alloc(MEMRA_TICK_ALIGN, l.bytes);
    if (!block)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tick block: out of memory");
    memset(block, 0, l.bytes);
    memra_tick_bind(t, &l, block);
    t->owned = 1;
    return MEMRA_OK;
}

void memra_tick_free(memra_tick *t)
{
    if (!t)
        return;
    if (t->owned)
        free(t->block);
    memset(t, 0, sizeof *t);
}

void *memra_tick_field_ptr(const memra_tick *t, uint32_t field)
{
    switch (field) {
    case MEMRA_TICK_TOKENS: return t->tokens;
    case MEMRA_TICK_POSITIONS: return t->positions;
    case MEMRA_TICK_SAMPLING: return t->params;
    case MEMRA_TICK_OUT_TOKENS: return t->out_tokens;
    default: return NULL;
    }
}
