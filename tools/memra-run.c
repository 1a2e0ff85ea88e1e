/*
 * memra-run — greedy generation from a GGUF checkpoint, for people and scripts.
 *
 *   memra-run --backend ref -m MODEL --tokens 1,2,3 [-n 32] [--threads N] [--ctx N]
 *             [--logits-hash]
 *   memra-run --backend cpu -m MODEL --tokens 1,2,3 [--plans DIR] ...   (plans executed by the
 *             CPU backend; without --plans they are generated in-process into a temporary
 *             directory, tier 1 only, and removed afterwards)
 *   memra-run --backend cuda -m MODEL --tokens 1,2,3 [--plans DIR] [--no-graph] ...   (the same
 *             plans on GPU 0, one CUDA graph replay per tick; --no-graph launches op by op;
 *             stderr adds the device time per tick, median and p99, from CUDA events)
 *
 *   memra-run ... -m MODEL -p TEXT [--chat]   (the prompt as text, tokenized with the model's own
 *             tokenizer; --chat wraps it as one user turn in the model's chat template)
 *
 * stdout (machine-readable, one "key: value" per line):
 *   prompt: 1,2,3
 *   ids: <n generated ids, comma-separated>
 *   logits_xxh64: <16 hex digits>      (with --logits-hash: xxHash64 of the f32 logits bytes
 *                                       of the last forward, the step that chose the last id)
 *   text: "<generated text>"           (with -p: the ids through the streaming detokenizer up
 *                                       to the first end-of-generation id, JSON-escaped)
 * stderr: the effective configuration and timing (load, prompt and generation ms/token,
 * tokens/s). Errors: one line on stderr, exit status 1.
 *
 * Structure, so new inputs and backends are small edits: every option is one row of
 * k_options (with its handler), everything parsed lands in `run_opts`, and a backend is one row
 * of k_backends (a `generate` function from run_opts to run_result). `-p TEXT` / `--chat` are
 * a row + a tokenizer step filling opts.tokens; `--backend cpu|cuda` a row in k_backends.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "backend_cpu.h"
#include "chat.h"
#include "gguf.h"
#include "planner.h"
#include "refmodel.h"
#include "tokenizer.h"
#ifdef MEMRA_RUN_CUDA
#include "backend_cuda.h"
#endif

/* ======================================================================================== */
/* Options                                                                                  */
/* ======================================================================================== */

typedef struct run_opts {
    const char *backend;  /* --backend (default "ref") */
    const char *model;    /* -m, required */
    int32_t *tokens;      /* --tokens: the prompt ids [n_tokens] (owned) */
    int n_tokens;
    int n_gen;            /* -n: ids to generate (default 32) */
    int n_threads;        /* --threads (default 1) */
    uint32_t n_ctx;       /* --ctx: sequence capacity (default n_tokens + n_gen) */
    int logits_hash;      /* --logits-hash */
    const char *prompt;   /* -p: prompt text, tokenized into tokens */
    int chat;             /* --chat: -p is a user turn of the model's chat template */
    const char *plans;    /* --plans: plan directory for --backend cpu (default: generate) */
    int no_graph;         /* --no-graph: --backend cuda launches op by op, no CUDA graph */
    int help;
} run_opts;

typedef struct run_option {
    const char *lng, *shrt; /* "--model", "-m" (shrt NULL when none) */
    const char *arg;        /* value placeholder for --help; NULL = a flag without value */
    const char *help;
    /* Returns 0, or -1 with a message in msg. */
    int (*set)(run_opts *o, const char *arg, char *msg, size_t n);
} run_option;

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int set_backend(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)msg, (void)n;
    o->backend = a;
    return 0;
}

static int set_model(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)msg, (void)n;
    o->model = a;
    return 0;
}

static int set_tokens(run_opts *o, const char *a, char *msg, size_t n)
{
    size_t cap = 1;
    for (const char *p = a; *p; p++)
        cap += *p == ',';
    free(o->tokens);
    o->tokens = malloc(cap * sizeof *o->tokens);
    o->n_tokens = 0;
    if (!o->tokens)
        return snprintf(msg, n, "out of memory"), -1;
    const char *p = a;
    for (;;) {
        char item[32];
        size_t len = strcspn(p, ",");
        long v;
        if (len == 0 || len >= sizeof item)
            return snprintf(msg, n, "--tokens: bad list '%s' (want ids like 1,2,3)", a), -1;
        memcpy(item, p, len);
        item[len] = 0;
        if (parse_int(item, 0, INT32_MAX, &v))
            return snprintf(msg, n, "--tokens: '%s' is not a token id", item), -1;
        o->tokens[o->n_tokens++] = (int32_t)v;
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

static int set_n_gen(run_opts *o, const char *a, char *msg, size_t n)
{
    long v;
    if (parse_int(a, 1, 1000000, &v))
        return snprintf(msg, n, "-n: '%s' is not a count in 1..1000000", a), -1;
    o->n_gen = (int)v;
    return 0;
}

static int set_threads(run_opts *o, const char *a, char *msg, size_t n)
{
    long v;
    if (parse_int(a, 1, 64, &v))
        return snprintf(msg, n, "--threads: '%s' is not in 1..64", a), -1;
    o->n_threads = (int)v;
    return 0;
}

static int set_ctx(run_opts *o, const char *a, char *msg, size_t n)
{
    long v;
    if (parse_int(a, 1, 1L << 24, &v))
        return snprintf(msg, n, "--ctx: '%s' is not in 1..16777216", a), -1;
    o->n_ctx = (uint32_t)v;
    return 0;
}

static int set_logits_hash(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)a, (void)msg, (void)n;
    o->logits_hash = 1;
    return 0;
}

static int set_plans(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)msg, (void)n;
    o->plans = a;
    return 0;
}

static int set_no_graph(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)a, (void)msg, (void)n;
    o->no_graph = 1;
    return 0;
}

static int set_prompt(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)msg, (void)n;
    o->prompt = a;
    return 0;
}

static int set_chat(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)a, (void)msg, (void)n;
    o->chat = 1;
    return 0;
}

static int set_help(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)a, (void)msg, (void)n;
    o->help = 1;
    return 0;
}

static const run_option k_options[] = {
    {"--backend", NULL, "NAME", "compute backend: ref (CPU reference, default), cpu or cuda",
     set_backend},
    {"--model", "-m", "FILE", "GGUF checkpoint (qwen35, qwen35moe)", set_model},
    {"--tokens", NULL, "IDS", "prompt token ids, comma-separated", set_tokens},
    {"--prompt", "-p", "TEXT", "prompt text (the model's tokenizer; special tokens parsed)",
     set_prompt},
    {"--chat", NULL, NULL, "-p is one user turn of the model's chat template", set_chat},
    {"--n-gen", "-n", "N", "ids to generate greedily (default 32)", set_n_gen},
    {"--threads", NULL, "N", "threads per mat-vec (default 1; results do not depend on it)",
     set_threads},
    {"--ctx", NULL, "N", "sequence capacity (default: prompt + n)", set_ctx},
    {"--logits-hash", NULL, NULL, "print xxHash64 of the last step's logits", set_logits_hash},
    {"--plans", NULL, "DIR",
     "plan directory for --backend cpu, cuda (default: generate in-process)", set_plans},
    {"--no-graph", NULL, NULL, "cuda: launch op by op instead of replaying a CUDA graph",
     set_no_graph},
    {"--help", "-h", NULL, "this text", set_help},
};
#define N_OPTIONS (sizeof k_options / sizeof k_options[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-run --backend ref -m MODEL --tokens 1,2,3 [-n 32] [options]\n");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const run_option *o = &k_options[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", o->shrt ? o->shrt : "", o->shrt ? ", " : "",
                 o->lng, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-20s %s\n", left, o->help);
    }
}

/* Fills o from argv. Returns 0, or -1 with a one-line reason in msg. */
static int parse_args(int argc, char **argv, run_opts *o, char *msg, size_t n)
{
    *o = (run_opts){.backend = "ref", .n_gen = 32, .n_threads = 1};
    for (int i = 1; i < argc; i++) {
        const run_option *opt = NULL;
        for (size_t k = 0; k < N_OPTIONS && !opt; k++)
            if (!strcmp(argv[i], k_options[k].lng) ||
                (k_options[k].shrt && !strcmp(argv[i], k_options[k].shrt)))
                opt = &k_options[k];
        if (!opt)
            return snprintf(msg, n, "unknown option '%s' (see --help)", argv[i]), -1;
        if (opt->arg && i + 1 >= argc)
            return snprintf(msg, n, "%s needs a value", argv[i]), -1;
        if (opt->set(o, opt->arg ? argv[++i] : NULL, msg, n))
            return -1;
    }
    if (o->help)
        return 0;
    if (!o->model)
        return snprintf(msg, n, "need -m MODEL (see --help)"), -1;
    if ((o->n_tokens == 0) == !o->prompt || (o->chat && !o->prompt))
        return snprintf(msg, n, "need --tokens IDS or -p TEXT [--chat] (see --help)"), -1;
    if (o->n_ctx == 0 && !o->prompt) /* with -p: set once the prompt is tokenized */
        o->n_ctx = (uint32_t)(o->n_tokens + o->n_gen);
    return 0;
}

/* ======================================================================================== */
/* Backends                                                                                 */
/* ======================================================================================== */

typedef struct run_result {
    int32_t *ids; /* [n_gen] (owned) */
    int n_ids;
    uint64_t logits_xxh64;
    double load_ms, prompt_ms, gen_ms;
    int n_prompt_steps, n_gen_steps; /* forward calls timed in each phase */
    char model_desc[128];
    char extra[512]; /* a backend's own timing line for stderr, may be empty */
} run_result;

typedef struct run_backend {
    const char *name;
    int (*generate)(const run_opts *o, run_result *r, memra_err *err);
} run_backend;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The prompt is fed one token at a time; its last forward picks the first id, every later
 * forward feeds the previous id. */
static int ref_generate(const run_opts *o, run_result *r, memra_err *err)
{
    memra_ref_model *m = NULL;
    memra_ref_seq *s = NULL;
    float *logits = NULL;
    memra_ref_model_config cfg;
    memra_ref_model_config_default(&cfg);
    cfg.n_threads = o->n_threads;
    double t0 = now_ms();
    int rc = memra_ref_model_open(o->model, &cfg, &m, err);
    if (rc != MEMRA_OK)
        goto done;
    r->load_ms = now_ms() - t0;
    const memra_qwen35_hparams *hp = memra_ref_model_hparams(m);
    snprintf(r->model_desc, sizeof r->model_desc, "%s, %u layers, n_embd %u, n_vocab %u",
             hp->arch_name, hp->n_layer, hp->n_embd, hp->n_vocab);
    rc = memra_ref_seq_init(m, o->n_ctx, &s, err);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    r->ids = malloc((size_t)o->n_gen * sizeof *r->ids);
    if (rc == MEMRA_OK && (!logits || !r->ids))
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "out of memory");
    int32_t next = 0;
    for (int t = 0; rc == MEMRA_OK && r->n_ids < o->n_gen; t++) {
        const int in_prompt = t < o->n_tokens;
        t0 = now_ms();
        rc = memra_ref_forward(m, s, in_prompt ? o->tokens[t] : next, logits, err);
        double dt = now_ms() - t0;
        if (in_prompt)
            r->prompt_ms += dt, r->n_prompt_steps++;
        else
            r->gen_ms += dt, r->n_gen_steps++;
        if (rc == MEMRA_OK && t >= o->n_tokens - 1)
            r->ids[r->n_ids++] = next = memra_ref_argmax(logits, hp->n_vocab);
    }
    if (rc == MEMRA_OK)
        r->logits_xxh64 = XXH64(logits, (size_t)hp->n_vocab * sizeof *logits, 0);
done:
    free(logits);
    memra_ref_seq_free(s);
    memra_ref_model_close(m);
    return rc;
}

/* A fresh directory with tier-1 plans of o->model (memra-plan's library, in-process). */
static int cpu_make_plans(const run_opts *o, char *dir, size_t n, memra_err *err)
{
    snprintf(dir, n, "%s/memra-run-plans-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: cannot create a plan directory", dir);
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = o->model;
    po.out_dir = dir;
    po.n_tiers = 1;
    po.tiers[0] = 1;
    memra_planner_result *res = NULL;
    int rc = memra_planner_run(&po, &res, err);
    memra_planner_result_free(res);
    return rc;
}

/* Same protocol as ref_generate, one session on the CPU backend (greedy: the plan's sample
 * op with temperature 0 is the same argmax, lowest index on ties). */
static int cpu_generate(const run_opts *o, run_result *r, memra_err *err)
{
    memra_gguf *g = NULL;
    memra_cpu_backend *be = NULL;
    char tmp[512] = "";
    double t0 = now_ms();
    int rc = memra_gguf_open(o->model, &g, err);
    if (rc == MEMRA_OK && !o->plans)
        rc = cpu_make_plans(o, tmp, sizeof tmp, err);
    memra_cpu_opts co = {.n_slots = 1, .n_ctx = o->n_ctx};
    if (rc == MEMRA_OK)
        rc = memra_cpu_backend_open(o->plans ? o->plans : tmp, g, &co, &be, err);
    uint32_t sid = 0;
    if (rc == MEMRA_OK)
        rc = memra_cpu_session_admit(be, NULL, &sid, err);
    r->load_ms = now_ms() - t0;
    r->ids = malloc((size_t)o->n_gen * sizeof *r->ids);
    if (rc == MEMRA_OK && !r->ids)
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "out of memory");
    if (rc == MEMRA_OK)
        snprintf(r->model_desc, sizeof r->model_desc, "%s, %u layers, n_embd %u, n_vocab %u",
                 memra_cpu_backend_manifest(be)->arch, memra_cpu_backend_manifest(be)->n_layer,
                 memra_cpu_backend_manifest(be)->n_embd, memra_cpu_backend_n_vocab(be));
    int32_t next = 0;
    for (int t = 0; rc == MEMRA_OK && r->n_ids < o->n_gen; t++) {
        const int in_prompt = t < o->n_tokens;
        int32_t tok = in_prompt ? o->tokens[t] : next, out = -1;
        memra_cpu_step st = {.n_rows = 1, .sessions = &sid, .tokens = &tok, .out_tokens = &out};
        t0 = now_ms();
        rc = memra_cpu_backend_step(be, &st, err);
        double dt = now_ms() - t0;
        if (in_prompt)
            r->prompt_ms += dt, r->n_prompt_steps++;
        else
            r->gen_ms += dt, r->n_gen_steps++;
        if (rc == MEMRA_OK && t >= o->n_tokens - 1)
            r->ids[r->n_ids++] = next = out;
    }
    if (rc == MEMRA_OK)
        r->logits_xxh64 = XXH64(memra_cpu_backend_logits(be, 0),
                                (size_t)memra_cpu_backend_n_vocab(be) * sizeof(float), 0);
    memra_cpu_backend_close(be);
    memra_gguf_close(g);
    if (tmp[0])
        memra_planner_remove_dir(tmp);
    return rc;
}

#ifdef MEMRA_RUN_CUDA
static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The device-time line of a cuda run: per-tick median and p99 over the generation ticks. */
static void cuda_timing(run_result *r, const memra_cuda_backend *be, float *ms, int n)
{
    const memra_cuda_info *in = memra_cuda_backend_info(be);
    if (n <= 0)
        return;
    qsort(ms, (size_t)n, sizeof *ms, cmp_float);
    const double med = ms[n / 2], p99 = ms[(n * 99) / 100];
    snprintf(r->extra, sizeof r->extra, "cuda: %s sm_%d, %s, %u launches/tick, %u graph nodes, "
             "weights %.3f GB uploaded in %.0f ms; device time per tick: median %.3f ms, p99 "
             "%.3f ms (%.1f tokens/s at B=1, %.0f GB/s of weights)", in->device_name, in->sm,
             in->graphs ? "graph replay" : "eager", in->launches[0], in->graph_nodes[0],
             (double)in->weight_bytes / 1e9, in->upload_ms, med, p99, 1e3 / med,
             (double)in->tick_bytes[0] / (med * 1e-3) / 1e9);
}

/* Same protocol as cpu_generate, on GPU 0 (the sampled token comes back from the device). */
static int cuda_generate(const run_opts *o, run_result *r, memra_err *err)
{
    memra_gguf *g = NULL;
    memra_cuda_backend *be = NULL;
    float *logits = NULL, *ms = malloc((size_t)o->n_gen * sizeof(float));
    char tmp[512] = "";
    uint32_t sid = 0;
    memra_log_set_level(MEMRA_LOG_INFO); /* weight upload progress, kernels, graphs */
    double t0 = now_ms();
    int rc = memra_gguf_open(o->model, &g, err);
    if (rc == MEMRA_OK && !o->plans)
        rc = cpu_make_plans(o, tmp, sizeof tmp, err);
    memra_cuda_opts co;
    memra_cuda_opts_init(&co);
    co.n_slots = 1;
    co.n_ctx = o->n_ctx;
    co.graphs = !o->no_graph;
    if (rc == MEMRA_OK)
        rc = memra_cuda_backend_open(o->plans ? o->plans : tmp, g, &co, &be, err);
    if (rc == MEMRA_OK)
        rc = memra_cuda_session_admit(be, NULL, &sid, err);
    r->load_ms = now_ms() - t0;
    r->ids = malloc((size_t)o->n_gen * sizeof *r->ids);
    if (rc == MEMRA_OK && (!r->ids || !ms ||
                           !(logits = malloc(memra_cuda_backend_n_vocab(be) * sizeof(float)))))
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "out of memory");
    if (rc == MEMRA_OK)
        snprintf(r->model_desc, sizeof r->model_desc, "%s, %u layers, n_embd %u, n_vocab %u",
                 memra_cuda_backend_manifest(be)->arch, memra_cuda_backend_manifest(be)->n_layer,
                 memra_cuda_backend_manifest(be)->n_embd, memra_cuda_backend_n_vocab(be));
    int32_t next = 0;
    for (int t = 0; rc == MEMRA_OK && r->n_ids < o->n_gen; t++) {
        const int in_prompt = t < o->n_tokens;
        int32_t tok = in_prompt ? o->tokens[t] : next, out = -1;
        memra_cuda_step st = {.n_rows = 1, .sessions = &sid, .tokens = &tok, .out_tokens = &out};
        t0 = now_ms();
        rc = memra_cuda_backend_step(be, &st, err);
        double dt = now_ms() - t0;
        if (in_prompt)
            r->prompt_ms += dt, r->n_prompt_steps++;
        else
            ms[r->n_gen_steps] = memra_cuda_backend_info(be)->last_tick_ms, r->gen_ms += dt,
            r->n_gen_steps++;
        if (rc == MEMRA_OK && t >= o->n_tokens - 1)
            r->ids[r->n_ids++] = next = out;
    }
    if (rc == MEMRA_OK)
        rc = memra_cuda_backend_logits(be, 0, 1, logits, err);
    if (rc == MEMRA_OK) {
        r->logits_xxh64 = XXH64(logits, (size_t)memra_cuda_backend_n_vocab(be) * sizeof(float), 0);
        cuda_timing(r, be, ms, r->n_gen_steps);
    }
    memra_cuda_backend_close(be);
    memra_gguf_close(g);
    if (tmp[0])
        memra_planner_remove_dir(tmp);
    free(logits);
    free(ms);
    return rc;
}
#endif

static const run_backend k_backends[] = {
    {"ref", ref_generate},
    {"cpu", cpu_generate},
#ifdef MEMRA_RUN_CUDA
    {"cuda", cuda_generate},
#endif
};

static const run_backend *find_backend(const char *name)
{
    for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0]; i++)
        if (!strcmp(k_backends[i].name, name))
            return &k_backends[i];
    return NULL;
}

/* ======================================================================================== */
/* Text in and out (runtime/tokenizer.h, runtime/chat.h)                                    */
/* ======================================================================================== */

/* -p [--chat]: the prompt through the model's chat template and tokenizer into o->tokens. */
static int prompt_tokens(run_opts *o, memra_tokenizer *t, memra_err *err)
{
    char *chat = NULL;
    size_t len = strlen(o->prompt);
    const char *text = o->prompt;
    int rc = MEMRA_OK;
    if (o->chat) {
        memra_tok_str tmpl = memra_tokenizer_chat_template(t);
        memra_chat_kind kind;
        memra_chat_opts co;
        memra_chat_opts_init(&co);
        memra_chat_msg m = {"user", o->prompt, NULL};
        rc = memra_chat_detect(tmpl.ptr, tmpl.len, &kind, err);
        if (rc == MEMRA_OK)
            rc = memra_chat_format(kind, &m, 1, &co, &chat, &len, err);
        text = chat;
    }
    memra_token_buf b = {0};
    if (rc == MEMRA_OK)
        rc = memra_tokenizer_encode(t, text, len, MEMRA_TOKENIZE_ADD_SPECIAL |
                                    MEMRA_TOKENIZE_PARSE_SPECIAL, &b, err);
    if (rc == MEMRA_OK && (b.n == 0 || b.n > INT_MAX / 2))
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "-p: the prompt has %zu tokens", b.n);
    if (rc == MEMRA_OK) {
        free(o->tokens);
        o->tokens = b.ids;
        o->n_tokens = (int)b.n;
        b.ids = NULL;
        if (o->n_ctx == 0)
            o->n_ctx = (uint32_t)(o->n_tokens + o->n_gen);
    }
    memra_token_buf_free(&b);
    free(chat);
    return rc;
}

/* The generated ids through the streaming detokenizer, up to the first end-of-generation id,
 * as one JSON-escaped line. */
static int print_text(const memra_tokenizer *t, const run_result *r, memra_err *err)
{
    memra_detok *d = NULL;
    int rc = memra_detok_open(t, 0, &d, err);
    fputs("text: \"", stdout);
    for (int i = 0; rc == MEMRA_OK && i <= r->n_ids; i++) {
        const char *s;
        size_t n;
        int end = i == r->n_ids || memra_tokenizer_is_eog(t, r->ids[i]);
        rc = end ? memra_detok_flush(d, &s, &n, err) : memra_detok_push(d, r->ids[i], &s, &n, err);
        for (size_t k = 0; rc == MEMRA_OK && k < n; k++) {
            unsigned char c = (unsigned char)s[k];
            if (c == '"' || c == '\\')
                printf("\\%c", c);
            else if (c == '\n')
                fputs("\\n", stdout);
            else if (c < 0x20)
                printf("\\u%04x", c);
            else
                putchar(c);
        }
        if (end)
            break;
    }
    fputs("\"\n", stdout);
    memra_detok_close(d);
    return rc;
}

/* ======================================================================================== */
/* Main                                                                                     */
/* ======================================================================================== */

static void print_ids(const char *key, const int32_t *ids, int n)
{
    printf("%s: ", key);
    for (int i = 0; i < n; i++)
        printf(i ? ",%" PRId32 : "%" PRId32, ids[i]);
    printf("\n");
}

static void print_timing(const run_opts *o, const run_result *r)
{
    fprintf(stderr, "memra-run: backend %s, model %s (%s), threads %d, ctx %u\n", o->backend,
            o->model, r->model_desc, o->n_threads, o->n_ctx);
    fprintf(stderr, "load: %.1f ms\n", r->load_ms);
    fprintf(stderr, "prompt: %d tokens, %.1f ms (%.3f ms/token)\n", r->n_prompt_steps,
            r->prompt_ms, r->prompt_ms / r->n_prompt_steps);
    if (r->n_gen_steps > 0)
        fprintf(stderr, "generate: %d tokens, %.1f ms (%.3f ms/token, %.1f tokens/s)\n",
                r->n_gen_steps, r->gen_ms, r->gen_ms / r->n_gen_steps,
                1e3 * r->n_gen_steps / r->gen_ms);
    if (r->extra[0])
        fprintf(stderr, "%s\n", r->extra);
}

int main(int argc, char **argv)
{
    run_opts o;
    run_result r = {0};
    char msg[512];
    int status = 1;
    memra_gguf *g = NULL;
    memra_tokenizer *tok = NULL;
    if (parse_args(argc, argv, &o, msg, sizeof msg)) {
        fprintf(stderr, "memra-run: %s\n", msg);
        goto out;
    }
    if (o.help) {
        usage(stdout);
        status = 0;
        goto out;
    }
    const run_backend *b = find_backend(o.backend);
    if (!b) {
        fprintf(stderr, "memra-run: backend '%s' is not available in this build (have:", o.backend);
        for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0]; i++)
            fprintf(stderr, "%s %s", i ? "," : "", k_backends[i].name);
        fprintf(stderr, ")\n");
        goto out;
    }
    memra_err err;
    memra_err_clear(&err);
    int rc = MEMRA_OK;
    if (o.prompt) { /* the tokenizer comes from the model file's own metadata */
        rc = memra_gguf_open(o.model, &g, &err);
        if (rc == MEMRA_OK)
            rc = memra_tokenizer_open_gguf(g, &tok, &err);
        if (rc == MEMRA_OK)
            rc = prompt_tokens(&o, tok, &err);
        memra_gguf_close(g);
        g = NULL;
    }
    if (rc == MEMRA_OK)
        rc = b->generate(&o, &r, &err);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-run: %s: %s\n", memra_strerror(rc), err.msg);
        goto out;
    }
    print_ids("prompt", o.tokens, o.n_tokens);
    print_ids("ids", r.ids, r.n_ids);
    if (o.logits_hash)
        printf("logits_xxh64: %016" PRIx64 "\n", r.logits_xxh64);
    if (tok && print_text(tok, &r, &err) != MEMRA_OK) {
        fprintf(stderr, "memra-run: %s\n", err.msg);
        goto out;
    }
    fflush(stdout);
    print_timing(&o, &r);
    status = 0;
out:
    memra_tokenizer_close(tok);
    free(o.tokens);
    free(r.ids);
    return status;
}
