/*
 * serve.c — the OpenAI-compatible server of serve.h.
 *
 * Threads: libmicrohttpd runs one thread per connection (a handler may block until its
 * request is done, and a streaming response blocks in its reader until the next text); one
 * scheduler thread owns the engine. They share one mutex over the jobs and two condition
 * variables: `work` wakes the scheduler (a job queued, a stream cancelled, shutdown) and
 * `progress` wakes handlers (new text, a job done).
 *
 * A job (one request) lives until both its connection and the scheduler let go of it
 * (refs). Its life: queued -> active (a session is open; each tick feeds it one prompt token,
 * then its last sampled token) -> done (finish_reason, or an error status); a connection that
 * goes away cancels it and the scheduler drops it before the next tick.
 *
 * What a client sees of the tick is only text: the sampled ids go through the engine's
 * streaming detokenizer (whole UTF-8 characters), stop strings are found in the text
 * (streams hold back the bytes that could still begin one), and an end-of-generation token
 * ends the request without text.
 */
#include "serve.h"
#include "tokenizer.h" /* memra_utf8_valid_prefix */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STOP 4
#define KEEPALIVE_S 15 /* a stream with nothing to send sends a comment this often */

typedef struct job job;
struct job {
    /* request (set by the handler before queueing, then read-only) */
    int chat, stream;
    int32_t *prompt;
    size_t n_prompt;
    uint32_t max_tokens;
    memra_sampling smp;
    int seeded; /* the request gave a seed */
    char *stop[MAX_STOP];
    size_t n_stop, max_stop;
    char id[40];
    long long created;
    /* scheduler state */
    memra_session *s;
    memra_text_stream *ts;
    size_t fed;     /* prompt tokens fed */
    int32_t next;   /* the token the next tick feeds once the prompt is in */
    uint32_t n_gen; /* completion tokens */
    char *text;     /* completion text so far (stop strings cut off) */
    size_t len, cap;
    int done; /* finish set, or status != 200 */
    const char *finish;
    int status; /* HTTP status of a failure; 200 while fine */
    char err[400];
    int cancelled;
    int stopped; /* a stop string ended it */
    int refs;
    /* streaming (the connection thread only) */
    size_t emitted; /* bytes of text sent */
    int sent_role, sent_final;
    char *sse; /* formatted, not yet handed to MHD */
    size_t sse_len, sse_off;
    double last_sent; /* mono_s() of the last bytes handed to MHD */
    job *next_job;
};

struct memra_server {
    memra_engine *e;
    memra_serve_opts o;
    char model[256];
    memra_engine_info info;
    struct MHD_Daemon *d;
    uint16_t port;
    pthread_t sched;
    int sched_started;
    pthread_mutex_t mu;
    pthread_cond_t work, progress;
    int stopping;
    job *queue_head, *queue_tail; /* waiting for a slot */
    size_t n_queued;
    job **active;    /* [n_slots] */
    memra_row *rows; /* [n_slots] the scheduler's tick */
    job **row_job;   /* [n_slots] */
    size_t n_active;
    uint64_t seq; /* request ids, default seeds */
    uint64_t n_ticks, n_rows, max_rows, n_tokens; /* counters for /health */
    double last_tick_ms;                          /* memra_engine_stats of the last tick */
};

/* =================================== jobs and text =================================== */

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Cuts s back to whole UTF-8 characters (a message truncated by snprintf may end inside one,
 * and jansson refuses to encode it). */
static void utf8_trim(char *s)
{
    s[memra_utf8_valid_prefix(s, strlen(s))] = '\0';
}

static void job_release(job *j) /* with sv->mu held */
{
    if (--j->refs > 0)
        return;
    free(j->prompt);
    for (size_t i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->text);
    free(j->sse);
    free(j);
}

static int text_append(job *j, const char *p, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        size_t c = j->cap ? j->cap : 256;
        while (c < j->len + n + 1)
            c *= 2;
        char *t = realloc(j->text, c);
        if (!t)
            return -1;
        j->text = t, j->cap = c;
    }
    memcpy(j->text + j->len, p, n);
    j->len += n;
    j->text[j->len] = '\0';
    return 0;
}

/* Cuts the text at the earliest stop string that ends in the bytes from `from` on (and could
 * not have ended before); 1 when one did. */
static int cut_at_stop(job *j, size_t from)
{
    if (!j->n_stop)
        return 0;
    const size_t start = from > j->max_stop - 1 ? from - (j->max_stop - 1) : 0;
    size_t best = (size_t)-1;
    for (size_t i = 0; i < j->n_stop; i++) {
        const char *p = memmem(j->text + start, j->len - start, j->stop[i], strlen(j->stop[i]));
        if (p && (size_t)(p - j->text) < best)
            best = (size_t)(p - j->text);
    }
    if (best == (size_t)-1)
        return 0;
    j->len = best;
    j->text[best] = '\0';
    return 1;
}

/* Ends a job (with sv->mu held): its session and stream go back, waiters wake. A job that
 * ends normally gets the detokenizer's held bytes (a partial character at the very end
 * becomes U+FFFD); one cut by a stop string does not: those bytes come after the cut. */
static void job_finish(memra_server *sv, job *j, const char *finish, int status, const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));
static void job_finish(memra_server *sv, job *j, const char *finish, int status, const char *fmt,
                       ...)
{
    if (j->done)
        return;
    if (status == 200 && j->ts && !j->stopped) {
        const char *t;
        size_t n;
        if (memra_text_stream_flush(j->ts, &t, &n) == MEMRA_OK && text_append(j, t, n) == 0)
            cut_at_stop(j, j->len - n);
    }
    memra_text_stream_close(j->ts);
    memra_session_close(j->s);
    j->ts = NULL, j->s = NULL;
    j->finish = finish;
    j->status = status;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->err, sizeof j->err, fmt, ap);
        va_end(ap);
        utf8_trim(j->err);
    }
    j->done = 1;
    pthread_cond_broadcast(&sv->progress);
}

/* ===================================== scheduler ===================================== */

static void remove_active(memra_server *sv, size_t i)
{
    job *j = sv->active[i];
    sv->active[i] = sv->active[--sv->n_active];
    job_release(j);
}

/* A sampled token (with sv->mu held): text, stop strings, limits. */
static void take_token(memra_server *sv, job *j, int32_t tok)
{
    if (memra_token_is_eog(sv->e, tok)) {
        job_finish(sv, j, "stop", 200, NULL);
        return;
    }
    const char *t;
    size_t n;
    if (memra_text_stream_push(j->ts, tok, &t, &n) != MEMRA_OK || text_append(j, t, n) != 0) {
        job_finish(sv, j, NULL, 500, "detokenizing: %s", memra_last_error());
        return;
    }
    j->n_gen++;
    sv->n_tokens++;
    j->next = tok;
    if (cut_at_stop(j, j->len - n)) {
        j->stopped = 1;
        job_finish(sv, j, "stop", 200, NULL);
    } else if (j->n_gen >= j->max_tokens || memra_session_pos(j->s) >= sv->info.n_ctx)
        job_finish(sv, j, "length", 200, NULL);
    else
        pthread_cond_broadcast(&sv->progress);
}

static void *scheduler(void *arg)
{
    memra_server *sv = arg;
    const size_t slots = sv->info.n_slots;
    memra_row *rows = sv->rows;
    job **row_job = sv->row_job;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->stopping && !sv->n_queued && !sv->n_active)
            pthread_cond_wait(&sv->work, &sv->mu);
        if (sv->stopping)
            break;
        for (size_t i = sv->n_active; i-- > 0;) /* done or cancelled: let go */
            if (sv->active[i]->done || sv->active[i]->cancelled) {
                job_finish(sv, sv->active[i], NULL, 499, "cancelled");
                remove_active(sv, i);
            }
        while (sv->queue_head && sv->n_active < slots) { /* admit */
            job *j = sv->queue_head;
            sv->queue_head = j->next_job;
            if (!sv->queue_head)
                sv->queue_tail = NULL;
            sv->n_queued--;
            if (j->cancelled) {
                job_release(j);
                continue;
            }
            if (memra_session_open(sv->e, &j->smp, &j->s) != MEMRA_OK ||
                memra_text_stream_open(sv->e, 0, &j->ts) != MEMRA_OK) {
                job_finish(sv, j, NULL, 500, "opening a session: %s", memra_last_error());
                job_release(j);
                continue;
            }
            sv->active[sv->n_active++] = j;
        }
        const size_t n = sv->n_active;
        for (size_t i = 0; i < n; i++) {
            job *j = sv->active[i];
            row_job[i] = j;
            rows[i] = (memra_row){.session = j->s,
                                  .token = j->fed < j->n_prompt ? j->prompt[j->fed] : j->next};
        }
        if (!n)
            continue;
        pthread_mutex_unlock(&sv->mu);
        const int rc = memra_step(sv->e, rows, n);
        char why[512] = ""; /* the failing tick's cause, before anything else can fail */
        if (rc != MEMRA_OK)
            snprintf(why, sizeof why, "%s", memra_last_error());
        memra_engine_stats st; /* read here: only this thread touches the engine */
        memra_engine_get_stats(sv->e, &st);
        pthread_mutex_lock(&sv->mu);
        sv->n_ticks++;
        sv->n_rows += n;
        sv->last_tick_ms = st.last_tick_ms;
        if (n > sv->max_rows)
            sv->max_rows = n;
        for (size_t i = 0; i < n; i++) {
            job *j = row_job[i];
            if (rows[i].status != MEMRA_OK) {
                job_finish(sv, j, NULL, rows[i].status == MEMRA_ERR_CAPACITY ? 400 : 500,
                           "tick failed (%s): %s", memra_strerror(rows[i].status),
                           rc != MEMRA_OK ? why : "the request's row was refused");
                continue;
            }
            if (j->fed < j->n_prompt && ++j->fed < j->n_prompt)
                continue; /* a prompt token that is not the last: its sample is not used */
            take_token(sv, j, rows[i].out_token);
        }
    }
    /* shutdown: everything still here fails with 503 */
    for (size_t i = sv->n_active; i-- > 0;) {
        job_finish(sv, sv->active[i], NULL, 503, "the server is shutting down");
        remove_active(sv, i);
    }
    while (sv->queue_head) {
        job *j = sv->queue_head;
        sv->queue_head = j->next_job;
        job_finish(sv, j, NULL, 503, "the server is shutting down");
        job_release(j);
    }
    sv->queue_tail = NULL;
    sv->n_queued = 0;
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ======================================= HTTP ======================================== */

typedef struct req_ctx {
    char *body;
    size_t len, cap;
    int too_big;
} req_ctx;

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (!s) { /* only when memory ran out: still an answer */
        static const char k_oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(sizeof k_oom - 1, (void *)k_oom,
                                                                 MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        const enum MHD_Result ret = MHD_queue_response(c, 500, r);
        MHD_destroy_response(r);
        return ret;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    const enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static json_t *error_json(unsigned status, const char *msg)
{
    const char *type = status == 400 || status == 404 || status == 405 || status == 413
                           ? "invalid_request_error"
                       : status == 503 ? "server_overloaded"
                                       : "server_error";
    return json_pack("{s:{s:s, s:s, s:i}}", "error", "message", msg, "type", type, "code",
                     (int)status);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_trim(msg);
    return send_json(c, status, error_json(status, msg));
}

/* A request parse failure: status and message into err. */
typedef struct bad {
    unsigned status;
    char msg[400];
} bad;

static int refuse(bad *b, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(bad *b, unsigned status, const char *fmt, ...)
{
    b->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    utf8_trim(b->msg);
    return -1;
}

static int is_set(json_t *v)
{
    return v && !json_is_null(v);
}

/* Options memra does not implement: refused when given a value other than the default. */
static int refuse_unsupported(json_t *req, bad *b)
{
    json_t *v;
    if ((v = json_object_get(req, "n")) && is_set(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(b, 400, "'n' must be 1: one choice per request");
    if ((v = json_object_get(req, "best_of")) && is_set(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(b, 400, "'best_of' is not supported");
    if ((v = json_object_get(req, "echo")) && json_is_true(v))
        return refuse(b, 400, "'echo' is not supported");
    if ((v = json_object_get(req, "logprobs")) && is_set(v) && !json_is_false(v))
        return refuse(b, 400, "'logprobs' is not supported");
    if ((v = json_object_get(req, "top_logprobs")) && is_set(v))
        return refuse(b, 400, "'top_logprobs' is not supported");
    if ((v = json_object_get(req, "suffix")) && is_set(v))
        return refuse(b, 400, "'suffix' is not supported");
    if ((v = json_object_get(req, "tools")) && is_set(v) && json_array_size(v))
        return refuse(b, 400, "'tools' are not supported");
    if ((v = json_object_get(req, "logit_bias")) && is_set(v) && json_object_size(v))
        return refuse(b, 400, "'logit_bias' is not supported");
    static const struct {
        const char *key;
        double neutral;
    } k_penalties[] = {
        {"frequency_penalty", 0}, {"presence_penalty", 0}, {"repetition_penalty", 1}, {"min_p", 0}};
    for (size_t i = 0; i < sizeof k_penalties / sizeof k_penalties[0]; i++)
        if ((v = json_object_get(req, k_penalties[i].key)) && is_set(v) &&
            !(json_is_number(v) && json_number_value(v) == k_penalties[i].neutral))
            return refuse(b, 400, "'%s' is not supported (only %g)", k_penalties[i].key,
                          k_penalties[i].neutral);
    if ((v = json_object_get(req, "functions")) && is_set(v) && json_array_size(v))
        return refuse(b, 400, "'functions' are not supported");
    if ((v = json_object_get(req, "tool_choice")) && is_set(v) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return refuse(b, 400, "'tool_choice' is not supported");
    if ((v = json_object_get(req, "function_call")) && is_set(v) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return refuse(b, 400, "'function_call' is not supported");
    if ((v = json_object_get(req, "response_format")) && is_set(v)) {
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!t || strcmp(t, "text"))
            return refuse(b, 400, "'response_format' other than text is not supported");
    }
    return 0;
}

static int get_number(json_t *req, const char *key, double lo, double hi, double *out, bad *b)
{
    json_t *v = json_object_get(req, key);
    if (!is_set(v))
        return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
        return refuse(b, 400, "'%s' must be a number in [%g, %g]", key, lo, hi);
    *out = json_number_value(v);
    return 0;
}

static int get_int(json_t *req, const char *key, long long lo, long long hi, long long *out, bad *b)
{
    json_t *v = json_object_get(req, key);
    if (!is_set(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return refuse(b, 400, "'%s' must be an integer in [%lld, %lld]", key, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

/* The sampling, limit and stop fields common to both endpoints. */
static int parse_common(memra_server *sv, json_t *req, job *j, bad *b)
{
    json_t *v = json_object_get(req, "model");
    if (is_set(v) && (!json_is_string(v) || strcmp(json_string_value(v), sv->model)))
        return refuse(b, 404, "model '%s' does not exist (this server has '%s')",
                      json_is_string(v) ? json_string_value(v) : "?", sv->model);
    if (refuse_unsupported(req, b))
        return -1;
    double temp = 1.0, top_p = 1.0;
    long long max_tokens = sv->o.default_max_tokens, top_k = 0, seed = -1;
    if (get_number(req, "temperature", 0, 2, &temp, b) ||
        get_number(req, "top_p", 0, 1, &top_p, b) ||
        get_int(req, "top_k", -1, 1LL << 30, &top_k, b) ||
        get_int(req, "seed", INT64_MIN, INT64_MAX, &seed, b) ||
        get_int(req, "max_tokens", 1, 1LL << 30, &max_tokens, b) ||
        (j->chat && get_int(req, "max_completion_tokens", 1, 1LL << 30, &max_tokens, b)))
        return -1;
    if (top_p <= 0)
        return refuse(b, 400, "'top_p' must be in (0, 1]");
    memra_sampling_init(&j->smp);
    j->smp.temperature = (float)temp;
    j->smp.top_p = (float)top_p;
    j->smp.top_k = (int32_t)top_k;
    j->seeded = is_set(json_object_get(req, "seed"));
    j->smp.seed = (uint64_t)seed;
    j->max_tokens = (uint32_t)max_tokens;
    v = json_object_get(req, "stream");
    if (is_set(v) && !json_is_boolean(v))
        return refuse(b, 400, "'stream' must be a boolean");
    j->stream = json_is_true(v);
    v = json_object_get(req, "stop");
    if (json_is_string(v) || json_is_array(v)) {
        const size_t n = json_is_string(v) ? 1 : json_array_size(v);
        if (n > MAX_STOP)
            return refuse(b, 400, "'stop' holds at most %d strings", MAX_STOP);
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(s) || !json_string_length(s))
                return refuse(b, 400, "'stop' entries must be non-empty strings");
            if (!(j->stop[j->n_stop++] = strdup(json_string_value(s))))
                return refuse(b, 500, "out of memory");
            if (json_string_length(s) > j->max_stop)
                j->max_stop = json_string_length(s);
        }
    } else if (is_set(v)) {
        return refuse(b, 400, "'stop' must be a string or an array of strings");
    }
    return 0;
}

/* The prompt's ids: a string (tokenized, special tokens parsed, BOS where the model asks)
 * or an array of token ids. */
static int tokenize_into(memra_server *sv, job *j, const char *text, size_t len, bad *b)
{
    const unsigned f = MEMRA_TEXT_ADD_SPECIAL | MEMRA_TEXT_PARSE_SPECIAL;
    size_t n = 0;
    int rc = memra_tokenize(sv->e, text, len, f, NULL, 0, &n);
    if (rc != MEMRA_OK && rc != MEMRA_ERR_CAPACITY)
        return refuse(b, 400, "tokenizing the prompt: %s", memra_last_error());
    if (!(j->prompt = malloc((n ? n : 1) * sizeof *j->prompt)))
        return refuse(b, 500, "out of memory");
    if (n && memra_tokenize(sv->e, text, len, f, j->prompt, n, &n) != MEMRA_OK)
        return refuse(b, 400, "tokenizing the prompt: %s", memra_last_error());
    j->n_prompt = n;
    return 0;
}

static int parse_prompt(memra_server *sv, json_t *req, job *j, bad *b)
{
    json_t *p = json_object_get(req, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p))
        return tokenize_into(sv, j, json_string_value(p), json_string_length(p), b);
    if (!json_is_array(p) || !json_array_size(p))
        return refuse(b, 400, "'prompt' must be a string or a non-empty array of token ids");
    if (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
        return refuse(b, 400, "'prompt' holds several prompts: send one request per prompt");
    j->n_prompt = json_array_size(p);
    if (!(j->prompt = malloc(j->n_prompt * sizeof *j->prompt)))
        return refuse(b, 500, "out of memory");
    for (size_t i = 0; i < j->n_prompt; i++) {
        json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= sv->info.n_vocab)
            return refuse(b, 400, "'prompt'[%zu] is not a token id in 0..%u", i,
                          sv->info.n_vocab - 1);
        j->prompt[i] = (int32_t)json_integer_value(t);
    }
    return 0;
}

static int parse_messages(memra_server *sv, json_t *req, job *j, bad *b)
{
    json_t *m = json_object_get(req, "messages");
    const size_t n = json_array_size(m);
    if (!json_is_array(m) || !n)
        return refuse(b, 400, "'messages' must be a non-empty array");
    memra_chat_message *msgs = calloc(n, sizeof *msgs);
    char **owned = calloc(n, sizeof *owned);
    int rc = 0;
    if (!msgs || !owned) {
        rc = refuse(b, 500, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *x = json_array_get(m, i), *c = json_object_get(x, "content");
        msgs[i].role = json_string_value(json_object_get(x, "role"));
        if (!msgs[i].role) {
            rc = refuse(b, 400, "messages[%zu] has no 'role'", i);
            break;
        }
        if (json_is_string(c)) {
            msgs[i].content = json_string_value(c);
        } else if (json_is_array(c)) { /* content parts: text only, concatenated */
            size_t len = 0;
            for (size_t k = 0; k < json_array_size(c); k++) {
                json_t *part = json_array_get(c, k);
                const char *type = json_string_value(json_object_get(part, "type"));
                if (!type || strcmp(type, "text") ||
                    !json_is_string(json_object_get(part, "text"))) {
                    rc = refuse(b, 400, "messages[%zu]: only text content parts are supported", i);
                    break;
                }
                len += json_string_length(json_object_get(part, "text"));
            }
            if (rc || !(owned[i] = malloc(len + 1))) {
                if (!rc)
                    rc = refuse(b, 500, "out of memory");
                break;
            }
            size_t at = 0;
            for (size_t k = 0; k < json_array_size(c); k++) {
                json_t *t = json_object_get(json_array_get(c, k), "text");
                memcpy(owned[i] + at, json_string_value(t), json_string_length(t));
                at += json_string_length(t);
            }
            owned[i][at] = '\0';
            msgs[i].content = owned[i];
        } else if (is_set(c)) {
            rc = refuse(b, 400, "messages[%zu].content must be a string or content parts", i);
            break;
        }
        msgs[i].reasoning_content = json_string_value(json_object_get(x, "reasoning_content"));
    }
    if (!rc) {
        int thinking = -1;
        json_t *kw = json_object_get(req, "chat_template_kwargs");
        json_t *et = json_object_get(kw, "enable_thinking");
        if (json_is_boolean(et))
            thinking = json_is_true(et);
        char *text = NULL;
        size_t len = 0;
        const int crc = memra_chat_apply(sv->e, msgs, n, 1, thinking, &text, &len);
        if (crc != MEMRA_OK)
            rc = refuse(b, 400, "chat template: %s", memra_last_error());
        else
            rc = tokenize_into(sv, j, text, len, b);
        memra_free(text);
    }
done:
    for (size_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

/* The finished (non-streaming) response. */
static json_t *completion_json(memra_server *sv, const job *j)
{
    json_t *choice =
        j->chat ? json_pack("{s:i, s:{s:s, s:s%}, s:s, s:n}", "index", 0, "message", "role",
                            "assistant", "content", j->text ? j->text : "", j->len, "finish_reason",
                            j->finish, "logprobs")
                : json_pack("{s:i, s:s%, s:s, s:n}", "index", 0, "text", j->text ? j->text : "",
                            j->len, "finish_reason", j->finish, "logprobs");
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:{s:I, s:I, s:I}}", "id", j->id, "object",
                     j->chat ? "chat.completion" : "text_completion", "created",
                     (json_int_t)j->created, "model", sv->model, "choices", choice, "usage",
                     "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                     (json_int_t)j->n_gen, "total_tokens", (json_int_t)(j->n_prompt + j->n_gen));
}

/* One server-sent event carrying text and / or a finish reason. */
static int sse_chunk(memra_server *sv, job *j, const char *text, size_t len, const char *finish)
{
    json_t *choice;
    if (j->chat) {
        json_t *delta = json_object();
        if (!j->sent_role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (len)
            json_object_set_new(delta, "content", json_stringn(text, len));
        j->sent_role = 1;
        choice = json_pack("{s:i, s:o, s:s?, s:n}", "index", 0, "delta", delta, "finish_reason",
                           finish, "logprobs");
    } else {
        choice = json_pack("{s:i, s:s%, s:s?, s:n}", "index", 0, "text", text, len, "finish_reason",
                           finish, "logprobs");
    }
    json_t *ev = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                           j->chat ? "chat.completion.chunk" : "text_completion", "created",
                           (json_int_t)j->created, "model", sv->model, "choices", choice);
    if (finish)
        json_object_set_new(ev, "usage",
                            json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)j->n_prompt,
                                      "completion_tokens", (json_int_t)j->n_gen, "total_tokens",
                                      (json_int_t)(j->n_prompt + j->n_gen)));
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!s)
        return -1;
    free(j->sse);
    const size_t n = strlen(s);
    j->sse = malloc(n + 16);
    if (j->sse) {
        j->sse_len = (size_t)snprintf(j->sse, n + 16, "data: %s\n\n", s);
        j->sse_off = 0;
    }
    free(s);
    return j->sse ? 0 : -1;
}

typedef struct stream_ctx {
    memra_server *sv;
    job *j;
} stream_ctx;

/* Bytes of the text a stream may send now: all once done; else up to where a stop string
 * could still begin, backed off to a UTF-8 character boundary. */
static size_t sendable(const job *j)
{
    if (j->done)
        return j->len;
    const size_t hold = j->max_stop ? j->max_stop - 1 : 0;
    size_t n = j->len > hold ? j->len - hold : 0;
    while (n > j->emitted && n < j->len && ((unsigned char)j->text[n] & 0xC0) == 0x80)
        n--;
    return n > j->emitted ? n : j->emitted;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *sc = cls;
    memra_server *sv = sc->sv;
    job *j = sc->j;
    pthread_mutex_lock(&sv->mu);
    ssize_t out = 0;
    for (;;) {
        if (j->sse && j->sse_off < j->sse_len) {
            const size_t n = j->sse_len - j->sse_off < max ? j->sse_len - j->sse_off : max;
            memcpy(buf, j->sse + j->sse_off, n);
            j->sse_off += n;
            j->last_sent = mono_s();
            out = (ssize_t)n;
            break;
        }
        if (j->sent_final) {
            out = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        const size_t ok = sendable(j);
        if (ok > j->emitted) {
            if (sse_chunk(sv, j, j->text + j->emitted, ok - j->emitted, NULL)) {
                out = MHD_CONTENT_READER_END_WITH_ERROR;
                break;
            }
            j->emitted = ok;
            continue;
        }
        if (j->done) {
            int rc;
            if (j->status != 200) {
                char *s = json_dumps(error_json((unsigned)j->status, j->err), JSON_COMPACT);
                free(j->sse);
                j->sse = NULL;
                if (s && (j->sse = malloc(strlen(s) + 32)))
                    j->sse_len = (size_t)sprintf(j->sse, "data: %s\n\ndata: [DONE]\n\n", s);
                j->sse_off = 0;
                free(s);
                rc = j->sse ? 0 : -1;
            } else {
                rc = sse_chunk(sv, j, "", 0, j->finish);
                if (!rc) {
                    char *t = realloc(j->sse, j->sse_len + 16);
                    if (t) {
                        j->sse = t;
                        memcpy(j->sse + j->sse_len, "data: [DONE]\n\n", 15);
                        j->sse_len += 14;
                    }
                    rc = t ? 0 : -1;
                }
            }
            j->sent_final = 1;
            if (rc) {
                out = MHD_CONTENT_READER_END_WITH_ERROR;
                break;
            }
            continue;
        }
        /* nothing new: wait, but send a comment every KEEPALIVE_S so that neither the
         * connection timeout nor a proxy ends a stream still queued or reading its prompt,
         * and a client that left is found (the write fails, MHD calls stream_free) */
        /* (other requests' progress wakes this wait too: the clock decides, not ETIMEDOUT) */
        if (mono_s() - j->last_sent >= KEEPALIVE_S) {
            static const char k_ka[] = ": keep-alive\n\n";
            if (max < sizeof k_ka - 1)
                continue;
            memcpy(buf, k_ka, sizeof k_ka - 1);
            j->last_sent = mono_s();
            out = (ssize_t)(sizeof k_ka - 1);
            break;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&sv->progress, &sv->mu, &until);
    }
    pthread_mutex_unlock(&sv->mu);
    return out;
}

static void stream_free(void *cls)
{
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->sv->mu);
    sc->j->cancelled = 1; /* a no-op once done */
    pthread_cond_signal(&sc->sv->work);
    job_release(sc->j);
    pthread_mutex_unlock(&sc->sv->mu);
    free(sc);
}

/* The client closed its end (a non-streaming request has nothing more to send, so a readable
 * socket with nothing to read is an EOF). */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0)
        return 0;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return 1;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static enum MHD_Result handle_generate(memra_server *sv, struct MHD_Connection *c, req_ctx *rq,
                                       int chat)
{
    json_error_t jerr;
    json_t *req = json_loadb(rq->body ? rq->body : "", rq->len, 0, &jerr);
    if (!json_is_object(req)) {
        json_decref(req);
        return send_error(c, 400, "the body is not a JSON object (%s at line %d)", jerr.text,
                          jerr.line);
    }
    job *j = calloc(1, sizeof *j);
    if (!j) {
        json_decref(req);
        return send_error(c, 500, "out of memory");
    }
    j->chat = chat;
    j->status = 200;
    j->refs = 1;
    bad b = {0};
    int rc = parse_common(sv, req, j, &b);
    if (!rc)
        rc = chat ? parse_messages(sv, req, j, &b) : parse_prompt(sv, req, j, &b);
    json_decref(req);
    if (!rc && j->n_prompt == 0)
        rc = refuse(&b, 400, "the prompt has no tokens");
    if (!rc && j->n_prompt >= sv->info.n_ctx)
        rc =
            refuse(&b, 400,
                   "the prompt has %zu tokens; this server's context holds %u, one of them for the "
                   "first generated token",
                   j->n_prompt, sv->info.n_ctx);
    pthread_mutex_lock(&sv->mu);
    if (!rc && sv->stopping)
        rc = refuse(&b, 503, "the server is shutting down");
    if (!rc && sv->n_queued >= sv->o.max_queue)
        rc = refuse(&b, 503, "%zu requests are already waiting for a slot", sv->n_queued);
    if (rc) {
        job_release(j);
        pthread_mutex_unlock(&sv->mu);
        return send_error(c, b.status, "%s", b.msg);
    }
    const uint64_t k = ++sv->seq;
    snprintf(j->id, sizeof j->id, "%s-%016" PRIx64, chat ? "chatcmpl" : "cmpl", k);
    j->created = (long long)time(NULL);
    j->last_sent = mono_s();
    if (!j->seeded) /* no seed given: one of its own per request */
        j->smp.seed = k * 0x9E3779B97F4A7C15ull ^ (uint64_t)j->created;
    j->refs = 2; /* this connection and the scheduler */
    if (sv->queue_tail)
        sv->queue_tail->next_job = j;
    else
        sv->queue_head = j;
    sv->queue_tail = j;
    sv->n_queued++;
    pthread_cond_signal(&sv->work);
    if (j->stream) {
        pthread_mutex_unlock(&sv->mu);
        stream_ctx *sc = malloc(sizeof *sc);
        struct MHD_Response *r = sc ? MHD_create_response_from_callback(
                                          MHD_SIZE_UNKNOWN, 16384, stream_reader, sc, stream_free)
                                    : NULL;
        if (!r) {
            pthread_mutex_lock(&sv->mu);
            j->cancelled = 1;
            job_release(j);
            pthread_mutex_unlock(&sv->mu);
            free(sc);
            return MHD_NO;
        }
        sc->sv = sv, sc->j = j;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        const enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    /* wait for the end, looking at the client about once a second (other requests' progress
     * wakes this wait too: the clock decides, not ETIMEDOUT) */
    double next_look = mono_s() + 1;
    while (!j->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&sv->progress, &sv->mu, &until);
        if (j->done || mono_s() < next_look)
            continue;
        next_look = mono_s() + 1;
        if (client_gone(c)) { /* nobody to answer: stop generating for it */
            j->cancelled = 1;
            pthread_cond_signal(&sv->work);
            job_release(j);
            pthread_mutex_unlock(&sv->mu);
            return MHD_NO;
        }
    }
    json_t *out =
        j->status == 200 ? completion_json(sv, j) : error_json((unsigned)j->status, j->err);
    const unsigned status = (unsigned)j->status;
    job_release(j);
    pthread_mutex_unlock(&sv->mu);
    return send_json(c, status, out);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    memra_server *sv = cls;
    req_ctx *rq = *con_cls;
    if (!rq) { /* first call: headers only */
        if (!(rq = calloc(1, sizeof *rq)))
            return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && rq->len + *upload_size > sv->o.max_body)
            rq->too_big = 1;
        if (!rq->too_big) {
            if (rq->len + *upload_size + 1 > rq->cap) {
                size_t cap = rq->cap ? rq->cap : 4096;
                while (cap < rq->len + *upload_size + 1)
                    cap *= 2;
                char *p = realloc(rq->body, cap);
                if (!p)
                    return MHD_NO;
                rq->body = p, rq->cap = cap;
            }
            memcpy(rq->body + rq->len, upload, *upload_size);
            rq->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return send_error(c, 413, "the body is over %zu bytes", sv->o.max_body);
    const int get = !strcmp(method, MHD_HTTP_METHOD_GET),
              post = !strcmp(method, MHD_HTTP_METHOD_POST);
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/models")) {
        if (!get)
            return send_error(c, 405, "%s takes GET", url);
        if (url[1] == 'h') {
            pthread_mutex_lock(&sv->mu);
            json_t *v = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "status",
                                  sv->stopping ? "stopping" : "ok", "active",
                                  (json_int_t)sv->n_active, "queued", (json_int_t)sv->n_queued,
                                  "ticks", (json_int_t)sv->n_ticks, "rows", (json_int_t)sv->n_rows,
                                  "max_rows_per_tick", (json_int_t)sv->max_rows, "tokens_generated",
                                  (json_int_t)sv->n_tokens, "last_tick_ms", sv->last_tick_ms);
            pthread_mutex_unlock(&sv->mu);
            return send_json(c, 200, v);
        }
        return send_json(c, 200,
                         json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data",
                                   "id", sv->model, "object", "model", "created", (json_int_t)0,
                                   "owned_by", "memra", "max_model_len", (int)sv->info.n_ctx));
    }
    const int chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!post)
            return send_error(c, 405, "%s takes POST", url);
        return handle_generate(sv, c, rq, chat);
    }
    return send_error(c, 404, "no route %s %s", method, url);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    req_ctx *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* ====================================== server ======================================= */

void memra_serve_opts_init(memra_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->max_queue = 256;
    o->max_body = 1u << 20;
    o->default_max_tokens = 256;
}

int memra_serve_start(memra_engine *e, const memra_serve_opts *o, memra_server **out, char *msg,
                      size_t msg_len)
{
    *out = NULL;
    if (!e || !o || !o->model_name || !*o->model_name || strlen(o->model_name) >= 256 ||
        !o->max_queue || !o->max_body || !o->default_max_tokens)
        return snprintf(msg, msg_len, "invalid server options (model name, limits)"),
               MEMRA_ERR_INVALID_ARG;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(o->port)};
    if (inet_pton(AF_INET, o->host ? o->host : "127.0.0.1", &addr.sin_addr) != 1)
        return snprintf(msg, msg_len, "'%s' is not an IPv4 address", o->host),
               MEMRA_ERR_INVALID_ARG;
    memra_server *sv = calloc(1, sizeof *sv);
    if (!sv)
        return snprintf(msg, msg_len, "out of memory"), MEMRA_ERR_NOMEM;
    sv->e = e;
    sv->o = *o;
    snprintf(sv->model, sizeof sv->model, "%s", o->model_name);
    memra_engine_get_info(e, &sv->info);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->work, NULL);
    pthread_cond_init(&sv->progress, NULL);
    sv->rows = calloc(sv->info.n_slots, sizeof *sv->rows);
    sv->row_job = calloc(sv->info.n_slots, sizeof *sv->row_job);
    if (!(sv->active = calloc(sv->info.n_slots, sizeof *sv->active)) || !sv->rows || !sv->row_job) {
        memra_serve_stop(sv);
        return snprintf(msg, msg_len, "out of memory"), MEMRA_ERR_NOMEM;
    }
    if (pthread_create(&sv->sched, NULL, scheduler, sv)) {
        memra_serve_stop(sv);
        return snprintf(msg, msg_len, "cannot start the scheduler thread"), MEMRA_ERR_NOMEM;
    }
    sv->sched_started = 1;
    sv->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                 MHD_USE_POLL | MHD_USE_ITC,
                             0, NULL, NULL, handler, sv, MHD_OPTION_SOCK_ADDR, &addr,
                             MHD_OPTION_NOTIFY_COMPLETED, request_done, sv,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (!sv->d) {
        const int err = errno;
        memra_serve_stop(sv);
        return snprintf(msg, msg_len, "cannot listen on %s:%u (%s)", o->host, (unsigned)o->port,
                        strerror(err)),
               MEMRA_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    sv->port = di ? di->port : o->port;
    *out = sv;
    return MEMRA_OK;
}

uint16_t memra_serve_port(const memra_server *s)
{
    return s ? s->port : 0;
}

void memra_serve_stop(memra_server *sv)
{
    if (!sv)
        return;
    pthread_mutex_lock(&sv->mu);
    sv->stopping = 1;
    pthread_cond_broadcast(&sv->work);
    pthread_mutex_unlock(&sv->mu);
    if (sv->d) { /* no new connections */
        const MHD_socket ls = MHD_quiesce_daemon(sv->d);
        if (ls != MHD_INVALID_SOCKET)
            close(ls);
    }
    if (sv->sched_started)
        pthread_join(sv->sched, NULL); /* fails what is left: waiting handlers wake */
    if (sv->d) {
        /* let the woken handlers send their 503s (and streams their last event) before the
         * connections are closed: up to 5 s, then whatever is still open is cut */
        for (int i = 0; i < 500; i++) {
            const union MHD_DaemonInfo *di =
                MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
            if (!di || di->num_connections == 0)
                break;
            struct timespec ms10 = {0, 10 * 1000 * 1000};
            nanosleep(&ms10, NULL);
        }
        MHD_stop_daemon(sv->d);
    }
    pthread_cond_destroy(&sv->work);
    pthread_cond_destroy(&sv->progress);
    pthread_mutex_destroy(&sv->mu);
    free(sv->active);
    free(sv->rows);
    free(sv->row_job);
    free(sv);
}
