/*
 * gguf.c — GGUF v2/v3 reader (mmap or caller memory, zero-copy, hardened) and streaming v3
 * writer. Format: spec/gguf-and-quants.md §1.
 *
 * Reader concept: one pass over the header, the KV records and the tensor-info records with a
 * bounds-checked cursor, then a placement check of every tensor. Only after every rule holds
 * does memra_gguf_open return a handle; from then on accessors are plain lookups.
 *
 * What it must not do: read a byte outside [base, base+size); trust any count, length or
 * offset before checking it against the bytes that actually remain; allocate in proportion to
 * a claimed size (every count is first bounded by remaining/min_record_size, record arrays
 * grow by doubling as records are actually parsed, and a string array's offset index is sized
 * by a count already checked against remaining/8); multiply before checking (products are
 * checked by division); print; abort.
 *
 * Rules enforced (spec §1.8 G1–G21 plus the engine's own):
 *   - versions 2 and 3, little-endian only; n_kv <= remaining/14, n_tensors <= rest/24
 *     (minimum KV record: 8-byte key length + 1 key byte + 4-byte type + 1 payload byte;
 *     minimum tensor info: 8-byte name length + 4 n_dims + 4 type + 8 offset);
 *   - strings <= 2^30 bytes and <= remaining; arrays <= 2^30 elements and <= remaining/elem
 *     (strings: remaining/8); keys non-empty and unique; value types 0..12; no nested arrays;
 *   - general.alignment, when present, is a scalar UINT32, nonzero power of two (the
 *     1-element-array form llama.cpp tolerates is rejected);
 *   - tensor names < 64 bytes, no NUL, unique; n_dims <= 4; every stored dim >= 1 (zero dims
 *     are rejected, unlike the reference, which divides by them); element count < 2^63 and
 *     byte size < 2^64, both checked by division; type id known and not removed;
 *     ne[0] % block == 0;
 *   - placement (engine rule, §1.6): offset % ALIGN == 0, data_start + offset + nbytes <=
 *     file size without wrap, and tensors pairwise disjoint (sorted copy, O(n log n)). Gaps
 *     and out-of-order listing are accepted; the last tensor's trailing pad need not exist.
 *
 * Invariants after open: every kv[i].off and every string-array element offset points at a
 * fully present record; every tensor's data view lies inside the file; key and tensor-name
 * lookups are hash lookups (XXH3 over the bytes, open addressing).
 *
 * Writer concept: KV records are serialized into memory as they are added; tensor infos are
 * declared; begin() writes header + KVs + infos + zero pad; data is then streamed tensor by
 * tensor, each padded to ALIGN. Every failure is sticky: after one, every call returns the
 * same code, finish() fails and close() removes the partial file, so a caller that ignores a
 * return code cannot produce a silently wrong file.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_BYTES 24u
#define GGUF_MAX_STR (1ull << 30) /* engine cap = reference cap (§1.8 G5) */
#define GGUF_MAX_ARR (1ull << 30) /* §1.8 G9 */
#define GGUF_MIN_KV_BYTES 14u     /* 8 key len + 1 key byte + 4 type + 1 payload byte */
#define GGUF_MIN_TINFO_BYTES 24u  /* 8 name len + 4 n_dims + 4 type + 8 offset */
#define GGUF_ALIGN_KEY "general.alignment"

/* Payload bytes of a scalar value type; 0 for STRING and ARRAY (variable). §1.4. */
static const uint8_t k_vsize[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const char *const k_vname[MEMRA_GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};

const char *memra_gguf_vtype_name(memra_gguf_vtype t)
{
    return (unsigned)t < MEMRA_GGUF_VTYPE_COUNT ? k_vname[t] : "?";
}

static uint32_t le_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le_u64(const uint8_t *p) { return le_u32(p) | (uint64_t)le_u32(p + 4) << 32; }

/* Copy a name for an error message: at most 48 bytes, non-printables as '?'. */
static const char *printable(char *dst, size_t n, const char *s, uint64_t len)
{
    size_t k = 0;
    for (uint64_t i = 0; i < len && k + 4 < n && i < 48; i++)
        dst[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (len > 48 && k + 4 < n) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k] = '\0';
    return dst;
}

/* ============================ string hash set ============================ */

/* Open addressing over indices into a caller-owned name array; slot = index + 1, 0 = empty.
 * Capacity is a power of two >= 2 * entries, so probes stay short. */
typedef struct strtab {
    int64_t *slot;
    uint64_t mask;  /* capacity - 1 */
    uint64_t count; /* entries 0..count-1 of the name array are in the table */
} strtab;

static uint64_t strtab_hash(const char *p, uint64_t len) { return XXH3_64bits(p, (size_t)len); }

static void strtab_put(strtab *t, const memra_gguf_str *names, int64_t i)
{
    uint64_t h = strtab_hash(names[i].ptr, names[i].len) & t->mask;
    while (t->slot[h] != 0)
        h = (h + 1) & t->mask;
    t->slot[h] = i + 1;
}

/* Ensure room for n entries; rehashes entries 0..count-1. */
static int strtab_reserve(strtab *t, const memra_gguf_str *names, uint64_t n)
{
    uint64_t cap = t->slot ? t->mask + 1 : 0;
    if (cap >= 2 * n && cap != 0)
        return 0;
    uint64_t want = 16;
    while (want < 2 * n)
        want *= 2;
    int64_t *slot = calloc(want, sizeof *slot);
    if (!slot)
        return -1;
    free(t->slot);
    t->slot = slot;
    t->mask = want - 1;
    for (uint64_t i = 0; i < t->count; i++)
        strtab_put(t, names, (int64_t)i);
    return 0;
}

static int64_t strtab_find(const strtab *t, const memra_gguf_str *names, const char *p,
                           uint64_t len)
{
    if (!t->slot)
        return -1;
    uint64_t h = strtab_hash(p, len) & t->mask;
    for (int64_t s; (s = t->slot[h]) != 0; h = (h + 1) & t->mask) {
        const memra_gguf_str *e = &names[s - 1];
        if (e->len == len && memcmp(e->ptr, p, (size_t)len) == 0)
            return s - 1;
    }
    return -1;
}

/* Insert names[count] unless an equal name exists; returns that entry's index, else -1. */
static int64_t strtab_insert_next(strtab *t, const memra_gguf_str *names)
{
    int64_t i = (int64_t)t->count;
    int64_t prev = strtab_find(t, names, names[i].ptr, names[i].len);
    if (prev >= 0)
        return prev;
    strtab_put(t, names, i);
    t->count++;
    return -1;
}

/* ================================ reader ================================= */

typedef struct gguf_kv {
    uint32_t type;      /* memra_gguf_vtype */
    uint32_t arr_type;  /* element type (ARRAY only) */
    uint64_t arr_len;   /* element count (ARRAY only) */
    uint64_t off;       /* file offset: scalar payload, STRING length prefix, or 1st element */
    uint64_t *str_offs; /* [arr_len] offsets of each element's length prefix (string arrays) */
} gguf_kv;

struct memra_gguf {
    const uint8_t *base; /* [size] the file (mapping or borrowed memory) */
    size_t size;
    int mapped; /* munmap on close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;          /* from the header; all parsed once open succeeded */
    int64_t kv_cap;        /* allocated records (grows while parsing) */
    gguf_kv *kv;           /* [kv_cap] */
    memra_gguf_str *keys;  /* [kv_cap] views into the file */
    strtab key_tab;
    int64_t n_tensors;
    int64_t tensor_cap;
    memra_gguf_tensor *tensors; /* [tensor_cap] */
    memra_gguf_str *tnames;     /* [tensor_cap] views into the file */
    strtab tensor_tab;
};

/* Bounds-checked cursor; `where` names the record being parsed for error messages. */
typedef struct parser {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    memra_err *err;
    char where[112];
} parser;

#define PFAIL(ps, code, fmt, ...)                                                                  \
    MEMRA_FAIL((ps)->err, (code), "%s: " fmt, (ps)->where, __VA_ARGS__)

static int p_need(parser *ps, uint64_t n, const char *what)
{
    if (n > ps->size - ps->pos)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "truncated: %s needs %llu bytes at offset %llu but only %llu remain", what,
                     (unsigned long long)n, (unsigned long long)ps->pos,
                     (unsigned long long)(ps->size - ps->pos));
    return MEMRA_OK;
}

static int p_u32(parser *ps, uint32_t *v, const char *what)
{
    int rc = p_need(ps, 4, what);
    if (rc == MEMRA_OK) {
        *v = le_u32(ps->p + ps->pos);
        ps->pos += 4;
    }
    return rc;
}

static int p_u64(parser *ps, uint64_t *v, const char *what)
{
    int rc = p_need(ps, 8, what);
    if (rc == MEMRA_OK) {
        *v = le_u64(ps->p + ps->pos);
        ps->pos += 8;
    }
    return rc;
}

/* A GGUF string: u64 length (<= 2^30 and <= remaining) then the bytes. */
static int p_str(parser *ps, memra_gguf_str *s, const char *what)
{
    uint64_t at = ps->pos, len;
    int rc = p_u64(ps, &len, what);
    if (rc != MEMRA_OK)
        return rc;
    if (len > GGUF_MAX_STR)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "%s length %llu at offset %llu exceeds the 2^30 cap",
                     what, (unsigned long long)len, (unsigned long long)at);
    if (len > ps->size - ps->pos)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "%s length %llu at offset %llu runs past the end of the file "
                     "(%llu bytes remain)",
                     what, (unsigned long long)len, (unsigned long long)at,
                     (unsigned long long)(ps->size - ps->pos));
    s->ptr = (const char *)ps->p + ps->pos;
    s->len = len;
    ps->pos += len;
    return MEMRA_OK;
}

static int parse_header(memra_gguf *g, parser *ps)
{
    snprintf(ps->where, sizeof ps->where, "header");
    if (ps->size < GGUF_HEADER_BYTES)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "file is %llu bytes, shorter than the %u-byte header",
                     (unsigned long long)ps->size, GGUF_HEADER_BYTES);
    if (memcmp(ps->p, GGUF_MAGIC, 4) != 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "bad magic %02x %02x %02x %02x at offset 0 (want \"GGUF\")", ps->p[0],
                     ps->p[1], ps->p[2], ps->p[3]);
    uint32_t v = le_u32(ps->p + 4);
    if (v == 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "version 0 at offset %d is invalid", 4);
    if (v != 2 && v != 3) {
        if ((v & 0xFFFF) == 0)
            return PFAIL(ps, MEMRA_ERR_UNSUPPORTED,
                         "version field 0x%08x at offset 4 is byte-swapped: big-endian GGUF is "
                         "not supported",
                         v);
        return PFAIL(ps, MEMRA_ERR_UNSUPPORTED,
                     "GGUF version %u at offset 4 is not supported (only 2 and 3)", v);
    }
    g->version = v;
    uint64_t nt = le_u64(ps->p + 8), nkv = le_u64(ps->p + 16);
    ps->pos = GGUF_HEADER_BYTES;
    if (nt >> 63 || nkv >> 63)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "%s %llu at offset %d is negative as int64",
                     nt >> 63 ? "n_tensors" : "n_kv",
                     (unsigned long long)(nt >> 63 ? nt : nkv), nt >> 63 ? 8 : 16);
    uint64_t rem = ps->size - ps->pos;
    if (nkv > rem / GGUF_MIN_KV_BYTES)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "n_kv %llu at offset 16 cannot fit: %llu bytes remain and a KV needs >= %u",
                     (unsigned long long)nkv, (unsigned long long)rem, GGUF_MIN_KV_BYTES);
    rem -= nkv * GGUF_MIN_KV_BYTES;
    if (nt > rem / GGUF_MIN_TINFO_BYTES)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "n_tensors %llu at offset 8 cannot fit: %llu bytes remain after the KVs' "
                     "minimum and a tensor info needs >= %u",
                     (unsigned long long)nt, (unsigned long long)rem, GGUF_MIN_TINFO_BYTES);
    g->n_tensors = (int64_t)nt;
    g->n_kv = (int64_t)nkv;
    return MEMRA_OK;
}

/* Array payload: element type, count, elements (string elements get an offset index). */
static int parse_kv_array(parser *ps, gguf_kv *kv)
{
    uint64_t at = ps->pos;
    int rc = p_u32(ps, &kv->arr_type, "array element type");
    if (rc == MEMRA_OK && kv->arr_type == MEMRA_GGUF_ARRAY)
        return PFAIL(ps, MEMRA_ERR_UNSUPPORTED, "nested array (element type ARRAY) at offset %llu",
                     (unsigned long long)at);
    if (rc == MEMRA_OK && kv->arr_type >= MEMRA_GGUF_VTYPE_COUNT)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "unknown array element type %u at offset %llu",
                     kv->arr_type, (unsigned long long)at);
    at = ps->pos;
    if (rc == MEMRA_OK)
        rc = p_u64(ps, &kv->arr_len, "array count");
    if (rc != MEMRA_OK)
        return rc;
    uint64_t esz = kv->arr_type == MEMRA_GGUF_STRING ? 8 : k_vsize[kv->arr_type];
    uint64_t rem = ps->size - ps->pos;
    if (kv->arr_len > GGUF_MAX_ARR || kv->arr_len > rem / esz)
        return PFAIL(ps, MEMRA_ERR_FORMAT,
                     "array count %llu at offset %llu is impossible: cap 2^30, %llu bytes remain "
                     "and each %s element needs >= %llu",
                     (unsigned long long)kv->arr_len, (unsigned long long)at,
                     (unsigned long long)rem, k_vname[kv->arr_type], (unsigned long long)esz);
    kv->off = ps->pos;
    if (kv->arr_type != MEMRA_GGUF_STRING) {
        ps->pos += kv->arr_len * esz; /* no wrap: arr_len <= rem / esz */
        return MEMRA_OK;
    }
    if (kv->arr_len == 0)
        return MEMRA_OK;
    /* Bounded by the file: arr_len <= remaining / 8. */
    kv->str_offs = malloc(kv->arr_len * sizeof *kv->str_offs);
    if (!kv->str_offs)
        return PFAIL(ps, MEMRA_ERR_NOMEM, "no memory for %llu string offsets",
                     (unsigned long long)kv->arr_len);
    for (uint64_t j = 0; j < kv->arr_len; j++) {
        uint64_t left = ps->size - ps->pos, len = left >= 8 ? le_u64(ps->p + ps->pos) : 0;
        if (left < 8 || len > GGUF_MAX_STR || len > left - 8)
            return PFAIL(ps, MEMRA_ERR_FORMAT,
                         "string element %llu at offset %llu: %s %llu (cap 2^30, %llu bytes "
                         "remain)",
                         (unsigned long long)j, (unsigned long long)ps->pos,
                         left < 8 ? "truncated length prefix" : "bad length",
                         (unsigned long long)len, (unsigned long long)left);
        kv->str_offs[j] = ps->pos;
        ps->pos += 8 + len;
    }
    return MEMRA_OK;
}

static int parse_kv(memra_gguf *g, parser *ps, int64_t i)
{
    gguf_kv *kv = &g->kv[i];
    uint64_t at = ps->pos;
    char nm[64];
    snprintf(ps->where, sizeof ps->where, "kv %lld", (long long)i);
    int rc = p_str(ps, &g->keys[i], "key");
    if (rc != MEMRA_OK)
        return rc;
    if (g->keys[i].len == 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "empty key at offset %llu", (unsigned long long)at);
    snprintf(ps->where, sizeof ps->where, "kv %lld '%s'", (long long)i,
             printable(nm, sizeof nm, g->keys[i].ptr, g->keys[i].len));
    int64_t dup = strtab_insert_next(&g->key_tab, g->keys);
    if (dup >= 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "duplicate key at offset %llu (first defined by kv %lld)",
                     (unsigned long long)at, (long long)dup);
    at = ps->pos;
    rc = p_u32(ps, &kv->type, "value type");
    if (rc != MEMRA_OK)
        return rc;
    if (kv->type >= MEMRA_GGUF_VTYPE_COUNT)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "unknown value type %u at offset %llu", kv->type,
                     (unsigned long long)at);
    if (kv->type == MEMRA_GGUF_ARRAY)
        return parse_kv_array(ps, kv);
    kv->off = ps->pos;
    if (kv->type == MEMRA_GGUF_STRING) {
        memra_gguf_str s;
        return p_str(ps, &s, "string value");
    }
    rc = p_need(ps, k_vsize[kv->type], k_vname[kv->type]);
    if (rc == MEMRA_OK)
        ps->pos += k_vsize[kv->type];
    return rc;
}

static int parse_alignment(memra_gguf *g, parser *ps)
{
    g->alignment = MEMRA_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = memra_gguf_find_kv(g, GGUF_ALIGN_KEY);
    if (i < 0)
        return MEMRA_OK;
    const gguf_kv *kv = &g->kv[i];
    snprintf(ps->where, sizeof ps->where, "kv %lld '%s'", (long long)i, GGUF_ALIGN_KEY);
    if (kv->type != MEMRA_GGUF_UINT32)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "has type %s%s, must be a scalar UINT32",
                     k_vname[kv->type], kv->type == MEMRA_GGUF_ARRAY ? " (1-element form)" : "");
    uint32_t a = le_u32(g->base + kv->off);
    if (a == 0 || (a & (a - 1)) != 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "value %u at offset %llu is not a nonzero power of two",
                     a, (unsigned long long)kv->off);
    g->alignment = a;
    return MEMRA_OK;
}

/* Name: < 64 bytes, no NUL, unique. */
static int parse_tensor_name(memra_gguf *g, parser *ps, int64_t i)
{
    memra_gguf_tensor *t = &g->tensors[i];
    memra_gguf_str *s = &g->tnames[i];
    uint64_t at = ps->pos;
    char nm[64];
    snprintf(ps->where, sizeof ps->where, "tensor %lld", (long long)i);
    int rc = p_str(ps, s, "name");
    if (rc != MEMRA_OK)
        return rc;
    if (s->len >= MEMRA_GGUF_MAX_NAME)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "name '%s' at offset %llu is %llu bytes (limit %d)",
                     printable(nm, sizeof nm, s->ptr, s->len), (unsigned long long)at,
                     (unsigned long long)s->len, MEMRA_GGUF_MAX_NAME - 1);
    if (memchr(s->ptr, 0, (size_t)s->len))
        return PFAIL(ps, MEMRA_ERR_FORMAT, "name '%s' at offset %llu contains a NUL byte",
                     printable(nm, sizeof nm, s->ptr, s->len), (unsigned long long)at);
    memcpy(t->name, s->ptr, (size_t)s->len);
    t->name[s->len] = '\0';
    snprintf(ps->where, sizeof ps->where, "tensor %lld '%s'", (long long)i,
             printable(nm, sizeof nm, s->ptr, s->len));
    int64_t dup = strtab_insert_next(&g->tensor_tab, g->tnames);
    if (dup >= 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "duplicate name at offset %llu (first used by tensor %lld)",
                     (unsigned long long)at, (long long)dup);
    return MEMRA_OK;
}

/* n_dims, dims (each >= 1, product < 2^63). */
static int parse_tensor_shape(parser *ps, memra_gguf_tensor *t)
{
    uint64_t at = ps->pos;
    int rc = p_u32(ps, &t->n_dims, "n_dims");
    if (rc != MEMRA_OK)
        return rc;
    if (t->n_dims > MEMRA_GGUF_MAX_DIMS)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "n_dims %u at offset %llu exceeds %d", t->n_dims,
                     (unsigned long long)at, MEMRA_GGUF_MAX_DIMS);
    int64_t count = 1;
    for (uint32_t d = 0; d < MEMRA_GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        at = ps->pos;
        if (d < t->n_dims && (rc = p_u64(ps, &v, "dimension")) != MEMRA_OK)
            return rc;
        if (v >> 63)
            return PFAIL(ps, MEMRA_ERR_FORMAT, "ne[%u] = %lld at offset %llu is negative", d,
                         (long long)v, (unsigned long long)at);
        if (v == 0)
            return PFAIL(ps, MEMRA_ERR_FORMAT,
                         "ne[%u] = 0 at offset %llu (empty tensors are rejected)", d,
                         (unsigned long long)at);
        t->ne[d] = (int64_t)v;
        if (t->ne[d] > INT64_MAX / count)
            return PFAIL(ps, MEMRA_ERR_FORMAT,
                         "element count overflows int64 at ne[%u] = %lld (offset %llu)", d,
                         (long long)v, (unsigned long long)at);
        count *= t->ne[d];
    }
    return MEMRA_OK;
}

/* Type id, ne[0] % block, byte size (checked by division), offset. */
static int parse_tensor_type(parser *ps, memra_gguf_tensor *t)
{
    uint64_t at = ps->pos;
    int rc = p_u32(ps, &t->type, "type");
    if (rc != MEMRA_OK)
        return rc;
    const memra_qtype_info *q = memra_qtype_get(t->type);
    if (!q)
        return PFAIL(ps, t->type >= MEMRA_QT_COUNT ? MEMRA_ERR_UNSUPPORTED : MEMRA_ERR_FORMAT,
                     "%s type id %u at offset %llu",
                     t->type >= MEMRA_QT_COUNT ? "unknown" : "removed", t->type,
                     (unsigned long long)at);
    if (t->ne[0] % q->block_elems != 0)
        return PFAIL(ps, MEMRA_ERR_FORMAT, "ne[0] = %lld is not a multiple of the %s block (%u)",
                     (long long)t->ne[0], q->name, q->block_elems);
    uint64_t bytes = (uint64_t)t->ne[0] / q->block_elems;
    uint64_t factors[4] = {q->block_bytes, (uint64_t)t->ne[1], (uint64_t)t->ne[2],
                           (uint64_t)t->ne[3]};
    for (int k = 0; k < 4; k++) {
        if (bytes > UINT64_MAX / factors[k] || bytes * factors[k] > SIZE_MAX)
            return PFAIL(ps, MEMRA_ERR_FORMAT, "byte size of %s [%lld, %lld, %lld, %lld] overflows",
                         q->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3]);
        bytes *= factors[k];
    }
    t->nbytes = bytes;
    return p_u64(ps, &t->offset, "offset");
}

typedef struct span {
    uint64_t off, len;
    int64_t idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Engine placement rule (§1.6): aligned, inside the file without wrap, pairwise disjoint. */
static int check_placement(memra_gguf *g, parser *ps)
{
    uint64_t avail = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        memra_gguf_tensor *t = &g->tensors[i];
        snprintf(ps->where, sizeof ps->where, "tensor %lld '%s'", (long long)i, t->name);
        if (t->offset % g->alignment != 0)
            return PFAIL(ps, MEMRA_ERR_FORMAT, "offset %llu is not a multiple of the alignment %u",
                         (unsigned long long)t->offset, g->alignment);
        if (g->data_offset > g->size || t->offset > avail || t->nbytes > avail - t->offset)
            return PFAIL(ps, MEMRA_ERR_FORMAT,
                         "data [%llu, +%llu) relative to the data section at %llu ends past the "
                         "end of the %llu-byte file",
                         (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                         (unsigned long long)g->data_offset, (unsigned long long)g->size);
        t->data = g->base + g->data_offset + t->offset;
    }
    if (g->n_tensors < 2)
        return MEMRA_OK;
    span *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s)
        return MEMRA_FAIL(ps->err, MEMRA_ERR_NOMEM, "no memory to check %lld tensor placements",
                          (long long)g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++)
        s[i] = (span){g->tensors[i].offset, g->tensors[i].nbytes, i};
    qsort(s, (size_t)g->n_tensors, sizeof *s, span_cmp);
    int rc = MEMRA_OK;
    for (int64_t k = 1; k < g->n_tensors && rc == MEMRA_OK; k++)
        if (s[k - 1].off + s[k - 1].len > s[k].off) /* both in bounds: no wrap */
            rc = MEMRA_FAIL(ps->err, MEMRA_ERR_FORMAT,
                            "tensor %lld '%s' data [%llu, +%llu) overlaps tensor %lld '%s' at %llu",
                            (long long)s[k].idx, g->tensors[s[k].idx].name,
                            (unsigned long long)s[k].off, (unsigned long long)s[k].len,
                            (long long)s[k - 1].idx, g->tensors[s[k - 1].idx].name,
                            (unsigned long long)s[k - 1].off);
    free(s);
    return rc;
}

/* Grow the per-record arrays (records, name views, hash set) so that record i fits. Capacity
 * doubles from 64 up to the (already bounded) claimed count, so memory follows the records
 * actually parsed, never a count the file merely claims. New slots are zeroed. */
static int grow_records(void **recs, size_t rec_size, memra_gguf_str **names, strtab *tab,
                        int64_t *cap, int64_t i, int64_t claimed)
{
    if (i < *cap)
        return 0;
    int64_t nc = *cap ? *cap * 2 : 64;
    nc = nc < claimed ? nc : claimed;
    uint8_t *r = realloc(*recs, (size_t)nc * rec_size);
    if (!r)
        return -1;
    memset(r + (size_t)*cap * rec_size, 0, (size_t)(nc - *cap) * rec_size);
    *recs = r;
    memra_gguf_str *n = realloc(*names, (size_t)nc * sizeof *n);
    if (!n)
        return -1;
    *names = n;
    if (strtab_reserve(tab, *names, (uint64_t)nc) != 0)
        return -1;
    *cap = nc;
    return 0;
}

static int grow_kv(memra_gguf *g, parser *ps, int64_t i)
{
    if (grow_records((void **)&g->kv, sizeof *g->kv, &g->keys, &g->key_tab, &g->kv_cap, i,
                     g->n_kv) != 0)
        return MEMRA_FAIL(ps->err, MEMRA_ERR_NOMEM, "no memory for KV record %lld", (long long)i);
    return MEMRA_OK;
}

static int grow_tensors(memra_gguf *g, parser *ps, int64_t i)
{
    if (grow_records((void **)&g->tensors, sizeof *g->tensors, &g->tnames, &g->tensor_tab,
                     &g->tensor_cap, i, g->n_tensors) != 0)
        return MEMRA_FAIL(ps->err, MEMRA_ERR_NOMEM, "no memory for tensor info %lld",
                          (long long)i);
    return MEMRA_OK;
}

static int parse_all(memra_gguf *g, memra_err *err)
{
    parser ps = {.p = g->base, .size = g->size, .pos = 0, .err = err};
    int rc;
    MEMRA_TRY(parse_header(g, &ps));
    for (int64_t i = 0; i < g->n_kv; i++) {
        MEMRA_TRY(grow_kv(g, &ps, i));
        MEMRA_TRY(parse_kv(g, &ps, i));
    }
    MEMRA_TRY(parse_alignment(g, &ps));
    for (int64_t i = 0; i < g->n_tensors; i++) {
        MEMRA_TRY(grow_tensors(g, &ps, i));
        MEMRA_TRY(parse_tensor_name(g, &ps, i));
        MEMRA_TRY(parse_tensor_shape(&ps, &g->tensors[i]));
        MEMRA_TRY(parse_tensor_type(&ps, &g->tensors[i]));
    }
    /* ps.pos <= size < 2^63 and alignment <= 2^31: no wrap. */
    g->data_offset = (ps.pos + g->alignment - 1) / g->alignment * g->alignment;
    MEMRA_TRY(check_placement(g, &ps));
    return MEMRA_OK;
fail:
    return rc;
}

static int open_common(const uint8_t *base, size_t size, int mapped, memra_gguf **out,
                       memra_err *err)
{
    memra_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (mapped)
            munmap((void *)base, size);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "no memory for a GGUF handle");
    }
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    int rc = parse_all(g, err);
    if (rc != MEMRA_OK) {
        memra_gguf_close(g);
        return rc;
    }
    *out = g;
    return MEMRA_OK;
}

int memra_gguf_open_memory(const void *data, size_t size, memra_gguf **out, memra_err *err)
{
    if (!out)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "memra_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "memra_gguf_open_memory: data is NULL");
    static const uint8_t empty[1];
    return open_common(data ? data : empty, size, 0, out, err);
}

int memra_gguf_open(const char *path, memra_gguf **out, memra_err *err)
{
    if (!out || !path)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "memra_gguf_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < GGUF_HEADER_BYTES) { /* also avoids mmap of length 0 */
        close(fd);
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                          "'%s': file is %zu bytes, shorter than the %u-byte GGUF header", path,
                          size, GGUF_HEADER_BYTES);
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "mmap '%s' (%zu bytes): %s", path, size, strerror(e));
    return open_common(m, size, 1, out, err);
}

void memra_gguf_close(memra_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->kv_cap; i++)
        free(g->kv[i].str_offs);
    free(g->kv);
    free(g->keys);
    free(g->key_tab.slot);
    free(g->tensors);
    free(g->tnames);
    free(g->tensor_tab.slot);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g);
}

/* ============================== accessors =============================== */

uint32_t memra_gguf_version(const memra_gguf *g) { return g ? g->version : 0; }
uint32_t memra_gguf_alignment(const memra_gguf *g) { return g ? g->alignment : 0; }
uint64_t memra_gguf_data_offset(const memra_gguf *g) { return g ? g->data_offset : 0; }

const void *memra_gguf_file_data(const memra_gguf *g, size_t *size)
{
    if (size)
        *size = g ? g->size : 0;
    return g ? g->base : NULL;
}

int64_t memra_gguf_n_kv(const memra_gguf *g) { return g ? g->n_kv : 0; }

int64_t memra_gguf_find_kv(const memra_gguf *g, const char *key)
{
    if (!g || !key)
        return -1;
    return strtab_find(&g->key_tab, g->keys, key, strlen(key));
}

static const gguf_kv *kv_at(const memra_gguf *g, int64_t i)
{
    return (g && i >= 0 && i < g->n_kv) ? &g->kv[i] : NULL;
}

memra_gguf_str memra_gguf_kv_key(const memra_gguf *g, int64_t i)
{
    return kv_at(g, i) ? g->keys[i] : (memra_gguf_str){NULL, 0};
}

memra_gguf_vtype memra_gguf_kv_type(const memra_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv ? (memra_gguf_vtype)kv->type : MEMRA_GGUF_VTYPE_COUNT;
}

memra_gguf_vtype memra_gguf_kv_arr_type(const memra_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == MEMRA_GGUF_ARRAY ? (memra_gguf_vtype)kv->arr_type
                                              : MEMRA_GGUF_VTYPE_COUNT;
}

uint64_t memra_gguf_kv_arr_len(const memra_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == MEMRA_GGUF_ARRAY ? kv->arr_len : 0;
}

const void *memra_gguf_kv_data(const memra_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    if (!kv || (kv->type == MEMRA_GGUF_ARRAY && kv->arr_type == MEMRA_GGUF_STRING))
        return NULL;
    if (kv->type == MEMRA_GGUF_STRING)
        return g->base + kv->off + 8;
    return g->base + kv->off;
}

memra_gguf_str memra_gguf_kv_str(const memra_gguf *g, int64_t i, uint64_t j)
{
    const gguf_kv *kv = kv_at(g, i);
    uint64_t at;
    if (kv && kv->type == MEMRA_GGUF_STRING)
        at = kv->off;
    else if (kv && kv->type == MEMRA_GGUF_ARRAY && kv->arr_type == MEMRA_GGUF_STRING &&
             j < kv->arr_len)
        at = kv->str_offs[j];
    else
        return (memra_gguf_str){NULL, 0};
    return (memra_gguf_str){(const char *)g->base + at + 8, le_u64(g->base + at)};
}

int64_t memra_gguf_n_tensors(const memra_gguf *g) { return g ? g->n_tensors : 0; }

const memra_gguf_tensor *memra_gguf_tensor_at(const memra_gguf *g, int64_t i)
{
    return (g && i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const memra_gguf_tensor *memra_gguf_find_tensor(const memra_gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    int64_t i = strtab_find(&g->tensor_tab, g->tnames, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ============================ typed getters ============================= */

/* Decode an integer element of type t at p: *neg says whether it is below zero, *mag is its
 * magnitude. Returns 0, or -1 when t is not an integer type. */
static int decode_int(uint32_t t, const uint8_t *p, int *neg, uint64_t *mag)
{
    int64_t s;
    switch (t) {
    case MEMRA_GGUF_UINT8: *neg = 0; *mag = p[0]; return 0;
    case MEMRA_GGUF_UINT16: *neg = 0; *mag = (uint64_t)p[0] | (uint64_t)p[1] << 8; return 0;
    case MEMRA_GGUF_UINT32: *neg = 0; *mag = le_u32(p); return 0;
    case MEMRA_GGUF_UINT64: *neg = 0; *mag = le_u64(p); return 0;
    case MEMRA_GGUF_INT8: s = (int8_t)p[0]; break;
    case MEMRA_GGUF_INT16: s = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case MEMRA_GGUF_INT32: s = (int32_t)le_u32(p); break;
    case MEMRA_GGUF_INT64: s = (int64_t)le_u64(p); break;
    default: return -1;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return 0;
}

static int find_typed(const memra_gguf *g, const char *key, int64_t *idx, memra_err *err)
{
    *idx = g && key ? memra_gguf_find_kv(g, key) : -1;
    if (*idx < 0)
        return MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "GGUF key '%s' not found", key ? key : "(null)");
    return MEMRA_OK;
}

static int get_int(const memra_gguf *g, const char *key, int *neg, uint64_t *mag, memra_err *err)
{
    int64_t i;
    int rc = find_typed(g, key, &i, err);
    if (rc != MEMRA_OK)
        return rc;
    if (decode_int(g->kv[i].type, g->base + g->kv[i].off, neg, mag) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' has type %s, want an integer",
                          key, k_vname[g->kv[i].type]);
    return MEMRA_OK;
}

int memra_gguf_get_u32(const memra_gguf *g, const char *key, uint32_t *out, memra_err *err)
{
    int neg;
    uint64_t mag;
    int rc = get_int(g, key, &neg, &mag, err);
    if (rc != MEMRA_OK)
        return rc;
    if (neg || mag > UINT32_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' = %s%llu does not fit uint32",
                          key, neg ? "-" : "", (unsigned long long)mag);
    *out = (uint32_t)mag;
    return MEMRA_OK;
}

int memra_gguf_get_i64(const memra_gguf *g, const char *key, int64_t *out, memra_err *err)
{
    int neg;
    uint64_t mag;
    int rc = get_int(g, key, &neg, &mag, err);
    if (rc != MEMRA_OK)
        return rc;
    if (!neg && mag > (uint64_t)INT64_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' = %llu does not fit int64", key,
                          (unsigned long long)mag);
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag; /* two's complement of |INT64_MIN| ok */
    return MEMRA_OK;
}

int memra_gguf_get_f32(const memra_gguf *g, const char *key, float *out, memra_err *err)
{
    int64_t i;
    int rc = find_typed(g, key, &i, err);
    if (rc != MEMRA_OK)
        return rc;
    const uint8_t *p = g->base + g->kv[i].off;
    if (g->kv[i].type == MEMRA_GGUF_FLOAT32) {
        uint32_t u = le_u32(p);
        memcpy(out, &u, 4);
        return MEMRA_OK;
    }
    if (g->kv[i].type == MEMRA_GGUF_FLOAT64) {
        uint64_t u = le_u64(p);
        double d;
        memcpy(&d, &u, 8);
        float f = (float)d;
        if (isfinite(d) && !isfinite(f))
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' = %g does not fit float",
                              key, d);
        *out = f;
        return MEMRA_OK;
    }
    return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' has type %s, want FLOAT32/FLOAT64",
                      key, k_vname[g->kv[i].type]);
}

int memra_gguf_get_bool(const memra_gguf *g, const char *key, int *out, memra_err *err)
{
    int64_t i;
    int rc = find_typed(g, key, &i, err);
    if (rc != MEMRA_OK)
        return rc;
    if (g->kv[i].type != MEMRA_GGUF_BOOL)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' has type %s, want BOOL", key,
                          k_vname[g->kv[i].type]);
    *out = g->base[g->kv[i].off] != 0; /* any nonzero byte is true (§1.3) */
    return MEMRA_OK;
}

/* A value longer than the caller's buffer is reported as FORMAT (out of range for the use). */
int memra_gguf_get_str(const memra_gguf *g, const char *key, char *buf, size_t n, memra_err *err)
{
    int64_t i;
    int rc = find_typed(g, key, &i, err);
    if (rc != MEMRA_OK)
        return rc;
    if (g->kv[i].type != MEMRA_GGUF_STRING)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' has type %s, want STRING", key,
                          k_vname[g->kv[i].type]);
    memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
    if (!buf || s.len >= n)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                          "GGUF key '%s': string of %llu bytes does not fit a %zu-byte buffer",
                          key, (unsigned long long)s.len, n);
    if (memchr(s.ptr, 0, (size_t)s.len))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s': string contains a NUL byte", key);
    memcpy(buf, s.ptr, (size_t)s.len);
    buf[s.len] = '\0';
    return MEMRA_OK;
}

int memra_gguf_get_i64_array(const memra_gguf *g, const char *key, int64_t *out, size_t n,
                             size_t *len, memra_err *err)
{
    int64_t i;
    int rc = find_typed(g, key, &i, err);
    if (rc != MEMRA_OK)
        return rc;
    const gguf_kv *kv = &g->kv[i];
    int neg;
    uint64_t mag;
    static const uint8_t zero8[8];
    if (kv->type != MEMRA_GGUF_ARRAY || decode_int(kv->arr_type, zero8, &neg, &mag) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s' has type %s, want an integer array",
                          key, k_vname[kv->type]);
    if (len)
        *len = (size_t)kv->arr_len;
    if (kv->arr_len > n)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                          "GGUF key '%s' has %llu elements, more than the %zu expected", key,
                          (unsigned long long)kv->arr_len, n);
    uint32_t esz = k_vsize[kv->arr_type];
    for (uint64_t j = 0; j < kv->arr_len; j++) {
        decode_int(kv->arr_type, g->base + kv->off + j * esz, &neg, &mag);
        if (!neg && mag > (uint64_t)INT64_MAX)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "GGUF key '%s'[%llu] = %llu does not fit int64",
                              key, (unsigned long long)j, (unsigned long long)mag);
        out[j] = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    return MEMRA_OK;
}

/* ================================ writer ================================= */

typedef struct wtensor {
    char name[MEMRA_GGUF_MAX_NAME];
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[MEMRA_GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset; /* relative to the data section; set by begin() */
} wtensor;

struct memra_gguf_writer {
    memra_err err;   /* first failure; sticky (see the file comment) */
    uint8_t *meta;   /* [meta_len] serialized KV records, in the order added */
    size_t meta_len, meta_cap;
    memra_gguf_str *keys; /* [n_kv] owned copies */
    int64_t n_kv, cap_kv;
    strtab key_tab;
    wtensor *tensors;       /* [n_tensors] */
    memra_gguf_str *tnames; /* [n_tensors] owned copies */
    int64_t n_tensors, cap_tensors, cap_tnames;
    strtab tensor_tab;
    uint32_t alignment;
    FILE *f;    /* open between begin() and finish() */
    char *path; /* removed by close() unless finish() succeeded */
    int finished;
    uint64_t pos;         /* bytes written to f */
    int64_t cur;          /* tensor whose data is being streamed */
    uint64_t cur_written; /* bytes of tensor `cur` written so far */
};

#define WFAIL(w, code, ...) MEMRA_FAIL(&(w)->err, (code), __VA_ARGS__)

int memra_gguf_writer_open(memra_gguf_writer **out, memra_err *err)
{
    if (!out)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "memra_gguf_writer_open: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "no memory for a GGUF writer");
    memra_err_clear(&(*out)->err);
    (*out)->alignment = MEMRA_GGUF_DEFAULT_ALIGNMENT;
    return MEMRA_OK;
}

void memra_gguf_writer_close(memra_gguf_writer *w)
{
    if (!w)
        return;
    if (w->f) { /* not finished: the file is incomplete, do not leave it behind */
        fclose(w->f);
        unlink(w->path);
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        free((char *)w->keys[i].ptr);
    for (int64_t i = 0; i < w->n_tensors; i++)
        free((char *)w->tnames[i].ptr);
    free(w->keys);
    free(w->tnames);
    free(w->key_tab.slot);
    free(w->tensor_tab.slot);
    free(w->tensors);
    free(w->meta);
    free(w->path);
    free(w);
}

const char *memra_gguf_writer_error(const memra_gguf_writer *w)
{
    return w && w->err.code != MEMRA_OK ? w->err.msg : "";
}

/* Common entry check: sticky failure, and declarations only before begin(). */
static int w_check_declare(memra_gguf_writer *w)
{
    if (!w)
        return MEMRA_ERR_INVALID_ARG;
    if (w->err.code != MEMRA_OK)
        return w->err.code;
    if (w->f || w->finished)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "KVs and tensors must be declared before begin()");
    return MEMRA_OK;
}

static int w_put(memra_gguf_writer *w, const void *p, size_t n)
{
    if (n > w->meta_cap - w->meta_len) {
        size_t cap = w->meta_cap ? w->meta_cap : 256;
        while (cap - w->meta_len < n) {
            if (cap > SIZE_MAX / 2)
                return WFAIL(w, MEMRA_ERR_NOMEM, "metadata exceeds the address space");
            cap *= 2;
        }
        uint8_t *m = realloc(w->meta, cap);
        if (!m)
            return WFAIL(w, MEMRA_ERR_NOMEM, "no memory for %zu bytes of metadata", cap);
        w->meta = m;
        w->meta_cap = cap;
    }
    if (n)
        memcpy(w->meta + w->meta_len, p, n);
    w->meta_len += n;
    return MEMRA_OK;
}

static int w_put_u32(memra_gguf_writer *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return w_put(w, b, 4);
}

static int w_put_u64(memra_gguf_writer *w, uint64_t v)
{
    int rc = w_put_u32(w, (uint32_t)v);
    return rc == MEMRA_OK ? w_put_u32(w, (uint32_t)(v >> 32)) : rc;
}

static int w_put_str(memra_gguf_writer *w, const char *s, uint64_t len)
{
    int rc = w_put_u64(w, len);
    return rc == MEMRA_OK ? w_put(w, s, (size_t)len) : rc;
}

/* Append a copy of name to a name array (growing it) and register it in tab; refuses dups. */
static int w_add_name(memra_gguf_writer *w, memra_gguf_str **names, int64_t n, int64_t *cap,
                      strtab *tab, const char *name, const char *what)
{
    if (n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 16;
        memra_gguf_str *a = realloc(*names, (size_t)nc * sizeof *a);
        if (!a)
            return WFAIL(w, MEMRA_ERR_NOMEM, "no memory for %lld %ss", (long long)nc, what);
        *names = a;
        *cap = nc;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy || strtab_reserve(tab, *names, (uint64_t)n + 1) != 0) {
        free(copy);
        return WFAIL(w, MEMRA_ERR_NOMEM, "no memory for %s '%s'", what, name);
    }
    memcpy(copy, name, len + 1);
    (*names)[n] = (memra_gguf_str){copy, len};
    int64_t dup = strtab_insert_next(tab, *names);
    if (dup >= 0) {
        free(copy);
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "duplicate %s '%s' (first added as #%lld)", what,
                     name, (long long)dup);
    }
    return MEMRA_OK;
}

/* Start a KV record: validate and register the key, serialize key and value type. */
static int w_kv_begin(memra_gguf_writer *w, const char *key, memra_gguf_vtype type)
{
    int rc = w_check_declare(w);
    if (rc != MEMRA_OK)
        return rc;
    if (!key || !key[0])
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "empty or NULL KV key");
    if (strlen(key) > GGUF_MAX_STR)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "KV key longer than 2^30 bytes");
    if (strcmp(key, GGUF_ALIGN_KEY) == 0 && type != MEMRA_GGUF_UINT32)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "%s must be a scalar UINT32, not %s",
                     GGUF_ALIGN_KEY, memra_gguf_vtype_name(type));
    rc = w_add_name(w, &w->keys, w->n_kv, &w->cap_kv, &w->key_tab, key, "key");
    if (rc != MEMRA_OK)
        return rc;
    w->n_kv++;
    rc = w_put_str(w, key, strlen(key));
    return rc == MEMRA_OK ? w_put_u32(w, type) : rc;
}

int memra_gguf_writer_set_scalar(memra_gguf_writer *w, const char *key, memra_gguf_vtype type,
                                 const void *value)
{
    if (w && w->err.code == MEMRA_OK &&
        ((unsigned)type >= MEMRA_GGUF_VTYPE_COUNT || k_vsize[type] == 0 || !value))
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "set_scalar '%s': bad type %d or NULL value",
                     key ? key : "(null)", (int)type);
    if (w && w->err.code == MEMRA_OK && key && strcmp(key, GGUF_ALIGN_KEY) == 0 &&
        type == MEMRA_GGUF_UINT32) {
        uint32_t a;
        memcpy(&a, value, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return WFAIL(w, MEMRA_ERR_INVALID_ARG, "%s = %u is not a nonzero power of two",
                         GGUF_ALIGN_KEY, a);
        w->alignment = a;
    }
    int rc = w_kv_begin(w, key, type);
    if (rc != MEMRA_OK)
        return rc;
    const uint8_t *v = value;
    uint8_t b[8];
    for (unsigned k = 0; k < k_vsize[type]; k++) /* host order -> little-endian */
        b[k] = v[k];
    if (type == MEMRA_GGUF_BOOL)
        b[0] = b[0] != 0;
    return w_put(w, b, k_vsize[type]);
}

int memra_gguf_writer_set_u32(memra_gguf_writer *w, const char *key, uint32_t v)
{
    return memra_gguf_writer_set_scalar(w, key, MEMRA_GGUF_UINT32, &v);
}

int memra_gguf_writer_set_i32(memra_gguf_writer *w, const char *key, int32_t v)
{
    return memra_gguf_writer_set_scalar(w, key, MEMRA_GGUF_INT32, &v);
}

int memra_gguf_writer_set_u64(memra_gguf_writer *w, const char *key, uint64_t v)
{
    return memra_gguf_writer_set_scalar(w, key, MEMRA_GGUF_UINT64, &v);
}

int memra_gguf_writer_set_f32(memra_gguf_writer *w, const char *key, float v)
{
    return memra_gguf_writer_set_scalar(w, key, MEMRA_GGUF_FLOAT32, &v);
}

int memra_gguf_writer_set_bool(memra_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return memra_gguf_writer_set_scalar(w, key, MEMRA_GGUF_BOOL, &b);
}

int memra_gguf_writer_set_str(memra_gguf_writer *w, const char *key, const char *v)
{
    if (w && w->err.code == MEMRA_OK && (!v || strlen(v) > GGUF_MAX_STR))
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "set_str '%s': NULL or over-long value",
                     key ? key : "(null)");
    int rc = w_kv_begin(w, key, MEMRA_GGUF_STRING);
    return rc == MEMRA_OK ? w_put_str(w, v, strlen(v)) : rc;
}

int memra_gguf_writer_set_arr(memra_gguf_writer *w, const char *key, memra_gguf_vtype elem_type,
                              const void *data, uint64_t n)
{
    if (w && w->err.code == MEMRA_OK &&
        ((unsigned)elem_type >= MEMRA_GGUF_VTYPE_COUNT || k_vsize[elem_type] == 0 ||
         n > GGUF_MAX_ARR || (n && !data)))
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "set_arr '%s': element type %d must be a scalar type, count %llu <= 2^30, "
                     "data non-NULL",
                     key ? key : "(null)", (int)elem_type, (unsigned long long)n);
    int rc = w_kv_begin(w, key, MEMRA_GGUF_ARRAY);
    if (rc == MEMRA_OK)
        rc = w_put_u32(w, elem_type);
    if (rc == MEMRA_OK)
        rc = w_put_u64(w, n);
    /* n <= 2^30 and elements <= 8 bytes: no overflow */
    return rc == MEMRA_OK ? w_put(w, data, (size_t)(n * k_vsize[elem_type])) : rc;
}

int memra_gguf_writer_set_str_arr_lens(memra_gguf_writer *w, const char *key,
                                       const char *const *v, const uint64_t *lens, uint64_t n)
{
    int bad = n > GGUF_MAX_ARR || (n && !v);
    for (uint64_t j = 0; !bad && j < n; j++)
        bad = !v[j] || (lens && lens[j] > GGUF_MAX_STR) || (!lens && strlen(v[j]) > GGUF_MAX_STR);
    if (w && w->err.code == MEMRA_OK && bad)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "set_str_arr '%s': count %llu > 2^30, NULL element or element > 2^30 bytes",
                     key ? key : "(null)", (unsigned long long)n);
    int rc = w_kv_begin(w, key, MEMRA_GGUF_ARRAY);
    if (rc == MEMRA_OK)
        rc = w_put_u32(w, MEMRA_GGUF_STRING);
    if (rc == MEMRA_OK)
        rc = w_put_u64(w, n);
    for (uint64_t j = 0; rc == MEMRA_OK && j < n; j++)
        rc = w_put_str(w, v[j], lens ? lens[j] : strlen(v[j]));
    return rc;
}

int memra_gguf_writer_set_str_arr(memra_gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n)
{
    return memra_gguf_writer_set_str_arr_lens(w, key, v, NULL, n);
}

/* Shape and size rules of the reader (dims >= 1, ne[0] % block, sizes checked by division). */
static int w_tensor_size(memra_gguf_writer *w, const char *name, const memra_qtype_info *q,
                         uint32_t n_dims, const int64_t *ne, uint64_t *nbytes)
{
    uint64_t count = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return WFAIL(w, MEMRA_ERR_INVALID_ARG, "tensor '%s': ne[%u] = %lld must be >= 1",
                         name, d, (long long)ne[d]);
        if ((uint64_t)ne[d] > (uint64_t)INT64_MAX / count)
            return WFAIL(w, MEMRA_ERR_INVALID_ARG, "tensor '%s': element count overflows", name);
        count *= (uint64_t)ne[d];
    }
    uint64_t ne0 = n_dims ? (uint64_t)ne[0] : 1;
    if (ne0 % q->block_elems != 0)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "tensor '%s': ne[0] = %llu is not a multiple of the %s block (%u)", name,
                     (unsigned long long)ne0, q->name, q->block_elems);
    uint64_t rows = count / ne0, blocks = ne0 / q->block_elems;
    if (blocks > UINT64_MAX / q->block_bytes || blocks * q->block_bytes > UINT64_MAX / rows)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "tensor '%s': byte size overflows", name);
    *nbytes = blocks * q->block_bytes * rows;
    return MEMRA_OK;
}

int memra_gguf_writer_add_tensor(memra_gguf_writer *w, const char *name, memra_qtype type,
                                 uint32_t n_dims, const int64_t *ne)
{
    int rc = w_check_declare(w);
    if (rc != MEMRA_OK)
        return rc;
    const memra_qtype_info *q = memra_qtype_get((uint32_t)type);
    if (!name || strlen(name) >= MEMRA_GGUF_MAX_NAME || !q || n_dims > MEMRA_GGUF_MAX_DIMS ||
        (n_dims && !ne))
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "tensor '%.80s': name must be < %d bytes, type %d valid, n_dims %u <= %d",
                     name ? name : "(null)", MEMRA_GGUF_MAX_NAME, (int)type, n_dims,
                     MEMRA_GGUF_MAX_DIMS);
    wtensor t = {.type = (uint32_t)type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    MEMRA_TRY(w_tensor_size(w, name, q, n_dims, ne, &t.nbytes));
    for (uint32_t d = 0; d < n_dims; d++)
        t.ne[d] = ne[d];
    memcpy(t.name, name, strlen(name) + 1);
    if (w->n_tensors == w->cap_tensors) {
        int64_t nc = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor *a = realloc(w->tensors, (size_t)nc * sizeof *a);
        if (!a)
            return WFAIL(w, MEMRA_ERR_NOMEM, "no memory for %lld tensors", (long long)nc);
        w->tensors = a;
        w->cap_tensors = nc;
    }
    MEMRA_TRY(w_add_name(w, &w->tnames, w->n_tensors, &w->cap_tnames, &w->tensor_tab, name,
                         "tensor"));
    w->tensors[w->n_tensors++] = t;
    return MEMRA_OK;
fail:
    return rc;
}

static int w_file_write(memra_gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return WFAIL(w, MEMRA_ERR_IO, "write '%s' at offset %llu: %s", w->path,
                     (unsigned long long)w->pos, strerror(errno));
    w->pos += n;
    return MEMRA_OK;
}

static int w_file_pad(memra_gguf_writer *w)
{
    static const uint8_t zeros[256];
    while (w->pos % w->alignment != 0) {
        uint64_t gap = w->alignment - w->pos % w->alignment;
        int rc = w_file_write(w, zeros, gap < sizeof zeros ? (size_t)gap : sizeof zeros);
        if (rc != MEMRA_OK)
            return rc;
    }
    return MEMRA_OK;
}

/* Assign data offsets: each tensor starts at the previous one's end padded to ALIGN. */
static int w_layout(memra_gguf_writer *w)
{
    uint64_t off = 0, a = w->alignment;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        if (t->nbytes > UINT64_MAX - off - (a - 1) || off > UINT64_MAX - a)
            return WFAIL(w, MEMRA_ERR_INVALID_ARG, "data section overflows at tensor '%s'",
                         t->name);
        t->offset = off;
        off += (t->nbytes + a - 1) / a * a;
    }
    return MEMRA_OK;
}

/* Header, KVs and tensor infos (serialized after the KVs in the meta buffer, then written). */
static int w_write_head(memra_gguf_writer *w)
{
    uint8_t h[GGUF_HEADER_BYTES] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    for (int k = 0; k < 8; k++) {
        h[8 + k] = (uint8_t)((uint64_t)w->n_tensors >> (8 * k));
        h[16 + k] = (uint8_t)((uint64_t)w->n_kv >> (8 * k));
    }
    size_t kv_len = w->meta_len;
    int rc = MEMRA_OK;
    for (int64_t i = 0; i < w->n_tensors && rc == MEMRA_OK; i++) {
        const wtensor *t = &w->tensors[i];
        rc = w_put_str(w, t->name, strlen(t->name));
        if (rc == MEMRA_OK)
            rc = w_put_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && rc == MEMRA_OK; d++)
            rc = w_put_u64(w, (uint64_t)t->ne[d]);
        if (rc == MEMRA_OK)
            rc = w_put_u32(w, t->type);
        if (rc == MEMRA_OK)
            rc = w_put_u64(w, t->offset);
    }
    if (rc == MEMRA_OK)
        rc = w_file_write(w, h, sizeof h);
    if (rc == MEMRA_OK)
        rc = w_file_write(w, w->meta, w->meta_len);
    w->meta_len = kv_len; /* drop the infos again: begin() runs once */
    return rc == MEMRA_OK ? w_file_pad(w) : rc;
}

int memra_gguf_writer_begin(memra_gguf_writer *w, const char *path)
{
    int rc = w_check_declare(w);
    if (rc != MEMRA_OK)
        return rc;
    if (!path)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "begin: path is NULL");
    MEMRA_TRY(w_layout(w));
    w->path = strdup(path);
    if (!w->path)
        return WFAIL(w, MEMRA_ERR_NOMEM, "no memory for the path");
    w->f = fopen(path, "wb");
    if (!w->f)
        return WFAIL(w, MEMRA_ERR_IO, "create '%s': %s", path, strerror(errno));
    MEMRA_TRY(w_write_head(w));
    return MEMRA_OK;
fail:
    return rc;
}

int memra_gguf_writer_write(memra_gguf_writer *w, const void *data, size_t nbytes)
{
    if (!w)
        return MEMRA_ERR_INVALID_ARG;
    if (w->err.code != MEMRA_OK)
        return w->err.code;
    if (!w->f)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "write before begin() or after finish()");
    if (nbytes == 0)
        return MEMRA_OK;
    if (w->cur >= w->n_tensors)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "write of %zu bytes after the last tensor", nbytes);
    const wtensor *t = &w->tensors[w->cur];
    if (!data || nbytes > t->nbytes - w->cur_written)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "write of %zu bytes exceeds tensor %lld '%s' (%llu of %llu bytes written)",
                     nbytes, (long long)w->cur, t->name, (unsigned long long)w->cur_written,
                     (unsigned long long)t->nbytes);
    int rc = w_file_write(w, data, nbytes);
    if (rc != MEMRA_OK)
        return rc;
    w->cur_written += nbytes;
    if (w->cur_written == t->nbytes) {
        w->cur++;
        w->cur_written = 0;
        return w_file_pad(w);
    }
    return MEMRA_OK;
}

int memra_gguf_writer_finish(memra_gguf_writer *w)
{
    if (!w)
        return MEMRA_ERR_INVALID_ARG;
    if (w->err.code != MEMRA_OK)
        return w->err.code;
    if (!w->f)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG, "finish before begin() or twice");
    if (w->cur < w->n_tensors)
        return WFAIL(w, MEMRA_ERR_INVALID_ARG,
                     "finish with tensor %lld '%s' incomplete (%llu of %llu bytes written)",
                     (long long)w->cur, w->tensors[w->cur].name,
                     (unsigned long long)w->cur_written,
                     (unsigned long long)w->tensors[w->cur].nbytes);
    int bad = fflush(w->f) != 0 || ferror(w->f);
    int e = errno;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) {
        unlink(w->path);
        return WFAIL(w, MEMRA_ERR_IO, "finish '%s': %s", w->path, strerror(e ? e : errno));
    }
    w->finished = 1;
    return MEMRA_OK;
}
