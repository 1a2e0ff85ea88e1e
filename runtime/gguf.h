/*
 * gguf.h — GGUF v2/v3 reader (mmap, zero-copy, hardened) and streaming writer.
 *
 * Reader: memra_gguf_open() maps the file read-only and validates every structural rule of
 * spec/gguf-and-quants.md §1.8 (plus the engine's own, see gguf.c) before returning; after a
 * successful open every accessor is bounds-safe and every tensor view lies inside the file.
 * Nothing is allocated in proportion to a size the file claims, only to what it contains.
 * Little-endian files only.
 *
 * Writer: declare KVs and tensor infos first, then stream tensor data in declaration order,
 * so forging a multi-GB checkpoint never holds it in memory.
 */
#ifndef MEMRA_GGUF_H
#define MEMRA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "qtype.h"

/* KV value types (spec §1.4). */
typedef enum memra_gguf_vtype {
    MEMRA_GGUF_UINT8 = 0,
    MEMRA_GGUF_INT8 = 1,
    MEMRA_GGUF_UINT16 = 2,
    MEMRA_GGUF_INT16 = 3,
    MEMRA_GGUF_UINT32 = 4,
    MEMRA_GGUF_INT32 = 5,
    MEMRA_GGUF_FLOAT32 = 6,
    MEMRA_GGUF_BOOL = 7,
    MEMRA_GGUF_STRING = 8,
    MEMRA_GGUF_ARRAY = 9,
    MEMRA_GGUF_UINT64 = 10,
    MEMRA_GGUF_INT64 = 11,
    MEMRA_GGUF_FLOAT64 = 12,
    MEMRA_GGUF_VTYPE_COUNT = 13,
} memra_gguf_vtype;

#define MEMRA_GGUF_MAX_DIMS 4
#define MEMRA_GGUF_MAX_NAME 64 /* tensor names are < 64 bytes (GGML_MAX_NAME) */
#define MEMRA_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct memra_gguf_str {
    const char *ptr;
    uint64_t len;
} memra_gguf_str;

typedef struct memra_gguf_tensor {
    char name[MEMRA_GGUF_MAX_NAME]; /* NUL-terminated copy */
    uint32_t type;                  /* memra_qtype id, validated */
    uint32_t n_dims;                /* 0..4 as stored */
    int64_t ne[MEMRA_GGUF_MAX_DIMS]; /* missing dims are 1; ne[0] contiguous */
    uint64_t offset;                /* relative to the data section */
    uint64_t nbytes;
    const void *data;               /* view into the mapping: data_start + offset */
} memra_gguf_tensor;

typedef struct memra_gguf memra_gguf;

/* Open and validate. On failure *out is NULL and err names the problem (byte offset, key or
 * tensor). Codes: MEMRA_ERR_IO, MEMRA_ERR_FORMAT, MEMRA_ERR_UNSUPPORTED, MEMRA_ERR_NOMEM. */
int memra_gguf_open(const char *path, memra_gguf **out, memra_err *err);
/* Same over a caller-owned buffer (borrowed; must outlive the handle). For fuzzing/tests. */
int memra_gguf_open_memory(const void *data, size_t size, memra_gguf **out, memra_err *err);
void memra_gguf_close(memra_gguf *g); /* NULL is a no-op */

/* "UINT32", "STRING", ... as gguf-py spells them; "?" for ids out of range. */
const char *memra_gguf_vtype_name(memra_gguf_vtype t);

uint32_t memra_gguf_version(const memra_gguf *g);
uint32_t memra_gguf_alignment(const memra_gguf *g);
uint64_t memra_gguf_data_offset(const memra_gguf *g); /* absolute file offset of data */
const void *memra_gguf_file_data(const memra_gguf *g, size_t *size); /* whole mapping */

/* ---- key/value metadata ---- */
int64_t memra_gguf_n_kv(const memra_gguf *g);
int64_t memra_gguf_find_kv(const memra_gguf *g, const char *key); /* index or -1 */
memra_gguf_str memra_gguf_kv_key(const memra_gguf *g, int64_t i);
memra_gguf_vtype memra_gguf_kv_type(const memra_gguf *g, int64_t i);
/* For ARRAY values: element type and count. */
memra_gguf_vtype memra_gguf_kv_arr_type(const memra_gguf *g, int64_t i);
uint64_t memra_gguf_kv_arr_len(const memra_gguf *g, int64_t i);
/* Raw little-endian payload of a scalar, or of a numeric array's elements (contiguous). */
const void *memra_gguf_kv_data(const memra_gguf *g, int64_t i);
/* Element j of a string array, or the string value itself (j ignored). */
memra_gguf_str memra_gguf_kv_str(const memra_gguf *g, int64_t i, uint64_t j);

/* Typed getters by key. They convert between integer widths when the value fits and fail
 * with MEMRA_ERR_NOT_FOUND (absent) or MEMRA_ERR_FORMAT (wrong type / out of range),
 * naming the key. get_f32 accepts FLOAT32 or FLOAT64. */
int memra_gguf_get_u32(const memra_gguf *g, const char *key, uint32_t *out, memra_err *err);
int memra_gguf_get_i64(const memra_gguf *g, const char *key, int64_t *out, memra_err *err);
int memra_gguf_get_f32(const memra_gguf *g, const char *key, float *out, memra_err *err);
int memra_gguf_get_bool(const memra_gguf *g, const char *key, int *out, memra_err *err);
/* Copies the string NUL-terminated into buf (fails if it does not fit or contains NUL). */
int memra_gguf_get_str(const memra_gguf *g, const char *key, char *buf, size_t n, memra_err *err);
/* Integer array (any integer element type) into out[0..n); *len gets the element count.
 * Fails if the array has more than n elements. */
int memra_gguf_get_i64_array(const memra_gguf *g, const char *key, int64_t *out, size_t n,
                             size_t *len, memra_err *err);

/* ---- tensors ---- */
int64_t memra_gguf_n_tensors(const memra_gguf *g);
const memra_gguf_tensor *memra_gguf_tensor_at(const memra_gguf *g, int64_t i);
const memra_gguf_tensor *memra_gguf_find_tensor(const memra_gguf *g, const char *name);

/* ---- writer ---- */
typedef struct memra_gguf_writer memra_gguf_writer;

int memra_gguf_writer_open(memra_gguf_writer **out, memra_err *err);
void memra_gguf_writer_close(memra_gguf_writer *w); /* NULL is a no-op; closes the file */

/* KVs are written in the order added; duplicate keys are refused. */
int memra_gguf_writer_set_u32(memra_gguf_writer *w, const char *key, uint32_t v);
int memra_gguf_writer_set_i32(memra_gguf_writer *w, const char *key, int32_t v);
int memra_gguf_writer_set_u64(memra_gguf_writer *w, const char *key, uint64_t v);
int memra_gguf_writer_set_f32(memra_gguf_writer *w, const char *key, float v);
int memra_gguf_writer_set_bool(memra_gguf_writer *w, const char *key, int v);
int memra_gguf_writer_set_str(memra_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not STRING/ARRAY): value points to its little-endian payload
 * (1, 2, 4 or 8 bytes; BOOL is one byte 0/1). */
int memra_gguf_writer_set_scalar(memra_gguf_writer *w, const char *key, memra_gguf_vtype type,
                                 const void *value);
/* Numeric array: elem_type is a scalar vtype; data holds n elements little-endian. */
int memra_gguf_writer_set_arr(memra_gguf_writer *w, const char *key, memra_gguf_vtype elem_type,
                              const void *data, uint64_t n);
/* String array (n NUL-terminated strings). For byte strings with embedded NUL use _lens. */
int memra_gguf_writer_set_str_arr(memra_gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n);
int memra_gguf_writer_set_str_arr_lens(memra_gguf_writer *w, const char *key,
                                       const char *const *v, const uint64_t *lens, uint64_t n);

/* Declare a tensor (n_dims 1..4; ne[0] contiguous, a multiple of the type's block). */
int memra_gguf_writer_add_tensor(memra_gguf_writer *w, const char *name, memra_qtype type,
                                 uint32_t n_dims, const int64_t *ne);
/* Create the file and write header, KVs, tensor infos and padding. */
int memra_gguf_writer_begin(memra_gguf_writer *w, const char *path);
/* Then exactly one call per tensor, in declaration order, with exactly nbytes of data
 * (may be called in several chunks: data is appended until the tensor is complete). */
int memra_gguf_writer_write(memra_gguf_writer *w, const void *data, size_t nbytes);
/* Pad, flush, fsync-free close; fails if any tensor is incomplete. */
int memra_gguf_writer_finish(memra_gguf_writer *w);
/* The message of the writer's first failure. */
const char *memra_gguf_writer_error(const memra_gguf_writer *w);

#endif
