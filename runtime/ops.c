/*
 * ops.c — the op catalog as data: descriptor tables generated from ops.def, name lookups,
 * the catalog hash, dtype sizes, and the small expression language of the spec column.
 *
 * Must not: hold any per-op knowledge that is not in ops.def. Every table below is an
 * X-macro expansion; adding an op touches ops.def only.
 */
#include "ops.h"

#include <limits.h>
#include <string.h>
#include <xxhash.h>

#include "qtype.h"
#include "quant.h"

/* ================================ descriptor tables ================================ */

#define MEMRA_OP(OP, op, key, doc) static const memra_op_arg_desc args_##OP[] = {
#define MEMRA_ARG(OP, ARG, arg, kind, type, acc, slot, req, spec)                                  \
    {#arg, MEMRA_ARG_##kind, type, MEMRA_ACC_##acc, slot, MEMRA_ARGF_##req, spec},
#define MEMRA_OP_END(OP)                                                                           \
    }                                                                                              \
    ;
#include "ops.def"

static const memra_op_desc g_ops[MEMRA_OP_COUNT] = {
#define MEMRA_OP(OP, op, key, doc) [MEMRA_OP_##OP] = {#op, key, doc, MEMRA_##OP##_N_ARGS, args_##OP},
#include "ops.def"
};

/* Every op must fit a launch record: checked at compile time from the generated enums. */
#define MEMRA_OP(OP, op, key, doc)                                                                 \
    _Static_assert(MEMRA_##OP##_N_ARGS <= MEMRA_OP_MAX_ARGS, #op " has too many args");
#include "ops.def"

const memra_op_desc *memra_op_get(uint32_t id)
{
    return id < MEMRA_OP_COUNT ? &g_ops[id] : NULL;
}

int memra_op_find(const char *name)
{
    for (int i = 0; i < MEMRA_OP_COUNT; i++)
        if (strcmp(g_ops[i].name, name) == 0)
            return i;
    return -1;
}

_Static_assert(MEMRA_OP_COUNT <= 64, "skip masks hold one bit per op");

int memra_op_skippable(uint32_t op)
{
    return op == MEMRA_OP_RMS_NORM_Q8 || op == MEMRA_OP_SILU_MUL_Q8 || op == MEMRA_OP_ATTN_PREP ||
           op == MEMRA_OP_ATTN_DECODE || op == MEMRA_OP_GDN_STEP;
}

uint64_t memra_op_skippable_mask(void)
{
    uint64_t m = 0;
    for (uint32_t op = 0; op < MEMRA_OP_COUNT; op++)
        if (memra_op_skippable(op))
            m |= 1ull << op;
    return m;
}

int memra_op_skip_refused(uint64_t mask)
{
    const uint64_t bad = mask & ~memra_op_skippable_mask();
    for (int b = 0; b < 64; b++)
        if (bad >> b & 1)
            return b;
    return -1;
}

int memra_op_skip_check(uint64_t mask, memra_err *err)
{
    const int bad = memra_op_skip_refused(mask);
    if (bad < 0)
        return MEMRA_OK;
    const memra_op_desc *d = memra_op_get((uint32_t)bad);
    return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                      "skip_ops: bit %d (%s) cannot be left out of a tick (memra_op_skippable)",
                      bad, d ? d->name : "no such op");
}

int memra_op_find_arg(uint32_t op, const char *name)
{
    const memra_op_desc *d = memra_op_get(op);
    if (!d)
        return -1;
    for (uint32_t i = 0; i < d->n_args; i++)
        if (strcmp(d->args[i].name, name) == 0)
            return (int)i;
    return -1;
}

static void hash_str(XXH64_state_t *st, const char *s)
{
    /* Length-prefixed so ("ab","c") and ("a","bc") hash differently; NULL hashes as -1. */
    uint64_t n = s ? strlen(s) : UINT64_MAX;
    XXH64_update(st, &n, sizeof n);
    if (s)
        XXH64_update(st, s, (size_t)n);
}

uint64_t memra_ops_catalog_hash(void)
{
    XXH64_state_t *st = XXH64_createState();
    if (!st)
        return 0;
    XXH64_reset(st, 0);
    for (int i = 0; i < MEMRA_OP_COUNT; i++) {
        const memra_op_desc *d = &g_ops[i];
        hash_str(st, d->name);
        hash_str(st, d->key);
        for (uint32_t j = 0; j < d->n_args; j++) {
            const memra_op_arg_desc *a = &d->args[j];
            uint8_t cols[5] = {a->kind, a->type, a->access, a->slot, a->flag};
            hash_str(st, a->name);
            XXH64_update(st, cols, sizeof cols);
            hash_str(st, a->spec);
        }
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

/* ===================================== names ===================================== */

static const char *name_at(const char *const *tab, size_t n, uint32_t i)
{
    return i < n && tab[i] ? tab[i] : "?";
}

static int name_find(const char *const *tab, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (tab[i] && strcmp(tab[i], s) == 0)
            return (int)i;
    return -1;
}

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
static const char *const g_kind[] = {"none", "buf", "weight", "state", "tick", "int", "float"};
static const char *const g_dtype[] = {"f32", "f16", "i32", "q8_1", "q8_0"};
static const char *const g_wclass[] = {"qdot", "f32", "rows"};
static const char *const g_skind[] = {"kv_k", "kv_v", "conv", "ssm"};
static const char *const g_tick[] = {"tokens", "positions", "sampling", "out_tokens"};
static const char *const g_acc[] = {"in", "out", "inout", "scratch", "out_mode"};
_Static_assert(COUNT_OF(g_kind) == MEMRA_ARG_KIND_COUNT, "kind names");
_Static_assert(COUNT_OF(g_dtype) == MEMRA_DT_COUNT, "dtype names");
_Static_assert(COUNT_OF(g_wclass) == MEMRA_WC_COUNT, "weight class names");
_Static_assert(COUNT_OF(g_skind) == MEMRA_SK_COUNT, "state kind names");
_Static_assert(COUNT_OF(g_tick) == MEMRA_TICK_COUNT, "tick field names");

const char *memra_arg_kind_name(uint32_t k) { return name_at(g_kind, COUNT_OF(g_kind), k); }
const char *memra_dtype_name(uint32_t d) { return name_at(g_dtype, COUNT_OF(g_dtype), d); }
const char *memra_weight_class_name(uint32_t w) { return name_at(g_wclass, COUNT_OF(g_wclass), w); }
const char *memra_state_kind_name(uint32_t s) { return name_at(g_skind, COUNT_OF(g_skind), s); }
const char *memra_tick_field_name(uint32_t f) { return name_at(g_tick, COUNT_OF(g_tick), f); }
const char *memra_access_name(uint32_t a) { return name_at(g_acc, COUNT_OF(g_acc), a); }
int memra_dtype_from_name(const char *s) { return name_find(g_dtype, COUNT_OF(g_dtype), s); }
int memra_state_kind_from_name(const char *s) { return name_find(g_skind, COUNT_OF(g_skind), s); }
int memra_tick_field_from_name(const char *s) { return name_find(g_tick, COUNT_OF(g_tick), s); }

/* ================================ dtypes and weights ================================ */

uint64_t memra_dtype_bytes(uint32_t dt, int64_t count, int *ok)
{
    /* Element / block sizes: f32 4, f16 2, i32 4; q8_1 36 B per 32 (quant.h
     * memra_block_q8_1), q8_0 34 B per 32 (spec/gguf-and-quants.md §3.2). */
    static const uint32_t elem[] = {4, 2, 4, 36, 34};
    static const uint32_t block[] = {1, 1, 1, 32, 32};
    *ok = 0;
    if (dt >= MEMRA_DT_COUNT || count < 0 || count % block[dt] != 0)
        return 0;
    uint64_t blocks = (uint64_t)count / block[dt];
    if (blocks > (UINT64_MAX >> 8))
        return 0;
    *ok = 1;
    return blocks * elem[dt];
}

int memra_weight_class_accepts(uint32_t wc, uint32_t qtype)
{
    if (!memra_qtype_get(qtype))
        return 0;
    switch (wc) {
    case MEMRA_WC_QDOT: return memra_quant_can_dot((memra_qtype)qtype);
    case MEMRA_WC_F32: return qtype == MEMRA_QT_F32;
    case MEMRA_WC_ROWS: return memra_quant_can_dequantize((memra_qtype)qtype);
    default: return 0;
    }
}

/* =================================== expressions =================================== */
/* Grammar: expr = term {('+'|'-') term}; term = factor {('*'|'/') factor};
 * factor = integer | identifier | '(' expr ')'. Values stay within +-2^62 so no
 * intermediate can overflow int64. */

typedef struct expr_ctx {
    const char *s, *end;
    memra_expr_lookup lookup;
    void *user;
    memra_err *err;
    int depth;
} expr_ctx;

#define EXPR_LIMIT (INT64_C(1) << 62)

static int expr_sum(expr_ctx *c, int64_t *v);

static void expr_skip(expr_ctx *c)
{
    while (c->s < c->end && *c->s == ' ')
        c->s++;
}

static int expr_fail(expr_ctx *c, const char *what)
{
    return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "expression: %s", what);
}

static int expr_factor(expr_ctx *c, int64_t *v)
{
    expr_skip(c);
    if (c->s >= c->end)
        return expr_fail(c, "unexpected end");
    char ch = *c->s;
    if (ch == '(') {
        if (++c->depth > 32)
            return expr_fail(c, "nested too deeply");
        c->s++;
        int rc = expr_sum(c, v);
        if (rc)
            return rc;
        expr_skip(c);
        if (c->s >= c->end || *c->s != ')')
            return expr_fail(c, "missing ')'");
        c->s++;
        c->depth--;
        return MEMRA_OK;
    }
    if (ch >= '0' && ch <= '9') {
        int64_t x = 0;
        while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
            x = x * 10 + (*c->s++ - '0');
            if (x > EXPR_LIMIT)
                return expr_fail(c, "integer too large");
        }
        *v = x;
        return MEMRA_OK;
    }
    const char *id = c->s;
    while (c->s < c->end && ((*c->s >= 'a' && *c->s <= 'z') || *c->s == '_' ||
                             (*c->s >= '0' && *c->s <= '9') || (*c->s >= 'A' && *c->s <= 'Z')))
        c->s++;
    if (c->s == id)
        return expr_fail(c, "unexpected character");
    if (!c->lookup || c->lookup(c->user, id, (size_t)(c->s - id), v) != 0)
        return MEMRA_FAIL(c->err, MEMRA_ERR_PLAN, "expression: unknown or absent '%.*s'",
                          (int)(c->s - id), id);
    if (*v > EXPR_LIMIT || *v < -EXPR_LIMIT)
        return expr_fail(c, "value out of range");
    return MEMRA_OK;
}

static int expr_term(expr_ctx *c, int64_t *v)
{
    int rc = expr_factor(c, v);
    while (rc == MEMRA_OK) {
        expr_skip(c);
        if (c->s >= c->end || (*c->s != '*' && *c->s != '/'))
            break;
        char op = *c->s++;
        int64_t r;
        if ((rc = expr_factor(c, &r)) != MEMRA_OK)
            break;
        if (op == '*') {
            __int128 p = (__int128)*v * r;
            if (p > EXPR_LIMIT || p < -EXPR_LIMIT)
                return expr_fail(c, "product out of range");
            *v = (int64_t)p;
        } else {
            if (r == 0 || *v % r != 0)
                return expr_fail(c, "division by zero or not exact");
            *v /= r;
        }
    }
    return rc;
}

static int expr_sum(expr_ctx *c, int64_t *v)
{
    int rc = expr_term(c, v);
    while (rc == MEMRA_OK) {
        expr_skip(c);
        if (c->s >= c->end || (*c->s != '+' && *c->s != '-'))
            break;
        char op = *c->s++;
        int64_t r;
        if ((rc = expr_term(c, &r)) != MEMRA_OK)
            break;
        *v = op == '+' ? *v + r : *v - r; /* |v|,|r| <= 2^62: no overflow */
        if (*v > EXPR_LIMIT || *v < -EXPR_LIMIT)
            return expr_fail(c, "sum out of range");
    }
    return rc;
}

int memra_expr_eval(const char *expr, size_t len, memra_expr_lookup lookup, void *user,
                    int64_t *out, memra_err *err)
{
    expr_ctx c = {expr, expr + len, lookup, user, err, 0};
    int rc = expr_sum(&c, out);
    if (rc)
        return rc;
    expr_skip(&c);
    if (c.s != c.end)
        return expr_fail(&c, "trailing characters");
    return MEMRA_OK;
}

int memra_spec_split(const char *spec, const char **item, size_t *len, int max)
{
    int n = 0;
    const char *s = spec;
    if (!s || !*s)
        return 0;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (n < max) {
            item[n] = s;
            len[n] = l;
        }
        n++;
        if (!e)
            break;
        s = e + 1;
    }
    return n;
}

int memra_spec_range(const char *spec, int64_t *lo, int64_t *hi)
{
    const char *dots = spec ? strstr(spec, "..") : NULL;
    if (!dots)
        return -1;
    int rc1 = memra_expr_eval(spec, (size_t)(dots - spec), NULL, NULL, lo, NULL);
    int rc2 = memra_expr_eval(dots + 2, strlen(dots + 2), NULL, NULL, hi, NULL);
    return rc1 || rc2 ? -1 : 0;
}
