/*
 * plan_write.h — from the Lua tables a plan script returns to the canonical JSON text the
 * runtime loads (docs/plan-format.md).
 *
 * Canonical text: objects keep a fixed key order (the order docs/plan-format.md lists; a
 * launch's args in the op catalog's order; any other key after them, sorted), arrays of
 * objects are written one element per line, everything else compact; reals with 9
 * significant digits (enough to round-trip the float32 the runtime reads). Same tree, same
 * bytes.
 *
 * Must not: depend on Lua table iteration order (it varies between runs) or on locale.
 */
#ifndef MEMRA_PLAN_WRITE_H
#define MEMRA_PLAN_WRITE_H

#include <jansson.h>

#include "err.h"

typedef struct lua_State lua_State;

/* The Lua value at idx as JSON: tables whose keys are exactly 1..n become arrays (an empty
 * table is an empty array), tables with string keys objects; integers stay integers;
 * non-finite numbers, functions, mixed tables are errors naming the path. */
int memra_lua_to_json(lua_State *L, int idx, json_t **out, memra_err *err);

/* Reorder a plan or manifest document in place into canonical key order (see above). */
void memra_plan_json_canonical(json_t *doc);

/* Canonical text of doc (malloc'd, NUL-terminated), or NULL on allocation failure. */
char *memra_plan_json_dump(json_t *doc);

/* Write text to dir/name through a temporary file and rename (readers never see a half
 * written plan). */
int memra_write_text_file(const char *dir, const char *name, const char *text, memra_err *err);

#endif
