/*
 * refmodel.c — the CPU reference forward pass of Qwen3.5 (spec/qwen35.md §3), one token of one
 * sequence per call.
 *
 * Concept: the oracle. Each spec equation block is one function below, in the spec's order and
 * with the spec's names, so a reader can check it line by line against the document. The
 * arithmetic contract (q8_1 mat-vec, f16 KV cache, double norm sums, thread-count-independent
 * rows) is stated in refmodel.h.
 * Must not: keep sequence state in the model, allocate on the per-token path, reorder a
 * reduction depending on the thread count, or fuse two spec steps in a way that changes the
 * operations applied to any single value.
 * Invariants: after memra_ref_model_open every ref_mat row lies inside the mapped tensor
 * (checked against the tensor's byte size) and every element-wise weight is an owned f32 array
 * of the shape qwen35.c checked.
 *
 * Sections: ops (spec §3.1-3.5 primitives) → 16-bit operands (config.act_f16) → mat-vec →
 * model load → sequence state → the blocks (attention, GDN, FFN) → forward.
 */
#include "refmodel.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attn_decode.h"
#include "attn_prep.h"
#include "exact_math.h"
#include "gdn_canon.h"
#include "mmvq.h"
#include "moe_route.h"
#include "quant.h"
#include "ref/ref_common.h"

/* ======================================================================================== */
/* Ops                                                                                      */
/* ======================================================================================== */

void memra_ref_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    kref_rms_norm_canon(x, w, y, (int32_t)n, eps); /* rms_norm_q8's order (f64 sum, 1024 lanes) */
}

void memra_ref_l2_norm(float *y, const float *x, int64_t n, float eps)
{
    memra_gdn_l2_norm(y, x, n, eps); /* gdn_step's lane order (f64 sum) */
}

float memra_ref_sigmoid(float x)
{
    return memra_x_sigmoidf(x);
}

float memra_ref_silu(float x)
{
    return memra_x_siluf(x);
}

float memra_ref_softplus(float x)
{
    return memra_x_softplusf(x);
}

void memra_ref_softmax(float *y, const float *x, int64_t n)
{
    kref_softmax_blk(y, x, (int32_t)n, MEMRA_MOE_ROUTE_THREADS); /* moe_route's order */
}

void memra_ref_rope(float *x, int64_t n_rot, const int32_t sections[4], int64_t pos,
                    float freq_base, float freq_scale)
{
    memra_attn_rope(x, (int32_t)n_rot, sections, (int32_t)pos, freq_base, freq_scale);
}

void memra_ref_attention(const memra_ref_attn_args *a)
{
    const int64_t dh = a->head_dim, group = a->n_head / a->n_head_kv;
    const int64_t kv_stride = a->n_head_kv * dh;
    /* the plan's scale: 1/sqrt(dh) in double, rounded once (spec pitfall 11) */
    const float scale = (float)(1.0 / sqrt((double)dh));
    for (int64_t i = 0; i < a->n_head; i++) {
        const int64_t j = i / group; /* GQA: grouped mapping (pitfall 4) */
        memra_attn_head(a->q + i * dh, (const uint8_t *)(a->k_cache + j * dh),
                        (const uint8_t *)(a->v_cache + j * dh),
                        (uint64_t)kv_stride * sizeof(uint16_t), MEMRA_QT_F16, (int32_t)a->n_kv,
                        (int32_t)dh, (int32_t)group, MEMRA_ATTN_MAX_SPLIT, scale, a->out + i * dh);
    }
}

void memra_ref_conv_step(float *u, float *state, const float *u_raw, const float *taps,
                         int64_t n_channels, int64_t kernel)
{
    const int64_t km1 = kernel - 1;
    for (int64_t c = 0; c < n_channels; c++) {
        float *w = state + c * km1;         /* [K-1], w[0] oldest */
        const float *t = taps + c * kernel; /* [K], tap K-1 = newest sample */
        float acc = 0.0f;
        for (int64_t j = 0; j < km1; j++)
            acc += t[j] * w[j];
        acc += t[km1] * u_raw[c];
        for (int64_t j = 0; j + 1 < km1; j++) /* shift left, append the raw sample */
            w[j] = w[j + 1];
        if (km1 > 0)
            w[km1 - 1] = u_raw[c];
        u[c] = acc;
    }
}

/* Spec §3.4 step 9 on S^T, value row by value row (memra_gdn_delta_rule: gdn_step's order). */
void memra_ref_delta_rule(float *St, float *o, const float *q, const float *k, const float *v,
                          float beta, float decay, int64_t dk, int64_t dv)
{
    memra_gdn_delta_rule(St, o, q, k, v, beta, decay, dk, dv);
}

void memra_ref_gated_norm(float *o, const float *z, const float *w, int64_t n, float eps)
{
    memra_gdn_gated_norm(o, z, w, n, eps);
}

/* a ranks before b: larger probability, NaN after every number, lower index on ties. */
static int route_better(float pa, int64_t a, float pb, int64_t b)
{
    if (isnan(pb))
        return !isnan(pa) || a < b;
    if (isnan(pa))
        return 0;
    return pa > pb || (pa == pb && a < b);
}

void memra_ref_moe_route(const float *router_logits, int64_t n_expert, int64_t k, float *probs,
                         int32_t *ids, float *weights)
{
    memra_ref_softmax(probs, router_logits, n_expert);
    for (int64_t r = 0; r < k; r++) { /* selection: k passes, each the best not yet taken */
        int64_t best = -1;
        for (int64_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int64_t q = 0; q < r; q++)
                taken |= ids[q] == e;
            if (!taken && (best < 0 || route_better(probs[e], e, probs[best], best)))
                best = e;
        }
        ids[r] = (int32_t)best;
    }
    float sum = 0.0f;
    for (int64_t r = 0; r < k; r++)
        sum += probs[ids[r]];
    const float denom = fmaxf(sum, 6.103515625e-5f); /* spec §3.5 step 3: clamp at 2^-14 */
    for (int64_t r = 0; r < k; r++)
        weights[r] = probs[ids[r]] / denom;
}

int32_t memra_ref_argmax(const float *logits, int64_t n)
{
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best]))
            best = i;
    return (int32_t)(best < 0 ? 0 : best);
}

/* ======================================================================================== */
/* 16-bit operands (config.act_f16): what a tensor-core mat-vec would feed its MMA           */
/* ======================================================================================== */

/* x rounded once to f16 (RN-even, ±Inf from 65520 = 65504 + half an ulp up), returned as the
 * f32 of that f16. Where x is exact in f32 the bit conversion is the one rounding; elsewhere x
 * is scaled by a power of two so that the f16 quantum there (2^(e-10), 2^-24 for
 * subnormals) becomes 1 and nearbyint (the default rounding mode: ties to even) rounds. */
static float f16_round(double x)
{
    const float f = (float)x;
    if ((double)f == x)
        return memra_fp16_to_f32(memra_f32_to_fp16(f));
    if (!(fabs(x) < 65520.0))
        return isnan(x) ? NAN : copysignf(INFINITY, f);
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    const int q = (e - 1 < -14 ? -14 : e - 1) - 10;
    return (float)ldexp(nearbyint(ldexp(x, -q)), q);
}

static uint16_t rd_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* One q4_K block (quant.c's memra_q4_k_unpack reads its fields): per sub-block the 16 codes
 * give 16 possible weights, rounded once each. The layout is checked against
 * memra_dequantize_row by test_refmodel. */
static void deq_q4_k_f16(const uint8_t *b, float *y)
{
    const double d = memra_fp16_to_f32(rd_u16(b)), dmin = memra_fp16_to_f32(rd_u16(b + 2));
    uint8_t sc[8], mn[8];
    int8_t q[256];
    memra_q4_k_unpack(b, sc, mn, q);
    for (int k = 0; k < 8; k++) {
        const double ds = f16_round(d * sc[k]), dm = f16_round(dmin * mn[k]);
        float w[16];
        for (int c = 0; c < 16; c++)
            w[c] = f16_round(c * ds - dm); /* exact in f64: both are f16 values */
        for (int l = 0; l < 32; l++)
            y[32 * k + l] = w[q[32 * k + l]];
    }
}

/* One q6_K block (quant.c's memra_q6_k_unpack reads its codes; scales[16] int8 at 192, d f16
 * at 208): each weight (q - 32) f16(d sc) rounded once. */
static void deq_q6_k_f16(const uint8_t *b, float *y)
{
    const double d = memra_fp16_to_f32(rd_u16(b + 208));
    const int8_t *sc = (const int8_t *)(b + 192);
    int8_t q[256];
    memra_q6_k_unpack(b, q);
    for (int g = 0; g < 16; g++) {
        const double ds = f16_round(d * sc[g]);
        for (int j = 0; j < 16; j++)
            y[16 * g + j] = f16_round(q[16 * g + j] * ds);
    }
}

/* memra_ref_dequantize_row_f16 without the argument checks (n a whole number of blocks). */
static int64_t deq_row_f16(memra_qtype t, const uint8_t *src, float *y, int64_t n)
{
    if (t == MEMRA_QT_Q4_K || t == MEMRA_QT_Q6_K) {
        const size_t bytes = t == MEMRA_QT_Q4_K ? 144 : 210;
        for (int64_t i = 0; i < n; i += 256, src += bytes)
            (t == MEMRA_QT_Q4_K ? deq_q4_k_f16 : deq_q6_k_f16)(src, y + i);
    } else {
        if (memra_dequantize_row(t, src, y, n) != 0)
            return -1;
        for (int64_t i = 0; i < n; i++)
            y[i] = memra_fp16_to_f32(memra_f32_to_fp16(y[i])); /* y is exact: one rounding */
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !isfinite(y[i]);
    return bad;
}

int64_t memra_ref_dequantize_row_f16(memra_qtype t, const void *src, float *dst, int64_t n)
{
    if (!src || !dst || n <= 0 || !memra_quant_can_dequantize(t) ||
        memra_quant_row_bytes(t, n) == 0)
        return -1;
    return deq_row_f16(t, src, dst, n);
}

/* config.act_f16: x rounded once to f16 (mode 1) or bf16 (mode 2), RN-even. Returns how many
 * finite values overflowed to ±Inf. */
static uint64_t act_round16(const float *x, float *xo, int64_t n, int mode)
{
    uint64_t inf = 0;
    for (int64_t i = 0; i < n; i++) {
        xo[i] = mode == 1 ? memra_fp16_to_f32(memra_f32_to_fp16(x[i]))
                          : memra_bf16_to_f32(memra_f32_to_bf16(x[i]));
        inf += isfinite(x[i]) && isinf(xo[i]);
    }
    return inf;
}

/* ======================================================================================== */
/* Mat-vec                                                                                  */
/* ======================================================================================== */

/* A weight matrix ready for y = W·x: rows of `row_bytes` at data + expert·expert_stride. */
typedef struct ref_mat {
    const uint8_t *data; /* borrowed from the mapping; NULL = matrix absent */
    memra_qtype type;
    int64_t n_in, n_out; /* per expert */
    size_t row_bytes, expert_stride;
    int q8;             /* 1: q8_1 activations; 0: dequantize + f32 */
    int serial;         /* q8: 1 = blocks summed in one chain (memra_vec_dot_q8_1: the MoE
                         * ops' order), 0 = mmvq's canonical parts (memra_mmvq_dot) */
    const float *scale; /* owned, [scale_n] or NULL: multiplies row results */
    int64_t scale_n;
} ref_mat;

/* An input vector, quantized to q8_1 on first use by a q8 matrix. */
typedef struct ref_act {
    const float *x;      /* [n] */
    memra_block_q8_1 *q; /* [n/32] */
    int64_t n;
    int quantized;
} ref_act;

static void act_init(ref_act *a, const float *x, int64_t n, memra_block_q8_1 *qbuf)
{
    a->x = x;
    a->n = n;
    a->q = qbuf;
    a->quantized = 0;
}

typedef struct mv_job {
    const ref_mat *w;
    const uint8_t *base; /* the expert's first row */
    float scale;
    int use_scale;
    const ref_act *a;
    const float *xsim; /* [n_in] simulated activations (config act_sim / act_f16), else NULL */
    int f16;           /* with xsim: 1 = rows dequantized to f16 (config act_f16) */
    uint64_t w_bad;    /* out, f16: weights that were not finite */
    float *y;
    float *rowbuf; /* [n_in], for the f32 and simulated paths */
    int64_t r0, r1;
} mv_job;

/* What a mat-vec reads besides the weight and its input: the model's knobs, the sequence's
 * scratch and counters. */
typedef struct mv_ctx {
    float *rowbufs; /* [n_threads, rowbuf_stride] */
    int64_t rowbuf_stride;
    int n_threads;
    int act_sim, act_mult, act_f16; /* config act_sim, act_sim_mult, act_f16 */
    float *xsim;                    /* [rowbuf_stride] the simulated activations */
    memra_ref_f16_counts *counts;   /* the sequence's (act_f16) */
} mv_ctx;

/* config.act_sim: x rounded with one q8_1-style scale per g elements (g > 0), or copied;
 * mult > 0 (config.act_sim_mult): each 32 elements of a group scale that by m / mult. */
static void act_simulate(const float *x, float *xo, int64_t n, int g, int mult)
{
    if (g <= 0) {
        memcpy(xo, x, (size_t)n * sizeof *x);
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += g) {
        const int64_t i1 = n - i0 < g ? n : i0 + g;
        float amax = 0.0f;
        for (int64_t i = i0; i < i1; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, dq = memra_fp16_to_f32(memra_f32_to_fp16(d));
        for (int64_t b0 = i0; b0 < i1; b0 += 32) {
            const int64_t b1 = i1 - b0 < 32 ? i1 : b0 + 32;
            float m = 1.0f; /* the block's step over the group's */
            if (mult > 0 && amax > 0.0f) {
                float am = 0.0f;
                for (int64_t i = b0; i < b1; i++)
                    am = fmaxf(am, fabsf(x[i]));
                m = fminf(fmaxf(ceilf((float)mult * am / amax), 1.0f), (float)mult) / (float)mult;
            }
            const float db = d * m;
            for (int64_t i = b0; i < b1; i++) {
                float r = db == 0.0f ? 0.0f : roundf(x[i] / db);
                r = r != r ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f);
                xo[i] = r * (dq * m);
            }
        }
    }
}

static void mv_rows(mv_job *j)
{
    const ref_mat *w = j->w;
    for (int64_t r = j->r0; r < j->r1; r++) {
        const uint8_t *row = j->base + (size_t)r * w->row_bytes;
        float v;
        if (j->xsim) {
            if (j->f16) /* the row's type was checked at load: never -1 */
                j->w_bad += (uint64_t)deq_row_f16(w->type, row, j->rowbuf, w->n_in);
            else
                memra_dequantize_row(w->type, row, j->rowbuf, w->n_in);
            double acc = 0.0; /* act_f16: an fp32-accumulating MMA, without its roundings */
            for (int64_t i = 0; i < w->n_in; i++)
                acc += (double)j->rowbuf[i] * j->xsim[i];
            v = (float)acc;
        } else if (w->q8) {
            v = w->serial ? memra_vec_dot_q8_1(w->type, row, j->a->q, w->n_in)
                          : memra_mmvq_dot((int32_t)w->type, row, j->a->q, (int32_t)w->n_in);
        } else {
            memra_dequantize_row(w->type, row, j->rowbuf, w->n_in);
            v = 0.0f;
            for (int64_t i = 0; i < w->n_in; i++)
                v += j->rowbuf[i] * j->a->x[i];
        }
        j->y[r] = j->use_scale ? v * j->scale : v;
    }
}

static void *mv_thread(void *arg)
{
    mv_rows(arg);
    return NULL;
}

#define REF_MAX_THREADS 64
/* Below this many weight elements a mat-vec runs on the caller: thread start-up (~tens of µs)
 * would cost more than it saves. */
#define REF_MV_PARALLEL_MIN (1 << 18)

/* y[n_out] = W_expert · x. Rows are split in contiguous ranges; each row's value depends only
 * on the row, so the split never changes a bit. */
static void ref_matvec(const mv_ctx *c, const ref_mat *w, int64_t expert, ref_act *a, float *y)
{
    float *xsim = c->xsim;
    const int f16 = w->q8 && c->act_f16;
    if (f16) {
        c->counts->act_inf += act_round16(a->x, xsim, a->n, c->act_f16);
        c->counts->act_values += (uint64_t)a->n;
    } else if (w->q8 && c->act_sim)
        act_simulate(a->x, xsim, a->n, c->act_sim, c->act_mult);
    else
        xsim = NULL;
    if (xsim == NULL && w->q8 && !a->quantized) {
        memra_quantize_q8_1(a->x, a->q, a->n);
        a->quantized = 1;
    }
    mv_job jobs[REF_MAX_THREADS];
    int nt = c->n_threads;
    if ((int64_t)w->n_out * w->n_in < REF_MV_PARALLEL_MIN || w->n_out < nt)
        nt = 1;
    pthread_t tid[REF_MAX_THREADS];
    int started[REF_MAX_THREADS] = {0};
    for (int t = 0; t < nt; t++) {
        jobs[t] = (mv_job){
            .w = w,
            .base = w->data + (size_t)expert * w->expert_stride,
            .use_scale = w->scale != NULL,
            .scale = w->scale ? w->scale[w->scale_n > 1 ? expert : 0] : 1.0f,
            .a = a,
            .xsim = xsim,
            .f16 = f16,
            .y = y,
            .rowbuf = c->rowbufs + t * c->rowbuf_stride,
            .r0 = w->n_out * t / nt,
            .r1 = w->n_out * (t + 1) / nt,
        };
    }
    for (int t = 1; t < nt; t++) /* if a thread cannot start, the caller runs its rows */
        started[t] = pthread_create(&tid[t], NULL, mv_thread, &jobs[t]) == 0;
    mv_rows(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            mv_rows(&jobs[t]);
    }
    for (int t = 0; f16 && t < nt; t++) {
        c->counts->weight_nonfinite += jobs[t].w_bad;
        c->counts->weight_values += (uint64_t)(jobs[t].r1 - jobs[t].r0) * (uint64_t)w->n_in;
    }
}

/* ======================================================================================== */
/* Model                                                                                    */
/* ======================================================================================== */

typedef struct ref_layer {
    int recurrent;
    int state_index; /* index among attention layers (KV) or among GDN layers (conv+SSM) */
    float *attn_norm, *post_attention_norm; /* [D] */
    /* attention */
    ref_mat attn_q, attn_k, attn_v, attn_output;
    float *attn_q_norm, *attn_k_norm; /* [dh] */
    /* GDN */
    ref_mat attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out;
    float *ssm_conv1d;          /* [Cc, K] */
    float *ssm_dt_bias, *ssm_a; /* [Hv] */
    float *ssm_norm;            /* [dv] */
    /* dense FFN */
    ref_mat ffn_gate, ffn_up, ffn_down;
    /* MoE FFN (gate/up are views into ffn_gate_up_exps when the file fuses them) */
    ref_mat router, gate_exps, up_exps, down_exps;
    ref_mat gate_inp_shexp, gate_shexp, up_shexp, down_shexp; /* data NULL: no shared expert */
} ref_layer;

struct memra_ref_model {
    memra_gguf *g; /* owned */
    memra_qwen35_hparams hp;
    memra_qwen35_weights *w; /* [1], heap (large) */
    ref_layer *layers;       /* [n_layer] */
    ref_mat token_embd, output;
    float *output_norm; /* [D] */
    float **owned;      /* [n_owned] every converted f32 vector */
    size_t n_owned, cap_owned;
    int64_t max_in;  /* largest mat-vec input width: rowbuf stride */
    int64_t max_mid; /* largest mid activation (Hq·dh, Cv, F, Fe, Fs) */
    int n_threads;
    int act_sim;      /* config.act_sim */
    int act_sim_mult; /* config.act_sim_mult */
    int act_f16;      /* config.act_f16 */
};

void memra_ref_model_config_default(memra_ref_model_config *cfg)
{
    cfg->n_threads = 1;
    cfg->act_sim = 0;
    cfg->act_sim_mult = 0;
    cfg->act_f16 = 0;
}

const memra_qwen35_hparams *memra_ref_model_hparams(const memra_ref_model *m)
{
    return &m->hp;
}

/* Element-wise tensor → owned f32 copy (qwen35.c accepted only f32/f16/bf16). */
static int vec_to_f32(memra_ref_model *m, const memra_gguf_tensor *t, float **out, memra_err *err)
{
    *out = NULL;
    if (!t)
        return MEMRA_OK;
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = realloc(m->owned, cap * sizeof *p);
        if (!p)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tensor %s: out of memory", t->name);
        m->owned = p;
        m->cap_owned = cap;
    }
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tensor %s: out of memory", t->name);
    m->owned[m->n_owned++] = v;
    if (memra_quant_row_bytes((memra_qtype)t->type, n) != t->nbytes ||
        memra_dequantize_row((memra_qtype)t->type, t->data, v, n) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "tensor %s: cannot convert to f32", t->name);
    *out = v;
    return MEMRA_OK;
}

/* Matrix view with its byte geometry checked against the tensor's size. */
static int mat_prepare(memra_ref_model *m, const memra_qwen35_mat *src, ref_mat *dst,
                       memra_err *err)
{
    int rc;
    memset(dst, 0, sizeof *dst);
    const memra_gguf_tensor *t = src->w;
    if (!t)
        return MEMRA_OK;
    dst->type = (memra_qtype)t->type;
    dst->n_in = t->ne[0];
    dst->n_out = t->ne[1];
    dst->row_bytes = memra_quant_row_bytes(dst->type, dst->n_in);
    dst->expert_stride = dst->row_bytes * (size_t)dst->n_out;
    if (dst->row_bytes == 0 || dst->expert_stride * (size_t)t->ne[2] != t->nbytes) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "tensor %s: %llu bytes do not match its shape",
                        t->name, (unsigned long long)t->nbytes);
        goto fail;
    }
    dst->data = t->data;
    /* q8_1 needs whole 32-blocks of input; every quantized type has them by construction. */
    dst->q8 = memra_quant_can_dot(dst->type) && dst->n_in % 32 == 0;
    float *scale = NULL;
    MEMRA_TRY(vec_to_f32(m, src->scale, &scale, err));
    dst->scale = scale;
    dst->scale_n = src->scale ? src->scale->ne[0] : 0;
    if (dst->n_in > m->max_in)
        m->max_in = dst->n_in;
    return MEMRA_OK;
fail:
    return rc;
}

/* Rows [first, first+n) of every expert of src: the gate or up half of a fused tensor. */
static ref_mat mat_rows(const ref_mat *src, int64_t first, int64_t n)
{
    ref_mat v = *src;
    v.data = src->data + (size_t)first * src->row_bytes;
    v.n_out = n;
    return v;
}

static int layer_prepare(memra_ref_model *m, uint32_t l, int state_index, memra_err *err)
{
    int rc;
    const memra_qwen35_layer *s = &m->w->layers[l];
    ref_layer *d = &m->layers[l];
    d->recurrent = m->hp.is_recurrent[l];
    d->state_index = state_index;
    MEMRA_TRY(vec_to_f32(m, s->attn_norm, &d->attn_norm, err));
    MEMRA_TRY(vec_to_f32(m, s->post_attention_norm, &d->post_attention_norm, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_q, &d->attn_q, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_k, &d->attn_k, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_v, &d->attn_v, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_output, &d->attn_output, err));
    MEMRA_TRY(vec_to_f32(m, s->attn_q_norm, &d->attn_q_norm, err));
    MEMRA_TRY(vec_to_f32(m, s->attn_k_norm, &d->attn_k_norm, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_qkv, &d->attn_qkv, err));
    MEMRA_TRY(mat_prepare(m, &s->attn_gate, &d->attn_gate, err));
    MEMRA_TRY(mat_prepare(m, &s->ssm_beta, &d->ssm_beta, err));
    MEMRA_TRY(mat_prepare(m, &s->ssm_alpha, &d->ssm_alpha, err));
    MEMRA_TRY(mat_prepare(m, &s->ssm_out, &d->ssm_out, err));
    MEMRA_TRY(vec_to_f32(m, s->ssm_conv1d, &d->ssm_conv1d, err));
    MEMRA_TRY(vec_to_f32(m, s->ssm_dt_bias, &d->ssm_dt_bias, err));
    MEMRA_TRY(vec_to_f32(m, s->ssm_a, &d->ssm_a, err));
    MEMRA_TRY(vec_to_f32(m, s->ssm_norm, &d->ssm_norm, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_gate, &d->ffn_gate, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_up, &d->ffn_up, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_down, &d->ffn_down, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_gate_inp, &d->router, err));
    if (s->ffn_gate_up_exps.w) { /* fused: rows [0,Fe) gate, [Fe,2Fe) up (spec pitfall 15) */
        ref_mat fused;
        MEMRA_TRY(mat_prepare(m, &s->ffn_gate_up_exps, &fused, err));
        d->gate_exps = mat_rows(&fused, 0, m->hp.n_ff_exp);
        d->up_exps = mat_rows(&fused, m->hp.n_ff_exp, m->hp.n_ff_exp);
    } else {
        MEMRA_TRY(mat_prepare(m, &s->ffn_gate_exps, &d->gate_exps, err));
        MEMRA_TRY(mat_prepare(m, &s->ffn_up_exps, &d->up_exps, err));
    }
    MEMRA_TRY(mat_prepare(m, &s->ffn_down_exps, &d->down_exps, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_gate_inp_shexp, &d->gate_inp_shexp, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_gate_shexp, &d->gate_shexp, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_up_shexp, &d->up_shexp, err));
    MEMRA_TRY(mat_prepare(m, &s->ffn_down_shexp, &d->down_shexp, err));
    /* the ops that run these (mmvq_moe, moe_down) sum each row's blocks in one chain */
    d->gate_exps.serial = d->up_exps.serial = d->down_exps.serial = d->down_shexp.serial = 1;
    return MEMRA_OK;
fail:
    return rc;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

int memra_ref_model_open_gguf(memra_gguf *g, const memra_ref_model_config *cfg,
                              memra_ref_model **out, memra_err *err)
{
    int rc;
    *out = NULL;
    memra_ref_model_config def;
    memra_ref_model_config_default(&def);
    if (!cfg)
        cfg = &def;
    memra_ref_model *m = calloc(1, sizeof *m);
    if (!m) {
        memra_gguf_close(g);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "reference model: out of memory");
    }
    m->g = g;
    if (cfg->n_threads < 1 || cfg->n_threads > REF_MAX_THREADS) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_threads = %d is out of range (1..%d)",
                        cfg->n_threads, REF_MAX_THREADS);
        goto fail;
    }
    m->n_threads = cfg->n_threads;
    if (cfg->act_sim != 0 && cfg->act_sim != MEMRA_REF_ACT_F32 &&
        (cfg->act_sim < 32 || cfg->act_sim > 1024 || cfg->act_sim % 32 != 0)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "act_sim = %d: 0, MEMRA_REF_ACT_F32 or a multiple of 32 up to 1024",
                        cfg->act_sim);
        goto fail;
    }
    if (cfg->act_sim_mult != 0 &&
        (cfg->act_sim <= 32 || cfg->act_sim_mult < 2 || cfg->act_sim_mult > 64)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "act_sim_mult = %d: 0, or 2..64 with act_sim > 32", cfg->act_sim_mult);
        goto fail;
    }
    if (cfg->act_f16 < 0 || cfg->act_f16 > 2 || (cfg->act_f16 && cfg->act_sim)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "act_f16 = %d: 0, 1 (f16) or 2 (bf16), nonzero only with act_sim = 0",
                        cfg->act_f16);
        goto fail;
    }
    m->act_sim = cfg->act_sim;
    m->act_sim_mult = cfg->act_sim_mult;
    m->act_f16 = cfg->act_f16;
    MEMRA_TRY(memra_qwen35_hparams_load(g, &m->hp, err));
    m->w = calloc(1, sizeof *m->w);
    m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
    if (!m->w || !m->layers) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "reference model: out of memory");
        goto fail;
    }
    MEMRA_TRY(memra_qwen35_bind(g, &m->hp, m->w, err));
    MEMRA_TRY(mat_prepare(m, &m->w->token_embd, &m->token_embd, err));
    MEMRA_TRY(mat_prepare(m, &m->w->output, &m->output, err));
    MEMRA_TRY(vec_to_f32(m, m->w->output_norm, &m->output_norm, err));
    int n_attn = 0, n_rec = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        MEMRA_TRY(layer_prepare(m, l, m->hp.is_recurrent[l] ? n_rec++ : n_attn++, err));
    const memra_qwen35_hparams *hp = &m->hp;
    m->max_mid = max64(max64((int64_t)hp->n_head * hp->head_dim, hp->ssm_inner_size),
                       max64(max64(hp->n_ff, hp->n_ff_exp), hp->n_ff_shexp));
    *out = m;
    return MEMRA_OK;
fail:
    memra_ref_model_close(m);
    return rc;
}

int memra_ref_model_open(const char *path, const memra_ref_model_config *cfg, memra_ref_model **out,
                         memra_err *err)
{
    memra_gguf *g = NULL;
    *out = NULL;
    int rc = memra_gguf_open(path, &g, err);
    if (rc != MEMRA_OK)
        return rc;
    return memra_ref_model_open_gguf(g, cfg, out, err);
}

void memra_ref_model_close(memra_ref_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->w);
    memra_gguf_close(m->g);
    free(m);
}

/* ======================================================================================== */
/* Sequence state                                                                           */
/* ======================================================================================== */

struct memra_ref_seq {
    const memra_ref_model *m; /* borrowed */
    uint32_t pos, n_ctx;
    memra_ref_f16_counts f16_counts; /* config.act_f16 */
    void *arena;                     /* owns everything below */
    size_t arena_bytes;
    /* state */
    uint16_t *k_cache, *v_cache; /* f16 [n_attn_layers, n_ctx, Hkv·dh] */
    float *conv;                 /* [n_rec_layers, Cc, K-1] raw projections, τ=0 oldest */
    float *ssm;                  /* [n_rec_layers, Hv, dv, dk]: Sᵀ per head (value-major) */
    /* scratch */
    float *x, *h, *mix, *ffn_out;   /* [D] residual, normed input, block outputs */
    float *qg;                      /* [2·Hq·dh] */
    float *q, *o;                   /* [max(Hq·dh, Cv)] */
    float *k, *v;                   /* [Hkv·dh] */
    float *scores;                  /* [n_ctx] */
    float *u_raw, *u;               /* [Cc] */
    float *z;                       /* [Cv] */
    float *beta, *alpha;            /* [Hv] */
    float *gate, *up;               /* [max_mid] */
    float *router, *probs;          /* [E] */
    float *route_w;                 /* [k] */
    int32_t *route_ids;             /* [k] */
    float *expert_out, *moe_acc;    /* [D] */
    float *rowbufs;                 /* [n_threads, max_in] */
    float *xsim;                    /* [max_in] config.act_sim's / act_f16's activations */
    memra_block_q8_1 *q_in, *q_mid; /* q8_1 of the block input [D/32] and of mid activations */
};

typedef struct arena_cursor {
    uint8_t *base; /* NULL while measuring */
    size_t off;
} arena_cursor;

static void *arena_take(arena_cursor *c, size_t n, size_t elem)
{
    c->off = (c->off + 63) & ~(size_t)63;
    void *p = c->base ? c->base + c->off : NULL;
    c->off += (n ? n : 1) * elem;
    return p;
}

/* Assign every buffer of s from c (sizes in elements; the caller checked they fit size_t). */
static void seq_layout(memra_ref_seq *s, arena_cursor *c)
{
    const memra_ref_model *m = s->m;
    const memra_qwen35_hparams *hp = &m->hp;
    const size_t D = hp->n_embd, kv = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t qo = (size_t)max64((int64_t)hp->n_head * hp->head_dim, hp->ssm_inner_size);
    const size_t Cc = hp->ssm_conv_channels, Hv = hp->ssm_n_v_heads;
    const size_t mid = (size_t)m->max_mid;
    s->k_cache = arena_take(c, (size_t)hp->n_attn_layers * s->n_ctx * kv, sizeof(uint16_t));
    s->v_cache = arena_take(c, (size_t)hp->n_attn_layers * s->n_ctx * kv, sizeof(uint16_t));
    s->conv = arena_take(c, (size_t)hp->n_recurrent_layers * Cc * (hp->ssm_conv_kernel - 1),
                         sizeof(float));
    s->ssm =
        arena_take(c, (size_t)hp->n_recurrent_layers * Hv * hp->ssm_head_v_dim * hp->ssm_state_size,
                   sizeof(float));
    s->x = arena_take(c, D, sizeof(float));
    s->h = arena_take(c, D, sizeof(float));
    s->mix = arena_take(c, D, sizeof(float));
    s->ffn_out = arena_take(c, D, sizeof(float));
    s->qg = arena_take(c, 2 * (size_t)hp->n_head * hp->head_dim, sizeof(float));
    s->q = arena_take(c, qo, sizeof(float));
    s->o = arena_take(c, qo, sizeof(float));
    s->k = arena_take(c, kv, sizeof(float));
    s->v = arena_take(c, kv, sizeof(float));
    s->scores = arena_take(c, s->n_ctx, sizeof(float));
    s->u_raw = arena_take(c, Cc, sizeof(float));
    s->u = arena_take(c, Cc, sizeof(float));
    s->z = arena_take(c, hp->ssm_inner_size, sizeof(float));
    s->beta = arena_take(c, Hv, sizeof(float));
    s->alpha = arena_take(c, Hv, sizeof(float));
    s->gate = arena_take(c, mid, sizeof(float));
    s->up = arena_take(c, mid, sizeof(float));
    s->router = arena_take(c, hp->n_expert, sizeof(float));
    s->probs = arena_take(c, hp->n_expert, sizeof(float));
    s->route_w = arena_take(c, hp->n_expert_used, sizeof(float));
    s->route_ids = arena_take(c, hp->n_expert_used, sizeof(int32_t));
    s->expert_out = arena_take(c, D, sizeof(float));
    s->moe_acc = arena_take(c, D, sizeof(float));
    s->rowbufs = arena_take(c, (size_t)m->n_threads * (size_t)m->max_in, sizeof(float));
    s->xsim = arena_take(c, m->act_sim || m->act_f16 ? (size_t)m->max_in : 0, sizeof(float));
    s->q_in = arena_take(c, D / 32 + 1, sizeof(memra_block_q8_1));
    s->q_mid = arena_take(c, mid / 32 + 1, sizeof(memra_block_q8_1));
}

/* Largest context accepted: keeps every size product far from size_t overflow (a 64-layer,
 * 8×256 KV model at this length needs 2^24·64·2048·2·2 bytes — refused by calloc long before
 * the arithmetic could wrap). */
#define REF_MAX_CTX (1u << 24)

int memra_ref_seq_init(const memra_ref_model *m, uint32_t n_ctx, memra_ref_seq **out,
                       memra_err *err)
{
    int rc;
    *out = NULL;
    if (n_ctx == 0 || n_ctx > REF_MAX_CTX)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_ctx = %u is out of range (1..%u)", n_ctx,
                          REF_MAX_CTX);
    memra_ref_seq *s = calloc(1, sizeof *s);
    if (!s)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "sequence: out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    arena_cursor c = {.base = NULL, .off = 0};
    seq_layout(s, &c);
    s->arena_bytes = c.off;
    s->arena = calloc(1, s->arena_bytes); /* zero = the state of a fresh sequence */
    if (!s->arena) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM,
                        "sequence: cannot allocate %zu bytes of state "
                        "(n_ctx = %u)",
                        s->arena_bytes, n_ctx);
        goto fail;
    }
    c = (arena_cursor){.base = s->arena, .off = 0};
    seq_layout(s, &c);
    *out = s;
    return MEMRA_OK;
fail:
    memra_ref_seq_free(s);
    return rc;
}

void memra_ref_seq_free(memra_ref_seq *s)
{
    if (!s)
        return;
    free(s->arena);
    free(s);
}

uint32_t memra_ref_seq_pos(const memra_ref_seq *s)
{
    return s->pos;
}

void memra_ref_seq_reset(memra_ref_seq *s)
{
    memset(s->arena, 0, s->arena_bytes);
    s->pos = 0;
    s->f16_counts = (memra_ref_f16_counts){0};
}

void memra_ref_seq_f16_counts(const memra_ref_seq *s, memra_ref_f16_counts *out)
{
    *out = s->f16_counts;
}

/* ======================================================================================== */
/* Blocks (spec §3.3 - §3.5)                                                                */
/* ======================================================================================== */

static void matvec(const memra_ref_model *m, memra_ref_seq *s, const ref_mat *w, int64_t expert,
                   ref_act *a, float *y)
{
    const mv_ctx c = {
        .rowbufs = s->rowbufs,
        .rowbuf_stride = m->max_in,
        .n_threads = m->n_threads,
        .act_sim = m->act_sim,
        .act_mult = m->act_sim_mult,
        .act_f16 = m->act_f16,
        .xsim = s->xsim,
        .counts = &s->f16_counts,
    };
    ref_matvec(&c, w, expert, a, y);
}

/* §3.3 gated full attention at position s->pos; input s->h, output out [D]. */
static void block_attention(const memra_ref_model *m, memra_ref_seq *s, const ref_layer *ly,
                            float *out)
{
    const memra_qwen35_hparams *hp = &m->hp;
    const int64_t dh = hp->head_dim, Hq = hp->n_head, Hkv = hp->n_head_kv, kv = Hkv * dh;
    ref_act h;
    act_init(&h, s->h, hp->n_embd, s->q_in);
    matvec(m, s, &ly->attn_q, 0, &h, s->qg); /* 1. [q_0|gate_0|q_1|gate_1|…] */
    matvec(m, s, &ly->attn_k, 0, &h, s->k);  /* 2. */
    matvec(m, s, &ly->attn_v, 0, &h, s->v);
    /* 3-4. per-head norm (attn_prep's 128-lane order) + RoPE; the gate stays raw */
    for (int64_t i = 0; i < Hq; i++) {
        float *qi = s->q + i * dh;
        memra_attn_head_norm(s->qg + 2 * dh * i, ly->attn_q_norm, qi, (int32_t)dh, hp->eps);
        memra_ref_rope(qi, hp->n_rot, hp->rope_sections, s->pos, hp->freq_base, hp->freq_scale);
    }
    for (int64_t j = 0; j < Hkv; j++) {
        float *kj = s->k + j * dh;
        memra_attn_head_norm(kj, ly->attn_k_norm, kj, (int32_t)dh, hp->eps); /* y may alias x */
        memra_ref_rope(kj, hp->n_rot, hp->rope_sections, s->pos, hp->freq_base, hp->freq_scale);
    }
    /* 5. append to the f16 cache at slot pos */
    uint16_t *kc = s->k_cache + (size_t)ly->state_index * s->n_ctx * kv;
    uint16_t *vc = s->v_cache + (size_t)ly->state_index * s->n_ctx * kv;
    for (int64_t c = 0; c < kv; c++) {
        kc[(size_t)s->pos * kv + c] = memra_f32_to_fp16(s->k[c]);
        vc[(size_t)s->pos * kv + c] = memra_f32_to_fp16(s->v[c]);
    }
    const memra_ref_attn_args args = {
        /* 6. */
        .q = s->q,    .k_cache = kc,    .v_cache = vc,  .n_kv = (int64_t)s->pos + 1,
        .n_head = Hq, .n_head_kv = Hkv, .head_dim = dh, .scratch = s->scores,
        .out = s->o,
    };
    memra_ref_attention(&args);
    for (int64_t i = 0; i < Hq; i++) /* 7. o_i ⊙ σ(gate_i) */
        for (int64_t c = 0; c < dh; c++)
            s->o[i * dh + c] *= memra_ref_sigmoid(s->qg[2 * dh * i + dh + c]);
    ref_act o;
    act_init(&o, s->o, Hq * dh, s->q_mid);
    matvec(m, s, &ly->attn_output, 0, &o, out); /* 8. */
}

/* §3.4 Gated DeltaNet; input s->h, output out [D]. */
static void block_gdn(const memra_ref_model *m, memra_ref_seq *s, const ref_layer *ly, float *out)
{
    const memra_qwen35_hparams *hp = &m->hp;
    const int64_t Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, dk = hp->ssm_state_size;
    const int64_t dv = hp->ssm_head_v_dim, Ck = Hk * dk, Cc = hp->ssm_conv_channels;
    const int64_t K = hp->ssm_conv_kernel;
    ref_act h;
    act_init(&h, s->h, hp->n_embd, s->q_in);
    matvec(m, s, &ly->attn_qkv, 0, &h, s->u_raw); /* 1. [q: Ck][k: Ck][v: Cv] */
    matvec(m, s, &ly->attn_gate, 0, &h, s->z);
    matvec(m, s, &ly->ssm_beta, 0, &h, s->beta);   /* 2. (logits; σ below) */
    matvec(m, s, &ly->ssm_alpha, 0, &h, s->alpha); /* 3. (logits; softplus below) */
    float *conv = s->conv + (size_t)ly->state_index * Cc * (K - 1);
    memra_ref_conv_step(s->u, conv, s->u_raw, ly->ssm_conv1d, Cc, K); /* 4. */
    for (int64_t c = 0; c < Cc; c++)
        s->u[c] = memra_ref_silu(s->u[c]);
    const float q_scale = memra_gdn_q_scale((int32_t)dk);
    for (int64_t a = 0; a < Hk; a++) { /* 5-7. per key head: L2 norm, q / sqrt(dk) */
        float *qa = s->u + a * dk, *ka = s->u + Ck + a * dk;
        memra_ref_l2_norm(qa, qa, dk, hp->eps);
        memra_ref_l2_norm(ka, ka, dk, hp->eps);
        for (int64_t i = 0; i < dk; i++)
            qa[i] *= q_scale;
    }
    float *S = s->ssm + (size_t)ly->state_index * Hv * dv * dk;
    for (int64_t hh = 0; hh < Hv; hh++) {
        const int64_t a = hh % Hk; /* 8. tiled mapping (pitfall 4) */
        const float beta = memra_gdn_beta(s->beta[hh]);
        /* λ = exp(A · softplus(α + dt_bias)), A = ssm_a = -exp(A_log) */
        const float decay = memra_gdn_decay(ly->ssm_a[hh], s->alpha[hh], ly->ssm_dt_bias[hh]);
        float *oh = s->o + hh * dv;
        memra_ref_delta_rule(S + hh * dv * dk, oh, s->u + a * dk, s->u + Ck + a * dk,
                             s->u + 2 * Ck + hh * dv, beta, decay, dk, dv);  /* 9. */
        memra_ref_gated_norm(oh, s->z + hh * dv, ly->ssm_norm, dv, hp->eps); /* 10. */
    }
    ref_act o;
    act_init(&o, s->o, Hv * dv, s->q_mid);
    matvec(m, s, &ly->ssm_out, 0, &o, out); /* 11. */
}

/* silu(W_gate·x) ⊙ (W_up·x) → W_down (one expert, or the dense/shared FFN); out [D]. */
static void swiglu(const memra_ref_model *m, memra_ref_seq *s, const ref_mat *gate,
                   const ref_mat *up, const ref_mat *down, int64_t expert, ref_act *x, float *out)
{
    const int64_t n = gate->n_out;
    matvec(m, s, gate, expert, x, s->gate);
    matvec(m, s, up, expert, x, s->up);
    for (int64_t i = 0; i < n; i++)
        s->gate[i] = memra_ref_silu(s->gate[i]) * s->up[i];
    ref_act a;
    act_init(&a, s->gate, n, s->q_mid);
    matvec(m, s, down, expert, &a, out);
}

/* §3.5 MoE: routed experts summed in rank order, plus σ(gate)·shared expert. */
static void block_moe(const memra_ref_model *m, memra_ref_seq *s, const ref_layer *ly, ref_act *x,
                      float *out)
{
    const memra_qwen35_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, k = hp->n_expert_used;
    matvec(m, s, &ly->router, 0, x, s->router);                                          /* 1. */
    memra_ref_moe_route(s->router, hp->n_expert, k, s->probs, s->route_ids, s->route_w); /* 2-3 */
    for (int64_t i = 0; i < D; i++)
        s->moe_acc[i] = 0.0f;
    for (int64_t r = 0; r < k; r++) { /* 4. */
        swiglu(m, s, &ly->gate_exps, &ly->up_exps, &ly->down_exps, s->route_ids[r], x,
               s->expert_out);
        for (int64_t i = 0; i < D; i++)
            s->moe_acc[i] += s->route_w[r] * s->expert_out[i];
    }
    if (!ly->gate_shexp.data) {
        memcpy(out, s->moe_acc, (size_t)D * sizeof *out);
        return;
    }
    swiglu(m, s, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, 0, x, s->expert_out); /* 5. */
    float gamma_logit;
    matvec(m, s, &ly->gate_inp_shexp, 0, x, &gamma_logit);
    const float gamma = memra_ref_sigmoid(gamma_logit);
    for (int64_t i = 0; i < D; i++)
        out[i] = s->moe_acc[i] + gamma * s->expert_out[i];
}

/* §3.2 one layer: x += mixer(norm(x)); x += ffn(norm(x)). */
static void layer_forward(const memra_ref_model *m, memra_ref_seq *s, const ref_layer *ly)
{
    const memra_qwen35_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd;
    memra_ref_rms_norm(s->h, s->x, ly->attn_norm, D, hp->eps); /* a. */
    if (ly->recurrent)                                         /* b. */
        block_gdn(m, s, ly, s->mix);
    else
        block_attention(m, s, ly, s->mix);
    for (int64_t i = 0; i < D; i++) /* c. */
        s->x[i] += s->mix[i];
    memra_ref_rms_norm(s->h, s->x, ly->post_attention_norm, D, hp->eps); /* d. pre-FFN norm */
    ref_act h2;
    act_init(&h2, s->h, D, s->q_in);
    if (hp->arch == MEMRA_QWEN35_ARCH_MOE) /* e. */
        block_moe(m, s, ly, &h2, s->ffn_out);
    else
        swiglu(m, s, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, 0, &h2, s->ffn_out);
    for (int64_t i = 0; i < D; i++) /* f. */
        s->x[i] += s->ffn_out[i];
}

/* ======================================================================================== */
/* Forward                                                                                  */
/* ======================================================================================== */

int memra_ref_forward(const memra_ref_model *m, memra_ref_seq *s, int32_t token, float *logits,
                      memra_err *err)
{
    const memra_qwen35_hparams *hp = &m->hp;
    if (s->m != m)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "sequence belongs to another model");
    if (token < 0 || (uint32_t)token >= hp->n_vocab)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "token %d is outside the vocabulary "
                          "(0..%u)",
                          (int)token, hp->n_vocab - 1);
    if (s->pos >= s->n_ctx)
        return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "sequence is full (n_ctx = %u)", s->n_ctx);
    const ref_mat *te = &m->token_embd; /* 1. embedding row (×NVFP4 scale), no other scaling */
    memra_dequantize_row(te->type, te->data + (size_t)token * te->row_bytes, s->x, hp->n_embd);
    for (uint32_t i = 0; te->scale && i < hp->n_embd; i++)
        s->x[i] *= te->scale[0];
    for (uint32_t l = 0; l < hp->n_layer; l++) /* 2. */
        layer_forward(m, s, &m->layers[l]);
    memra_ref_rms_norm(s->h, s->x, m->output_norm, hp->n_embd, hp->eps); /* 3. */
    ref_act y;
    act_init(&y, s->h, hp->n_embd, s->q_in);
    matvec(m, s, &m->output, 0, &y, logits);
    s->pos++;
    return MEMRA_OK;
}
