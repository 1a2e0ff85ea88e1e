/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizer (runtime/tokenizer.c) and the chat
 * formatter (runtime/chat.c) over the real Qwen3.5 vocabulary (loaded once, from the path
 * recorded at configure time, or $MEMRA_FUZZ_VOCAB).
 *
 * Input: byte 0 selects the mode, the rest is the payload.
 *   mode % 4 == 0/1: encode the payload (with/without PARSE_SPECIAL); then
 *                    decode(ids) must equal the payload with invalid UTF-8 replaced, and the
 *                    streaming detokenizer must emit only valid UTF-8 and the same text.
 *   mode % 4 == 2:   the payload as little-endian int32 ids (any value) pushed through the
 *                    detokenizer: out-of-range ids fail cleanly, every chunk is valid UTF-8.
 *   mode % 4 == 3:   the payload split on 0x1E into chat messages (roles cycling user/
 *                    assistant/tool/system) rendered with the Qwen3.5 template, then encoded.
 * A crash, sanitizer report or abort() on a broken invariant is a bug.
 * Build: CC=clang cmake -S . -B build-fuzz -DMEMRA_FUZZ=ON && cmake --build build-fuzz
 *        --target fuzz_tokenizer; run: build-fuzz/fuzz_tokenizer -max_len=4096 CORPUS_DIR
 */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "forge_vocab_hf.h"
#include "tokenizer.h"

static memra_vocab_hf *g_vocab;
static memra_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    memra_err err;
    memra_err_clear(&err);
    if (memra_vocab_hf_load_qwen35(getenv("MEMRA_FUZZ_VOCAB"), NULL, 0, &g_vocab, &err) ||
        memra_tokenizer_open(&g_vocab->desc, &g_tok, &err)) {
        memra_log(MEMRA_LOG_ERROR, "fuzz_tokenizer: %s", err.msg);
        abort();
    }
    return 0;
}

static void check_stream(const int32_t *ids, size_t n, const char *want, size_t want_len)
{
    memra_detok *d = NULL;
    if (memra_detok_open(g_tok, MEMRA_DETOK_RENDER_SPECIAL, &d, NULL))
        abort();
    size_t o = 0, len;
    const char *s;
    for (size_t i = 0; i <= n; i++) {
        int rc = i < n ? memra_detok_push(d, ids[i], &s, &len, NULL)
                       : memra_detok_flush(d, &s, &len, NULL);
        if (rc != MEMRA_OK)
            abort();
        if (memra_utf8_valid_prefix(s, len) != len)
            abort(); /* a partial or invalid sequence escaped */
        if (want && (o + len > want_len || memcmp(want + o, s, len) != 0))
            abort();
        o += len;
    }
    if (want && o != want_len)
        abort();
    memra_detok_close(d);
}

static void fuzz_encode(const char *p, size_t n, unsigned flags)
{
    memra_token_buf b = {0};
    char *clean = NULL, *dec = NULL;
    size_t clean_len, dec_len = 0;
    if (memra_tokenizer_encode(g_tok, p, n, flags, &b, NULL) != MEMRA_OK)
        abort(); /* any bytes must encode */
    if (memra_utf8_sanitize(p, n, &clean, &clean_len, NULL) != MEMRA_OK)
        abort();
    if (memra_tokenizer_decode(g_tok, b.ids, b.n, MEMRA_DETOK_RENDER_SPECIAL, &dec, &dec_len,
                               NULL) != MEMRA_OK)
        abort();
    if (dec_len != clean_len || memcmp(dec, clean, dec_len) != 0)
        abort(); /* decode(encode(s)) must give s back (invalid bytes as U+FFFD) */
    check_stream(b.ids, b.n, clean, clean_len);
    free(dec);
    free(clean);
    memra_token_buf_free(&b);
}

static void fuzz_ids(const uint8_t *p, size_t n)
{
    memra_detok *d = NULL;
    if (memra_detok_open(g_tok, (n & 1) ? MEMRA_DETOK_RENDER_SPECIAL : 0, &d, NULL))
        abort();
    const char *s;
    size_t len;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        int32_t id;
        memcpy(&id, p + i, 4);
        int rc = memra_detok_push(d, id, &s, &len, NULL);
        int in_range = id >= 0 && (uint32_t)id < memra_tokenizer_n_vocab(g_tok);
        if ((rc == MEMRA_OK) != in_range)
            abort();
        if (rc == MEMRA_OK && memra_utf8_valid_prefix(s, len) != len)
            abort();
    }
    if (memra_detok_flush(d, &s, &len, NULL) || memra_utf8_valid_prefix(s, len) != len)
        abort();
    memra_detok_close(d);
}

static void fuzz_chat(const char *p, size_t n)
{
    static const char *const roles[] = {"user", "assistant", "tool", "system"};
    memra_chat_msg m[16];
    char *copy = malloc(n + 1), *out = NULL;
    size_t k = 0, start = 0, out_len;
    memcpy(copy, p, n);
    copy[n] = '\0';
    for (size_t i = 0; i <= n && k < 16; i++) {
        if (i == n || copy[i] == 0x1E) {
            copy[i] = '\0';
            m[k].role = roles[k % 4];
            m[k].content = copy + start;
            m[k].reasoning_content = (k % 3 == 1) ? copy + start : NULL;
            k++;
            start = i + 1;
        }
    }
    memra_chat_opts o;
    memra_chat_opts_init(&o);
    o.enable_thinking = (int)(n % 3) - 1;
    if (memra_chat_format(MEMRA_CHAT_QWEN35, m, k, &o, &out, &out_len, NULL) == MEMRA_OK) {
        if (memra_utf8_valid_prefix(out, out_len) != out_len)
            abort();
        memra_token_buf b = {0};
        if (memra_tokenizer_encode(g_tok, out, out_len, MEMRA_TOKENIZE_PARSE_SPECIAL, &b, NULL))
            abort();
        memra_token_buf_free(&b);
    }
    free(out);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 4) {
    case 0:
        fuzz_encode(p, n, MEMRA_TOKENIZE_PARSE_SPECIAL);
        break;
    case 1:
        fuzz_encode(p, n, 0);
        break;
    case 2:
        fuzz_ids(data + 1, n);
        break;
    default:
        fuzz_chat(p, n);
        break;
    }
    return 0;
}
