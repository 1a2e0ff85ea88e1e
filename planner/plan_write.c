/*
 * plan_write.c — Lua tables to canonical plan JSON (see plan_write.h).
 */
#include "plan_write.h"

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define MAX_DEPTH 16

/* ================================== Lua -> JSON ================================== */

static int to_json(lua_State *L, int idx, int depth, const char *path, json_t **out,
                   memra_err *err);

/* Is the table at idx a sequence 1..n (n >= 0) with nothing else? */
static int table_is_array(lua_State *L, int idx, size_t *n_out)
{
    size_t n = 0, max = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int isint = 0;
        lua_Integer k = lua_tointegerx(L, -1, &isint);
        if (lua_type(L, -1) != LUA_TNUMBER || !isint || k < 1) {
            lua_pop(L, 1);
            return 0;
        }
        n++;
        if ((size_t)k > max)
            max = (size_t)k;
    }
    *n_out = n;
    return n == max;
}

static int table_to_json(lua_State *L, int idx, int depth, const char *path, json_t **out,
                         memra_err *err)
{
    char sub[256];
    size_t n = 0;
    int rc = MEMRA_OK;
    if (table_is_array(L, idx, &n)) {
        *out = json_array();
        for (size_t i = 1; i <= n && rc == MEMRA_OK && *out; i++) {
            json_t *v = NULL;
            lua_rawgeti(L, idx, (lua_Integer)i);
            snprintf(sub, sizeof sub, "%.200s[%zu]", path, i);
            rc = to_json(L, lua_gettop(L), depth + 1, sub, &v, err);
            lua_pop(L, 1);
            if (rc == MEMRA_OK && json_array_append_new(*out, v) != 0)
                rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "json");
        }
    } else {
        *out = json_object();
        lua_pushnil(L);
        while (rc == MEMRA_OK && *out && lua_next(L, idx)) {
            json_t *v = NULL;
            if (lua_type(L, -2) != LUA_TSTRING) {
                lua_pop(L, 2);
                rc = MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "plan table %s mixes array and string keys",
                                path);
                break;
            }
            const char *k = lua_tostring(L, -2);
            snprintf(sub, sizeof sub, "%.200s.%.50s", path, k);
            rc = to_json(L, lua_gettop(L), depth + 1, sub, &v, err);
            if (rc == MEMRA_OK && json_object_set_new(*out, k, v) != 0)
                rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "json");
            lua_pop(L, rc == MEMRA_OK ? 1 : 2);
        }
    }
    if (!*out && rc == MEMRA_OK)
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "json");
    if (rc != MEMRA_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

static int to_json(lua_State *L, int idx, int depth, const char *path, json_t **out,
                   memra_err *err)
{
    *out = NULL;
    if (depth > MAX_DEPTH || !lua_checkstack(L, 8))
        return MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "plan table %s is nested too deeply", path);
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: *out = json_boolean(lua_toboolean(L, idx)); break;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        *out = json_stringn(s, len);
        if (!*out)
            return MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "plan value %s is not valid UTF-8", path);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            *out = json_integer(lua_tointeger(L, idx));
        } else {
            double d = lua_tonumber(L, idx);
            if (!isfinite(d))
                return MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "plan value %s is not finite", path);
            *out = json_real(d);
        }
        break;
    case LUA_TTABLE: return table_to_json(L, idx, depth, path, out, err);
    default:
        return MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "plan value %s has Lua type %s", path,
                          luaL_typename(L, idx));
    }
    return *out ? MEMRA_OK : MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "json");
}

int memra_lua_to_json(lua_State *L, int idx, json_t **out, memra_err *err)
{
    return to_json(L, lua_absindex(L, idx), 0, "plan", out, err);
}

/* ================================= canonical order ================================= */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Rebuild obj with the keys of order[] first (in that order), then the rest sorted. */
static void reorder(json_t *obj, const char *const *order)
{
    if (!json_is_object(obj))
        return;
    size_t n = json_object_size(obj), k = 0;
    const char **rest = malloc((n ? n : 1) * sizeof *rest);
    json_t *tmp = json_object();
    if (!rest || !tmp)
        goto done;
    json_object_update(tmp, obj);
    json_object_clear(obj);
    for (const char *const *o = order; o && *o; o++) {
        json_t *v = json_object_get(tmp, *o);
        if (v)
            json_object_set(obj, *o, v);
    }
    const char *key;
    json_t *v;
    json_object_foreach(tmp, key, v)
    {
        if (!json_object_get(obj, key))
            rest[k++] = key;
    }
    qsort(rest, k, sizeof *rest, cmp_str);
    for (size_t i = 0; i < k; i++)
        json_object_set(obj, rest[i], json_object_get(tmp, rest[i]));
done:
    json_decref(tmp);
    free(rest);
}

static void reorder_all(json_t *arr, const char *const *order)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) reorder(v, order);
}

/* A launch: op, kernel, args in catalog order. */
static void reorder_launch(json_t *l)
{
    static const char *const order[] = {"op", "kernel", "args", NULL};
    const char *names[MEMRA_OP_MAX_ARGS + 1] = {0};
    reorder(l, order);
    json_t *op = json_object_get(l, "op");
    int id = json_is_string(op) ? memra_op_find(json_string_value(op)) : -1;
    const memra_op_desc *d = id >= 0 ? memra_op_get((uint32_t)id) : NULL;
    for (uint32_t i = 0; d && i < d->n_args; i++)
        names[i] = d->args[i].name;
    reorder(json_object_get(l, "args"), d ? names : NULL);
}

void memra_plan_json_canonical(json_t *doc)
{
    static const char *const top[] = {
        "format", "version", "arch", "model_hash", "catalog_hash", "tier", "stage", "n_stages",
        "layers", "tiers", "stages", "n_layer", "n_embd", "n_vocab", "kv", "arena_bytes",
        "input", "output", "logits", "stats", "kernels", "weights", "state", "buffers",
        "plans", "launches", NULL};
    static const char *const buffer[] = {"name", "offset", "bytes", "dtype", NULL};
    static const char *const state[] = {"name", "layer", "kind", "dtype", "dims", "bytes", NULL};
    static const char *const plan[] = {"tier", "stage", "file", "launches", "arena_bytes", NULL};
    static const char *const stats[] = {"launches", "arena_bytes", "weight_bytes",
                                        "weight_bytes_streamed", "state_bytes_per_row",
                                        "kv_bytes_per_token", NULL};
    size_t i;
    json_t *v;
    reorder(doc, top);
    reorder_all(json_object_get(doc, "buffers"), buffer);
    reorder_all(json_object_get(doc, "state"), state);
    reorder_all(json_object_get(doc, "plans"), plan);
    reorder(json_object_get(doc, "stats"), stats);
    json_array_foreach(json_object_get(doc, "launches"), i, v) reorder_launch(v);
}

/* ===================================== dumping ===================================== */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int bad;
} sbuf;

static void sb_add(sbuf *b, const char *s)
{
    size_t l = strlen(s);
    if (b->bad)
        return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + l;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->bad = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l + 1);
    b->n += l;
}

static void sb_json(sbuf *b, json_t *v)
{
    /* JSON_REAL_PRECISION(9): 9 significant digits round-trip every float32. */
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9));
    if (!s) {
        b->bad = 1;
        return;
    }
    sb_add(b, s);
    free(s);
}

/* Arrays of objects, arrays or strings go one element per line (diff-friendly); arrays of
 * numbers stay on one line. */
static int one_per_line(json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return 0;
    json_t *e = json_array_get(v, 0);
    return json_is_object(e) || json_is_array(e) || json_is_string(e);
}

char *memra_plan_json_dump(json_t *doc)
{
    sbuf b = {0};
    const char *key;
    json_t *v;
    size_t left = json_object_size(doc);
    sb_add(&b, "{\n");
    json_object_foreach(doc, key, v)
    {
        json_t *k = json_string(key);
        sb_add(&b, "  ");
        sb_json(&b, k);
        json_decref(k);
        sb_add(&b, ": ");
        if (one_per_line(v)) {
            size_t i;
            json_t *e;
            sb_add(&b, "[\n");
            json_array_foreach(v, i, e)
            {
                sb_add(&b, "    ");
                sb_json(&b, e);
                sb_add(&b, i + 1 < json_array_size(v) ? ",\n" : "\n");
            }
            sb_add(&b, "  ]");
        } else {
            sb_json(&b, v);
        }
        sb_add(&b, --left ? ",\n" : "\n");
    }
    sb_add(&b, "}\n");
    if (b.bad) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int memra_write_text_file(const char *dir, const char *name, const char *text, memra_err *err)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "cannot create %s", tmp);
    size_t len = strlen(text);
    int bad = fwrite(text, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "cannot write %s", path);
    }
    return MEMRA_OK;
}
