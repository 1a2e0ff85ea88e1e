/*
 * memra-run — greedy generation from a GGUF checkpoint, for people and scripts.
 *
 *   memra-run --backend ref -m MODEL --tokens 1,2,3 [-n 32] [--threads N] [--ctx N]
 *             [--logits-hash]
 *
 * stdout (machine-readable, one "key: value" per line):
 *   prompt: 1,2,3
 *   ids: <n generated ids, comma-separated>
 *   logits_xxh64: <16 hex digits>      (with --logits-hash: xxHash64 of the f32 logits bytes
 *                                       of the last forward, the step that chose the last id)
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
#include <time.h>

#include <xxhash.h>

#include "refmodel.h"

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
    int help;
} run_opts;

typedef struct run_option {
    const char *lng, *shrt; /* "--tokens", "-t" (NULL when none) */
    int has_arg;
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

static int set_help(run_opts *o, const char *a, char *msg, size_t n)
{
    (void)a, (void)msg, (void)n;
    o->help = 1;
    return 0;
}

static const run_option k_options[] = {
    {"--backend", NULL, 1, "NAME   compute backend: ref (CPU reference)", set_backend},
    {"--model", "-m", 1, "FILE     GGUF checkpoint (qwen35, qwen35moe)", set_model},
    {"--tokens", NULL, 1, "IDS     prompt token ids, comma-separated", set_tokens},
    {"--n-gen", "-n", 1, "N        ids to generate greedily (default 32)", set_n_gen},
    {"--threads", NULL, 1, "N     threads per mat-vec (default 1; results do not depend on it)",
     set_threads},
    {"--ctx", NULL, 1, "N         sequence capacity (default prompt + n)", set_ctx},
    {"--logits-hash", NULL, 0, "  print xxHash64 of the last step's logits", set_logits_hash},
    {"--help", "-h", 0, "         this text", set_help},
};
#define N_OPTIONS (sizeof k_options / sizeof k_options[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-run --backend ref -m MODEL --tokens 1,2,3 [-n 32] [options]\n");
    for (size_t i = 0; i < N_OPTIONS; i++)
        fprintf(f, "  %s%s%s %s\n", k_options[i].shrt ? k_options[i].shrt : "",
                k_options[i].shrt ? ", " : "", k_options[i].lng, k_options[i].help);
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
        if (opt->has_arg && i + 1 >= argc)
            return snprintf(msg, n, "%s needs a value", argv[i]), -1;
        if (opt->set(o, opt->has_arg ? argv[++i] : NULL, msg, n))
            return -1;
    }
    if (o->help)
        return 0;
    if (!o->model)
        return snprintf(msg, n, "need -m MODEL (see --help)"), -1;
    if (o->n_tokens == 0)
        return snprintf(msg, n, "need --tokens IDS (see --help)"), -1;
    if (o->n_ctx == 0)
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

static const run_backend k_backends[] = {
    {"ref", ref_generate},
};

static const run_backend *find_backend(const char *name)
{
    for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0]; i++)
        if (!strcmp(k_backends[i].name, name))
            return &k_backends[i];
    return NULL;
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
}

int main(int argc, char **argv)
{
    run_opts o;
    run_result r = {0};
    char msg[512];
    int status = 1;
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
        fprintf(stderr, "memra-run: backend '%s' is not available in this build (have: ref)\n",
                o.backend);
        goto out;
    }
    memra_err err;
    memra_err_clear(&err);
    int rc = b->generate(&o, &r, &err);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-run: %s: %s\n", memra_strerror(rc), err.msg);
        goto out;
    }
    print_ids("prompt", o.tokens, o.n_tokens);
    print_ids("ids", r.ids, r.n_ids);
    if (o.logits_hash)
        printf("logits_xxh64: %016" PRIx64 "\n", r.logits_xxh64);
    fflush(stdout);
    print_timing(&o, &r);
    status = 0;
out:
    free(o.tokens);
    free(r.ids);
    return status;
}
