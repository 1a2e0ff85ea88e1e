/*
 * lua_host.h — the sandboxed Lua 5.4 state plan scripts run in (STYLE.md "Planner").
 *
 * The host opens only the base, table, string, math and utf8 libraries; removes dofile,
 * loadfile and string.dump; replaces load with a text-only version; never opens package
 * (no require). Every chunk (the arch script, each import) is loaded in text mode with a
 * fresh _ENV holding copies of the allowed globals; reading or writing an unknown global
 * raises. Calls into Lua go through one lua_pcall with a traceback handler, under an
 * instruction budget (count hook) and a memory cap (allocator).
 *
 * Scripts reach the planner's plans directory only through import("name") (name matches
 * [a-z0-9_]+, resolved to <plans_dir>/<name>.lua, loaded once). A script signals "valid but
 * not supported" (unknown weight type, unknown layout) with unsupported("msg"), which maps
 * to MEMRA_ERR_UNSUPPORTED; every other error is MEMRA_ERR_SCRIPT.
 *
 * Must not: give scripts any way to reach the file system, the environment, the clock or
 * bytecode.
 */
#ifndef MEMRA_LUA_HOST_H
#define MEMRA_LUA_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct lua_State lua_State;
typedef struct memra_lua_host memra_lua_host;

typedef struct memra_lua_opts {
    const char *plans_dir; /* directory of import()able scripts; NULL = imports fail */
    uint64_t budget;       /* instructions per memra_lua_host_call; 0 = default (2e9) */
    size_t mem_limit;      /* bytes the state may allocate; 0 = default (2 GiB) */
} memra_lua_opts;

int memra_lua_host_open(const memra_lua_opts *o, memra_lua_host **out, memra_err *err);
void memra_lua_host_close(memra_lua_host *h); /* NULL is a no-op */
lua_State *memra_lua_host_state(memra_lua_host *h);

/* Set a global visible to every chunk loaded afterwards (pops the value on top of the
 * stack). Used to expose `model`, `ops`, `qtypes`, `host`. */
void memra_lua_host_set_global(memra_lua_host *h, const char *name);

/* Load a chunk (text only) with a fresh sandbox _ENV and run it; leaves nresults values on
 * the stack. chunkname is shown in error messages (e.g. "@plans/qwen35.lua"). */
int memra_lua_host_run(memra_lua_host *h, const char *src, size_t len, const char *chunkname,
                       int nresults, memra_err *err);
/* Like run, for <plans_dir>/<name>.lua; leaves the chunk's first result on the stack. */
int memra_lua_host_import(memra_lua_host *h, const char *name, memra_err *err);
/* Call the function below nargs arguments on the stack (one pcall, traceback, budget). */
int memra_lua_host_call(memra_lua_host *h, int nargs, int nresults, memra_err *err);

/* Instructions executed by the last run/call (in units of the hook granularity, 1000). */
uint64_t memra_lua_host_instructions(const memra_lua_host *h);

#endif
