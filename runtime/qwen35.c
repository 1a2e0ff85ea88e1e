/*
 * qwen35.c — Qwen3.5 hyperparameters from GGUF metadata and the checked tensor binding.
 *
 * Concept: everything the spec (spec/qwen35.md §1, §2) says about *reading* a qwen35 /
 * qwen35moe file, in one place, so every backend agrees on defaults and refusals.
 * Must not: compute, allocate weight memory, or accept a file the reference loader would
 * refuse (wrong shapes, extra tensors, dv != dk, key_length != value_length).
 * Invariants: see qwen35.h. Every error message names the key or tensor.
 */
#include "qwen35.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* Sanity bound on any single model dimension and on derived widths (Cc, 2·Hq·dh, V): far
 * above every real checkpoint (largest V is 248320), far below int32 overflow in products of
 * two of them with a row count. */
#define QWEN35_MAX_DIM (1u << 24)

/* ======================================================================================== */
/* Metadata helpers                                                                         */
/* ======================================================================================== */

typedef struct hp_reader {
    const memra_gguf *g;
    const char *arch; /* key prefix */
    memra_err *err;
    char key[128]; /* the key of the last lookup, for messages */
} hp_reader;

static const char *hp_key(hp_reader *r, const char *suffix)
{
    snprintf(r->key, sizeof r->key, "%s.%s", r->arch, suffix);
    return r->key;
}

static int hp_present(hp_reader *r, const char *suffix)
{
    return memra_gguf_find_kv(r->g, hp_key(r, suffix)) >= 0;
}

/* u32 key: required (absent => NOT_FOUND naming it) or optional with a default. */
static int hp_u32(hp_reader *r, const char *suffix, int required, uint32_t def, uint32_t *out)
{
    if (!hp_present(r, suffix)) {
        if (required)
            return MEMRA_FAIL(r->err, MEMRA_ERR_NOT_FOUND, "required key %s is missing", r->key);
        *out = def;
        return MEMRA_OK;
    }
    return memra_gguf_get_u32(r->g, r->key, out, r->err);
}

static int hp_f32(hp_reader *r, const char *suffix, int required, float def, float *out)
{
    if (!hp_present(r, suffix)) {
        if (required)
            return MEMRA_FAIL(r->err, MEMRA_ERR_NOT_FOUND, "required key %s is missing", r->key);
        *out = def;
        return MEMRA_OK;
    }
    int rc = memra_gguf_get_f32(r->g, r->key, out, r->err);
    if (rc == MEMRA_OK && !isfinite(*out))
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s is not finite", r->key);
    return rc;
}

/*
 * A key that is either a u32 or a per-layer array [n_layer] (spec §1: feed_forward_length,
 * head_count, head_count_kv). The engine needs one value: the array entries of the layers in
 * `mask` (NULL = all layers) must agree, entries of other layers are ignored (hybrid files may
 * carry 0 for layers without attention). *present is 0 when the key is absent.
 */
static int hp_u32_per_layer(hp_reader *r, const char *suffix, uint32_t n_layer, const uint8_t *mask,
                            uint32_t *out, int *present)
{
    int64_t i = memra_gguf_find_kv(r->g, hp_key(r, suffix));
    *present = i >= 0;
    if (i < 0)
        return MEMRA_OK;
    if (memra_gguf_kv_type(r->g, i) != MEMRA_GGUF_ARRAY)
        return memra_gguf_get_u32(r->g, r->key, out, r->err);

    int64_t local[MEMRA_QWEN35_MAX_LAYERS];
    size_t len = 0;
    int rc = memra_gguf_get_i64_array(r->g, r->key, local, MEMRA_QWEN35_MAX_LAYERS, &len, r->err);
    if (rc != MEMRA_OK)
        return rc;
    if (len != n_layer)
        return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s has %zu entries, want block_count = %u",
                          r->key, len, n_layer);
    int have = 0;
    for (uint32_t l = 0; l < n_layer; l++) {
        if (local[l] < 0 || local[l] > (int64_t)UINT32_MAX)
            return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s[%u] = %lld is out of range", r->key,
                              l, (long long)local[l]);
        if (mask && !mask[l])
            continue;
        if (have && (uint32_t)local[l] != *out)
            return MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED,
                              "key %s: per-layer values differ (layer %u: %lld, earlier: %u)",
                              r->key, l, (long long)local[l], *out);
        *out = (uint32_t)local[l];
        have = 1;
    }
    if (!have)
        *out = 0;
    return MEMRA_OK;
}

static int hp_check_dim(hp_reader *r, const char *what, uint64_t v, int allow_zero)
{
    if ((!allow_zero && v == 0) || v > QWEN35_MAX_DIM)
        return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "%s = %llu is out of range (1..%u)", what,
                          (unsigned long long)v, QWEN35_MAX_DIM);
    return MEMRA_OK;
}

/* ======================================================================================== */
/* Hyperparameters                                                                          */
/* ======================================================================================== */

static int hp_arch(const memra_gguf *g, memra_qwen35_hparams *hp, memra_err *err)
{
    const char *key = "general.architecture";
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "required key %s is missing", key);
    if (memra_gguf_kv_type(g, i) != MEMRA_GGUF_STRING)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "key %s is not a string", key);
    memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
    static const struct {
        const char *name;
        memra_qwen35_arch arch;
    } known[] = {
        {"qwen35", MEMRA_QWEN35_ARCH_DENSE},
        {"qwen35moe", MEMRA_QWEN35_ARCH_MOE},
    };
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        if (s.len == strlen(known[k].name) && memcmp(s.ptr, known[k].name, s.len) == 0) {
            hp->arch = known[k].arch;
            snprintf(hp->arch_name, sizeof hp->arch_name, "%s", known[k].name);
            return MEMRA_OK;
        }
    }
    int shown = s.len > 64 ? 64 : (int)s.len;
    return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                      "architecture '%.*s' is not supported by the qwen35 model (want qwen35 or "
                      "qwen35moe)",
                      shown, s.ptr);
}

/* context, sizes, eps and the layer pattern. */
static int hp_core(hp_reader *r, memra_qwen35_hparams *hp)
{
    int rc;
    MEMRA_TRY(hp_u32(r, "context_length", 1, 0, &hp->n_ctx_train));
    MEMRA_TRY(hp_u32(r, "embedding_length", 1, 0, &hp->n_embd));
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "embedding_length"), hp->n_embd, 0));
    MEMRA_TRY(hp_u32(r, "block_count", 1, 0, &hp->n_layer));
    if (hp->n_layer == 0 || hp->n_layer > MEMRA_QWEN35_MAX_LAYERS) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s = %u is out of range (1..%d)",
                        hp_key(r, "block_count"), hp->n_layer, MEMRA_QWEN35_MAX_LAYERS);
        goto fail;
    }
    MEMRA_TRY(hp_f32(r, "attention.layer_norm_rms_epsilon", 1, 0, &hp->eps));
    if (!(hp->eps > 0)) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s = %g must be > 0", r->key,
                        (double)hp->eps);
        goto fail;
    }
    MEMRA_TRY(hp_u32(r, "full_attention_interval", 0, 4, &hp->full_attention_interval));
    if (hp->full_attention_interval == 0) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s is 0", r->key);
        goto fail;
    }
    hp->n_attn_layers = hp->n_recurrent_layers = 0;
    memset(hp->is_recurrent, 0, sizeof hp->is_recurrent);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        /* spec §1: GDN iff (l+1) mod interval != 0 */
        hp->is_recurrent[l] = (uint8_t)((l + 1) % hp->full_attention_interval != 0);
        if (hp->is_recurrent[l])
            hp->n_recurrent_layers++;
        else
            hp->n_attn_layers++;
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* rope.scaling.*: absent or none/linear (spec §1: normally absent for Qwen3.5). Linear
 * scaling multiplies every angle by freq_scale = 1/factor; factor absent or 0 means 1. */
static int hp_rope_scaling(hp_reader *r, memra_qwen35_hparams *hp)
{
    int rc;
    hp->freq_scale = 1.0f;
    int64_t i = memra_gguf_find_kv(r->g, hp_key(r, "rope.scaling.type"));
    int linear = 1;
    if (i >= 0) {
        if (memra_gguf_kv_type(r->g, i) != MEMRA_GGUF_STRING) {
            rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s is not a string", r->key);
            goto fail;
        }
        memra_gguf_str s = memra_gguf_kv_str(r->g, i, 0);
        int none = s.len == 4 && memcmp(s.ptr, "none", 4) == 0;
        linear = s.len == 6 && memcmp(s.ptr, "linear", 6) == 0;
        if (!none && !linear) {
            int shown = s.len > 32 ? 32 : (int)s.len;
            rc = MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED,
                            "key %s = '%.*s' is not supported "
                            "(none or linear)",
                            r->key, shown, s.ptr);
            goto fail;
        }
    }
    float factor = 0.0f;
    MEMRA_TRY(hp_f32(r, "rope.scaling.factor", 0, 0.0f, &factor));
    if (factor < 0) {
        rc =
            MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s = %g is negative", r->key, (double)factor);
        goto fail;
    }
    if (linear && factor > 0)
        hp->freq_scale = 1.0f / factor;
    return MEMRA_OK;
fail:
    return rc;
}

/* rope.dimension_sections: required, integer array of exactly 4 non-negative entries with a
 * positive sum (the IMRoPE sector is m mod sum, spec §3.3 step 4). */
static int hp_rope_sections(hp_reader *r, memra_qwen35_hparams *hp)
{
    int64_t v[8];
    size_t len = 0;
    if (!hp_present(r, "rope.dimension_sections"))
        return MEMRA_FAIL(r->err, MEMRA_ERR_NOT_FOUND, "required key %s is missing", r->key);
    int rc = memra_gguf_get_i64_array(r->g, r->key, v, 8, &len, r->err);
    if (rc != MEMRA_OK)
        return rc;
    if (len != 4)
        return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s has %zu entries, want exactly 4",
                          r->key, len);
    int64_t sum = 0;
    for (int k = 0; k < 4; k++) {
        if (v[k] < 0 || v[k] > (int64_t)QWEN35_MAX_DIM)
            return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s[%d] = %lld is out of range", r->key,
                              k, (long long)v[k]);
        hp->rope_sections[k] = (int32_t)v[k];
        sum += v[k];
    }
    if (sum == 0)
        return MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s sums to 0", r->key);
    return MEMRA_OK;
}

/* Attention geometry and RoPE. Only validated strictly when attention layers exist. */
static int hp_attention(hp_reader *r, memra_qwen35_hparams *hp)
{
    int rc, present;
    uint8_t attn_mask[MEMRA_QWEN35_MAX_LAYERS];
    for (uint32_t l = 0; l < hp->n_layer; l++)
        attn_mask[l] = (uint8_t)!hp->is_recurrent[l];

    hp->n_head = 0;
    MEMRA_TRY(
        hp_u32_per_layer(r, "attention.head_count", hp->n_layer, attn_mask, &hp->n_head, &present));
    hp->n_head_kv = hp->n_head;
    MEMRA_TRY(hp_u32_per_layer(r, "attention.head_count_kv", hp->n_layer, attn_mask, &hp->n_head_kv,
                               &present));
    if (!present)
        hp->n_head_kv = hp->n_head;
    uint32_t def_dh = hp->n_head ? hp->n_embd / hp->n_head : 0;
    uint32_t dk, dv;
    MEMRA_TRY(hp_u32(r, "attention.key_length", 0, def_dh, &dk));
    MEMRA_TRY(hp_u32(r, "attention.value_length", 0, def_dh, &dv));
    if (dk != dv) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s.attention.key_length (%u) != %s.attention.value_length (%u)", r->arch,
                        dk, r->arch, dv);
        goto fail;
    }
    hp->head_dim = dk;
    MEMRA_TRY(hp_u32(r, "rope.dimension_count", 0, hp->head_dim, &hp->n_rot));
    MEMRA_TRY(hp_f32(r, "rope.freq_base", 0, 10000.0f, &hp->freq_base));
    MEMRA_TRY(hp_rope_scaling(r, hp));
    MEMRA_TRY(hp_rope_sections(r, hp));
    /* Bounded even without attention layers: every consumer may size buffers from them. */
    const int no_attn = hp->n_attn_layers == 0;
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "attention.head_count"), hp->n_head, no_attn));
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "attention.head_count_kv"), hp->n_head_kv, no_attn));
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "attention.key_length"), hp->head_dim, no_attn));
    MEMRA_TRY(
        hp_check_dim(r, "2 * head_count * key_length", 2ull * hp->n_head * hp->head_dim, no_attn));
    MEMRA_TRY(hp_check_dim(r, "head_count_kv * key_length", (uint64_t)hp->n_head_kv * hp->head_dim,
                           no_attn));
    if (no_attn)
        return MEMRA_OK;

    if (hp->n_head % hp->n_head_kv != 0) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s.attention.head_count (%u) is not a multiple of head_count_kv (%u)",
                        r->arch, hp->n_head, hp->n_head_kv);
        goto fail;
    }
    if (hp->n_rot == 0 || hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s.rope.dimension_count = %u must be even and in 2..key_length (%u)",
                        r->arch, hp->n_rot, hp->head_dim);
        goto fail;
    }
    if (!(hp->freq_base > 0)) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "%s.rope.freq_base = %g must be > 0", r->arch,
                        (double)hp->freq_base);
        goto fail;
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* Gated delta net geometry (spec §0, pitfall 13: dv = Cv / Hv must equal dk). */
static int hp_ssm(hp_reader *r, memra_qwen35_hparams *hp)
{
    int rc;
    MEMRA_TRY(hp_u32(r, "ssm.conv_kernel", 1, 0, &hp->ssm_conv_kernel));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->ssm_conv_kernel, 0));
    MEMRA_TRY(hp_u32(r, "ssm.inner_size", 1, 0, &hp->ssm_inner_size));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->ssm_inner_size, 0));
    MEMRA_TRY(hp_u32(r, "ssm.state_size", 1, 0, &hp->ssm_state_size));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->ssm_state_size, 0));
    MEMRA_TRY(hp_u32(r, "ssm.time_step_rank", 1, 0, &hp->ssm_n_v_heads));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->ssm_n_v_heads, 0));
    MEMRA_TRY(hp_u32(r, "ssm.group_count", 1, 0, &hp->ssm_n_k_heads));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->ssm_n_k_heads, 0));

    if (hp->ssm_inner_size % hp->ssm_n_v_heads != 0) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s.ssm.inner_size (%u) is not a multiple of ssm.time_step_rank (%u)",
                        r->arch, hp->ssm_inner_size, hp->ssm_n_v_heads);
        goto fail;
    }
    hp->ssm_head_v_dim = hp->ssm_inner_size / hp->ssm_n_v_heads;
    if (hp->ssm_head_v_dim != hp->ssm_state_size) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s: value head dim ssm.inner_size / ssm.time_step_rank = %u must equal "
                        "ssm.state_size = %u",
                        r->arch, hp->ssm_head_v_dim, hp->ssm_state_size);
        goto fail;
    }
    /* The tiled head mapping a = h mod Hk (spec §3.4 step 8) comes from a repeat of the key
     * heads, which needs Hv to be a whole multiple of Hk. */
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads != 0) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT,
                        "%s.ssm.time_step_rank (%u) is not a multiple of ssm.group_count (%u)",
                        r->arch, hp->ssm_n_v_heads, hp->ssm_n_k_heads);
        goto fail;
    }
    uint64_t cc = 2ull * hp->ssm_n_k_heads * hp->ssm_state_size + hp->ssm_inner_size;
    MEMRA_TRY(hp_check_dim(r,
                           "conv channels 2 * ssm.group_count * ssm.state_size + "
                           "ssm.inner_size",
                           cc, 0));
    hp->ssm_conv_channels = (uint32_t)cc;
    return MEMRA_OK;
fail:
    return rc;
}

/* FFN widths: dense F, or the expert counts and widths (spec §1, pitfall 15). */
static int hp_ffn(hp_reader *r, memra_qwen35_hparams *hp)
{
    int rc, present;
    hp->n_ff = 0;
    MEMRA_TRY(hp_u32_per_layer(r, "feed_forward_length", hp->n_layer, NULL, &hp->n_ff, &present));
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "feed_forward_length"), hp->n_ff, 1));
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = hp->n_ff_shexp = 0;
    if (hp->arch == MEMRA_QWEN35_ARCH_DENSE) {
        if (hp->n_ff == 0) {
            rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s is 0 or missing (dense FFN width)",
                            hp_key(r, "feed_forward_length"));
            goto fail;
        }
        return MEMRA_OK;
    }
    MEMRA_TRY(hp_u32(r, "expert_count", 0, 0, &hp->n_expert));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->n_expert, 0));
    MEMRA_TRY(hp_u32(r, "expert_used_count", 0, 0, &hp->n_expert_used));
    if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_FORMAT, "key %s = %u must be in 1..expert_count (%u)",
                        r->key, hp->n_expert_used, hp->n_expert);
        goto fail;
    }
    MEMRA_TRY(
        hp_u32(r, "expert_feed_forward_length", 0, hp->n_ff / hp->n_expert_used, &hp->n_ff_exp));
    MEMRA_TRY(hp_check_dim(r, hp_key(r, "expert_feed_forward_length"), hp->n_ff_exp, 0));
    MEMRA_TRY(hp_check_dim(r, "2 * expert_feed_forward_length", 2ull * hp->n_ff_exp, 0));
    /* Fs may be 0: the layer then has no shared expert (and must carry no *_shexp tensor). */
    MEMRA_TRY(hp_u32(r, "expert_shared_feed_forward_length", 0, hp->n_ff, &hp->n_ff_shexp));
    MEMRA_TRY(hp_check_dim(r, r->key, hp->n_ff_shexp, 1));
    return MEMRA_OK;
fail:
    return rc;
}

int memra_qwen35_hparams_load(const memra_gguf *g, memra_qwen35_hparams *hp, memra_err *err)
{
    int rc;
    memset(hp, 0, sizeof *hp);
    MEMRA_TRY(hp_arch(g, hp, err));
    hp_reader r = {.g = g, .arch = hp->arch_name, .err = err};
    MEMRA_TRY(hp_core(&r, hp));
    MEMRA_TRY(hp_attention(&r, hp));
    MEMRA_TRY(hp_ssm(&r, hp));
    MEMRA_TRY(hp_ffn(&r, hp));

    /* V comes from the embedding table (spec §0), not from vocab_size. */
    const memra_gguf_tensor *te = memra_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "tensor token_embd.weight is missing");
        goto fail;
    }
    if (te->ne[1] <= 0 || te->ne[1] > (int64_t)QWEN35_MAX_DIM) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                        "tensor token_embd.weight: vocab (ne1) = %lld is "
                        "out of range",
                        (long long)te->ne[1]);
        goto fail;
    }
    hp->n_vocab = (uint32_t)te->ne[1];
    return MEMRA_OK;
fail:
    return rc;
}

/* ======================================================================================== */
/* Tensor binding                                                                           */
/* ======================================================================================== */

int memra_qwen35_vector_type_ok(uint32_t type)
{
    return type == MEMRA_QT_F32 || type == MEMRA_QT_F16 || type == MEMRA_QT_BF16;
}

int memra_qwen35_matrix_type_ok(uint32_t type)
{
    return memra_qtype_get(type) != NULL && memra_quant_can_dequantize((memra_qtype)type);
}

typedef struct binder {
    const memra_gguf *g;
    memra_err *err;
    const memra_gguf_tensor **claimed; /* [n_claimed] every tensor bound so far */
    size_t n_claimed, cap;
} binder;

enum { BIND_OPTIONAL = 0, BIND_REQUIRED = 1 };
enum { KIND_VECTOR = 0, KIND_MATRIX = 1 };

static void fmt_shape(char *buf, size_t n, const int64_t *ne, int dims)
{
    size_t o = (size_t)snprintf(buf, n, "{");
    for (int d = 0; d < dims && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)ne[d]);
    if (o < n)
        snprintf(buf + o, n - o, "}");
}

/* Look up `name`, check type kind and shape (dims beyond `dims` must be 1), record it as
 * claimed. Optional tensors that are absent leave *out NULL. */
static int bind_one(binder *b, const char *name, int required, int kind, int dims,
                    const int64_t *want, const memra_gguf_tensor **out)
{
    *out = NULL;
    const memra_gguf_tensor *t = memra_gguf_find_tensor(b->g, name);
    if (!t) {
        if (required)
            return MEMRA_FAIL(b->err, MEMRA_ERR_NOT_FOUND, "tensor %s is missing", name);
        return MEMRA_OK;
    }
    int ok = kind == KIND_VECTOR ? memra_qwen35_vector_type_ok(t->type)
                                 : memra_qwen35_matrix_type_ok(t->type);
    if (!ok) {
        const memra_qtype_info *qi = memra_qtype_get(t->type);
        return MEMRA_FAIL(b->err, MEMRA_ERR_UNSUPPORTED,
                          "tensor %s: type %s is not supported "
                          "for a %s",
                          name, qi ? qi->name : "?",
                          kind == KIND_VECTOR ? "vector (f32, f16, bf16)" : "matrix");
    }
    for (int d = 0; d < MEMRA_GGUF_MAX_DIMS; d++) {
        int64_t w = d < dims ? want[d] : 1;
        if (t->ne[d] != w) {
            char got_s[96], want_s[96];
            fmt_shape(got_s, sizeof got_s, t->ne, (int)(t->n_dims ? t->n_dims : 1));
            fmt_shape(want_s, sizeof want_s, want, dims);
            return MEMRA_FAIL(b->err, MEMRA_ERR_FORMAT, "tensor %s: shape %s, want %s", name, got_s,
                              want_s);
        }
    }
    if (b->n_claimed == b->cap)
        return MEMRA_FAIL(b->err, MEMRA_ERR_FORMAT, "tensor %s: bound twice or too many tensors",
                          name);
    b->claimed[b->n_claimed++] = t;
    *out = t;
    return MEMRA_OK;
}

static int bind_vec(binder *b, const char *name, int64_t n, const memra_gguf_tensor **out)
{
    const int64_t want[1] = {n};
    return bind_one(b, name, BIND_REQUIRED, KIND_VECTOR, 1, want, out);
}

/*
 * `<base>.weight` {in, out[, n_expert]} and its optional NVFP4 companion {1} or {n_expert}.
 * The companion is named `<base>.scale` in llama.cpp (tn(<tensor>, "scale", il), e.g.
 * blk.0.attn_q.scale); files written as `<base>.weight.scale` are accepted too. Both at once
 * is ambiguous and refused.
 */
static int bind_mat(binder *b, const char *base, int required, int64_t in, int64_t out_rows,
                    int64_t n_expert, memra_qwen35_mat *m)
{
    char name[MEMRA_GGUF_MAX_NAME + 16], alt[MEMRA_GGUF_MAX_NAME + 24];
    int rc;
    m->w = m->scale = NULL;
    const int64_t want[3] = {in, out_rows, n_expert};
    snprintf(name, sizeof name, "%s.weight", base);
    MEMRA_TRY(bind_one(b, name, required, KIND_MATRIX, n_expert ? 3 : 2, want, &m->w));
    if (!m->w)
        return MEMRA_OK; /* a stray companion is then reported as an extra tensor */
    const int64_t want_s[1] = {n_expert ? n_expert : 1};
    const memra_gguf_tensor *alt_t = NULL;
    snprintf(name, sizeof name, "%s.scale", base);
    snprintf(alt, sizeof alt, "%s.weight.scale", base);
    MEMRA_TRY(bind_one(b, name, BIND_OPTIONAL, KIND_VECTOR, 1, want_s, &m->scale));
    MEMRA_TRY(bind_one(b, alt, BIND_OPTIONAL, KIND_VECTOR, 1, want_s, &alt_t));
    if (m->scale && alt_t) {
        rc = MEMRA_FAIL(b->err, MEMRA_ERR_FORMAT, "tensors %s and %s: two scales for one matrix",
                        name, alt);
        goto fail;
    }
    if (alt_t)
        m->scale = alt_t;
    return MEMRA_OK;
fail:
    return rc;
}

/* "blk.<l>.<suffix>" into buf (names are < 64 bytes, spec gguf §1.5; buf has headroom). */
static const char *lname(char *buf, size_t n, uint32_t l, const char *suffix)
{
    snprintf(buf, n, "blk.%u.%s", l, suffix);
    return buf;
}
#define LN(suffix) lname(n, sizeof n, l, (suffix))

static int bind_attention(binder *b, const memra_qwen35_hparams *hp, uint32_t l,
                          memra_qwen35_layer *ly)
{
    char n[MEMRA_GGUF_MAX_NAME + 16];
    int rc;
    const int64_t D = hp->n_embd, dh = hp->head_dim;
    const int64_t q_out = 2 * (int64_t)hp->n_head * dh, kv_out = (int64_t)hp->n_head_kv * dh;
    MEMRA_TRY(bind_mat(b, LN("attn_q"), BIND_REQUIRED, D, q_out, 0, &ly->attn_q));
    MEMRA_TRY(bind_mat(b, LN("attn_k"), BIND_REQUIRED, D, kv_out, 0, &ly->attn_k));
    MEMRA_TRY(bind_mat(b, LN("attn_v"), BIND_REQUIRED, D, kv_out, 0, &ly->attn_v));
    MEMRA_TRY(bind_mat(b, LN("attn_output"), BIND_REQUIRED, (int64_t)hp->n_head * dh, D, 0,
                       &ly->attn_output));
    MEMRA_TRY(bind_vec(b, LN("attn_q_norm.weight"), dh, &ly->attn_q_norm));
    MEMRA_TRY(bind_vec(b, LN("attn_k_norm.weight"), dh, &ly->attn_k_norm));
    return MEMRA_OK;
fail:
    return rc;
}

static int bind_gdn(binder *b, const memra_qwen35_hparams *hp, uint32_t l, memra_qwen35_layer *ly)
{
    char n[MEMRA_GGUF_MAX_NAME + 16];
    int rc;
    const int64_t D = hp->n_embd, Cc = hp->ssm_conv_channels, Cv = hp->ssm_inner_size;
    const int64_t Hv = hp->ssm_n_v_heads;
    MEMRA_TRY(bind_mat(b, LN("attn_qkv"), BIND_REQUIRED, D, Cc, 0, &ly->attn_qkv));
    MEMRA_TRY(bind_mat(b, LN("attn_gate"), BIND_REQUIRED, D, Cv, 0, &ly->attn_gate));
    MEMRA_TRY(bind_mat(b, LN("ssm_beta"), BIND_REQUIRED, D, Hv, 0, &ly->ssm_beta));
    MEMRA_TRY(bind_mat(b, LN("ssm_alpha"), BIND_REQUIRED, D, Hv, 0, &ly->ssm_alpha));
    MEMRA_TRY(bind_mat(b, LN("ssm_out"), BIND_REQUIRED, Cv, D, 0, &ly->ssm_out));
    const int64_t conv_shape[2] = {hp->ssm_conv_kernel, Cc};
    MEMRA_TRY(bind_one(b, LN("ssm_conv1d.weight"), BIND_REQUIRED, KIND_VECTOR, 2, conv_shape,
                       &ly->ssm_conv1d));
    /* pitfall 16: ssm_dt carries `.bias`, ssm_a has no suffix */
    MEMRA_TRY(bind_vec(b, LN("ssm_dt.bias"), Hv, &ly->ssm_dt_bias));
    MEMRA_TRY(bind_vec(b, LN("ssm_a"), Hv, &ly->ssm_a));
    MEMRA_TRY(bind_vec(b, LN("ssm_norm.weight"), hp->ssm_head_v_dim, &ly->ssm_norm));
    return MEMRA_OK;
fail:
    return rc;
}

static int bind_dense_ffn(binder *b, const memra_qwen35_hparams *hp, uint32_t l,
                          memra_qwen35_layer *ly)
{
    char n[MEMRA_GGUF_MAX_NAME + 16];
    int rc;
    const int64_t D = hp->n_embd, F = hp->n_ff;
    MEMRA_TRY(bind_mat(b, LN("ffn_gate"), BIND_REQUIRED, D, F, 0, &ly->ffn_gate));
    MEMRA_TRY(bind_mat(b, LN("ffn_up"), BIND_REQUIRED, D, F, 0, &ly->ffn_up));
    MEMRA_TRY(bind_mat(b, LN("ffn_down"), BIND_REQUIRED, F, D, 0, &ly->ffn_down));
    return MEMRA_OK;
fail:
    return rc;
}

static int bind_moe_ffn(binder *b, const memra_qwen35_hparams *hp, uint32_t l,
                        memra_qwen35_layer *ly)
{
    char n[MEMRA_GGUF_MAX_NAME + 16];
    int rc;
    const int64_t D = hp->n_embd, E = hp->n_expert, Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    MEMRA_TRY(bind_mat(b, LN("ffn_gate_inp"), BIND_REQUIRED, D, E, 0, &ly->ffn_gate_inp));
    /* Either the fused gate+up tensor or both halves (spec §2, pitfall 15). */
    MEMRA_TRY(
        bind_mat(b, LN("ffn_gate_up_exps"), BIND_OPTIONAL, D, 2 * Fe, E, &ly->ffn_gate_up_exps));
    if (!ly->ffn_gate_up_exps.w) {
        MEMRA_TRY(bind_mat(b, LN("ffn_gate_exps"), BIND_REQUIRED, D, Fe, E, &ly->ffn_gate_exps));
        MEMRA_TRY(bind_mat(b, LN("ffn_up_exps"), BIND_REQUIRED, D, Fe, E, &ly->ffn_up_exps));
    }
    MEMRA_TRY(bind_mat(b, LN("ffn_down_exps"), BIND_REQUIRED, Fe, D, E, &ly->ffn_down_exps));
    if (Fs == 0)
        return MEMRA_OK; /* no shared expert: any *_shexp tensor is reported as extra */
    MEMRA_TRY(
        bind_mat(b, LN("ffn_gate_inp_shexp"), BIND_REQUIRED, D, 1, 0, &ly->ffn_gate_inp_shexp));
    MEMRA_TRY(bind_mat(b, LN("ffn_gate_shexp"), BIND_REQUIRED, D, Fs, 0, &ly->ffn_gate_shexp));
    MEMRA_TRY(bind_mat(b, LN("ffn_up_shexp"), BIND_REQUIRED, D, Fs, 0, &ly->ffn_up_shexp));
    MEMRA_TRY(bind_mat(b, LN("ffn_down_shexp"), BIND_REQUIRED, Fs, D, 0, &ly->ffn_down_shexp));
    return MEMRA_OK;
fail:
    return rc;
}

static int bind_layer(binder *b, const memra_qwen35_hparams *hp, uint32_t l, memra_qwen35_layer *ly)
{
    char n[MEMRA_GGUF_MAX_NAME + 16];
    int rc;
    MEMRA_TRY(bind_vec(b, LN("attn_norm.weight"), hp->n_embd, &ly->attn_norm));
    MEMRA_TRY(bind_vec(b, LN("post_attention_norm.weight"), hp->n_embd, &ly->post_attention_norm));
    if (hp->is_recurrent[l])
        MEMRA_TRY(bind_gdn(b, hp, l, ly));
    else
        MEMRA_TRY(bind_attention(b, hp, l, ly));
    if (hp->arch == MEMRA_QWEN35_ARCH_MOE)
        MEMRA_TRY(bind_moe_ffn(b, hp, l, ly));
    else
        MEMRA_TRY(bind_dense_ffn(b, hp, l, ly));
    return MEMRA_OK;
fail:
    return rc;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

/* The reference loader refuses files with tensors it did not create (spec §1, MTP note). */
static int check_no_extra(binder *b, const char *arch)
{
    qsort(b->claimed, b->n_claimed, sizeof *b->claimed, cmp_ptr);
    int64_t n = memra_gguf_n_tensors(b->g);
    for (int64_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(b->g, i);
        if (!bsearch(&t, b->claimed, b->n_claimed, sizeof *b->claimed, cmp_ptr))
            return MEMRA_FAIL(b->err, MEMRA_ERR_FORMAT,
                              "tensor %s is not part of a %s model with these hyperparameters",
                              t->name, arch);
    }
    return MEMRA_OK;
}

int memra_qwen35_bind(const memra_gguf *g, const memra_qwen35_hparams *hp, memra_qwen35_weights *w,
                      memra_err *err)
{
    int rc;
    memset(w, 0, sizeof *w);
    binder b = {.g = g, .err = err};
    b.cap = (size_t)memra_gguf_n_tensors(g);
    b.claimed = calloc(b.cap ? b.cap : 1, sizeof *b.claimed);
    if (!b.claimed) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tensor binding: out of memory");
        goto fail;
    }
    const int64_t D = hp->n_embd, V = hp->n_vocab;
    MEMRA_TRY(bind_mat(&b, "token_embd", BIND_REQUIRED, D, V, 0, &w->token_embd));
    MEMRA_TRY(bind_vec(&b, "output_norm.weight", D, &w->output_norm));
    MEMRA_TRY(bind_mat(&b, "output", BIND_OPTIONAL, D, V, 0, &w->output));
    if (!w->output.w) { /* pitfall 14: tied embeddings */
        w->output = w->token_embd;
        w->output_tied = 1;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++)
        MEMRA_TRY(bind_layer(&b, hp, l, &w->layers[l]));
    MEMRA_TRY(check_no_extra(&b, hp->arch_name));
    free(b.claimed);
    return MEMRA_OK;
fail:
    free(b.claimed);
    memset(w, 0, sizeof *w);
    return rc;
}
