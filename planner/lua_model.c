/*
 * lua_model.c — what plan scripts see of the world: the checkpoint (`model`: metadata and
 * tensor table), the op catalog (`ops`, generated from runtime/ops.def through ops.h), the
 * qtype table (`qtypes`) and a few C helpers (`host`) that make the scripts use the same
 * arithmetic as the validator (spec expressions, dtype sizes, weight-class checks).
 *
 * Must not: expose weight bytes or anything outside the gguf handle; copy large arrays
 * (arrays longer than EAGER_MAX elements, such as tokenizer.ggml.tokens, are lazy proxies).
 */
#include "lua_model.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "attn_decode.h"
#include "mmvq.h"
#include "ops.h"
#include "plan.h"
#include "qtype.h"
#include "quant.h"

#define EAGER_MAX 4096

/* ===================================== metadata ===================================== */

/* Push element j of a numeric array / the scalar (j = 0) of KV i as a Lua value. */
static void push_scalar(lua_State *L, uint32_t t, const unsigned char *p)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    static const uint8_t sz[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    memcpy(&v, p, sz[t]); /* little-endian host (the reader only accepts LE files) */
    switch (t) {
    case MEMRA_GGUF_UINT8: lua_pushinteger(L, v.u8); break;
    case MEMRA_GGUF_INT8: lua_pushinteger(L, v.i8); break;
    case MEMRA_GGUF_UINT16: lua_pushinteger(L, v.u16); break;
    case MEMRA_GGUF_INT16: lua_pushinteger(L, v.i16); break;
    case MEMRA_GGUF_UINT32: lua_pushinteger(L, v.u32); break;
    case MEMRA_GGUF_INT32: lua_pushinteger(L, v.i32); break;
    case MEMRA_GGUF_FLOAT32: lua_pushnumber(L, v.f32); break;
    case MEMRA_GGUF_BOOL: lua_pushboolean(L, v.u8 != 0); break;
    case MEMRA_GGUF_UINT64:
        if (v.u64 > (uint64_t)INT64_MAX)
            lua_pushnumber(L, (lua_Number)v.u64);
        else
            lua_pushinteger(L, (lua_Integer)v.u64);
        break;
    case MEMRA_GGUF_INT64: lua_pushinteger(L, v.i64); break;
    case MEMRA_GGUF_FLOAT64: lua_pushnumber(L, v.f64); break;
    default: lua_pushnil(L); break;
    }
}

static uint64_t elem_size(uint32_t t)
{
    static const uint8_t sz[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < MEMRA_GGUF_VTYPE_COUNT ? sz[t] : 0;
}

/* Element j (0-based) of array KV i. */
static void push_elem(lua_State *L, const memra_gguf *g, int64_t i, uint64_t j)
{
    uint32_t at = memra_gguf_kv_arr_type(g, i);
    if (at == MEMRA_GGUF_STRING) {
        memra_gguf_str s = memra_gguf_kv_str(g, i, j);
        lua_pushlstring(L, s.ptr ? s.ptr : "", s.ptr ? (size_t)s.len : 0);
    } else if (elem_size(at)) {
        push_scalar(L, at, (const unsigned char *)memra_gguf_kv_data(g, i) + j * elem_size(at));
    } else {
        lua_pushnil(L); /* nested arrays: not used by any plan */
    }
}

static int lazy_index(lua_State *L)
{
    const memra_gguf *g = lua_touserdata(L, lua_upvalueindex(1));
    int64_t i = lua_tointeger(L, lua_upvalueindex(2));
    int isint = 0;
    lua_Integer j = lua_tointegerx(L, 2, &isint);
    if (!isint || j < 1 || (uint64_t)j > memra_gguf_kv_arr_len(g, i))
        lua_pushnil(L);
    else
        push_elem(L, g, i, (uint64_t)j - 1);
    return 1;
}

static int lazy_len(lua_State *L)
{
    const memra_gguf *g = lua_touserdata(L, lua_upvalueindex(1));
    lua_pushinteger(L, (lua_Integer)memra_gguf_kv_arr_len(g, lua_tointeger(L, lua_upvalueindex(2))));
    return 1;
}

static void push_array(lua_State *L, const memra_gguf *g, int64_t i, uint64_t eager_max)
{
    uint64_t n = memra_gguf_kv_arr_len(g, i);
    lua_newtable(L);
    if (n <= eager_max) {
        for (uint64_t j = 0; j < n; j++) {
            push_elem(L, g, i, j);
            lua_rawseti(L, -2, (lua_Integer)j + 1);
        }
        return;
    }
    lua_newtable(L); /* metatable: elements fetched on demand */
    for (int k = 0; k < 2; k++) {
        lua_pushlightuserdata(L, (void *)g);
        lua_pushinteger(L, i);
        lua_pushcclosure(L, k ? lazy_len : lazy_index, 2);
        lua_setfield(L, -2, k ? "__len" : "__index");
    }
    lua_setmetatable(L, -2);
}

static void push_kvs(lua_State *L, const memra_gguf *g, uint64_t eager_max)
{
    lua_newtable(L);
    for (int64_t i = 0; i < memra_gguf_n_kv(g); i++) {
        memra_gguf_str key = memra_gguf_kv_key(g, i);
        lua_pushlstring(L, key.ptr, (size_t)key.len);
        uint32_t t = memra_gguf_kv_type(g, i);
        if (t == MEMRA_GGUF_ARRAY) {
            push_array(L, g, i, eager_max);
        } else if (t == MEMRA_GGUF_STRING) {
            memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
            lua_pushlstring(L, s.ptr, (size_t)s.len);
        } else {
            push_scalar(L, t, memra_gguf_kv_data(g, i));
        }
        lua_rawset(L, -3);
    }
}

static void push_tensor(lua_State *L, const memra_gguf_tensor *t)
{
    const memra_qtype_info *qi = memra_qtype_get(t->type);
    lua_createtable(L, 0, 8);
    lua_pushstring(L, t->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, qi ? qi->name : "?");
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, t->n_dims);
    lua_setfield(L, -2, "n_dims");
    lua_createtable(L, MEMRA_GGUF_MAX_DIMS, 0);
    for (int d = 0; d < MEMRA_GGUF_MAX_DIMS; d++) {
        lua_pushinteger(L, t->ne[d]);
        lua_rawseti(L, -2, d + 1);
    }
    lua_setfield(L, -2, "ne"); /* all 4 dims, missing ones 1 */
    lua_pushinteger(L, (lua_Integer)t->nbytes);
    lua_setfield(L, -2, "nbytes");
    lua_pushinteger(L, (lua_Integer)t->offset);
    lua_setfield(L, -2, "offset");
}

static void push_model(lua_State *L, const memra_gguf *g, uint64_t eager_max)
{
    lua_newtable(L);
    push_kvs(L, g, eager_max);
    lua_getfield(L, -1, "general.architecture");
    lua_setfield(L, -3, "arch");
    lua_setfield(L, -2, "kv");
    lua_newtable(L); /* tensors by name */
    lua_newtable(L); /* names in file order */
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        push_tensor(L, t);
        lua_setfield(L, -3, t->name);
        lua_pushstring(L, t->name);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -3, "tensor_names");
    lua_setfield(L, -2, "tensors");
}

/* ====================================== catalog ====================================== */

static const char *arg_type_name(const memra_op_arg_desc *a)
{
    switch (a->kind) {
    case MEMRA_ARG_BUF: return memra_dtype_name(a->type);
    case MEMRA_ARG_WEIGHT: return memra_weight_class_name(a->type);
    case MEMRA_ARG_STATE: return memra_state_kind_name(a->type);
    case MEMRA_ARG_TICK: return memra_tick_field_name(a->type);
    default: return NULL;
    }
}

static void push_arg_desc(lua_State *L, const memra_op_arg_desc *a)
{
    static const char *const flags[] = {"req", "opt", "mode"};
    lua_createtable(L, 0, 7);
    lua_pushstring(L, a->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, memra_arg_kind_name(a->kind));
    lua_setfield(L, -2, "kind");
    if (arg_type_name(a)) {
        lua_pushstring(L, arg_type_name(a));
        lua_setfield(L, -2, "type");
    }
    lua_pushstring(L, memra_access_name(a->access));
    lua_setfield(L, -2, "access");
    lua_pushinteger(L, a->slot);
    lua_setfield(L, -2, "slot");
    lua_pushstring(L, flags[a->flag]);
    lua_setfield(L, -2, "req");
    lua_pushstring(L, a->spec);
    lua_setfield(L, -2, "spec");
}

static void push_ops(lua_State *L)
{
    lua_newtable(L);
    for (uint32_t id = 0; id < MEMRA_OP_COUNT; id++) {
        const memra_op_desc *d = memra_op_get(id);
        lua_createtable(L, 0, 6);
        lua_pushstring(L, d->name);
        lua_setfield(L, -2, "name");
        if (d->key) {
            lua_pushstring(L, d->key);
            lua_setfield(L, -2, "key");
        }
        lua_pushstring(L, d->doc);
        lua_setfield(L, -2, "doc");
        lua_createtable(L, (int)d->n_args, 0); /* args in catalog order */
        lua_createtable(L, 0, (int)d->n_args); /* name -> 1-based index */
        for (uint32_t i = 0; i < d->n_args; i++) {
            push_arg_desc(L, &d->args[i]);
            lua_rawseti(L, -3, i + 1);
            lua_pushinteger(L, i + 1);
            lua_setfield(L, -2, d->args[i].name);
        }
        lua_setfield(L, -3, "index");
        lua_setfield(L, -2, "args");
        lua_setfield(L, -2, d->name);
    }
}

static void push_qtypes(lua_State *L)
{
    lua_newtable(L);
    for (uint32_t id = 0; id < MEMRA_QT_COUNT; id++) {
        const memra_qtype_info *q = memra_qtype_get(id);
        if (!q)
            continue;
        lua_createtable(L, 0, 6);
        lua_pushinteger(L, id);
        lua_setfield(L, -2, "id");
        lua_pushstring(L, q->name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, q->block_elems);
        lua_setfield(L, -2, "block_elems");
        lua_pushinteger(L, q->block_bytes);
        lua_setfield(L, -2, "block_bytes");
        lua_pushboolean(L, memra_mmvq_direct((int32_t)id));
        lua_setfield(L, -2, "mmvq_direct");
        for (uint32_t wc = 0; wc < MEMRA_WC_COUNT; wc++) {
            lua_pushboolean(L, memra_weight_class_accepts(wc, id));
            lua_setfield(L, -2, memra_weight_class_name(wc));
        }
        lua_setfield(L, -2, q->name);
    }
}

/* ==================================== host helpers ==================================== */

/* host.dtype_bytes(dtype, count) */
static int h_dtype_bytes(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    int dt = memra_dtype_from_name(name), ok = 0;
    uint64_t bytes = dt < 0 ? 0 : memra_dtype_bytes((uint32_t)dt, n, &ok);
    if (!ok)
        return luaL_error(L, "dtype_bytes: %d elements of '%s' is not a valid size", (int)n, name);
    lua_pushinteger(L, (lua_Integer)bytes);
    return 1;
}

static int lookup_table(void *user, const char *name, size_t len, int64_t *v)
{
    lua_State *L = user;
    lua_pushlstring(L, name, len);
    int isint = 0;
    lua_gettable(L, 2);
    *v = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    return isint ? 0 : -1;
}

/* host.eval(expr, vars): the validator's expression evaluator (ops.def header). */
static int h_eval(lua_State *L)
{
    size_t len;
    const char *e = luaL_checklstring(L, 1, &len);
    luaL_checktype(L, 2, LUA_TTABLE);
    memra_err err;
    memra_err_clear(&err);
    int64_t v = 0;
    if (memra_expr_eval(e, len, lookup_table, L, &v, &err) != MEMRA_OK)
        return luaL_error(L, "eval '%s': %s", e, err.msg);
    lua_pushinteger(L, v);
    return 1;
}

static void push_host(lua_State *L)
{
    char hex[24];
    lua_newtable(L);
    lua_pushcfunction(L, h_dtype_bytes);
    lua_setfield(L, -2, "dtype_bytes");
    lua_pushcfunction(L, h_eval);
    lua_setfield(L, -2, "eval");
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)memra_ops_catalog_hash());
    lua_pushstring(L, hex);
    lua_setfield(L, -2, "catalog_hash");
    lua_pushinteger(L, MEMRA_PLAN_ALIGN);
    lua_setfield(L, -2, "align");
    lua_pushinteger(L, MEMRA_ATTN_MAX_SPLIT); /* part of attention's order (attn_decode.h) */
    lua_setfield(L, -2, "attn_max_split");
    lua_pushinteger(L, memra_mmvq_direct_max_b()); /* tiers mmvq's direct path serves */
    lua_setfield(L, -2, "mmvq_direct_max_b");
}

/* Runs under lua_pcall: an allocation failure while building the tables is an error code,
 * not a panic. */
static int expose_cf(lua_State *L)
{
    memra_lua_host *h = lua_touserdata(L, 1);
    const memra_gguf *g = lua_touserdata(L, 2);
    uint64_t eager_max = (uint64_t)lua_tointeger(L, 3);
    luaL_checkstack(L, 16, "expose");
    push_model(L, g, eager_max);
    memra_lua_host_set_global(h, "model");
    push_ops(L);
    memra_lua_host_set_global(h, "ops");
    push_qtypes(L);
    memra_lua_host_set_global(h, "qtypes");
    push_host(L);
    memra_lua_host_set_global(h, "host");
    return 0;
}

int memra_lua_expose_eager(memra_lua_host *h, const memra_gguf *g, uint64_t eager_max,
                           memra_err *err)
{
    lua_State *L = memra_lua_host_state(h);
    lua_pushcfunction(L, expose_cf);
    lua_pushlightuserdata(L, h);
    lua_pushlightuserdata(L, (void *)g);
    lua_pushinteger(L, (lua_Integer)eager_max);
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
        int rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "exposing the model to Lua: %s",
                            lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
        lua_pop(L, 1);
        return rc;
    }
    return MEMRA_OK;
}

int memra_lua_expose(memra_lua_host *h, const memra_gguf *g, memra_err *err)
{
    return memra_lua_expose_eager(h, g, EAGER_MAX, err);
}
