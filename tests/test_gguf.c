/*
 * test_gguf.c — the GGUF reader and writer (runtime/gguf.c) against spec/gguf-and-quants.md §1.
 *
 * Covers: the §1.7 worked example byte-for-byte; every §1.9 malformed case M01–M39 with the
 * engine's expected outcome (plus the engine-only rules: NUL in names, overlap, nested
 * arrays); truncation of a valid multi-KV multi-tensor file at every length (each prefix in
 * its own exactly-sized heap block, so ASan sees any overread); KV round trip of every value
 * type; n_dims 0..4; writer refusals; an aligned multi-tensor round trip; and a cross-check
 * with the independent Python `gguf` package (tests/py/check_gguf_compat.py).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "test_util.h"

/* ============================ byte builder ============================== */

typedef struct fb {
    uint8_t *p;
    size_t n, cap;
} fb;

static void fb_put(fb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void fb_u32(fb *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fb_put(b, x, 4);
}

static void fb_u64(fb *b, uint64_t v)
{
    fb_u32(b, (uint32_t)v);
    fb_u32(b, (uint32_t)(v >> 32));
}

static void fb_u8(fb *b, uint8_t v) { fb_put(b, &v, 1); }

static void fb_strn(fb *b, const char *s, uint64_t n)
{
    fb_u64(b, n);
    fb_put(b, s, (size_t)n);
}

static void fb_str(fb *b, const char *s) { fb_strn(b, s, strlen(s)); }

static void fb_free(fb *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ======================== §1.7 file and mutations ======================== */

/* A file under construction: header fields, serialized KVs and tensor infos, then padding
 * to `align` and `data_bytes` of data (byte k = k * 7 + 1). */
typedef struct gspec {
    char magic[4];
    uint32_t version;
    uint64_t n_tensors, n_kv;
    fb kvs, infos;
    uint32_t align;
    uint64_t data_bytes;
} gspec;

static void kv_u32(fb *b, const char *key, uint32_t v)
{
    fb_str(b, key);
    fb_u32(b, MEMRA_GGUF_UINT32);
    fb_u32(b, v);
}

static void tinfo(fb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  uint64_t off)
{
    fb_str(b, name);
    fb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        fb_u64(b, (uint64_t)ne[d]);
    fb_u32(b, type);
    fb_u64(b, off);
}

/* The §1.7 file (ne = {32}) or its {32, 2} variant, before mutation. */
static void spec_base(gspec *s, int two_rows)
{
    memset(s, 0, sizeof *s);
    memcpy(s->magic, "GGUF", 4);
    s->version = 3;
    s->n_tensors = 1;
    s->n_kv = 1;
    kv_u32(&s->kvs, "a", 123);
    int64_t ne[2] = {32, 2};
    tinfo(&s->infos, "t", two_rows ? 2 : 1, ne, MEMRA_QT_F32, 0);
    s->align = 32;
    s->data_bytes = two_rows ? 256 : 128;
}

static fb spec_build(gspec *s)
{
    fb out = {0};
    fb_put(&out, s->magic, 4);
    fb_u32(&out, s->version);
    fb_u64(&out, s->n_tensors);
    fb_u64(&out, s->n_kv);
    fb_put(&out, s->kvs.p, s->kvs.n);
    fb_put(&out, s->infos.p, s->infos.n);
    while (out.n % s->align)
        fb_u8(&out, 0);
    for (uint64_t k = 0; k < s->data_bytes; k++)
        fb_u8(&out, (uint8_t)(k * 7 + 1));
    fb_free(&s->kvs);
    fb_free(&s->infos);
    return out;
}

/* Open a copy of the bytes in an exactly-sized heap block (ASan catches any overread). */
static int open_copy(const fb *b, size_t len, memra_gguf **g, memra_err *e)
{
    uint8_t *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, b->p, len);
    memra_err_clear(e);
    int rc = memra_gguf_open_memory(copy, len, g, e);
    if (rc == MEMRA_OK) { /* walk everything while the copy is alive */
        for (int64_t i = 0; i < memra_gguf_n_kv(*g); i++)
            for (uint64_t j = 0; j < memra_gguf_kv_arr_len(*g, i); j++)
                (void)memra_gguf_kv_str(*g, i, j);
        memra_gguf_close(*g);
        *g = NULL;
    }
    free(copy);
    return rc;
}

/* ------- one builder per §1.9 case (engine column); ids in the table below ------- */

static void m_magic(gspec *s) { memcpy(s->magic, "GGUG", 4); }
static void m_ver0(gspec *s) { s->version = 0; }
static void m_ver1(gspec *s) { s->version = 1; }
static void m_ver4(gspec *s) { s->version = 4; }
static void m_ver_swapped(gspec *s) { s->version = 0x03000000u; }
static void m_ver2(gspec *s) { s->version = 2; }
static void m_nt_max(gspec *s) { s->n_tensors = UINT64_MAX; }
static void m_nkv_2_62(gspec *s) { s->n_kv = 1ull << 62; }
static void m_nt_1e6(gspec *s) { s->n_tensors = 1000000; } /* on the 352-byte {32,2} file */

static void m_key_len_2_40(gspec *s)
{
    fb_free(&s->kvs);
    fb_u64(&s->kvs, 1ull << 40);
    fb_put(&s->kvs, "a", 1);
    fb_u32(&s->kvs, MEMRA_GGUF_UINT32);
    fb_u32(&s->kvs, 123);
}

static void m_empty_key(gspec *s)
{
    fb_free(&s->kvs);
    kv_u32(&s->kvs, "", 123);
}

static void m_dup_key(gspec *s)
{
    kv_u32(&s->kvs, "a", 7);
    s->n_kv = 2;
}

static void m_vtype(gspec *s, uint32_t type)
{
    fb_free(&s->kvs);
    fb_str(&s->kvs, "a");
    fb_u32(&s->kvs, type);
    fb_u32(&s->kvs, 123);
}
static void m_vtype13(gspec *s) { m_vtype(s, 13); }
static void m_vtype_neg(gspec *s) { m_vtype(s, 0xFFFFFFFFu); }

static void m_arr_hdr(gspec *s, uint32_t elem, uint64_t count)
{
    fb_free(&s->kvs);
    fb_str(&s->kvs, "a");
    fb_u32(&s->kvs, MEMRA_GGUF_ARRAY);
    fb_u32(&s->kvs, elem);
    fb_u64(&s->kvs, count);
}

static void m_nested(gspec *s)
{
    m_arr_hdr(s, MEMRA_GGUF_ARRAY, 1);
    fb_u32(&s->kvs, MEMRA_GGUF_UINT8); /* inner array as gguf-py encodes it */
    fb_u64(&s->kvs, 1);
    fb_u8(&s->kvs, 5);
}

static void m_u8_arr_2_40(gspec *s) { m_arr_hdr(s, MEMRA_GGUF_UINT8, 1ull << 40); }

static void m_str_arr_2_29(gspec *s)
{
    m_arr_hdr(s, MEMRA_GGUF_STRING, 1ull << 29);
    fb_str(&s->kvs, "x");
    fb_free(&s->infos); /* the file ends here */
    s->n_tensors = 0;
    s->data_bytes = 0;
    s->align = 1;
}

static void m_str_1000(gspec *s) /* 46-byte file */
{
    fb_free(&s->kvs);
    fb_str(&s->kvs, "a");
    fb_u32(&s->kvs, MEMRA_GGUF_STRING);
    fb_u64(&s->kvs, 1000);
    fb_u8(&s->kvs, 'x');
    fb_free(&s->infos);
    s->n_tensors = 0;
    s->data_bytes = 0;
    s->align = 1;
}

static void m_u8_arr_empty(gspec *s) { m_arr_hdr(s, MEMRA_GGUF_UINT8, 0); }

static void m_bool2(gspec *s)
{
    fb_free(&s->kvs);
    fb_str(&s->kvs, "a");
    fb_u32(&s->kvs, MEMRA_GGUF_BOOL);
    fb_u8(&s->kvs, 2);
}

static void m_align_val(gspec *s, uint32_t a, uint32_t pad_to)
{
    kv_u32(&s->kvs, "general.alignment", a);
    s->n_kv = 2;
    s->align = pad_to;
}
static void m_align123(gspec *s) { m_align_val(s, 123, 32); }
static void m_align0(gspec *s) { m_align_val(s, 0, 32); }
static void m_align64(gspec *s) { m_align_val(s, 64, 64); }
static void m_align1(gspec *s) { m_align_val(s, 1, 1); }

static void m_align_typed(gspec *s, uint32_t type, int width)
{
    fb_str(&s->kvs, "general.alignment");
    fb_u32(&s->kvs, type);
    if (width == 8)
        fb_u64(&s->kvs, 32);
    else
        fb_u32(&s->kvs, 32);
    s->n_kv = 2;
}
static void m_align_i32(gspec *s) { m_align_typed(s, MEMRA_GGUF_INT32, 4); }
static void m_align_u64(gspec *s) { m_align_typed(s, MEMRA_GGUF_UINT64, 8); }

static void m_align_arr(gspec *s)
{
    fb_str(&s->kvs, "general.alignment");
    fb_u32(&s->kvs, MEMRA_GGUF_ARRAY);
    fb_u32(&s->kvs, MEMRA_GGUF_UINT32);
    fb_u64(&s->kvs, 1);
    fb_u32(&s->kvs, 32);
    s->n_kv = 2;
}

static void m_name_len(gspec *s, size_t len)
{
    char name[80];
    memset(name, 'n', len);
    name[len] = '\0';
    fb_free(&s->infos);
    int64_t ne[1] = {32};
    tinfo(&s->infos, name, 1, ne, MEMRA_QT_F32, 0);
}
static void m_name64(gspec *s) { m_name_len(s, 64); }
static void m_name63(gspec *s) { m_name_len(s, 63); }

static void m_one_tensor(gspec *s, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1,
                         uint32_t type, uint64_t off)
{
    fb_free(&s->infos);
    int64_t ne[5] = {ne0, ne1, 1, 1, 1};
    tinfo(&s->infos, name, n_dims, ne, type, off);
}

static void m_dup_tensor(gspec *s) /* {32,2}-sized data: two {32} tensors named "t" */
{
    int64_t ne[1] = {32};
    fb_free(&s->infos);
    tinfo(&s->infos, "t", 1, ne, MEMRA_QT_F32, 0);
    tinfo(&s->infos, "t", 1, ne, MEMRA_QT_F32, 128);
    s->n_tensors = 2;
}
static void m_ndims5(gspec *s) { m_one_tensor(s, "t", 5, 32, 1, MEMRA_QT_F32, 0); }
static void m_ne0_neg(gspec *s) { m_one_tensor(s, "t", 1, -32, 1, MEMRA_QT_F32, 0); }
static void m_ne1_zero(gspec *s) { m_one_tensor(s, "t", 2, 32, 0, MEMRA_QT_F32, 0); }
static void m_ne0_zero(gspec *s) { m_one_tensor(s, "t", 1, 0, 1, MEMRA_QT_F32, 0); }
static void m_ne_huge(gspec *s) { m_one_tensor(s, "t", 2, 1ll << 40, 1ll << 40, MEMRA_QT_F32, 0); }
static void m_type41(gspec *s) { m_one_tensor(s, "t", 1, 32, 1, 41, 0); }
static void m_type4(gspec *s) { m_one_tensor(s, "t", 1, 32, 1, 4, 0); }
static void m_q4_0_33(gspec *s) { m_one_tensor(s, "t", 1, 33, 1, MEMRA_QT_Q4_0, 0); }
static void m_q4_k_32(gspec *s) { m_one_tensor(s, "t", 1, 32, 1, MEMRA_QT_Q4_K, 0); }
static void m_off1(gspec *s) { m_one_tensor(s, "t", 1, 32, 1, MEMRA_QT_F32, 1); }
static void m_off32(gspec *s) { m_one_tensor(s, "t", 1, 32, 1, MEMRA_QT_F32, 32); }

static void m_two(gspec *s, uint64_t off0, uint64_t off1) /* on the {32,2} file: 256 B data */
{
    int64_t ne[1] = {32};
    fb_free(&s->infos);
    tinfo(&s->infos, "t0", 1, ne, MEMRA_QT_F32, off0);
    tinfo(&s->infos, "t1", 1, ne, MEMRA_QT_F32, off1);
    s->n_tensors = 2;
}
static void m_gap(gspec *s) { m_two(s, 0, 160); }
static void m_out_of_order(gspec *s) { m_two(s, 128, 0); }
static void m_overlap(gspec *s) { m_two(s, 0, 96); }
static void m_trunc1(gspec *s) { s->data_bytes -= 1; } /* the file is 1 byte short */

static void m_pad_missing(gspec *s) /* F32 {4} = 16 B; its 16 B of trailing pad absent */
{
    m_one_tensor(s, "t", 1, 4, 1, MEMRA_QT_F32, 0);
    s->data_bytes = 16;
}

static void m_empty_file(gspec *s)
{
    fb_free(&s->kvs);
    fb_free(&s->infos);
    s->n_kv = s->n_tensors = 0;
    s->data_bytes = 0;
    s->align = 1;
}

static void m_scalar(gspec *s) /* n_dims 0: one F32 */
{
    m_one_tensor(s, "t", 0, 1, 1, MEMRA_QT_F32, 0);
    s->data_bytes = 4;
}
static void m_empty_name(gspec *s) { m_one_tensor(s, "", 1, 32, 1, MEMRA_QT_F32, 0); }

static void m_name_nul(gspec *s)
{
    fb_free(&s->infos);
    fb_strn(&s->infos, "t\0u", 3);
    fb_u32(&s->infos, 1);
    fb_u64(&s->infos, 32);
    fb_u32(&s->infos, MEMRA_QT_F32);
    fb_u64(&s->infos, 0);
}

typedef struct mcase {
    const char *id;
    void (*mutate)(gspec *s);
    int two_rows; /* start from the {32, 2} variant */
    int code;     /* MEMRA_OK = accept */
    const char *msg_has;
} mcase;

static const mcase k_cases[] = {
    {"M01 magic GGUG", m_magic, 0, MEMRA_ERR_FORMAT, "bad magic"},
    {"M02 version 0", m_ver0, 0, MEMRA_ERR_FORMAT, "version 0"},
    {"M03 version 1", m_ver1, 0, MEMRA_ERR_UNSUPPORTED, "version 1"},
    {"M04 version 4", m_ver4, 0, MEMRA_ERR_UNSUPPORTED, "version 4"},
    {"M05 byte-swapped version", m_ver_swapped, 0, MEMRA_ERR_UNSUPPORTED, "byte-swapped"},
    {"M06 version 2", m_ver2, 0, MEMRA_OK, NULL},
    {"M07 n_tensors all ones", m_nt_max, 0, MEMRA_ERR_FORMAT, "n_tensors"},
    {"M08 n_kv 2^62", m_nkv_2_62, 0, MEMRA_ERR_FORMAT, "n_kv 4611686018427387904"},
    {"M09 n_tensors 1e6 in 352 B", m_nt_1e6, 1, MEMRA_ERR_FORMAT, "n_tensors 1000000"},
    {"M10 key length 2^40", m_key_len_2_40, 0, MEMRA_ERR_FORMAT, "key length 1099511627776"},
    {"M11 empty key", m_empty_key, 0, MEMRA_ERR_FORMAT, "empty key at offset 24"},
    {"M12 duplicate key", m_dup_key, 0, MEMRA_ERR_FORMAT, "duplicate key"},
    {"M13 value type 13", m_vtype13, 0, MEMRA_ERR_FORMAT, "unknown value type 13"},
    {"M13 value type -1", m_vtype_neg, 0, MEMRA_ERR_FORMAT, "unknown value type 4294967295"},
    {"M14 array of arrays", m_nested, 0, MEMRA_ERR_UNSUPPORTED, "nested array"},
    {"M15 u8 array count 2^40", m_u8_arr_2_40, 0, MEMRA_ERR_FORMAT, "array count 1099511627776"},
    {"M16 string array 2^29, EOF", m_str_arr_2_29, 0, MEMRA_ERR_FORMAT, "array count 536870912"},
    {"M17 string length 1000 in 46 B", m_str_1000, 0, MEMRA_ERR_FORMAT, "length 1000"},
    {"M18 u8 array count 0", m_u8_arr_empty, 0, MEMRA_OK, NULL},
    {"M19 bool byte 2", m_bool2, 0, MEMRA_OK, NULL},
    {"M20 alignment 123", m_align123, 0, MEMRA_ERR_FORMAT, "power of two"},
    {"M20 alignment 0", m_align0, 0, MEMRA_ERR_FORMAT, "power of two"},
    {"M21 alignment INT32", m_align_i32, 0, MEMRA_ERR_FORMAT, "type INT32"},
    {"M21 alignment UINT64", m_align_u64, 0, MEMRA_ERR_FORMAT, "type UINT64"},
    {"M22 alignment 1-element array", m_align_arr, 0, MEMRA_ERR_FORMAT, "type ARRAY"},
    {"M23 alignment 64", m_align64, 1, MEMRA_OK, NULL},
    {"M23 alignment 1", m_align1, 1, MEMRA_OK, NULL},
    {"M24 name 64 bytes", m_name64, 0, MEMRA_ERR_FORMAT, "is 64 bytes"},
    {"M24 name 63 bytes", m_name63, 0, MEMRA_OK, NULL},
    {"M25 duplicate tensor name", m_dup_tensor, 1, MEMRA_ERR_FORMAT, "duplicate name"},
    {"M26 n_dims 5", m_ndims5, 0, MEMRA_ERR_FORMAT, "n_dims 5"},
    {"M27 ne0 -32", m_ne0_neg, 0, MEMRA_ERR_FORMAT, "ne[0] = -32"},
    {"M28 ne1 0", m_ne1_zero, 0, MEMRA_ERR_FORMAT, "ne[1] = 0"},
    {"M29 ne0 0", m_ne0_zero, 0, MEMRA_ERR_FORMAT, "ne[0] = 0"},
    {"M30 ne 2^40 x 2^40", m_ne_huge, 0, MEMRA_ERR_FORMAT, "overflows"},
    {"M31 type 41", m_type41, 0, MEMRA_ERR_UNSUPPORTED, "unknown type id 41"},
    {"M31 type 4", m_type4, 0, MEMRA_ERR_FORMAT, "removed type id 4"},
    {"M32 Q4_0 ne0 33", m_q4_0_33, 0, MEMRA_ERR_FORMAT, "q4_0 block"},
    {"M32 Q4_K ne0 32", m_q4_k_32, 0, MEMRA_ERR_FORMAT, "q4_K block"},
    {"M33 offset 1", m_off1, 0, MEMRA_ERR_FORMAT, "not a multiple of the alignment"},
    {"M33 offset 32", m_off32, 0, MEMRA_ERR_FORMAT, "past the end"},
    {"M34 gap pushes tensor past EOF", m_gap, 1, MEMRA_ERR_FORMAT, "tensor 1 't1'"},
    {"M34 out of data order (engine: accept)", m_out_of_order, 1, MEMRA_OK, NULL},
    {"M34 overlap (engine rule)", m_overlap, 1, MEMRA_ERR_FORMAT, "overlaps"},
    {"M35 truncated by 1 byte", m_trunc1, 0, MEMRA_ERR_FORMAT, "past the end"},
    {"M36 trailing pad missing", m_pad_missing, 0, MEMRA_OK, NULL},
    {"M37 data short by 1 byte", m_trunc1, 1, MEMRA_ERR_FORMAT, "past the end"},
    {"M38 24-byte file", m_empty_file, 0, MEMRA_OK, NULL},
    {"M39 n_dims 0 scalar", m_scalar, 0, MEMRA_OK, NULL},
    {"M39 empty tensor name", m_empty_name, 0, MEMRA_OK, NULL},
    {"engine: NUL in tensor name", m_name_nul, 0, MEMRA_ERR_FORMAT, "NUL byte"},
};

START_TEST(test_malformed_cases)
{
    const mcase *c = &k_cases[_i];
    gspec s;
    spec_base(&s, c->two_rows);
    c->mutate(&s);
    fb f = spec_build(&s);
    memra_gguf *g = NULL;
    memra_err e;
    int rc = open_copy(&f, f.n, &g, &e);
    ck_assert_msg(rc == c->code, "%s: rc %d (%s), want %d", c->id, rc, e.msg, c->code);
    if (c->msg_has)
        ck_assert_msg(strstr(e.msg, c->msg_has), "%s: message '%s' lacks '%s'", c->id, e.msg,
                      c->msg_has);
    ck_assert_ptr_null(g);
    fb_free(&f);
}
END_TEST

/* Accepted cases whose values the spec pins (M09 size, M18, M19, M23, M38, M39). */
START_TEST(test_accepted_case_values)
{
    gspec s;
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);

    spec_base(&s, 1);
    fb f = spec_build(&s);
    ck_assert_uint_eq(f.n, 352); /* M09 runs on this 352-byte file */
    fb_free(&f);

    struct { void (*m)(gspec *); uint64_t data_start, size; } al[] = {
        {m_align64, 128, 384}, {m_align1, 115, 371}};
    for (int k = 0; k < 2; k++) {
        spec_base(&s, 1);
        al[k].m(&s);
        f = spec_build(&s);
        ck_assert_uint_eq(f.n, al[k].size);
        ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
        ck_assert_uint_eq(memra_gguf_data_offset(g), al[k].data_start);
        ck_assert_ptr_eq(memra_gguf_tensor_at(g, 0)->data, f.p + al[k].data_start);
        memra_gguf_close(g);
        fb_free(&f);
    }

    spec_base(&s, 0);
    m_bool2(&s);
    f = spec_build(&s);
    ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
    int b = 0;
    ck_assert_int_eq(memra_gguf_get_bool(g, "a", &b, &e), MEMRA_OK);
    ck_assert_int_eq(b, 1); /* any nonzero byte is true (§1.3) */
    memra_gguf_close(g);
    fb_free(&f);

    spec_base(&s, 0);
    m_u8_arr_empty(&s);
    f = spec_build(&s);
    ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_kv_type(g, 0), MEMRA_GGUF_ARRAY);
    ck_assert_int_eq(memra_gguf_kv_arr_type(g, 0), MEMRA_GGUF_UINT8);
    ck_assert_uint_eq(memra_gguf_kv_arr_len(g, 0), 0);
    memra_gguf_close(g);
    fb_free(&f);

    spec_base(&s, 0);
    m_empty_file(&s);
    f = spec_build(&s);
    ck_assert_uint_eq(f.n, 24);
    ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_n_kv(g), 0);
    ck_assert_int_eq(memra_gguf_n_tensors(g), 0);
    memra_gguf_close(g);
    fb_free(&f);

    spec_base(&s, 0);
    m_scalar(&s);
    f = spec_build(&s);
    ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
    const memra_gguf_tensor *t = memra_gguf_tensor_at(g, 0);
    ck_assert_uint_eq(t->n_dims, 0);
    ck_assert_uint_eq(t->nbytes, 4);
    ck_assert(t->ne[0] == 1 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1);
    memra_gguf_close(g);
    fb_free(&f);
}
END_TEST

/* Short files, every header length below 24 and the empty buffer. */
START_TEST(test_short_files)
{
    gspec s;
    spec_base(&s, 0);
    fb f = spec_build(&s);
    memra_gguf *g = (memra_gguf *)&s; /* must be reset to NULL on failure */
    memra_err e;
    for (size_t len = 0; len < 24; len++) {
        ck_assert_int_eq(open_copy(&f, len, &g, &e), MEMRA_ERR_FORMAT);
        ck_assert_ptr_null(g);
        ck_assert_ptr_nonnull(strstr(e.msg, "shorter than the 24-byte header"));
    }
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_open_memory(NULL, 0, &g, &e), MEMRA_ERR_FORMAT);
    fb_free(&f);
}
END_TEST

/* ============================ worked example ============================ */

static const uint8_t k_example_head[96] = {
    0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0,      /* magic, version 3 */
    1, 0, 0, 0, 0, 0, 0, 0,                  /* n_tensors = 1 */
    1, 0, 0, 0, 0, 0, 0, 0,                  /* n_kv = 1 */
    1, 0, 0, 0, 0, 0, 0, 0, 0x61,            /* key "a" */
    4, 0, 0, 0, 0x7B, 0, 0, 0,               /* UINT32 123 */
    1, 0, 0, 0, 0, 0, 0, 0, 0x74,            /* name "t" */
    1, 0, 0, 0,                              /* n_dims 1 */
    0x20, 0, 0, 0, 0, 0, 0, 0,               /* ne0 = 32 */
    0, 0, 0, 0,                              /* F32 */
    0, 0, 0, 0, 0, 0, 0, 0,                  /* offset 0 */
    /* 74..95: 22 zero bytes of padding */
};

static fb read_file(const char *path)
{
    fb b = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fb_put(&b, buf, n);
    fclose(f);
    return b;
}

START_TEST(test_worked_example)
{
    float data[32]; /* [32] */
    for (int k = 0; k < 32; k++)
        data[k] = (float)k - 3.5f;
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_gguf_writer *w;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_writer_open(&w, &e), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_set_u32(w, "a", 123), MEMRA_OK);
    int64_t ne[1] = {32};
    ck_assert_int_eq(memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 1, ne), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_write(w, data, sizeof data), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);

    fb f = read_file(path);
    ck_assert_uint_eq(f.n, 224);
    ck_assert_int_eq(memcmp(f.p, k_example_head, 96), 0);
    ck_assert_int_eq(memcmp(f.p + 96, data, 128), 0);

    memra_gguf *g;
    ck_assert_int_eq(memra_gguf_open(path, &g, &e), MEMRA_OK);
    ck_assert_uint_eq(memra_gguf_version(g), 3);
    ck_assert_uint_eq(memra_gguf_alignment(g), 32);
    ck_assert_uint_eq(memra_gguf_data_offset(g), 96);
    uint32_t a = 0;
    ck_assert_int_eq(memra_gguf_get_u32(g, "a", &a, &e), MEMRA_OK);
    ck_assert_uint_eq(a, 123);
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, "t");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->nbytes, 128);
    ck_assert_int_eq(memcmp(t->data, data, 128), 0);
    size_t sz;
    ck_assert_ptr_eq(t->data, (const uint8_t *)memra_gguf_file_data(g, &sz) + 96);
    ck_assert_uint_eq(sz, 224);
    memra_gguf_close(g);
    fb_free(&f);
    unlink(path);
}
END_TEST

/* ========================== multi-tensor writer ========================== */

/* Deterministic content of tensor i, byte k (shared with tests/py/check_gguf_compat.py). */
static uint8_t pattern_byte(int i, uint64_t k) { return (uint8_t)(i * 37 + k * 11 + 5); }

typedef struct tdesc {
    const char *name;
    memra_qtype type;
    uint32_t n_dims;
    int64_t ne[4];
} tdesc;

/* The compat file: shared with check_gguf_compat.py (keep both in sync). */
static const tdesc k_compat_tensors[] = {
    {"tok_embd.weight", MEMRA_QT_F32, 2, {8, 3, 1, 1}},
    {"blk.0.attn_q.weight", MEMRA_QT_F16, 2, {16, 2, 1, 1}},
    {"blk.0.ffn_up.weight", MEMRA_QT_Q8_0, 2, {64, 2, 1, 1}},
    {"blk.0.ffn_down.weight", MEMRA_QT_Q4_K, 2, {256, 1, 1, 1}},
    {"output_norm.weight", MEMRA_QT_F32, 1, {5, 1, 1, 1}},
};
#define N_COMPAT (sizeof k_compat_tensors / sizeof k_compat_tensors[0])

static uint64_t tdesc_bytes(const tdesc *t)
{
    const memra_qtype_info *q = memra_qtype_get(t->type);
    return (uint64_t)t->ne[0] / q->block_elems * q->block_bytes * (uint64_t)t->ne[1] *
           (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

/* Stream every tensor's pattern in chunks of `chunk` bytes. */
static void write_patterns(memra_gguf_writer *w, const tdesc *ts, size_t n, size_t chunk)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = tdesc_bytes(&ts[i]);
        uint8_t *buf = malloc(nb);
        for (uint64_t k = 0; k < nb; k++)
            buf[k] = pattern_byte((int)i, k);
        for (uint64_t k = 0; k < nb; k += chunk)
            ck_assert_int_eq(memra_gguf_writer_write(w, buf + k, nb - k < chunk ? nb - k : chunk),
                             MEMRA_OK);
        free(buf);
    }
}

static void check_patterns(const memra_gguf *g, const tdesc *ts, size_t n, uint32_t align)
{
    ck_assert_int_eq(memra_gguf_n_tensors(g), (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_find_tensor(g, ts[i].name);
        ck_assert_msg(t != NULL, "tensor %s missing", ts[i].name);
        ck_assert_ptr_eq(t, memra_gguf_tensor_at(g, (int64_t)i));
        ck_assert_str_eq(t->name, ts[i].name);
        ck_assert_uint_eq(t->type, ts[i].type);
        ck_assert_uint_eq(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(t->ne[d], ts[i].ne[d]);
        ck_assert_uint_eq(t->nbytes, tdesc_bytes(&ts[i]));
        ck_assert_uint_eq(t->offset % align, 0);
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++)
            ck_assert_msg(p[k] == pattern_byte((int)i, k), "%s byte %llu: %u want %u", t->name,
                          (unsigned long long)k, p[k], pattern_byte((int)i, k));
    }
}

/* Metadata of the compat file (every scalar type, numeric and string arrays). */
static void compat_set_kvs(memra_gguf_writer *w)
{
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -((1ll << 40) + 5);
    double f64 = 0.1;
    int32_t ai32[5] = {1, -2, 3, -4, 5};
    float af32[3] = {0.5f, -1.25f, 3.0f};
    uint8_t au8[3] = {0, 1, 255};
    const char *astr[3] = {"alpha", "", "gamma \xce\xb4"};
    ck_assert_int_eq(memra_gguf_writer_set_str(w, "general.architecture", "memra-test"), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.u8", MEMRA_GGUF_UINT8, &u8), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.i8", MEMRA_GGUF_INT8, &i8), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.u16", MEMRA_GGUF_UINT16, &u16), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.i16", MEMRA_GGUF_INT16, &i16), 0);
    ck_assert_int_eq(memra_gguf_writer_set_u32(w, "test.u32", 4000000000u), 0);
    ck_assert_int_eq(memra_gguf_writer_set_i32(w, "test.i32", -2000000000), 0);
    ck_assert_int_eq(memra_gguf_writer_set_f32(w, "test.f32", 1.5f), 0);
    ck_assert_int_eq(memra_gguf_writer_set_bool(w, "test.bool", 1), 0);
    ck_assert_int_eq(memra_gguf_writer_set_str(w, "test.str", "h\xc3\xa9llo"), 0);
    ck_assert_int_eq(memra_gguf_writer_set_u64(w, "test.u64", (1ull << 40) + 3), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.i64", MEMRA_GGUF_INT64, &i64), 0);
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "test.f64", MEMRA_GGUF_FLOAT64, &f64), 0);
    ck_assert_int_eq(memra_gguf_writer_set_arr(w, "test.arr_i32", MEMRA_GGUF_INT32, ai32, 5), 0);
    ck_assert_int_eq(memra_gguf_writer_set_arr(w, "test.arr_f32", MEMRA_GGUF_FLOAT32, af32, 3), 0);
    ck_assert_int_eq(memra_gguf_writer_set_arr(w, "test.arr_u8", MEMRA_GGUF_UINT8, au8, 3), 0);
    ck_assert_int_eq(memra_gguf_writer_set_str_arr(w, "test.arr_str", astr, 3), 0);
    ck_assert_int_eq(memra_gguf_writer_set_u32(w, "general.alignment", 64), 0);
}

static void compat_check_kvs(const memra_gguf *g)
{
    memra_err e;
    memra_err_clear(&e);
    char buf[64];
    ck_assert_int_eq(memra_gguf_get_str(g, "general.architecture", buf, sizeof buf, &e), 0);
    ck_assert_str_eq(buf, "memra-test");
    static const struct { const char *key; memra_gguf_vtype type; int64_t v; } ints[] = {
        {"test.u8", MEMRA_GGUF_UINT8, 200},
        {"test.i8", MEMRA_GGUF_INT8, -100},
        {"test.u16", MEMRA_GGUF_UINT16, 60000},
        {"test.i16", MEMRA_GGUF_INT16, -30000},
        {"test.u32", MEMRA_GGUF_UINT32, 4000000000ll},
        {"test.i32", MEMRA_GGUF_INT32, -2000000000ll},
        {"test.u64", MEMRA_GGUF_UINT64, (1ll << 40) + 3},
        {"test.i64", MEMRA_GGUF_INT64, -((1ll << 40) + 5)},
        {"general.alignment", MEMRA_GGUF_UINT32, 64},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int64_t v = 0;
        int64_t i = memra_gguf_find_kv(g, ints[k].key);
        ck_assert_msg(i >= 0, "key %s missing", ints[k].key);
        ck_assert_int_eq(memra_gguf_kv_type(g, i), ints[k].type);
        ck_assert_int_eq(memra_gguf_get_i64(g, ints[k].key, &v, &e), MEMRA_OK);
        ck_assert_int_eq(v, ints[k].v);
    }
    float f = 0;
    ck_assert_int_eq(memra_gguf_get_f32(g, "test.f32", &f, &e), MEMRA_OK);
    ck_assert(f == 1.5f);
    ck_assert_int_eq(memra_gguf_get_f32(g, "test.f64", &f, &e), MEMRA_OK);
    ck_assert(f == (float)0.1);
    double d;
    memcpy(&d, memra_gguf_kv_data(g, memra_gguf_find_kv(g, "test.f64")), 8);
    ck_assert(d == 0.1);
    int b = 0;
    ck_assert_int_eq(memra_gguf_get_bool(g, "test.bool", &b, &e), MEMRA_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(memra_gguf_get_str(g, "test.str", buf, sizeof buf, &e), MEMRA_OK);
    ck_assert_str_eq(buf, "h\xc3\xa9llo");
    int64_t arr[8];
    size_t n = 0;
    ck_assert_int_eq(memra_gguf_get_i64_array(g, "test.arr_i32", arr, 8, &n, &e), MEMRA_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert(arr[0] == 1 && arr[1] == -2 && arr[4] == 5);
    ck_assert_int_eq(memra_gguf_get_i64_array(g, "test.arr_u8", arr, 8, &n, &e), MEMRA_OK);
    ck_assert(n == 3 && arr[2] == 255);
    int64_t i = memra_gguf_find_kv(g, "test.arr_f32");
    ck_assert_int_eq(memra_gguf_kv_arr_type(g, i), MEMRA_GGUF_FLOAT32);
    float af[3];
    memcpy(af, memra_gguf_kv_data(g, i), sizeof af);
    ck_assert(af[0] == 0.5f && af[1] == -1.25f && af[2] == 3.0f);
    i = memra_gguf_find_kv(g, "test.arr_str");
    ck_assert_int_eq(memra_gguf_kv_arr_type(g, i), MEMRA_GGUF_STRING);
    ck_assert_uint_eq(memra_gguf_kv_arr_len(g, i), 3);
    memra_gguf_str s = memra_gguf_kv_str(g, i, 2);
    ck_assert(s.len == 8 && memcmp(s.ptr, "gamma \xce\xb4", 8) == 0);
    ck_assert_uint_eq(memra_gguf_kv_str(g, i, 1).len, 0);
    ck_assert_ptr_null(memra_gguf_kv_str(g, i, 3).ptr);
}

static void write_compat(const char *path)
{
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    compat_set_kvs(w);
    for (size_t i = 0; i < N_COMPAT; i++)
        ck_assert_int_eq(memra_gguf_writer_add_tensor(w, k_compat_tensors[i].name,
                                                      k_compat_tensors[i].type,
                                                      k_compat_tensors[i].n_dims,
                                                      k_compat_tensors[i].ne),
                         MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    write_patterns(w, k_compat_tensors, N_COMPAT, 7); /* odd chunks: exercises appending */
    ck_assert_msg(memra_gguf_writer_finish(w) == MEMRA_OK, "%s", memra_gguf_writer_error(w));
    memra_gguf_writer_close(w);
}

START_TEST(test_multi_tensor_align64)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    write_compat(path);
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_gguf_open(path, &g, &e) == MEMRA_OK, "%s", e.msg);
    ck_assert_uint_eq(memra_gguf_alignment(g), 64);
    ck_assert_uint_eq(memra_gguf_data_offset(g) % 64, 0);
    compat_check_kvs(g);
    check_patterns(g, k_compat_tensors, N_COMPAT, 64);
    for (size_t i = 0; i < N_COMPAT; i++) /* mmap base is page-aligned: absolute alignment */
        ck_assert_uint_eq((uintptr_t)memra_gguf_tensor_at(g, (int64_t)i)->data % 64, 0);
    /* gap-free layout: tensor i+1 starts at tensor i's end padded to 64 */
    for (int64_t i = 0; i + 1 < (int64_t)N_COMPAT; i++) {
        const memra_gguf_tensor *a = memra_gguf_tensor_at(g, i), *b = memra_gguf_tensor_at(g, i + 1);
        ck_assert_uint_eq(b->offset, (a->offset + a->nbytes + 63) / 64 * 64);
    }
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

/* Every prefix of a valid file fails cleanly, except those missing only the trailing pad. */
START_TEST(test_truncation_every_length)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    write_compat(path);
    fb f = read_file(path);
    unlink(path);
    memra_gguf *g;
    memra_err e;
    ck_assert_int_eq(open_copy(&f, f.n, &g, &e), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_open_memory(f.p, f.n, &g, &e), MEMRA_OK);
    uint64_t end = 0;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        uint64_t te = memra_gguf_data_offset(g) + t->offset + t->nbytes;
        end = te > end ? te : end;
    }
    memra_gguf_close(g);
    ck_assert_uint_lt(end, f.n); /* the last tensor (20 B) has trailing pad to cut */
    for (size_t len = 0; len < f.n; len++) {
        int rc = open_copy(&f, len, &g, &e);
        if (len >= end)
            ck_assert_msg(rc == MEMRA_OK, "len %zu (pad only): %s", len, e.msg);
        else
            ck_assert_msg(rc == MEMRA_ERR_FORMAT && e.msg[0], "len %zu: rc %d", len, rc);
    }
    fb_free(&f);
}
END_TEST

/* ============================ KV round trip ============================= */

START_TEST(test_kv_roundtrip_all_types)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    compat_set_kvs(w);
    /* per element type: a 3-element array of distinct bit patterns, and an empty array */
    uint8_t raw[24];
    for (int k = 0; k < 24; k++)
        raw[k] = (uint8_t)(k * 29 + 3);
    static const memra_gguf_vtype scalars[] = {
        MEMRA_GGUF_UINT8, MEMRA_GGUF_INT8, MEMRA_GGUF_UINT16, MEMRA_GGUF_INT16,
        MEMRA_GGUF_UINT32, MEMRA_GGUF_INT32, MEMRA_GGUF_FLOAT32, MEMRA_GGUF_BOOL,
        MEMRA_GGUF_UINT64, MEMRA_GGUF_INT64, MEMRA_GGUF_FLOAT64};
    const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 8, 8};
    uint8_t bools[3] = {0, 1, 1};
    char key[64];
    for (size_t t = 0; t < 11; t++) {
        snprintf(key, sizeof key, "arr.%s", memra_gguf_vtype_name(scalars[t]));
        ck_assert_int_eq(memra_gguf_writer_set_arr(w, key, scalars[t],
                                                   scalars[t] == MEMRA_GGUF_BOOL ? bools : raw, 3),
                         MEMRA_OK);
        snprintf(key, sizeof key, "empty.%s", memra_gguf_vtype_name(scalars[t]));
        ck_assert_int_eq(memra_gguf_writer_set_arr(w, key, scalars[t], NULL, 0), MEMRA_OK);
    }
    const char *bytes[3] = {"a\0b", "", "\xff"};
    const uint64_t lens[3] = {3, 0, 1};
    ck_assert_int_eq(memra_gguf_writer_set_str_arr_lens(w, "arr.bytes", bytes, lens, 3), 0);
    ck_assert_int_eq(memra_gguf_writer_set_str_arr(w, "empty.STRING", NULL, 0), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);

    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_gguf_open(path, &g, &e) == MEMRA_OK, "%s", e.msg);
    compat_check_kvs(g);
    ck_assert_int_eq(memra_gguf_n_kv(g), 18 + 22 + 2);
    /* KVs come back in the order added */
    ck_assert_int_eq(memra_gguf_find_kv(g, "general.architecture"), 0);
    ck_assert_int_eq(memra_gguf_find_kv(g, "empty.STRING"), 41);
    for (size_t t = 0; t < 11; t++) {
        snprintf(key, sizeof key, "arr.%s", memra_gguf_vtype_name(scalars[t]));
        int64_t i = memra_gguf_find_kv(g, key);
        ck_assert_int_eq(memra_gguf_kv_arr_type(g, i), scalars[t]);
        ck_assert_uint_eq(memra_gguf_kv_arr_len(g, i), 3);
        ck_assert_int_eq(memcmp(memra_gguf_kv_data(g, i),
                                scalars[t] == MEMRA_GGUF_BOOL ? bools : raw, 3 * sz[t]),
                         0);
        snprintf(key, sizeof key, "empty.%s", memra_gguf_vtype_name(scalars[t]));
        i = memra_gguf_find_kv(g, key);
        ck_assert_int_eq(memra_gguf_kv_type(g, i), MEMRA_GGUF_ARRAY);
        ck_assert_uint_eq(memra_gguf_kv_arr_len(g, i), 0);
    }
    int64_t i = memra_gguf_find_kv(g, "arr.bytes");
    memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
    ck_assert(s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    ck_assert_uint_eq(memra_gguf_kv_str(g, i, 1).len, 0);
    ck_assert(memra_gguf_kv_str(g, i, 2).len == 1 && memra_gguf_kv_str(g, i, 2).ptr[0] == '\xff');
    ck_assert_uint_eq(memra_gguf_kv_arr_len(g, memra_gguf_find_kv(g, "empty.STRING")), 0);
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

/* Typed getters: conversions that fit, refusals that name the key. */
START_TEST(test_typed_getters)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    compat_set_kvs(w);
    double big = 1e300;
    ck_assert_int_eq(memra_gguf_writer_set_scalar(w, "big.f64", MEMRA_GGUF_FLOAT64, &big), 0);
    ck_assert_int_eq(memra_gguf_writer_set_str(w, "nul.str", "x"), 0);
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_open(path, &g, &e), MEMRA_OK);
    uint32_t u = 0;
    ck_assert_int_eq(memra_gguf_get_u32(g, "test.u8", &u, &e), MEMRA_OK);
    ck_assert_uint_eq(u, 200);
    ck_assert_int_eq(memra_gguf_get_u32(g, "test.u16", &u, &e), MEMRA_OK);
    ck_assert_uint_eq(u, 60000);
    struct { const char *key; int code; const char *msg; } bad[] = {
        {"test.i8", MEMRA_ERR_FORMAT, "'test.i8' = -100 does not fit uint32"},
        {"test.u64", MEMRA_ERR_FORMAT, "does not fit uint32"},
        {"test.f32", MEMRA_ERR_FORMAT, "type FLOAT32, want an integer"},
        {"missing.key", MEMRA_ERR_NOT_FOUND, "'missing.key' not found"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memra_err_clear(&e);
        ck_assert_int_eq(memra_gguf_get_u32(g, bad[k].key, &u, &e), bad[k].code);
        ck_assert_msg(strstr(e.msg, bad[k].msg), "%s: '%s'", bad[k].key, e.msg);
    }
    float f;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_get_f32(g, "big.f64", &f, &e), MEMRA_ERR_FORMAT);
    char small[4];
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_get_str(g, "test.str", small, sizeof small, &e), MEMRA_ERR_FORMAT);
    int64_t arr[2];
    size_t n = 0;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_get_i64_array(g, "test.arr_i32", arr, 2, &n, &e),
                     MEMRA_ERR_FORMAT);
    ck_assert_uint_eq(n, 5); /* the length is reported even when it does not fit */
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_get_i64_array(g, "test.arr_str", arr, 2, &n, &e),
                     MEMRA_ERR_FORMAT);
    int b;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_get_bool(g, "test.u8", &b, &e), MEMRA_ERR_FORMAT);
    /* out-of-range indices are harmless */
    ck_assert_ptr_null(memra_gguf_kv_key(g, -1).ptr);
    ck_assert_int_eq(memra_gguf_kv_type(g, 1000), MEMRA_GGUF_VTYPE_COUNT);
    ck_assert_ptr_null(memra_gguf_kv_data(g, 1000));
    ck_assert_ptr_null(memra_gguf_tensor_at(g, 0));
    ck_assert_ptr_null(memra_gguf_find_tensor(g, "nope"));
    ck_assert_int_eq(memra_gguf_find_kv(g, "nope"), -1);
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

/* =============================== n_dims ================================ */

START_TEST(test_ndims_0_to_4)
{
    static const tdesc ts[] = {
        {"scalar", MEMRA_QT_F32, 0, {1, 1, 1, 1}},
        {"vec", MEMRA_QT_F16, 1, {7, 1, 1, 1}},
        {"mat", MEMRA_QT_Q8_0, 2, {32, 3, 1, 1}},
        {"cube", MEMRA_QT_BF16, 3, {2, 3, 4, 1}},
        {"hyper", MEMRA_QT_I8, 4, {2, 1, 3, 5}},
    };
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(memra_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims,
                                                      ts[i].ne),
                         MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    write_patterns(w, ts, 5, 1 << 20);
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_gguf_open(path, &g, &e) == MEMRA_OK, "%s", e.msg);
    check_patterns(g, ts, 5, 32);
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

/* =========================== writer refusals =========================== */

typedef int (*wstep)(memra_gguf_writer *w, const char *path);

static int r_dup_key(memra_gguf_writer *w, const char *p)
{
    (void)p;
    memra_gguf_writer_set_u32(w, "k", 1);
    return memra_gguf_writer_set_f32(w, "k", 2.0f);
}
static int r_empty_key(memra_gguf_writer *w, const char *p)
{
    (void)p;
    return memra_gguf_writer_set_u32(w, "", 1);
}
static int r_align_type(memra_gguf_writer *w, const char *p)
{
    (void)p;
    return memra_gguf_writer_set_u64(w, "general.alignment", 64);
}
static int r_align_pow2(memra_gguf_writer *w, const char *p)
{
    (void)p;
    return memra_gguf_writer_set_u32(w, "general.alignment", 48);
}
static int r_nested(memra_gguf_writer *w, const char *p)
{
    (void)p;
    uint8_t x = 0;
    return memra_gguf_writer_set_arr(w, "k", MEMRA_GGUF_ARRAY, &x, 1);
}
static int r_dup_tensor(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[1] = {32};
    memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 1, ne);
    return memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F16, 1, ne);
}
static int r_block(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[2] = {32, 4};
    return memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_Q4_K, 2, ne);
}
static int r_zero_dim(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[2] = {32, 0};
    return memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 2, ne);
}
static int r_ndims5(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[5] = {32, 1, 1, 1, 1};
    return memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 5, ne);
}
static int r_name64(memra_gguf_writer *w, const char *p)
{
    (void)p;
    char name[65];
    memset(name, 'x', 64);
    name[64] = '\0';
    int64_t ne[1] = {32};
    return memra_gguf_writer_add_tensor(w, name, MEMRA_QT_F32, 1, ne);
}
static int r_removed_type(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[1] = {32};
    return memra_gguf_writer_add_tensor(w, "t", (memra_qtype)4, 1, ne);
}
static int r_overflow(memra_gguf_writer *w, const char *p)
{
    (void)p;
    int64_t ne[2] = {1ll << 40, 1ll << 40};
    return memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 2, ne);
}
static int r_write_exceeds(memra_gguf_writer *w, const char *p)
{
    int64_t ne[1] = {4};
    uint8_t data[17] = {0};
    memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 1, ne);
    memra_gguf_writer_begin(w, p);
    return memra_gguf_writer_write(w, data, 17);
}
static int r_write_after_last(memra_gguf_writer *w, const char *p)
{
    int64_t ne[1] = {4};
    uint8_t data[16] = {0};
    memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 1, ne);
    memra_gguf_writer_begin(w, p);
    memra_gguf_writer_write(w, data, 16);
    return memra_gguf_writer_write(w, data, 1);
}
static int r_incomplete(memra_gguf_writer *w, const char *p)
{
    int64_t ne[1] = {4};
    uint8_t data[8] = {0};
    memra_gguf_writer_add_tensor(w, "t", MEMRA_QT_F32, 1, ne);
    memra_gguf_writer_add_tensor(w, "u", MEMRA_QT_F32, 1, ne);
    memra_gguf_writer_begin(w, p);
    memra_gguf_writer_write(w, data, 8);
    return memra_gguf_writer_finish(w);
}
static int r_declare_after_begin(memra_gguf_writer *w, const char *p)
{
    memra_gguf_writer_begin(w, p);
    return memra_gguf_writer_set_u32(w, "late", 1);
}
static int r_write_before_begin(memra_gguf_writer *w, const char *p)
{
    (void)p;
    uint8_t x = 0;
    return memra_gguf_writer_write(w, &x, 1);
}
static int r_bad_path(memra_gguf_writer *w, const char *p)
{
    (void)p;
    return memra_gguf_writer_begin(w, "/nonexistent-dir/x.gguf");
}

static const struct {
    const char *id;
    wstep step;
    int code;
    const char *msg;
} k_refusals[] = {
    {"duplicate key", r_dup_key, MEMRA_ERR_INVALID_ARG, "duplicate key 'k'"},
    {"empty key", r_empty_key, MEMRA_ERR_INVALID_ARG, "empty"},
    {"alignment type", r_align_type, MEMRA_ERR_INVALID_ARG, "scalar UINT32"},
    {"alignment pow2", r_align_pow2, MEMRA_ERR_INVALID_ARG, "power of two"},
    {"nested array", r_nested, MEMRA_ERR_INVALID_ARG, "scalar type"},
    {"duplicate tensor", r_dup_tensor, MEMRA_ERR_INVALID_ARG, "duplicate tensor 't'"},
    {"ne0 not a block multiple", r_block, MEMRA_ERR_INVALID_ARG, "q4_K block"},
    {"zero dim", r_zero_dim, MEMRA_ERR_INVALID_ARG, "ne[1] = 0"},
    {"n_dims 5", r_ndims5, MEMRA_ERR_INVALID_ARG, "n_dims 5"},
    {"name 64 bytes", r_name64, MEMRA_ERR_INVALID_ARG, "< 64 bytes"},
    {"removed type", r_removed_type, MEMRA_ERR_INVALID_ARG, "type 4"},
    {"size overflow", r_overflow, MEMRA_ERR_INVALID_ARG, "overflows"},
    {"write exceeds tensor", r_write_exceeds, MEMRA_ERR_INVALID_ARG, "exceeds tensor 0 't'"},
    {"write after last", r_write_after_last, MEMRA_ERR_INVALID_ARG, "after the last tensor"},
    {"finish incomplete", r_incomplete, MEMRA_ERR_INVALID_ARG, "tensor 0 't' incomplete (8 of 16"},
    {"declare after begin", r_declare_after_begin, MEMRA_ERR_INVALID_ARG, "before begin"},
    {"write before begin", r_write_before_begin, MEMRA_ERR_INVALID_ARG, "before begin"},
    {"unwritable path", r_bad_path, MEMRA_ERR_IO, "nonexistent-dir"},
};

START_TEST(test_writer_refusals)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    unlink(path); /* a stale file from a process with the same pid must not fool the check */
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    int rc = k_refusals[_i].step(w, path);
    ck_assert_msg(rc == k_refusals[_i].code, "%s: rc %d (%s)", k_refusals[_i].id, rc,
                  memra_gguf_writer_error(w));
    ck_assert_msg(strstr(memra_gguf_writer_error(w), k_refusals[_i].msg), "%s: '%s'",
                  k_refusals[_i].id, memra_gguf_writer_error(w));
    /* sticky: nothing after a failure succeeds, and the partial file is removed */
    ck_assert_int_eq(memra_gguf_writer_set_u32(w, "after", 1), rc);
    ck_assert_int_eq(memra_gguf_writer_finish(w), rc);
    memra_gguf_writer_close(w);
    ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

/* =========================== hash lookups ============================== */

/* Thousands of tensors and keys: every one is found by name (hash lookups, not scans). */
START_TEST(test_many_tensors_lookup)
{
    enum { N = 3000 };
    char path[256], name[64];
    tu_tmp_path(path, sizeof path, ".gguf");
    memra_gguf_writer *w;
    ck_assert_int_eq(memra_gguf_writer_open(&w, NULL), MEMRA_OK);
    int64_t ne[1] = {1};
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        ck_assert_int_eq(memra_gguf_writer_add_tensor(w, name, MEMRA_QT_F32, 1, ne), MEMRA_OK);
        snprintf(name, sizeof name, "key.%d", i);
        ck_assert_int_eq(memra_gguf_writer_set_u32(w, name, (uint32_t)i), MEMRA_OK);
    }
    ck_assert_int_eq(memra_gguf_writer_begin(w, path), MEMRA_OK);
    for (int i = 0; i < N; i++) {
        float v = (float)i;
        ck_assert_int_eq(memra_gguf_writer_write(w, &v, 4), MEMRA_OK);
    }
    ck_assert_int_eq(memra_gguf_writer_finish(w), MEMRA_OK);
    memra_gguf_writer_close(w);
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_gguf_open(path, &g, &e), MEMRA_OK);
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        const memra_gguf_tensor *t = memra_gguf_find_tensor(g, name);
        ck_assert_ptr_eq(t, memra_gguf_tensor_at(g, i));
        float v;
        memcpy(&v, t->data, 4);
        ck_assert(v == (float)i);
        snprintf(name, sizeof name, "key.%d", i);
        ck_assert_int_eq(memra_gguf_find_kv(g, name), i);
    }
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

/* ====================== Python gguf cross-check ======================== */

static int run_py(const char *mode, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s'", tu_source_path("tests/py/check_gguf_compat.py"),
             mode, path);
    return system(cmd);
}

/* (a) the Python reader checks a file memra wrote. python3 or the module missing = FAIL. */
START_TEST(test_python_reads_memra)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    write_compat(path);
    int st = run_py("read", path);
    unlink(path);
    ck_assert_msg(st == 0, "check_gguf_compat.py read failed (status %d)", st);
}
END_TEST

/* (b) memra reads a file gguf.GGUFWriter wrote, with the same content. */
START_TEST(test_memra_reads_python)
{
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    int st = run_py("write", path);
    ck_assert_msg(st == 0, "check_gguf_compat.py write failed (status %d)", st);
    memra_gguf *g;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_gguf_open(path, &g, &e) == MEMRA_OK, "%s", e.msg);
    ck_assert_uint_eq(memra_gguf_alignment(g), 64);
    compat_check_kvs(g);
    check_patterns(g, k_compat_tensors, N_COMPAT, 64);
    memra_gguf_close(g);
    unlink(path);
}
END_TEST

Suite *make_gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_add_loop_test(tc, test_malformed_cases, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_test(tc, test_accepted_case_values);
    tcase_add_test(tc, test_short_files);
    tcase_add_test(tc, test_worked_example);
    tcase_add_test(tc, test_multi_tensor_align64);
    tcase_add_test(tc, test_truncation_every_length);
    tcase_add_test(tc, test_kv_roundtrip_all_types);
    tcase_add_test(tc, test_typed_getters);
    tcase_add_test(tc, test_ndims_0_to_4);
    tcase_add_test(tc, test_many_tensors_lookup);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("writer");
    tcase_add_loop_test(tw, test_writer_refusals, 0,
                        (int)(sizeof k_refusals / sizeof k_refusals[0]));
    suite_add_tcase(s, tw);
    TCase *tp = tcase_create("python");
    tcase_set_timeout(tp, 60); /* python startup + numpy import under a loaded 2-core box */
    tcase_add_test(tp, test_python_reads_memra);
    tcase_add_test(tp, test_memra_reads_python);
    suite_add_tcase(s, tp);
    return s;
}
