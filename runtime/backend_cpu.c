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

#include "attn_decode.h"
#include "attn_prep.h"
#include "embed.h"
#include "gdn_step.h"
#include "mmvq.h"
#include "mmvq_moe.h"
#include "moe_down.h"
#include "moe_route.h"
#include "quant.h"
#include "rms_norm_q8.h"
#include "silu_mul_q8.h"
#include "slots.h"
#include "synth_fill.h"
#include "tick.h"

/* ====================================== op table ====================================== */

typedef union op_args {
    memra_embed_args embed;
    memra_rms_norm_q8_args rms_norm_q8;
    memra_mmvq_args mmvq;
    memra_attn_prep_args attn_prep;
    memra_attn_decode_args attn_decode;
    memra_gdn_step_args gdn_step;
    memra_silu_mul_q8_args silu_mul_q8;
    memra_moe_route_args moe_route;
    memra_mmvq_moe_args mmvq_moe;
    memra_moe_down_args moe_down;
    memra_sample_args sample;
} op_args;

/* What binding needs: the plan, its stage's arena, its tick block, the context length. */
typedef struct bind_ctx {
    const memra_plan *p;
    uint8_t *arena;
    const memra_tick *tick;
    uint32_t n_ctx;
} bind_ctx;

typedef void (*bind_fn)(const bind_ctx *c, const memra_plan_arg *a, op_args *out);

typedef struct op_impl {
    bind_fn bind;
    const char *(*check)(const op_args *a);
    int (*run)(const op_args *a);
} op_impl;

/* --- arg accessors (the validator guarantees kinds; absent optional args give NULL) --- */

static void *buf(const bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_BUF ? c->arena + a->offset : NULL;
}

static const memra_gguf_tensor *wt(const bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_WEIGHT ? c->p->weights[a->index].tensor : NULL;
}

static const void *wdata(const bind_ctx *c, const memra_plan_arg *a)
{
    const memra_gguf_tensor *t = wt(c, a);
    return t ? t->data : NULL;
}

static int32_t wtype(const bind_ctx *c, const memra_plan_arg *a)
{
    const memra_gguf_tensor *t = wt(c, a);
    return t ? (int32_t)t->type : -1;
}

/* Bytes of one row (ne[0] elements) of a weight; 0 when absent. */
static uint64_t wrow(const bind_ctx *c, const memra_plan_arg *a)
{
    const memra_gguf_tensor *t = wt(c, a);
    return t ? memra_quant_row_bytes((memra_qtype)t->type, t->ne[0]) : 0;
}

static const uint64_t *state(const bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_STATE ? memra_tick_region_row(c->tick, a->index) : NULL;
}

static void *tickf(const bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_TICK ? memra_tick_field_ptr(c->tick, a->index) : NULL;
}

static int32_t ival(const memra_plan_arg *a) { return a->kind == MEMRA_ARG_INT ? (int32_t)a->i : 0; }

static int32_t kv_qtype(const memra_plan_arg *a)
{
    return a->dtype == MEMRA_DT_F16 ? MEMRA_QT_F16 : a->dtype == MEMRA_DT_Q8_0 ? MEMRA_QT_Q8_0 : -1;
}

/* ------------------------------------- binders ------------------------------------- */

static void bind_embed(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->embed = (memra_embed_args){
        .table = wdata(c, &a[MEMRA_EMBED_TABLE]), .tokens = tickf(c, &a[MEMRA_EMBED_TOKENS]),
        .x = buf(c, &a[MEMRA_EMBED_X]), .qtype = wtype(c, &a[MEMRA_EMBED_TABLE]),
        .n_embd = ival(&a[MEMRA_EMBED_N_EMBD]), .n_vocab = ival(&a[MEMRA_EMBED_N_VOCAB]),
        .b = (int32_t)c->p->tier, .row_bytes = wrow(c, &a[MEMRA_EMBED_TABLE])};
}

static void bind_rms_norm_q8(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->rms_norm_q8 = (memra_rms_norm_q8_args){
        .x = buf(c, &a[MEMRA_RMS_NORM_Q8_X]), .w = wdata(c, &a[MEMRA_RMS_NORM_Q8_W]),
        .y_q = buf(c, &a[MEMRA_RMS_NORM_Q8_Y]), .y_f32 = buf(c, &a[MEMRA_RMS_NORM_Q8_Y_F32]),
        .n = ival(&a[MEMRA_RMS_NORM_Q8_N]), .b = (int32_t)c->p->tier,
        .eps = a[MEMRA_RMS_NORM_Q8_EPS].f};
}

static void bind_mmvq(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    static const int w[4] = {MEMRA_MMVQ_W0, MEMRA_MMVQ_W1, MEMRA_MMVQ_W2, MEMRA_MMVQ_W3};
    static const int y[4] = {MEMRA_MMVQ_OUT0, MEMRA_MMVQ_OUT1, MEMRA_MMVQ_OUT2, MEMRA_MMVQ_OUT3};
    static const int n[4] = {MEMRA_MMVQ_N0, MEMRA_MMVQ_N1, MEMRA_MMVQ_N2, MEMRA_MMVQ_N3};
    static const int m[4] = {MEMRA_MMVQ_MODE0, MEMRA_MMVQ_MODE1, MEMRA_MMVQ_MODE2, MEMRA_MMVQ_MODE3};
    static const int s[4] = {MEMRA_MMVQ_SCALE0, MEMRA_MMVQ_SCALE1, MEMRA_MMVQ_SCALE2, MEMRA_MMVQ_SCALE3};
    memset(&o->mmvq, 0, sizeof o->mmvq);
    o->mmvq.a = buf(c, &a[MEMRA_MMVQ_A]);
    o->mmvq.n_in = ival(&a[MEMRA_MMVQ_K]);
    o->mmvq.b = (int32_t)c->p->tier;
    for (int i = 0; i < 4 && a[w[i]].kind == MEMRA_ARG_WEIGHT; i++) {
        o->mmvq.out[i] = (memra_mmvq_out){
            .w = wdata(c, &a[w[i]]), .scale = wdata(c, &a[s[i]]), .y = buf(c, &a[y[i]]),
            .qtype = wtype(c, &a[w[i]]), .n_out = ival(&a[n[i]]), .mode = ival(&a[m[i]]),
            .row_bytes = wrow(c, &a[w[i]])};
        o->mmvq.n_w = i + 1;
    }
}

static void bind_attn_prep(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->attn_prep = (memra_attn_prep_args){
        .qg = buf(c, &a[MEMRA_ATTN_PREP_QG]), .k = buf(c, &a[MEMRA_ATTN_PREP_K]),
        .v = buf(c, &a[MEMRA_ATTN_PREP_V]), .q_norm = wdata(c, &a[MEMRA_ATTN_PREP_Q_NORM]),
        .k_norm = wdata(c, &a[MEMRA_ATTN_PREP_K_NORM]),
        .positions = tickf(c, &a[MEMRA_ATTN_PREP_POSITIONS]),
        .k_cache = state(c, &a[MEMRA_ATTN_PREP_K_CACHE]),
        .v_cache = state(c, &a[MEMRA_ATTN_PREP_V_CACHE]), .q = buf(c, &a[MEMRA_ATTN_PREP_Q]),
        .n_head = ival(&a[MEMRA_ATTN_PREP_N_HEAD]), .n_head_kv = ival(&a[MEMRA_ATTN_PREP_N_HEAD_KV]),
        .head_dim = ival(&a[MEMRA_ATTN_PREP_HEAD_DIM]), .n_rot = ival(&a[MEMRA_ATTN_PREP_N_ROT]),
        .sections = {ival(&a[MEMRA_ATTN_PREP_SECT0]), ival(&a[MEMRA_ATTN_PREP_SECT1]),
                     ival(&a[MEMRA_ATTN_PREP_SECT2]), ival(&a[MEMRA_ATTN_PREP_SECT3])},
        .kv_type = kv_qtype(&a[MEMRA_ATTN_PREP_K_CACHE]), .n_ctx = (int32_t)c->n_ctx,
        .b = (int32_t)c->p->tier, .eps = a[MEMRA_ATTN_PREP_EPS].f,
        .freq_base = a[MEMRA_ATTN_PREP_ROPE_BASE].f, .freq_scale = a[MEMRA_ATTN_PREP_FREQ_SCALE].f};
}

static void bind_attn_decode(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->attn_decode = (memra_attn_decode_args){
        .q = buf(c, &a[MEMRA_ATTN_DECODE_Q]), .qg = buf(c, &a[MEMRA_ATTN_DECODE_QG]),
        .positions = tickf(c, &a[MEMRA_ATTN_DECODE_POSITIONS]),
        .k_cache = state(c, &a[MEMRA_ATTN_DECODE_K_CACHE]),
        .v_cache = state(c, &a[MEMRA_ATTN_DECODE_V_CACHE]),
        .scratch = buf(c, &a[MEMRA_ATTN_DECODE_SCRATCH]), .y_q = buf(c, &a[MEMRA_ATTN_DECODE_O]),
        .n_head = ival(&a[MEMRA_ATTN_DECODE_N_HEAD]),
        .n_head_kv = ival(&a[MEMRA_ATTN_DECODE_N_HEAD_KV]),
        .head_dim = ival(&a[MEMRA_ATTN_DECODE_HEAD_DIM]),
        .kv_type = kv_qtype(&a[MEMRA_ATTN_DECODE_K_CACHE]), .n_ctx = (int32_t)c->n_ctx,
        .max_split = ival(&a[MEMRA_ATTN_DECODE_MAX_SPLIT]), .b = (int32_t)c->p->tier,
        .scale = a[MEMRA_ATTN_DECODE_SCALE].f};
}

static void bind_gdn_step(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->gdn_step = (memra_gdn_step_args){
        .qkv = buf(c, &a[MEMRA_GDN_STEP_QKV]), .z = buf(c, &a[MEMRA_GDN_STEP_Z]),
        .beta = buf(c, &a[MEMRA_GDN_STEP_BETA]), .alpha = buf(c, &a[MEMRA_GDN_STEP_ALPHA]),
        .conv_w = wdata(c, &a[MEMRA_GDN_STEP_CONV_W]), .dt_bias = wdata(c, &a[MEMRA_GDN_STEP_DT_BIAS]),
        .ssm_a = wdata(c, &a[MEMRA_GDN_STEP_SSM_A]), .norm_w = wdata(c, &a[MEMRA_GDN_STEP_NORM]),
        .conv_state = state(c, &a[MEMRA_GDN_STEP_CONV_STATE]),
        .ssm_state = state(c, &a[MEMRA_GDN_STEP_SSM_STATE]), .y_q = buf(c, &a[MEMRA_GDN_STEP_O]),
        .n_k_head = ival(&a[MEMRA_GDN_STEP_N_K_HEAD]), .n_v_head = ival(&a[MEMRA_GDN_STEP_N_V_HEAD]),
        .head_k_dim = ival(&a[MEMRA_GDN_STEP_HEAD_K_DIM]),
        .head_v_dim = ival(&a[MEMRA_GDN_STEP_HEAD_V_DIM]), .conv_k = ival(&a[MEMRA_GDN_STEP_CONV_K]),
        .head_map = ival(&a[MEMRA_GDN_STEP_HEAD_MAP]), .b = (int32_t)c->p->tier,
        .eps = a[MEMRA_GDN_STEP_EPS].f};
}

static void bind_silu_mul_q8(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    memset(&o->silu_mul_q8, 0, sizeof o->silu_mul_q8);
    o->silu_mul_q8.b = (int32_t)c->p->tier;
    o->silu_mul_q8.n_slots = a[MEMRA_SILU_MUL_Q8_G1].kind == MEMRA_ARG_BUF ? 2 : 1;
    o->silu_mul_q8.slot[0] = (memra_silu_mul_q8_slot){
        .g = buf(c, &a[MEMRA_SILU_MUL_Q8_G0]), .u = buf(c, &a[MEMRA_SILU_MUL_Q8_U0]),
        .y_q = buf(c, &a[MEMRA_SILU_MUL_Q8_Y0]), .n = ival(&a[MEMRA_SILU_MUL_Q8_N0]),
        .m = ival(&a[MEMRA_SILU_MUL_Q8_M0])};
    o->silu_mul_q8.slot[1] = (memra_silu_mul_q8_slot){
        .g = buf(c, &a[MEMRA_SILU_MUL_Q8_G1]), .u = buf(c, &a[MEMRA_SILU_MUL_Q8_U1]),
        .y_q = buf(c, &a[MEMRA_SILU_MUL_Q8_Y1]), .n = ival(&a[MEMRA_SILU_MUL_Q8_N1]),
        .m = ival(&a[MEMRA_SILU_MUL_Q8_M1])};
}

static void bind_moe_route(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->moe_route = (memra_moe_route_args){
        .logits = buf(c, &a[MEMRA_MOE_ROUTE_LOGITS]), .ids = buf(c, &a[MEMRA_MOE_ROUTE_IDS]),
        .weights = buf(c, &a[MEMRA_MOE_ROUTE_WTS]), .n_expert = ival(&a[MEMRA_MOE_ROUTE_N_EXPERT]),
        .n_used = ival(&a[MEMRA_MOE_ROUTE_N_USED]), .b = (int32_t)c->p->tier};
}

static void bind_mmvq_moe(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    static const int w[2] = {MEMRA_MMVQ_MOE_W0, MEMRA_MMVQ_MOE_W1};
    static const int y[2] = {MEMRA_MMVQ_MOE_OUT0, MEMRA_MMVQ_MOE_OUT1};
    static const int n[2] = {MEMRA_MMVQ_MOE_N0, MEMRA_MMVQ_MOE_N1};
    static const int s[2] = {MEMRA_MMVQ_MOE_SCALE0, MEMRA_MMVQ_MOE_SCALE1};
    memset(&o->mmvq_moe, 0, sizeof o->mmvq_moe);
    o->mmvq_moe.a = buf(c, &a[MEMRA_MMVQ_MOE_A]);
    o->mmvq_moe.ids = buf(c, &a[MEMRA_MMVQ_MOE_IDS]);
    o->mmvq_moe.k = ival(&a[MEMRA_MMVQ_MOE_K]);
    o->mmvq_moe.n_used = ival(&a[MEMRA_MMVQ_MOE_N_USED]);
    o->mmvq_moe.n_expert = ival(&a[MEMRA_MMVQ_MOE_N_EXPERT]);
    o->mmvq_moe.b = (int32_t)c->p->tier;
    for (int i = 0; i < 2 && a[w[i]].kind == MEMRA_ARG_WEIGHT; i++) {
        const uint64_t rb = wrow(c, &a[w[i]]);
        o->mmvq_moe.out[i] = (memra_mmvq_moe_out){
            .w = wdata(c, &a[w[i]]), .scale = wdata(c, &a[s[i]]), .y = buf(c, &a[y[i]]),
            .qtype = wtype(c, &a[w[i]]), .n_out = ival(&a[n[i]]), .row_bytes = rb,
            .expert_bytes = rb * (uint64_t)wt(c, &a[w[i]])->ne[1]};
        o->mmvq_moe.n_w = i + 1;
    }
}

static void bind_moe_down(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    const uint64_t rb = wrow(c, &a[MEMRA_MOE_DOWN_W]);
    const memra_gguf_tensor *w = wt(c, &a[MEMRA_MOE_DOWN_W]);
    o->moe_down = (memra_moe_down_args){
        .a = buf(c, &a[MEMRA_MOE_DOWN_A]), .ids = buf(c, &a[MEMRA_MOE_DOWN_IDS]),
        .wts = buf(c, &a[MEMRA_MOE_DOWN_WTS]), .w = wdata(c, &a[MEMRA_MOE_DOWN_W]),
        .scale = wdata(c, &a[MEMRA_MOE_DOWN_SCALE]), .x = buf(c, &a[MEMRA_MOE_DOWN_X]),
        .sh_a = buf(c, &a[MEMRA_MOE_DOWN_SH_A]), .sh_w = wdata(c, &a[MEMRA_MOE_DOWN_SH_W]),
        .sh_scale = wdata(c, &a[MEMRA_MOE_DOWN_SH_SCALE]),
        .sh_gate = buf(c, &a[MEMRA_MOE_DOWN_SH_GATE]), .row_bytes = rb,
        .expert_bytes = w ? rb * (uint64_t)w->ne[1] : 0, .sh_row_bytes = wrow(c, &a[MEMRA_MOE_DOWN_SH_W]),
        .qtype = wtype(c, &a[MEMRA_MOE_DOWN_W]), .sh_qtype = wtype(c, &a[MEMRA_MOE_DOWN_SH_W]),
        .k = ival(&a[MEMRA_MOE_DOWN_K]), .n = ival(&a[MEMRA_MOE_DOWN_N]),
        .n_used = ival(&a[MEMRA_MOE_DOWN_N_USED]), .n_expert = ival(&a[MEMRA_MOE_DOWN_N_EXPERT]),
        .k_sh = ival(&a[MEMRA_MOE_DOWN_K_SH]), .b = (int32_t)c->p->tier};
}

static void bind_sample(const bind_ctx *c, const memra_plan_arg *a, op_args *o)
{
    o->sample = (memra_sample_args){
        .logits = buf(c, &a[MEMRA_SAMPLE_LOGITS]), .params = tickf(c, &a[MEMRA_SAMPLE_PARAMS]),
        .out_tokens = tickf(c, &a[MEMRA_SAMPLE_OUT_TOKENS]), .scratch = buf(c, &a[MEMRA_SAMPLE_SCRATCH]),
        .n_vocab = ival(&a[MEMRA_SAMPLE_N_VOCAB]), .b = (int32_t)c->p->tier};
}

/* check/run wrappers over the typed functions of kernels/<op>.h */
#define OP_IMPL(OP, op)                                                                            \
    static const char *check_##op(const op_args *a) { return memra_##op##_check(&a->op); }        \
    static int run_##op(const op_args *a) { return memra_##op##_ref(&a->op); }
OP_IMPL(EMBED, embed)
OP_IMPL(RMS_NORM_Q8, rms_norm_q8)
OP_IMPL(MMVQ, mmvq)
OP_IMPL(ATTN_PREP, attn_prep)
OP_IMPL(ATTN_DECODE, attn_decode)
OP_IMPL(GDN_STEP, gdn_step)
OP_IMPL(SILU_MUL_Q8, silu_mul_q8)
OP_IMPL(MOE_ROUTE, moe_route)
OP_IMPL(MMVQ_MOE, mmvq_moe)
OP_IMPL(MOE_DOWN, moe_down)
OP_IMPL(SAMPLE, sample)
#undef OP_IMPL

#define IMPL(OP, op) [MEMRA_OP_##OP] = {bind_##op, check_##op, run_##op}
static const op_impl k_impl[MEMRA_OP_COUNT] = {
    IMPL(EMBED, embed),       IMPL(RMS_NORM_Q8, rms_norm_q8), IMPL(MMVQ, mmvq),
    IMPL(ATTN_PREP, attn_prep), IMPL(ATTN_DECODE, attn_decode), IMPL(GDN_STEP, gdn_step),
    IMPL(SILU_MUL_Q8, silu_mul_q8), IMPL(MOE_ROUTE, moe_route), IMPL(MMVQ_MOE, mmvq_moe),
    IMPL(MOE_DOWN, moe_down), IMPL(SAMPLE, sample),
};
#undef IMPL

/* ====================================== backend ======================================= */

typedef struct cpu_plan {
    memra_plan *plan;
    memra_tick tick;       /* this plan's tick block */
    uint32_t *region_map;  /* [n_states] -> slot layout region */
    op_args *bound;        /* [n_launches] */
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
    const bind_ctx c = {.p = p, .arena = be->arena[s], .tick = &cp->tick, .n_ctx = be->opts.n_ctx};
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const memra_plan_launch *l = &p->launches[i];
        const op_impl *im = l->op < MEMRA_OP_COUNT ? &k_impl[l->op] : NULL;
        if (!im || !im->bind)
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "plan b%u s%u launch %u: op %u has no "
                              "CPU implementation", p->tier, p->stage, i, l->op);
        im->bind(&c, l->args, &cp->bound[i]);
        const char *why = im->check(&cp->bound[i]);
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

/* Fill the first `bytes` of region r (of memra_slot_region reg) at dst. */
static void synth_fill(uint8_t *dst, const memra_slot_region *reg, uint32_t r, uint64_t bytes,
                       uint64_t seed)
{
    if (reg->dtype == MEMRA_DT_F32) {
        const float amp = reg->kind == MEMRA_SK_SSM ? 0.25f : 1.0f;
        float *f = (float *)dst; /* [bytes / 4] */
        for (uint64_t i = 0; i < bytes / 4; i++)
            f[i] = amp * memra_synth_value(seed, r, i);
    } else if (reg->dtype == MEMRA_DT_F16) {
        uint16_t *h = (uint16_t *)dst; /* [bytes / 2] */
        for (uint64_t i = 0; i < bytes / 2; i++)
            h[i] = memra_f32_to_fp16(memra_synth_value(seed, r, i));
    } else if (reg->dtype == MEMRA_DT_Q8_0) {
        const uint16_t d = memra_f32_to_fp16(1.0f / 127.0f);
        for (uint64_t j = 0; j < bytes / 34; j++) { /* 34-byte blocks: fp16 d, int8 qs[32] */
            uint8_t *blk = dst + j * 34;
            memcpy(blk, &d, 2);
            for (uint32_t k = 0; k < 32; k++)
                blk[2 + k] = (uint8_t)(int8_t)lrintf(127.0f * memra_synth_value(seed, r, j * 32 + k));
        }
    }
}

int memra_cpu_session_fill_synthetic(memra_cpu_backend *be, uint32_t session, uint32_t pos,
                                     uint64_t seed, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    if (pos >= be->opts.n_ctx)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "synthetic position %u: a session holds "
                          "n_ctx = %u tokens", pos, be->opts.n_ctx);
    for (uint32_t r = 0; r < be->layout.n_regions; r++) {
        const memra_slot_region *reg = &be->layout.regions[r];
        uint8_t *base = (uint8_t *)(uintptr_t)memra_slot_region_addr(&be->pool, session, r);
        if (reg->kind == MEMRA_SK_KV_K || reg->kind == MEMRA_SK_KV_V)
            synth_fill(base, reg, r, (uint64_t)pos * reg->unit_bytes, seed);
        else if (pos == 0)
            memset(base, 0, reg->bytes);
        else
            synth_fill(base, reg, r, reg->bytes, seed);
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

static int run_plan(const cpu_plan *cp, memra_err *err)
{
    const memra_plan *p = cp->plan;
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const uint32_t op = p->launches[i].op;
        if (k_impl[op].run(&cp->bound[i]) != MEMRA_OK) /* the args passed the check at open */
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
        rc = run_plan(cp, err);
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
