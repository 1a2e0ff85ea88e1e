/*
 * lua_model.h — expose a checkpoint and the op catalog to plan scripts.
 *
 * Sets the sandbox globals (visible to every chunk loaded afterwards):
 *   model   {arch, kv = {key -> value}, tensors = {name -> {name, type, n_dims, ne[4],
 *           nbytes, offset}}, tensor_names = {file order}}; arrays longer than 4096
 *           elements (tokenizer tokens, merges) are read-only lazy proxies (# and [i] work)
 *   ops     {op name -> {name, key, doc, args = {{name, kind, type, access, slot, req,
 *           spec}...}, index = {arg name -> 1-based position}}}   (runtime/ops.def)
 *   qtypes  {name -> {id, name, block_elems, block_bytes, qdot, f32, rows}} (the last three:
 *           whether the weight classes of ops.def accept the type)
 *   host    {dtype_bytes(dtype, n), eval(expr, vars), catalog_hash, align}
 * The gguf handle is borrowed and must outlive the host.
 */
#ifndef MEMRA_LUA_MODEL_H
#define MEMRA_LUA_MODEL_H

#include "err.h"
#include "gguf.h"
#include "lua_host.h"

int memra_lua_expose(memra_lua_host *h, const memra_gguf *g, memra_err *err);
/* Same with another eager/lazy threshold (tests use it to exercise the lazy proxies). */
int memra_lua_expose_eager(memra_lua_host *h, const memra_gguf *g, uint64_t eager_max,
                           memra_err *err);

#endif
