/*
 * lua_host.c — the sandboxed Lua 5.4 state (see lua_host.h for the contract).
 *
 * Invariants: the script-visible world is exactly the template table built in
 * host_template() plus what memra_lua_host_set_global() adds; every chunk runs under
 * host_pcall(), so the budget hook and the traceback handler are always in place.
 */
#include "lua_host.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_EVERY 1000                      /* instructions per count-hook call */
#define DEFAULT_BUDGET UINT64_C(2000000000)  /* ~10 s of plain Lua; a 9b plan set uses ~1% */
#define DEFAULT_MEM_LIMIT ((size_t)2 << 30)
#define UNSUPPORTED_TAG "memra_unsupported"

struct memra_lua_host {
    lua_State *L;
    char *plans_dir;
    uint64_t budget, ticks;
    size_t mem_used, mem_limit;
    int err_code;   /* code chosen by the message handler for the current failure */
    int template_ref;
    int imports_ref;
};

static memra_lua_host *host_of(lua_State *L) { return *(memra_lua_host **)lua_getextraspace(L); }

/* ===================================== limits ===================================== */

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    memra_lua_host *h = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        h->mem_used -= old;
        return NULL;
    }
    if (nsize > old && h->mem_used + (nsize - old) > h->mem_limit)
        return NULL; /* Lua raises "not enough memory" */
    void *p = realloc(ptr, nsize);
    if (p)
        h->mem_used = h->mem_used - old + nsize;
    return p;
}

static void budget_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    memra_lua_host *h = host_of(L);
    if (++h->ticks > h->budget / HOOK_EVERY)
        luaL_error(L, "instruction budget of %I exhausted (runaway loop?)",
                   (lua_Integer)h->budget);
}

/* ========================== the globals a script may use ========================== */

static int strict_index(lua_State *L)
{
    return luaL_error(L, "unknown global '%s'", lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static int strict_newindex(lua_State *L)
{
    return luaL_error(L, "assignment to undeclared global '%s' (declare it local)",
                      lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

/* Push a fresh _ENV: copies of the template's entries (library tables copied one level
 * deep, so one script cannot patch another's string or table library), strict metatable. */
static void push_env(lua_State *L, memra_lua_host *h)
{
    lua_newtable(L);
    int env = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->template_ref);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -1) == LUA_TTABLE && lua_getmetatable(L, -1) == 0) {
            lua_newtable(L);
            lua_pushnil(L);
            while (lua_next(L, -3)) {
                lua_pushvalue(L, -2);
                lua_insert(L, -2);
                lua_rawset(L, -4);
            }
            lua_replace(L, -2);
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, env);
    }
    lua_pop(L, 1);
    lua_pushvalue(L, env);
    lua_setfield(L, env, "_G");
    lua_newtable(L);
    lua_pushcfunction(L, strict_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, strict_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, env);
}

/* load(chunk [, chunkname [, mode [, env]]]): strings only, text mode only. */
static int safe_load(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "=(load)");
    const char *mode = luaL_optstring(L, 3, "t");
    if (strcmp(mode, "t") != 0)
        return luaL_error(L, "load: only text chunks are allowed (mode 't')");
    if (luaL_loadbufferx(L, s, len, name, "t") != LUA_OK) {
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    if (!lua_isnoneornil(L, 4))
        lua_pushvalue(L, 4);
    else
        push_env(L, host_of(L));
    lua_setupvalue(L, -2, 1);
    return 1;
}

static int safe_print(lua_State *L)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 1; i <= lua_gettop(L); i++) {
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    memra_log(MEMRA_LOG_INFO, "script: %s", lua_tostring(L, -1));
    return 0;
}

/* unsupported(msg): raise an error the host reports as MEMRA_ERR_UNSUPPORTED. */
static int script_unsupported(lua_State *L)
{
    const char *msg = luaL_checkstring(L, 1);
    lua_newtable(L);
    luaL_where(L, 1);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    lua_setfield(L, -2, "msg");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, UNSUPPORTED_TAG);
    return lua_error(L);
}

static int script_import(lua_State *L);

static void host_template(lua_State *L, memra_lua_host *h)
{
    static const char *const base_ok[] = {"assert", "error", "ipairs", "next", "pairs", "pcall",
                                          "rawequal", "rawget", "rawlen", "rawset", "select",
                                          "setmetatable", "getmetatable", "tonumber", "tostring",
                                          "type", "xpcall", "collectgarbage", "_VERSION", NULL};
    static const char *const libs[] = {"string", "table", "math", "utf8", NULL};
    lua_newtable(L);
    int t = lua_gettop(L);
    for (const char *const *n = base_ok; *n; n++) {
        lua_getglobal(L, *n);
        lua_setfield(L, t, *n);
    }
    for (const char *const *n = libs; *n; n++) {
        lua_getglobal(L, *n);
        lua_setfield(L, t, *n);
    }
    lua_getfield(L, t, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump"); /* bytecode out is as unwanted as bytecode in */
    lua_pop(L, 1);
    /* Strings' shared metatable: hide it, so no script can patch the string library that
     * every later chunk's ("x"):method() calls go through. */
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_pushliteral(L, "locked");
        lua_setfield(L, -2, "__metatable");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, safe_load);
    lua_setfield(L, t, "load");
    lua_pushcfunction(L, safe_print);
    lua_setfield(L, t, "print");
    lua_pushcfunction(L, script_unsupported);
    lua_setfield(L, t, "unsupported");
    lua_pushcfunction(L, script_import);
    lua_setfield(L, t, "import");
    h->template_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    h->imports_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* ============================== running, with errors ============================== */

/* Message handler: pick the error code, keep the script's message first, add a traceback. */
static int host_msgh(lua_State *L)
{
    memra_lua_host *h = host_of(L);
    const char *msg = NULL;
    h->err_code = MEMRA_ERR_SCRIPT;
    if (lua_type(L, 1) == LUA_TTABLE) {
        lua_getfield(L, 1, UNSUPPORTED_TAG);
        if (lua_toboolean(L, -1))
            h->err_code = MEMRA_ERR_UNSUPPORTED;
        lua_getfield(L, 1, "msg");
        msg = lua_tostring(L, -1);
    } else {
        msg = lua_tostring(L, 1);
    }
    if (!msg)
        msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static int host_pcall(memra_lua_host *h, int nargs, int nresults, memra_err *err)
{
    lua_State *L = h->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, host_msgh);
    lua_insert(L, base);
    h->ticks = 0;
    h->err_code = MEMRA_ERR_SCRIPT;
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
    int st = lua_pcall(L, nargs, nresults, base);
    lua_sethook(L, NULL, 0, 0);
    lua_remove(L, base);
    if (st == LUA_OK)
        return MEMRA_OK;
    int code = st == LUA_ERRRUN ? h->err_code : MEMRA_ERR_SCRIPT;
    const char *msg = lua_tostring(L, -1);
    if (st == LUA_ERRMEM)
        msg = "script exceeded the planner's memory limit";
    int rc = MEMRA_FAIL(err, code, "%s", msg ? msg : "script error");
    lua_pop(L, 1);
    return rc;
}

int memra_lua_host_run(memra_lua_host *h, const char *src, size_t len, const char *chunkname,
                       int nresults, memra_err *err)
{
    lua_State *L = h->L;
    if (luaL_loadbufferx(L, src, len, chunkname, "t") != LUA_OK) {
        int rc = MEMRA_FAIL(err, MEMRA_ERR_SCRIPT, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return rc;
    }
    push_env(L, h);
    lua_setupvalue(L, -2, 1);
    return host_pcall(h, 0, nresults, err);
}

int memra_lua_host_call(memra_lua_host *h, int nargs, int nresults, memra_err *err)
{
    return host_pcall(h, nargs, nresults, err);
}

/* ===================================== imports ===================================== */

static int read_script(const char *path, luaL_Buffer *b)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        luaL_addlstring(b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}

/* import(name) inside a script: load <plans_dir>/<name>.lua once, return its result. */
static int script_import(lua_State *L)
{
    memra_lua_host *h = host_of(L);
    const char *name = luaL_checkstring(L, 1);
    if (!*name || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(name) ||
        strlen(name) > 64)
        return luaL_error(L, "import: bad module name '%s' (want [a-z0-9_]+)", name);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->imports_ref);
    int imports = lua_gettop(L);
    if (lua_getfield(L, imports, name) != LUA_TNIL) {
        if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))
            return luaL_error(L, "import: cycle through '%s'", name);
        return 1;
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 0); /* "loading" marker */
    lua_setfield(L, imports, name);
    if (!h->plans_dir)
        return luaL_error(L, "import: no plans directory");
    lua_pushfstring(L, "%s/%s.lua", h->plans_dir, name);
    const char *path = lua_tostring(L, -1);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    if (read_script(path, &b) != 0)
        return luaL_error(L, "import: cannot read %s", path);
    luaL_pushresult(&b);
    size_t len;
    const char *src = lua_tolstring(L, -1, &len);
    lua_pushfstring(L, "@%s.lua", name);
    if (luaL_loadbufferx(L, src, len, lua_tostring(L, -1), "t") != LUA_OK)
        return lua_error(L);
    push_env(L, h);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, imports, name);
    return 1;
}

int memra_lua_host_import(memra_lua_host *h, const char *name, memra_err *err)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->template_ref);
    lua_getfield(L, -1, "import");
    lua_remove(L, -2);
    lua_pushstring(L, name);
    return host_pcall(h, 1, 1, err);
}

/* ===================================== lifetime ===================================== */

int memra_lua_host_open(const memra_lua_opts *o, memra_lua_host **out, memra_err *err)
{
    memra_lua_host *h = calloc(1, sizeof *h);
    *out = NULL;
    if (!h)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "lua host");
    h->budget = o && o->budget ? o->budget : DEFAULT_BUDGET;
    h->mem_limit = o && o->mem_limit ? o->mem_limit : DEFAULT_MEM_LIMIT;
    if (o && o->plans_dir && !(h->plans_dir = strdup(o->plans_dir)))
        goto nomem;
    h->L = lua_newstate(host_alloc, h);
    if (!h->L)
        goto nomem;
    *(memra_lua_host **)lua_getextraspace(h->L) = h;
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table},
                                    {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_MATHLIBNAME, luaopen_math},
                                    {LUA_UTF8LIBNAME, luaopen_utf8}};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        luaL_requiref(h->L, libs[i].name, libs[i].func, 1);
        lua_pop(h->L, 1);
    }
    host_template(h->L, h);
    *out = h;
    return MEMRA_OK;
nomem:
    memra_lua_host_close(h);
    return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "lua host");
}

void memra_lua_host_close(memra_lua_host *h)
{
    if (!h)
        return;
    if (h->L)
        lua_close(h->L);
    free(h->plans_dir);
    free(h);
}

lua_State *memra_lua_host_state(memra_lua_host *h) { return h->L; }

void memra_lua_host_set_global(memra_lua_host *h, const char *name)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->template_ref);
    lua_insert(L, -2);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
}

uint64_t memra_lua_host_instructions(const memra_lua_host *h) { return h->ticks * HOOK_EVERY; }
