/*
 * test_forge.c — the model forge: forged tiny / tiny-moe checkpoints re-opened with the GGUF
 * reader carry every key and tensor spec/qwen35.md §1-2 names (expected lists are rebuilt
 * here from the spec formulas, not taken from the forge's plan), the Q4_K_M mix matches
 * llama.cpp's (including the real Qwen3.5-27B schema), bytes are deterministic and
 * independent of the thread count, stored weights are the generator's values, NVFP4 files
 * carry their scale companions, the synthetic vocabulary is a consistent BPE vocabulary,
 * bad options fail cleanly, and the independent gguf-py reader agrees
 * (tests/py/check_forge.py).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forge.h"
#include "gguf.h"
#include "quant.h"
#include "test_util.h"

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

/* A test-only MoE shape, ~4x smaller than tiny-moe (L 4: GDN 0-2, attention 3; 4 experts
 * top-2), with a 64-merge synthetic vocabulary: the per-type loop forges it once per type. */
static const memra_forge_shape k_micro_moe = {
    "micro-moe", "qwen35moe", 4, 256, 4, 2, 64, 16, 0, 2, 4, 64, 4, 4, 4, 2, 256, 256, 0, 4096,
    "test_forge.c"};

static void forge_to(const memra_forge_shape *shape, const char *type, uint64_t seed,
                     uint32_t threads, const memra_forge_vocab *vocab, const char *path)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = shape;
    ck_assert_ptr_nonnull(o.shape);
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_parse_type(type, &o, &err), MEMRA_OK);
    o.seed = seed;
    o.n_threads = threads;
    o.vocab = vocab;
    int rc = memra_forge_write(&o, path, &err);
    ck_assert_msg(rc == MEMRA_OK, "forge %s %s: %s", shape->name, type, err.msg);
}

static memra_forge_vocab *small_vocab(void)
{
    memra_forge_vocab *v = NULL;
    ck_assert_int_eq(memra_forge_vocab_synthetic(0, 64, &v, NULL), MEMRA_OK);
    return v;
}

/* The independent reader: gguf-py must see the same keys, names, shapes, types and values
 * (tests/py/check_forge.py rebuilds its expectations from the spec and reimplements the
 * generator). Fails when python3 or the gguf package is missing: the check is part of the
 * contract. preset NULL: pass the shape's dimensions explicitly. */
static void py_check(const char *path, const char *preset, const memra_forge_shape *s,
                     const char *type)
{
    char cmd[2048], shape[512];
    if (preset)
        snprintf(shape, sizeof shape, "--preset %s", preset);
    else
        snprintf(shape, sizeof shape,
                 "--shape arch=%s,L=%u,D=%u,Hq=%u,Hkv=%u,dh=%u,R=%u,F=%u,Hk=%u,Hv=%u,dk=%u,K=%u,"
                 "E=%u,k=%u,Fe=%u,Fs=%u,ctx=%u",
                 s->arch, s->n_layer, s->n_embd, s->n_head, s->n_head_kv, s->head_dim,
                 s->rope_dim, s->n_ff, s->ssm_n_group, s->ssm_dt_rank, s->ssm_d_state,
                 s->ssm_d_conv, s->n_expert, s->n_expert_used, s->n_ff_exp, s->n_ff_shexp,
                 s->n_ctx_train);
    snprintf(cmd, sizeof cmd, "python3 %s %s --type %s %s",
             tu_source_path("tests/py/check_forge.py"), shape, type, path);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "check_forge.py failed (status %d): %s", st, cmd);
}

static memra_gguf *open_gguf(const char *path)
{
    memra_gguf *g = NULL;
    memra_err err;
    memra_err_clear(&err);
    int rc = memra_gguf_open(path, &g, &err);
    ck_assert_msg(rc == MEMRA_OK, "reopen %s: %s", path, err.msg);
    return g;
}

static uint32_t get_u32(const memra_gguf *g, const char *key)
{
    uint32_t v = 0;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_gguf_get_u32(g, key, &v, &err) == MEMRA_OK, "%s: %s", key, err.msg);
    return v;
}

/* ---- the expected tensor set, rebuilt from spec/qwen35.md §2 ---- */

enum { K_F32, K_MAT, K_EMBD, K_OUT, K_WV, K_DOWN }; /* type class */

typedef struct exp_tensor {
    char name[64];
    int layer;
    uint32_t n_dims;
    int64_t ne[3];
    int kind;
} exp_tensor;

typedef struct exp_set {
    exp_tensor t[1024];
    int n;
} exp_set;

static void ex(exp_set *s, int layer, int kind, uint32_t nd, int64_t a, int64_t b, int64_t c,
               const char *suffix)
{
    ck_assert_int_lt(s->n, 1024);
    exp_tensor *t = &s->t[s->n++];
    if (layer < 0)
        snprintf(t->name, sizeof t->name, "%s", suffix);
    else
        snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, suffix);
    t->layer = layer;
    t->kind = kind;
    t->n_dims = nd;
    t->ne[0] = a;
    t->ne[1] = b;
    t->ne[2] = c;
}

static int cmp_exp(const void *pa, const void *pb)
{
    const exp_tensor *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void expected_layer(const memra_forge_shape *s, int l, exp_set *e)
{
    const int64_t D = s->n_embd, dh = s->head_dim, Hq = s->n_head, Hkv = s->n_head_kv;
    const int64_t Hk = s->ssm_n_group, Hv = s->ssm_dt_rank, dk = s->ssm_d_state;
    const int64_t Ck = Hk * dk, Cv = Hv * dk, Cc = 2 * Ck + Cv, K = s->ssm_d_conv;
    ex(e, l, K_F32, 1, D, 1, 1, "attn_norm.weight");
    ex(e, l, K_F32, 1, D, 1, 1, "post_attention_norm.weight");
    if ((l + 1) % (int)s->full_attn_interval == 0) {
        ex(e, l, K_MAT, 2, D, 2 * Hq * dh, 1, "attn_q.weight");
        ex(e, l, K_MAT, 2, D, Hkv * dh, 1, "attn_k.weight");
        ex(e, l, K_WV, 2, D, Hkv * dh, 1, "attn_v.weight");
        ex(e, l, K_MAT, 2, Hq * dh, D, 1, "attn_output.weight");
        ex(e, l, K_F32, 1, dh, 1, 1, "attn_q_norm.weight");
        ex(e, l, K_F32, 1, dh, 1, 1, "attn_k_norm.weight");
    } else {
        ex(e, l, K_WV, 2, D, Cc, 1, "attn_qkv.weight");
        ex(e, l, K_MAT, 2, D, Cv, 1, "attn_gate.weight");
        ex(e, l, K_F32, 2, K, Cc, 1, "ssm_conv1d.weight");
        ex(e, l, K_F32, 1, Hv, 1, 1, "ssm_dt.bias");
        ex(e, l, K_F32, 1, Hv, 1, 1, "ssm_a");
        ex(e, l, K_MAT, 2, D, Hv, 1, "ssm_beta.weight");
        ex(e, l, K_MAT, 2, D, Hv, 1, "ssm_alpha.weight");
        ex(e, l, K_F32, 1, dk, 1, 1, "ssm_norm.weight");
        ex(e, l, K_MAT, 2, Cv, D, 1, "ssm_out.weight");
    }
    if (s->n_expert == 0) {
        ex(e, l, K_MAT, 2, D, s->n_ff, 1, "ffn_gate.weight");
        ex(e, l, K_MAT, 2, D, s->n_ff, 1, "ffn_up.weight");
        ex(e, l, K_DOWN, 2, s->n_ff, D, 1, "ffn_down.weight");
    } else {
        const int64_t E = s->n_expert, Fe = s->n_ff_exp, Fs = s->n_ff_shexp;
        ex(e, l, K_F32, 2, D, E, 1, "ffn_gate_inp.weight");
        ex(e, l, K_MAT, 3, D, Fe, E, "ffn_gate_exps.weight");
        ex(e, l, K_MAT, 3, D, Fe, E, "ffn_up_exps.weight");
        ex(e, l, K_DOWN, 3, Fe, D, E, "ffn_down_exps.weight");
        ex(e, l, K_F32, 1, D, 1, 1, "ffn_gate_inp_shexp.weight");
        ex(e, l, K_MAT, 2, D, Fs, 1, "ffn_gate_shexp.weight");
        ex(e, l, K_MAT, 2, D, Fs, 1, "ffn_up_shexp.weight");
        ex(e, l, K_DOWN, 2, Fs, D, 1, "ffn_down_shexp.weight");
    }
}

static void expected_set(const memra_forge_shape *s, int64_t V, exp_set *e)
{
    e->n = 0;
    ex(e, -1, K_EMBD, 2, s->n_embd, V, 1, "token_embd.weight");
    ex(e, -1, K_F32, 1, s->n_embd, 1, 1, "output_norm.weight");
    ex(e, -1, K_OUT, 2, s->n_embd, V, 1, "output.weight");
    for (int l = 0; l < (int)s->n_layer; l++)
        expected_layer(s, l, e);
    /* llama-quantize order: globals, then blocks in order, by name inside each. */
    qsort(e->t, (size_t)e->n, sizeof e->t[0], cmp_exp);
}

/* Q4_K_M expectation with the layer set given explicitly (not recomputed by the formula). */
static memra_qtype expect_q4km(const exp_tensor *t, const int *more_bits, int n_layer)
{
    int more = t->layer >= 0 && t->layer < n_layer && more_bits[t->layer];
    switch (t->kind) {
    case K_F32: return MEMRA_QT_F32;
    case K_OUT: return MEMRA_QT_Q6_K;
    case K_WV:
    case K_DOWN: return more ? MEMRA_QT_Q6_K : MEMRA_QT_Q4_K;
    default: return MEMRA_QT_Q4_K;
    }
}

static memra_qtype expect_single(const exp_tensor *t, memra_qtype q)
{
    if (t->kind == K_F32)
        return MEMRA_QT_F32;
    if (q == MEMRA_QT_NVFP4 && (t->kind == K_EMBD || t->kind == K_OUT))
        return MEMRA_QT_Q8_0;
    return q;
}

/* Compares the file's tensor table, in order, with e (and the types with want[i]). */
static void check_tensors(const memra_gguf *g, const exp_set *e, const memra_qtype *want,
                          int with_scales)
{
    int64_t n = memra_gguf_n_tensors(g), k = 0;
    for (int i = 0; i < e->n; i++, k++) {
        ck_assert_int_lt(k, n);
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, k);
        const exp_tensor *x = &e->t[i];
        ck_assert_msg(strcmp(t->name, x->name) == 0, "tensor %lld: %s, expected %s", (long long)k,
                      t->name, x->name);
        ck_assert_msg(t->n_dims == x->n_dims, "%s: n_dims %u want %u", x->name, t->n_dims,
                      x->n_dims);
        for (int d = 0; d < 3; d++)
            ck_assert_msg(t->ne[d] == x->ne[d], "%s: ne[%d] %lld want %lld", x->name, d,
                          (long long)t->ne[d], (long long)x->ne[d]);
        ck_assert_msg(t->type == (uint32_t)want[i], "%s: type %s want %s", x->name,
                      memra_qtype_get(t->type)->name, memra_qtype_get(want[i])->name);
        if (with_scales && t->type == MEMRA_QT_NVFP4) {
            const memra_gguf_tensor *c = memra_gguf_tensor_at(g, ++k);
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s.scale", (int)strlen(x->name) - 7, x->name);
            ck_assert_msg(c && strcmp(c->name, nm) == 0, "no %s after its matrix", nm);
            ck_assert_uint_eq(c->type, MEMRA_QT_F32);
            ck_assert_uint_eq(c->n_dims, 1);
            ck_assert_int_eq(c->ne[0], x->n_dims == 3 ? x->ne[2] : 1);
        }
    }
    ck_assert_int_eq(k, n);
}

/* <arch>.<suffix> must be the u32 val. */
static void check_arch_u32(const memra_gguf *g, const char *arch, const char *suffix, uint32_t val)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t got = get_u32(g, key);
    ck_assert_msg(got == val, "%s = %u want %u", key, got, val);
}

static void check_arch_keys(const memra_gguf *g, const memra_forge_shape *s)
{
    const char *a = s->arch;
    check_arch_u32(g, a, "context_length", s->n_ctx_train);
    check_arch_u32(g, a, "embedding_length", s->n_embd);
    check_arch_u32(g, a, "block_count", s->n_layer);
    check_arch_u32(g, a, "attention.head_count", s->n_head);
    check_arch_u32(g, a, "attention.head_count_kv", s->n_head_kv);
    check_arch_u32(g, a, "attention.key_length", s->head_dim);
    check_arch_u32(g, a, "attention.value_length", s->head_dim);
    check_arch_u32(g, a, "rope.dimension_count", s->rope_dim);
    check_arch_u32(g, a, "ssm.conv_kernel", s->ssm_d_conv);
    check_arch_u32(g, a, "ssm.inner_size", s->ssm_dt_rank * s->ssm_d_state);
    check_arch_u32(g, a, "ssm.state_size", s->ssm_d_state);
    check_arch_u32(g, a, "ssm.time_step_rank", s->ssm_dt_rank);
    check_arch_u32(g, a, "ssm.group_count", s->ssm_n_group);
    check_arch_u32(g, a, "full_attention_interval", 4);
    if (s->n_expert) {
        check_arch_u32(g, a, "expert_count", s->n_expert);
        check_arch_u32(g, a, "expert_used_count", s->n_expert_used);
        check_arch_u32(g, a, "expert_feed_forward_length", s->n_ff_exp);
        check_arch_u32(g, a, "expert_shared_feed_forward_length", s->n_ff_shexp);
    } else {
        check_arch_u32(g, a, "feed_forward_length", s->n_ff);
    }
    char key[128];
    float f;
    memra_err err;
    memra_err_clear(&err);
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    ck_assert_int_eq(memra_gguf_get_f32(g, key, &f, &err), 0);
    ck_assert_float_eq(f, 1e7f);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    ck_assert_int_eq(memra_gguf_get_f32(g, key, &f, &err), 0);
    ck_assert_float_eq(f, 1e-6f);
    int64_t sec[8];
    size_t n_sec = 0;
    snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
    ck_assert_int_eq(memra_gguf_get_i64_array(g, key, sec, 8, &n_sec, &err), 0);
    ck_assert_uint_eq(n_sec, 4);
    /* The R/2 pairs split over t, h, w; R = 16 -> 8 pairs -> [3, 3, 2, 0] (R = 64 gives
     * Qwen3.5's [11, 11, 10, 0], checked in test_rope_sections). */
    ck_assert_int_eq(sec[0] + sec[1] + sec[2], s->rope_dim / 2);
    ck_assert_int_eq(sec[3], 0);
    ck_assert_int_ge(sec[0], sec[2]);
    ck_assert_int_le(sec[0] - sec[2], 1);
}

static void check_tokenizer_keys(const memra_gguf *g)
{
    char buf[256];
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_gguf_get_str(g, "tokenizer.ggml.model", buf, sizeof buf, &err), 0);
    ck_assert_str_eq(buf, "gpt2");
    ck_assert_int_eq(memra_gguf_get_str(g, "tokenizer.ggml.pre", buf, sizeof buf, &err), 0);
    ck_assert_str_eq(buf, "qwen35");
    const memra_gguf_tensor *embd = memra_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(embd);
    const int64_t V = embd->ne[1];
    int64_t ti = memra_gguf_find_kv(g, "tokenizer.ggml.tokens");
    int64_t tt = memra_gguf_find_kv(g, "tokenizer.ggml.token_type");
    ck_assert(ti >= 0 && tt >= 0);
    ck_assert_int_eq((int64_t)memra_gguf_kv_arr_len(g, ti), V);
    ck_assert_int_eq((int64_t)memra_gguf_kv_arr_len(g, tt), V);
    ck_assert_int_ge(memra_gguf_find_kv(g, "tokenizer.ggml.merges"), 0);
    ck_assert_int_ge(memra_gguf_find_kv(g, "tokenizer.chat_template"), 0);
    ck_assert_uint_lt(get_u32(g, "tokenizer.ggml.eos_token_id"), (uint32_t)V);
    ck_assert_uint_lt(get_u32(g, "tokenizer.ggml.bos_token_id"), (uint32_t)V);
    ck_assert_uint_lt(get_u32(g, "tokenizer.ggml.padding_token_id"), (uint32_t)V);
    int add_bos = 1;
    ck_assert_int_eq(memra_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, &err), 0);
    ck_assert_int_eq(add_bos, 0);
}

/* Every metadata key spec/qwen35.md §1 lists for a converted Qwen3.5 file, with values. */
static void check_keys(const memra_gguf *g, const memra_forge_shape *s, uint32_t ftype)
{
    char buf[256];
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_gguf_get_str(g, "general.architecture", buf, sizeof buf, &err), 0);
    ck_assert_str_eq(buf, s->arch);
    ck_assert_uint_eq(memra_gguf_version(g), 3);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), ftype);
    check_arch_keys(g, s);
    check_tokenizer_keys(g);
}

/* ---- tests ---- */

/* tiny, Q4_K_M: L = 8 -> use_more_bits layers {0, 3, 6, 7} (i < 1, i >= 7, (i-1) % 3 == 2). */
START_TEST(test_tiny_q4_k_m_structure)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    const memra_forge_shape *s = memra_forge_preset("tiny");
    forge_to(s, "q4_k_m", 1, 0, NULL, path);
    memra_gguf *g = open_gguf(path);
    check_keys(g, s, 15);
    exp_set *e = malloc(sizeof *e);
    expected_set(s, memra_gguf_find_tensor(g, "token_embd.weight")->ne[1], e);
    static const int more[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    memra_qtype want[1024];
    for (int i = 0; i < e->n; i++)
        want[i] = expect_q4km(&e->t[i], more, 8);
    check_tensors(g, e, want, 0);
    /* Two full-attention layers (3, 7), six GDN layers. */
    ck_assert_ptr_nonnull(memra_gguf_find_tensor(g, "blk.3.attn_q.weight"));
    ck_assert_ptr_nonnull(memra_gguf_find_tensor(g, "blk.7.attn_k_norm.weight"));
    ck_assert_ptr_null(memra_gguf_find_tensor(g, "blk.3.attn_qkv.weight"));
    ck_assert_ptr_nonnull(memra_gguf_find_tensor(g, "blk.6.ssm_a"));
    free(e);
    memra_gguf_close(g);
    py_check(path, "tiny", s, "q4_k_m");
    unlink(path);
}
END_TEST

START_TEST(test_tiny_moe_q4_k_m_structure)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    const memra_forge_shape *s = memra_forge_preset("tiny-moe");
    forge_to(s, "q4_k_m", 3, 0, NULL, path);
    memra_gguf *g = open_gguf(path);
    check_keys(g, s, 15);
    ck_assert_int_lt(memra_gguf_find_kv(g, "qwen35moe.feed_forward_length"), 0);
    exp_set *e = malloc(sizeof *e);
    expected_set(s, memra_gguf_find_tensor(g, "token_embd.weight")->ne[1], e);
    static const int more[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    memra_qtype want[1024];
    for (int i = 0; i < e->n; i++)
        want[i] = expect_q4km(&e->t[i], more, 8);
    check_tensors(g, e, want, 0);
    free(e);
    memra_gguf_close(g);
    py_check(path, "tiny-moe", s, "q4_k_m");
    unlink(path);
}
END_TEST

/* The stored data are the generator's values: F32 files byte-for-byte, Q8_0 within its
 * rounding bound, NVFP4 (times its companion scale) within its bound. Also checks the
 * weights' scales are the documented ones. */
static void compare_tensor(const memra_gguf *g, const memra_forge_opts *o,
                           const memra_forge_tensor *pt)
{
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, pt->name);
    ck_assert_ptr_nonnull(t);
    const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2];
    float *want = malloc((size_t)(ne0 * rows) * sizeof(float));
    float *got = malloc((size_t)ne0 * sizeof(float));
    memra_forge_fill_rows(o, pt, 0, rows, want);
    const size_t rb = memra_quant_row_bytes(t->type, ne0);
    for (int64_t r = 0; r < rows; r++) {
        const float *w = want + r * ne0;
        ck_assert_int_eq(memra_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, got, ne0),
                         0);
        float s = 1.0f;
        if (t->type == MEMRA_QT_NVFP4) {
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s.scale", (int)strlen(t->name) - 7, t->name);
            const memra_gguf_tensor *c = memra_gguf_find_tensor(g, nm);
            ck_assert_ptr_nonnull(c);
            s = ((const float *)c->data)[c->ne[0] > 1 ? r / t->ne[1] : 0];
            ck_assert_float_eq(s, memra_forge_nvfp4_scale(o, pt, r / t->ne[1]));
        }
        for (int64_t c = 0; c < ne0; c++)
            got[c] *= s;
        if (t->type == MEMRA_QT_F32) {
            ck_assert_msg(memcmp(got, w, (size_t)ne0 * 4) == 0, "%s row %lld differs", t->name,
                          (long long)r);
            continue;
        }
        /* Q8_0: q = round(x / d) with the fp32 d = amax/127, decoded with fp16(d) (relative
         * error <= 2^-11): |error| <= d/2 + 127 d 2^-11 = amax/127 * 0.5621. NVFP4: the E2M1 grid step near the top of a 16-block is 2 units
         * of d = amax/6 (4 -> 6), so |error| <= amax/6 plus UE4M3 rounding of d (2^-4
         * relative): amax * 0.18. Both with the row's amax as a (looser) per-block bound. */
        float amax = 0.0f;
        for (int64_t c = 0; c < ne0; c++)
            amax = fmaxf(amax, fabsf(w[c]));
        double tol = t->type == MEMRA_QT_Q8_0 ? amax / 127.0 * 0.5621 : amax * 0.18;
        TU_ASSERT_CLOSE(got, w, (size_t)ne0, tol, 0.0);
    }
    free(want);
    free(got);
}

/* Every single type on the micro MoE shape (3-D expert tensors included) has the right
 * keys and tensor table (NVFP4: a "<base>.scale" companion after every NVFP4 matrix "<base>.weight"), the
 * stored values are the generator's (F32 exactly, Q8_0 / NVFP4 within their bounds), and
 * gguf-py agrees. */
START_TEST(test_single_types)
{
    static const char *const types[] = {"f32",  "f16",    "bf16",  "q8_0",  "q4_0", "q4_k",
                                        "q5_k", "q6_k", "iq4_xs", "mxfp4", "nvfp4"};
    const char *ty = types[_i];
    const memra_forge_shape *s = &k_micro_moe;
    memra_forge_vocab *v = small_vocab();
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    forge_to(s, ty, 5, 2, v, path);
    memra_gguf *g = open_gguf(path);
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = s;
    o.seed = 5;
    ck_assert_int_eq(memra_forge_parse_type(ty, &o, NULL), MEMRA_OK);
    check_keys(g, s, memra_forge_file_type(&o));
    exp_set *e = malloc(sizeof *e);
    expected_set(s, v->n_tokens, e);
    memra_qtype want[1024];
    for (int i = 0; i < e->n; i++)
        want[i] = expect_single(&e->t[i], o.type);
    check_tensors(g, e, want, o.type == MEMRA_QT_NVFP4);
    free(e);
    if (o.type == MEMRA_QT_F32 || o.type == MEMRA_QT_Q8_0 || o.type == MEMRA_QT_NVFP4) {
        memra_forge_plan p;
        ck_assert_int_eq(memra_forge_plan_build(&o, v->n_tokens, &p, NULL), MEMRA_OK);
        static const char *const names[] = {
            "token_embd.weight",        "blk.0.ssm_a",              "blk.0.ssm_dt.bias",
            "blk.0.ssm_conv1d.weight",  "blk.2.attn_qkv.weight",    "blk.3.attn_q_norm.weight",
            "blk.1.ffn_down_exps.weight", "blk.3.ffn_gate_inp.weight", "output.weight"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            long i = memra_forge_plan_find(&p, names[k]);
            ck_assert_int_ge(i, 0);
            compare_tensor(g, &o, &p.t[i]);
        }
        memra_forge_plan_free(&p);
    }
    memra_gguf_close(g);
    py_check(path, NULL, s, ty);
    unlink(path);
    memra_forge_vocab_free(v);
}
END_TEST

/* Same options -> identical bytes, whatever the thread count; another seed -> other
 * weights in every tensor (same table). Also the Q4_K_M mix of the micro shape: L = 4 ->
 * use_more_bits layers {2, 3} (i >= 7*4/8 = 3, or (i - 0) % 3 == 2). */
START_TEST(test_determinism)
{
    const memra_forge_shape *s = &k_micro_moe;
    memra_forge_vocab *v = small_vocab();
    char a[256], b[256], c[256];
    tu_tmp_path(a, sizeof a, ".gguf");
    tu_tmp_path(b, sizeof b, ".gguf");
    tu_tmp_path(c, sizeof c, ".gguf");
    forge_to(s, "q4_k_m", 42, 1, v, a);
    forge_to(s, "q4_k_m", 42, 3, v, b);
    forge_to(s, "q4_k_m", 43, 2, v, c);
    size_t na, nb, nc;
    char *da = read_file(a, &na), *db = read_file(b, &nb), *dc = read_file(c, &nc);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(da, db, na) == 0, "1 thread and 3 threads gave different bytes");
    memra_gguf *ga = open_gguf(a), *gc = open_gguf(c);
    ck_assert_int_eq(memra_gguf_n_tensors(ga), memra_gguf_n_tensors(gc));
    for (int64_t i = 0; i < memra_gguf_n_tensors(ga); i++) {
        const memra_gguf_tensor *ta = memra_gguf_tensor_at(ga, i);
        const memra_gguf_tensor *tc = memra_gguf_tensor_at(gc, i);
        ck_assert_str_eq(ta->name, tc->name);
        ck_assert_uint_eq(ta->nbytes, tc->nbytes);
        ck_assert_msg(memcmp(ta->data, tc->data, ta->nbytes) != 0, "%s same under seeds 42, 43",
                      ta->name);
    }
    exp_set *e = malloc(sizeof *e);
    expected_set(s, v->n_tokens, e);
    static const int more[4] = {0, 0, 1, 1};
    memra_qtype want[1024];
    for (int i = 0; i < e->n; i++)
        want[i] = expect_q4km(&e->t[i], more, 4);
    check_tensors(ga, e, want, 0);
    free(e);
    memra_gguf_close(ga);
    memra_gguf_close(gc);
    free(da);
    free(db);
    free(dc);
    unlink(a);
    unlink(b);
    unlink(c);
    memra_forge_vocab_free(v);
}
END_TEST

/* general.alignment: when asked for, written and honoured. */
START_TEST(test_alignment_key)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_forge_vocab *v = small_vocab();
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = &k_micro_moe;
    o.vocab = v;
    o.alignment = 64;
    o.mix = MEMRA_FORGE_MIX_NONE;
    o.type = MEMRA_QT_Q4_0;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_write(&o, path, &err), MEMRA_OK);
    memra_gguf *g = open_gguf(path);
    ck_assert_uint_eq(memra_gguf_alignment(g), 64);
    ck_assert_uint_eq(get_u32(g, "general.alignment"), 64);
    ck_assert_uint_eq(memra_gguf_data_offset(g) % 64, 0);
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++)
        ck_assert_uint_eq(memra_gguf_tensor_at(g, i)->offset % 64, 0);
    memra_gguf_close(g);
    unlink(path);
    memra_forge_vocab_free(v);
}
END_TEST

/* llama.cpp's own Q4_K_M assignment for Qwen3.5-27B (tests/snapshots/qwen3.5-27b.schema,
 * section [Q4_K_M]): output.weight and, in layers 0-7, 10, 13, ..., 55, 56-63, the
 * attn_qkv/attn_v and ffn_down tensors are Q6_K; every other matrix is Q4_K. */
START_TEST(test_q4_k_m_matches_llama_cpp_27b)
{
    static const int q6_layers[] = {0,  1,  2,  3,  4,  5,  6,  7,  10, 13, 16, 19, 22, 25,
                                    28, 31, 34, 37, 40, 43, 46, 49, 52, 55, 56, 57, 58, 59,
                                    60, 61, 62, 63};
    int more[64] = {0};
    for (size_t i = 0; i < sizeof q6_layers / sizeof q6_layers[0]; i++)
        more[q6_layers[i]] = 1;
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = memra_forge_preset("27b");
    memra_forge_plan p;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_plan_build(&o, 248320, &p, &err), MEMRA_OK);
    exp_set *e = malloc(sizeof *e);
    expected_set(o.shape, 248320, e);
    ck_assert_int_eq((int)p.n, e->n);
    for (int i = 0; i < e->n; i++) {
        ck_assert_str_eq(p.t[i].name, e->t[i].name);
        memra_qtype w = expect_q4km(&e->t[i], more, 64);
        ck_assert_msg(p.t[i].type == w, "%s: %s want %s", p.t[i].name,
                      memra_qtype_get(p.t[i].type)->name, memra_qtype_get(w)->name);
    }
    free(e);
    memra_forge_plan_free(&p);
}
END_TEST

/* The documented value ranges of the init table (forge.c): ssm_a in [-16, -1],
 * dt_bias = softplus^-1(dt), dt in [1e-3, 0.1], conv taps within 1/sqrt(K), norms near 1,
 * matrices bounded by 2 sqrt(3) std. */
START_TEST(test_init_ranges)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = memra_forge_preset("tiny");
    memra_forge_plan p;
    ck_assert_int_eq(memra_forge_plan_build(&o, 1000, &p, NULL), MEMRA_OK);
    float v[4096];
    for (size_t i = 0; i < p.n; i++) {
        const memra_forge_tensor *t = &p.t[i];
        int64_t n = t->ne[0] * t->ne[1];
        if (n > 4096)
            n = t->ne[0];
        memra_forge_fill_rows(&o, t, 0, n / t->ne[0], v);
        for (int64_t k = 0; k < n; k++) {
            float x = v[k];
            switch (t->role) {
            case MEMRA_FORGE_SSM_A: ck_assert(x <= -1.0f && x >= -16.0f); break;
            case MEMRA_FORGE_SSM_DT_BIAS: {
                double dt = log1p(exp((double)x)); /* softplus */
                ck_assert_msg(dt >= 0.999e-3 && dt <= 0.1001, "%s: dt %g", t->name, dt);
                break;
            }
            case MEMRA_FORGE_SSM_CONV1D: ck_assert(fabsf(x) <= 0.5f); break;
            case MEMRA_FORGE_ATTN_NORM:
            case MEMRA_FORGE_POST_ATTN_NORM:
            case MEMRA_FORGE_ATTN_Q_NORM:
            case MEMRA_FORGE_ATTN_K_NORM:
            case MEMRA_FORGE_SSM_NORM:
            case MEMRA_FORGE_OUTPUT_NORM: ck_assert(fabsf(x - 1.0f) <= 0.05f * 3.4642f); break;
            default:
                ck_assert_msg(fabsf(x) <= t->std * 3.4642f * 1.26f, "%s[%lld] = %g std %g",
                              t->name, (long long)k, x, t->std);
            }
        }
    }
    memra_forge_plan_free(&p);
}
END_TEST

START_TEST(test_rope_sections)
{
    int32_t s[4];
    memra_forge_rope_sections(64, s); /* Qwen3.5: mrope_section [11, 11, 10] padded to 4 */
    ck_assert(s[0] == 11 && s[1] == 11 && s[2] == 10 && s[3] == 0);
    memra_forge_rope_sections(16, s);
    ck_assert(s[0] == 3 && s[1] == 3 && s[2] == 2 && s[3] == 0);
}
END_TEST

START_TEST(test_vocab_synthetic)
{
    memra_forge_vocab *v = NULL;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_vocab_synthetic(0, MEMRA_FORGE_SYNTH_MERGES, &v, &err), MEMRA_OK);
    ck_assert_int_eq(memra_forge_vocab_validate(v, &err), MEMRA_OK);
    /* The corpus supports the whole default budget (a smaller count means the training lost
     * data); 256 bytes + one new token per merge at most, plus 5 specials. */
    ck_assert_uint_eq(v->n_merges, MEMRA_FORGE_SYNTH_MERGES);
    ck_assert_uint_le(v->n_tokens, 256 + v->n_merges + 5);
    ck_assert_uint_gt(v->n_tokens, 256 + v->n_merges / 2);
    ck_assert_str_eq(v->tokens[0], "!");                    /* GPT-2 order starts at '!' */
    ck_assert_str_eq(v->tokens[256 - 68 + 32], "\xc4\xa0"); /* byte ' ' -> U+0120 'Ġ' */
    ck_assert_str_eq(v->tokens[v->eos_id], "<|im_end|>");
    ck_assert_int_eq(v->token_types[v->eos_id], MEMRA_TOKEN_TYPE_CONTROL);
    ck_assert_str_eq(v->tokens[v->bos_id], "<|endoftext|>");
    ck_assert_int_eq(v->add_bos, 0);
    ck_assert_str_eq(v->merges[0], "h e"); /* the corpus's most frequent pair ("the") */
    uint32_t natural = v->n_tokens;
    memra_forge_vocab_free(v);
    /* Padding to an embedding size, and the same vocabulary twice. */
    ck_assert_int_eq(memra_forge_vocab_synthetic(natural + 10, MEMRA_FORGE_SYNTH_MERGES, &v, &err),
                     MEMRA_OK);
    ck_assert_uint_eq(v->n_tokens, natural + 10);
    ck_assert_int_eq(v->token_types[natural + 9], MEMRA_TOKEN_TYPE_UNUSED);
    char pad[32];
    snprintf(pad, sizeof pad, "[PAD%u]", natural + 9);
    ck_assert_str_eq(v->tokens[natural + 9], pad);
    memra_forge_vocab_free(v);
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_vocab_synthetic(natural - 1, MEMRA_FORGE_SYNTH_MERGES, &v, &err),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_null(v);
    /* validate rejects a merge naming a missing token. */
    ck_assert_int_eq(memra_forge_vocab_synthetic(0, 4, &v, &err), MEMRA_OK);
    free(v->merges[3]);
    v->merges[3] = strdup("zz qq");
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_vocab_validate(v, &err), MEMRA_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "merge 3"));
    memra_forge_vocab_free(v);
}
END_TEST

/* The GGUF vocabulary provider (the plug-in path a real Qwen3.5 vocabulary takes): reading
 * the tokenizer back from a forged file gives the synthetic vocabulary exactly, and forging
 * with it gives the same bytes. A file without a tokenizer is refused by name. */
START_TEST(test_vocab_from_gguf)
{
    const memra_forge_shape *s = &k_micro_moe;
    memra_forge_vocab *v = small_vocab(), *r = NULL;
    char a[256], b[256];
    tu_tmp_path(a, sizeof a, ".gguf");
    tu_tmp_path(b, sizeof b, ".gguf");
    forge_to(s, "q8_0", 3, 0, v, a);
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_forge_vocab_from_gguf(a, &r, &err) == MEMRA_OK, "%s", err.msg);
    ck_assert_uint_eq(r->n_tokens, v->n_tokens);
    ck_assert_uint_eq(r->n_merges, v->n_merges);
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        ck_assert_uint_eq(r->token_lens[i], v->token_lens[i]);
        ck_assert(memcmp(r->tokens[i], v->tokens[i], v->token_lens[i]) == 0);
        ck_assert_int_eq(r->token_types[i], v->token_types[i]);
    }
    for (uint32_t m = 0; m < v->n_merges; m++)
        ck_assert_str_eq(r->merges[m], v->merges[m]);
    ck_assert_str_eq(r->model, v->model);
    ck_assert_str_eq(r->pre, v->pre);
    ck_assert_str_eq(r->chat_template, v->chat_template);
    ck_assert(r->bos_id == v->bos_id && r->eos_id == v->eos_id && r->pad_id == v->pad_id);
    ck_assert_int_eq(r->add_bos, v->add_bos);
    forge_to(s, "q8_0", 3, 0, r, b);
    size_t na, nb;
    char *da = read_file(a, &na), *db = read_file(b, &nb);
    ck_assert(na == nb && memcmp(da, db, na) == 0);
    free(da);
    free(db);
    memra_forge_vocab_free(r);
    r = NULL;
    /* A GGUF with no tokenizer keys. */
    memra_gguf_writer *w = NULL;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_set_str(w, "general.architecture", "qwen35"), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_begin(w, b), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_vocab_from_gguf(b, &r, &err), MEMRA_ERR_NOT_FOUND);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer.ggml.tokens"));
    memra_err_clear(&err);
    ck_assert_int_ne(memra_forge_vocab_from_gguf("/nonexistent.gguf", &r, &err), MEMRA_OK);
    unlink(a);
    unlink(b);
    memra_forge_vocab_free(v);
}
END_TEST

/* Published shapes: sizes of the plans without writing them. 9B Q4_K_M is ~5.5 GB (the
 * PERF-NOTES 9B Q4_K_M tick reads ~5.1 GB of the ~5.6 GB file). */
START_TEST(test_published_plans)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    memra_forge_plan p;
    memra_err err;
    memra_err_clear(&err);
    o.shape = memra_forge_preset("9b");
    ck_assert_int_eq(memra_forge_plan_build(&o, 248320, &p, &err), MEMRA_OK);
    ck_assert_msg(p.n_params > 8.5e9 && p.n_params < 10.0e9, "9b params %llu",
                  (unsigned long long)p.n_params);
    ck_assert_msg(p.data_bytes > 5.0e9 && p.data_bytes < 6.2e9, "9b bytes %llu",
                  (unsigned long long)p.data_bytes);
    memra_forge_plan_free(&p);
    o.shape = memra_forge_preset("35b-a3b");
    ck_assert_int_eq(memra_forge_plan_build(&o, 248320, &p, &err), MEMRA_OK);
    ck_assert_msg(p.n_params > 33e9 && p.n_params < 37e9, "35b params %llu",
                  (unsigned long long)p.n_params);
    memra_forge_plan_free(&p);
    for (size_t i = 0; i < memra_forge_n_presets(); i++) {
        o.shape = memra_forge_preset_at(i);
        ck_assert_int_eq(memra_forge_plan_build(&o, 2000, &p, &err), MEMRA_OK);
        memra_forge_plan_free(&p);
    }
}
END_TEST

START_TEST(test_bad_options)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_parse_type("q3_k_xl", &o, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_forge_parse_type(NULL, &o, NULL), MEMRA_ERR_INVALID_ARG);
    /* A directory that does not exist: IO error, no file left behind. */
    memra_err_clear(&err);
    ck_assert_int_ne(memra_forge_write(&o, "/nonexistent-dir/x.gguf", &err), MEMRA_OK);
    ck_assert(err.msg[0] != '\0');
    /* Alignment must be a power of two. */
    o.alignment = 48;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_write(&o, "/tmp/unused.gguf", &err), MEMRA_ERR_INVALID_ARG);
    /* A shape whose rows do not fit the block: q4_k needs ne0 % 256 == 0. */
    memra_forge_shape s = *memra_forge_preset("tiny");
    s.n_embd = 96;
    memra_forge_opts_init(&o);
    o.shape = &s;
    ck_assert_int_eq(memra_forge_parse_type("q4_k", &o, NULL), MEMRA_OK);
    memra_forge_plan p;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_forge_plan_build(&o, 1000, &p, &err), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "ne0"));
    /* ... and Q4_K_M falls back like llama-quantize (Q4_K -> Q5_0, Q6_K -> Q8_0) or fails
     * cleanly when the quantizer lacks the fallback type. */
    memra_forge_opts_init(&o);
    o.shape = &s;
    memra_err_clear(&err);
    int rc = memra_forge_plan_build(&o, 1000, &p, &err);
    if (rc == MEMRA_OK) {
        ck_assert_int_eq(p.t[memra_forge_plan_find(&p, "output.weight")].type, MEMRA_QT_Q8_0);
        ck_assert_int_eq(p.t[memra_forge_plan_find(&p, "token_embd.weight")].type, MEMRA_QT_Q5_0);
        memra_forge_plan_free(&p);
    } else {
        ck_assert_int_eq(rc, MEMRA_ERR_UNSUPPORTED);
    }
    /* Inconsistent shape. */
    s = *memra_forge_preset("tiny");
    s.n_head_kv = 3;
    o.shape = &s;
    ck_assert_int_eq(memra_forge_plan_build(&o, 1000, &p, NULL), MEMRA_ERR_INVALID_ARG);
    s = *memra_forge_preset("tiny");
    s.arch = "llama";
    ck_assert_int_eq(memra_forge_plan_build(&o, 1000, &p, NULL), MEMRA_ERR_UNSUPPORTED);
}
END_TEST

Suite *make_forge_suite(void)
{
    Suite *s = suite_create("forge");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rope_sections);
    tcase_add_test(tc, test_vocab_synthetic);
    tcase_add_test(tc, test_vocab_from_gguf);
    tcase_add_test(tc, test_init_ranges);
    tcase_add_test(tc, test_q4_k_m_matches_llama_cpp_27b);
    tcase_add_test(tc, test_published_plans);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_tiny_q4_k_m_structure);
    tcase_add_test(tc, test_tiny_moe_q4_k_m_structure);
    tcase_add_loop_test(tc, test_single_types, 0, 11);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_alignment_key);
    suite_add_tcase(s, tc);
    return s;
}
