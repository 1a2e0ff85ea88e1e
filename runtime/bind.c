/*
 * bind.c — launch binding (see bind.h for the mapping and the contract).
 *
 * One binder per op, each a straight field-by-field copy of the catalog order of ops.def
 * into kernels/<op>.h; the accessors below are the only place an arg becomes an address.
 * Sections: accessors -> binders -> dispatch.
 */
#include "bind.h"

#include <string.h>

#include "quant.h"

/* ===================================== accessors ===================================== */
/* The validator guarantees kinds; absent optional args give NULL / 0 / -1. */

static void *buf(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_BUF ? c->arena + a->offset : NULL;
}

/* The plan's gguf tensor of a weight arg: its type and shape (host metadata, never data). */
static const memra_gguf_tensor *wt(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_WEIGHT ? c->p->weights[a->index].tensor : NULL;
}

static const void *wdata(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    if (c->weights)
        return a->kind == MEMRA_ARG_WEIGHT ? c->weights[a->index] : NULL;
    const memra_gguf_tensor *t = wt(c, a);
    return t ? t->data : NULL;
}

static int32_t wtype(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    const memra_gguf_tensor *t = wt(c, a);
    return t ? (int32_t)t->type : -1;
}

/* Bytes of one row (ne[0] elements) of a weight; 0 when absent. */
static uint64_t wrow(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    const memra_gguf_tensor *t = wt(c, a);
    return t ? memra_quant_row_bytes((memra_qtype)t->type, t->ne[0]) : 0;
}

/* The pointer-table row of a state region: u64 [b], row r's base of the region. */
static const uint64_t *state(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_STATE ? memra_tick_region_row(c->tick, a->index) : NULL;
}

static void *tickf(const memra_bind_ctx *c, const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_TICK ? memra_tick_field_ptr(c->tick, a->index) : NULL;
}

static int32_t ival(const memra_plan_arg *a)
{
    return a->kind == MEMRA_ARG_INT ? (int32_t)a->i : 0;
}

static int32_t kv_qtype(const memra_plan_arg *a)
{
    return a->dtype == MEMRA_DT_F16 ? MEMRA_QT_F16 : a->dtype == MEMRA_DT_Q8_0 ? MEMRA_QT_Q8_0 : -1;
}

/* ====================================== binders ====================================== */

typedef void (*bind_fn)(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o);

static void bind_embed(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->embed = (memra_embed_args){.table = wdata(c, &a[MEMRA_EMBED_TABLE]),
                                  .tokens = tickf(c, &a[MEMRA_EMBED_TOKENS]),
                                  .x = buf(c, &a[MEMRA_EMBED_X]),
                                  .qtype = wtype(c, &a[MEMRA_EMBED_TABLE]),
                                  .n_embd = ival(&a[MEMRA_EMBED_N_EMBD]),
                                  .n_vocab = ival(&a[MEMRA_EMBED_N_VOCAB]),
                                  .b = (int32_t)c->p->tier,
                                  .row_bytes = wrow(c, &a[MEMRA_EMBED_TABLE])};
}

static void bind_rms_norm_q8(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->rms_norm_q8 = (memra_rms_norm_q8_args){.x = buf(c, &a[MEMRA_RMS_NORM_Q8_X]),
                                              .w = wdata(c, &a[MEMRA_RMS_NORM_Q8_W]),
                                              .y_q = buf(c, &a[MEMRA_RMS_NORM_Q8_Y]),
                                              .y_f32 = buf(c, &a[MEMRA_RMS_NORM_Q8_Y_F32]),
                                              .n = ival(&a[MEMRA_RMS_NORM_Q8_N]),
                                              .b = (int32_t)c->p->tier,
                                              .eps = a[MEMRA_RMS_NORM_Q8_EPS].f};
}

static void bind_mmvq(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    static const int w[4] = {MEMRA_MMVQ_W0, MEMRA_MMVQ_W1, MEMRA_MMVQ_W2, MEMRA_MMVQ_W3};
    static const int y[4] = {MEMRA_MMVQ_OUT0, MEMRA_MMVQ_OUT1, MEMRA_MMVQ_OUT2, MEMRA_MMVQ_OUT3};
    static const int n[4] = {MEMRA_MMVQ_N0, MEMRA_MMVQ_N1, MEMRA_MMVQ_N2, MEMRA_MMVQ_N3};
    static const int m[4] = {MEMRA_MMVQ_MODE0, MEMRA_MMVQ_MODE1, MEMRA_MMVQ_MODE2,
                             MEMRA_MMVQ_MODE3};
    static const int s[4] = {MEMRA_MMVQ_SCALE0, MEMRA_MMVQ_SCALE1, MEMRA_MMVQ_SCALE2,
                             MEMRA_MMVQ_SCALE3};
    memset(&o->mmvq, 0, sizeof o->mmvq);
    o->mmvq.a = buf(c, &a[MEMRA_MMVQ_A]);
    o->mmvq.n_in = ival(&a[MEMRA_MMVQ_K]);
    o->mmvq.b = (int32_t)c->p->tier;
    for (int i = 0; i < 4 && a[w[i]].kind == MEMRA_ARG_WEIGHT; i++) {
        o->mmvq.out[i] = (memra_mmvq_out){.w = wdata(c, &a[w[i]]),
                                          .scale = wdata(c, &a[s[i]]),
                                          .y = buf(c, &a[y[i]]),
                                          .qtype = wtype(c, &a[w[i]]),
                                          .n_out = ival(&a[n[i]]),
                                          .mode = ival(&a[m[i]]),
                                          .row_bytes = wrow(c, &a[w[i]])};
        o->mmvq.n_w = i + 1;
    }
}

static void bind_attn_prep(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->attn_prep = (memra_attn_prep_args){
        .qg = buf(c, &a[MEMRA_ATTN_PREP_QG]),
        .k = buf(c, &a[MEMRA_ATTN_PREP_K]),
        .v = buf(c, &a[MEMRA_ATTN_PREP_V]),
        .q_norm = wdata(c, &a[MEMRA_ATTN_PREP_Q_NORM]),
        .k_norm = wdata(c, &a[MEMRA_ATTN_PREP_K_NORM]),
        .positions = tickf(c, &a[MEMRA_ATTN_PREP_POSITIONS]),
        .k_cache = state(c, &a[MEMRA_ATTN_PREP_K_CACHE]),
        .v_cache = state(c, &a[MEMRA_ATTN_PREP_V_CACHE]),
        .q = buf(c, &a[MEMRA_ATTN_PREP_Q]),
        .n_head = ival(&a[MEMRA_ATTN_PREP_N_HEAD]),
        .n_head_kv = ival(&a[MEMRA_ATTN_PREP_N_HEAD_KV]),
        .head_dim = ival(&a[MEMRA_ATTN_PREP_HEAD_DIM]),
        .n_rot = ival(&a[MEMRA_ATTN_PREP_N_ROT]),
        .sections = {ival(&a[MEMRA_ATTN_PREP_SECT0]), ival(&a[MEMRA_ATTN_PREP_SECT1]),
                     ival(&a[MEMRA_ATTN_PREP_SECT2]), ival(&a[MEMRA_ATTN_PREP_SECT3])},
        .kv_type = kv_qtype(&a[MEMRA_ATTN_PREP_K_CACHE]),
        .n_ctx = (int32_t)c->n_ctx,
        .b = (int32_t)c->p->tier,
        .eps = a[MEMRA_ATTN_PREP_EPS].f,
        .freq_base = a[MEMRA_ATTN_PREP_ROPE_BASE].f,
        .freq_scale = a[MEMRA_ATTN_PREP_FREQ_SCALE].f};
}

static void bind_attn_decode(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->attn_decode =
        (memra_attn_decode_args){.q = buf(c, &a[MEMRA_ATTN_DECODE_Q]),
                                 .qg = buf(c, &a[MEMRA_ATTN_DECODE_QG]),
                                 .positions = tickf(c, &a[MEMRA_ATTN_DECODE_POSITIONS]),
                                 .k_cache = state(c, &a[MEMRA_ATTN_DECODE_K_CACHE]),
                                 .v_cache = state(c, &a[MEMRA_ATTN_DECODE_V_CACHE]),
                                 .scratch = buf(c, &a[MEMRA_ATTN_DECODE_SCRATCH]),
                                 .y_q = buf(c, &a[MEMRA_ATTN_DECODE_O]),
                                 .n_head = ival(&a[MEMRA_ATTN_DECODE_N_HEAD]),
                                 .n_head_kv = ival(&a[MEMRA_ATTN_DECODE_N_HEAD_KV]),
                                 .head_dim = ival(&a[MEMRA_ATTN_DECODE_HEAD_DIM]),
                                 .kv_type = kv_qtype(&a[MEMRA_ATTN_DECODE_K_CACHE]),
                                 .n_ctx = (int32_t)c->n_ctx,
                                 .max_split = ival(&a[MEMRA_ATTN_DECODE_MAX_SPLIT]),
                                 .b = (int32_t)c->p->tier,
                                 .scale = a[MEMRA_ATTN_DECODE_SCALE].f};
}

static void bind_gdn_step(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->gdn_step = (memra_gdn_step_args){.qkv = buf(c, &a[MEMRA_GDN_STEP_QKV]),
                                        .z = buf(c, &a[MEMRA_GDN_STEP_Z]),
                                        .beta = buf(c, &a[MEMRA_GDN_STEP_BETA]),
                                        .alpha = buf(c, &a[MEMRA_GDN_STEP_ALPHA]),
                                        .conv_w = wdata(c, &a[MEMRA_GDN_STEP_CONV_W]),
                                        .dt_bias = wdata(c, &a[MEMRA_GDN_STEP_DT_BIAS]),
                                        .ssm_a = wdata(c, &a[MEMRA_GDN_STEP_SSM_A]),
                                        .norm_w = wdata(c, &a[MEMRA_GDN_STEP_NORM]),
                                        .conv_state = state(c, &a[MEMRA_GDN_STEP_CONV_STATE]),
                                        .ssm_state = state(c, &a[MEMRA_GDN_STEP_SSM_STATE]),
                                        .y_q = buf(c, &a[MEMRA_GDN_STEP_O]),
                                        .n_k_head = ival(&a[MEMRA_GDN_STEP_N_K_HEAD]),
                                        .n_v_head = ival(&a[MEMRA_GDN_STEP_N_V_HEAD]),
                                        .head_k_dim = ival(&a[MEMRA_GDN_STEP_HEAD_K_DIM]),
                                        .head_v_dim = ival(&a[MEMRA_GDN_STEP_HEAD_V_DIM]),
                                        .conv_k = ival(&a[MEMRA_GDN_STEP_CONV_K]),
                                        .head_map = ival(&a[MEMRA_GDN_STEP_HEAD_MAP]),
                                        .b = (int32_t)c->p->tier,
                                        .eps = a[MEMRA_GDN_STEP_EPS].f};
}

static void bind_silu_mul_q8(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    memset(&o->silu_mul_q8, 0, sizeof o->silu_mul_q8);
    o->silu_mul_q8.b = (int32_t)c->p->tier;
    o->silu_mul_q8.n_slots = a[MEMRA_SILU_MUL_Q8_G1].kind == MEMRA_ARG_BUF ? 2 : 1;
    o->silu_mul_q8.slot[0] = (memra_silu_mul_q8_slot){.g = buf(c, &a[MEMRA_SILU_MUL_Q8_G0]),
                                                      .u = buf(c, &a[MEMRA_SILU_MUL_Q8_U0]),
                                                      .y_q = buf(c, &a[MEMRA_SILU_MUL_Q8_Y0]),
                                                      .n = ival(&a[MEMRA_SILU_MUL_Q8_N0]),
                                                      .m = ival(&a[MEMRA_SILU_MUL_Q8_M0])};
    o->silu_mul_q8.slot[1] = (memra_silu_mul_q8_slot){.g = buf(c, &a[MEMRA_SILU_MUL_Q8_G1]),
                                                      .u = buf(c, &a[MEMRA_SILU_MUL_Q8_U1]),
                                                      .y_q = buf(c, &a[MEMRA_SILU_MUL_Q8_Y1]),
                                                      .n = ival(&a[MEMRA_SILU_MUL_Q8_N1]),
                                                      .m = ival(&a[MEMRA_SILU_MUL_Q8_M1])};
}

static void bind_moe_route(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->moe_route = (memra_moe_route_args){.logits = buf(c, &a[MEMRA_MOE_ROUTE_LOGITS]),
                                          .ids = buf(c, &a[MEMRA_MOE_ROUTE_IDS]),
                                          .weights = buf(c, &a[MEMRA_MOE_ROUTE_WTS]),
                                          .n_expert = ival(&a[MEMRA_MOE_ROUTE_N_EXPERT]),
                                          .n_used = ival(&a[MEMRA_MOE_ROUTE_N_USED]),
                                          .b = (int32_t)c->p->tier};
}

static void bind_mmvq_moe(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
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
        o->mmvq_moe.out[i] =
            (memra_mmvq_moe_out){.w = wdata(c, &a[w[i]]),
                                 .scale = wdata(c, &a[s[i]]),
                                 .y = buf(c, &a[y[i]]),
                                 .qtype = wtype(c, &a[w[i]]),
                                 .n_out = ival(&a[n[i]]),
                                 .row_bytes = rb,
                                 .expert_bytes = rb * (uint64_t)wt(c, &a[w[i]])->ne[1]};
        o->mmvq_moe.n_w = i + 1;
    }
}

static void bind_moe_down(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    const uint64_t rb = wrow(c, &a[MEMRA_MOE_DOWN_W]);
    const memra_gguf_tensor *w = wt(c, &a[MEMRA_MOE_DOWN_W]);
    o->moe_down = (memra_moe_down_args){.a = buf(c, &a[MEMRA_MOE_DOWN_A]),
                                        .ids = buf(c, &a[MEMRA_MOE_DOWN_IDS]),
                                        .wts = buf(c, &a[MEMRA_MOE_DOWN_WTS]),
                                        .w = wdata(c, &a[MEMRA_MOE_DOWN_W]),
                                        .scale = wdata(c, &a[MEMRA_MOE_DOWN_SCALE]),
                                        .x = buf(c, &a[MEMRA_MOE_DOWN_X]),
                                        .sh_a = buf(c, &a[MEMRA_MOE_DOWN_SH_A]),
                                        .sh_w = wdata(c, &a[MEMRA_MOE_DOWN_SH_W]),
                                        .sh_scale = wdata(c, &a[MEMRA_MOE_DOWN_SH_SCALE]),
                                        .sh_gate = buf(c, &a[MEMRA_MOE_DOWN_SH_GATE]),
                                        .row_bytes = rb,
                                        .expert_bytes = w ? rb * (uint64_t)w->ne[1] : 0,
                                        .sh_row_bytes = wrow(c, &a[MEMRA_MOE_DOWN_SH_W]),
                                        .qtype = wtype(c, &a[MEMRA_MOE_DOWN_W]),
                                        .sh_qtype = wtype(c, &a[MEMRA_MOE_DOWN_SH_W]),
                                        .k = ival(&a[MEMRA_MOE_DOWN_K]),
                                        .n = ival(&a[MEMRA_MOE_DOWN_N]),
                                        .n_used = ival(&a[MEMRA_MOE_DOWN_N_USED]),
                                        .n_expert = ival(&a[MEMRA_MOE_DOWN_N_EXPERT]),
                                        .k_sh = ival(&a[MEMRA_MOE_DOWN_K_SH]),
                                        .b = (int32_t)c->p->tier};
}

static void bind_sample(const memra_bind_ctx *c, const memra_plan_arg *a, memra_op_args *o)
{
    o->sample = (memra_sample_args){.logits = buf(c, &a[MEMRA_SAMPLE_LOGITS]),
                                    .params = tickf(c, &a[MEMRA_SAMPLE_PARAMS]),
                                    .out_tokens = tickf(c, &a[MEMRA_SAMPLE_OUT_TOKENS]),
                                    .scratch = buf(c, &a[MEMRA_SAMPLE_SCRATCH]),
                                    .n_vocab = ival(&a[MEMRA_SAMPLE_N_VOCAB]),
                                    .b = (int32_t)c->p->tier};
}

/* ===================================== dispatch ====================================== */

/* One binder per op of ops.def: an op without one does not compile. */
static const bind_fn k_bind[MEMRA_OP_COUNT] = {
#define MEMRA_OP(OP, op, key, doc) [MEMRA_OP_##OP] = bind_##op,
#include "ops.def"
};

int memra_bind_launch(const memra_bind_ctx *c, const memra_plan_launch *l, memra_op_args *out)
{
    if (l->op >= MEMRA_OP_COUNT)
        return MEMRA_ERR_UNSUPPORTED;
    k_bind[l->op](c, l->args, out);
    return MEMRA_OK;
}

const char *memra_bind_check(uint32_t id, const memra_op_args *a)
{
    switch (id) {
#define MEMRA_OP(OP, op, key, doc)                                                                 \
    case MEMRA_OP_##OP:                                                                            \
        return memra_##op##_check(&a->op);
#include "ops.def"
    }
    return "unknown op";
}
