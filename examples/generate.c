/*
 * generate.c — include/memra.h's worked example as a program: text from a prompt through the
 * public API alone (nothing else of memra is included), streamed as it is sampled.
 *
 *   memra-example-generate MODEL PROMPT [N [auto|cpu|cuda [TEMPERATURE SEED]]]
 *
 * Plans are generated in-process (tiers 1 and 2); the prompt is tokenized with the model's
 * own tokenizer (special tokens parsed), fed one tick per token, then up to N (default 32)
 * tokens are generated, greedily unless a temperature is given, and stop at an
 * end-of-generation token. stdout: the generated text, then a newline. stderr: the engine and
 * token counts. Errors: memra_last_error() on stderr, exit status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra.h"

static int fail(const char *what)
{
    fprintf(stderr, "memra-example-generate: %s: %s\n", what, memra_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 7 || argc == 6) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N [auto|cpu|cuda [TEMPERATURE SEED]]]\n", argv[0]);
        return 2;
    }
    const int n_gen = argc > 3 ? atoi(argv[3]) : 32;
    memra_engine_config cfg;
    memra_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_slots = 1;
    cfg.n_ctx = 4096;
    cfg.n_tiers = 2;
    cfg.tiers[0] = 1, cfg.tiers[1] = 2;
    if (argc > 4)
        cfg.backend = !strcmp(argv[4], "cpu")    ? MEMRA_BACKEND_CPU
                      : !strcmp(argv[4], "cuda") ? MEMRA_BACKEND_CUDA
                      : !strcmp(argv[4], "auto") ? MEMRA_BACKEND_AUTO
                                                 : -1;
    memra_sampling smp;
    memra_sampling_init(&smp);
    if (argc > 6) {
        smp.temperature = (float)atof(argv[5]);
        smp.seed = strtoull(argv[6], NULL, 10);
    }
    memra_engine *e = NULL;
    if (n_gen < 1 || memra_engine_open(&cfg, &e) != MEMRA_OK)
        return n_gen < 1 ? (fprintf(stderr, "N must be positive\n"), 2) : fail("open");
    memra_engine_info info;
    memra_engine_get_info(e, &info);
    fprintf(stderr, "engine: %s on %s (%s), n_vocab %u, tiers up to %u\n", info.arch, info.backend,
            info.device, info.n_vocab, info.max_rows);

    int rc = 1;
    size_t n = 0;
    int32_t *ids = NULL, next = -1;
    memra_session *s = NULL;
    memra_text_stream *ts = NULL;
    const char *prompt = argv[2];
    const unsigned tf = MEMRA_TEXT_ADD_SPECIAL | MEMRA_TEXT_PARSE_SPECIAL;
    /* the count first (CAPACITY with cap 0), then the ids */
    if (memra_tokenize(e, prompt, strlen(prompt), tf, NULL, 0, &n) != MEMRA_ERR_CAPACITY && n) {
        fail("tokenize");
        goto done;
    }
    if (n == 0) {
        fprintf(stderr, "memra-example-generate: the prompt has no tokens\n");
        goto done;
    }
    if (!(ids = malloc(n * sizeof *ids)) ||
        memra_tokenize(e, prompt, strlen(prompt), tf, ids, n, &n)) {
        fail("tokenize");
        goto done;
    }
    if (memra_session_open(e, &smp, &s) || memra_session_feed(e, s, ids, n, &next) ||
        memra_text_stream_open(e, 0, &ts)) {
        fail("prompt");
        goto done;
    }
    int made = 0;
    const char *text;
    size_t len;
    while (made < n_gen && !memra_token_is_eog(e, next)) {
        if (memra_text_stream_push(ts, next, &text, &len)) {
            fail("detokenize");
            goto done;
        }
        fwrite(text, 1, len, stdout);
        made++;
        if (made == n_gen)
            break;
        memra_row row = {.session = s, .token = next};
        if (memra_step(e, &row, 1) != MEMRA_OK || row.status != MEMRA_OK) {
            fail("step");
            goto done;
        }
        next = row.out_token;
    }
    if (memra_text_stream_flush(ts, &text, &len)) {
        fail("detokenize");
        goto done;
    }
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    fprintf(stderr, "prompt: %zu tokens; generated: %d tokens\n", n, made);
    rc = 0;
done:
    memra_text_stream_close(ts);
    memra_session_close(s);
    free(ids);
    memra_engine_close(e);
    return rc;
}
