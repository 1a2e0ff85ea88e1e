/*
 * plan.c — plan and manifest loader and validator (format: docs/plan-format.md).
 *
 * Reads JSON with jansson and turns it into a memra_plan in which every reference is
 * resolved (plan.h). Every rule of plan.h's invariant list is checked here, and only here;
 * the planner validates what it writes with the same memra_plan_parse(), so a plan the
 * planner emits and a plan the runtime accepts cannot disagree.
 *
 * Must not: trust any number in the file (sizes, offsets, counts are checked for overflow
 * before use), allocate in proportion to a claimed size (only to JSON elements present),
 * or keep a pointer into the JSON after returning.
 *
 * Sections: model hash, name index, small JSON helpers, manifest, plan header, buffers /
 * weights / state, launches (args, kernel keys), liveness and aliasing, stats, entry points.
 */
#include "plan.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Caps that keep a hostile file from making the validator quadratic in something huge. */
#define MAX_BUFFERS 65536
#define MAX_LAUNCHES 65536
#define MAX_ENTRIES 1000000

/* ==================================== model hash ==================================== */

static void h_u64(XXH3_state_t *st, uint64_t v) { XXH3_64bits_update(st, &v, sizeof v); }

static void h_bytes(XXH3_state_t *st, const void *p, uint64_t n)
{
    h_u64(st, n);
    if (n)
        XXH3_64bits_update(st, p, (size_t)n);
}

static uint64_t vtype_size(uint32_t t)
{
    static const uint8_t sz[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < MEMRA_GGUF_VTYPE_COUNT ? sz[t] : 0;
}

static void hash_kv(XXH3_state_t *st, const memra_gguf *g, int64_t i)
{
    memra_gguf_str key = memra_gguf_kv_key(g, i);
    uint32_t t = memra_gguf_kv_type(g, i);
    h_bytes(st, key.ptr, key.len);
    h_u64(st, t);
    if (t == MEMRA_GGUF_STRING) {
        memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
        h_bytes(st, s.ptr, s.len);
    } else if (t == MEMRA_GGUF_ARRAY) {
        uint32_t at = memra_gguf_kv_arr_type(g, i);
        uint64_t n = memra_gguf_kv_arr_len(g, i);
        h_u64(st, at);
        h_u64(st, n);
        if (at == MEMRA_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                memra_gguf_str s = memra_gguf_kv_str(g, i, j);
                h_bytes(st, s.ptr, s.len);
            }
        } else {
            h_bytes(st, memra_gguf_kv_data(g, i), n * vtype_size(at));
        }
    } else {
        h_bytes(st, memra_gguf_kv_data(g, i), vtype_size(t));
    }
}

uint64_t memra_plan_model_hash(const memra_gguf *g)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st || !g) {
        XXH3_freeState(st);
        return 0;
    }
    XXH3_64bits_reset(st);
    int64_t n_kv = memra_gguf_n_kv(g), n_t = memra_gguf_n_tensors(g);
    h_u64(st, (uint64_t)n_kv);
    for (int64_t i = 0; i < n_kv; i++)
        hash_kv(st, g, i);
    h_u64(st, (uint64_t)n_t);
    for (int64_t i = 0; i < n_t; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        h_bytes(st, t->name, strlen(t->name));
        h_u64(st, t->type);
        h_u64(st, t->n_dims);
        for (int d = 0; d < MEMRA_GGUF_MAX_DIMS; d++)
            h_u64(st, (uint64_t)t->ne[d]);
        h_u64(st, t->offset);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* ==================================== name index ==================================== */
/* Sorted (name, index) pairs: O(log n) lookups and duplicate detection. */

typedef struct name_ref {
    const char *name;
    uint32_t idx;
} name_ref;

typedef struct name_index {
    name_ref *v;
    uint32_t n;
} name_index;

static int name_ref_cmp(const void *a, const void *b)
{
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* names[i * stride]: builds the index; returns the first duplicate's index or -1. */
static int64_t name_index_build(name_index *ix, const char *names, size_t stride, uint32_t n)
{
    ix->n = n;
    ix->v = calloc(n ? n : 1, sizeof *ix->v);
    if (!ix->v)
        return -2;
    for (uint32_t i = 0; i < n; i++)
        ix->v[i] = (name_ref){names + (size_t)i * stride, i};
    qsort(ix->v, n, sizeof *ix->v, name_ref_cmp);
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(ix->v[i - 1].name, ix->v[i].name) == 0)
            return ix->v[i].idx;
    return -1;
}

static int64_t name_index_find(const name_index *ix, const char *name)
{
    name_ref key = {name, 0};
    const name_ref *r = bsearch(&key, ix->v, ix->n, sizeof *ix->v, name_ref_cmp);
    return r ? (int64_t)r->idx : -1;
}

/* ================================= small JSON helpers ================================= */

/* Every object in a plan has a closed key set: an unknown key is an error, so a typo in a
 * hand-edited plan cannot be silently ignored. */
static int check_keys(json_t *obj, const char *const *allowed, const char *where, memra_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, k) == 0;
        if (!ok)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: unknown key '%s'", where, k);
    }
    return MEMRA_OK;
}

static int get_u64(json_t *obj, const char *key, uint64_t max, uint64_t *out, const char *where,
                   memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) > max)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: '%s' must be an integer in [0, %" PRIu64 "]",
                          where, key, max);
    *out = (uint64_t)json_integer_value(v);
    return MEMRA_OK;
}

static int get_u32(json_t *obj, const char *key, uint32_t max, uint32_t *out, const char *where,
                   memra_err *err)
{
    uint64_t v = 0;
    int rc = get_u64(obj, key, max, &v, where, err);
    *out = (uint32_t)v;
    return rc;
}

static int get_str(json_t *obj, const char *key, char *buf, size_t n, const char *where,
                   memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= n ||
        strlen(json_string_value(v)) != json_string_length(v))
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: '%s' must be a string of 1..%zu bytes", where,
                          key, n - 1);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return MEMRA_OK;
}

static int get_hash(json_t *obj, const char *key, uint64_t *out, const char *where, memra_err *err)
{
    char buf[24], *end = NULL;
    int rc = get_str(obj, key, buf, sizeof buf, where, err);
    if (rc)
        return rc;
    if (strlen(buf) != 16 || strspn(buf, "0123456789abcdef") != 16)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: '%s' must be 16 lowercase hex digits", where,
                          key);
    *out = strtoull(buf, &end, 16);
    return MEMRA_OK;
}

static int get_array(json_t *obj, const char *key, size_t max, json_t **out, const char *where,
                     memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_array(v) || json_array_size(v) > max)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: '%s' must be an array of at most %zu entries",
                          where, key, max);
    *out = v;
    return MEMRA_OK;
}

static int check_format(json_t *root, const char *format, uint32_t *version, memra_err *err)
{
    json_t *f = json_object_get(root, "format");
    if (!json_is_object(root) || !json_is_string(f) || strcmp(json_string_value(f), format) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "not a %s document ('format' key)", format);
    json_t *v = json_object_get(root, "version");
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s: 'version' must be a positive integer", format);
    if (json_integer_value(v) > MEMRA_PLAN_VERSION)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "%s version %lld is newer than this runtime (%d)",
                          format, (long long)json_integer_value(v), MEMRA_PLAN_VERSION);
    *version = (uint32_t)json_integer_value(v);
    return MEMRA_OK;
}

static int load_json(const char *text, size_t len, json_t **out, memra_err *err)
{
    json_error_t je;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "JSON error at line %d column %d: %s", je.line,
                          je.column, je.text);
    return MEMRA_OK;
}

static int read_file(const char *path, char **buf, size_t *len, memra_err *err)
{
    int rc = MEMRA_OK;
    FILE *f = fopen(path, "rb");
    *buf = NULL;
    if (!f)
        return MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "cannot open %s", path);
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO, "cannot size %s", path);
        goto fail;
    }
    *len = (size_t)ftell(f);
    rewind(f);
    *buf = malloc(*len + 1);
    if (!*buf) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: %zu bytes", path, *len);
        goto fail;
    }
    if (fread(*buf, 1, *len, f) != *len) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO, "short read on %s", path);
        goto fail;
    }
    (*buf)[*len] = '\0';
    fclose(f);
    return MEMRA_OK;
fail:
    fclose(f);
    free(*buf);
    *buf = NULL;
    return rc;
}

/* Put the file name in front of a message that does not name it yet. */
static void prefix_err(memra_err *err, int rc, const char *path)
{
    char tmp[sizeof err->msg];
    if (!err || err->code != rc || strstr(err->msg, path))
        return;
    snprintf(tmp, sizeof tmp, "%.200s: %.300s", path, err->msg);
    memcpy(err->msg, tmp, sizeof tmp);
}

/* Sorted, unique list of kernel keys. */
static int parse_kernels(json_t *root, uint32_t *n_out, char (**out)[MEMRA_KERNEL_KEY_MAX],
                         const char *where, memra_err *err)
{
    json_t *arr;
    int rc = get_array(root, "kernels", 4096, &arr, where, err);
    if (rc)
        return rc;
    size_t n = json_array_size(arr);
    *out = calloc(n ? n : 1, MEMRA_KERNEL_KEY_MAX);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "kernels");
    *n_out = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            json_string_length(s) >= MEMRA_KERNEL_KEY_MAX ||
            strlen(json_string_value(s)) != json_string_length(s))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: kernels[%zu] must be a short string", where,
                              i);
        memcpy((*out)[i], json_string_value(s), json_string_length(s) + 1);
        if (i > 0 && strcmp((*out)[i - 1], (*out)[i]) >= 0)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: kernels must be sorted and unique at [%zu]",
                              where, i);
    }
    return MEMRA_OK;
}

/* ===================================== manifest ===================================== */

static int manifest_stages(json_t *root, memra_plan_manifest *m, memra_err *err)
{
    json_t *arr;
    int rc = get_array(root, "stages", MEMRA_PLAN_MAX_STAGES, &arr, "manifest", err);
    if (rc)
        return rc;
    m->n_stages = (uint32_t)json_array_size(arr);
    if (m->n_stages == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: no stages");
    uint32_t next = 0;
    for (uint32_t s = 0; s < m->n_stages; s++) {
        json_t *p = json_array_get(arr, s);
        json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(a) ||
            !json_is_integer(b) || json_integer_value(a) != next ||
            json_integer_value(b) <= json_integer_value(a) ||
            json_integer_value(b) > m->n_layer)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                              "manifest: stages[%u] must be [begin, end) continuing at layer %u "
                              "within %u layers",
                              s, next, m->n_layer);
        m->stage_layers[s][0] = next;
        m->stage_layers[s][1] = next = (uint32_t)json_integer_value(b);
    }
    if (next != m->n_layer)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: stages cover %u of %u layers", next,
                          m->n_layer);
    return MEMRA_OK;
}

static int manifest_tiers(json_t *root, memra_plan_manifest *m, memra_err *err)
{
    json_t *arr;
    int rc = get_array(root, "tiers", MEMRA_PLAN_MAX_TIERS, &arr, "manifest", err);
    if (rc)
        return rc;
    m->n_tiers = (uint32_t)json_array_size(arr);
    if (m->n_tiers == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: no tiers");
    for (uint32_t i = 0; i < m->n_tiers; i++) {
        json_t *t = json_array_get(arr, i);
        json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 1 || v > MEMRA_PLAN_MAX_B || (i > 0 && (uint32_t)v <= m->tiers[i - 1]))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                              "manifest: tiers[%u] must increase within 1..%d", i, MEMRA_PLAN_MAX_B);
        m->tiers[i] = (uint32_t)v;
    }
    return MEMRA_OK;
}

/* The plans list must name exactly one canonical file per (tier, stage). */
static int manifest_plans(json_t *root, const memra_plan_manifest *m, memra_err *err)
{
    static const char *const keys[] = {"tier", "stage", "file", "launches", "arena_bytes", NULL};
    json_t *arr;
    int rc = get_array(root, "plans", MEMRA_PLAN_MAX_TIERS * MEMRA_PLAN_MAX_STAGES, &arr,
                       "manifest", err);
    if (rc)
        return rc;
    if (json_array_size(arr) != (size_t)m->n_tiers * m->n_stages)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: %zu plans for %u tiers x %u stages",
                          json_array_size(arr), m->n_tiers, m->n_stages);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *p = json_array_get(arr, i);
        uint32_t tier, stage;
        char file[64], want[64];
        if (!json_is_object(p))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: plans[%zu] is not an object", i);
        if ((rc = check_keys(p, keys, "manifest plans[]", err)) ||
            (rc = get_u32(p, "tier", MEMRA_PLAN_MAX_B, &tier, "manifest plans[]", err)) ||
            (rc = get_u32(p, "stage", MEMRA_PLAN_MAX_STAGES, &stage, "manifest plans[]", err)) ||
            (rc = get_str(p, "file", file, sizeof file, "manifest plans[]", err)))
            return rc;
        /* plans are listed tier-major, stage-minor */
        uint32_t ti = (uint32_t)(i / m->n_stages), si = (uint32_t)(i % m->n_stages);
        memra_plan_file_name(want, sizeof want, m->tiers[ti], si);
        if (tier != m->tiers[ti] || stage != si || strcmp(file, want) != 0)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: plans[%zu] must be tier %u stage %u "
                              "file %s", i, m->tiers[ti], si, want);
    }
    return MEMRA_OK;
}

static int manifest_parse(json_t *root, memra_plan_manifest *m, memra_err *err)
{
    static const char *const keys[] = {"format", "version", "arch", "model_hash", "catalog_hash",
                                       "tiers", "stages", "n_layer", "n_embd", "n_vocab", "kv",
                                       "kernels", "plans", "stats", NULL};
    const char *w = "manifest";
    char kv[16];
    int rc;
    if ((rc = check_format(root, "memra-manifest", &m->version, err)) ||
        (rc = check_keys(root, keys, w, err)) ||
        (rc = get_str(root, "arch", m->arch, sizeof m->arch, w, err)) ||
        (rc = get_hash(root, "model_hash", &m->model_hash, w, err)) ||
        (rc = get_hash(root, "catalog_hash", &m->catalog_hash, w, err)) ||
        (rc = get_u32(root, "n_layer", 1u << 20, &m->n_layer, w, err)) ||
        (rc = get_u32(root, "n_embd", 1u << 20, &m->n_embd, w, err)) ||
        (rc = get_u32(root, "n_vocab", 1u << 24, &m->n_vocab, w, err)) ||
        (rc = get_str(root, "kv", kv, sizeof kv, w, err)) || (rc = manifest_tiers(root, m, err)) ||
        (rc = manifest_stages(root, m, err)) || (rc = manifest_plans(root, m, err)) ||
        (rc = parse_kernels(root, &m->n_kernels, &m->kernels, w, err)))
        return rc;
    int dt = memra_dtype_from_name(kv);
    if (dt != MEMRA_DT_F16 && dt != MEMRA_DT_Q8_0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "manifest: kv '%s' must be f16 or q8_0", kv);
    m->kv_dtype = (uint32_t)dt;
    if (m->catalog_hash != memra_ops_catalog_hash())
        return MEMRA_FAIL(err, MEMRA_ERR_STALE_PLAN,
                          "manifest: plans were built against another op catalog "
                          "(%016" PRIx64 ", runtime has %016" PRIx64 "): re-run memra-plan",
                          m->catalog_hash, memra_ops_catalog_hash());
    return MEMRA_OK;
}

int memra_plan_manifest_parse(const char *text, size_t len, memra_plan_manifest **out,
                              memra_err *err)
{
    json_t *root = NULL;
    memra_plan_manifest *m = NULL;
    int rc;
    *out = NULL;
    if (!text)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "manifest text is NULL");
    MEMRA_TRY(load_json(text, len, &root, err));
    m = calloc(1, sizeof *m);
    if (!m) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "manifest");
        goto fail;
    }
    MEMRA_TRY(manifest_parse(root, m, err));
    *out = m;
    m = NULL;
fail:
    memra_plan_manifest_free(m);
    json_decref(root);
    return rc;
}

int memra_plan_manifest_load(const char *dir, memra_plan_manifest **out, memra_err *err)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    int rc;
    *out = NULL;
    if (!dir)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "plan directory is NULL");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    MEMRA_TRY(read_file(path, &text, &len, err));
    MEMRA_TRY(memra_plan_manifest_parse(text, len, out, err));
fail:
    if (rc)
        prefix_err(err, rc, path);
    free(text);
    return rc;
}

void memra_plan_manifest_free(memra_plan_manifest *m)
{
    if (!m)
        return;
    free(m->kernels);
    free(m);
}

int memra_plan_buf_named_outside(const memra_plan *p, uint32_t i, uint32_t buf)
{
    for (uint32_t j = 0; j < p->n_launches; j++) {
        if (j == i || j == i + 1)
            continue;
        const memra_plan_launch *l = &p->launches[j];
        for (uint32_t k = 0; k < l->n_args; k++)
            if (l->args[k].kind == MEMRA_ARG_BUF && l->args[k].index == buf)
                return 1;
    }
    return 0;
}

int memra_plan_bufs_overlap(const memra_plan *p, uint32_t a, uint32_t b)
{
    if (a >= p->n_buffers || b >= p->n_buffers)
        return 0;
    const memra_plan_buffer *x = &p->buffers[a], *y = &p->buffers[b];
    return x->bytes && y->bytes && x->offset < y->offset + y->bytes &&
           y->offset < x->offset + x->bytes;
}

uint32_t memra_plan_tier_for(const memra_plan_manifest *m, uint32_t b)
{
    for (uint32_t i = 0; m && i < m->n_tiers; i++)
        if (m->tiers[i] >= b)
            return m->tiers[i];
    return 0;
}

void memra_plan_file_name(char *buf, size_t n, uint32_t tier, uint32_t stage)
{
    snprintf(buf, n, "plan-b%u-s%u.json", tier, stage);
}

/* ============================ plan: the validation context ============================ */

typedef struct pctx {
    memra_plan *p;
    const memra_plan_manifest *m;
    const memra_gguf *g;
    memra_err *err;
    name_index bufs, weights, states;
    int32_t *first_use, *last_use; /* [n_buffers] launch interval, -1 = unused */
    uint8_t *defined;              /* [n_buffers] written so far (walk order) */
    uint8_t *weight_used, *state_used;
    uint8_t *weight_gather;        /* [n_weights] 1 = only ever gathered by embed */
    uint8_t *weight_routed;        /* [n_weights] 1 = expert weight read by ids */
    uint32_t n_embd, n_vocab;
} pctx;

static void pctx_free(pctx *c)
{
    free(c->bufs.v);
    free(c->weights.v);
    free(c->states.v);
    free(c->first_use);
    free(c->last_use);
    free(c->defined);
    free(c->weight_used);
    free(c->state_used);
    free(c->weight_gather);
    free(c->weight_routed);
}

static int plan_header(json_t *root, pctx *c)
{
    static const char *const keys[] = {"format", "version", "arch", "model_hash", "catalog_hash",
                                       "tier", "stage", "n_stages", "layers", "arena_bytes",
                                       "buffers", "weights", "state", "kernels", "launches",
                                       "input", "output", "logits", "stats", NULL};
    memra_plan *p = c->p;
    const char *w = "plan";
    int rc;
    if ((rc = check_format(root, "memra-plan", &p->version, c->err)) ||
        (rc = check_keys(root, keys, w, c->err)) ||
        (rc = get_str(root, "arch", p->arch, sizeof p->arch, w, c->err)) ||
        (rc = get_hash(root, "model_hash", &p->model_hash, w, c->err)) ||
        (rc = get_hash(root, "catalog_hash", &p->catalog_hash, w, c->err)) ||
        (rc = get_u32(root, "tier", MEMRA_PLAN_MAX_B, &p->tier, w, c->err)) ||
        (rc = get_u32(root, "stage", MEMRA_PLAN_MAX_STAGES - 1, &p->stage, w, c->err)) ||
        (rc = get_u32(root, "n_stages", MEMRA_PLAN_MAX_STAGES, &p->n_stages, w, c->err)) ||
        (rc = get_u64(root, "arena_bytes", UINT64_C(1) << 48, &p->arena_bytes, w, c->err)))
        return rc;
    json_t *l = json_object_get(root, "layers");
    json_t *l0 = json_array_get(l, 0), *l1 = json_array_get(l, 1);
    if (!json_is_array(l) || json_array_size(l) != 2 || !json_is_integer(l0) ||
        !json_is_integer(l1) || json_integer_value(l0) < 0 ||
        json_integer_value(l1) < json_integer_value(l0) || json_integer_value(l1) > (1 << 20))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: 'layers' must be [begin, end)");
    p->layer_begin = (uint32_t)json_integer_value(l0);
    p->layer_end = (uint32_t)json_integer_value(l1);
    if (p->tier == 0 || p->n_stages == 0 || p->stage >= p->n_stages)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: tier %u stage %u of %u is impossible",
                          p->tier, p->stage, p->n_stages);
    return MEMRA_OK;
}

/* Hashes and the manifest: the plan must belong to this model, catalog and plan set. */
static int plan_identity(pctx *c)
{
    memra_plan *p = c->p;
    const memra_plan_manifest *m = c->m;
    uint64_t mh = memra_plan_model_hash(c->g);
    if (p->model_hash != mh)
        return MEMRA_FAIL(c->err, MEMRA_ERR_STALE_PLAN,
                          "plan model_hash %016" PRIx64 " does not match the model (%016" PRIx64
                          "): the plans were generated for another checkpoint; re-run memra-plan",
                          p->model_hash, mh);
    if (p->catalog_hash != memra_ops_catalog_hash())
        return MEMRA_FAIL(c->err, MEMRA_ERR_STALE_PLAN,
                          "plan catalog_hash %016" PRIx64 " is not this runtime's op catalog "
                          "(%016" PRIx64 "); re-run memra-plan",
                          p->catalog_hash, memra_ops_catalog_hash());
    if (!m)
        return MEMRA_OK;
    if (m->model_hash != mh)
        return MEMRA_FAIL(c->err, MEMRA_ERR_STALE_PLAN,
                          "manifest model_hash %016" PRIx64 " does not match the model (%016" PRIx64 ")",
                          m->model_hash, mh);
    if (strcmp(m->arch, p->arch) != 0 || p->n_stages != m->n_stages)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                          "plan: arch %s with %u stages, manifest says %s with %u", p->arch,
                          p->n_stages, m->arch, m->n_stages);
    if (memra_plan_tier_for(m, p->tier) != p->tier)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: tier %u is not in the manifest", p->tier);
    if (p->layer_begin != m->stage_layers[p->stage][0] ||
        p->layer_end != m->stage_layers[p->stage][1])
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                          "plan: stage %u covers layers [%u, %u), manifest says [%u, %u)", p->stage,
                          p->layer_begin, p->layer_end, m->stage_layers[p->stage][0],
                          m->stage_layers[p->stage][1]);
    return MEMRA_OK;
}

/* Model numbers the io rules need: n_embd from metadata, n_vocab from token_embd. */
static int plan_model_dims(pctx *c)
{
    char key[64];
    snprintf(key, sizeof key, "%s.embedding_length", c->p->arch);
    int rc = memra_gguf_get_u32(c->g, key, &c->n_embd, c->err);
    if (rc)
        return rc;
    const memra_gguf_tensor *te = memra_gguf_find_tensor(c->g, "token_embd.weight");
    if (!te)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "model has no token_embd.weight");
    c->n_vocab = (uint32_t)te->ne[1];
    return MEMRA_OK;
}

/* ================================ buffers, weights, state ================================ */

static int parse_buffer(json_t *o, memra_plan_buffer *b, uint32_t i, pctx *c)
{
    static const char *const keys[] = {"name", "offset", "bytes", "dtype", NULL};
    char where[64], dt[16];
    int rc;
    snprintf(where, sizeof where, "buffers[%u]", i);
    if (!json_is_object(o))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s is not an object", where);
    if ((rc = check_keys(o, keys, where, c->err)) ||
        (rc = get_str(o, "name", b->name, sizeof b->name, where, c->err)) ||
        (rc = get_u64(o, "offset", UINT64_C(1) << 48, &b->offset, where, c->err)) ||
        (rc = get_u64(o, "bytes", UINT64_C(1) << 48, &b->bytes, where, c->err)) ||
        (rc = get_str(o, "dtype", dt, sizeof dt, where, c->err)))
        return rc;
    int d = memra_dtype_from_name(dt);
    if (d < 0 || d == MEMRA_DT_Q8_0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s (%s): dtype '%s' is not a buffer dtype", where,
                          b->name, dt);
    b->dtype = (uint32_t)d;
    if (b->offset % MEMRA_PLAN_ALIGN != 0 || b->bytes == 0 ||
        b->offset + b->bytes > c->p->arena_bytes)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                          "%s (%s): [%" PRIu64 ", +%" PRIu64 ") is not a nonempty, %d-aligned range "
                          "inside the arena of %" PRIu64 " bytes",
                          where, b->name, b->offset, b->bytes, MEMRA_PLAN_ALIGN, c->p->arena_bytes);
    return MEMRA_OK;
}

static int plan_buffers(json_t *root, pctx *c)
{
    memra_plan *p = c->p;
    json_t *arr;
    int rc = get_array(root, "buffers", MAX_BUFFERS, &arr, "plan", c->err);
    if (rc)
        return rc;
    p->n_buffers = (uint32_t)json_array_size(arr);
    p->buffers = calloc(p->n_buffers + 1, sizeof *p->buffers);
    c->first_use = malloc((p->n_buffers + 1) * sizeof *c->first_use);
    c->last_use = malloc((p->n_buffers + 1) * sizeof *c->last_use);
    c->defined = calloc(p->n_buffers + 1, 1);
    if (!p->buffers || !c->first_use || !c->last_use || !c->defined)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "buffers");
    for (uint32_t i = 0; i < p->n_buffers; i++) {
        c->first_use[i] = c->last_use[i] = -1;
        if ((rc = parse_buffer(json_array_get(arr, i), &p->buffers[i], i, c)))
            return rc;
    }
    int64_t dup = name_index_build(&c->bufs, p->buffers[0].name, sizeof p->buffers[0],
                                   p->n_buffers);
    if (dup == -2)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "buffer index");
    if (dup >= 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "buffers[%" PRId64 "]: duplicate name '%s'", dup,
                          p->buffers[dup].name);
    return MEMRA_OK;
}

/* blk.N.* tensors belong to layer N; others are global (embedding, final norm, lm head). */
static int weight_layer(const char *name, int64_t *layer)
{
    if (strncmp(name, "blk.", 4) != 0)
        return 0;
    char *end = NULL;
    *layer = strtoll(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? 1 : -1;
}

static int check_weight_stage(const char *name, uint32_t i, pctx *c)
{
    const memra_plan *p = c->p;
    int64_t layer = -1;
    int r = weight_layer(name, &layer);
    if (r == 1 && (layer < p->layer_begin || layer >= p->layer_end))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                          "weights[%u] (%s): layer %" PRId64 " is outside stage %u's layers [%u, %u)",
                          i, name, layer, p->stage, p->layer_begin, p->layer_end);
    if (r == 0 && p->stage != 0 && p->stage + 1 != p->n_stages)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                          "weights[%u] (%s): a global tensor in middle stage %u", i, name, p->stage);
    return MEMRA_OK;
}

static int plan_weights(json_t *root, pctx *c)
{
    memra_plan *p = c->p;
    json_t *arr;
    int rc = get_array(root, "weights", MAX_ENTRIES, &arr, "plan", c->err);
    if (rc)
        return rc;
    p->n_weights = (uint32_t)json_array_size(arr);
    p->weights = calloc(p->n_weights + 1, sizeof *p->weights);
    c->weight_used = calloc(p->n_weights + 1, 1);
    c->weight_gather = calloc(p->n_weights + 1, 1);
    c->weight_routed = calloc(p->n_weights + 1, 1);
    if (!p->weights || !c->weight_used || !c->weight_gather || !c->weight_routed)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "weights");
    for (uint32_t i = 0; i < p->n_weights; i++) {
        json_t *s = json_array_get(arr, i);
        memra_plan_weight *w = &p->weights[i];
        if (!json_is_string(s) || json_string_length(s) >= sizeof w->name)
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "weights[%u] must be a tensor name", i);
        memcpy(w->name, json_string_value(s), json_string_length(s) + 1);
        w->tensor = memra_gguf_find_tensor(c->g, w->name);
        if (!w->tensor)
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "weights[%u]: tensor '%s' is not in the model",
                              i, w->name);
        if ((rc = check_weight_stage(w->name, i, c)))
            return rc;
    }
    int64_t dup = name_index_build(&c->weights, p->weights[0].name, sizeof p->weights[0],
                                   p->n_weights);
    if (dup == -2)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "weight index");
    if (dup >= 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "weights[%" PRId64 "]: duplicate '%s'", dup,
                          p->weights[dup].name);
    return MEMRA_OK;
}

static int state_dims(json_t *o, memra_plan_state *s, const char *where, pctx *c)
{
    json_t *d = json_object_get(o, "dims");
    if (!json_is_array(d) || json_array_size(d) < 1 || json_array_size(d) > 4)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: 'dims' must hold 1..4 integers", where);
    s->n_dims = (uint32_t)json_array_size(d);
    int64_t n = 1;
    for (uint32_t i = 0; i < s->n_dims; i++) {
        json_t *v = json_array_get(d, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24))
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: dims[%u] must be in 1..2^24", where, i);
        s->dims[i] = json_integer_value(v);
        n *= s->dims[i]; /* <= 2^96 is impossible: 4 x 24 bits could overflow, so cap below */
        if (n > (INT64_C(1) << 40))
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: region too large", where);
    }
    int ok;
    uint64_t bytes = memra_dtype_bytes(s->dtype, n, &ok);
    if (!ok || (s->dtype == MEMRA_DT_Q8_0 && s->dims[0] % 32 != 0))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: dims do not fit dtype %s", where,
                          memra_dtype_name(s->dtype));
    if (bytes != s->bytes)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: bytes %" PRIu64 " but dims give %" PRIu64,
                          where, s->bytes, bytes);
    return MEMRA_OK;
}

static int parse_state(json_t *o, memra_plan_state *s, uint32_t i, pctx *c)
{
    static const char *const keys[] = {"name", "layer", "kind", "dtype", "dims", "bytes", NULL};
    char where[96], kind[16], dt[16];
    int rc;
    snprintf(where, sizeof where, "state[%u]", i);
    if (!json_is_object(o))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s is not an object", where);
    if ((rc = check_keys(o, keys, where, c->err)) ||
        (rc = get_str(o, "name", s->name, sizeof s->name, where, c->err)) ||
        (rc = get_u32(o, "layer", 1u << 20, &s->layer, where, c->err)) ||
        (rc = get_str(o, "kind", kind, sizeof kind, where, c->err)) ||
        (rc = get_str(o, "dtype", dt, sizeof dt, where, c->err)) ||
        (rc = get_u64(o, "bytes", UINT64_C(1) << 48, &s->bytes, where, c->err)))
        return rc;
    int k = memra_state_kind_from_name(kind), d = memra_dtype_from_name(dt);
    if (k < 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s (%s): unknown kind '%s'", where, s->name, kind);
    s->kind = (uint32_t)k;
    s->per_token = k == MEMRA_SK_KV_K || k == MEMRA_SK_KV_V;
    int want_kv = c->m ? (int)c->m->kv_dtype : -1;
    if (s->per_token ? (d != MEMRA_DT_F16 && d != MEMRA_DT_Q8_0) || (want_kv >= 0 && d != want_kv)
                     : d != MEMRA_DT_F32)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s (%s): dtype '%s' not allowed for %s here",
                          where, s->name, dt, kind);
    s->dtype = (uint32_t)d;
    if (s->layer < c->p->layer_begin || s->layer >= c->p->layer_end)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s (%s): layer %u is outside the stage [%u, %u)",
                          where, s->name, s->layer, c->p->layer_begin, c->p->layer_end);
    snprintf(where, sizeof where, "state[%u] (%s)", i, s->name);
    return state_dims(o, s, where, c);
}

static int plan_states(json_t *root, pctx *c)
{
    memra_plan *p = c->p;
    json_t *arr;
    int rc = get_array(root, "state", MAX_ENTRIES, &arr, "plan", c->err);
    if (rc)
        return rc;
    p->n_states = (uint32_t)json_array_size(arr);
    p->states = calloc(p->n_states + 1, sizeof *p->states);
    c->state_used = calloc(p->n_states + 1, 1);
    if (!p->states || !c->state_used)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "state");
    for (uint32_t i = 0; i < p->n_states; i++)
        if ((rc = parse_state(json_array_get(arr, i), &p->states[i], i, c)))
            return rc;
    int64_t dup = name_index_build(&c->states, p->states[0].name, sizeof p->states[0],
                                   p->n_states);
    if (dup == -2)
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "state index");
    if (dup >= 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "state[%" PRId64 "]: duplicate name '%s'", dup,
                          p->states[dup].name);
    return MEMRA_OK;
}

/* ===================================== launches ===================================== */

typedef struct lctx {
    pctx *c;
    uint32_t li;                 /* launch index */
    const memra_op_desc *op;
    memra_plan_launch *l;
    uint8_t slot_used[MEMRA_OP_MAX_SLOTS];
} lctx;

#define LFAIL(lc, ai, ...) launch_fail((lc), (ai), __FILE__, __LINE__, __VA_ARGS__)

static int launch_fail(lctx *lc, int ai, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int launch_fail(lctx *lc, int ai, const char *file, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ai >= 0)
        return memra_err_set(lc->c->err, MEMRA_ERR_PLAN, file, line,
                             "launch %u (%s): argument '%s': %s", lc->li, lc->op->name,
                             lc->op->args[ai].name, msg);
    return memra_err_set(lc->c->err, MEMRA_ERR_PLAN, file, line, "launch %u (%s): %s", lc->li,
                         lc->op ? lc->op->name : "?", msg);
}

/* Identifier lookup for spec expressions: `b` is the tier, others are the op's INT args. */
static int lookup_int(void *user, const char *name, size_t len, int64_t *v)
{
    lctx *lc = user;
    if (len == 1 && name[0] == 'b') {
        *v = lc->c->p->tier;
        return 0;
    }
    for (uint32_t i = 0; i < lc->op->n_args; i++) {
        const memra_op_arg_desc *d = &lc->op->args[i];
        if (d->kind == MEMRA_ARG_INT && strlen(d->name) == len && memcmp(d->name, name, len) == 0) {
            if (lc->l->args[i].kind != MEMRA_ARG_INT)
                return -1;
            *v = lc->l->args[i].i;
            return 0;
        }
    }
    return -1;
}

/* Which slots are in use, and is every required arg of a used slot present? */
static int launch_presence(lctx *lc, json_t *args)
{
    const char *k;
    json_t *v;
    json_object_foreach(args, k, v)
    {
        if (memra_op_find_arg(lc->l->op, k) < 0)
            return LFAIL(lc, -1, "unknown argument '%s' (not in the catalog)", k);
    }
    for (uint32_t i = 0; i < lc->op->n_args; i++) {
        const memra_op_arg_desc *d = &lc->op->args[i];
        if (d->flag != MEMRA_ARGF_OPT && json_object_get(args, d->name))
            lc->slot_used[d->slot] = 1;
    }
    lc->slot_used[0] = 1;
    for (int s = 2; s < MEMRA_OP_MAX_SLOTS; s++)
        if (lc->slot_used[s] && !lc->slot_used[s - 1])
            return LFAIL(lc, -1, "slot %d is used but slot %d is not", s, s - 1);
    for (uint32_t i = 0; i < lc->op->n_args; i++) {
        const memra_op_arg_desc *d = &lc->op->args[i];
        int present = json_object_get(args, d->name) != NULL;
        if (present && !lc->slot_used[d->slot])
            return LFAIL(lc, (int)i, "given but its slot %u is not in use", d->slot);
        if (!present && d->flag != MEMRA_ARGF_OPT && lc->slot_used[d->slot])
            return LFAIL(lc, (int)i, "missing (required)");
    }
    return MEMRA_OK;
}

static int arg_scalar(lctx *lc, uint32_t ai, json_t *v)
{
    const memra_op_arg_desc *d = &lc->op->args[ai];
    memra_plan_arg *a = &lc->l->args[ai];
    if (d->kind == MEMRA_ARG_INT) {
        int64_t lo = 0, hi = 0;
        if (!json_is_integer(v))
            return LFAIL(lc, (int)ai, "expected an integer");
        if (memra_spec_range(d->spec, &lo, &hi) != 0)
            return LFAIL(lc, (int)ai, "catalog range '%s' is malformed", d->spec);
        if (json_integer_value(v) < lo || json_integer_value(v) > hi)
            return LFAIL(lc, (int)ai, "%lld is outside %s", (long long)json_integer_value(v),
                         d->spec);
        a->i = json_integer_value(v);
    } else {
        double f = json_number_value(v);
        if (!json_is_number(v) || !isfinite(f) || fabs(f) > 3.0e38)
            return LFAIL(lc, (int)ai, "expected a finite number");
        a->f = (float)f;
    }
    a->kind = d->kind;
    a->access = MEMRA_ACC_IN;
    return MEMRA_OK;
}

static int eval_spec_item(lctx *lc, uint32_t ai, const char *e, size_t n, int64_t *out)
{
    memra_err sub;
    memra_err_clear(&sub);
    if (memra_expr_eval(e, n, lookup_int, lc, out, &sub) != MEMRA_OK)
        return LFAIL(lc, (int)ai, "catalog spec '%.*s': %s", (int)n, e, sub.msg);
    return MEMRA_OK;
}

/* The resolved access of a buffer: OUT_MODE follows its slot's MODE int. */
static uint32_t resolve_access(lctx *lc, const memra_op_arg_desc *d)
{
    if (d->access != MEMRA_ACC_OUT_MODE)
        return d->access;
    for (uint32_t i = 0; i < lc->op->n_args; i++) {
        const memra_op_arg_desc *m = &lc->op->args[i];
        if (m->flag == MEMRA_ARGF_MODE && m->slot == d->slot)
            return lc->l->args[i].i == 1 ? MEMRA_ACC_INOUT : MEMRA_ACC_OUT;
    }
    return MEMRA_ACC_INOUT; /* unreachable for a well-formed catalog; the strict choice */
}

static int arg_buf(lctx *lc, uint32_t ai, const char *name)
{
    const memra_op_arg_desc *d = &lc->op->args[ai];
    memra_plan_arg *a = &lc->l->args[ai];
    int64_t bi = name_index_find(&lc->c->bufs, name), count = 0;
    if (bi < 0)
        return LFAIL(lc, (int)ai, "unknown buffer '%s'", name);
    const memra_plan_buffer *b = &lc->c->p->buffers[bi];
    if (b->dtype != d->type)
        return LFAIL(lc, (int)ai, "buffer '%s' is %s, the op needs %s", name,
                     memra_dtype_name(b->dtype), memra_dtype_name(d->type));
    int rc = eval_spec_item(lc, ai, d->spec, strlen(d->spec), &count), ok = 0;
    if (rc)
        return rc;
    uint64_t bytes = memra_dtype_bytes(d->type, count, &ok);
    if (!ok || count <= 0)
        return LFAIL(lc, (int)ai, "element count %s = %" PRId64 " is not a valid %s size", d->spec,
                     count, memra_dtype_name(d->type));
    if (bytes > b->bytes)
        return LFAIL(lc, (int)ai, "buffer '%s' holds %" PRIu64 " bytes, the op needs %s = %" PRId64
                     " %s elements (%" PRIu64 " bytes)",
                     name, b->bytes, d->spec, count, memra_dtype_name(d->type), bytes);
    *a = (memra_plan_arg){.kind = MEMRA_ARG_BUF, .access = resolve_access(lc, d),
                          .index = (uint32_t)bi, .dtype = b->dtype, .offset = b->offset,
                          .bytes = bytes, .count = count};
    return MEMRA_OK;
}

static int arg_weight(lctx *lc, uint32_t ai, const char *name)
{
    const memra_op_arg_desc *d = &lc->op->args[ai];
    int64_t wi = name_index_find(&lc->c->weights, name);
    if (wi < 0)
        return LFAIL(lc, (int)ai, "weight '%s' is not in the plan's weights list", name);
    const memra_gguf_tensor *t = lc->c->p->weights[wi].tensor;
    const memra_qtype_info *qi = memra_qtype_get(t->type);
    if (!memra_weight_class_accepts(d->type, t->type))
        return LFAIL(lc, (int)ai, "weight '%s' has type %s, not accepted (%s)", name,
                     qi ? qi->name : "?", memra_weight_class_name(d->type));
    const char *item[4];
    size_t len[4];
    int nd = memra_spec_split(d->spec, item, len, 4);
    for (int k = 0; k < MEMRA_GGUF_MAX_DIMS; k++) {
        int64_t want = 1;
        if (k < nd) {
            int rc = eval_spec_item(lc, ai, item[k], len[k], &want);
            if (rc)
                return rc;
        }
        if (t->ne[k] != want)
            return LFAIL(lc, (int)ai, "weight '%s' has ne[%d] = %" PRId64 ", the op needs %.*s = %" PRId64,
                         name, k, t->ne[k], k < nd ? (int)len[k] : 1, k < nd ? item[k] : "1", want);
    }
    lc->c->weight_used[wi] = 1;
    lc->l->args[ai] = (memra_plan_arg){.kind = MEMRA_ARG_WEIGHT, .access = MEMRA_ACC_IN,
                                       .index = (uint32_t)wi, .dtype = t->type, .bytes = t->nbytes};
    return MEMRA_OK;
}

static int arg_state(lctx *lc, uint32_t ai, const char *name)
{
    const memra_op_arg_desc *d = &lc->op->args[ai];
    int64_t si = name_index_find(&lc->c->states, name);
    if (si < 0)
        return LFAIL(lc, (int)ai, "unknown state region '%s'", name);
    const memra_plan_state *s = &lc->c->p->states[si];
    if (s->kind != d->type)
        return LFAIL(lc, (int)ai, "state '%s' is %s, the op needs %s", name,
                     memra_state_kind_name(s->kind), memra_state_kind_name(d->type));
    const char *item[4];
    size_t len[4];
    int nd = memra_spec_split(d->spec, item, len, 4);
    if (nd != (int)s->n_dims)
        return LFAIL(lc, (int)ai, "state '%s' has %u dims, the op needs %d", name, s->n_dims, nd);
    for (int k = 0; k < nd; k++) {
        int64_t want = 0;
        int rc = eval_spec_item(lc, ai, item[k], len[k], &want);
        if (rc)
            return rc;
        if (s->dims[k] != want)
            return LFAIL(lc, (int)ai, "state '%s' dims[%d] = %" PRId64 ", the op needs %.*s = %" PRId64,
                         name, k, s->dims[k], (int)len[k], item[k], want);
    }
    lc->c->state_used[si] = 1;
    lc->l->args[ai] = (memra_plan_arg){.kind = MEMRA_ARG_STATE, .access = d->access,
                                       .index = (uint32_t)si, .dtype = s->dtype, .bytes = s->bytes};
    return MEMRA_OK;
}

static int arg_ref(lctx *lc, uint32_t ai, json_t *v)
{
    const memra_op_arg_desc *d = &lc->op->args[ai];
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return LFAIL(lc, (int)ai, "expected a %s name (string)", memra_arg_kind_name(d->kind));
    const char *s = json_string_value(v);
    switch (d->kind) {
    case MEMRA_ARG_BUF: return arg_buf(lc, ai, s);
    case MEMRA_ARG_WEIGHT: return arg_weight(lc, ai, s);
    case MEMRA_ARG_STATE: return arg_state(lc, ai, s);
    default: break;
    }
    if (memra_tick_field_from_name(s) != (int)d->type)
        return LFAIL(lc, (int)ai, "tick field '%s', the op needs '%s'", s,
                     memra_tick_field_name(d->type));
    lc->l->args[ai] = (memra_plan_arg){.kind = MEMRA_ARG_TICK, .access = d->access,
                                       .index = d->type};
    return MEMRA_OK;
}

/* Scalars first (the spec expressions of the other args refer to them). */
static int launch_args(lctx *lc, json_t *args)
{
    int rc;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < lc->op->n_args; i++) {
            const memra_op_arg_desc *d = &lc->op->args[i];
            json_t *v = json_object_get(args, d->name);
            int scalar = d->kind == MEMRA_ARG_INT || d->kind == MEMRA_ARG_FLOAT;
            if (!v || scalar != (pass == 0))
                continue;
            if ((rc = scalar ? arg_scalar(lc, i, v) : arg_ref(lc, i, v)))
                return rc;
        }
    }
    return MEMRA_OK;
}

/* ==================================== kernel keys ==================================== */

static int key_append(char *buf, size_t n, size_t *at, const char *s, size_t len)
{
    if (*at + len >= n)
        return -1;
    memcpy(buf + *at, s, len);
    *at += len;
    buf[*at] = '\0';
    return 0;
}

/* {qt}: the present QDOT weights' qtype names in arg order, joined by '+'. */
static int key_qt(lctx *lc, char *buf, size_t n, size_t *at)
{
    int first = 1;
    for (uint32_t i = 0; i < lc->op->n_args; i++) {
        const memra_plan_arg *a = &lc->l->args[i];
        if (lc->op->args[i].kind != MEMRA_ARG_WEIGHT || lc->op->args[i].type != MEMRA_WC_QDOT ||
            a->kind != MEMRA_ARG_WEIGHT)
            continue;
        const char *q = memra_qtype_get(a->dtype)->name;
        if ((!first && key_append(buf, n, at, "+", 1)) || key_append(buf, n, at, q, strlen(q)))
            return -1;
        first = 0;
    }
    return 0;
}

static int key_field(lctx *lc, const char *f, size_t len, char *buf, size_t n, size_t *at)
{
    char num[32];
    int64_t v;
    if (len == 2 && memcmp(f, "qt", 2) == 0)
        return key_qt(lc, buf, n, at);
    if (len == 2 && memcmp(f, "kv", 2) == 0) {
        for (uint32_t i = 0; i < lc->op->n_args; i++)
            if (lc->l->args[i].kind == MEMRA_ARG_STATE) {
                const char *d = memra_dtype_name(lc->l->args[i].dtype);
                return key_append(buf, n, at, d, strlen(d));
            }
        return -1;
    }
    if (lookup_int(lc, f, len, &v) != 0)
        return -1;
    snprintf(num, sizeof num, "%" PRId64, v);
    return key_append(buf, n, at, num, strlen(num));
}

/* Fill the op's key template from the resolved launch (format: ops.def header). */
static int kernel_key(lctx *lc, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (const char *s = lc->op->key; *s;) {
        const char *open = strchr(s, '{');
        size_t lit = open ? (size_t)(open - s) : strlen(s);
        if (key_append(buf, n, &at, s, lit))
            return -1;
        if (!open)
            break;
        const char *close = strchr(open, '}');
        if (!close || key_field(lc, open + 1, (size_t)(close - open - 1), buf, n, &at))
            return -1;
        s = close + 1;
    }
    return 0;
}

static int kernel_index(const memra_plan *p, const char *key)
{
    for (uint32_t i = 0; i < p->n_kernels; i++)
        if (strcmp(p->kernels[i], key) == 0)
            return (int)i;
    return -1;
}

static int launch_kernel(lctx *lc, json_t *lj, uint8_t *kernel_used)
{
    json_t *k = json_object_get(lj, "kernel");
    lc->l->kernel = -1;
    if (!lc->op->key) {
        if (k)
            return LFAIL(lc, -1, "the op has no kernel specializations but names '%s'",
                         json_is_string(k) ? json_string_value(k) : "?");
        return MEMRA_OK;
    }
    char want[MEMRA_KERNEL_KEY_MAX];
    if (kernel_key(lc, want, sizeof want) != 0)
        return LFAIL(lc, -1, "cannot form the kernel key from template '%s'", lc->op->key);
    if (!json_is_string(k) || strcmp(json_string_value(k), want) != 0)
        return LFAIL(lc, -1, "kernel must be '%s' (from the catalog template '%s'), plan says '%s'",
                     want, lc->op->key, json_is_string(k) ? json_string_value(k) : "(none)");
    lc->l->kernel = kernel_index(lc->c->p, want);
    if (lc->l->kernel < 0)
        return LFAIL(lc, -1, "kernel '%s' is missing from the plan's kernels list", want);
    kernel_used[lc->l->kernel] = 1;
    return MEMRA_OK;
}

/* ============================== liveness and aliasing ============================== */

static int ranges_overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
    return a < b + bn && b < a + an;
}

/* Inside one launch, a written buffer must not overlap any other buffer argument. */
static int launch_aliasing(lctx *lc)
{
    const memra_plan_launch *l = lc->l;
    for (uint32_t i = 0; i < l->n_args; i++) {
        const memra_plan_arg *a = &l->args[i];
        if (a->kind != MEMRA_ARG_BUF || a->access == MEMRA_ACC_IN)
            continue;
        for (uint32_t j = 0; j < l->n_args; j++) {
            const memra_plan_arg *b = &l->args[j];
            const memra_plan_buffer *ba = &lc->c->p->buffers[a->index];
            const memra_plan_buffer *bb = &lc->c->p->buffers[b->index];
            if (j == i || b->kind != MEMRA_ARG_BUF)
                continue;
            if (ranges_overlap(ba->offset, ba->bytes, bb->offset, bb->bytes))
                return LFAIL(lc, (int)i, "written buffer '%s' overlaps argument '%s' (buffer '%s')",
                             ba->name, lc->op->args[j].name, bb->name);
        }
    }
    return MEMRA_OK;
}

/* Walk order: reads need an earlier write (or the stage input); record live intervals. */
static int launch_dataflow(lctx *lc)
{
    pctx *c = lc->c;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < lc->l->n_args; i++) {
            const memra_plan_arg *a = &lc->l->args[i];
            if (a->kind != MEMRA_ARG_BUF)
                continue;
            uint32_t bi = a->index;
            if (c->first_use[bi] < 0)
                c->first_use[bi] = (int32_t)lc->li;
            c->last_use[bi] = (int32_t)lc->li;
            int reads = a->access == MEMRA_ACC_IN || a->access == MEMRA_ACC_INOUT;
            if (pass == 0 && reads && !c->defined[bi])
                return LFAIL(lc, (int)i, "reads buffer '%s' before any launch writes it",
                             c->p->buffers[bi].name);
            if (pass == 1 && (a->access == MEMRA_ACC_OUT || a->access == MEMRA_ACC_INOUT))
                c->defined[bi] = 1;
        }
    }
    return MEMRA_OK;
}

/* Buffers sharing arena bytes must never be live at the same time. */
static int plan_overlaps(pctx *c)
{
    const memra_plan *p = c->p;
    for (uint32_t i = 0; i < p->n_buffers; i++) {
        if (c->first_use[i] < 0)
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "buffers[%u] (%s) is never used", i,
                              p->buffers[i].name);
        for (uint32_t j = 0; j < i; j++) {
            const memra_plan_buffer *a = &p->buffers[i], *b = &p->buffers[j];
            if (!ranges_overlap(a->offset, a->bytes, b->offset, b->bytes))
                continue;
            if (c->first_use[i] <= c->last_use[j] && c->first_use[j] <= c->last_use[i])
                return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN,
                                  "buffers '%s' (launches %d..%d) and '%s' (launches %d..%d) "
                                  "share arena bytes while both are live",
                                  a->name, c->first_use[i], c->last_use[i], b->name,
                                  c->first_use[j], c->last_use[j]);
        }
    }
    return MEMRA_OK;
}

/* ===================================== launches ===================================== */

static int parse_launch(json_t *lj, uint32_t li, pctx *c, uint8_t *kernel_used)
{
    static const char *const keys[] = {"op", "kernel", "args", NULL};
    lctx lc = {.c = c, .li = li, .l = &c->p->launches[li]};
    char where[48];
    int rc;
    snprintf(where, sizeof where, "launch %u", li);
    if (!json_is_object(lj))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s is not an object", where);
    if ((rc = check_keys(lj, keys, where, c->err)))
        return rc;
    json_t *op = json_object_get(lj, "op"), *args = json_object_get(lj, "args");
    int id = json_is_string(op) ? memra_op_find(json_string_value(op)) : -1;
    if (id < 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: unknown op '%s' (not in the catalog)", where,
                          json_is_string(op) ? json_string_value(op) : "?");
    if (!json_is_object(args))
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "%s: 'args' must be an object", where);
    lc.op = memra_op_get((uint32_t)id);
    lc.l->op = (uint32_t)id;
    lc.l->n_args = lc.op->n_args;
    if ((rc = launch_presence(&lc, args)) || (rc = launch_args(&lc, args)) ||
        (rc = launch_kernel(&lc, lj, kernel_used)) || (rc = launch_aliasing(&lc)) ||
        (rc = launch_dataflow(&lc)))
        return rc;
    return MEMRA_OK;
}

static int plan_launches(json_t *root, pctx *c)
{
    memra_plan *p = c->p;
    json_t *arr;
    int rc = get_array(root, "launches", MAX_LAUNCHES, &arr, "plan", c->err);
    if (rc)
        return rc;
    p->n_launches = (uint32_t)json_array_size(arr);
    p->launches = calloc(p->n_launches + 1, sizeof *p->launches);
    uint8_t *kernel_used = calloc(p->n_kernels + 1, 1);
    if (!p->launches || !kernel_used) {
        free(kernel_used);
        return MEMRA_FAIL(c->err, MEMRA_ERR_NOMEM, "launches");
    }
    if (p->input >= 0) { /* filled by the runtime before launch 0 */
        c->defined[p->input] = 1;
        c->first_use[p->input] = 0;
    }
    for (uint32_t i = 0; i < p->n_launches && rc == MEMRA_OK; i++)
        rc = parse_launch(json_array_get(arr, i), i, c, kernel_used);
    for (uint32_t k = 0; k < p->n_kernels && rc == MEMRA_OK; k++)
        if (!kernel_used[k])
            rc = MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "kernels[%u] '%s' is used by no launch", k,
                            p->kernels[k]);
    free(kernel_used);
    return rc;
}

/* ======================================= io ======================================= */

static int io_buffer(json_t *root, const char *key, int want, uint64_t n_elems, int32_t *out,
                     pctx *c)
{
    json_t *v = json_object_get(root, key);
    *out = -1;
    if (!want) {
        if (v && !json_is_null(v))
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: stage %u of %u must not have '%s'",
                              c->p->stage, c->p->n_stages, key);
        return MEMRA_OK;
    }
    int64_t bi = json_is_string(v) ? name_index_find(&c->bufs, json_string_value(v)) : -1;
    if (bi < 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: stage %u of %u needs '%s' naming a buffer",
                          c->p->stage, c->p->n_stages, key);
    const memra_plan_buffer *b = &c->p->buffers[bi];
    if (b->dtype != MEMRA_DT_F32 || b->bytes < n_elems * 4)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: '%s' buffer '%s' must be f32 [%u, %" PRIu64
                          "]", key, b->name, c->p->tier, n_elems / c->p->tier);
    *out = (int32_t)bi;
    return MEMRA_OK;
}

static int plan_io(json_t *root, pctx *c)
{
    memra_plan *p = c->p;
    uint64_t b = p->tier;
    int last = p->stage + 1 == p->n_stages;
    int rc;
    if ((rc = io_buffer(root, "input", p->stage > 0, b * c->n_embd, &p->input, c)) ||
        (rc = io_buffer(root, "output", !last, b * c->n_embd, &p->output, c)) ||
        (rc = io_buffer(root, "logits", last, b * c->n_vocab, &p->logits, c)))
        return rc;
    return MEMRA_OK;
}

/* After the walk: outputs must have been written; they stay live to the end. */
static int plan_io_final(pctx *c)
{
    const memra_plan *p = c->p;
    int32_t outs[2] = {p->output, p->logits};
    for (int i = 0; i < 2; i++) {
        if (outs[i] < 0)
            continue;
        if (!c->defined[outs[i]])
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "plan: output buffer '%s' is never written",
                              p->buffers[outs[i]].name);
        c->last_use[outs[i]] = (int32_t)p->n_launches;
    }
    if (p->input >= 0 && c->last_use[p->input] < 0)
        c->last_use[p->input] = 0;
    for (uint32_t i = 0; i < p->n_weights; i++)
        if (!c->weight_used[i])
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "weights[%u] '%s' is used by no launch", i,
                              p->weights[i].name);
    for (uint32_t i = 0; i < p->n_states; i++)
        if (!c->state_used[i])
            return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "state[%u] '%s' is used by no launch", i,
                              p->states[i].name);
    return MEMRA_OK;
}

/* ====================================== stats ====================================== */

/* Which weights are only gathered (embedding rows) or routed (experts): for the estimate of
 * bytes actually streamed per tick. */
static void stats_weight_use(pctx *c)
{
    const memra_plan *p = c->p;
    memset(c->weight_gather, 1, p->n_weights);
    memset(c->weight_routed, 0, p->n_weights);
    for (uint32_t li = 0; li < p->n_launches; li++) {
        const memra_plan_launch *l = &p->launches[li];
        for (uint32_t i = 0; i < l->n_args; i++) {
            const memra_plan_arg *a = &l->args[i];
            if (a->kind != MEMRA_ARG_WEIGHT)
                continue;
            if (l->op != MEMRA_OP_EMBED)
                c->weight_gather[a->index] = 0;
            const memra_gguf_tensor *t = p->weights[a->index].tensor;
            if ((l->op == MEMRA_OP_MMVQ_MOE || l->op == MEMRA_OP_MOE_DOWN) && t->ne[2] > 1)
                c->weight_routed[a->index] = 1;
        }
    }
}

static uint32_t plan_n_used(const memra_plan *p)
{
    for (uint32_t li = 0; li < p->n_launches; li++)
        if (p->launches[li].op == MEMRA_OP_MOE_ROUTE)
            return (uint32_t)p->launches[li].args[MEMRA_MOE_ROUTE_N_USED].i;
    return 0;
}

static void plan_stats(pctx *c)
{
    memra_plan *p = c->p;
    memra_plan_stats *s = &p->stats;
    uint32_t n_used = plan_n_used(p);
    stats_weight_use(c);
    s->launches = p->n_launches;
    for (uint32_t i = 0; i < p->n_weights; i++) {
        const memra_gguf_tensor *t = p->weights[i].tensor;
        s->weight_bytes += t->nbytes;
        if (c->weight_gather[i]) {
            /* B rows of the table (the upper bound: all rows distinct) */
            uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            s->weight_bytes_streamed += rows ? t->nbytes / rows * (p->tier < rows ? p->tier : rows)
                                             : 0;
        } else if (c->weight_routed[i] && n_used > 0) {
            /* at most B * n_used distinct experts of ne[2] */
            uint64_t e = (uint64_t)t->ne[2], hit = (uint64_t)p->tier * n_used;
            s->weight_bytes_streamed += t->nbytes / e * (hit < e ? hit : e);
        } else {
            s->weight_bytes_streamed += t->nbytes;
        }
    }
    for (uint32_t i = 0; i < p->n_states; i++) {
        if (p->states[i].per_token)
            s->kv_bytes_per_token += p->states[i].bytes;
        else
            s->state_bytes_per_row += p->states[i].bytes;
    }
}

/* ================================== entry points ================================== */

static int plan_parse_json(json_t *root, pctx *c)
{
    int rc;
    if ((rc = plan_header(root, c)) || (rc = plan_identity(c)) || (rc = plan_model_dims(c)) ||
        (rc = plan_buffers(root, c)) || (rc = plan_weights(root, c)) ||
        (rc = plan_states(root, c)) ||
        (rc = parse_kernels(root, &c->p->n_kernels, &c->p->kernels, "plan", c->err)) ||
        (rc = plan_io(root, c)) || (rc = plan_launches(root, c)) || (rc = plan_io_final(c)) ||
        (rc = plan_overlaps(c)))
        return rc;
    plan_stats(c);
    return MEMRA_OK;
}

int memra_plan_parse(const char *text, size_t len, const memra_plan_manifest *m,
                     const memra_gguf *g, memra_plan **out, memra_err *err)
{
    json_t *root = NULL;
    pctx c = {.m = m, .g = g, .err = err};
    int rc;
    *out = NULL;
    if (!text || !g)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "plan text and model are required");
    c.p = calloc(1, sizeof *c.p);
    if (!c.p)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plan");
    c.p->input = c.p->output = c.p->logits = -1;
    MEMRA_TRY(load_json(text, len, &root, err));
    MEMRA_TRY(plan_parse_json(root, &c));
    *out = c.p;
    c.p = NULL;
fail:
    pctx_free(&c);
    memra_plan_free(c.p);
    json_decref(root);
    return rc;
}

int memra_plan_load(const char *dir, uint32_t tier, uint32_t stage, const memra_gguf *g,
                    memra_plan **out, memra_err *err)
{
    memra_plan_manifest *m = NULL;
    char name[64], path[4096], *text = NULL;
    size_t len = 0;
    int rc;
    *out = NULL;
    if (!g)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "model is required");
    MEMRA_TRY(memra_plan_manifest_load(dir, &m, err));
    if (memra_plan_tier_for(m, tier) != tier || stage >= m->n_stages) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "%s: no plan for tier %u stage %u", dir, tier,
                        stage);
        goto fail;
    }
    memra_plan_file_name(name, sizeof name, tier, stage);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    MEMRA_TRY(read_file(path, &text, &len, err));
    rc = memra_plan_parse(text, len, m, g, out, err);
    if (rc == MEMRA_OK && ((*out)->tier != tier || (*out)->stage != stage)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s holds tier %u stage %u", path, (*out)->tier,
                        (*out)->stage);
        memra_plan_free(*out);
        *out = NULL;
    }
fail:
    if (rc && text)
        prefix_err(err, rc, path);
    memra_plan_manifest_free(m);
    free(text);
    return rc;
}

void memra_plan_free(memra_plan *p)
{
    if (!p)
        return;
    free(p->buffers);
    free(p->weights);
    free(p->states);
    free(p->kernels);
    free(p->launches);
    free(p);
}
