/*
 * err.c — error records, memra_strerror, and the single log callback (see err.h).
 * Library code never prints directly: everything goes through memra_log().
 */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *memra_strerror(int code)
{
    switch (code) {
    case MEMRA_OK: return "ok";
    case MEMRA_ERR_INVALID_ARG: return "invalid argument";
    case MEMRA_ERR_IO: return "i/o error";
    case MEMRA_ERR_FORMAT: return "malformed file";
    case MEMRA_ERR_UNSUPPORTED: return "unsupported";
    case MEMRA_ERR_NOMEM: return "out of memory";
    case MEMRA_ERR_NOT_FOUND: return "not found";
    case MEMRA_ERR_PLAN: return "invalid plan";
    case MEMRA_ERR_STALE_PLAN: return "plan does not match the model";
    case MEMRA_ERR_SCRIPT: return "plan script failed";
    case MEMRA_ERR_CAPACITY: return "capacity exhausted";
    case MEMRA_ERR_CUDA: return "CUDA error";
    case MEMRA_ERR_TOKENIZER: return "tokenizer error";
    case MEMRA_ERR_INTERNAL: return "internal error";
    default: return "unknown error code";
    }
}

void memra_err_clear(memra_err *err)
{
    if (err) {
        err->code = MEMRA_OK;
        err->file = NULL;
        err->line = 0;
        err->msg[0] = '\0';
    }
}

int memra_err_set(memra_err *err, int code, const char *file, int line, const char *fmt, ...)
{
    if (!err || err->code != MEMRA_OK)
        return code;
    err->code = code;
    err->file = file;
    err->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    memra_log(MEMRA_LOG_DEBUG, "%s:%d: %s (%s)", file, line, err->msg, memra_strerror(code));
    return code;
}

static memra_log_fn g_log_fn;
static void *g_log_user;
static int g_log_level = MEMRA_LOG_WARN;

void memra_log_set_callback(memra_log_fn fn, void *user)
{
    g_log_fn = fn;
    g_log_user = user;
}

void memra_log_set_level(int max_level) { g_log_level = max_level; }

void memra_log(int level, const char *fmt, ...)
{
    if (level > g_log_level)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (g_log_fn) {
        g_log_fn(level, buf, g_log_user);
        return;
    }
    static const char *names[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "memra %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], buf);
}
