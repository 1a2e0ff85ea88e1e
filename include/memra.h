/*
 * memra.h — the one public header of memra, a static LLM decode engine.
 *
 * Anything not declared here is not API. Every fallible call returns int: MEMRA_OK (0) or a
 * MEMRA_ERR_* code (append-only). memra_strerror(code) gives static text for a code; the
 * detail (file, tensor, launch, CUDA error string) of the last failure on a handle is in
 * memra_last_error(handle).
 *
 * Worked example (grows with the engine; see README.md):
 *
 *     memra_log_set_callback(my_log, NULL);     // optional; default writes to stderr
 *     ...
 *     if (rc != MEMRA_OK) fprintf(stderr, "%s\n", memra_strerror(rc));
 */
#ifndef MEMRA_H
#define MEMRA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes (append-only: never renumber) ---- */
enum {
    MEMRA_OK = 0,
    MEMRA_ERR_INVALID_ARG = 1, /* a caller passed a bad argument */
    MEMRA_ERR_IO = 2,          /* open/read/write/mmap failed */
    MEMRA_ERR_FORMAT = 3,      /* a file is malformed (GGUF, plan, JSON) */
    MEMRA_ERR_UNSUPPORTED = 4, /* valid but not supported: architecture, qtype, version */
    MEMRA_ERR_NOMEM = 5,       /* host allocation failed */
    MEMRA_ERR_NOT_FOUND = 6,   /* a key, tensor, file or id does not exist */
    MEMRA_ERR_PLAN = 7,        /* a plan failed validation */
    MEMRA_ERR_STALE_PLAN = 8,  /* plans were generated for another checkpoint */
    MEMRA_ERR_SCRIPT = 9,      /* a Lua plan script failed */
    MEMRA_ERR_CAPACITY = 10,   /* slots, context length or batch tier exhausted */
    MEMRA_ERR_CUDA = 11,       /* a CUDA driver/runtime/NVRTC call failed */
    MEMRA_ERR_TOKENIZER = 12,  /* tokenizer metadata or input problem */
    MEMRA_ERR_INTERNAL = 13,   /* an invariant broke: a bug in memra */
};

/* Static text for an error code; never NULL. */
const char *memra_strerror(int code);

/* ---- logging: one settable callback for everything the library reports ---- */
enum { MEMRA_LOG_ERROR = 0, MEMRA_LOG_WARN = 1, MEMRA_LOG_INFO = 2, MEMRA_LOG_DEBUG = 3 };
typedef void (*memra_log_fn)(int level, const char *msg, void *user);
/* fn = NULL restores the default (stderr, levels <= MEMRA_LOG_WARN). Not thread-safe with
 * concurrent logging; set it once at start-up. */
void memra_log_set_callback(memra_log_fn fn, void *user);
void memra_log_set_level(int max_level);

#ifdef __cplusplus
}
#endif
#endif /* MEMRA_H */
