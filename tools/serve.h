/*
 * serve.h — memra-serve's server as a library (tools/serve.c): an OpenAI-compatible HTTP API
 * (libmicrohttpd, jansson) over one engine of the public API (include/memra.h), with
 * continuous batching: one scheduler thread owns the engine and steps every active request
 * together, one token per request per tick; requests join and leave between ticks.
 *
 *   GET  /health                -> {"status": "ok", "active": n, "queued": n}
 *   GET  /v1/models             -> the one model
 *   POST /v1/completions        -> text completion ("prompt": string or token ids)
 *   POST /v1/chat/completions   -> chat completion (the checkpoint's chat template)
 * Both POSTs take max_tokens (chat also max_completion_tokens), temperature (default 1, as
 * OpenAI), top_p, top_k, seed, stop (a string or up to 4), stream (server-sent events, the
 * OpenAI chunk format, ending with "data: [DONE]"); chat takes chat_template_kwargs
 * {"enable_thinking": bool}. Options that would change what is computed and that memra does
 * not do (n > 1, best_of, echo, logprobs, suffix, tools, logit_bias, response_format other
 * than text) are refused with 400, never ignored.
 *
 * The engine's contract carries through: a request's tokens do not depend on what else is
 * being served (the same prompt, parameters and seed give the same text alone or among any
 * number of concurrent requests). Errors are OpenAI-shaped ({"error": {"message", "type",
 * "code"}}) with 400 (bad request, prompt over the context), 404 (path, model), 405, 413
 * (body over max_body), 503 (queue full, shutting down), 500 (a tick failed on the device:
 * only that tick's requests fail).
 */
#ifndef MEMRA_SERVE_H
#define MEMRA_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "memra.h"

typedef struct memra_serve_opts {
    const char *host;            /* IPv4 address to bind (default "127.0.0.1") */
    uint16_t port;               /* 0: a free port (memra_serve_port says which) */
    const char *model_name;      /* the "model" id of requests and /v1/models (required) */
    uint32_t max_queue;          /* requests waiting for a slot before 503 (default 256) */
    size_t max_body;             /* request body bytes before 413 (default 1 MiB) */
    uint32_t default_max_tokens; /* when a request gives none (default 256) */
} memra_serve_opts;

void memra_serve_opts_init(memra_serve_opts *o);

typedef struct memra_server memra_server;

/* Starts the scheduler and the HTTP daemon over e (borrowed: it must outlive the server and
 * no other thread may step it). MEMRA_ERR_INVALID_ARG (options), MEMRA_ERR_IO (bind),
 * MEMRA_ERR_NOMEM; msg gets the reason. */
int memra_serve_start(memra_engine *e, const memra_serve_opts *o, memra_server **out, char *msg,
                      size_t msg_len);
uint16_t memra_serve_port(const memra_server *s);
/* Stops accepting, fails what is queued or running with 503, joins every thread. NULL: no-op. */
void memra_serve_stop(memra_server *s);

#endif
