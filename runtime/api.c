/*
 * api.c — the public C API of include/memra.h over the engine's parts: the GGUF reader, the
 * in-process planner, the tokenizer and chat formatting, and the CPU or CUDA backend.
 *
 * An engine is one backend (a vtable, `engine_ops`, so memra_step and the session calls are
 * written once), the mapped checkpoint it borrows, its tokenizer (optional: a checkpoint
 * whose tokenizer metadata memra refuses still runs by ids; the text calls then fail with
 * the open's message) and the plan directory it planned into, if it did.
 *
 * memra_step's row contract: every row is checked before any tick runs (session NULL or of
 * another engine, twice in one call, token outside the vocabulary, session full or failed);
 * a refused row gets its status and out_token -1 and the others run, so one bad request
 * never fails or corrupts another. The backends check the same things again and refuse a
 * whole tick on any of them, which therefore cannot happen here. Rows are cut into ticks of
 * at most the largest tier in the caller's order; since every op computes a row from that
 * row's inputs alone in a fixed order (DESIGN.md, the isolation contract), neither the cut
 * nor the tier changes a row's bits.
 *
 * Errors: each public call clears nothing on success and, on failure, stores its record
 * (code text + message) in a thread-local buffer that memra_last_error() returns.
 */
#include "memra.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_cpu.h"
#include "chat.h"
#include "err.h"
#include "gguf.h"
#include "planner.h"
#include "tokenizer.h"
#ifdef MEMRA_API_CUDA
#include "backend_cuda.h"
#include "cuda_util.h"
#endif

#ifndef MEMRA_VERSION_STRING
#define MEMRA_VERSION_STRING "0.0.0"
#endif

/* ====================================== errors ======================================= */

static _Thread_local char t_last_error[640];

/* Records err (code rc) as this thread's last error; returns rc. */
static int fail_with(int rc, const memra_err *err)
{
    if (rc == MEMRA_OK)
        return rc;
    snprintf(t_last_error, sizeof t_last_error, "%s: %s", memra_strerror(rc),
             err && err->code != MEMRA_OK && err->msg[0] ? err->msg : "(no detail)");
    return rc;
}

/* The same for an error raised here (printf-style message). */
static int api_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int api_fail(int code, const char *fmt, ...)
{
    memra_err e;
    memra_err_clear(&e);
    e.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return fail_with(code, &e);
}

const char *memra_last_error(void)
{
    return t_last_error;
}

const char *memra_version(void)
{
    return MEMRA_VERSION_STRING;
}

void memra_free(void *p)
{
    free(p);
}

/* ===================================== backends ====================================== */

/* What memra_step and the session calls need of a backend. */
typedef struct engine_ops {
    const char *name;
    int (*admit)(void *be, const memra_sample_params *p, uint32_t *id, memra_err *err);
    int (*retire)(void *be, uint32_t id, memra_err *err);
    int (*set_params)(void *be, uint32_t id, const memra_sample_params *p, memra_err *err);
    uint32_t (*pos)(const void *be, uint32_t id);
    int (*failed)(const void *be, uint32_t id);
    int (*step)(void *be, uint32_t n, const uint32_t *ids, const int32_t *tokens, int32_t *out,
                memra_err *err);
    int (*logits)(void *be, uint32_t row, float *dst, uint32_t n_vocab, memra_err *err);
    /* the last tick's device and host time where the backend measures them (tick_ms -1: not) */
    void (*timing)(const void *be, double *tick_ms, double *host_us);
    void (*close)(void *be);
} engine_ops;

static int cpu_admit(void *be, const memra_sample_params *p, uint32_t *id, memra_err *err)
{
    return memra_cpu_session_admit(be, p, id, err);
}
static int cpu_retire(void *be, uint32_t id, memra_err *err)
{
    return memra_cpu_session_retire(be, id, err);
}
static int cpu_set_params(void *be, uint32_t id, const memra_sample_params *p, memra_err *err)
{
    return memra_cpu_session_set_params(be, id, p, err);
}
static uint32_t cpu_pos(const void *be, uint32_t id)
{
    return memra_cpu_session_pos(be, id);
}
static int cpu_failed(const void *be, uint32_t id)
{
    (void)be, (void)id; /* the CPU backend checks a tick's inputs before it runs any of it */
    return 0;
}
static int cpu_step(void *be, uint32_t n, const uint32_t *ids, const int32_t *tokens, int32_t *out,
                    memra_err *err)
{
    const memra_cpu_step st = {.n_rows = n, .sessions = ids, .tokens = tokens, .out_tokens = out};
    return memra_cpu_backend_step(be, &st, err);
}
static int cpu_logits(void *be, uint32_t row, float *dst, uint32_t n_vocab, memra_err *err)
{
    const float *l = memra_cpu_backend_logits(be, row);
    if (!l)
        return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "no logits for row %u", row);
    memcpy(dst, l, (size_t)n_vocab * sizeof *dst);
    return MEMRA_OK;
}
static void cpu_close(void *be)
{
    memra_cpu_backend_close(be);
}

static void cpu_timing(const void *be, double *tick_ms, double *host_us)
{
    (void)be;
    *tick_ms = -1, *host_us = 0; /* memra_step times a CPU tick itself */
}

static const engine_ops k_cpu_ops = {.name = "cpu",
                                     .admit = cpu_admit,
                                     .retire = cpu_retire,
                                     .set_params = cpu_set_params,
                                     .pos = cpu_pos,
                                     .failed = cpu_failed,
                                     .step = cpu_step,
                                     .logits = cpu_logits,
                                     .timing = cpu_timing,
                                     .close = cpu_close};

#ifdef MEMRA_API_CUDA
static int cuda_admit(void *be, const memra_sample_params *p, uint32_t *id, memra_err *err)
{
    return memra_cuda_session_admit(be, p, id, err);
}
static int cuda_retire(void *be, uint32_t id, memra_err *err)
{
    return memra_cuda_session_retire(be, id, err);
}
static int cuda_set_params(void *be, uint32_t id, const memra_sample_params *p, memra_err *err)
{
    return memra_cuda_session_set_params(be, id, p, err);
}
static uint32_t cuda_pos(const void *be, uint32_t id)
{
    return memra_cuda_session_pos(be, id);
}
static int cuda_failed(const void *be, uint32_t id)
{
    return memra_cuda_session_failed(be, id);
}
static int cuda_step(void *be, uint32_t n, const uint32_t *ids, const int32_t *tokens, int32_t *out,
                     memra_err *err)
{
    const memra_cuda_step st = {.n_rows = n, .sessions = ids, .tokens = tokens, .out_tokens = out};
    return memra_cuda_backend_step(be, &st, err);
}
static int cuda_logits(void *be, uint32_t row, float *dst, uint32_t n_vocab, memra_err *err)
{
    (void)n_vocab;
    return memra_cuda_backend_logits(be, row, 1, dst, err);
}
static void cuda_close(void *be)
{
    memra_cuda_backend_close(be);
}

static void cuda_timing(const void *be, double *tick_ms, double *host_us)
{
    const memra_cuda_info *in = memra_cuda_backend_info(be);
    *tick_ms = in->last_tick_ms, *host_us = in->last_host_us;
}

static const engine_ops k_cuda_ops = {.name = "cuda",
                                      .admit = cuda_admit,
                                      .retire = cuda_retire,
                                      .set_params = cuda_set_params,
                                      .pos = cuda_pos,
                                      .failed = cuda_failed,
                                      .step = cuda_step,
                                      .logits = cuda_logits,
                                      .timing = cuda_timing,
                                      .close = cuda_close};

/* GPU 0 opens (the probe the GPU tests use too). */
static int cuda_present(void)
{
    int sm = 0;
    if (memra_cu_device_open(0, &sm, NULL) != MEMRA_OK)
        return 0;
    memra_cu_device_close(0);
    return 1;
}
#endif

/* ====================================== engine ======================================= */

struct memra_session {
    memra_engine *e;
    uint32_t id;    /* the backend's session id */
    uint64_t stamp; /* the memra_step call that last listed it (duplicate check) */
    memra_session *prev, *next; /* the engine's open sessions */
};

struct memra_engine {
    const engine_ops *ops;
    void *be;
    memra_gguf *g;
    memra_tokenizer *tok; /* NULL: tok_err says why */
    memra_err tok_err;
    memra_chat_kind chat; /* MEMRA_CHAT_NONE: chat_rc / chat_err say why */
    int chat_rc;
    memra_err chat_err;
    memra_engine_info info;
    char tmp_plans[512]; /* in-process plans, removed at close; "" when none */
    uint64_t stamp;
    memra_engine_stats stats;
    memra_session *sessions; /* open sessions (list head) */
    /* one tick's rows, in backend form (max_rows each) */
    uint32_t *t_ids;
    int32_t *t_tokens, *t_out;
    size_t *t_row; /* the caller's row index of tick row r */
};

void memra_engine_config_init(memra_engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->backend = MEMRA_BACKEND_AUTO;
    c->n_slots = 16;
    c->n_ctx = 4096;
}

static int check_config(const memra_engine_config *c, memra_err *err)
{
    if (!c || !c->model_path)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "config and config->model_path are required");
    if (c->backend < MEMRA_BACKEND_AUTO || c->backend > MEMRA_BACKEND_CUDA)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "backend %d is not a MEMRA_BACKEND_*",
                          c->backend);
    if (c->n_slots == 0 || c->n_ctx == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_slots and n_ctx must be positive");
    if (c->n_tiers > MEMRA_PLAN_MAX_TIERS)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "n_tiers %u > %d", c->n_tiers,
                          MEMRA_PLAN_MAX_TIERS);
    if (c->plan_dir && c->n_tiers)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "tiers apply to in-process planning only (plan_dir is set)");
    return MEMRA_OK;
}

/* Plans c->model_path into a fresh temporary directory (e->tmp_plans). */
static int plan_in_process(memra_engine *e, const memra_engine_config *c, memra_err *err)
{
    const char *tmpdir = getenv("TMPDIR");
    snprintf(e->tmp_plans, sizeof e->tmp_plans, "%s/memra-plans-XXXXXX",
             tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(e->tmp_plans)) {
        const int rc =
            MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: cannot create a plan directory", e->tmp_plans);
        e->tmp_plans[0] = '\0';
        return rc;
    }
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = c->model_path;
    po.out_dir = e->tmp_plans;
    if (c->n_tiers) {
        po.n_tiers = c->n_tiers;
        memcpy(po.tiers, c->tiers, sizeof po.tiers);
    }
    memra_planner_result *res = NULL;
    const int rc = memra_planner_run(&po, &res, err);
    memra_planner_result_free(res);
    return rc;
}

static int open_backend(memra_engine *e, const memra_engine_config *c, const char *dir, int kind,
                        memra_err *err)
{
    const memra_plan_manifest *m = NULL;
    if (kind == MEMRA_BACKEND_CPU) {
        memra_cpu_opts o;
        memra_cpu_opts_init(&o);
        o.n_slots = c->n_slots;
        o.n_ctx = c->n_ctx;
        memra_cpu_backend *be = NULL;
        const int rc = memra_cpu_backend_open(dir, e->g, &o, &be, err);
        if (rc != MEMRA_OK)
            return rc;
        e->be = be, e->ops = &k_cpu_ops;
        m = memra_cpu_backend_manifest(be);
        e->info.n_vocab = memra_cpu_backend_n_vocab(be);
        snprintf(e->info.device, sizeof e->info.device, "cpu");
    } else {
#ifdef MEMRA_API_CUDA
        memra_cuda_opts o;
        memra_cuda_opts_init(&o);
        o.n_slots = c->n_slots;
        o.n_ctx = c->n_ctx;
        o.graphs = !c->no_graph;
        memra_cuda_backend *be = NULL;
        const int rc = memra_cuda_backend_open(dir, e->g, &o, &be, err);
        if (rc != MEMRA_OK)
            return rc;
        e->be = be, e->ops = &k_cuda_ops;
        m = memra_cuda_backend_manifest(be);
        e->info.n_vocab = memra_cuda_backend_n_vocab(be);
        snprintf(e->info.device, sizeof e->info.device, "%s",
                 memra_cuda_backend_info(be)->device_name);
#else
        (void)c, (void)dir;
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "this build has no CUDA backend");
#endif
    }
    snprintf(e->info.backend, sizeof e->info.backend, "%s", e->ops->name);
    snprintf(e->info.arch, sizeof e->info.arch, "%s", m->arch);
    e->info.n_layer = m->n_layer;
    e->info.n_embd = m->n_embd;
    e->info.n_tiers = m->n_tiers;
    memcpy(e->info.tiers, m->tiers, sizeof e->info.tiers);
    e->info.max_rows = m->n_tiers ? m->tiers[m->n_tiers - 1] : 0;
    if (e->info.max_rows == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: the plans have no batch tier", dir);
    return MEMRA_OK;
}

int memra_engine_open(const memra_engine_config *c, memra_engine **out)
{
    memra_err err;
    memra_err_clear(&err);
    if (!out)
        return api_fail(MEMRA_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int rc = check_config(c, &err);
    if (rc != MEMRA_OK)
        return fail_with(rc, &err);
    int kind = c->backend;
#ifdef MEMRA_API_CUDA
    if (kind == MEMRA_BACKEND_AUTO)
        kind = cuda_present() ? MEMRA_BACKEND_CUDA : MEMRA_BACKEND_CPU;
#else
    if (kind == MEMRA_BACKEND_AUTO)
        kind = MEMRA_BACKEND_CPU;
#endif
    memra_engine *e = calloc(1, sizeof *e);
    if (!e)
        return api_fail(MEMRA_ERR_NOMEM, "engine");
    MEMRA_TRY(memra_gguf_open(c->model_path, &e->g, &err));
    if (!c->plan_dir)
        MEMRA_TRY(plan_in_process(e, c, &err));
    MEMRA_TRY(open_backend(e, c, c->plan_dir ? c->plan_dir : e->tmp_plans, kind, &err));
    e->info.n_ctx = c->n_ctx;
    e->info.n_slots = c->n_slots;
    e->info.bos = e->info.eos = -1;
    memra_err_clear(&e->tok_err);
    if (memra_tokenizer_open_gguf(e->g, &e->tok, &e->tok_err) == MEMRA_OK) {
        e->info.has_tokenizer = 1;
        e->info.bos = memra_tokenizer_bos(e->tok);
        e->info.eos = memra_tokenizer_eos(e->tok);
        const memra_tok_str t = memra_tokenizer_chat_template(e->tok);
        memra_err_clear(&e->chat_err);
        e->chat_rc = memra_chat_detect(t.ptr, t.len, &e->chat, &e->chat_err);
        e->info.has_chat_template = e->chat_rc == MEMRA_OK;
    } else {
        e->tok = NULL;
        memra_log(MEMRA_LOG_WARN, "%s: no tokenizer (%s); the engine runs by token ids",
                  c->model_path, e->tok_err.msg);
    }
    const size_t mr = e->info.max_rows;
    e->t_ids = malloc(mr * sizeof *e->t_ids);
    e->t_tokens = malloc(mr * sizeof *e->t_tokens);
    e->t_out = malloc(mr * sizeof *e->t_out);
    e->t_row = malloc(mr * sizeof *e->t_row);
    if (!e->t_ids || !e->t_tokens || !e->t_out || !e->t_row) {
        rc = MEMRA_FAIL(&err, MEMRA_ERR_NOMEM, "tick rows");
        goto fail;
    }
    *out = e;
    return MEMRA_OK;
fail:
    memra_engine_close(e);
    return fail_with(rc, &err);
}

void memra_engine_close(memra_engine *e)
{
    if (!e)
        return;
    while (e->sessions)
        memra_session_close(e->sessions);
    if (e->be)
        e->ops->close(e->be);
    memra_tokenizer_close(e->tok);
    memra_gguf_close(e->g);
    if (e->tmp_plans[0])
        memra_planner_remove_dir(e->tmp_plans);
    free(e->t_ids);
    free(e->t_tokens);
    free(e->t_out);
    free(e->t_row);
    free(e);
}

int memra_engine_get_info(const memra_engine *e, memra_engine_info *out)
{
    if (!e || !out)
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine and out are required");
    *out = e->info;
    return MEMRA_OK;
}

int memra_engine_get_stats(const memra_engine *e, memra_engine_stats *out)
{
    if (!e || !out)
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine and out are required");
    *out = e->stats;
    return MEMRA_OK;
}

/* ======================================= text ======================================== */

static int need_tok(const memra_engine *e)
{
    if (!e)
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine is NULL");
    if (!e->tok)
        return fail_with(MEMRA_ERR_TOKENIZER, &e->tok_err);
    return MEMRA_OK;
}

int memra_tokenize(const memra_engine *e, const char *text, size_t len, unsigned flags,
                   int32_t *ids, size_t cap, size_t *n_ids)
{
    int rc = need_tok(e);
    if (rc != MEMRA_OK)
        return rc;
    if ((!text && len) || !n_ids || (!ids && cap))
        return api_fail(MEMRA_ERR_INVALID_ARG, "text (len %zu), ids (cap %zu), n_ids", len, cap);
    if (flags & ~(unsigned)(MEMRA_TEXT_ADD_SPECIAL | MEMRA_TEXT_PARSE_SPECIAL))
        return api_fail(MEMRA_ERR_INVALID_ARG, "tokenize flags 0x%x", flags);
    const unsigned tf = (flags & MEMRA_TEXT_ADD_SPECIAL ? MEMRA_TOKENIZE_ADD_SPECIAL : 0) |
                        (flags & MEMRA_TEXT_PARSE_SPECIAL ? MEMRA_TOKENIZE_PARSE_SPECIAL : 0);
    memra_token_buf b = {0};
    memra_err err;
    memra_err_clear(&err);
    rc = memra_tokenizer_encode(e->tok, text ? text : "", len, tf, &b, &err);
    if (rc == MEMRA_OK) {
        *n_ids = b.n;
        if (b.n > cap)
            rc = MEMRA_FAIL(&err, MEMRA_ERR_CAPACITY, "%zu ids do not fit %zu", b.n, cap);
        else if (b.n)
            memcpy(ids, b.ids, b.n * sizeof *ids);
    }
    memra_token_buf_free(&b);
    return fail_with(rc, &err);
}

static unsigned detok_flags(unsigned flags)
{
    return flags & MEMRA_TEXT_RENDER_SPECIAL ? MEMRA_DETOK_RENDER_SPECIAL : 0;
}

int memra_detokenize(const memra_engine *e, const int32_t *ids, size_t n, unsigned flags,
                     char **text, size_t *len)
{
    int rc = need_tok(e);
    if (rc != MEMRA_OK)
        return rc;
    if ((!ids && n) || !text)
        return api_fail(MEMRA_ERR_INVALID_ARG, "ids (n %zu) and text are required", n);
    *text = NULL;
    memra_err err;
    memra_err_clear(&err);
    char *raw = NULL;
    size_t raw_len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= e->info.n_vocab)
            return api_fail(MEMRA_ERR_INVALID_ARG, "id %d at %zu is outside the vocabulary (0..%u)",
                            ids[i], i, e->info.n_vocab - 1);
    rc = memra_tokenizer_decode(e->tok, ids, n, detok_flags(flags), &raw, &raw_len, &err);
    size_t out_len = 0;
    if (rc == MEMRA_OK)
        rc = memra_utf8_sanitize(raw ? raw : "", raw_len, text, &out_len, &err);
    free(raw);
    if (rc == MEMRA_OK && len)
        *len = out_len;
    return fail_with(rc, &err);
}

int memra_token_is_eog(const memra_engine *e, int32_t id)
{
    return e && e->tok && memra_tokenizer_is_eog(e->tok, id);
}

struct memra_text_stream {
    memra_detok *d;
};

int memra_text_stream_open(const memra_engine *e, unsigned flags, memra_text_stream **out)
{
    int rc = need_tok(e);
    if (rc != MEMRA_OK)
        return rc;
    if (!out)
        return api_fail(MEMRA_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    memra_text_stream *s = calloc(1, sizeof *s);
    if (!s)
        return api_fail(MEMRA_ERR_NOMEM, "text stream");
    memra_err err;
    memra_err_clear(&err);
    rc = memra_detok_open(e->tok, detok_flags(flags), &s->d, &err);
    if (rc != MEMRA_OK) {
        free(s);
        return fail_with(rc, &err);
    }
    *out = s;
    return MEMRA_OK;
}

int memra_text_stream_push(memra_text_stream *s, int32_t id, const char **text, size_t *len)
{
    if (!s || !text || !len)
        return api_fail(MEMRA_ERR_INVALID_ARG, "stream, text and len are required");
    memra_err err;
    memra_err_clear(&err);
    return fail_with(memra_detok_push(s->d, id, text, len, &err), &err);
}

int memra_text_stream_flush(memra_text_stream *s, const char **text, size_t *len)
{
    if (!s || !text || !len)
        return api_fail(MEMRA_ERR_INVALID_ARG, "stream, text and len are required");
    memra_err err;
    memra_err_clear(&err);
    return fail_with(memra_detok_flush(s->d, text, len, &err), &err);
}

void memra_text_stream_close(memra_text_stream *s)
{
    if (s) {
        memra_detok_close(s->d);
        free(s);
    }
}

int memra_chat_apply(const memra_engine *e, const memra_chat_message *msgs, size_t n,
                     int add_generation_prompt, int enable_thinking, char **text, size_t *len)
{
    int rc = need_tok(e);
    if (rc != MEMRA_OK)
        return rc;
    if ((!msgs && n) || !text)
        return api_fail(MEMRA_ERR_INVALID_ARG, "msgs (n %zu) and text are required", n);
    *text = NULL;
    if (e->chat == MEMRA_CHAT_NONE)
        return fail_with(e->chat_rc, &e->chat_err);
    if (enable_thinking < -1 || enable_thinking > 1)
        return api_fail(MEMRA_ERR_INVALID_ARG, "enable_thinking %d is not -1, 0 or 1",
                        enable_thinking);
    memra_chat_msg *m = calloc(n ? n : 1, sizeof *m);
    if (!m)
        return api_fail(MEMRA_ERR_NOMEM, "chat messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) {
            free(m);
            return api_fail(MEMRA_ERR_INVALID_ARG, "message %zu has no role", i);
        }
        m[i] = (memra_chat_msg){msgs[i].role, msgs[i].content, msgs[i].reasoning_content};
    }
    memra_chat_opts o;
    memra_chat_opts_init(&o);
    o.add_generation_prompt = add_generation_prompt != 0;
    o.enable_thinking = enable_thinking;
    memra_err err;
    memra_err_clear(&err);
    size_t out_len = 0;
    rc = memra_chat_format(e->chat, m, n, &o, text, &out_len, &err);
    free(m);
    if (rc == MEMRA_OK && len)
        *len = out_len;
    return fail_with(rc, &err);
}

/* ===================================== sessions ====================================== */

void memra_sampling_init(memra_sampling *s)
{
    memset(s, 0, sizeof *s);
}

static memra_sample_params to_params(const memra_sampling *s)
{
    memra_sample_params p;
    memset(&p, 0, sizeof p);
    if (s) {
        p.temperature = s->temperature;
        p.top_k = s->top_k;
        p.top_p = s->top_p;
        p.seed = s->seed;
    }
    return p;
}

static int check_sampling(const memra_sampling *s)
{
    if (s && (s->temperature != s->temperature || s->top_p != s->top_p))
        return api_fail(MEMRA_ERR_INVALID_ARG, "sampling temperature / top_p is NaN");
    return MEMRA_OK;
}

int memra_session_open(memra_engine *e, const memra_sampling *sampling, memra_session **out)
{
    if (!e || !out)
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine and out are required");
    *out = NULL;
    int rc = check_sampling(sampling);
    if (rc != MEMRA_OK)
        return rc;
    memra_session *s = calloc(1, sizeof *s);
    if (!s)
        return api_fail(MEMRA_ERR_NOMEM, "session");
    const memra_sample_params p = to_params(sampling);
    memra_err err;
    memra_err_clear(&err);
    rc = e->ops->admit(e->be, &p, &s->id, &err);
    if (rc != MEMRA_OK) {
        free(s);
        return fail_with(rc, &err);
    }
    s->e = e;
    s->next = e->sessions;
    if (e->sessions)
        e->sessions->prev = s;
    e->sessions = s;
    *out = s;
    return MEMRA_OK;
}

void memra_session_close(memra_session *s)
{
    if (!s)
        return;
    memra_engine *e = s->e;
    memra_err err;
    memra_err_clear(&err);
    if (e->ops->retire(e->be, s->id, &err) != MEMRA_OK)
        memra_log(MEMRA_LOG_WARN, "session %u: retire: %s", s->id, err.msg);
    if (s->prev)
        s->prev->next = s->next;
    else
        e->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    free(s);
}

int memra_session_set_sampling(memra_session *s, const memra_sampling *sampling)
{
    if (!s)
        return api_fail(MEMRA_ERR_INVALID_ARG, "session is NULL");
    int rc = check_sampling(sampling);
    if (rc != MEMRA_OK)
        return rc;
    const memra_sample_params p = to_params(sampling);
    memra_err err;
    memra_err_clear(&err);
    rc = s->e->ops->set_params(s->e->be, s->id, &p, &err);
    return fail_with(rc, &err);
}

uint32_t memra_session_pos(const memra_session *s)
{
    return s ? s->e->ops->pos(s->e->be, s->id) : 0;
}

int memra_session_failed(const memra_session *s)
{
    return s ? s->e->ops->failed(s->e->be, s->id) : 0;
}

/* ======================================= ticks ======================================= */

/* The row's own refusal, or MEMRA_OK; marks the session as listed in this call. */
static int check_row(memra_engine *e, memra_row *r, size_t i)
{
    memra_session *s = r->session;
    if (!s || s->e != e)
        return api_fail(MEMRA_ERR_INVALID_ARG, "row %zu: %s", i,
                        s ? "the session belongs to another engine" : "no session");
    if (s->stamp == e->stamp)
        return api_fail(MEMRA_ERR_INVALID_ARG, "row %zu: the session is already in this step", i);
    s->stamp = e->stamp;
    if (r->token < 0 || (uint32_t)r->token >= e->info.n_vocab)
        return api_fail(MEMRA_ERR_INVALID_ARG,
                        "row %zu: token %d is outside the vocabulary (0..%u)", i, r->token,
                        e->info.n_vocab - 1);
    if (e->ops->failed(e->be, s->id))
        return api_fail(MEMRA_ERR_CUDA, "row %zu: the session was in a failed tick; close it", i);
    if (e->ops->pos(e->be, s->id) >= e->info.n_ctx)
        return api_fail(MEMRA_ERR_CAPACITY, "row %zu: the session is full (n_ctx = %u)", i,
                        e->info.n_ctx);
    return MEMRA_OK;
}

/* One tick over the first n gathered rows; fills their out_token / logits / status. */
static int run_tick(memra_engine *e, memra_row *rows, uint32_t n)
{
    memra_err err;
    memra_err_clear(&err);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int rc = e->ops->step(e->be, n, e->t_ids, e->t_tokens, e->t_out, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == MEMRA_OK) {
        double ms, us;
        e->ops->timing(e->be, &ms, &us);
        e->stats.ticks++;
        e->stats.rows += n;
        e->stats.last_tick_ms = ms >= 0 ? ms
                                        : (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                                              (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        e->stats.last_host_us = us;
    }
    int first = rc;
    for (uint32_t r = 0; r < n; r++) {
        memra_row *row = &rows[e->t_row[r]];
        row->out_token = rc == MEMRA_OK ? e->t_out[r] : -1;
        row->status = rc;
        if (rc == MEMRA_OK && row->logits) {
            /* the session advanced whatever happens here: out_token stays valid */
            memra_err lerr;
            memra_err_clear(&lerr);
            row->status = e->ops->logits(e->be, r, row->logits, e->info.n_vocab, &lerr);
            if (row->status != MEMRA_OK && first == MEMRA_OK) {
                first = row->status;
                err = lerr;
            }
        }
    }
    return fail_with(first, &err);
}

int memra_step(memra_engine *e, memra_row *rows, size_t n)
{
    if (!e || !rows || n == 0)
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine, rows and n > 0 are required");
    e->stamp++;
    /* every refusal first, so a refused row never follows a tick that ran */
    char saved[sizeof t_last_error];
    int any_refused = 0;
    for (size_t i = 0; i < n; i++) {
        rows[i].out_token = -1;
        rows[i].status = check_row(e, &rows[i], i);
        if (rows[i].status != MEMRA_OK && !any_refused) {
            any_refused = 1;
            memcpy(saved, t_last_error, sizeof saved);
        }
    }
    int first = MEMRA_OK;
    char first_msg[sizeof t_last_error];
    uint32_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        if (k == e->info.max_rows || (i == n && k > 0)) {
            const int rc = run_tick(e, rows, k);
            if (rc != MEMRA_OK && first == MEMRA_OK) {
                first = rc;
                memcpy(first_msg, t_last_error, sizeof first_msg);
            }
            k = 0;
        }
        if (i == n || rows[i].status != MEMRA_OK)
            continue;
        e->t_ids[k] = rows[i].session->id;
        e->t_tokens[k] = rows[i].token;
        e->t_row[k++] = i;
    }
    if (first == MEMRA_OK && any_refused) /* the last error names the first refused row */
        memcpy(t_last_error, saved, sizeof saved);
    else if (first != MEMRA_OK) /* ... or the first failing tick */
        memcpy(t_last_error, first_msg, sizeof first_msg);
    return first;
}

int memra_session_feed(memra_engine *e, memra_session *s, const int32_t *ids, size_t n,
                       int32_t *next)
{
    if (!e || !s || (!ids && n))
        return api_fail(MEMRA_ERR_INVALID_ARG, "engine, session and ids are required");
    if (s->e != e)
        return api_fail(MEMRA_ERR_INVALID_ARG, "the session belongs to another engine");
    const uint32_t pos = e->ops->pos(e->be, s->id);
    if (n > e->info.n_ctx - pos)
        return api_fail(MEMRA_ERR_CAPACITY,
                        "%zu tokens do not fit the session (%u of n_ctx %u left)", n,
                        e->info.n_ctx - pos, e->info.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= e->info.n_vocab)
            return api_fail(MEMRA_ERR_INVALID_ARG, "id %d at %zu is outside the vocabulary (0..%u)",
                            ids[i], i, e->info.n_vocab - 1);
    if (next)
        *next = -1;
    for (size_t i = 0; i < n; i++) {
        memra_row row = {.session = s, .token = ids[i]};
        const int rc = memra_step(e, &row, 1);
        if (rc != MEMRA_OK)
            return rc;
        if (row.status != MEMRA_OK)
            return row.status; /* its text is this thread's last error */
        if (next && i + 1 == n)
            *next = row.out_token;
    }
    return MEMRA_OK;
}
