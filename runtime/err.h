/*
 * err.h — internal error records and the "goto fail" helpers every runtime file uses.
 *
 * A memra_err carries the code, a one-line message naming the cause, and the file:line that
 * set it. Functions take `memra_err *err` (may be NULL: the message is then dropped) and
 * return the code, so callers write
 *     if (n > remaining) { rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "kv %llu: ...", i); goto fail; }
 * The first failure wins: a later MEMRA_FAIL does not overwrite an earlier message unless
 * the record was cleared (memra_err_clear).
 */
#ifndef MEMRA_ERR_INTERNAL_H
#define MEMRA_ERR_INTERNAL_H

#include "memra.h"

typedef struct memra_err {
    int code;       /* MEMRA_OK when no failure has been recorded */
    const char *file;
    int line;
    char msg[512];
} memra_err;

void memra_err_clear(memra_err *err);
int memra_err_set(memra_err *err, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define MEMRA_FAIL(err, code, ...) memra_err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)

/* Evaluate a call returning an int code; on failure jump to `fail` with rc set. */
#define MEMRA_TRY(expr)                                                                            \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc != MEMRA_OK)                                                                        \
            goto fail;                                                                             \
    } while (0)

/* Internal logging (goes through the callback set with memra_log_set_callback). */
void memra_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
