/*
 * test_plan.c — the op catalog, the planner (Lua sandbox, plan scripts, memra-plan as a
 * library) and the plan loader / validator.
 *
 * Models come from the forge (tiny, tiny-moe: forged once per test case group in an
 * unchecked fixture, inherited by the forked tests). Golden plans of tiny live in
 * tests/data/plans/tiny/; regenerate them after an intended change with
 *   MEMRA_REGEN_GOLDEN=1 CK_RUN_CASE=golden ./build/test_planner
 * (or: memra-forge --preset tiny -o /tmp/tiny.gguf && memra-plan -q -m /tmp/tiny.gguf
 *  -o tests/data/plans/tiny — the same bytes) and review the diff.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "forge.h"
#include "gguf.h"
#include "lua_host.h"
#include "lua_model.h"
#include "mmvq.h"
#include "ops.h"
#include "plan.h"
#include "planner.h"
#include "quant.h"
#include "test_util.h"

/* Launch counts of the tiny shapes (plans/qwen35.lua header: 1 + 8 GDN + 9 attention per
 * layer + 3 for dense; MoE FFN 6 instead of 4): tiny has 8 layers, 2 of them attention. */
#define TINY_LAUNCHES 70
#define TINY_MOE_LAUNCHES 86
/* Tier 1 keeps mmvq's direct weight types (q4_K, q6_K) apart from the others (plans/dsl.lua
 * Plan:mmvq): the tiny file's Q4_K_M mix has no projection group that mixes them (its mixed
 * groups are q4_K + q6_K, both direct). */
#define TINY_T1_SPLITS 0
#define TINY_LAUNCHES_OF(tier) (TINY_LAUNCHES + ((tier) == 1 ? TINY_T1_SPLITS : 0))

/* ===================================== fixture ===================================== */

static char g_root[512];     /* temp dir of this fixture */
static char g_tiny[600], g_moe[600];
static char g_plans[600];     /* tiny, default tiers, one stage */
static memra_gguf *g_g;       /* tiny */

static void forge(const char *preset, const char *path)
{
    memra_forge_opts o;
    memra_err e;
    memra_err_clear(&e);
    memra_forge_opts_init(&o);
    o.shape = memra_forge_preset(preset);
    ck_assert_ptr_nonnull(o.shape);
    int rc = memra_forge_write(&o, path, &e);
    ck_assert_msg(rc == MEMRA_OK, "forge %s: %s", preset, e.msg);
}

static void sub_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_root, name);
}

/* Run the planner; returns the code, the message in err. */
static int plan_dir(const char *model, const char *dir, const char *tiers, uint32_t n_stages,
                    uint32_t cut, uint32_t kv, const char *plans_dir, uint64_t budget,
                    memra_planner_result **res, memra_err *err)
{
    memra_planner_opts o;
    memra_planner_result *r = NULL;
    memra_planner_opts_init(&o);
    o.model_path = model;
    o.out_dir = dir;
    o.plans_dir = plans_dir ? plans_dir : tu_source_path("plans");
    o.n_stages = n_stages;
    o.kv_dtype = kv;
    o.budget = budget;
    if (cut) {
        o.n_cuts = 1;
        o.cuts[0] = cut;
    }
    if (tiers) {
        o.n_tiers = 0;
        for (const char *s = tiers; *s; s += *s == ',')
            o.tiers[o.n_tiers++] = (uint32_t)strtoul(s, (char **)&s, 10);
    }
    memra_err_clear(err);
    int rc = memra_planner_run(&o, &r, err);
    if (res)
        *res = r;
    else
        memra_planner_result_free(r);
    return rc;
}

/* Each test case forges only what it needs (forging is most of the suite's time). */
static void setup_common(int moe, int plans)
{
    memra_err e;
    tu_tmp_path(g_root, sizeof g_root, "-plan");
    ck_assert_int_eq(mkdir(g_root, 0755), 0);
    sub_dir(g_tiny, sizeof g_tiny, "tiny.gguf");
    sub_dir(g_moe, sizeof g_moe, "tiny-moe.gguf");
    sub_dir(g_plans, sizeof g_plans, "plans-tiny");
    forge("tiny", g_tiny);
    if (moe)
        forge("tiny-moe", g_moe);
    if (plans) {
        int rc = plan_dir(g_tiny, g_plans, NULL, 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e);
        ck_assert_msg(rc == MEMRA_OK, "plan tiny: %s", e.msg);
    }
    int rc = memra_gguf_open(g_tiny, &g_g, &e);
    ck_assert_msg(rc == MEMRA_OK, "open tiny: %s", e.msg);
}

static void setup_sandbox(void) { setup_common(0, 0); }
static void setup_plans(void) { setup_common(1, 1); }
static void setup_golden(void) { setup_common(0, 1); }

static void teardown(void)
{
    memra_gguf_close(g_g);
    g_g = NULL;
    memra_planner_remove_dir(g_root);
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

static uint64_t file_tensor_bytes(const memra_gguf *g)
{
    uint64_t s = 0;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++)
        s += memra_gguf_tensor_at(g, i)->nbytes;
    return s;
}

/* ===================================== catalog ===================================== */

static int lookup_64(void *user, const char *name, size_t len, int64_t *v)
{
    (void)user;
    (void)name;
    (void)len;
    *v = 64;
    return 0;
}

/* Every spec of every arg parses and evaluates (all ints 64, b 64), every key template
 * field names b, qt, kv or an INT arg, every OUT_MODE slot has exactly one MODE int. */
START_TEST(test_catalog_specs)
{
    for (uint32_t id = 0; id < MEMRA_OP_COUNT; id++) {
        const memra_op_desc *d = memra_op_get(id);
        ck_assert_int_eq(memra_op_find(d->name), (int)id);
        ck_assert_uint_le(d->n_args, MEMRA_OP_MAX_ARGS);
        for (uint32_t i = 0; i < d->n_args; i++) {
            const memra_op_arg_desc *a = &d->args[i];
            const char *item[4];
            size_t len[4];
            int64_t v = 0, lo, hi;
            ck_assert_int_eq(memra_op_find_arg(id, a->name), (int)i);
            if (a->kind == MEMRA_ARG_INT) {
                ck_assert_msg(memra_spec_range(a->spec, &lo, &hi) == 0 && lo <= hi, "%s.%s", d->name,
                              a->name);
                continue;
            }
            int n = memra_spec_split(a->spec, item, len, 4);
            for (int k = 0; k < n; k++)
                ck_assert_msg(memra_expr_eval(item[k], len[k], lookup_64, NULL, &v, NULL) == 0 &&
                                  v > 0,
                              "%s.%s spec '%s'", d->name, a->name, a->spec);
            if (a->access == MEMRA_ACC_OUT_MODE) {
                int modes = 0;
                for (uint32_t j = 0; j < d->n_args; j++)
                    modes += d->args[j].flag == MEMRA_ARGF_MODE && d->args[j].slot == a->slot;
                ck_assert_int_eq(modes, 1);
            }
        }
        for (const char *s = d->key; s && (s = strchr(s, '{')); s++) {
            char f[32];
            size_t l = strcspn(s + 1, "}");
            ck_assert_uint_lt(l, sizeof f);
            memcpy(f, s + 1, l);
            f[l] = '\0';
            int ok = !strcmp(f, "b") || !strcmp(f, "qt") || !strcmp(f, "kv");
            int ai = memra_op_find_arg(id, f);
            ok = ok || (ai >= 0 && d->args[ai].kind == MEMRA_ARG_INT);
            ck_assert_msg(ok, "%s key field {%s}", d->name, f);
        }
    }
    ck_assert_int_eq(memra_op_find("nope"), -1);
    ck_assert_int_eq(MEMRA_MMVQ_W1 - MEMRA_MMVQ_W0, MEMRA_MMVQ_W2 - MEMRA_MMVQ_W1);
    ck_assert_uint_ne(memra_ops_catalog_hash(), 0);
    ck_assert_uint_eq(memra_ops_catalog_hash(), memra_ops_catalog_hash());
}
END_TEST

static int lookup_xy(void *user, const char *name, size_t len, int64_t *v)
{
    (void)user;
    if (len == 1 && (name[0] == 'x' || name[0] == 'b')) {
        *v = name[0] == 'x' ? 7 : 3;
        return 0;
    }
    return -1;
}

START_TEST(test_expr)
{
    static const struct {
        const char *e;
        int ok;
        int64_t v;
    } cases[] = {
        {"1+2*3", 1, 7},       {"(1+2)*3", 1, 9},    {"b*(2*x+1)", 1, 45}, {"x-1", 1, 6},
        {"x*b/3", 1, 7},       {"8/3", 0, 0},        {"1/0", 0, 0},        {"y", 0, 0},
        {"1+", 0, 0},          {"(1", 0, 0},         {"1)", 0, 0},         {"", 0, 0},
        {"4611686018427387904*2", 0, 0},              {" b * x ", 1, 21},   {"x$", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t v = -1;
        memra_err e;
        memra_err_clear(&e);
        int rc = memra_expr_eval(cases[i].e, strlen(cases[i].e), lookup_xy, NULL, &v, &e);
        ck_assert_msg((rc == MEMRA_OK) == cases[i].ok, "'%s': rc %d (%s)", cases[i].e, rc, e.msg);
        if (cases[i].ok)
            ck_assert_msg(v == cases[i].v, "'%s' = %lld, want %lld", cases[i].e, (long long)v,
                          (long long)cases[i].v);
    }
    int ok;
    ck_assert_uint_eq(memra_dtype_bytes(MEMRA_DT_Q8_1, 64, &ok), 72);
    ck_assert_int_eq(ok, 1);
    memra_dtype_bytes(MEMRA_DT_Q8_1, 33, &ok);
    ck_assert_int_eq(ok, 0);
    ck_assert_uint_eq(memra_dtype_bytes(MEMRA_DT_Q8_0, 64, &ok), 68);
}
END_TEST

/* ===================================== sandbox ===================================== */

static int run_lua(const char *src, uint64_t budget, size_t mem, memra_err *e)
{
    memra_lua_host *h = NULL;
    memra_lua_opts o = {.plans_dir = tu_source_path("plans"), .budget = budget, .mem_limit = mem};
    memra_err_clear(e);
    ck_assert_int_eq(memra_lua_host_open(&o, &h, e), MEMRA_OK);
    ck_assert_int_eq(memra_lua_expose(h, g_g, e), MEMRA_OK);
    int rc = memra_lua_host_run(h, src, strlen(src), "=test", 0, e);
    memra_lua_host_close(h);
    return rc;
}

START_TEST(test_sandbox_globals)
{
    static const char *const forbidden[] = {"io", "os", "require", "package", "dofile",
                                            "loadfile", "debug", "nosuch"};
    memra_err e;
    char src[128], want[64];
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
        snprintf(src, sizeof src, "local x = %s", forbidden[i]);
        snprintf(want, sizeof want, "unknown global '%s'", forbidden[i]);
        ck_assert_int_eq(run_lua(src, 0, 0, &e), MEMRA_ERR_SCRIPT);
        ck_assert_msg(strstr(e.msg, want), "%s: %s", forbidden[i], e.msg);
    }
    ck_assert_int_eq(run_lua("y = 1", 0, 0, &e), MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "undeclared global 'y'"), "%s", e.msg);
    ck_assert_int_eq(run_lua("assert(string.dump == nil); assert(math.pi > 3); "
                             "assert(utf8.char(65) == 'A'); assert(table.concat({1,2}) == '12')",
                             0, 0, &e),
                     MEMRA_OK);
    ck_assert_int_eq(run_lua("assert(getmetatable('') == 'locked')", 0, 0, &e), MEMRA_OK);
    /* one script cannot patch another's view of a library */
    ck_assert_int_eq(run_lua("string.rep = nil; local f = load('return string.rep'); "
                             "assert(f() ~= nil)", 0, 0, &e),
                     MEMRA_OK);
}
END_TEST

START_TEST(test_sandbox_load)
{
    memra_err e;
    /* binary chunks are refused even when smuggled into load() */
    ck_assert_int_eq(run_lua("local f, msg = load(string.char(27) .. 'LuaT\\0'); "
                             "assert(f == nil and msg:find('binary'), msg)", 0, 0, &e),
                     MEMRA_OK);
    ck_assert_int_eq(run_lua("load('return 1', 'x', 'b')", 0, 0, &e), MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "only text chunks"), "%s", e.msg);
    ck_assert_int_eq(run_lua("load('return 1', 'x', 'bt')", 0, 0, &e), MEMRA_ERR_SCRIPT);
    /* text load works and gets a strict environment too */
    ck_assert_int_eq(run_lua("assert(load('return 1 + 1')() == 2)", 0, 0, &e), MEMRA_OK);
    ck_assert_int_eq(run_lua("load('return io')()", 0, 0, &e), MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "unknown global 'io'"), "%s", e.msg);
}
END_TEST

START_TEST(test_sandbox_limits)
{
    memra_err e;
    time_t t0 = time(NULL);
    ck_assert_int_eq(run_lua("while true do end", 1000000, 0, &e), MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "instruction budget"), "%s", e.msg);
    ck_assert_int_lt(time(NULL) - t0, 10); /* 1e6 instructions: milliseconds, even under ASan */
    ck_assert_int_eq(run_lua("local s = string.rep('x', 64 * 1024 * 1024)", 0, 4u << 20, &e),
                     MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "memory"), "%s", e.msg);
    ck_assert_int_eq(run_lua("unsupported('blk.0.x.weight: type iq1_S')", 0, 0, &e),
                     MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "blk.0.x.weight: type iq1_S"), "%s", e.msg);
    ck_assert_int_eq(run_lua("local function f() error('boom') end f()", 0, 0, &e),
                     MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "boom") && strstr(e.msg, "stack traceback"), "%s", e.msg);
    ck_assert_int_eq(run_lua("assert(import('dsl').new)", 0, 0, &e), MEMRA_OK);
    ck_assert_int_eq(run_lua("import('../etc/passwd')", 0, 0, &e), MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "bad module name"), "%s", e.msg);
    ck_assert_int_eq(run_lua("import('nosuch_module')", 0, 0, &e), MEMRA_ERR_SCRIPT);
}
END_TEST

/* What scripts see of the model equals what the reader says; lazy arrays read the same. */
START_TEST(test_sandbox_model)
{
    for (int lazy = 0; lazy < 2; lazy++) {
        memra_lua_host *h = NULL;
        memra_lua_opts o = {0};
        memra_err e;
        memra_err_clear(&e);
        ck_assert_int_eq(memra_lua_host_open(&o, &h, &e), MEMRA_OK);
        ck_assert_int_eq(memra_lua_expose_eager(h, g_g, lazy ? 16 : 4096, &e), MEMRA_OK);
        const char *src = "local t = model.kv['tokenizer.ggml.tokens'] "
                          "return model.arch, model.kv['qwen35.block_count'], #model.tensor_names, "
                          "model.tensors['token_embd.weight'].ne[2], #t, t[#t], t[#t + 1], "
                          "ops.mmvq.args[ops.mmvq.index.w1].kind, ops.mmvq.key, "
                          "qtypes.q4_K.qdot, qtypes.q4_K.f32, host.eval('b*(x+1)', {b = 2, x = 3})";
        ck_assert_int_eq(memra_lua_host_run(h, src, strlen(src), "=t", 12, &e), MEMRA_OK);
        lua_State *L = memra_lua_host_state(h);
        int64_t tok = memra_gguf_find_kv(g_g, "tokenizer.ggml.tokens");
        uint64_t n_tok = memra_gguf_kv_arr_len(g_g, tok);
        memra_gguf_str last = memra_gguf_kv_str(g_g, tok, n_tok - 1);
        size_t len;
        ck_assert_str_eq(lua_tostring(L, 1), "qwen35");
        ck_assert_int_eq(lua_tointeger(L, 2), 8);
        ck_assert_int_eq(lua_tointeger(L, 3), memra_gguf_n_tensors(g_g));
        ck_assert_int_eq(lua_tointeger(L, 4), memra_gguf_find_tensor(g_g, "token_embd.weight")->ne[1]);
        ck_assert_uint_eq((uint64_t)lua_tointeger(L, 5), n_tok);
        const char *s = lua_tolstring(L, 6, &len);
        ck_assert(len == last.len && memcmp(s, last.ptr, len) == 0);
        ck_assert(lua_isnil(L, 7));
        ck_assert_str_eq(lua_tostring(L, 8), "weight");
        ck_assert_str_eq(lua_tostring(L, 9), memra_op_get(MEMRA_OP_MMVQ)->key);
        ck_assert(lua_toboolean(L, 10) && !lua_toboolean(L, 11));
        ck_assert_int_eq(lua_tointeger(L, 12), 8);
        memra_lua_host_close(h);
    }
}
END_TEST

/* ====================================== plans ====================================== */

static void count_ops(const memra_plan *p, uint32_t counts[MEMRA_OP_COUNT])
{
    memset(counts, 0, MEMRA_OP_COUNT * sizeof counts[0]);
    for (uint32_t i = 0; i < p->n_launches; i++)
        counts[p->launches[i].op]++;
}

/* Loader invariants a backend relies on, checked on a loaded plan. */
static void check_resolved(const memra_plan *p)
{
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const memra_plan_launch *l = &p->launches[i];
        const memra_op_desc *d = memra_op_get(l->op);
        ck_assert_uint_eq(l->n_args, d->n_args);
        ck_assert((l->kernel >= 0) == (d->key != NULL));
        for (uint32_t a = 0; a < l->n_args; a++) {
            const memra_plan_arg *x = &l->args[a];
            ck_assert(x->kind == MEMRA_ARG_NONE || x->kind == d->args[a].kind);
            if (x->kind == MEMRA_ARG_BUF) {
                const memra_plan_buffer *b = &p->buffers[x->index];
                ck_assert_uint_eq(x->offset, b->offset);
                ck_assert_uint_le(x->bytes, b->bytes);
                ck_assert_uint_le(b->offset + b->bytes, p->arena_bytes);
                ck_assert_uint_ne(x->access, MEMRA_ACC_OUT_MODE);
            } else if (x->kind == MEMRA_ARG_WEIGHT) {
                ck_assert_ptr_nonnull(p->weights[x->index].tensor->data);
            } else if (x->kind == MEMRA_ARG_STATE) {
                ck_assert_uint_lt(x->index, p->n_states);
            }
        }
    }
}

/* At tiers up to memra_mmvq_direct_max_b() an mmvq launch holds only mmvq's direct types
 * (kernels/mmvq.h memra_mmvq_direct) or none of them (plans/dsl.lua Plan:mmvq). */
static void check_direct_split(const memra_plan *p)
{
    for (uint32_t k = 0; k < p->n_kernels; k++) {
        const char *key = p->kernels[k];
        if (strncmp(key, "mmvq:qt=", 8) != 0)
            continue;
        int direct = 0, staged = 0;
        for (const char *q = key + 8;; q++) {
            const size_t n = strcspn(q, "+:");
            char name[16];
            snprintf(name, sizeof name, "%.*s", (int)n, q);
            const int qt = memra_qtype_from_name(name);
            ck_assert_msg(qt >= 0, "%s: qtype '%s'", key, name);
            if (memra_mmvq_direct(qt))
                direct++;
            else
                staged++;
            if (q[n] != '+')
                break;
            q += n;
        }
        ck_assert_msg(!direct || !staged, "%s", key);
    }
}

/* The launch pairs the CUDA backend folds (runtime/backend_cuda.c fold_pairs) are there in
 * the plans' order: every dense FFN's silu_mul_q8 right after the mmvq {gate, up} that writes
 * its g and u, which no other launch names. A planner change that moves them apart would
 * silently cost the fold. The SwiGLU output never shares bytes with the mmvq's input. */
static void check_fold_pairs(const memra_plan *p, uint32_t n_layer)
{
    uint32_t swiglu = 0;
    for (uint32_t i = 1; i < p->n_launches; i++) {
        const memra_plan_launch *prev = &p->launches[i - 1], *l = &p->launches[i];
        if (l->op == MEMRA_OP_SILU_MUL_Q8 && l->args[MEMRA_SILU_MUL_Q8_G1].kind == MEMRA_ARG_NONE) {
            const uint32_t g = l->args[MEMRA_SILU_MUL_Q8_G0].index;
            const uint32_t u = l->args[MEMRA_SILU_MUL_Q8_U0].index;
            ck_assert_msg(prev->op == MEMRA_OP_MMVQ, "launch %u: silu_mul_q8 after op %u", i, prev->op);
            ck_assert_uint_eq(prev->args[MEMRA_MMVQ_OUT0].index, g);
            ck_assert_uint_eq(prev->args[MEMRA_MMVQ_OUT1].index, u);
            ck_assert_uint_eq(prev->args[MEMRA_MMVQ_W2].kind, MEMRA_ARG_NONE);
            ck_assert(!memra_plan_buf_named_outside(p, i - 1, g) &&
                      !memra_plan_buf_named_outside(p, i - 1, u));
            /* the fused kernel writes y while later CUDA blocks still read a (Plan:keep) */
            ck_assert_msg(!memra_plan_bufs_overlap(p, prev->args[MEMRA_MMVQ_A].index,
                                                   l->args[MEMRA_SILU_MUL_Q8_Y0].index),
                          "launch %u: silu_mul_q8's output placed over the mmvq's input", i);
            swiglu++;
        }
    }
    ck_assert_uint_eq(swiglu, n_layer); /* tiny: every FFN dense */
}

START_TEST(test_tiny_tiers)
{
    static const uint32_t tiers[] = {1, 2, 4, 8, 12, 16};
    memra_plan_manifest *m = NULL;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_plan_manifest_load(g_plans, &m, &e), MEMRA_OK);
    ck_assert_uint_eq(m->n_tiers, 6);
    ck_assert_uint_eq(m->n_stages, 1);
    ck_assert_uint_eq(memra_plan_tier_for(m, 3), 4);
    ck_assert_uint_eq(memra_plan_tier_for(m, 13), 16);
    ck_assert_uint_eq(memra_plan_tier_for(m, 17), 0);
    uint64_t prev_arena = 0;
    for (size_t t = 0; t < 6; t++) {
        memra_plan *p = NULL;
        int rc = memra_plan_load(g_plans, tiers[t], 0, g_g, &p, &e);
        ck_assert_msg(rc == MEMRA_OK, "tier %u: %s", tiers[t], e.msg);
        uint32_t c[MEMRA_OP_COUNT];
        count_ops(p, c);
        ck_assert_uint_eq(p->tier, tiers[t]);
        ck_assert_uint_eq(p->n_launches, TINY_LAUNCHES_OF(tiers[t]));
        ck_assert_uint_eq(p->stats.launches, TINY_LAUNCHES_OF(tiers[t]));
        /* 8 layers: 2 norms each + the final norm; 6 GDN + 2 attention layers */
        ck_assert_uint_eq(c[MEMRA_OP_RMS_NORM_Q8], 17);
        ck_assert_uint_eq(c[MEMRA_OP_GDN_STEP], 6);
        ck_assert_uint_eq(c[MEMRA_OP_ATTN_DECODE], 2);
        /* 4 per layer + lm head (+ the tier-1 splits) */
        ck_assert_uint_eq(c[MEMRA_OP_MMVQ], 8 * 4 + 1 + (tiers[t] == 1 ? TINY_T1_SPLITS : 0));
        ck_assert_uint_eq(c[MEMRA_OP_EMBED] + c[MEMRA_OP_SAMPLE], 2);
        /* one stage reads every tensor of the file exactly once */
        ck_assert_uint_eq(p->stats.weight_bytes, file_tensor_bytes(g_g));
        ck_assert_uint_eq(p->n_weights, (uint64_t)memra_gguf_n_tensors(g_g));
        ck_assert_uint_ge(p->arena_bytes, prev_arena);
        ck_assert(p->input < 0 && p->output < 0 && p->logits >= 0);
        prev_arena = p->arena_bytes;
        char bkey[16];
        snprintf(bkey, sizeof bkey, ":b=%u", tiers[t]);
        for (uint32_t k = 0; k < p->n_kernels; k++) {
            const char *key = p->kernels[k];
            ck_assert(strncmp(key, "mmvq:", 5) != 0 || strstr(key, bkey));
        }
        if ((int)tiers[t] <= memra_mmvq_direct_max_b())
            check_direct_split(p);
        check_fold_pairs(p, 8);
        check_resolved(p);
        memra_plan_free(p);
    }
    memra_plan *p = NULL;
    ck_assert_int_eq(memra_plan_load(g_plans, 3, 0, g_g, &p, &e), MEMRA_ERR_NOT_FOUND);
    ck_assert_int_eq(memra_plan_load(g_plans, 1, 1, g_g, &p, &e), MEMRA_ERR_NOT_FOUND);
    ck_assert_ptr_null(p);
    memra_plan_manifest_free(m);
}
END_TEST

START_TEST(test_two_stages)
{
    char dir[700];
    memra_err e;
    memra_plan_manifest *m = NULL;
    sub_dir(dir, sizeof dir, "plans-2st");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "1,4", 2, 0, MEMRA_DT_F16, NULL, 0, NULL, &e), MEMRA_OK);
    ck_assert_int_eq(memra_plan_manifest_load(dir, &m, &e), MEMRA_OK);
    ck_assert_uint_eq(m->n_stages, 2);
    ck_assert_uint_eq(m->stage_layers[0][1], m->stage_layers[1][0]);
    for (uint32_t t = 0; t < 2; t++) {
        memra_plan *s0 = NULL, *s1 = NULL;
        ck_assert_int_eq(memra_plan_load(dir, m->tiers[t], 0, g_g, &s0, &e), MEMRA_OK);
        ck_assert_int_eq(memra_plan_load(dir, m->tiers[t], 1, g_g, &s1, &e), MEMRA_OK);
        ck_assert(s0->input < 0 && s0->output >= 0 && s0->logits < 0);
        ck_assert(s1->input >= 0 && s1->output < 0 && s1->logits >= 0);
        /* the split adds no launch and reads each tensor once over both stages */
        ck_assert_uint_eq(s0->n_launches + s1->n_launches, TINY_LAUNCHES_OF(m->tiers[t]));
        ck_assert_uint_eq(s0->stats.weight_bytes + s1->stats.weight_bytes, file_tensor_bytes(g_g));
        for (uint32_t i = 0; i < s0->n_weights; i++)
            for (uint32_t j = 0; j < s1->n_weights; j++)
                ck_assert_str_ne(s0->weights[i].name, s1->weights[j].name);
        for (uint32_t i = 0; i < s1->n_states; i++)
            ck_assert_uint_ge(s1->states[i].layer, m->stage_layers[1][0]);
        check_resolved(s0);
        check_resolved(s1);
        memra_plan_free(s0);
        memra_plan_free(s1);
    }
    memra_plan_manifest_free(m);
    /* explicit cuts */
    sub_dir(dir, sizeof dir, "plans-cut");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "2", 0, 3, MEMRA_DT_F16, NULL, 0, NULL, &e), MEMRA_OK);
    ck_assert_int_eq(memra_plan_manifest_load(dir, &m, &e), MEMRA_OK);
    ck_assert_uint_eq(m->stage_layers[0][1], 3);
    ck_assert_uint_eq(m->stage_layers[1][1], 8);
    memra_plan_manifest_free(m);
}
END_TEST

START_TEST(test_moe_and_kv)
{
    char dir[700];
    memra_err e;
    memra_gguf *g = NULL;
    memra_plan *p = NULL;
    sub_dir(dir, sizeof dir, "plans-moe");
    ck_assert_int_eq(plan_dir(g_moe, dir, "1,2,16", 1, 0, MEMRA_DT_Q8_0, NULL, 0, NULL, &e),
                     MEMRA_OK);
    ck_assert_int_eq(memra_gguf_open(g_moe, &g, &e), MEMRA_OK);
    /* tiers 1 and 2: its f32 router / shared-expert gate weights sit in groups with q4_K
     * ones, which the planner splits (tiny's own groups are all direct types) */
    for (int tier = 1; tier <= memra_mmvq_direct_max_b(); tier++) {
        ck_assert_msg(memra_plan_load(dir, (uint32_t)tier, 0, g, &p, &e) == MEMRA_OK, "%s", e.msg);
        check_direct_split(p);
        memra_plan_free(p);
        p = NULL;
    }
    ck_assert_msg(memra_plan_load(dir, 16, 0, g, &p, &e) == MEMRA_OK, "%s", e.msg);
    uint32_t c[MEMRA_OP_COUNT];
    count_ops(p, c);
    ck_assert_uint_eq(p->n_launches, TINY_MOE_LAUNCHES);
    ck_assert_uint_eq(c[MEMRA_OP_MOE_ROUTE], 8);
    ck_assert_uint_eq(c[MEMRA_OP_MOE_DOWN], 8);
    ck_assert_uint_eq(p->stats.weight_bytes, file_tensor_bytes(g));
    /* B * n_used = 32 >= 8 experts: every expert may be hit, so only the embedding (16 of
     * its rows gathered; the lm head is output.weight) streams less than it references */
    const memra_gguf_tensor *te = memra_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(memra_gguf_find_tensor(g, "output.weight"));
    ck_assert_uint_eq(p->stats.weight_bytes_streamed,
                      p->stats.weight_bytes - te->nbytes + te->nbytes / (uint64_t)te->ne[1] * 16);
    for (uint32_t i = 0; i < p->n_states; i++)
        if (p->states[i].per_token)
            ck_assert_uint_eq(p->states[i].dtype, MEMRA_DT_Q8_0);
    int found = 0;
    for (uint32_t k = 0; k < p->n_kernels; k++)
        found += strstr(p->kernels[k], "attn_decode:") && strstr(p->kernels[k], "kv=q8_0");
    ck_assert_int_eq(found, 1);
    check_resolved(p);
    memra_plan_free(p);
    /* the tiny plans were made for another checkpoint */
    ck_assert_int_eq(memra_plan_load(g_plans, 1, 0, g, &p, &e), MEMRA_ERR_STALE_PLAN);
    ck_assert_msg(strstr(e.msg, "another checkpoint") || strstr(e.msg, "does not match"), "%s",
                  e.msg);
    memra_gguf_close(g);
}
END_TEST

static int list_dir(const char *dir, char names[][64], int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] != '.')
            snprintf(names[n++], 64, "%.63s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* Same files, same bytes; on failure name the file and the first differing line. */
static void assert_same_dirs(const char *a, const char *b)
{
    char na[32][64], nb[32][64], pa[800], pb[800];
    int n = list_dir(a, na, 32);
    ck_assert_int_eq(n, list_dir(b, nb, 32));
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(na[i], nb[i]);
        snprintf(pa, sizeof pa, "%.700s/%.63s", a, na[i]);
        snprintf(pb, sizeof pb, "%.700s/%.63s", b, nb[i]);
        size_t la, lb;
        char *ta = read_text(pa, &la), *tb = read_text(pb, &lb);
        if (la != lb || memcmp(ta, tb, la) != 0) {
            size_t k = 0, line = 1;
            while (k < la && k < lb && ta[k] == tb[k])
                line += ta[k++] == '\n';
            ck_abort_msg("%s differs from %s at line %zu", pa, pb, line);
        }
        free(ta);
        free(tb);
    }
}

START_TEST(test_determinism)
{
    char dir[700];
    memra_err e;
    sub_dir(dir, sizeof dir, "plans-again");
    ck_assert_int_eq(plan_dir(g_tiny, dir, NULL, 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e), MEMRA_OK);
    assert_same_dirs(g_plans, dir);
}
END_TEST

START_TEST(test_golden)
{
    char golden[4096];
    snprintf(golden, sizeof golden, "%s", tu_source_path("tests/data/plans/tiny"));
    if (getenv("MEMRA_REGEN_GOLDEN")) {
        memra_err e;
        ck_assert_int_eq(plan_dir(g_tiny, golden, NULL, 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                         MEMRA_OK);
        fprintf(stderr, "test_plan: regenerated %s\n", golden);
    }
    assert_same_dirs(golden, g_plans);
}
END_TEST

START_TEST(test_summary)
{
    memra_planner_result *r = NULL;
    memra_err e;
    char dir[700];
    sub_dir(dir, sizeof dir, "plans-sum");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "8", 1, 0, MEMRA_DT_F16, NULL, 0, &r, &e), MEMRA_OK);
    ck_assert_uint_eq(r->file_tensor_bytes, file_tensor_bytes(g_g));
    ck_assert_uint_eq(r->plans[0].stats.weight_bytes, r->file_tensor_bytes);
    FILE *f = tmpfile();
    memra_planner_print_summary(r, f);
    rewind(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(buf, "launches per tick (all stages): 70"), "%s", buf);
    ck_assert_msg(strstr(buf, "every tensor read once"), "%s", buf);
    ck_assert_msg(strstr(buf, "mmvq:qt=q4_K:b={8}"), "%s", buf);
    memra_planner_result_free(r);
}
END_TEST

/* ================================== planner errors ================================== */

/* Copy a GGUF, optionally renaming the architecture value, retyping one tensor (its data
 * becomes zeros of the new type's size) or adding an f32 [1] tensor `extra` (value 1.0).
 * Enough KV types for forged files. */
static void copy_gguf_x(const char *src, const char *dst, const char *arch, const char *retype,
                        memra_qtype new_type, const char *extra)
{
    memra_gguf *g = NULL;
    memra_gguf_writer *w = NULL;
    memra_err e;
    ck_assert_int_eq(memra_gguf_open(src, &g, &e), MEMRA_OK);
    ck_assert_int_eq(memra_gguf_writer_open(&w, &e), MEMRA_OK);
    for (int64_t i = 0; i < memra_gguf_n_kv(g); i++) {
        memra_gguf_str k = memra_gguf_kv_key(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        const void *d = memra_gguf_kv_data(g, i);
        union {
            uint32_t u32;
            int32_t i32;
            uint64_t u64;
            float f32;
            uint8_t u8;
        } x = {0};
        if (d && memra_gguf_kv_type(g, i) != MEMRA_GGUF_ARRAY &&
            memra_gguf_kv_type(g, i) != MEMRA_GGUF_STRING)
            memcpy(&x, d, memra_gguf_kv_type(g, i) == MEMRA_GGUF_UINT64 ? 8 : 
                          memra_gguf_kv_type(g, i) == MEMRA_GGUF_BOOL ? 1 : 4); /* unaligned in the file */
        int rc = 0;
        switch (memra_gguf_kv_type(g, i)) {
        case MEMRA_GGUF_UINT32: rc = memra_gguf_writer_set_u32(w, key, x.u32); break;
        case MEMRA_GGUF_INT32: rc = memra_gguf_writer_set_i32(w, key, x.i32); break;
        case MEMRA_GGUF_UINT64: rc = memra_gguf_writer_set_u64(w, key, x.u64); break;
        case MEMRA_GGUF_FLOAT32: rc = memra_gguf_writer_set_f32(w, key, x.f32); break;
        case MEMRA_GGUF_BOOL: rc = memra_gguf_writer_set_bool(w, key, x.u8); break;
        case MEMRA_GGUF_STRING: {
            memra_gguf_str s = memra_gguf_kv_str(g, i, 0);
            char *v = strndup(s.ptr, (size_t)s.len);
            int is_arch = arch && strcmp(key, "general.architecture") == 0;
            rc = memra_gguf_writer_set_str(w, key, is_arch ? arch : v);
            free(v);
            break;
        }
        case MEMRA_GGUF_ARRAY: {
            uint64_t n = memra_gguf_kv_arr_len(g, i);
            if (memra_gguf_kv_arr_type(g, i) != MEMRA_GGUF_STRING) {
                rc = memra_gguf_writer_set_arr(w, key, memra_gguf_kv_arr_type(g, i), d, n);
                break;
            }
            const char **v = calloc(n + 1, sizeof *v);
            uint64_t *lens = calloc(n + 1, sizeof *lens);
            for (uint64_t j = 0; j < n; j++) {
                memra_gguf_str s = memra_gguf_kv_str(g, i, j);
                v[j] = s.ptr;
                lens[j] = s.len;
            }
            rc = memra_gguf_writer_set_str_arr_lens(w, key, v, lens, n);
            free(v);
            free(lens);
            break;
        }
        default: ck_abort_msg("copy_gguf: KV %s has an unhandled type", key);
        }
        ck_assert_int_eq(rc, 0);
    }
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        memra_qtype ty = retype && !strcmp(t->name, retype) ? new_type : (memra_qtype)t->type;
        ck_assert_int_eq(memra_gguf_writer_add_tensor(w, t->name, ty, t->n_dims, t->ne), 0);
    }
    const int64_t one[4] = {1, 1, 1, 1};
    if (extra)
        ck_assert_int_eq(memra_gguf_writer_add_tensor(w, extra, MEMRA_QT_F32, 1, one), 0);
    ck_assert_msg(memra_gguf_writer_begin(w, dst) == 0, "%s", memra_gguf_writer_error(w));
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        if (retype && !strcmp(t->name, retype)) {
            size_t n = memra_quant_row_bytes(new_type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            void *z = calloc(1, n);
            ck_assert_int_eq(memra_gguf_writer_write(w, z, n), 0);
            free(z);
        } else {
            ck_assert_int_eq(memra_gguf_writer_write(w, t->data, t->nbytes), 0);
        }
    }
    const float v1 = 1.0f;
    if (extra)
        ck_assert_int_eq(memra_gguf_writer_write(w, &v1, sizeof v1), 0);
    ck_assert_msg(memra_gguf_writer_finish(w) == 0, "%s", memra_gguf_writer_error(w));
    memra_gguf_writer_close(w);
    memra_gguf_close(g);
}

static void copy_gguf(const char *src, const char *dst, const char *arch, const char *retype,
                      memra_qtype new_type)
{
    copy_gguf_x(src, dst, arch, retype, new_type, NULL);
}

START_TEST(test_unknown_arch)
{
    char model[700], dir[700];
    memra_err e;
    sub_dir(model, sizeof model, "llama.gguf");
    sub_dir(dir, sizeof dir, "plans-llama");
    copy_gguf(g_tiny, model, "llama", NULL, MEMRA_QT_F32);
    ck_assert_int_eq(plan_dir(model, dir, NULL, 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "unknown architecture 'llama'") && strstr(e.msg, "llama.gguf"),
                  "%s", e.msg);
}
END_TEST

/* An NVFP4 per-tensor scale on the embedding table: the embed op applies none, so the plan is
 * refused (naming the tensor) rather than run with unscaled embeddings. */
START_TEST(test_embedding_scale_refused)
{
    char model[700], dir[700];
    memra_err e;
    sub_dir(model, sizeof model, "embd-scale.gguf");
    sub_dir(dir, sizeof dir, "plans-embd-scale");
    copy_gguf_x(g_tiny, model, NULL, NULL, MEMRA_QT_F32, "token_embd.scale");
    ck_assert_int_eq(plan_dir(model, dir, "1", 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "token_embd") && strstr(e.msg, "scale"), "%s", e.msg);
}
END_TEST

START_TEST(test_unsupported_weight_type)
{
    char model[700], dir[700];
    memra_err e;
    sub_dir(model, sizeof model, "q8k.gguf");
    sub_dir(dir, sizeof dir, "plans-q8k");
    /* q8_K has no q8_1 dot product (quant.h), so no mmvq can read it */
    ck_assert(!memra_quant_can_dot(MEMRA_QT_Q8_K));
    copy_gguf(g_tiny, model, NULL, "blk.2.attn_gate.weight", MEMRA_QT_Q8_K);
    ck_assert_int_eq(plan_dir(model, dir, "1", 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "blk.2.attn_gate.weight: weight type q8_K is not supported"),
                  "%s", e.msg);
}
END_TEST

/* A plans directory holding one test script as qwen35.lua, plus the real DSL and the real
 * qwen35 script as real.lua. */
static void script_dir(char *dir, size_t n, const char *name, const char *src)
{
    char path[800];
    sub_dir(dir, n, name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/qwen35.lua", dir);
    FILE *f = fopen(path, "w");
    fputs(src, f);
    fclose(f);
    static const char *const copies[][2] = {{"plans/dsl.lua", "dsl.lua"},
                                            {"plans/qwen35.lua", "real.lua"}};
    for (int i = 0; i < 2; i++) {
        char *text = read_text(tu_source_path(copies[i][0]), NULL);
        snprintf(path, sizeof path, "%s/%s", dir, copies[i][1]);
        f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
        free(text);
    }
}

START_TEST(test_script_failures)
{
    char scripts[700], dir[700], rej[800];
    memra_err e;
    sub_dir(dir, sizeof dir, "plans-fail");
    script_dir(scripts, sizeof scripts, "s-error",
               "return {tick = function(o) error('boom at tier ' .. o.tier) end}");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4", 1, 0, MEMRA_DT_F16, scripts, 0, NULL, &e),
                     MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "boom at tier 4"), "%s", e.msg);
    script_dir(scripts, sizeof scripts, "s-loop", "return {tick = function() while true do end end}");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4", 1, 0, MEMRA_DT_F16, scripts, 1000000, NULL, &e),
                     MEMRA_ERR_SCRIPT);
    ck_assert_msg(strstr(e.msg, "instruction budget"), "%s", e.msg);
    /* a script whose plan the validator refuses: PLAN, and the plan is kept for inspection */
    script_dir(scripts, sizeof scripts, "s-bad",
               "local real = import('real') return {tick = function(o) local t = real.tick(o) "
               "t.launches[3].op = 'warp_drive' return t end}");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4", 1, 0, MEMRA_DT_F16, scripts, 0, NULL, &e),
                     MEMRA_ERR_PLAN);
    ck_assert_msg(strstr(e.msg, "unknown op 'warp_drive'"), "%s", e.msg);
    snprintf(rej, sizeof rej, "%s/plan-b4-s0.json.rejected.json", dir);
    ck_assert_int_eq(access(rej, F_OK), 0);
    /* options */
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4,2", 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4", 9, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(plan_dir(g_tiny, dir, "4", 1, 8, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ==================================== validator ==================================== */
/* One rule per entry: a mutation of the valid tiny tier-8 plan, the code and the words the
 * refusal must carry (launch index and argument where the rule is about a launch). */

static json_t *launch_n(json_t *doc, const char *op, int nth)
{
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(doc, "launches"), i, l)
    {
        if (!strcmp(json_string_value(json_object_get(l, "op")), op) && nth-- == 0)
            return l;
    }
    ck_abort_msg("no launch %s", op);
    return NULL;
}

static json_t *args_n(json_t *doc, const char *op, int nth)
{
    return json_object_get(launch_n(doc, op, nth), "args");
}

/* The GDN projection of layer 0: launch 2, mmvq with 4 weights. */
#define GDN_MMVQ(doc) args_n(doc, "mmvq", 0)

static json_t *buffer_named(json_t *doc, const char *name)
{
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(doc, "buffers"), i, b)
    {
        if (!strcmp(json_string_value(json_object_get(b, "name")), name))
            return b;
    }
    ck_abort_msg("no buffer %s", name);
    return NULL;
}

static void m_bad_op(json_t *d) { json_object_set_new(launch_n(d, "rms_norm_q8", 0), "op", json_string("rms_norm_q9")); }
static void m_buf_as_int(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "x", json_integer(5)); }
static void m_int_as_str(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "n", json_string("256")); }
static void m_unknown_arg(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "bogus", json_integer(1)); }
static void m_missing_arg(json_t *d) { json_object_del(args_n(d, "rms_norm_q8", 0), "eps"); }
static void m_buf_dtype(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "y", json_string("x")); }
static void m_unknown_buf(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "x", json_string("nosuch")); }
static void m_float_as_str(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "eps", json_string("1e-6")); }
static void m_out_of_arena(json_t *d)
{
    json_object_set(buffer_named(d, "logits"), "offset", json_object_get(d, "arena_bytes"));
}
static void m_misaligned(json_t *d)
{
    json_t *b = buffer_named(d, "logits");
    json_object_set_new(b, "offset", json_integer(json_integer_value(json_object_get(b, "offset")) + 4));
}
static void m_buf_small(json_t *d) { json_object_set_new(buffer_named(d, "x"), "bytes", json_integer(4)); }
static void m_weight_unlisted(json_t *d)
{
    json_t *w = json_object_get(d, "weights");
    size_t i;
    json_t *v;
    json_array_foreach(w, i, v)
    {
        if (!strcmp(json_string_value(v), "blk.0.attn_norm.weight"))
            break;
    }
    json_array_remove(w, i);
}
static void m_weight_unknown(json_t *d)
{
    json_array_set_new(json_object_get(d, "weights"), 0, json_string("nosuch.weight"));
}
static void m_weight_dup(json_t *d)
{
    json_array_append_new(json_object_get(d, "weights"), json_string("token_embd.weight"));
}
static void m_wrong_shape(json_t *d)
{
    json_t *a = GDN_MMVQ(d);
    json_object_set_new(a, "n1", json_integer(json_integer_value(json_object_get(a, "n1")) + 32));
}
static void m_weight_type(json_t *d)
{
    json_object_set_new(args_n(d, "rms_norm_q8", 0), "w", json_string("blk.0.attn_gate.weight"));
}
static void m_stale_hash(json_t *d) { json_object_set_new(d, "model_hash", json_string("0000000000000001")); }
static void m_catalog(json_t *d) { json_object_set_new(d, "catalog_hash", json_string("00000000000000aa")); }
static void m_tier(json_t *d) { json_object_set_new(d, "tier", json_integer(3)); }
static void m_layers(json_t *d) { json_object_set_new(d, "layers", json_pack("[i,i]", 0, 7)); }
static void m_stages(json_t *d) { json_object_set_new(d, "n_stages", json_integer(2)); }
static void m_kernel_key(json_t *d)
{
    json_object_set_new(launch_n(d, "mmvq", 0), "kernel", json_string("mmvq:qt=q4_K:b=1"));
}
static void m_kernel_unlisted(json_t *d) { json_array_remove(json_object_get(d, "kernels"), 0); }
static void m_kernel_unused(json_t *d) { json_array_append_new(json_object_get(d, "kernels"), json_string("zzz:unused")); }
static void m_kernel_on_fixed(json_t *d) { json_object_set_new(launch_n(d, "embed", 0), "kernel", json_string("embed:x")); }
static void m_read_before_write(json_t *d) { json_object_set_new(args_n(d, "rms_norm_q8", 0), "x", json_string("logits")); }
static void m_live_overlap(json_t *d)
{
    json_object_set(buffer_named(d, "x"), "offset", json_object_get(buffer_named(d, "logits"), "offset"));
}
static void m_alias_in_launch(json_t *d)
{
    json_t *a = GDN_MMVQ(d);
    json_object_set(a, "out1", json_object_get(a, "out0"));
}
static void m_slot_gap(json_t *d)
{
    json_t *a = GDN_MMVQ(d);
    const char *k[] = {"w1", "out1", "n1", "mode1"};
    for (int i = 0; i < 4; i++)
        json_object_del(a, k[i]);
}
static void m_slot_partial(json_t *d) { json_object_del(GDN_MMVQ(d), "n3"); }
static void m_int_range(json_t *d) { json_object_set_new(GDN_MMVQ(d), "mode0", json_integer(2)); }
static void m_state_dims(json_t *d)
{
    json_t *s = json_array_get(json_object_get(d, "state"), 0); /* blk.0.conv [3, 512] f32 */
    json_object_set_new(s, "dims", json_pack("[i,i]", 4, 512));
    json_object_set_new(s, "bytes", json_integer(4 * 512 * 4));
}
static void m_state_bytes(json_t *d)
{
    json_object_set_new(json_array_get(json_object_get(d, "state"), 0), "bytes", json_integer(7));
}
static void m_state_kind(json_t *d) { json_object_set_new(args_n(d, "gdn_step", 0), "conv_state", json_string("blk.0.ssm")); }
static void m_state_dtype(json_t *d)
{
    json_object_set_new(json_array_get(json_object_get(d, "state"), 0), "dtype", json_string("f16"));
}
static void m_tick_field(json_t *d) { json_object_set_new(args_n(d, "embed", 0), "tokens", json_string("positions")); }
static void m_logits_missing(json_t *d) { json_object_del(d, "logits"); }
static void m_version(json_t *d) { json_object_set_new(d, "version", json_integer(99)); }
static void m_unknown_key(json_t *d) { json_object_set_new(d, "extra", json_true()); }
static void m_not_a_plan(json_t *d) { json_object_set_new(d, "format", json_string("memra-manifest")); }

static const struct rule {
    const char *name;
    void (*mutate)(json_t *);
    int rc;
    const char *want;
} k_rules[] = {
    {"bad op", m_bad_op, MEMRA_ERR_PLAN, "launch 1: unknown op 'rms_norm_q9'"},
    {"bad arg kind: buf", m_buf_as_int, MEMRA_ERR_PLAN, "launch 1 (rms_norm_q8): argument 'x': expected a buf name"},
    {"bad arg kind: int", m_int_as_str, MEMRA_ERR_PLAN, "argument 'n': expected an integer"},
    {"bad arg kind: float", m_float_as_str, MEMRA_ERR_PLAN, "argument 'eps': expected a finite number"},
    {"unknown arg", m_unknown_arg, MEMRA_ERR_PLAN, "unknown argument 'bogus'"},
    {"missing arg", m_missing_arg, MEMRA_ERR_PLAN, "argument 'eps': missing"},
    {"buffer dtype", m_buf_dtype, MEMRA_ERR_PLAN, "argument 'y': buffer 'x' is f32, the op needs q8_1"},
    {"unknown buffer", m_unknown_buf, MEMRA_ERR_PLAN, "argument 'x': unknown buffer 'nosuch'"},
    {"out-of-arena offset", m_out_of_arena, MEMRA_ERR_PLAN, "inside the arena"},
    {"misaligned offset", m_misaligned, MEMRA_ERR_PLAN, "256-aligned"},
    {"buffer too small", m_buf_small, MEMRA_ERR_PLAN, "launch 0 (embed): argument 'x': buffer 'x' holds 4 bytes, the op needs b*n_embd = 2048 f32 elements"},
    {"weight not listed", m_weight_unlisted, MEMRA_ERR_PLAN, "launch 1 (rms_norm_q8): argument 'w': weight 'blk.0.attn_norm.weight' is not in the plan's weights list"},
    {"unknown weight", m_weight_unknown, MEMRA_ERR_PLAN, "tensor 'nosuch.weight' is not in the model"},
    {"duplicate weight", m_weight_dup, MEMRA_ERR_PLAN, "duplicate 'token_embd.weight'"},
    {"wrong shape", m_wrong_shape, MEMRA_ERR_PLAN, "argument 'w1': weight 'blk.0.attn_gate.weight' has ne[1] = 256, the op needs n1 = 288"},
    {"weight type", m_weight_type, MEMRA_ERR_PLAN, "argument 'w': weight 'blk.0.attn_gate.weight' has type q4_K, not accepted (f32)"},
    {"stale hash", m_stale_hash, MEMRA_ERR_STALE_PLAN, "another checkpoint"},
    {"catalog hash", m_catalog, MEMRA_ERR_STALE_PLAN, "op catalog"},
    {"tier not in manifest", m_tier, MEMRA_ERR_PLAN, "tier 3 is not in the manifest"},
    {"layers vs manifest", m_layers, MEMRA_ERR_PLAN, "manifest says [0, 8)"},
    {"stages vs manifest", m_stages, MEMRA_ERR_PLAN, "with 2 stages, manifest says qwen35 with 1"},
    {"kernel key", m_kernel_key, MEMRA_ERR_PLAN, "launch 2 (mmvq): kernel must be 'mmvq:qt="},
    {"kernel not listed", m_kernel_unlisted, MEMRA_ERR_PLAN, "is missing from the plan's kernels list"},
    {"kernel unused", m_kernel_unused, MEMRA_ERR_PLAN, "'zzz:unused' is used by no launch"},
    {"kernel on fixed op", m_kernel_on_fixed, MEMRA_ERR_PLAN, "launch 0 (embed): the op has no kernel specializations"},
    {"read before write", m_read_before_write, MEMRA_ERR_PLAN, "argument 'x': reads buffer 'logits' before any launch writes it"},
    {"live overlap", m_live_overlap, MEMRA_ERR_PLAN, "share arena bytes while both are live"},
    {"alias in launch", m_alias_in_launch, MEMRA_ERR_PLAN, "launch 2 (mmvq): argument 'out0': written buffer 'blk.0.qkv' overlaps argument 'out1'"},
    {"slot gap", m_slot_gap, MEMRA_ERR_PLAN, "slot 2 is used but slot 1 is not"},
    {"partial slot", m_slot_partial, MEMRA_ERR_PLAN, "argument 'n3': missing"},
    {"int range", m_int_range, MEMRA_ERR_PLAN, "argument 'mode0': 2 is outside 0..1"},
    {"state dims", m_state_dims, MEMRA_ERR_PLAN, "argument 'conv_state': state 'blk.0.conv' dims[0] = 4, the op needs conv_k-1 = 3"},
    {"state bytes", m_state_bytes, MEMRA_ERR_PLAN, "bytes 7 but dims give 6144"},
    {"state kind", m_state_kind, MEMRA_ERR_PLAN, "argument 'conv_state': state 'blk.0.ssm' is ssm, the op needs conv"},
    {"state dtype", m_state_dtype, MEMRA_ERR_PLAN, "dtype 'f16' not allowed for conv"},
    {"tick field", m_tick_field, MEMRA_ERR_PLAN, "argument 'tokens': tick field 'positions', the op needs 'tokens'"},
    {"logits missing", m_logits_missing, MEMRA_ERR_PLAN, "needs 'logits'"},
    {"newer version", m_version, MEMRA_ERR_UNSUPPORTED, "newer than this runtime"},
    {"unknown key", m_unknown_key, MEMRA_ERR_PLAN, "plan: unknown key 'extra'"},
    {"not a plan", m_not_a_plan, MEMRA_ERR_FORMAT, "not a memra-plan document"},
};

START_TEST(test_validator_rule)
{
    const struct rule *r = &k_rules[_i];
    char path[800];
    memra_plan_manifest *m = NULL;
    memra_plan *p = NULL;
    memra_err e;
    memra_err_clear(&e);
    snprintf(path, sizeof path, "%s/plan-b8-s0.json", g_plans);
    char *text = read_text(path, NULL);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(memra_plan_manifest_load(g_plans, &m, &e), MEMRA_OK);
    /* the unmutated plan is valid */
    ck_assert_msg(memra_plan_parse(text, strlen(text), m, g_g, &p, &e) == MEMRA_OK, "%s", e.msg);
    memra_plan_free(p);
    r->mutate(doc);
    char *bad = json_dumps(doc, JSON_COMPACT);
    memra_err_clear(&e);
    int rc = memra_plan_parse(bad, strlen(bad), m, g_g, &p, &e);
    ck_assert_ptr_null(p);
    ck_assert_msg(rc == r->rc, "rule '%s': rc %d (%s), want %d", r->name, rc, e.msg, r->rc);
    ck_assert_msg(strstr(e.msg, r->want), "rule '%s': message '%s' lacks '%s'", r->name, e.msg,
                  r->want);
    free(bad);
    json_decref(doc);
    free(text);
    memra_plan_manifest_free(m);
}
END_TEST

/* A stage may only touch its own layers' weights and state. */
START_TEST(test_validator_stage_rule)
{
    char dir[700], path[800];
    memra_err e;
    memra_plan_manifest *m = NULL;
    memra_plan *p = NULL;
    sub_dir(dir, sizeof dir, "plans-stage-rule");
    ck_assert_int_eq(plan_dir(g_tiny, dir, "1", 0, 4, MEMRA_DT_F16, NULL, 0, NULL, &e), MEMRA_OK);
    ck_assert_int_eq(memra_plan_manifest_load(dir, &m, &e), MEMRA_OK);
    snprintf(path, sizeof path, "%s/plan-b1-s1.json", dir);
    char *text = read_text(path, NULL);
    json_t *doc = json_loads(text, 0, NULL);
    /* stage 1 = layers [4, 8): let it read layer 0's attn_norm */
    json_t *w = json_object_get(doc, "weights");
    size_t i;
    json_t *v;
    json_array_foreach(w, i, v)
    {
        if (!strcmp(json_string_value(v), "blk.4.attn_norm.weight"))
            json_array_set_new(w, i, json_string("blk.0.attn_norm.weight"));
    }
    json_object_set_new(args_n(doc, "rms_norm_q8", 0), "w", json_string("blk.0.attn_norm.weight"));
    char *bad = json_dumps(doc, JSON_COMPACT);
    ck_assert_int_eq(memra_plan_parse(bad, strlen(bad), m, g_g, &p, &e), MEMRA_ERR_PLAN);
    ck_assert_msg(strstr(e.msg, "blk.0.attn_norm.weight): layer 0 is outside stage 1's layers [4, 8)"),
                  "%s", e.msg);
    /* and a malformed document is a format error, not a crash */
    ck_assert_int_eq(memra_plan_parse(text, strlen(text) / 2, m, g_g, &p, &e), MEMRA_ERR_FORMAT);
    free(bad);
    free(text);
    json_decref(doc);
    memra_plan_manifest_free(m);
}
END_TEST

/* ==================================== precompile ===================================== */

#ifdef MEMRA_HAVE_NVRTC
#include "runtime/nvrtc.h" /* ours: it shadows the toolkit's <nvrtc.h> */

/* Under ASan every NVRTC allocation goes through ASan's allocator and a compile is ~5x
 * slower (tests/test_nvrtc.c measured it), so the sanitized build compiles only the first 2
 * of tiny's 6 tier-1 keys; the plain build (CI runs both) compiles all of them. */
#if defined(__SANITIZE_ADDRESS__)
#define PRECOMPILE_MAX_KEYS 2
#else
#define PRECOMPILE_MAX_KEYS 0
#endif

static uint32_t count_cubins(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint32_t n = 0;
    while (d && (e = readdir(d))) {
        const size_t l = strlen(e->d_name);
        n += l > 6 && strcmp(e->d_name + l - 6, ".cubin") == 0;
    }
    if (d)
        closedir(d);
    return n;
}

/* Every NVRTC key of tiny's tier-1 manifest compiles into a fresh cache; a second run
 * compiles nothing; and an independent memra_nvrtc_compile of each key is a cache hit. */
START_TEST(test_precompile)
{
    char dir[700], cache[700], prev[1024];
    memra_err e;
    memra_precompile_stats st;
    memra_plan_manifest *m = NULL;
    snprintf(dir, sizeof dir, "%s/plans-b1", g_root);
    snprintf(cache, sizeof cache, "%s/kernels", g_root);
    int rc = plan_dir(g_tiny, dir, "1", 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e);
    ck_assert_msg(rc == MEMRA_OK, "plan: %s", e.msg);
    ck_assert_int_eq(memra_plan_manifest_load(dir, &m, &e), MEMRA_OK);
    snprintf(prev, sizeof prev, "%s", memra_nvrtc_cache_dir());

    memra_precompile_opts o = {.plan_dir = dir, .sm = 90, .cache_dir = cache,
                               .max_keys = PRECOMPILE_MAX_KEYS};
    rc = memra_planner_precompile(&o, &st, &e);
    ck_assert_msg(rc == MEMRA_OK, "precompile: %s", e.msg);
    /* tiny tier 1: 6 mmvq qtype combinations and 1 attn_decode (a fixed nvcc kernel) */
    const uint32_t want = PRECOMPILE_MAX_KEYS ? PRECOMPILE_MAX_KEYS : 6;
    ck_assert_uint_eq(m->n_kernels, 7);
    ck_assert_uint_eq(st.n_keys, want);
    ck_assert_uint_eq(st.n_fixed, 1);
    ck_assert_uint_eq(st.compiled, want);
    ck_assert_uint_eq(st.cached, 0);
    ck_assert_uint_eq(count_cubins(cache), want);
    ck_assert_str_eq(memra_nvrtc_cache_dir(), prev); /* the process's cache dir is restored */

    rc = memra_planner_precompile(&o, &st, &e);
    ck_assert_msg(rc == MEMRA_OK, "precompile again: %s", e.msg);
    ck_assert_uint_eq(st.compiled, 0);
    ck_assert_uint_eq(st.cached, want);

    /* what a backend start does with each key: all from the disk cache */
    ck_assert_int_eq(memra_nvrtc_set_cache_dir(cache, &e), MEMRA_OK);
    uint32_t hits = 0;
    for (uint32_t i = 0; i < m->n_kernels && hits < want; i++) {
        char key[MEMRA_KERNEL_KEY_MAX];
        memra_cubin c;
        if (memra_nvrtc_compile_key(m->kernels[i], 90, key, sizeof key, &e) != MEMRA_OK)
            continue;
        ck_assert_str_eq(key + strlen(key) - 6, ":sm=90");
        ck_assert_int_eq(memra_nvrtc_compile(m->kernels[i], 90, &c, &e), MEMRA_OK);
        ck_assert_msg(c.from_cache == 1 && c.size > 0, "%s: not a cache hit", key);
        memra_cubin_free(&c);
        hits++;
    }
    ck_assert_uint_eq(hits, want);
    memra_nvrtc_set_cache_dir(prev, NULL);
    memra_plan_manifest_free(m);
}
END_TEST

/* Refusals that need no compile: each names its cause. */
START_TEST(test_precompile_errors)
{
    char dir[700], cache[700];
    memra_err e;
    memra_precompile_stats st;
    snprintf(dir, sizeof dir, "%s/plans-b1e", g_root);
    snprintf(cache, sizeof cache, "%s/kernels-e", g_root);
    ck_assert_int_eq(plan_dir(g_tiny, dir, "1", 1, 0, MEMRA_DT_F16, NULL, 0, NULL, &e),
                     MEMRA_OK);
    memra_precompile_opts o = {.plan_dir = dir, .sm = 80, .cache_dir = cache};
    ck_assert_int_eq(memra_planner_precompile(&o, &st, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "sm_90 or newer") && strstr(e.msg, "mmvq:"), "%s", e.msg);
    o.sm = 0;
    memra_err_clear(&e); /* the first failure recorded wins */
    ck_assert_int_eq(memra_planner_precompile(&o, &st, &e), MEMRA_ERR_INVALID_ARG);
    o.sm = 90;
    o.cache_dir = "";
    memra_err_clear(&e); /* the first failure recorded wins */
    ck_assert_int_eq(memra_planner_precompile(&o, &st, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_msg(strstr(e.msg, "disk cache is disabled"), "%s", e.msg);
    o.cache_dir = cache;
    o.plan_dir = g_root; /* no manifest.json there */
    memra_err_clear(&e); /* the first failure recorded wins */
    ck_assert_int_eq(memra_planner_precompile(&o, &st, &e), MEMRA_ERR_NOT_FOUND);
    ck_assert_msg(strstr(e.msg, "manifest.json"), "%s", e.msg);
    ck_assert_uint_eq(count_cubins(cache), 0);
}
END_TEST

#else /* no CUDA in this build: the API exists and says why it cannot work */

START_TEST(test_precompile)
{
    memra_err e;
    memra_precompile_stats st;
    memra_precompile_opts o = {.plan_dir = g_root, .sm = 90};
    memra_err_clear(&e);
    ck_assert_int_eq(memra_planner_precompile(&o, &st, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "NVRTC"), "%s", e.msg);
}
END_TEST

#endif

/* memra_plan_bufs_overlap on placements made up here: shared bytes overlap, touching ends
 * and zero-byte buffers do not, an index outside the plan never does. */
START_TEST(test_bufs_overlap)
{
    memra_plan_buffer b[5] = {{.offset = 0, .bytes = 256},   {.offset = 256, .bytes = 256},
                              {.offset = 255, .bytes = 2},   {.offset = 100, .bytes = 0},
                              {.offset = 0, .bytes = 4096}};
    memra_plan p = {.n_buffers = 5, .buffers = b};
    ck_assert(!memra_plan_bufs_overlap(&p, 0, 1)); /* [0, 256) and [256, 512) touch */
    ck_assert(memra_plan_bufs_overlap(&p, 0, 2) && memra_plan_bufs_overlap(&p, 2, 1));
    ck_assert(!memra_plan_bufs_overlap(&p, 3, 0) && !memra_plan_bufs_overlap(&p, 0, 3));
    ck_assert(memra_plan_bufs_overlap(&p, 4, 1) && memra_plan_bufs_overlap(&p, 1, 4));
    ck_assert(memra_plan_bufs_overlap(&p, 1, 1));
    ck_assert(!memra_plan_bufs_overlap(&p, 0, 5) && !memra_plan_bufs_overlap(&p, 7, 0));
}
END_TEST

Suite *make_plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("catalog");
    tcase_add_test(tc, test_catalog_specs);
    tcase_add_test(tc, test_expr);
    tcase_add_test(tc, test_bufs_overlap);
    suite_add_tcase(s, tc);

    tc = tcase_create("sandbox");
    tcase_add_unchecked_fixture(tc, setup_sandbox, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sandbox_globals);
    tcase_add_test(tc, test_sandbox_load);
    tcase_add_test(tc, test_sandbox_limits);
    tcase_add_test(tc, test_sandbox_model);
    suite_add_tcase(s, tc);

    tc = tcase_create("plans");
    tcase_add_unchecked_fixture(tc, setup_plans, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiny_tiers);
    tcase_add_test(tc, test_two_stages);
    tcase_add_test(tc, test_moe_and_kv);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_summary);
    tcase_add_test(tc, test_unknown_arch);
    tcase_add_test(tc, test_unsupported_weight_type);
    tcase_add_test(tc, test_embedding_scale_refused);
    tcase_add_test(tc, test_script_failures);
    tcase_add_test(tc, test_validator_stage_rule);
    tcase_add_loop_test(tc, test_validator_rule, 0, (int)(sizeof k_rules / sizeof k_rules[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("golden");
    tcase_add_unchecked_fixture(tc, setup_golden, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_golden);
    suite_add_tcase(s, tc);

    /* 6 NVRTC compiles of ~6 s each on the 2 shared CI cores (memra-plan --precompile on
     * tiny, measured: 38 s); ASan's 2 keys at ~5x per compile take about as long. */
    tc = tcase_create("precompile");
    tcase_add_unchecked_fixture(tc, setup_sandbox, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_precompile);
#ifdef MEMRA_HAVE_NVRTC
    tcase_add_test(tc, test_precompile_errors);
#endif
    suite_add_tcase(s, tc);
    return s;
}
