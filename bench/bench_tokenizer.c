/*
 * bench_tokenizer.c — encoding and streaming-decoding speed of the tokenizer on the real
 * Qwen3.5 vocabulary, over 1 MiB of multilingual text (the committed test corpus repeated
 * and cut at a character boundary, or --text FILE).
 *
 *   memra-bench-tokenizer [--vocab-file PATH] [--text FILE] [--bytes N] [--iters N]
 *
 * Prints the effective configuration, one machine-readable line per case
 * ("bench tokenizer case=... bytes=... tokens=... median_ms=... p99_ms=... tokens_per_s=...
 * mib_per_s=... cpu_median_ms=..."), then a human table. Single thread; wall time by
 * CLOCK_MONOTONIC, and the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) so that a shared,
 * loaded machine still gives a meaningful number; one untimed warm-up run per case.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "forge_vocab_hf.h"
#include "tokenizer.h"

#ifndef MEMRA_SOURCE_DIR
#define MEMRA_SOURCE_DIR "."
#endif

typedef struct bench_cfg {
    const char *vocab_file; /* NULL = the path recorded at configure time */
    const char *text_file;  /* NULL = tests/data/tokenizer/corpus.txt, repeated */
    size_t bytes;           /* text size, default 1 MiB */
    int iters;              /* timed runs per case, default 20 */
} bench_cfg;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The text: the file repeated up to `bytes`, cut back to a UTF-8 character boundary. */
static char *load_text(const bench_cfg *c, size_t *len)
{
    char path[4096];
    if (c->text_file)
        snprintf(path, sizeof path, "%s", c->text_file);
    else
        snprintf(path, sizeof path, "%s/tests/data/tokenizer/corpus.txt", MEMRA_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench: cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)n + 1), *text = malloc(c->bytes + 1);
    if (!src || !text || n <= 0 || fread(src, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench: cannot read %s\n", path);
        fclose(f);
        free(src);
        free(text);
        return NULL;
    }
    fclose(f);
    for (size_t o = 0; o < c->bytes; o += (size_t)n)
        memcpy(text + o, src, c->bytes - o < (size_t)n ? c->bytes - o : (size_t)n);
    size_t l = memra_utf8_valid_prefix(text, c->bytes);
    text[l] = '\0';
    *len = l;
    free(src);
    return text;
}

typedef struct result {
    const char *name;
    size_t tokens;
    double median_ms, p99_ms, cpu_median_ms;
} result;

/* ms: [2, iters] wall times then CPU times. */
static void summarize(result *r, double *ms, int iters)
{
    qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
    qsort(ms + iters, (size_t)iters, sizeof *ms, cmp_double);
    r->median_ms = ms[iters / 2];
    r->p99_ms = ms[(int)((iters - 1) * 0.99 + 0.5)];
    r->cpu_median_ms = ms[iters + iters / 2];
}

static int bench_encode(const memra_tokenizer *t, const char *text, size_t len, int iters,
                        result *r, memra_token_buf *ids)
{
    double *ms = malloc(2 * sizeof *ms * (size_t)iters);
    memra_err err;
    memra_err_clear(&err);
    for (int i = -1; i < iters; i++) { /* i = -1: warm-up */
        ids->n = 0;
        double t0 = now_ms(), c0 = cpu_ms();
        if (memra_tokenizer_encode(t, text, len, MEMRA_TOKENIZE_PARSE_SPECIAL, ids, &err)) {
            fprintf(stderr, "bench: encode: %s\n", err.msg);
            free(ms);
            return 1;
        }
        if (i >= 0) {
            ms[i] = now_ms() - t0;
            ms[iters + i] = cpu_ms() - c0;
        }
    }
    r->name = "encode";
    r->tokens = ids->n;
    summarize(r, ms, iters);
    free(ms);
    return 0;
}

static int bench_stream(const memra_tokenizer *t, const memra_token_buf *ids, size_t len, int iters,
                        result *r)
{
    double *ms = malloc(2 * sizeof *ms * (size_t)iters);
    memra_detok *d = NULL;
    memra_err err;
    memra_err_clear(&err);
    if (!ms || memra_detok_open(t, MEMRA_DETOK_RENDER_SPECIAL, &d, &err)) {
        free(ms);
        return 1;
    }
    for (int i = -1; i < iters; i++) {
        size_t total = 0, n;
        const char *s;
        double t0 = now_ms(), c0 = cpu_ms();
        for (size_t k = 0; k < ids->n; k++) {
            memra_detok_push(d, ids->ids[k], &s, &n, NULL);
            total += n;
        }
        memra_detok_flush(d, &s, &n, NULL);
        total += n;
        if (i >= 0) {
            ms[i] = now_ms() - t0;
            ms[iters + i] = cpu_ms() - c0;
        }
        if (total != len) {
            fprintf(stderr, "bench: streamed %zu bytes, expected %zu\n", total, len);
            memra_detok_close(d);
            free(ms);
            return 1;
        }
    }
    r->name = "detok_stream";
    r->tokens = ids->n;
    summarize(r, ms, iters);
    memra_detok_close(d);
    free(ms);
    return 0;
}

static int parse_args(int argc, char **argv, bench_cfg *c)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--vocab-file") && v)
            c->vocab_file = argv[++i];
        else if (!strcmp(a, "--text") && v)
            c->text_file = argv[++i];
        else if (!strcmp(a, "--bytes") && v)
            c->bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--iters") && v)
            c->iters = atoi(argv[++i]);
        else
            return 1;
    }
    return c->bytes == 0 || c->iters <= 0;
}

int main(int argc, char **argv)
{
    bench_cfg c = {NULL, NULL, 1u << 20, 20};
    if (parse_args(argc, argv, &c)) {
        fprintf(stderr, "usage: memra-bench-tokenizer [--vocab-file PATH] [--text FILE] "
                        "[--bytes N] [--iters N]\n");
        return 2;
    }
    memra_err err;
    memra_err_clear(&err);
    memra_vocab_hf *v = NULL;
    memra_tokenizer *t = NULL;
    double t0 = now_ms();
    if (memra_vocab_hf_load_qwen35(c.vocab_file, NULL, 0, &v, &err) ||
        memra_tokenizer_open(&v->desc, &t, &err)) {
        fprintf(stderr, "bench: vocabulary: %s\n", err.msg);
        memra_vocab_hf_free(v);
        return 1;
    }
    double load_ms = now_ms() - t0;
    size_t len = 0;
    char *text = load_text(&c, &len);
    if (!text)
        return 1;
    printf("config: vocab_file=%s text=%s bytes=%zu iters=%d threads=1 pre=%s n_vocab=%u "
           "load_ms=%.1f\n",
           c.vocab_file ? c.vocab_file : memra_vocab_hf_default_tiktoken(),
           c.text_file ? c.text_file : "tests/data/tokenizer/corpus.txt (repeated)", len, c.iters,
           memra_tokenizer_pre(t), memra_tokenizer_n_vocab(t), load_ms);
    memra_token_buf ids = {0};
    result r[2];
    int rc = bench_encode(t, text, len, c.iters, &r[0], &ids) ||
             bench_stream(t, &ids, len, c.iters, &r[1]);
    for (int i = 0; !rc && i < 2; i++)
        printf("bench tokenizer case=%s bytes=%zu tokens=%zu median_ms=%.3f p99_ms=%.3f "
               "tokens_per_s=%.0f mib_per_s=%.2f cpu_median_ms=%.3f cpu_tokens_per_s=%.0f\n",
               r[i].name, len, r[i].tokens, r[i].median_ms, r[i].p99_ms,
               r[i].tokens / (r[i].median_ms * 1e-3),
               len / (r[i].median_ms * 1e-3) / (1024.0 * 1024.0), r[i].cpu_median_ms,
               r[i].tokens / (r[i].cpu_median_ms * 1e-3));
    if (!rc) {
        printf("\n%-14s %8s %10s %8s %12s %8s %8s %12s\n", "case", "tokens", "median ms", "p99 ms",
               "tokens/s", "MiB/s", "cpu ms", "cpu tok/s");
        for (int i = 0; i < 2; i++)
            printf("%-14s %8zu %10.2f %8.2f %12.0f %8.2f %8.2f %12.0f\n", r[i].name, r[i].tokens,
                   r[i].median_ms, r[i].p99_ms, r[i].tokens / (r[i].median_ms * 1e-3),
                   len / (r[i].median_ms * 1e-3) / (1024.0 * 1024.0), r[i].cpu_median_ms,
                   r[i].tokens / (r[i].cpu_median_ms * 1e-3));
    }
    memra_token_buf_free(&ids);
    free(text);
    memra_tokenizer_close(t);
    memra_vocab_hf_free(v);
    return rc;
}
