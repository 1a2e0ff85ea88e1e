/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader (runtime/gguf.c).
 *
 * Each input is opened with memra_gguf_open_memory over an exactly-sized copy (so ASan sees
 * any read past the end); when it is accepted, every accessor is walked: every KV's key, type,
 * payload bytes, every string-array element, the typed getters, and every tensor's name, view
 * and hash lookup. A crash, sanitizer report, or a broken invariant (a view outside the input,
 * a tensor not found by its own name) is a bug. Build: see docs/readme-gguf.md.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static volatile uint64_t g_sink; /* keeps the reads from being optimized away */

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint64_t acc = 0;
    for (uint64_t k = 0; k < n; k++)
        acc += b[k];
    g_sink += acc;
}

static void walk_kv(const memra_gguf *g, int64_t i)
{
    static const int size[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    memra_gguf_str key = memra_gguf_kv_key(g, i);
    touch(key.ptr, key.len);
    memra_gguf_vtype t = memra_gguf_kv_type(g, i);
    if (t == MEMRA_GGUF_STRING) {
        memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
        touch(s.ptr, s.len);
    } else if (t == MEMRA_GGUF_ARRAY) {
        memra_gguf_vtype et = memra_gguf_kv_arr_type(g, i);
        uint64_t n = memra_gguf_kv_arr_len(g, i);
        if (et == MEMRA_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                memra_gguf_str s = memra_gguf_kv_str(g, i, j);
                touch(s.ptr, s.len);
            }
        } else if (n) {
            touch(memra_gguf_kv_data(g, i), n * (uint64_t)size[et]);
        }
    } else {
        touch(memra_gguf_kv_data(g, i), (uint64_t)size[t]);
    }
    /* typed getters by this key (NUL-free keys only: the getters take C strings) */
    char k[256];
    if (key.len < sizeof k && !memchr(key.ptr, 0, key.len)) {
        memcpy(k, key.ptr, key.len);
        k[key.len] = '\0';
        if (memra_gguf_find_kv(g, k) != i)
            abort(); /* keys are unique: lookup must return this entry */
        uint32_t u;
        int64_t v, arr[4];
        float f;
        int b;
        size_t len;
        char buf[64];
        memra_gguf_get_u32(g, k, &u, NULL);
        memra_gguf_get_i64(g, k, &v, NULL);
        memra_gguf_get_f32(g, k, &f, NULL);
        memra_gguf_get_bool(g, k, &b, NULL);
        memra_gguf_get_str(g, k, buf, sizeof buf, NULL);
        memra_gguf_get_i64_array(g, k, arr, 4, &len, NULL);
    }
}

static void walk_tensors(const memra_gguf *g, const uint8_t *base, size_t size)
{
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (d < base || t->nbytes > size || (size_t)(d - base) > size - t->nbytes)
            abort(); /* a view outside the input */
        if (memra_gguf_find_tensor(g, t->name) != t)
            abort();
        touch(d, t->nbytes < 4096 ? t->nbytes : 4096);
        touch(d + t->nbytes - 1, 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    memra_gguf *g = NULL;
    memra_err err;
    memra_err_clear(&err);
    if (memra_gguf_open_memory(copy, size, &g, &err) == MEMRA_OK) {
        for (int64_t i = 0; i < memra_gguf_n_kv(g); i++)
            walk_kv(g, i);
        walk_tensors(g, copy, size);
        (void)memra_gguf_kv_str(g, memra_gguf_n_kv(g), 0); /* out-of-range is harmless */
        memra_gguf_close(g);
    } else if (g != NULL || err.code == MEMRA_OK || err.msg[0] == '\0') {
        abort(); /* a failure must leave *out NULL and name its cause */
    }
    free(copy);
    return 0;
}
