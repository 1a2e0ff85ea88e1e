/*
 * plan_variant.c — the rewritten plan sets behind memra-bench --phases: a copy of a plan
 * directory in which every launch of one op class is issued twice in a row.
 *
 * Why doubling: neither backend exposes per-launch hooks, and a plan with a class removed
 * is refused (its outputs are read later and must be written first), while a doubled launch
 * keeps every validator rule: the same buffers are live over the same neighbouring launches,
 * every read still follows a write, and in-place ops (residual adds, the recurrent-state
 * update, the KV append) just run twice on finite values. Timing the doubled set against the
 * original gives the class's marginal cost inside the real tick, graph replay included.
 *
 * Must not: change anything but the launch lists (and the launch counts of the manifest and
 * the informational stats); the plans are re-validated by the backend that loads them. The
 * manifest is written last, as memra-plan does, so a directory with a manifest is complete.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static int load_json(const char *path, json_t **out, memra_err *err)
{
    json_error_t je;
    *out = json_load_file(path, 0, &je);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s:%d: %s", path, je.line, je.text);
    return MEMRA_OK;
}

static int dump_json(json_t *j, const char *path, memra_err *err)
{
    if (json_dump_file(j, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: cannot write", path);
    return MEMRA_OK;
}

/* Replace plan's "launches" by the doubled list; *n gets its new length. */
static int double_launches(json_t *plan, const char *op_name, const char *path, size_t *n,
                           memra_err *err)
{
    json_t *arr = json_object_get(plan, "launches");
    if (!json_is_array(arr))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s: no launches array", path);
    json_t *out = json_array();
    if (!out)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *l = json_array_get(arr, i);
        const char *op = json_string_value(json_object_get(l, "op"));
        json_array_append(out, l);
        if (op && strcmp(op, op_name) == 0)
            json_array_append_new(out, json_deep_copy(l));
    }
    *n = json_array_size(out);
    json_object_set_new(plan, "launches", out);
    json_t *stats = json_object_get(plan, "stats");
    if (json_is_object(stats))
        json_object_set_new(stats, "launches", json_integer((json_int_t)*n));
    return MEMRA_OK;
}

int memra_bench_plans_double_op(const char *src, const char *dst, uint32_t op, memra_err *err)
{
    int rc;
    const memra_op_desc *d = memra_op_get(op);
    json_t *man = NULL, *plan = NULL;
    char man_path[1100], path[1200];
    if (!d)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "op %u is not in the catalog", op);
    snprintf(man_path, sizeof man_path, "%s/manifest.json", src);
    MEMRA_TRY(load_json(man_path, &man, err));
    json_t *plans = json_object_get(man, "plans");
    if (!json_is_array(plans)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s: no plans array", man_path);
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(plans); i++) {
        json_t *e = json_array_get(plans, i);
        const char *file = json_string_value(json_object_get(e, "file"));
        size_t n = 0;
        if (!file || strchr(file, '/')) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s: plans[%zu] has no plain file name",
                            man_path, i);
            goto fail;
        }
        snprintf(path, sizeof path, "%s/%s", src, file);
        MEMRA_TRY(load_json(path, &plan, err));
        MEMRA_TRY(double_launches(plan, d->name, path, &n, err));
        snprintf(path, sizeof path, "%s/%s", dst, file);
        MEMRA_TRY(dump_json(plan, path, err));
        json_decref(plan);
        plan = NULL;
        json_object_set_new(e, "launches", json_integer((json_int_t)n));
    }
    snprintf(path, sizeof path, "%s/manifest.json", dst);
    MEMRA_TRY(dump_json(man, path, err));
    rc = MEMRA_OK;
fail:
    json_decref(plan);
    json_decref(man);
    return rc;
}
