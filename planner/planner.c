/*
 * planner.c — one memra-plan run: checkpoint + plan script -> validated plan directory
 * (see planner.h for the contract).
 *
 * Must not: write a plan the runtime loader refuses (every plan goes through
 * memra_plan_parse() against the manifest before it is written, and the manifest is read
 * back with memra_plan_manifest_load()), or let the script decide the identity fields
 * (hashes, tier, stage, layers): the host sets them.
 */
#include "planner.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "lua_host.h"
#include "lua_model.h"
#include "plan_write.h"

#ifndef MEMRA_PLANS_DIR
#define MEMRA_PLANS_DIR "plans"
#endif

static const uint32_t k_default_tiers[] = {1, 2, 4, 8, 12, 16};

void memra_planner_opts_init(memra_planner_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_tiers = sizeof k_default_tiers / sizeof k_default_tiers[0];
    memcpy(o->tiers, k_default_tiers, sizeof k_default_tiers);
    o->n_stages = 1;
    o->kv_dtype = MEMRA_DT_F16;
}

typedef struct run {
    const memra_planner_opts *o;
    const char *plans_dir;
    memra_gguf *g;
    memra_lua_host *h;
    int module_ref;
    memra_plan_manifest man; /* what the manifest will say; plans are checked against it */
    memra_planner_result *res;
    memra_err *err;
} run;

static void progress(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void progress(run *r, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (!r->o->progress)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    r->o->progress(line, r->o->progress_user);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ============================== options and the model ============================== */

static int check_opts(const memra_planner_opts *o, memra_err *err)
{
    if (!o->model_path || !o->out_dir)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "a model and an output directory are required");
    if (o->n_tiers == 0 || o->n_tiers > MEMRA_PLAN_MAX_TIERS)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "between 1 and %d tiers", MEMRA_PLAN_MAX_TIERS);
    for (uint32_t i = 0; i < o->n_tiers; i++)
        if (o->tiers[i] < 1 || o->tiers[i] > MEMRA_PLAN_MAX_B || (i && o->tiers[i] <= o->tiers[i - 1]))
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                              "tiers must increase within 1..%d (tier %u)", MEMRA_PLAN_MAX_B,
                              o->tiers[i]);
    if (o->n_stages > MEMRA_PLAN_MAX_STAGES || o->n_cuts >= MEMRA_PLAN_MAX_STAGES)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "at most %d stages", MEMRA_PLAN_MAX_STAGES);
    if (o->kv_dtype != MEMRA_DT_F16 && o->kv_dtype != MEMRA_DT_Q8_0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kv must be f16 or q8_0");
    return MEMRA_OK;
}

/* The architecture first: a file of an unknown architecture is refused by name before any
 * of its (unknown) metadata keys are read. */
static int open_model(run *r)
{
    memra_plan_manifest *m = &r->man;
    int rc = memra_gguf_open(r->o->model_path, &r->g, r->err);
    if (rc)
        return rc;
    rc = memra_gguf_get_str(r->g, "general.architecture", m->arch, sizeof m->arch, r->err);
    if (rc)
        return rc;
    if (!m->arch[0] || strspn(m->arch, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(m->arch))
        return MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED,
                          "%s: unknown architecture '%s' (general.architecture)", r->o->model_path,
                          m->arch);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.lua", r->plans_dir, m->arch);
    FILE *f = fopen(path, "rb");
    if (!f)
        return MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED,
                          "%s: unknown architecture '%s' (general.architecture): no plan script %s",
                          r->o->model_path, m->arch, path);
    fclose(f);
    return MEMRA_OK;
}

static int model_dims(run *r)
{
    char key[96];
    memra_plan_manifest *m = &r->man;
    int rc;
    snprintf(key, sizeof key, "%s.block_count", m->arch);
    if ((rc = memra_gguf_get_u32(r->g, key, &m->n_layer, r->err)))
        return rc;
    if (m->n_layer == 0 || m->n_layer > (1u << 20))
        return MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED, "%s: %s = %u layers", r->o->model_path,
                          key, m->n_layer);
    snprintf(key, sizeof key, "%s.embedding_length", m->arch);
    if ((rc = memra_gguf_get_u32(r->g, key, &m->n_embd, r->err)))
        return rc;
    const memra_gguf_tensor *te = memra_gguf_find_tensor(r->g, "token_embd.weight");
    if (!te)
        return MEMRA_FAIL(r->err, MEMRA_ERR_UNSUPPORTED, "%s: no token_embd.weight",
                          r->o->model_path);
    m->n_vocab = (uint32_t)te->ne[1];
    m->version = MEMRA_PLAN_VERSION;
    m->model_hash = memra_plan_model_hash(r->g);
    m->catalog_hash = memra_ops_catalog_hash();
    m->kv_dtype = r->o->kv_dtype;
    m->n_tiers = r->o->n_tiers;
    memcpy(m->tiers, r->o->tiers, sizeof m->tiers);
    for (int64_t i = 0; i < memra_gguf_n_tensors(r->g); i++)
        r->res->file_tensor_bytes += memra_gguf_tensor_at(r->g, i)->nbytes;
    return MEMRA_OK;
}

/* Open the sandbox, expose the model, import plans/<arch>.lua (it returns the module). */
static int load_script(run *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.lua", r->plans_dir, r->man.arch);
    memra_lua_opts lo = {.plans_dir = r->plans_dir, .budget = r->o->budget};
    int rc;
    if ((rc = memra_lua_host_open(&lo, &r->h, r->err)) || (rc = memra_lua_expose(r->h, r->g, r->err)) ||
        (rc = memra_lua_host_import(r->h, r->man.arch, r->err)))
        return rc;
    lua_State *L = memra_lua_host_state(r->h);
    if (!lua_istable(L, -1) || lua_getfield(L, -1, "tick") != LUA_TFUNCTION) {
        lua_settop(L, 0);
        return MEMRA_FAIL(r->err, MEMRA_ERR_SCRIPT, "%s must return a table with a tick function",
                          path);
    }
    lua_pop(L, 1);
    r->module_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return MEMRA_OK;
}

/* ===================================== stages ===================================== */

static int stages_from_cuts(run *r)
{
    memra_plan_manifest *m = &r->man;
    uint32_t prev = 0;
    m->n_stages = r->o->n_cuts + 1;
    for (uint32_t s = 0; s < m->n_stages; s++) {
        uint32_t end = s < r->o->n_cuts ? r->o->cuts[s] : m->n_layer;
        if (end <= prev || end > m->n_layer)
            return MEMRA_FAIL(r->err, MEMRA_ERR_INVALID_ARG,
                              "cuts must increase strictly within (0, %u): cut %u", m->n_layer, end);
        m->stage_layers[s][0] = prev;
        m->stage_layers[s][1] = prev = end;
    }
    return MEMRA_OK;
}

/* The script's stages(n) balances weight bytes; it returns n {begin, end} pairs. */
static int stages_from_script(run *r, uint32_t n)
{
    lua_State *L = memra_lua_host_state(r->h);
    memra_plan_manifest *m = &r->man;
    int rc;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->module_ref);
    lua_getfield(L, -1, "stages");
    lua_remove(L, -2);
    lua_pushinteger(L, n);
    if ((rc = memra_lua_host_call(r->h, 1, 1, r->err)))
        return rc;
    m->n_stages = n;
    for (uint32_t s = 0; s < n && rc == MEMRA_OK; s++) {
        lua_rawgeti(L, -1, s + 1);
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        lua_Integer b = lua_tointeger(L, -2), e = lua_tointeger(L, -1);
        if (b != (s ? m->stage_layers[s - 1][1] : 0) || e <= b || e > m->n_layer ||
            (s + 1 == n && e != m->n_layer))
            rc = MEMRA_FAIL(r->err, MEMRA_ERR_SCRIPT,
                            "stages(%u): stage %u = [%lld, %lld) does not continue the cover of "
                            "%u layers",
                            n, s, (long long)b, (long long)e, m->n_layer);
        m->stage_layers[s][0] = (uint32_t)b;
        m->stage_layers[s][1] = (uint32_t)e;
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    return rc;
}

static int plan_stages(run *r)
{
    uint32_t n = r->o->n_stages ? r->o->n_stages : 1;
    if (r->o->n_cuts)
        return stages_from_cuts(r);
    if (n > r->man.n_layer)
        return MEMRA_FAIL(r->err, MEMRA_ERR_INVALID_ARG, "%u stages for %u layers", n,
                          r->man.n_layer);
    if (n == 1) {
        r->man.n_stages = 1;
        r->man.stage_layers[0][0] = 0;
        r->man.stage_layers[0][1] = r->man.n_layer;
        return MEMRA_OK;
    }
    return stages_from_script(r, n);
}

/* ==================================== one plan ==================================== */

static void hex64(char out[17], uint64_t v) { snprintf(out, 17, "%016" PRIx64, v); }

/* Ask the script for (tier, stage); leaves the JSON doc with the host's identity fields. */
static int script_tick(run *r, uint32_t tier, uint32_t stage, json_t **doc)
{
    lua_State *L = memra_lua_host_state(r->h);
    const memra_plan_manifest *m = &r->man;
    char hex[17];
    int rc;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->module_ref);
    lua_getfield(L, -1, "tick");
    lua_remove(L, -2);
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, tier);
    lua_setfield(L, -2, "tier");
    lua_pushinteger(L, stage);
    lua_setfield(L, -2, "stage");
    lua_pushinteger(L, m->n_stages);
    lua_setfield(L, -2, "n_stages");
    lua_pushinteger(L, m->stage_layers[stage][0]);
    lua_setfield(L, -2, "layer_begin");
    lua_pushinteger(L, m->stage_layers[stage][1]);
    lua_setfield(L, -2, "layer_end");
    lua_pushstring(L, memra_dtype_name(m->kv_dtype));
    lua_setfield(L, -2, "kv");
    if ((rc = memra_lua_host_call(r->h, 1, 1, r->err)))
        return rc;
    rc = memra_lua_to_json(L, -1, doc, r->err);
    lua_pop(L, 1);
    if (rc)
        return rc;
    if (!json_is_object(*doc))
        return MEMRA_FAIL(r->err, MEMRA_ERR_SCRIPT, "tick() must return a plan table");
    json_object_set_new(*doc, "format", json_string("memra-plan"));
    json_object_set_new(*doc, "version", json_integer(MEMRA_PLAN_VERSION));
    json_object_set_new(*doc, "arch", json_string(m->arch));
    hex64(hex, m->model_hash);
    json_object_set_new(*doc, "model_hash", json_string(hex));
    hex64(hex, m->catalog_hash);
    json_object_set_new(*doc, "catalog_hash", json_string(hex));
    json_object_set_new(*doc, "tier", json_integer(tier));
    json_object_set_new(*doc, "stage", json_integer(stage));
    json_object_set_new(*doc, "n_stages", json_integer(m->n_stages));
    json_object_set_new(*doc, "layers", json_pack("[i,i]", (int)m->stage_layers[stage][0],
                                                  (int)m->stage_layers[stage][1]));
    memra_plan_json_canonical(*doc);
    return MEMRA_OK;
}

static void add_stats(json_t *doc, const memra_plan *p)
{
    const memra_plan_stats *s = &p->stats;
    json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "launches", (json_int_t)s->launches,
                          "arena_bytes", (json_int_t)p->arena_bytes, "weight_bytes",
                          (json_int_t)s->weight_bytes, "weight_bytes_streamed",
                          (json_int_t)s->weight_bytes_streamed, "state_bytes_per_row",
                          (json_int_t)s->state_bytes_per_row, "kv_bytes_per_token",
                          (json_int_t)s->kv_bytes_per_token);
    json_object_set_new(doc, "stats", o);
    memra_plan_json_canonical(doc);
}

/* Merge a plan's (sorted) kernels into the result's sorted union. */
static int merge_kernels(run *r, const memra_plan *p)
{
    memra_planner_result *res = r->res;
    for (uint32_t k = 0; k < p->n_kernels; k++) {
        uint32_t at = 0;
        while (at < res->n_kernels && strcmp(res->kernels[at], p->kernels[k]) < 0)
            at++;
        if (at < res->n_kernels && strcmp(res->kernels[at], p->kernels[k]) == 0)
            continue;
        void *q = realloc(res->kernels, (res->n_kernels + 1) * sizeof *res->kernels);
        if (!q)
            return MEMRA_FAIL(r->err, MEMRA_ERR_NOMEM, "kernel list");
        res->kernels = q;
        memmove(res->kernels[at + 1], res->kernels[at],
                (res->n_kernels - at) * sizeof *res->kernels);
        memcpy(res->kernels[at], p->kernels[k], MEMRA_KERNEL_KEY_MAX);
        res->n_kernels++;
    }
    return MEMRA_OK;
}

static void record(run *r, const memra_plan *p)
{
    memra_planner_plan_info *in = &r->res->plans[r->res->n_plans++];
    in->tier = p->tier;
    in->stage = p->stage;
    in->layer_begin = p->layer_begin;
    in->layer_end = p->layer_end;
    in->arena_bytes = p->arena_bytes;
    in->n_kernels = p->n_kernels;
    in->stats = p->stats;
    for (uint32_t i = 0; i < p->n_launches; i++)
        in->op_counts[p->launches[i].op]++;
}

/* Validate with the runtime's loader; keep a refused plan next to the others for
 * inspection (*.rejected.json) and report it as the planner bug it is. */
static int validate(run *r, const char *text, const char *name, memra_plan **plan)
{
    memra_err sub;
    memra_err_clear(&sub);
    int rc = memra_plan_parse(text, strlen(text), &r->man, r->g, plan, &sub);
    if (rc == MEMRA_OK)
        return MEMRA_OK;
    char rej[96];
    snprintf(rej, sizeof rej, "%.60s.rejected.json", name);
    memra_write_text_file(r->o->out_dir, rej, text, NULL);
    return MEMRA_FAIL(r->err, rc, "the script's plan %s fails validation (kept as %s): %s", name,
                      rej, sub.msg);
}

static int build_plan(run *r, uint32_t tier, uint32_t stage)
{
    json_t *doc = NULL;
    memra_plan *plan = NULL;
    char name[64], *text = NULL;
    double t0 = now_s();
    int rc;
    memra_plan_file_name(name, sizeof name, tier, stage);
    MEMRA_TRY(script_tick(r, tier, stage, &doc));
    if (!(text = memra_plan_json_dump(doc))) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_NOMEM, "plan text");
        goto fail;
    }
    MEMRA_TRY(validate(r, text, name, &plan));
    add_stats(doc, plan);
    free(text);
    if (!(text = memra_plan_json_dump(doc))) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_NOMEM, "plan text");
        goto fail;
    }
    MEMRA_TRY(memra_write_text_file(r->o->out_dir, name, text, r->err));
    MEMRA_TRY(merge_kernels(r, plan));
    record(r, plan);
    progress(r, "[%u/%u] %s: tier %u stage %u layers [%u, %u): %u launches, arena %" PRIu64
                " bytes (%.0f ms)",
             r->res->n_plans, r->man.n_tiers * r->man.n_stages, name, tier, stage,
             plan->layer_begin, plan->layer_end, plan->n_launches, plan->arena_bytes,
             1e3 * (now_s() - t0));
fail:
    memra_plan_free(plan);
    json_decref(doc);
    free(text);
    return rc;
}

/* ==================================== manifest ==================================== */

static json_t *manifest_doc(run *r)
{
    const memra_plan_manifest *m = &r->man;
    const memra_planner_result *res = r->res;
    char hex[17], name[64];
    json_t *doc = json_object(), *tiers = json_array(), *stages = json_array();
    json_t *kernels = json_array(), *plans = json_array();
    for (uint32_t i = 0; i < m->n_tiers; i++)
        json_array_append_new(tiers, json_integer(m->tiers[i]));
    for (uint32_t s = 0; s < m->n_stages; s++)
        json_array_append_new(stages, json_pack("[i,i]", (int)m->stage_layers[s][0],
                                                (int)m->stage_layers[s][1]));
    for (uint32_t k = 0; k < res->n_kernels; k++)
        json_array_append_new(kernels, json_string(res->kernels[k]));
    for (uint32_t i = 0; i < res->n_plans; i++) {
        const memra_planner_plan_info *p = &res->plans[i];
        memra_plan_file_name(name, sizeof name, p->tier, p->stage);
        json_array_append_new(plans, json_pack("{s:i,s:i,s:s,s:i,s:I}", "tier", (int)p->tier,
                                               "stage", (int)p->stage, "file", name, "launches",
                                               (int)p->stats.launches, "arena_bytes",
                                               (json_int_t)p->arena_bytes));
    }
    json_object_set_new(doc, "format", json_string("memra-manifest"));
    json_object_set_new(doc, "version", json_integer(MEMRA_PLAN_VERSION));
    json_object_set_new(doc, "arch", json_string(m->arch));
    hex64(hex, m->model_hash);
    json_object_set_new(doc, "model_hash", json_string(hex));
    hex64(hex, m->catalog_hash);
    json_object_set_new(doc, "catalog_hash", json_string(hex));
    json_object_set_new(doc, "tiers", tiers);
    json_object_set_new(doc, "stages", stages);
    json_object_set_new(doc, "n_layer", json_integer(m->n_layer));
    json_object_set_new(doc, "n_embd", json_integer(m->n_embd));
    json_object_set_new(doc, "n_vocab", json_integer(m->n_vocab));
    json_object_set_new(doc, "kv", json_string(memra_dtype_name(m->kv_dtype)));
    json_object_set_new(doc, "kernels", kernels);
    json_object_set_new(doc, "plans", plans);
    memra_plan_json_canonical(doc);
    return doc;
}

static int write_manifest(run *r)
{
    json_t *doc = manifest_doc(r);
    char *text = doc ? memra_plan_json_dump(doc) : NULL;
    memra_plan_manifest *back = NULL;
    int rc;
    if (!text) {
        rc = MEMRA_FAIL(r->err, MEMRA_ERR_NOMEM, "manifest text");
        goto fail;
    }
    MEMRA_TRY(memra_write_text_file(r->o->out_dir, "manifest.json", text, r->err));
    /* Read it back with the runtime's loader: the writer and the reader cannot drift. */
    MEMRA_TRY(memra_plan_manifest_load(r->o->out_dir, &back, r->err));
fail:
    memra_plan_manifest_free(back);
    json_decref(doc);
    free(text);
    return rc;
}

/* ====================================== run ====================================== */

static int make_dir(const char *dir, memra_err *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    return MEMRA_OK;
}

static int run_all(run *r)
{
    int rc;
    MEMRA_TRY(open_model(r));
    MEMRA_TRY(model_dims(r));
    MEMRA_TRY(load_script(r));
    MEMRA_TRY(plan_stages(r));
    MEMRA_TRY(make_dir(r->o->out_dir, r->err));
    progress(r, "%s: %s, %u layers, %u tier(s) x %u stage(s)", r->o->model_path, r->man.arch,
             r->man.n_layer, r->man.n_tiers, r->man.n_stages);
    for (uint32_t t = 0; t < r->man.n_tiers; t++)
        for (uint32_t s = 0; s < r->man.n_stages; s++)
            MEMRA_TRY(build_plan(r, r->man.tiers[t], s));
    MEMRA_TRY(write_manifest(r));
fail:
    return rc;
}

int memra_planner_run(const memra_planner_opts *o, memra_planner_result **res, memra_err *err)
{
    run r = {.o = o, .err = err, .module_ref = LUA_NOREF};
    double t0 = now_s();
    int rc;
    *res = NULL;
    MEMRA_TRY(check_opts(o, err));
    r.plans_dir = o->plans_dir ? o->plans_dir : MEMRA_PLANS_DIR;
    r.res = calloc(1, sizeof *r.res);
    if (!r.res) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "planner result");
        goto fail;
    }
    MEMRA_TRY(run_all(&r));
    memcpy(r.res->arch, r.man.arch, sizeof r.res->arch);
    r.res->model_hash = r.man.model_hash;
    r.res->n_layer = r.man.n_layer;
    r.res->seconds = now_s() - t0;
    *res = r.res;
    r.res = NULL;
fail:
    memra_planner_result_free(r.res);
    memra_lua_host_close(r.h);
    memra_gguf_close(r.g);
    return rc;
}

void memra_planner_result_free(memra_planner_result *r)
{
    if (!r)
        return;
    free(r->kernels);
    free(r);
}

/* ===================================== summary ===================================== */

static void print_ops(FILE *f, const memra_planner_plan_info *p)
{
    fprintf(f, "  ops in plan b%u-s%u:", p->tier, p->stage);
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++)
        if (p->op_counts[op])
            fprintf(f, " %s %u", memra_op_get(op)->name, p->op_counts[op]);
    fprintf(f, "\n");
}

/* Keys that differ only in ":b=N" print as one line with the tiers: "mmvq:qt=q4_K:b={1,8}". */
static void print_kernels(FILE *f, const memra_planner_result *r)
{
    char base[MEMRA_KERNEL_KEY_MAX], other[MEMRA_KERNEL_KEY_MAX + 16];
    uint8_t *done = calloc(r->n_kernels + 1, 1);
    fprintf(f, "  kernel specializations (%u):\n", r->n_kernels);
    for (uint32_t k = 0; done && k < r->n_kernels; k++) {
        if (done[k])
            continue;
        const char *b = strstr(r->kernels[k], ":b=");
        if (!b) {
            fprintf(f, "    %s\n", r->kernels[k]);
            continue;
        }
        snprintf(base, sizeof base, "%.*s", (int)(b - r->kernels[k]), r->kernels[k]);
        fprintf(f, "    %s:b={", base);
        const char *sep = "";
        for (uint32_t t = 0; t < MEMRA_PLAN_MAX_B + 1; t++) /* tiers in numeric order */
            for (uint32_t j = k; j < r->n_kernels; j++) {
                snprintf(other, sizeof other, "%s:b=%u", base, t);
                if (!done[j] && strcmp(r->kernels[j], other) == 0) {
                    fprintf(f, "%s%u", sep, t);
                    sep = ",";
                    done[j] = 1;
                }
            }
        fprintf(f, "}\n");
    }
    free(done);
}

void memra_planner_print_summary(const memra_planner_result *r, void *file)
{
    FILE *f = file;
    uint32_t n_stages = 0;
    for (uint32_t i = 0; i < r->n_plans; i++)
        if (r->plans[i].stage + 1 > n_stages)
            n_stages = r->plans[i].stage + 1;
    fprintf(f, "memra-plan: %s, %u layers, model hash %016" PRIx64 ", %u plan(s) in %.2f s\n",
            r->arch, r->n_layer, r->model_hash, r->n_plans, r->seconds);
    fprintf(f, "  %4s %5s %9s %9s %12s %14s %14s %12s %14s\n", "tier", "stage", "layers",
            "launches", "arena B", "weights B", "streamed B", "state B/row", "kv B/tok/row");
    for (uint32_t i = 0; i < r->n_plans; i++) {
        const memra_planner_plan_info *p = &r->plans[i];
        char layers[32];
        snprintf(layers, sizeof layers, "[%u,%u)", p->layer_begin, p->layer_end);
        fprintf(f, "  %4u %5u %9s %9u %12" PRIu64 " %14" PRIu64 " %14" PRIu64 " %12" PRIu64
                   " %14" PRIu64 "\n",
                p->tier, p->stage, layers, p->stats.launches, p->arena_bytes,
                p->stats.weight_bytes, p->stats.weight_bytes_streamed,
                p->stats.state_bytes_per_row, p->stats.kv_bytes_per_token);
    }
    uint64_t wsum = 0;
    uint32_t launches = 0;
    for (uint32_t i = 0; i < r->n_plans && i < n_stages; i++) {
        wsum += r->plans[i].stats.weight_bytes;
        launches += r->plans[i].stats.launches;
    }
    fprintf(f, "  launches per tick (all stages): %u\n", launches);
    fprintf(f, "  weight bytes per tick (all stages): %" PRIu64 "; checkpoint tensor bytes: %" PRIu64
               " (%s)\n",
            wsum, r->file_tensor_bytes, wsum == r->file_tensor_bytes ? "every tensor read once"
                                                                     : "DIFFERENT");
    for (uint32_t i = 0; i < r->n_plans && i < n_stages; i++)
        print_ops(f, &r->plans[i]);
    print_kernels(f, r);
}

void memra_planner_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1200];
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            memra_planner_remove_dir(p);
        else
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}
