/*
 * forge.c — forges Qwen3.5 (qwen35 / qwen35moe) GGUF checkpoints with seeded random weights
 * (see forge.h for the contract).
 *
 * Must not: hold a whole tensor of a large model in memory, print, depend on the thread count
 * for any output byte, or write a tensor set that differs from spec/qwen35.md §2.
 * Invariants: a float weight is a pure function of (seed, tensor name, element index); a
 * row is quantized on its own (memra_quantize_row), so threads only change who computes a
 * row, never its bytes.
 *
 * Sections, in dependency order: the init table (every scale constant), presets, options,
 * the counter-based generator, the tensor plan (names, shapes, order, types), metadata,
 * streaming the tensor data, memra_forge_write.
 */
#include "forge.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"

/* ===================================================================================== */
/* THE INIT TABLE: every constant that sets the scale of a forged weight.                 */
/* ===================================================================================== */
/*
 * Goal: activations stay finite and logits non-degenerate over thousands of generated
 * tokens, for every preset, without training. Reasoning (pre-norm residual stream x):
 *  - every branch input is RMS-normalized (norm weights ~1), so an input projection with
 *    std 1/sqrt(fan_in) produces entries ~N(0,1): attention scores ~N(0,1) after q/k norm,
 *    GDN beta = sigmoid(~N(0,1)), router logits ~N(0,1), SwiGLU product RMS ~0.6;
 *  - residual outputs (attn_output, ssm_out, ffn_down*, and the shared expert's down) are
 *    further divided by sqrt(2L), so the L attention/GDN and L FFN updates add up like a
 *    random walk to RMS ~0.5 over the whole stack, comparable to the embedding (std 0.5):
 *    neither the current token nor the context dominates the final state;
 *  - output (LM head) std OUTPUT_GAIN/sqrt(D) gives logits with std ~OUTPUT_GAIN on the
 *    unit-RMS final norm output: the argmax follows the state, the softmax is peaked but
 *    not one-hot;
 *  - GDN decay: ssm_a = -exp(A_log), A_log ~ U(log 1, log 16) (the HF Qwen3-Next init);
 *    dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 0.1] (the Mamba-2 init), so
 *    with alpha ~N(0,1) the per-token decay exp(g) sits around 0.85-0.99: long but fading
 *    memory, a bounded state;
 *  - conv taps ~ U(-1/sqrt(K), 1/sqrt(K)) (PyTorch's Conv1d default bound);
 *  - norm weights are 1 + N(0, 0.05) (stored with the +1 baked in, as converted files; the
 *    GDN ssm_norm has no +1 in the file, its HF value is itself ~1, so it is drawn the same);
 *  - "N(0,1)" is the Irwin-Hall sum of four 16-bit uniforms, rescaled to unit variance:
 *    bounded by +-2*sqrt(3) = +-3.46, which also gives every matrix a known absolute maximum
 *    (used for the NVFP4 per-tensor scale).
 * Expert tensors get a per-expert gain in [1 - EXPERT_SPREAD/2, 1 + EXPERT_SPREAD/2] so
 * experts (and their NVFP4 scales) differ.
 * Another area (reference-model stability tests) may tune these numbers: change them here
 * only, and note the measured effect next to the number.
 */
typedef enum init_dist {
    DIST_NORMAL,          /* std * N(0,1) */
    DIST_ONE_PLUS_NORMAL, /* 1 + a * N(0,1) */
    DIST_UNIFORM,         /* U(-bound, bound) */
    DIST_SSM_A,           /* -exp(U(log a, log b)) */
    DIST_DT_BIAS,         /* softplus^-1(dt), dt = exp(U(log a, log b)) */
    DIST_NVFP4_SCALE,     /* the companion value (memra_forge_nvfp4_scale) */
} init_dist;

enum { FAN_NONE = 0, FAN_IN = 1, FAN_CONV = 2 };

typedef struct init_rule {
    init_dist dist;
    float a;   /* NORMAL/UNIFORM: gain; ONE_PLUS: jitter std; SSM_A, DT_BIAS: low end */
    float b;   /* SSM_A, DT_BIAS: high end */
    int fan;   /* FAN_IN: divide the gain by sqrt(ne0); FAN_CONV: by sqrt(K) */
    int resid; /* 1: residual output, also divide by sqrt(2 L) */
} init_rule;

#define EMBD_STD 0.5f      /* token_embd std */
#define OUTPUT_GAIN 3.0f   /* logit std on a unit-RMS state */
#define NORM_JITTER 0.05f  /* norm weights 1 + N(0, this) */
#define EXPERT_SPREAD 0.5f /* per-expert gain spread */

static const init_rule k_init[MEMRA_FORGE_ROLE_COUNT] = {
    [MEMRA_FORGE_TOKEN_EMBD] = {DIST_NORMAL, EMBD_STD, 0, FAN_NONE, 0},
    [MEMRA_FORGE_OUTPUT_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_OUTPUT] = {DIST_NORMAL, OUTPUT_GAIN, 0, FAN_IN, 0},
    [MEMRA_FORGE_ATTN_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_POST_ATTN_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_ATTN_Q] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_ATTN_K] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_ATTN_V] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_ATTN_OUTPUT] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 1},
    [MEMRA_FORGE_ATTN_Q_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_ATTN_K_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_SSM_QKV] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_SSM_GATE] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_SSM_CONV1D] = {DIST_UNIFORM, 1.0f, 0, FAN_CONV, 0},
    [MEMRA_FORGE_SSM_DT_BIAS] = {DIST_DT_BIAS, 1e-3f, 0.1f, FAN_NONE, 0},
    [MEMRA_FORGE_SSM_A] = {DIST_SSM_A, 1.0f, 16.0f, FAN_NONE, 0},
    [MEMRA_FORGE_SSM_BETA] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_SSM_ALPHA] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_SSM_NORM] = {DIST_ONE_PLUS_NORMAL, NORM_JITTER, 0, FAN_NONE, 0},
    [MEMRA_FORGE_SSM_OUT] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 1},
    [MEMRA_FORGE_FFN_GATE] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_UP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_DOWN] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 1},
    [MEMRA_FORGE_FFN_GATE_INP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_GATE_EXPS] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_UP_EXPS] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_DOWN_EXPS] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 1},
    [MEMRA_FORGE_FFN_GATE_INP_SHEXP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_GATE_SHEXP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_UP_SHEXP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 0},
    [MEMRA_FORGE_FFN_DOWN_SHEXP] = {DIST_NORMAL, 1.0f, 0, FAN_IN, 1},
    [MEMRA_FORGE_NVFP4_SCALE] = {DIST_NVFP4_SCALE, 0, 0, FAN_NONE, 0},
};

/* NVFP4 two-level scale: a matrix is stored as w / s in NVFP4, s = amax / (6 * 448) in the
 * F32 companion, so the largest element maps to the largest E2M1 code (6) under the largest
 * finite UE4M3 block scale (448), the recipe llama.cpp's NVFP4 emitter uses. */
#define NVFP4_RANGE (6.0 * 448.0)
/* amax of an Irwin-Hall "N(0,1)" draw: 2 * sqrt(3). */
#define NORMAL_BOUND 3.4641016151377544

/* ===================================================================================== */
/* Presets (spec/qwen35.md §5; "ext"/"inferred" as the spec tags them)                     */
/* ===================================================================================== */

static const memra_forge_shape k_presets[] = {
    /* name, arch, L, D, Hq, Hkv, dh, R, F, Hk, Hv, dk, K, interval, E, k, Fe, Fs, V, ctx */
    {"tiny", "qwen35", 8, 256, 4, 2, 64, 16, 512, 2, 4, 64, 4, 4, 0, 0, 0, 0, 0, 32768,
     "memra test shape: full attention at layers 3 and 7, GQA 4/2, GDN Hk 2 < Hv 4 (tiled "
     "head map visible), every row a multiple of 256"},
    {"tiny-moe", "qwen35moe", 8, 256, 4, 2, 64, 16, 0, 2, 4, 64, 4, 4, 8, 2, 256, 256, 0, 32768,
     "memra test shape: tiny with 8 experts, top-2, shared expert"},
    {"0.8b", "qwen35", 24, 1024, 8, 2, 256, 64, 3584, 16, 16, 128, 4, 4, 0, 0, 0, 0, 248320,
     262144, "Qwen3.5-0.8B: L, D loader; heads, dh, F, V ext; GDN 16/16/128 inferred"},
    {"2b", "qwen35", 24, 2048, 8, 2, 256, 64, 6144, 16, 16, 128, 4, 4, 0, 0, 0, 0, 248320,
     262144, "Qwen3.5-2B: L loader; D, heads, F, GDN all inferred"},
    {"4b", "qwen35", 32, 2560, 16, 4, 256, 64, 9216, 16, 32, 128, 4, 4, 0, 0, 0, 0, 248320,
     262144, "Qwen3.5-4B: L, D loader; rest ext (weak)"},
    {"9b", "qwen35", 32, 4096, 16, 4, 256, 64, 12288, 16, 32, 128, 4, 4, 0, 0, 0, 0, 248320,
     262144, "Qwen3.5-9B: L loader; D, heads, F, GDN, V ext"},
    {"27b", "qwen35", 64, 5120, 24, 4, 256, 64, 17408, 16, 48, 128, 4, 4, 0, 0, 0, 0, 248320,
     262144, "Qwen3.5-27B: L, D, heads, F snapshot; dh, GDN ext"},
    {"35b-a3b", "qwen35moe", 40, 2048, 16, 2, 256, 64, 0, 16, 32, 128, 4, 4, 256, 8, 512, 512,
     248320, 262144, "Qwen3.5-35B-A3B: L loader; the rest ext"},
};

size_t memra_forge_n_presets(void) { return sizeof k_presets / sizeof k_presets[0]; }

const memra_forge_shape *memra_forge_preset_at(size_t i)
{
    return i < memra_forge_n_presets() ? &k_presets[i] : NULL;
}

const memra_forge_shape *memra_forge_preset(const char *name)
{
    for (size_t i = 0; name && i < memra_forge_n_presets(); i++)
        if (strcmp(k_presets[i].name, name) == 0)
            return &k_presets[i];
    return NULL;
}

void memra_forge_rope_sections(uint32_t rope_dim, int32_t out[4])
{
    uint32_t pairs = rope_dim / 2;
    for (uint32_t i = 0; i < 3; i++)
        out[i] = (int32_t)(pairs / 3 + (i < pairs % 3 ? 1 : 0));
    out[3] = 0;
}

/* ===================================================================================== */
/* Options                                                                                */
/* ===================================================================================== */

void memra_forge_opts_init(memra_forge_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shape = memra_forge_preset("tiny");
    o->mix = MEMRA_FORGE_MIX_Q4_K_M;
    o->type = MEMRA_QT_Q8_0;
    o->seed = 1;
}

/* The single types a forged file may use, and the llama_ftype each writes to
 * general.file_type (llama.h enum llama_ftype; pure K-quant files have no ftype of their
 * own, so they carry the "_S" variant whose default type they are). */
static const struct {
    memra_qtype type;
    uint32_t ftype;
} k_single_types[] = {
    {MEMRA_QT_F32, 0},    {MEMRA_QT_F16, 1},    {MEMRA_QT_BF16, 32},  {MEMRA_QT_Q8_0, 7},
    {MEMRA_QT_Q4_0, 2},   {MEMRA_QT_Q4_K, 14},  {MEMRA_QT_Q5_K, 16},  {MEMRA_QT_Q6_K, 18},
    {MEMRA_QT_IQ4_XS, 30}, {MEMRA_QT_MXFP4, 38}, {MEMRA_QT_NVFP4, 39},
};
#define FTYPE_Q4_K_M 15u

int memra_forge_parse_type(const char *s, memra_forge_opts *o, memra_err *err)
{
    if (s && strcasecmp(s, "q4_k_m") == 0) {
        o->mix = MEMRA_FORGE_MIX_Q4_K_M;
        return MEMRA_OK;
    }
    int t = memra_qtype_from_name(s);
    for (size_t i = 0; t >= 0 && i < sizeof k_single_types / sizeof k_single_types[0]; i++) {
        if ((int)k_single_types[i].type == t) {
            o->mix = MEMRA_FORGE_MIX_NONE;
            o->type = (memra_qtype)t;
            return MEMRA_OK;
        }
    }
    return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                      "unknown weight type '%s' (q4_k_m f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k "
                      "iq4_xs mxfp4 nvfp4)",
                      s ? s : "(null)");
}

const char *memra_forge_type_name(const memra_forge_opts *o)
{
    if (o->mix == MEMRA_FORGE_MIX_Q4_K_M)
        return "q4_k_m";
    const memra_qtype_info *qi = memra_qtype_get(o->type);
    return qi ? qi->name : "?";
}

uint32_t memra_forge_file_type(const memra_forge_opts *o)
{
    if (o->mix == MEMRA_FORGE_MIX_Q4_K_M)
        return FTYPE_Q4_K_M;
    for (size_t i = 0; i < sizeof k_single_types / sizeof k_single_types[0]; i++)
        if (k_single_types[i].type == o->type)
            return k_single_types[i].ftype;
    return 0;
}

/* ===================================================================================== */
/* Counter-based generator                                                                */
/* ===================================================================================== */
/* Element i of a tensor is splitmix64's output at counter i + 1 of a stream whose key mixes
 * the seed and the FNV-1a hash of the tensor name: any element is computable on its own, in
 * any order, by any thread. Keying by name (not by position) keeps a tensor's values the
 * same whatever the type mix or the tensor order. */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return mix64(mix64(seed ^ 0x6D656D7261666F72ull) ^ h); /* "memrafor" */
}

static inline uint64_t draw(uint64_t key, uint64_t i)
{
    return mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

/* Irwin-Hall N(0,1): ((u0+u1+u2+u3) - 2) * sqrt(3), u_k = (16-bit + 0.5) / 65536; the sum of
 * four 17-bit fractions below 4 is exact in fp32. */
static inline float normal_of(uint64_t r)
{
    float s = 0.0f;
    for (int k = 0; k < 4; k++)
        s += ((float)((r >> (16 * k)) & 0xFFFF) + 0.5f) * (1.0f / 65536.0f);
    return (s - 2.0f) * 1.7320508075688772f;
}

/* (0, 1) from the top 24 bits. */
static inline double uniform_of(uint64_t r)
{
    return ((double)(r >> 40) + 0.5) * (1.0 / 16777216.0);
}

static double expert_gain(int64_t e)
{
    double f = fmod((double)(e + 1) * 0.6180339887498949, 1.0);
    return 1.0 + (double)EXPERT_SPREAD * (f - 0.5);
}

float memra_forge_nvfp4_scale(const memra_forge_opts *o, const memra_forge_tensor *matrix,
                              int64_t e)
{
    (void)o;
    double g = matrix->per_expert ? expert_gain(e) : 1.0;
    return (float)(NORMAL_BOUND * (double)matrix->std * g / NVFP4_RANGE);
}

/* Every distribution but NORMAL (whose rows take the fast path in memra_forge_fill_rows). */
static float draw_value(const init_rule *r, const memra_forge_tensor *t, uint64_t bits)
{
    switch (r->dist) {
    case DIST_ONE_PLUS_NORMAL:
        return 1.0f + t->std * normal_of(bits);
    case DIST_UNIFORM:
        return t->std * (float)(2.0 * uniform_of(bits) - 1.0);
    case DIST_SSM_A: {
        double la = log((double)r->a), lb = log((double)r->b);
        return (float)-exp(la + uniform_of(bits) * (lb - la));
    }
    case DIST_DT_BIAS: {
        double la = log((double)r->a), lb = log((double)r->b);
        double dt = exp(la + uniform_of(bits) * (lb - la));
        return (float)(dt + log(-expm1(-dt))); /* softplus^-1(dt) = log(e^dt - 1) */
    }
    case DIST_NORMAL:
    case DIST_NVFP4_SCALE:
        break;
    }
    return 0.0f;
}

void memra_forge_fill_rows(const memra_forge_opts *o, const memra_forge_tensor *t, int64_t row0,
                           int64_t n_rows, float *dst)
{
    const init_rule *r = &k_init[t->role];
    const int64_t ne0 = t->ne[0], rows_per_expert = t->ne[1];
    if (r->dist == DIST_NVFP4_SCALE) {
        /* A companion is one row of E (or 1) values; its per_expert/std mirror its matrix. */
        for (int64_t i = 0; i < n_rows * ne0; i++)
            dst[i] = memra_forge_nvfp4_scale(o, t, i % ne0);
        return;
    }
    const uint64_t key = name_key(o->seed, t->name);
    for (int64_t row = row0; row < row0 + n_rows; row++) {
        float *d = dst + (row - row0) * ne0;
        const uint64_t i0 = (uint64_t)(row * ne0);
        if (r->dist != DIST_NORMAL) {
            for (int64_t c = 0; c < ne0; c++)
                d[c] = draw_value(r, t, draw(key, i0 + (uint64_t)c));
            continue;
        }
        /* expert e = row / ne1 of a 3-D tensor scales its std by expert_gain(e) */
        const float std =
            t->per_expert ? (float)((double)t->std * expert_gain(row / rows_per_expert)) : t->std;
        for (int64_t c = 0; c < ne0; c++)
            d[c] = std * normal_of(draw(key, i0 + (uint64_t)c));
    }
}

/* ===================================================================================== */
/* The tensor plan                                                                        */
/* ===================================================================================== */
/*
 * Tensor order: llama-quantize writes tensors in its loader's weights_map order: global
 * tensors first (layer -1), then block 0, 1, ...; inside each group by strcmp of the name
 * (llama-model-loader.h weight_name_comparer). Real Q4_K_M checkpoints therefore list
 * output.weight, output_norm.weight, token_embd.weight, blk.0.attn_gate.weight, ... and the
 * forge uses the same order for every type. NVFP4 companions "<name>.scale" sort directly
 * after their matrix.
 */

typedef struct plan_builder {
    memra_forge_plan *p;
    size_t cap;
    const memra_forge_shape *s;
} plan_builder;

static int plan_push(plan_builder *b, memra_forge_role role, int32_t layer, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, const char *name, memra_err *err)
{
    if (b->p->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        memra_forge_tensor *t = realloc(b->p->t, cap * sizeof *t);
        if (!t)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "forge: no memory for the tensor plan");
        b->p->t = t;
        b->cap = cap;
    }
    memra_forge_tensor *t = &b->p->t[b->p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->layer = layer;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->scale_of = -1;
    t->per_expert = n_dims == 3;
    const init_rule *r = &k_init[role];
    double std = r->a;
    if (r->fan == FAN_IN)
        std /= sqrt((double)ne0);
    else if (r->fan == FAN_CONV)
        std /= sqrt((double)b->s->ssm_d_conv);
    if (r->resid)
        std /= sqrt(2.0 * b->s->n_layer);
    t->std = (float)std;
    return MEMRA_OK;
}

#define PUSH(role, n_dims, ne0, ne1, ne2, ...)                                                     \
    do {                                                                                           \
        snprintf(nm, sizeof nm, __VA_ARGS__);                                                      \
        MEMRA_TRY(plan_push(b, (role), layer, (n_dims), (ne0), (ne1), (ne2), nm, err));            \
    } while (0)

/* spec §2, full-attention layer. */
static int push_attn(plan_builder *b, int32_t layer, memra_err *err)
{
    const memra_forge_shape *s = b->s;
    const int64_t D = s->n_embd, dh = s->head_dim, q = (int64_t)s->n_head * dh,
                  kv = (int64_t)s->n_head_kv * dh;
    char nm[64];
    int rc = MEMRA_OK;
    PUSH(MEMRA_FORGE_ATTN_Q, 2, D, 2 * q, 1, "blk.%d.attn_q.weight", layer);
    PUSH(MEMRA_FORGE_ATTN_K, 2, D, kv, 1, "blk.%d.attn_k.weight", layer);
    PUSH(MEMRA_FORGE_ATTN_V, 2, D, kv, 1, "blk.%d.attn_v.weight", layer);
    PUSH(MEMRA_FORGE_ATTN_OUTPUT, 2, q, D, 1, "blk.%d.attn_output.weight", layer);
    PUSH(MEMRA_FORGE_ATTN_Q_NORM, 1, dh, 1, 1, "blk.%d.attn_q_norm.weight", layer);
    PUSH(MEMRA_FORGE_ATTN_K_NORM, 1, dh, 1, 1, "blk.%d.attn_k_norm.weight", layer);
fail:
    return rc;
}

/* spec §2, GDN layer (qwen35 / qwen35moe naming). */
static int push_gdn(plan_builder *b, int32_t layer, memra_err *err)
{
    const memra_forge_shape *s = b->s;
    const int64_t D = s->n_embd, Hv = s->ssm_dt_rank, dv = s->ssm_d_state;
    const int64_t Ck = (int64_t)s->ssm_n_group * s->ssm_d_state, Cv = Hv * dv, Cc = 2 * Ck + Cv;
    char nm[64];
    int rc = MEMRA_OK;
    PUSH(MEMRA_FORGE_SSM_QKV, 2, D, Cc, 1, "blk.%d.attn_qkv.weight", layer);
    PUSH(MEMRA_FORGE_SSM_GATE, 2, D, Cv, 1, "blk.%d.attn_gate.weight", layer);
    PUSH(MEMRA_FORGE_SSM_CONV1D, 2, s->ssm_d_conv, Cc, 1, "blk.%d.ssm_conv1d.weight", layer);
    PUSH(MEMRA_FORGE_SSM_DT_BIAS, 1, Hv, 1, 1, "blk.%d.ssm_dt.bias", layer);
    PUSH(MEMRA_FORGE_SSM_A, 1, Hv, 1, 1, "blk.%d.ssm_a", layer);
    PUSH(MEMRA_FORGE_SSM_BETA, 2, D, Hv, 1, "blk.%d.ssm_beta.weight", layer);
    PUSH(MEMRA_FORGE_SSM_ALPHA, 2, D, Hv, 1, "blk.%d.ssm_alpha.weight", layer);
    PUSH(MEMRA_FORGE_SSM_NORM, 1, dv, 1, 1, "blk.%d.ssm_norm.weight", layer);
    PUSH(MEMRA_FORGE_SSM_OUT, 2, Cv, D, 1, "blk.%d.ssm_out.weight", layer);
fail:
    return rc;
}

/* spec §2, dense FFN (qwen35) or MoE FFN with shared expert (qwen35moe). */
static int push_ffn(plan_builder *b, int32_t layer, memra_err *err)
{
    const memra_forge_shape *s = b->s;
    const int64_t D = s->n_embd, F = s->n_ff, E = s->n_expert, Fe = s->n_ff_exp,
                  Fs = s->n_ff_shexp;
    char nm[64];
    int rc = MEMRA_OK;
    if (E == 0) {
        PUSH(MEMRA_FORGE_FFN_GATE, 2, D, F, 1, "blk.%d.ffn_gate.weight", layer);
        PUSH(MEMRA_FORGE_FFN_UP, 2, D, F, 1, "blk.%d.ffn_up.weight", layer);
        PUSH(MEMRA_FORGE_FFN_DOWN, 2, F, D, 1, "blk.%d.ffn_down.weight", layer);
        return MEMRA_OK;
    }
    PUSH(MEMRA_FORGE_FFN_GATE_INP, 2, D, E, 1, "blk.%d.ffn_gate_inp.weight", layer);
    PUSH(MEMRA_FORGE_FFN_GATE_EXPS, 3, D, Fe, E, "blk.%d.ffn_gate_exps.weight", layer);
    PUSH(MEMRA_FORGE_FFN_UP_EXPS, 3, D, Fe, E, "blk.%d.ffn_up_exps.weight", layer);
    PUSH(MEMRA_FORGE_FFN_DOWN_EXPS, 3, Fe, D, E, "blk.%d.ffn_down_exps.weight", layer);
    /* HF shared_expert_gate is Linear(D, 1): ne {D, 1}; llama-quantize writes it 1-D. */
    PUSH(MEMRA_FORGE_FFN_GATE_INP_SHEXP, 1, D, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight", layer);
    PUSH(MEMRA_FORGE_FFN_GATE_SHEXP, 2, D, Fs, 1, "blk.%d.ffn_gate_shexp.weight", layer);
    PUSH(MEMRA_FORGE_FFN_UP_SHEXP, 2, D, Fs, 1, "blk.%d.ffn_up_shexp.weight", layer);
    PUSH(MEMRA_FORGE_FFN_DOWN_SHEXP, 2, Fs, D, 1, "blk.%d.ffn_down_shexp.weight", layer);
fail:
    return rc;
}

static int push_all(plan_builder *b, uint32_t V, memra_err *err)
{
    const memra_forge_shape *s = b->s;
    const int64_t D = s->n_embd;
    int32_t layer = -1;
    char nm[64];
    int rc = MEMRA_OK;
    PUSH(MEMRA_FORGE_TOKEN_EMBD, 2, D, V, 1, "token_embd.weight");
    PUSH(MEMRA_FORGE_OUTPUT_NORM, 1, D, 1, 1, "output_norm.weight");
    PUSH(MEMRA_FORGE_OUTPUT, 2, D, V, 1, "output.weight");
    for (layer = 0; layer < (int32_t)s->n_layer; layer++) {
        PUSH(MEMRA_FORGE_ATTN_NORM, 1, D, 1, 1, "blk.%d.attn_norm.weight", layer);
        PUSH(MEMRA_FORGE_POST_ATTN_NORM, 1, D, 1, 1, "blk.%d.post_attention_norm.weight", layer);
        if ((layer + 1) % (int32_t)s->full_attn_interval == 0)
            MEMRA_TRY(push_attn(b, layer, err));
        else
            MEMRA_TRY(push_gdn(b, layer, err));
        MEMRA_TRY(push_ffn(b, layer, err));
    }
fail:
    return rc;
}
#undef PUSH

static int cmp_file_order(const void *pa, const void *pb)
{
    const memra_forge_tensor *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* ---- Q4_K_M ----
 * llama.cpp src/llama-quant.cpp, llama_tensor_get_type_impl for LLAMA_FTYPE_MOSTLY_Q4_K_M,
 * restricted to the tensors qwen35/qwen35moe have (checked against the Q4_K_M section of
 * tests/snapshots/qwen3.5-27b.schema):
 *  - output.weight: Q6_K (Q8_0 if ne0 % 256 != 0);
 *  - "attn_v-like" tensors — attn_v AND attn_qkv (category_is_attn_v includes QKV, so the
 *    GDN attn_qkv counts like attn_v; its own Q5_K rule is unreachable): Q6_K when
 *    use_more_bits(i, n), i counting these tensors in file order, n = their number (= L:
 *    one per layer), else Q4_K;
 *  - every *ffn_down* tensor (ffn_down, ffn_down_exps, ffn_down_shexp): Q6_K when
 *    use_more_bits(layer, L), else Q4_K;
 *  - everything else 2-D/3-D (token_embd, attn_q/k/output, attn_gate, ssm_beta/alpha,
 *    ssm_out, ffn_gate/up*): Q4_K;
 *  - not quantized at all: 1-D tensors, ssm_conv1d, the router ffn_gate_inp (F32 here,
 *    as the converter writes them);
 *  - shape fallback when ne0 % 256 != 0: Q4_K -> Q5_0, Q6_K -> Q8_0 (tensor_type_fallback).
 * use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (C integer arithmetic). */
static int use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static memra_qtype q4_k_m_type(const memra_forge_tensor *t, int n_layer, int *i_wv, int n_wv)
{
    memra_qtype q = MEMRA_QT_Q4_K;
    switch (t->role) {
    case MEMRA_FORGE_OUTPUT:
        q = t->ne[0] % 256 ? MEMRA_QT_Q8_0 : MEMRA_QT_Q6_K;
        break;
    case MEMRA_FORGE_ATTN_V:
    case MEMRA_FORGE_SSM_QKV:
        q = use_more_bits((*i_wv)++, n_wv) ? MEMRA_QT_Q6_K : MEMRA_QT_Q4_K;
        break;
    case MEMRA_FORGE_FFN_DOWN:
    case MEMRA_FORGE_FFN_DOWN_EXPS:
    case MEMRA_FORGE_FFN_DOWN_SHEXP:
        q = use_more_bits(t->layer, n_layer) ? MEMRA_QT_Q6_K : MEMRA_QT_Q4_K;
        break;
    default:
        break;
    }
    if (t->ne[0] % 256 != 0)
        q = q == MEMRA_QT_Q4_K ? MEMRA_QT_Q5_0 : q == MEMRA_QT_Q6_K ? MEMRA_QT_Q8_0 : q;
    if (t->ne[0] % 32 != 0)
        q = MEMRA_QT_F16;
    return q;
}

static int is_float_only(const memra_forge_tensor *t)
{
    return t->n_dims == 1 || t->role == MEMRA_FORGE_SSM_CONV1D ||
           t->role == MEMRA_FORGE_FFN_GATE_INP;
}

static int assign_types(const memra_forge_opts *o, memra_forge_plan *p, memra_err *err)
{
    int n_wv = 0, i_wv = 0;
    for (size_t i = 0; i < p->n; i++)
        n_wv += p->t[i].role == MEMRA_FORGE_ATTN_V || p->t[i].role == MEMRA_FORGE_SSM_QKV;
    for (size_t i = 0; i < p->n; i++) {
        memra_forge_tensor *t = &p->t[i];
        if (is_float_only(t))
            t->type = MEMRA_QT_F32;
        else if (o->mix == MEMRA_FORGE_MIX_Q4_K_M)
            t->type = q4_k_m_type(t, (int)o->shape->n_layer, &i_wv, n_wv);
        else if (o->type == MEMRA_QT_NVFP4 &&
                 (t->role == MEMRA_FORGE_TOKEN_EMBD || t->role == MEMRA_FORGE_OUTPUT))
            t->type = MEMRA_QT_Q8_0; /* llama.cpp's NVFP4 emitter: no scale path for these */
        else
            t->type = o->type;
        const memra_qtype_info *qi = memra_qtype_get(t->type);
        if (!qi || t->ne[0] % qi->block_elems != 0)
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "forge: %s has ne0 %lld, not a multiple of the %s block", t->name,
                              (long long)t->ne[0], qi ? qi->name : "?");
        if (t->type != MEMRA_QT_F32 && !memra_quant_can_quantize(t->type))
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "forge: %s needs type %s, which the quantizer cannot write",
                              t->name, qi->name);
    }
    return MEMRA_OK;
}

/* Inserts "<base>.scale" F32 {1} (or {E}) after every NVFP4 matrix "<base>.weight". */
static int add_nvfp4_companions(memra_forge_plan *p, memra_err *err)
{
    size_t n_scale = 0;
    for (size_t i = 0; i < p->n; i++)
        n_scale += p->t[i].type == MEMRA_QT_NVFP4;
    if (n_scale == 0)
        return MEMRA_OK;
    memra_forge_tensor *t = malloc((p->n + n_scale) * sizeof *t);
    if (!t)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "forge: no memory for the tensor plan");
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++) {
        t[k++] = p->t[i];
        if (p->t[i].type != MEMRA_QT_NVFP4)
            continue;
        memra_forge_tensor *c = &t[k];
        *c = p->t[i];
        /* llama.cpp names the companion tn(<tensor>, "scale"): "blk.0.ffn_up.scale". */
        const char *nm = p->t[i].name;
        size_t len = strlen(nm);
        if (len > 7 && strcmp(nm + len - 7, ".weight") == 0)
            len -= 7;
        snprintf(c->name, sizeof c->name, "%.*s.scale", (int)(len > 57 ? 57 : len), nm);
        c->role = MEMRA_FORGE_NVFP4_SCALE;
        c->type = MEMRA_QT_F32;
        c->n_dims = 1;
        c->ne[0] = p->t[i].n_dims == 3 ? p->t[i].ne[2] : 1;
        c->ne[1] = c->ne[2] = c->ne[3] = 1;
        c->scale_of = (int32_t)(k - 1);
        k++;
    }
    free(p->t);
    p->t = t;
    p->n = k;
    return MEMRA_OK;
}

static int check_shape(const memra_forge_shape *s, uint32_t V, memra_err *err)
{
    int moe = s->arch && strcmp(s->arch, "qwen35moe") == 0;
    if (!s->arch || (!moe && strcmp(s->arch, "qwen35") != 0))
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "forge: arch '%s' (qwen35, qwen35moe)",
                          s->arch ? s->arch : "(null)");
    if (!s->n_layer || !s->n_embd || !s->n_head || !s->n_head_kv || !s->head_dim ||
        !s->ssm_n_group || !s->ssm_dt_rank || !s->ssm_d_state || !s->ssm_d_conv ||
        !s->full_attn_interval || !V || s->n_head % s->n_head_kv ||
        s->ssm_dt_rank % s->ssm_n_group || s->rope_dim > s->head_dim || s->rope_dim % 2)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: shape '%s' is inconsistent",
                          s->name ? s->name : "?");
    if (moe ? (!s->n_expert || !s->n_expert_used || s->n_expert_used > s->n_expert ||
               !s->n_ff_exp || !s->n_ff_shexp)
            : (!s->n_ff || s->n_expert))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: shape '%s' has bad FFN sizes",
                          s->name ? s->name : "?");
    return MEMRA_OK;
}

int memra_forge_plan_build(const memra_forge_opts *o, uint32_t n_vocab, memra_forge_plan *out,
                           memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (!o || !o->shape)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: no shape");
    const memra_forge_shape *s = o->shape;
    if (s->n_vocab && n_vocab > s->n_vocab)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "forge: vocabulary of %u tokens does not fit n_vocab %u", n_vocab,
                          s->n_vocab);
    uint32_t V = s->n_vocab ? s->n_vocab : n_vocab;
    int rc = MEMRA_OK;
    MEMRA_TRY(check_shape(s, V, err));
    plan_builder b = {out, 0, s};
    MEMRA_TRY(push_all(&b, V, err));
    qsort(out->t, out->n, sizeof *out->t, cmp_file_order);
    MEMRA_TRY(assign_types(o, out, err));
    MEMRA_TRY(add_nvfp4_companions(out, err));
    out->n_vocab = V;
    for (size_t i = 0; i < out->n; i++) {
        memra_forge_tensor *t = &out->t[i];
        t->nbytes = memra_quant_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]);
        out->data_bytes += t->nbytes;
        if (t->role != MEMRA_FORGE_NVFP4_SCALE)
            out->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
    }
    return MEMRA_OK;
fail:
    memra_forge_plan_free(out);
    return rc;
}

void memra_forge_plan_free(memra_forge_plan *p)
{
    if (!p)
        return;
    free(p->t);
    memset(p, 0, sizeof *p);
}

long memra_forge_plan_find(const memra_forge_plan *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->t[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* ===================================================================================== */
/* Metadata (spec/qwen35.md §1; what a converted + llama-quantized file carries)           */
/* ===================================================================================== */

typedef struct kv_ctx {
    memra_gguf_writer *w;
    const char *arch;
    int rc;
    memra_err *err;
} kv_ctx;

/* Records the writer's first failure; later calls become no-ops. */
static void kv_check(kv_ctx *c, int rc, const char *key)
{
    if (c->rc == MEMRA_OK && rc != MEMRA_OK)
        c->rc = MEMRA_FAIL(c->err, rc, "forge: key %s: %s", key, memra_gguf_writer_error(c->w));
}

static const char *arch_key(const kv_ctx *c, const char *suffix, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", c->arch, suffix);
    return buf;
}

static void kv_u32(kv_ctx *c, const char *suffix, uint32_t v)
{
    char k[128];
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_u32(c->w, arch_key(c, suffix, k, sizeof k), v), k);
}

static void kv_general(kv_ctx *c, const memra_forge_opts *o)
{
    char name[160];
    snprintf(name, sizeof name, "memra-forge %s %s seed %llu", o->shape->name,
             memra_forge_type_name(o), (unsigned long long)o->seed);
    kv_check(c, memra_gguf_writer_set_str(c->w, "general.architecture", c->arch), "arch");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_str(c->w, "general.type", "model"), "general.type");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_str(c->w, "general.name", name), "general.name");
    if (c->rc == MEMRA_OK && o->alignment)
        kv_check(c, memra_gguf_writer_set_u32(c->w, "general.alignment", o->alignment),
                 "general.alignment");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_u32(c->w, "general.quantization_version", 2),
                 "general.quantization_version");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_u32(c->w, "general.file_type", memra_forge_file_type(o)),
                 "general.file_type");
    /* Provenance, so a file says how to forge it again. */
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_str(c->w, "memra.forge.preset", o->shape->name),
                 "memra.forge.preset");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_str(c->w, "memra.forge.type", memra_forge_type_name(o)),
                 "memra.forge.type");
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_u64(c->w, "memra.forge.seed", o->seed),
                 "memra.forge.seed");
}

static void kv_arch(kv_ctx *c, const memra_forge_shape *s)
{
    char k[128];
    kv_u32(c, "context_length", s->n_ctx_train);
    kv_u32(c, "embedding_length", s->n_embd);
    kv_u32(c, "block_count", s->n_layer);
    if (s->n_ff) /* qwen35moe files carry no dense width (spec §1: n_ff = 0) */
        kv_u32(c, "feed_forward_length", s->n_ff);
    kv_u32(c, "attention.head_count", s->n_head);
    kv_u32(c, "attention.head_count_kv", s->n_head_kv);
    kv_u32(c, "attention.key_length", s->head_dim);
    kv_u32(c, "attention.value_length", s->head_dim);
    if (c->rc == MEMRA_OK)
        kv_check(c,
                 memra_gguf_writer_set_f32(
                     c->w, arch_key(c, "attention.layer_norm_rms_epsilon", k, sizeof k), 1e-6f),
                 k);
    kv_u32(c, "rope.dimension_count", s->rope_dim);
    int32_t sec[4];
    memra_forge_rope_sections(s->rope_dim, sec);
    if (c->rc == MEMRA_OK)
        kv_check(c,
                 memra_gguf_writer_set_arr(c->w, arch_key(c, "rope.dimension_sections", k, sizeof k),
                                           MEMRA_GGUF_INT32, sec, 4),
                 k);
    if (c->rc == MEMRA_OK)
        kv_check(c,
                 memra_gguf_writer_set_f32(c->w, arch_key(c, "rope.freq_base", k, sizeof k), 1e7f),
                 k);
    kv_u32(c, "ssm.conv_kernel", s->ssm_d_conv);
    kv_u32(c, "ssm.inner_size", s->ssm_dt_rank * s->ssm_d_state);
    kv_u32(c, "ssm.state_size", s->ssm_d_state);
    kv_u32(c, "ssm.time_step_rank", s->ssm_dt_rank);
    kv_u32(c, "ssm.group_count", s->ssm_n_group);
    kv_u32(c, "full_attention_interval", s->full_attn_interval);
    if (s->n_expert) {
        kv_u32(c, "expert_count", s->n_expert);
        kv_u32(c, "expert_used_count", s->n_expert_used);
        kv_u32(c, "expert_feed_forward_length", s->n_ff_exp);
        kv_u32(c, "expert_shared_feed_forward_length", s->n_ff_shexp);
    }
}

/* Token texts padded to V with "[PAD<id>]" UNUSED tokens (the vocabulary may be shorter
 * than the embedding, as Qwen's converter pads). */
static void kv_tokens(kv_ctx *c, const memra_forge_vocab *v, uint32_t V)
{
    const char **tok = calloc(V, sizeof *tok);
    uint64_t *len = calloc(V, sizeof *len);
    int32_t *type = calloc(V, sizeof *type);
    char *pads = calloc((size_t)(V - v->n_tokens) * 16 + 1, 1);
    if (!tok || !len || !type || !pads) {
        c->rc = MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "forge: no memory for %u tokens", V);
        goto done;
    }
    for (uint32_t i = 0; i < V; i++) {
        if (i < v->n_tokens) {
            tok[i] = v->tokens[i];
            len[i] = v->token_lens[i];
            type[i] = v->token_types[i];
            continue;
        }
        char *p = pads + (size_t)(i - v->n_tokens) * 16;
        len[i] = (uint64_t)snprintf(p, 16, "[PAD%u]", i);
        tok[i] = p;
        type[i] = MEMRA_TOKEN_TYPE_UNUSED;
    }
    kv_check(c, memra_gguf_writer_set_str_arr_lens(c->w, "tokenizer.ggml.tokens", tok, len, V),
             "tokenizer.ggml.tokens");
    if (c->rc == MEMRA_OK)
        kv_check(c,
                 memra_gguf_writer_set_arr(c->w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32,
                                           type, V),
                 "tokenizer.ggml.token_type");
done:
    free(tok);
    free(len);
    free(type);
    free(pads);
}

static void kv_tokenizer(kv_ctx *c, const memra_forge_vocab *v, uint32_t V)
{
    kv_check(c, memra_gguf_writer_set_str(c->w, "tokenizer.ggml.model", v->model),
             "tokenizer.ggml.model");
    if (c->rc == MEMRA_OK && v->pre)
        kv_check(c, memra_gguf_writer_set_str(c->w, "tokenizer.ggml.pre", v->pre),
                 "tokenizer.ggml.pre");
    if (c->rc == MEMRA_OK)
        kv_tokens(c, v, V);
    if (c->rc == MEMRA_OK && v->n_merges)
        kv_check(c,
                 memra_gguf_writer_set_str_arr(c->w, "tokenizer.ggml.merges",
                                               (const char *const *)v->merges, v->n_merges),
                 "tokenizer.ggml.merges");
    static const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.padding_token_id"};
    const int32_t ids[3] = {v->bos_id, v->eos_id, v->pad_id};
    for (int k = 0; k < 3; k++)
        if (c->rc == MEMRA_OK && ids[k] >= 0)
            kv_check(c, memra_gguf_writer_set_u32(c->w, id_keys[k], (uint32_t)ids[k]), id_keys[k]);
    if (c->rc == MEMRA_OK)
        kv_check(c, memra_gguf_writer_set_bool(c->w, "tokenizer.ggml.add_bos_token", v->add_bos),
                 "tokenizer.ggml.add_bos_token");
    if (c->rc == MEMRA_OK && v->chat_template)
        kv_check(c, memra_gguf_writer_set_str(c->w, "tokenizer.chat_template", v->chat_template),
                 "tokenizer.chat_template");
}

static int declare_tensors(memra_gguf_writer *w, const memra_forge_plan *p, memra_err *err)
{
    for (size_t i = 0; i < p->n; i++) {
        const memra_forge_tensor *t = &p->t[i];
        int rc = memra_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        if (rc != MEMRA_OK)
            return MEMRA_FAIL(err, rc, "forge: declare %s: %s", t->name,
                              memra_gguf_writer_error(w));
    }
    return MEMRA_OK;
}

/* ===================================================================================== */
/* Streaming the tensor data                                                              */
/* ===================================================================================== */
/* A tensor is produced in chunks of whole rows (CHUNK_BYTES of output at most); inside a
 * chunk, thread k of T encodes rows [n*k/T, n*(k+1)/T). Each thread generates one row of
 * floats at a time into its own scratch row, so memory is T rows + one chunk. */

#define CHUNK_BYTES ((size_t)8 << 20)
#define MAX_THREADS 64

typedef struct row_job {
    const memra_forge_opts *o;
    const memra_forge_tensor *t;
    int64_t row0, n_rows;  /* rows of this job (absolute) */
    uint8_t *out;          /* where row row0 goes */
    size_t row_bytes;
    float *scratch;        /* [ne0] */
    int rc;                /* 0 or -1 (quantizer refused a row) */
} row_job;

static void *row_job_run(void *arg)
{
    row_job *j = arg;
    const memra_forge_tensor *t = j->t;
    for (int64_t r = 0; r < j->n_rows; r++) {
        int64_t row = j->row0 + r;
        memra_forge_fill_rows(j->o, t, row, 1, j->scratch);
        uint8_t *dst = j->out + (size_t)r * j->row_bytes;
        if (t->type == MEMRA_QT_F32) {
            memcpy(dst, j->scratch, j->row_bytes);
            continue;
        }
        if (t->type == MEMRA_QT_NVFP4) {
            float s = memra_forge_nvfp4_scale(j->o, t, row / t->ne[1]);
            for (int64_t c = 0; c < t->ne[0]; c++)
                j->scratch[c] = j->scratch[c] / s;
        }
        if (memra_quantize_row(t->type, j->scratch, dst, t->ne[0]) != 0) {
            j->rc = -1;
            return NULL;
        }
    }
    return NULL;
}

typedef struct stream_ctx {
    const memra_forge_opts *o;
    const memra_forge_plan *p;
    memra_gguf_writer *w;
    uint32_t n_threads;
    uint8_t *chunk;        /* [CHUNK_BYTES or one row if larger] */
    size_t chunk_cap;
    float *scratch;        /* [n_threads, max ne0] */
    int64_t max_ne0;
    uint64_t bytes_done;
} stream_ctx;

/* Encodes rows [row0, row0 + n) of t into sc->chunk using every thread. */
static int encode_rows(stream_ctx *sc, const memra_forge_tensor *t, int64_t row0, int64_t n,
                       size_t row_bytes, memra_err *err)
{
    row_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    uint32_t T = sc->n_threads;
    if ((int64_t)T > n)
        T = (uint32_t)n;
    uint32_t started = 0;
    for (uint32_t k = 0; k < T; k++) {
        int64_t a = n * k / T, b = n * (k + 1) / T;
        jobs[k] = (row_job){sc->o, t, row0 + a, b - a, sc->chunk + (size_t)a * row_bytes,
                            row_bytes, sc->scratch + (size_t)k * sc->max_ne0, 0};
    }
    for (uint32_t k = 1; k < T; k++) {
        if (pthread_create(&th[k], NULL, row_job_run, &jobs[k]) != 0)
            break;
        started = k;
    }
    for (uint32_t k = started + 1; k < T; k++) /* threads that did not start: run here */
        row_job_run(&jobs[k]);
    row_job_run(&jobs[0]);
    int bad = jobs[0].rc;
    for (uint32_t k = 1; k < T; k++) {
        if (k <= started)
            pthread_join(th[k], NULL);
        bad |= jobs[k].rc;
    }
    if (bad)
        return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "forge: quantizer refused a row of %s (%s)",
                          t->name, memra_qtype_get(t->type)->name);
    return MEMRA_OK;
}

static int stream_tensor(stream_ctx *sc, uint32_t ti, memra_err *err)
{
    const memra_forge_tensor *t = &sc->p->t[ti];
    const size_t row_bytes = memra_quant_row_bytes(t->type, t->ne[0]);
    const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    int64_t per_chunk = (int64_t)(sc->chunk_cap / row_bytes);
    for (int64_t r0 = 0; r0 < n_rows; r0 += per_chunk) {
        int64_t n = n_rows - r0 < per_chunk ? n_rows - r0 : per_chunk;
        int rc = encode_rows(sc, t, r0, n, row_bytes, err);
        if (rc != MEMRA_OK)
            return rc;
        rc = memra_gguf_writer_write(sc->w, sc->chunk, (size_t)n * row_bytes);
        if (rc != MEMRA_OK)
            return MEMRA_FAIL(err, rc, "forge: write %s: %s", t->name,
                              memra_gguf_writer_error(sc->w));
        sc->bytes_done += (uint64_t)n * row_bytes;
        if (sc->o->progress) {
            memra_forge_progress pr = {ti, (uint32_t)sc->p->n, t->name, sc->bytes_done,
                                       sc->p->data_bytes};
            sc->o->progress(&pr, sc->o->progress_user);
        }
    }
    return MEMRA_OK;
}

static uint32_t thread_count(const memra_forge_opts *o)
{
    long n = o->n_threads ? (long)o->n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (uint32_t)n;
}

static int stream_all(const memra_forge_opts *o, const memra_forge_plan *p, memra_gguf_writer *w,
                      memra_err *err)
{
    stream_ctx sc = {o, p, w, thread_count(o), NULL, CHUNK_BYTES, NULL, 1, 0};
    for (size_t i = 0; i < p->n; i++) {
        size_t rb = memra_quant_row_bytes(p->t[i].type, p->t[i].ne[0]);
        if (rb > sc.chunk_cap)
            sc.chunk_cap = rb;
        if (p->t[i].ne[0] > sc.max_ne0)
            sc.max_ne0 = p->t[i].ne[0];
    }
    sc.chunk = malloc(sc.chunk_cap);
    sc.scratch = malloc((size_t)sc.n_threads * (size_t)sc.max_ne0 * sizeof(float));
    int rc = MEMRA_OK;
    if (!sc.chunk || !sc.scratch) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "forge: no memory for the chunk buffers");
        goto fail;
    }
    for (uint32_t i = 0; i < (uint32_t)p->n; i++)
        MEMRA_TRY(stream_tensor(&sc, i, err));
fail:
    free(sc.chunk);
    free(sc.scratch);
    return rc;
}

/* ===================================================================================== */
/* memra_forge_write                                                                      */
/* ===================================================================================== */

static int check_opts(const memra_forge_opts *o, memra_err *err)
{
    if (!o || !o->shape)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: no options or no shape");
    if (o->alignment && (o->alignment & (o->alignment - 1)))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: alignment %u is not a power of two",
                          o->alignment);
    if (o->mix != MEMRA_FORGE_MIX_NONE && o->mix != MEMRA_FORGE_MIX_Q4_K_M)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: unknown mix %d", (int)o->mix);
    return MEMRA_OK;
}

/* Metadata and tensor infos into a fresh writer. */
static int declare_all(memra_gguf_writer *w, const memra_forge_opts *o, const memra_forge_vocab *v,
                       const memra_forge_plan *p, memra_err *err)
{
    kv_ctx c = {w, o->shape->arch, MEMRA_OK, err};
    kv_general(&c, o);
    if (c.rc == MEMRA_OK)
        kv_arch(&c, o->shape);
    if (c.rc == MEMRA_OK)
        kv_tokenizer(&c, v, p->n_vocab);
    if (c.rc != MEMRA_OK)
        return c.rc;
    return declare_tensors(w, p, err);
}

int memra_forge_write(const memra_forge_opts *o, const char *path, memra_err *err)
{
    memra_forge_vocab *own_vocab = NULL;
    memra_gguf_writer *w = NULL;
    memra_forge_plan plan = {0};
    int rc = MEMRA_OK, begun = 0;
    MEMRA_TRY(check_opts(o, err));
    if (!path)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "forge: no output path");
    const memra_forge_vocab *v = o->vocab;
    if (!v) {
        MEMRA_TRY(memra_forge_vocab_synthetic(o->shape->n_vocab, MEMRA_FORGE_SYNTH_MERGES,
                                              &own_vocab, err));
        v = own_vocab;
    }
    MEMRA_TRY(memra_forge_vocab_validate(v, err));
    MEMRA_TRY(memra_forge_plan_build(o, v->n_tokens, &plan, err));
    MEMRA_TRY(memra_gguf_writer_open(&w, err));
    MEMRA_TRY(declare_all(w, o, v, &plan, err));
    rc = memra_gguf_writer_begin(w, path);
    if (rc != MEMRA_OK) {
        rc = MEMRA_FAIL(err, rc, "forge: %s: %s", path, memra_gguf_writer_error(w));
        goto fail;
    }
    begun = 1;
    MEMRA_TRY(stream_all(o, &plan, w, err));
    rc = memra_gguf_writer_finish(w);
    if (rc != MEMRA_OK)
        rc = MEMRA_FAIL(err, rc, "forge: finish %s: %s", path, memra_gguf_writer_error(w));
fail:
    memra_gguf_writer_close(w);
    if (rc != MEMRA_OK && begun)
        unlink(path);
    memra_forge_plan_free(&plan);
    memra_forge_vocab_free(own_vocab);
    return rc;
}
