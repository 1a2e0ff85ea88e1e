/*
 * slots.c — slot layout and slot pool (see slots.h). Layout: each stage's regions are packed
 * in plan order at MEMRA_SLOT_ALIGN offsets; a slot of stage s is slot_bytes[s] long and slot
 * i of stage s starts at base[s] + i * slot_bytes[s].
 */
#include "slots.h"

#include <stdlib.h>
#include <string.h>

/* Bytes the layout refuses to exceed per slot and per pool (2^50: far above any device, far
 * below uint64 overflow in the products below). */
#define SLOT_MAX_BYTES (1ull << 50)

static uint64_t align_up(uint64_t x) { return (x + MEMRA_SLOT_ALIGN - 1) / MEMRA_SLOT_ALIGN * MEMRA_SLOT_ALIGN; }

static int add_stage(memra_slot_layout *l, const memra_plan *p, uint32_t s, memra_err *err)
{
    if (p->stage != s)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "stage plan %u is the plan of stage %u", s, p->stage);
    uint64_t off = 0;
    for (uint32_t i = 0; i < p->n_states; i++) {
        const memra_plan_state *st = &p->states[i];
        memra_slot_region *r = &l->regions[l->n_regions++];
        memset(r, 0, sizeof *r);
        memcpy(r->name, st->name, sizeof r->name);
        r->name[sizeof r->name - 1] = '\0';
        r->stage = s;
        r->kind = st->kind;
        r->dtype = st->dtype;
        r->unit_bytes = st->bytes;
        r->zero_on_admit = !st->per_token;
        if (st->bytes == 0 || st->bytes > SLOT_MAX_BYTES / (st->per_token ? l->n_ctx : 1))
            return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "state '%s': %llu bytes%s do not fit a slot",
                              st->name, (unsigned long long)st->bytes,
                              st->per_token ? " per token" : "");
        r->bytes = st->bytes * (st->per_token ? l->n_ctx : 1);
        r->offset = off;
        off = align_up(off + r->bytes);
        if (off > SLOT_MAX_BYTES)
            return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "stage %u: a slot would exceed 2^50 bytes "
                              "(n_ctx = %u)", s, l->n_ctx);
    }
    l->slot_bytes[s] = off ? off : MEMRA_SLOT_ALIGN; /* a stage without state still gets
                                                        distinct, valid slot addresses */
    return MEMRA_OK;
}

int memra_slot_layout_build(const memra_plan *const *stage_plans, uint32_t n_stages,
                            uint32_t n_ctx, memra_slot_layout *out, memra_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    if (n_stages == 0 || n_stages > MEMRA_PLAN_MAX_STAGES)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "stage count %u out of range 1..%d",
                          n_stages, MEMRA_PLAN_MAX_STAGES);
    if (n_ctx == 0 || n_ctx > MEMRA_SLOT_MAX_CTX)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_ctx = %u out of range 1..%u", n_ctx,
                          MEMRA_SLOT_MAX_CTX);
    uint64_t total = 0;
    for (uint32_t s = 0; s < n_stages; s++)
        total += stage_plans[s]->n_states;
    out->n_ctx = n_ctx;
    out->n_stages = n_stages;
    out->regions = calloc(total ? total : 1, sizeof *out->regions);
    if (!out->regions)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "slot layout: out of memory");
    for (uint32_t s = 0; s < n_stages; s++)
        MEMRA_TRY(add_stage(out, stage_plans[s], s, err));
    return MEMRA_OK;
fail:
    memra_slot_layout_free(out);
    return rc;
}

void memra_slot_layout_free(memra_slot_layout *l)
{
    if (!l)
        return;
    free(l->regions);
    memset(l, 0, sizeof *l);
}

int memra_slot_layout_bind(const memra_slot_layout *l, const memra_plan *p, uint32_t *map,
                           memra_err *err)
{
    for (uint32_t i = 0; i < p->n_states; i++) {
        const memra_plan_state *st = &p->states[i];
        uint32_t j = 0;
        while (j < l->n_regions &&
               (l->regions[j].stage != p->stage || strcmp(l->regions[j].name, st->name) != 0))
            j++;
        if (j == l->n_regions)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u: state '%s' is not in the slot "
                              "layout (plans of one stage must share their state table)",
                              p->tier, p->stage, st->name);
        const memra_slot_region *r = &l->regions[j];
        if (r->kind != st->kind || r->dtype != st->dtype || r->unit_bytes != st->bytes)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u: state '%s' differs from the "
                              "slot layout (kind %u/%u, dtype %u/%u, bytes %llu/%llu)", p->tier,
                              p->stage, st->name, st->kind, r->kind, st->dtype, r->dtype,
                              (unsigned long long)st->bytes, (unsigned long long)r->unit_bytes);
        map[i] = j;
    }
    return MEMRA_OK;
}

uint64_t memra_slot_pool_bytes(const memra_slot_layout *l, uint32_t n_slots, uint32_t stage)
{
    if (stage >= l->n_stages || n_slots > MEMRA_SLOT_MAX_SLOTS)
        return 0;
    const uint64_t n = (uint64_t)n_slots + 1; /* + the scratch slot */
    if (l->slot_bytes[stage] > SLOT_MAX_BYTES / n)
        return 0;
    return l->slot_bytes[stage] * n;
}

int memra_slot_pool_init(memra_slot_pool *p, const memra_slot_layout *l, uint32_t n_slots,
                         const uint64_t *base, memra_err *err)
{
    memset(p, 0, sizeof *p);
    if (n_slots == 0 || n_slots > MEMRA_SLOT_MAX_SLOTS)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "slot count %u out of range 1..%d", n_slots,
                          MEMRA_SLOT_MAX_SLOTS);
    for (uint32_t s = 0; s < l->n_stages; s++)
        if (!base[s] || base[s] % MEMRA_SLOT_ALIGN != 0)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "stage %u: slot memory missing or not "
                              "%d-byte aligned", s, MEMRA_SLOT_ALIGN);
    p->in_use = calloc(n_slots, 1);
    if (!p->in_use)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "slot pool: out of memory");
    p->layout = l;
    p->n_slots = n_slots;
    memcpy(p->base, base, sizeof(uint64_t) * l->n_stages);
    return MEMRA_OK;
}

void memra_slot_pool_free(memra_slot_pool *p)
{
    if (!p)
        return;
    free(p->in_use);
    memset(p, 0, sizeof *p);
}

int memra_slot_pool_acquire(memra_slot_pool *p, uint32_t *slot, memra_err *err)
{
    for (uint32_t i = 0; i < p->n_slots; i++) {
        if (!p->in_use[i]) {
            p->in_use[i] = 1;
            p->n_used++;
            *slot = i;
            return MEMRA_OK;
        }
    }
    return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "all %u slots are in use", p->n_slots);
}

int memra_slot_pool_release(memra_slot_pool *p, uint32_t slot, memra_err *err)
{
    if (slot >= p->n_slots || !p->in_use[slot])
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "slot %u is not in use", slot);
    p->in_use[slot] = 0;
    p->n_used--;
    return MEMRA_OK;
}

int memra_slot_pool_in_use(const memra_slot_pool *p, uint32_t slot)
{
    return slot < p->n_slots && p->in_use[slot];
}

uint64_t memra_slot_region_addr(const memra_slot_pool *p, uint32_t slot, uint32_t r)
{
    const memra_slot_region *reg = &p->layout->regions[r];
    return p->base[reg->stage] + (uint64_t)slot * p->layout->slot_bytes[reg->stage] + reg->offset;
}

int memra_slot_synth_fill(const memra_slot_layout *l, uint32_t r, uint32_t pos, uint64_t seed,
                          void *dst, memra_synth_fill_args *a)
{
    const memra_slot_region *reg = &l->regions[r];
    const int kv = reg->kind == MEMRA_SK_KV_K || reg->kind == MEMRA_SK_KV_V;
    if (!kv && pos == 0)
        return 0;
    *a = (memra_synth_fill_args){
        .dst = dst,
        .bytes = kv ? (uint64_t)pos * reg->unit_bytes : reg->bytes,
        .seed = seed,
        .region = r,
        .dtype = (int32_t)reg->dtype,
        .amp = reg->kind == MEMRA_SK_SSM ? 0.25f : 1.0f,
    };
    return 1;
}
