/*
 * backend_cpu.c — the CPU backend (see backend_cpu.h for the concept and the contract).
 *
 * Invariants after memra_cpu_backend_open:
 *   - plans[t * n_stages + s] is the validated plan of manifest tier t, stage s; each has its
 *     own tick block and a bound args struct per launch that passed the op's check;
 *   - arena[s] is large enough for every tier's plan of stage s (plans run one at a time);
 *   - every plan's state regions map onto the slot layout built from tier 0's plans;
 *   - sessions[i] describes slot i (session id == slot index).
 * Sections: op table -> binding -> open/close -> sessions -> step.
 */
#include "backend_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "quant.h"
#include "slots.h"
#include "synth_fill.h"
#include "tick.h"

/* ====================================== op table ====================================== */
/* Binding is runtime/bind.c's (this backend: host arena, the mmap'd GGUF, the host tick
 * block); what is the CPU's own is running bound args with the references. */

#define OP_RUN(op)                                                                                 \
    static int run_##op(const memra_op_args *a) { return memra_##op##_ref(&a->op); }
OP_RUN(embed)
OP_RUN(rms_norm_q8)
OP_RUN(mmvq)
OP_RUN(attn_prep)
OP_RUN(attn_decode)
OP_RUN(gdn_step)
OP_RUN(silu_mul_q8)
OP_RUN(moe_route)
OP_RUN(mmvq_moe)
OP_RUN(moe_down)
OP_RUN(sample)
#undef OP_RUN

typedef int (*run_fn)(const memra_op_args *a);

#define RUN(OP, op) [MEMRA_OP_##OP] = run_##op
static const run_fn k_run[MEMRA_OP_COUNT] = {
    RUN(EMBED, embed),       RUN(RMS_NORM_Q8, rms_norm_q8), RUN(MMVQ, mmvq),
    RUN(ATTN_PREP, attn_prep), RUN(ATTN_DECODE, attn_decode), RUN(GDN_STEP, gdn_step),
    RUN(SILU_MUL_Q8, silu_mul_q8), RUN(MOE_ROUTE, moe_route), RUN(MMVQ_MOE, mmvq_moe),
    RUN(MOE_DOWN, moe_down), RUN(SAMPLE, sample),
};
#undef RUN

/* ====================================== backend ======================================= */

typedef struct cpu_plan {
    memra_plan *plan;
    memra_tick tick;       /* this plan's tick block */
    uint32_t *region_map;  /* [n_states] -> slot layout region */
    memra_op_args *bound;  /* [n_launches] */
} cpu_plan;

typedef struct cpu_session {
    int live;
    uint32_t pos;
    memra_sample_params params;
} cpu_session;

struct memra_cpu_backend {
    const memra_gguf *g;             /* borrowed */
    memra_cpu_opts opts;
    memra_plan_manifest *m;
    uint32_t n_tiers, n_stages;
    cpu_plan *plans;                 /* [n_tiers * n_stages] */
    uint8_t *arena[MEMRA_PLAN_MAX_STAGES];
    memra_slot_layout layout;
    memra_slot_pool pool;
    uint8_t *slot_mem[MEMRA_PLAN_MAX_STAGES];
    cpu_session *sessions;           /* [n_slots], index = slot */
    uint32_t last_tier;              /* manifest tier index + 1 of the last step; 0 = none */
    uint32_t last_rows;
};

void memra_cpu_opts_init(memra_cpu_opts *o)
{
    o->n_slots = 16;
    o->n_ctx = 4096;
    o->skip_ops = 0;
}

static cpu_plan *plan_at(const memra_cpu_backend *be, uint32_t t, uint32_t s)
{
    return &be->plans[t * be->n_stages + s];
}

/* 256-byte aligned, zeroed (arenas and slots start as zeros, so even padded rows read
 * defined values). */
static uint8_t *zalloc(uint64_t bytes)
{
    const uint64_t n = (bytes + 255) / 256 * 256;
    uint8_t *p = n && n == (size_t)n ? aligned_alloc(256, (size_t)n) : NULL;
    if (p)
        memset(p, 0, (size_t)n);
    return p;
}

/* Bind and check every launch of plan (t, s). */
static int bind_plan(memra_cpu_backend *be, uint32_t t, uint32_t s, memra_err *err)
{
    cpu_plan *cp = plan_at(be, t, s);
    const memra_plan *p = cp->plan;
    cp->bound = calloc(p->n_launches ? p->n_launches : 1, sizeof *cp->bound);
    if (!cp->bound)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plan b%u s%u: out of memory", p->tier, p->stage);
    /* weights = NULL: the references read the mapped GGUF in place */
    const memra_bind_ctx c = {
        .p = p, .arena = be->arena[s], .tick = &cp->tick, .weights = NULL, .n_ctx = be->opts.n_ctx};
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const memra_plan_launch *l = &p->launches[i];
        if (l->op >= MEMRA_OP_COUNT || !k_run[l->op] ||
            memra_bind_launch(&c, l, &cp->bound[i]) != MEMRA_OK)
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "plan b%u s%u launch %u: op %u has no "
                              "CPU implementation", p->tier, p->stage, i, l->op);
        const char *why = memra_bind_check(l->op, &cp->bound[i]);
        if (why)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u launch %u (%s): %s", p->tier,
                              p->stage, i, memra_op_get(l->op)->name, why);
    }
    return MEMRA_OK;
}

/* Stage boundaries and the logits buffer are where the runtime expects them. */
static int check_entry_points(const memra_cpu_backend *be, uint32_t t, memra_err *err)
{
    for (uint32_t s = 0; s < be->n_stages; s++) {
        const memra_plan *p = plan_at(be, t, s)->plan;
        const int last = s + 1 == be->n_stages;
        if ((s > 0) != (p->input >= 0) || !last != (p->output >= 0) || last != (p->logits >= 0))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u: stage entry points (input %d, "
                              "output %d, logits %d) do not fit stage %u of %u", p->tier, s,
                              p->input, p->output, p->logits, s, be->n_stages);
        if (s > 0) {
            const memra_plan *q = plan_at(be, t, s - 1)->plan;
            if (q->buffers[q->output].bytes != p->buffers[p->input].bytes)
                return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u: stage %u output (%llu bytes) "
                                  "and stage %u input (%llu bytes) differ", p->tier, s - 1,
                                  (unsigned long long)q->buffers[q->output].bytes, s,
                                  (unsigned long long)p->buffers[p->input].bytes);
        }
        if (last && p->buffers[p->logits].bytes < (uint64_t)p->tier * be->m->n_vocab * sizeof(float))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u: logits buffer smaller than "
                              "[b, n_vocab] f32", p->tier);
    }
    return MEMRA_OK;
}

static int load_plans(memra_cpu_backend *be, const char *dir, memra_err *err)
{
    int rc;
    MEMRA_TRY(memra_plan_manifest_load(dir, &be->m, err));
    be->n_tiers = be->m->n_tiers;
    be->n_stages = be->m->n_stages;
    if (be->n_tiers == 0 || be->n_stages == 0 || be->m->n_vocab == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: manifest lists no tier, stage or vocabulary", dir);
    be->plans = calloc((size_t)be->n_tiers * be->n_stages, sizeof *be->plans);
    if (!be->plans)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plans: out of memory");
    for (uint32_t t = 0; t < be->n_tiers; t++)
        for (uint32_t s = 0; s < be->n_stages; s++)
            MEMRA_TRY(memra_plan_load(dir, be->m->tiers[t], s, be->g, &plan_at(be, t, s)->plan, err));
    for (uint32_t t = 0; t < be->n_tiers; t++)
        MEMRA_TRY(check_entry_points(be, t, err));
    return MEMRA_OK;
fail:
    return rc;
}

/* Slot layout from tier 0's stage plans; slot memory per stage; region maps of every plan. */
static int setup_slots(memra_cpu_backend *be, memra_err *err)
{
    int rc;
    const memra_plan *stage_plans[MEMRA_PLAN_MAX_STAGES];
    for (uint32_t s = 0; s < be->n_stages; s++)
        stage_plans[s] = plan_at(be, 0, s)->plan;
    MEMRA_TRY(memra_slot_layout_build(stage_plans, be->n_stages, be->opts.n_ctx, &be->layout, err));
    uint64_t base[MEMRA_PLAN_MAX_STAGES] = {0};
    for (uint32_t s = 0; s < be->n_stages; s++) {
        const uint64_t bytes = memra_slot_pool_bytes(&be->layout, be->opts.n_slots, s);
        be->slot_mem[s] = bytes ? zalloc(bytes) : NULL;
        if (!be->slot_mem[s])
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "stage %u: cannot allocate %llu bytes of "
                              "state for %u slots of %u tokens", s, (unsigned long long)bytes,
                              be->opts.n_slots, be->opts.n_ctx);
        base[s] = (uint64_t)(uintptr_t)be->slot_mem[s];
    }
    MEMRA_TRY(memra_slot_pool_init(&be->pool, &be->layout, be->opts.n_slots, base, err));
    for (uint32_t i = 0; i < be->n_tiers * be->n_stages; i++) {
        cpu_plan *cp = &be->plans[i];
        cp->region_map = calloc(cp->plan->n_states ? cp->plan->n_states : 1, sizeof *cp->region_map);
        if (!cp->region_map)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "region map: out of memory");
        MEMRA_TRY(memra_slot_layout_bind(&be->layout, cp->plan, cp->region_map, err));
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* Arenas (largest tier per stage), tick blocks, bound launches. */
static int setup_exec(memra_cpu_backend *be, memra_err *err)
{
    int rc;
    for (uint32_t s = 0; s < be->n_stages; s++) {
        uint64_t bytes = 0;
        for (uint32_t t = 0; t < be->n_tiers; t++)
            if (plan_at(be, t, s)->plan->arena_bytes > bytes)
                bytes = plan_at(be, t, s)->plan->arena_bytes;
        be->arena[s] = zalloc(bytes);
        if (!be->arena[s])
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "stage %u: cannot allocate a %llu-byte arena",
                              s, (unsigned long long)bytes);
    }
    for (uint32_t t = 0; t < be->n_tiers; t++)
        for (uint32_t s = 0; s < be->n_stages; s++) {
            cpu_plan *cp = plan_at(be, t, s);
            MEMRA_TRY(memra_tick_alloc(&cp->tick, cp->plan->tier, cp->plan->n_states, err));
            MEMRA_TRY(bind_plan(be, t, s, err));
        }
    return MEMRA_OK;
fail:
    return rc;
}

int memra_cpu_backend_open(const char *plan_dir, const memra_gguf *g, const memra_cpu_opts *o,
                           memra_cpu_backend **out, memra_err *err)
{
    int rc;
    *out = NULL;
    memra_cpu_backend *be = calloc(1, sizeof *be);
    if (!be)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "cpu backend: out of memory");
    be->g = g;
    memra_cpu_opts_init(&be->opts);
    if (o)
        be->opts = *o;
    if (be->opts.n_slots == 0 || be->opts.n_slots > MEMRA_SLOT_MAX_SLOTS || be->opts.n_ctx == 0 ||
        be->opts.n_ctx > MEMRA_SLOT_MAX_CTX) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_slots = %u (1..%d) or n_ctx = %u (1..%u) "
                        "out of range", be->opts.n_slots, MEMRA_SLOT_MAX_SLOTS, be->opts.n_ctx,
                        MEMRA_SLOT_MAX_CTX);
        goto fail;
    }
    MEMRA_TRY(memra_op_skip_check(be->opts.skip_ops, err));
    MEMRA_TRY(load_plans(be, plan_dir, err));
    MEMRA_TRY(setup_slots(be, err));
    MEMRA_TRY(setup_exec(be, err));
    be->sessions = calloc(be->opts.n_slots, sizeof *be->sessions);
    if (!be->sessions) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "sessions: out of memory");
        goto fail;
    }
    *out = be;
    return MEMRA_OK;
fail:
    memra_cpu_backend_close(be);
    return rc;
}

void memra_cpu_backend_close(memra_cpu_backend *be)
{
    if (!be)
        return;
    for (uint32_t i = 0; be->plans && i < be->n_tiers * be->n_stages; i++) {
        memra_tick_free(&be->plans[i].tick);
        free(be->plans[i].region_map);
        free(be->plans[i].bound);
        memra_plan_free(be->plans[i].plan);
    }
    free(be->plans);
    for (uint32_t s = 0; s < MEMRA_PLAN_MAX_STAGES; s++) {
        free(be->arena[s]);
        free(be->slot_mem[s]);
    }
    memra_slot_pool_free(&be->pool);
    memra_slot_layout_free(&be->layout);
    memra_plan_manifest_free(be->m);
    free(be->sessions);
    free(be);
}

const memra_plan_manifest *memra_cpu_backend_manifest(const memra_cpu_backend *be) { return be->m; }
uint32_t memra_cpu_backend_n_vocab(const memra_cpu_backend *be) { return be->m->n_vocab; }

uint32_t memra_cpu_backend_last_tier(const memra_cpu_backend *be)
{
    return be->last_tier ? be->m->tiers[be->last_tier - 1] : 0;
}

/* ====================================== sessions ====================================== */

static const memra_sample_params k_greedy = {.temperature = 0.0f};

int memra_cpu_session_admit(memra_cpu_backend *be, const memra_sample_params *params,
                            uint32_t *session, memra_err *err)
{
    uint32_t slot;
    int rc = memra_slot_pool_acquire(&be->pool, &slot, err);
    if (rc != MEMRA_OK)
        return rc;
    for (uint32_t r = 0; r < be->layout.n_regions; r++) {
        const memra_slot_region *reg = &be->layout.regions[r];
        if (reg->zero_on_admit) /* a new sequence's conv window and delta state are zero */
            memset((void *)(uintptr_t)memra_slot_region_addr(&be->pool, slot, r), 0, reg->bytes);
    }
    be->sessions[slot] = (cpu_session){.live = 1, .pos = 0, .params = params ? *params : k_greedy};
    *session = slot;
    return MEMRA_OK;
}

static int session_ok(const memra_cpu_backend *be, uint32_t s)
{
    return s < be->opts.n_slots && be->sessions[s].live;
}

int memra_cpu_session_retire(memra_cpu_backend *be, uint32_t session, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    be->sessions[session].live = 0;
    return memra_slot_pool_release(&be->pool, session, err);
}

int memra_cpu_session_set_params(memra_cpu_backend *be, uint32_t session,
                                 const memra_sample_params *params, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    be->sessions[session].params = params ? *params : k_greedy;
    return MEMRA_OK;
}

uint32_t memra_cpu_session_pos(const memra_cpu_backend *be, uint32_t session)
{
    return session_ok(be, session) ? be->sessions[session].pos : 0;
}

/* ================================ synthetic history ================================= */

int memra_cpu_session_fill_synthetic(memra_cpu_backend *be, uint32_t session, uint32_t pos,
                                     uint64_t seed, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    if (pos >= be->opts.n_ctx)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "synthetic position %u: a session holds "
                          "n_ctx = %u tokens", pos, be->opts.n_ctx);
    for (uint32_t r = 0; r < be->layout.n_regions; r++) {
        void *base = (void *)(uintptr_t)memra_slot_region_addr(&be->pool, session, r);
        memra_synth_fill_args a;
        if (!memra_slot_synth_fill(&be->layout, r, pos, seed, base, &a))
            memset(base, 0, be->layout.regions[r].bytes);
        else if (memra_synth_fill_ref(&a) != MEMRA_OK)
            return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "synthetic history: region %s has dtype %d",
                              be->layout.regions[r].name, a.dtype);
    }
    be->sessions[session].pos = pos;
    return MEMRA_OK;
}

/* ======================================== step ======================================== */

/* Every input of a step, checked before anything runs; *tier_idx gets the manifest index. */
static int step_check(const memra_cpu_backend *be, const memra_cpu_step *st, uint32_t *tier_idx,
                      memra_err *err)
{
    const uint32_t max_b = be->m->tiers[be->n_tiers - 1];
    if (st->n_rows == 0 || st->n_rows > max_b || !st->sessions || !st->tokens)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: %u rows (1..%u) or missing arrays",
                          st->n_rows, max_b);
    const uint32_t tier = st->tier ? st->tier : memra_plan_tier_for(be->m, st->n_rows);
    uint32_t t = 0;
    while (t < be->n_tiers && be->m->tiers[t] != tier)
        t++;
    if (t == be->n_tiers || tier < st->n_rows)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: no plan tier %u for %u rows", tier,
                          st->n_rows);
    for (uint32_t r = 0; r < st->n_rows; r++) {
        const uint32_t s = st->sessions[r];
        if (!session_ok(be, s))
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step row %u: session %u is not admitted", r, s);
        for (uint32_t q = 0; q < r; q++)
            if (st->sessions[q] == s)
                return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: session %u in rows %u and %u", s, q, r);
        if (st->tokens[r] < 0 || (uint32_t)st->tokens[r] >= be->m->n_vocab)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step row %u: token %d outside the "
                              "vocabulary (0..%u)", r, st->tokens[r], be->m->n_vocab - 1);
        if (be->sessions[s].pos >= be->opts.n_ctx)
            return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "session %u is full (n_ctx = %u)", s,
                              be->opts.n_ctx);
    }
    *tier_idx = t;
    return MEMRA_OK;
}

/* Tick block of plan cp for this step: live rows from their sessions, padded rows inert
 * (token 0, position 0, greedy, every state pointer at the scratch slot). */
static void fill_tick(const memra_cpu_backend *be, cpu_plan *cp, const memra_cpu_step *st)
{
    memra_tick *tk = &cp->tick;
    const uint32_t b = tk->layout.b;
    for (uint32_t r = 0; r < b; r++) {
        const int live = r < st->n_rows;
        const cpu_session *se = live ? &be->sessions[st->sessions[r]] : NULL;
        const uint32_t slot = live ? st->sessions[r] : memra_slot_scratch(&be->pool);
        tk->tokens[r] = live ? st->tokens[r] : 0;
        tk->positions[r] = live ? (int32_t)se->pos : 0;
        tk->params[r] = live ? se->params : k_greedy;
        tk->params[r].step = live ? se->pos : 0;
        tk->out_tokens[r] = -1;
        for (uint32_t i = 0; i < cp->plan->n_states; i++)
            memra_tick_region_row(tk, i)[r] = memra_slot_region_addr(&be->pool, slot, cp->region_map[i]);
    }
}

static int run_plan(const cpu_plan *cp, uint64_t skip_ops, memra_err *err)
{
    const memra_plan *p = cp->plan;
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const uint32_t op = p->launches[i].op;
        if (skip_ops >> op & 1) /* opts.skip_ops: a timing experiment */
            continue;
        if (k_run[op](&cp->bound[i]) != MEMRA_OK) /* the args passed the check at open */
            return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "plan b%u s%u launch %u (%s) failed",
                              p->tier, p->stage, i, memra_op_get(op)->name);
    }
    return MEMRA_OK;
}

int memra_cpu_backend_step(memra_cpu_backend *be, const memra_cpu_step *st, memra_err *err)
{
    uint32_t t = 0;
    int rc = step_check(be, st, &t, err);
    if (rc != MEMRA_OK)
        return rc;
    be->last_tier = 0;
    for (uint32_t s = 0; s < be->n_stages; s++) {
        cpu_plan *cp = plan_at(be, t, s);
        fill_tick(be, cp, st);
        if (s > 0) { /* the [b, n_embd] boundary copy (a peer copy between devices on CUDA) */
            const memra_plan *q = plan_at(be, t, s - 1)->plan, *p = cp->plan;
            memcpy(be->arena[s] + p->buffers[p->input].offset,
                   be->arena[s - 1] + q->buffers[q->output].offset, p->buffers[p->input].bytes);
        }
        rc = run_plan(cp, be->opts.skip_ops, err);
        if (rc != MEMRA_OK)
            return rc;
    }
    const memra_tick *last = &plan_at(be, t, be->n_stages - 1)->tick;
    for (uint32_t r = 0; r < st->n_rows; r++) {
        be->sessions[st->sessions[r]].pos++;
        if (st->out_tokens)
            st->out_tokens[r] = last->out_tokens[r];
    }
    be->last_tier = t + 1;
    be->last_rows = st->n_rows;
    return MEMRA_OK;
}

const float *memra_cpu_backend_logits(const memra_cpu_backend *be, uint32_t row)
{
    if (!be->last_tier || row >= be->last_rows)
        return NULL;
    const memra_plan *p = plan_at(be, be->last_tier - 1, be->n_stages - 1)->plan;
    const float *logits = (const float *)(be->arena[be->n_stages - 1] + p->buffers[p->logits].offset);
    return logits + (size_t)row * be->m->n_vocab;
}
