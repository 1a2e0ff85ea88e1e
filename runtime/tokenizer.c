/*
 * tokenizer.c — byte-level BPE over GGUF tokenizer metadata (see tokenizer.h).
 *
 * Pipeline of one encode call, each stage in its own section below:
 *   bytes → UTF-8 sanitize (U+FFFD per maximal invalid subpart)
 *         → split on added tokens (leftmost-longest, like `tokenizers`' AddedVocabulary)
 *         → per segment: PCRE2 split with the pattern tokenizer.ggml.pre names ("isolated":
 *           matches and the gaps between them are both pieces)
 *         → per piece: each byte becomes the token of its GPT-2 byte-level character, then
 *           BPE merges are applied lowest rank first (ties: leftmost), through a binary heap
 *           of candidate pairs — O(m log m) in the piece length m, never a rescan.
 *
 * Must not: normalize text, allocate per piece (scratch grows once per call), keep state
 * across calls (the handle is immutable after open, so calls may run concurrently).
 *
 * Lookups: token text → id and (left id, right id) → (rank, merged id) are open-addressing
 * hash tables keyed with XXH3. The byte-level mapping (GPT-2 bytes_to_unicode) is computed,
 * not tabulated: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100+n
 * in byte order.
 */
#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* inline XXH3: the merge lookup hashes an 8-byte key per adjacent pair, a call per hash shows */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "gguf.h"

/* ============================================================ UTF-8 */

enum { UTF8_OK = 0, UTF8_BAD = 1, UTF8_SHORT = 2 };

/* Classifies the sequence starting at s[i]: UTF8_OK (*adv = its length), UTF8_BAD (*adv =
 * length of the maximal invalid subpart, >= 1) or UTF8_SHORT (a valid prefix that runs into
 * the end of the buffer; *adv = n - i). Byte ranges are RFC 3629 Table 3-7. */
static int utf8_step(const uint8_t *s, size_t n, size_t i, size_t *adv)
{
    uint8_t c = s[i];
    if (c < 0x80) {
        *adv = 1;
        return UTF8_OK;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlongs */
        hi = c == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        lo = c == 0xF0 ? 0x90 : 0x80; /* no overlongs */
        hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else {
        *adv = 1;
        return UTF8_BAD;
    }
    for (size_t k = 1; k <= need; k++) {
        if (i + k >= n) {
            *adv = k;
            return UTF8_SHORT;
        }
        uint8_t b = s[i + k];
        if (b < lo || b > hi) {
            *adv = k;
            return UTF8_BAD;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    *adv = need + 1;
    return UTF8_OK;
}

size_t memra_utf8_valid_prefix(const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, adv;
    while (i < len) {
        if (u[i] < 0x80) { /* ASCII runs are the common case */
            i++;
            continue;
        }
        if (utf8_step(u, len, i, &adv) != UTF8_OK)
            break;
        i += adv;
    }
    return i;
}

static const char k_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Appends s[0..n) to dst (which has room for 3 bytes per input byte), replacing invalid
 * subparts; a trailing incomplete sequence is replaced too when `final`, else left and its
 * length returned in *held. Returns bytes written. */
static size_t utf8_sanitize_into(const uint8_t *s, size_t n, int final, char *dst, size_t *held)
{
    size_t i = 0, o = 0, adv;
    *held = 0;
    while (i < n) {
        int st = utf8_step(s, n, i, &adv);
        if (st == UTF8_OK) {
            memcpy(dst + o, s + i, adv);
            o += adv;
        } else if (st == UTF8_SHORT && !final) {
            *held = adv;
            break;
        } else {
            memcpy(dst + o, k_replacement, 3);
            o += 3;
        }
        i += adv;
    }
    return o;
}

int memra_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len, memra_err *err)
{
    /* Each replaced subpart is >= 1 byte and becomes 3, so 3 * len bounds the output. */
    char *buf = malloc(len * 3 + 1);
    if (!buf)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "utf8 sanitize: %zu bytes", len * 3 + 1);
    size_t held;
    *out_len = utf8_sanitize_into((const uint8_t *)s, len, 1, buf, &held);
    buf[*out_len] = '\0';
    *out = buf;
    return MEMRA_OK;
}

/* Decodes one code point of valid UTF-8 at s (n > 0 bytes available); returns its length. */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    size_t adv;
    if (utf8_step(s, n, 0, &adv) != UTF8_OK) {
        *cp = 0xFFFFFFFFu;
        return 1;
    }
    uint32_t c = s[0];
    if (adv == 1)
        *cp = c;
    else if (adv == 2)
        *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    else if (adv == 3)
        *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    else
        *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return adv;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12)); /* byte-level code points are all < U+0144 */
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* ============================================================ byte-level mapping */

/* GPT-2 bytes_to_unicode: bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF are their own code point;
 * the remaining 68 bytes map to U+0100, U+0101, ... in increasing byte order. */
static uint32_t byte_to_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE));
    return 0x100 + n;
}

#define BYTE_CP_LIMIT 0x144 /* 0x100 + 68: every byte-level code point is below this */

/* ============================================================ hash tables */

static uint64_t hash_bytes(const char *s, size_t n)
{
    return XXH3_64bits(s, n);
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

typedef struct merge_slot {
    uint64_t key;  /* (left id << 32) | right id; MERGE_EMPTY when unused */
    uint32_t rank; /* index in tokenizer.ggml.merges */
    int32_t id;    /* the merged token */
} merge_slot;

#define MERGE_EMPTY UINT64_MAX /* ids are < 2^31, so no real key is all ones */

struct memra_tokenizer {
    uint32_t n_tokens;
    char *text;          /* all token texts back to back */
    uint64_t *text_off;  /* [n_tokens + 1] */
    char *bytes;         /* the raw bytes each token decodes to, back to back */
    uint64_t *bytes_off; /* [n_tokens + 1] */
    uint8_t *type;       /* [n_tokens] memra_token_type */
    uint8_t *eog;        /* [n_tokens] 1 = ends generation */

    int32_t *vocab_slot; /* [vocab_mask + 1] token id or -1 */
    uint64_t vocab_mask;
    merge_slot *merge; /* [merge_mask + 1] */
    uint64_t merge_mask;
    uint32_t n_merges;
    int32_t byte_token[256];

    int32_t *special; /* [n_special] added-token ids by (first byte, longest text first) */
    uint32_t n_special;
    uint32_t special_lo[256], special_hi[256]; /* special[lo..hi) start with this byte */
    uint8_t special_first[256]; /* bit 1: some USER_DEFINED starts with this byte, 2: CONTROL */

    pcre2_code *re;
    char model[16], pre[16];
    int32_t bos, eos, eot, pad, unk;
    int add_bos, add_eos;
    char *chat_template; /* NUL-terminated copy, or NULL */
    size_t chat_template_len;
};

static memra_tok_str tok_text(const memra_tokenizer *t, int32_t id)
{
    memra_tok_str s = {t->text + t->text_off[id], (size_t)(t->text_off[id + 1] - t->text_off[id])};
    return s;
}

int32_t memra_tokenizer_find(const memra_tokenizer *t, const char *s, size_t len)
{
    uint64_t h = hash_bytes(s, len) & t->vocab_mask;
    for (;; h = (h + 1) & t->vocab_mask) {
        int32_t id = t->vocab_slot[h];
        if (id < 0)
            return -1;
        memra_tok_str x = tok_text(t, id);
        if (x.len == len && memcmp(x.ptr, s, len) == 0)
            return id;
    }
}

/* Inserts id unless its text is already present (the first occurrence keeps the text). */
static int vocab_insert(memra_tokenizer *t, int32_t id)
{
    memra_tok_str s = tok_text(t, id);
    uint64_t h = hash_bytes(s.ptr, s.len) & t->vocab_mask;
    for (;; h = (h + 1) & t->vocab_mask) {
        int32_t o = t->vocab_slot[h];
        if (o < 0) {
            t->vocab_slot[h] = id;
            return 1;
        }
        memra_tok_str x = tok_text(t, o);
        if (x.len == s.len && memcmp(x.ptr, s.ptr, s.len) == 0)
            return 0;
    }
}

static uint64_t merge_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static const merge_slot *merge_find(const memra_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = merge_key(a, b);
    uint64_t h = XXH3_64bits(&key, sizeof key) & t->merge_mask;
    for (;; h = (h + 1) & t->merge_mask) {
        const merge_slot *m = &t->merge[h];
        if (m->key == key)
            return m;
        if (m->key == MERGE_EMPTY)
            return NULL;
    }
}

/* Inserts unless the pair is already present (a repeated merge keeps its lowest rank). */
static void merge_insert(memra_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = merge_key(a, b);
    uint64_t h = XXH3_64bits(&key, sizeof key) & t->merge_mask;
    for (;; h = (h + 1) & t->merge_mask) {
        merge_slot *m = &t->merge[h];
        if (m->key == key)
            return;
        if (m->key == MERGE_EMPTY) {
            m->key = key;
            m->rank = rank;
            m->id = id;
            return;
        }
    }
}

/* ============================================================ pre-tokenizers */

/* tokenizer.ggml.pre → split pattern: the `Split` regexes of the corresponding tokenizer.json
 * files, verbatim (llama.cpp's llama-vocab.cpp transcribes the same ones for
 * LLAMA_VOCAB_PRE_TYPE_QWEN35 / _QWEN2). \p{L}, \p{M}, \p{N}, \s and the Unicode case folding
 * of (?i:...) are PCRE2's own tables; see encode_segment() for the one code point where
 * PCRE2's \s and the reference's differ. The code-point sweep in tests/test_tokenizer.c
 * checks every code point against the reference. */
static const struct {
    const char *name;
    const char *pattern;
} k_pre[] = {
    /* Qwen3.5/3.6: like qwen2, with combining marks (\p{M}) kept inside words. */
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
               "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    /* Qwen2/2.5/3. */
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
              "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static int compile_pre(memra_tokenizer *t, const char *pre, memra_err *err)
{
    const char *pattern = NULL;
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strcmp(pre, k_pre[i].name) == 0)
            pattern = k_pre[i].pattern;
    if (!pattern)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "tokenizer.ggml.pre \"%s\" is not supported (known: qwen35, qwen2)", pre);
    int ec;
    PCRE2_SIZE eo;
    /* UTF: the subject is UTF-8; UCP: \s, \p{..} and caseless matching use Unicode
     * properties (PCRE2's own tables: no hand-written ranges here). */
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                          &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "pre \"%s\": pcre2_compile at %zu: %s", pre,
                          (size_t)eo, (const char *)msg);
    }
    /* JIT is an optimization only: without it pcre2_match interprets the same pattern. */
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    return MEMRA_OK;
}

/* ============================================================ open / close */

void memra_tokenizer_desc_init(memra_tokenizer_desc *d)
{
    memset(d, 0, sizeof *d);
    d->bos_id = d->eos_id = d->eot_id = d->pad_id = d->unk_id = -1;
}

void memra_tokenizer_close(memra_tokenizer *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->bytes);
    free(t->bytes_off);
    free(t->type);
    free(t->eog);
    free(t->vocab_slot);
    free(t->merge);
    free(t->special);
    free(t->chat_template);
    pcre2_code_free(t->re);
    free(t);
}

/* Copies token texts and types, and builds the text → id table. */
static int load_tokens(memra_tokenizer *t, const memra_tokenizer_desc *d, memra_err *err)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        if (!d->tokens[i].ptr && d->tokens[i].len)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "token %u: NULL text", i);
        total += d->tokens[i].len;
    }
    t->text = malloc(total + 1);
    t->text_off = malloc(((size_t)d->n_tokens + 1) * sizeof *t->text_off);
    t->type = malloc(d->n_tokens);
    t->vocab_mask = pow2_at_least((uint64_t)d->n_tokens * 2) - 1;
    t->vocab_slot = malloc((t->vocab_mask + 1) * sizeof *t->vocab_slot);
    if (!t->text || !t->text_off || !t->type || !t->vocab_slot)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocabulary of %u tokens", d->n_tokens);
    memset(t->vocab_slot, 0xFF, (t->vocab_mask + 1) * sizeof *t->vocab_slot);
    uint64_t off = 0;
    uint32_t dups = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        int32_t ty = d->token_types ? d->token_types[i] : MEMRA_TOKEN_NORMAL;
        if (ty < MEMRA_TOKEN_UNDEFINED || ty > MEMRA_TOKEN_BYTE)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "tokenizer.ggml.token_type[%u] = %d is not a "
                              "token type (0..6)",
                              i, ty);
        t->type[i] = (uint8_t)ty;
        t->text_off[i] = off;
        if (d->tokens[i].len)
            memcpy(t->text + off, d->tokens[i].ptr, d->tokens[i].len);
        off += d->tokens[i].len;
    }
    t->text_off[d->n_tokens] = off;
    for (uint32_t i = 0; i < d->n_tokens; i++)
        dups += !vocab_insert(t, (int32_t)i);
    if (dups)
        memra_log(MEMRA_LOG_DEBUG, "tokenizer: %u duplicate token texts (first id kept)", dups);
    return MEMRA_OK;
}

/* Byte-level decoding of a NORMAL token's text: each character maps back to its byte; a
 * character outside the byte-level alphabet (or invalid UTF-8) is kept as its own bytes,
 * which is what `tokenizers`' ByteLevel decoder does. Returns bytes written (<= n). */
static size_t bytelevel_decode(const uint8_t *s, size_t n, const int16_t *cp_to_byte, char *dst)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t adv = utf8_decode(s + i, n - i, &cp);
        if (cp < BYTE_CP_LIMIT && cp_to_byte[cp] >= 0) {
            dst[o++] = (char)cp_to_byte[cp];
        } else {
            memcpy(dst + o, s + i, adv);
            o += adv;
        }
        i += adv;
    }
    return o;
}

/* Fills bytes/bytes_off (what each token decodes to) and byte_token[]. */
static int load_bytes(memra_tokenizer *t, memra_err *err)
{
    int16_t cp_to_byte[BYTE_CP_LIMIT];
    memset(cp_to_byte, 0xFF, sizeof cp_to_byte);
    for (unsigned b = 0; b < 256; b++)
        cp_to_byte[byte_to_cp(b)] = (int16_t)b;
    /* A decoded token is never longer than its text. */
    t->bytes = malloc(t->text_off[t->n_tokens] + 1);
    t->bytes_off = malloc(((size_t)t->n_tokens + 1) * sizeof *t->bytes_off);
    if (!t->bytes || !t->bytes_off)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "token bytes");
    uint64_t o = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        memra_tok_str s = tok_text(t, (int32_t)i);
        t->bytes_off[i] = o;
        switch (t->type[i]) {
        case MEMRA_TOKEN_NORMAL:
            o += bytelevel_decode((const uint8_t *)s.ptr, s.len, cp_to_byte, t->bytes + o);
            break;
        case MEMRA_TOKEN_CONTROL:
        case MEMRA_TOKEN_UNKNOWN:
        case MEMRA_TOKEN_USER_DEFINED: /* added tokens are stored as their plain text */
            memcpy(t->bytes + o, s.ptr, s.len);
            o += s.len;
            break;
        default: /* UNUSED, BYTE, UNDEFINED render as nothing (as in llama.cpp) */
            break;
        }
    }
    t->bytes_off[t->n_tokens] = o;
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t n = utf8_encode(byte_to_cp(b), u);
        t->byte_token[b] = memra_tokenizer_find(t, u, n);
        if (t->byte_token[b] < 0)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "vocabulary has no byte-level token for "
                              "byte 0x%02x (\"%.*s\"): not a gpt2 byte-level vocabulary",
                              b, (int)n, u);
    }
    return MEMRA_OK;
}

/* Resolves every merge "a b" to (id a, id b) → (rank, id of a+b). */
static int load_merges(memra_tokenizer *t, const memra_tokenizer_desc *d, memra_err *err)
{
    int rc = MEMRA_OK;
    char *cat = NULL;
    size_t cat_cap = 0;
    t->n_merges = d->n_merges;
    t->merge_mask = pow2_at_least((uint64_t)d->n_merges * 2) - 1;
    t->merge = malloc((t->merge_mask + 1) * sizeof *t->merge);
    if (!t->merge)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%u merges", d->n_merges);
    for (uint64_t i = 0; i <= t->merge_mask; i++)
        t->merge[i].key = MERGE_EMPTY;
    for (uint32_t r = 0; r < d->n_merges; r++) {
        const char *m = d->merges[r].ptr;
        size_t n = d->merges[r].len;
        /* byte-level texts never contain ' ' (0x20 maps to U+0120), so the first space
         * after position 0 separates the halves */
        const char *sp = n > 1 && m ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                            "tokenizer.ggml.merges[%u] \"%.*s\" is not "
                            "\"left right\"",
                            r, (int)(n > 64 ? 64 : n), m ? m : "");
            goto fail;
        }
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t a = memra_tokenizer_find(t, m, nl), b = memra_tokenizer_find(t, sp + 1, nr);
        if (nl + nr > cat_cap) {
            cat_cap = (nl + nr) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "merge scratch");
                goto fail;
            }
            cat = nc;
        }
        memcpy(cat, m, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t ab = memra_tokenizer_find(t, cat, nl + nr);
        if (a < 0 || b < 0 || ab < 0) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                            "tokenizer.ggml.merges[%u] \"%.*s\": %s is "
                            "not in the vocabulary",
                            r, (int)(n > 64 ? 64 : n), m,
                            a < 0   ? "the left half"
                            : b < 0 ? "the right half"
                                    : "the merged text");
            goto fail;
        }
        merge_insert(t, a, b, r, ab);
    }
fail:
    free(cat);
    return rc;
}

static int cmp_special(const void *pa, const void *pb, void *ctx)
{
    const memra_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint8_t fa = (uint8_t)t->text[t->text_off[a]], fb = (uint8_t)t->text[t->text_off[b]];
    if (fa != fb)
        return fa < fb ? -1 : 1;
    uint64_t la = t->text_off[a + 1] - t->text_off[a], lb = t->text_off[b + 1] - t->text_off[b];
    if (la != lb)
        return la > lb ? -1 : 1; /* longest first: the first hit at a position is the longest */
    return a < b ? -1 : a > b;
}

/* The ChatML control tokens llama.cpp (llama-vocab.cpp) adds to the end-of-generation set
 * when it finds them by text. */
static const char *const k_eog_text[] = {"<|im_end|>", "<|endoftext|>", "<|fim_pad|>",
                                         "<|repo_name|>", "<|file_sep|>"};

static int load_specials(memra_tokenizer *t, memra_err *err)
{
    t->special = malloc(((size_t)t->n_tokens) * sizeof *t->special);
    t->eog = calloc(t->n_tokens, 1);
    if (!t->special || !t->eog)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "special token tables");
    memset(t->special_first, 0, sizeof t->special_first);
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        uint8_t ty = t->type[i];
        memra_tok_str s = tok_text(t, (int32_t)i);
        if (s.len == 0)
            continue;
        if (ty == MEMRA_TOKEN_USER_DEFINED || ty == MEMRA_TOKEN_CONTROL ||
            ty == MEMRA_TOKEN_UNKNOWN) {
            t->special[t->n_special++] = (int32_t)i;
            t->special_first[(uint8_t)s.ptr[0]] |= ty == MEMRA_TOKEN_USER_DEFINED ? 1 : 2;
        }
        if (ty == MEMRA_TOKEN_CONTROL)
            for (size_t k = 0; k < sizeof k_eog_text / sizeof k_eog_text[0]; k++)
                if (s.len == strlen(k_eog_text[k]) && memcmp(s.ptr, k_eog_text[k], s.len) == 0)
                    t->eog[i] = 1;
    }
    qsort_r(t->special, t->n_special, sizeof *t->special, cmp_special, t);
    for (uint32_t k = 0; k < t->n_special; k++) {
        uint8_t f = (uint8_t)t->text[t->text_off[t->special[k]]];
        if (t->special_hi[f] == 0)
            t->special_lo[f] = k;
        t->special_hi[f] = k + 1;
    }
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    return MEMRA_OK;
}

static int check_scalars(memra_tokenizer *t, const memra_tokenizer_desc *d, memra_err *err)
{
    const struct {
        const char *key;
        int32_t v;
    } ids[] = {{"bos_token_id", d->bos_id},
               {"eos_token_id", d->eos_id},
               {"eot_token_id", d->eot_id},
               {"padding_token_id", d->pad_id},
               {"unknown_token_id", d->unk_id}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].v < -1 || (ids[i].v >= 0 && (uint32_t)ids[i].v >= d->n_tokens))
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "tokenizer.ggml.%s = %d is outside the "
                              "vocabulary (%u tokens)",
                              ids[i].key, ids[i].v, d->n_tokens);
    t->bos = d->bos_id;
    t->eos = d->eos_id;
    t->eot = d->eot_id;
    t->pad = d->pad_id;
    t->unk = d->unk_id;
    t->add_bos = d->add_bos != 0;
    t->add_eos = d->add_eos != 0;
    if (d->chat_template.ptr) {
        t->chat_template = malloc(d->chat_template.len + 1);
        if (!t->chat_template)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "chat template");
        memcpy(t->chat_template, d->chat_template.ptr, d->chat_template.len);
        t->chat_template[d->chat_template.len] = '\0';
        t->chat_template_len = d->chat_template.len;
    }
    return MEMRA_OK;
}

int memra_tokenizer_open(const memra_tokenizer_desc *d, memra_tokenizer **out, memra_err *err)
{
    int rc;
    memra_tokenizer *t = NULL;
    *out = NULL;
    if (!d || !d->model || !d->pre) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "tokenizer: model and pre are required");
        goto fail;
    }
    if (strcmp(d->model, "gpt2") != 0) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                        "tokenizer.ggml.model \"%s\" is not "
                        "supported (only \"gpt2\", byte-level BPE)",
                        d->model);
        goto fail;
    }
    if (d->n_tokens == 0 || d->n_tokens > INT32_MAX || !d->tokens || (d->n_merges && !d->merges)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                        "tokenizer: %u tokens, %u merges: empty or "
                        "missing arrays",
                        d->n_tokens, d->n_merges);
        goto fail;
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tokenizer");
        goto fail;
    }
    t->n_tokens = d->n_tokens;
    snprintf(t->model, sizeof t->model, "%s", d->model);
    snprintf(t->pre, sizeof t->pre, "%s", d->pre);
    MEMRA_TRY(compile_pre(t, d->pre, err));
    MEMRA_TRY(check_scalars(t, d, err));
    MEMRA_TRY(load_tokens(t, d, err));
    MEMRA_TRY(load_bytes(t, err));
    MEMRA_TRY(load_merges(t, d, err));
    MEMRA_TRY(load_specials(t, err));
    *out = t;
    return MEMRA_OK;
fail:
    memra_tokenizer_close(t);
    return rc;
}

/* ============================================================ GGUF metadata */

/* A string KV, NUL-terminated into buf; absent → MEMRA_ERR_NOT_FOUND without touching err. */
static int gguf_str(const memra_gguf *g, const char *key, char *buf, size_t n, int required,
                    memra_err *err)
{
    if (memra_gguf_find_kv(g, key) < 0)
        return required ? MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                                     "%s is missing: the "
                                     "tokenizer is not guessed",
                                     key)
                        : MEMRA_ERR_NOT_FOUND;
    return memra_gguf_get_str(g, key, buf, n, err);
}

static int gguf_opt_id(const memra_gguf *g, const char *key, int32_t *out, memra_err *err)
{
    if (memra_gguf_find_kv(g, key) < 0)
        return MEMRA_OK;
    uint32_t v;
    int rc = memra_gguf_get_u32(g, key, &v, err);
    if (rc != MEMRA_OK)
        return rc;
    if (v > INT32_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s = %u is not a token id", key, v);
    *out = (int32_t)v;
    return MEMRA_OK;
}

/* A string array KV as memra_tok_str views into the mapping (the array is malloc'ed). */
static int gguf_str_array(const memra_gguf *g, const char *key, memra_tok_str **out, uint32_t *n,
                          memra_err *err)
{
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s is missing", key);
    if (memra_gguf_kv_type(g, i) != MEMRA_GGUF_ARRAY ||
        memra_gguf_kv_arr_type(g, i) != MEMRA_GGUF_STRING)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s is not an array of strings", key);
    uint64_t len = memra_gguf_kv_arr_len(g, i);
    if (len > INT32_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s has %llu entries", key,
                          (unsigned long long)len);
    *out = malloc((len ? len : 1) * sizeof **out);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s", key);
    for (uint64_t j = 0; j < len; j++) {
        memra_gguf_str s = memra_gguf_kv_str(g, i, j);
        (*out)[j].ptr = s.ptr;
        (*out)[j].len = (size_t)s.len;
    }
    *n = (uint32_t)len;
    return MEMRA_OK;
}

static int gguf_token_types(const memra_gguf *g, uint32_t n_tokens, int32_t **out, memra_err *err)
{
    const char *key = "tokenizer.ggml.token_type";
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_OK; /* optional: all NORMAL */
    memra_gguf_vtype et = memra_gguf_kv_arr_type(g, i);
    if (memra_gguf_kv_type(g, i) != MEMRA_GGUF_ARRAY ||
        (et != MEMRA_GGUF_INT32 && et != MEMRA_GGUF_UINT32))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s is not an array of int32", key);
    if (memra_gguf_kv_arr_len(g, i) != n_tokens)
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s has %llu entries for %u tokens", key,
                          (unsigned long long)memra_gguf_kv_arr_len(g, i), n_tokens);
    *out = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof **out);
    if (!*out)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s", key);
    const unsigned char *p = memra_gguf_kv_data(g, i);
    for (uint32_t j = 0; j < n_tokens; j++) /* the payload is not aligned: copy bytewise */
        memcpy(&(*out)[j], p + (size_t)j * 4, 4);
    return MEMRA_OK;
}

int memra_tokenizer_open_gguf(const memra_gguf *g, memra_tokenizer **out, memra_err *err)
{
    int rc;
    char model[32], pre[32];
    memra_tokenizer_desc d;
    memra_tok_str *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    memra_tokenizer_desc_init(&d);
    *out = NULL;
    MEMRA_TRY(gguf_str(g, "tokenizer.ggml.model", model, sizeof model, 1, err));
    MEMRA_TRY(gguf_str(g, "tokenizer.ggml.pre", pre, sizeof pre, 1, err));
    d.model = model;
    d.pre = pre;
    if (strcmp(model, "gpt2") != 0) { /* refuse before reading arrays we cannot use */
        rc = MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                        "tokenizer.ggml.model \"%s\" is not "
                        "supported (only \"gpt2\", byte-level BPE)",
                        model);
        goto fail;
    }
    MEMRA_TRY(gguf_str_array(g, "tokenizer.ggml.tokens", &tokens, &d.n_tokens, err));
    MEMRA_TRY(gguf_str_array(g, "tokenizer.ggml.merges", &merges, &d.n_merges, err));
    MEMRA_TRY(gguf_token_types(g, d.n_tokens, &types, err));
    d.tokens = tokens;
    d.merges = merges;
    d.token_types = types;
    MEMRA_TRY(gguf_opt_id(g, "tokenizer.ggml.bos_token_id", &d.bos_id, err));
    MEMRA_TRY(gguf_opt_id(g, "tokenizer.ggml.eos_token_id", &d.eos_id, err));
    MEMRA_TRY(gguf_opt_id(g, "tokenizer.ggml.eot_token_id", &d.eot_id, err));
    MEMRA_TRY(gguf_opt_id(g, "tokenizer.ggml.padding_token_id", &d.pad_id, err));
    MEMRA_TRY(gguf_opt_id(g, "tokenizer.ggml.unknown_token_id", &d.unk_id, err));
    if (memra_gguf_find_kv(g, "tokenizer.ggml.add_bos_token") >= 0)
        MEMRA_TRY(memra_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &d.add_bos, err));
    if (memra_gguf_find_kv(g, "tokenizer.ggml.add_eos_token") >= 0)
        MEMRA_TRY(memra_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &d.add_eos, err));
    int64_t ct = memra_gguf_find_kv(g, "tokenizer.chat_template");
    if (ct >= 0) {
        if (memra_gguf_kv_type(g, ct) != MEMRA_GGUF_STRING) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "tokenizer.chat_template is not a string");
            goto fail;
        }
        memra_gguf_str s = memra_gguf_kv_str(g, ct, 0);
        d.chat_template.ptr = s.ptr;
        d.chat_template.len = (size_t)s.len;
    }
    rc = memra_tokenizer_open(&d, out, err);
fail:
    free(tokens);
    free(merges);
    free(types);
    return rc;
}

/* ============================================================ accessors */

uint32_t memra_tokenizer_n_vocab(const memra_tokenizer *t)
{
    return t->n_tokens;
}
int32_t memra_tokenizer_bos(const memra_tokenizer *t)
{
    return t->bos;
}
int32_t memra_tokenizer_eos(const memra_tokenizer *t)
{
    return t->eos;
}
int32_t memra_tokenizer_pad(const memra_tokenizer *t)
{
    return t->pad;
}
const char *memra_tokenizer_pre(const memra_tokenizer *t)
{
    return t->pre;
}

int memra_tokenizer_is_eog(const memra_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_tokens && t->eog[id];
}

memra_token_type memra_tokenizer_token_type(const memra_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return MEMRA_TOKEN_UNDEFINED;
    return (memra_token_type)t->type[id];
}

memra_tok_str memra_tokenizer_token_text(const memra_tokenizer *t, int32_t id)
{
    memra_tok_str none = {NULL, 0};
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return none;
    return tok_text(t, id);
}

memra_tok_str memra_tokenizer_chat_template(const memra_tokenizer *t)
{
    memra_tok_str s = {t->chat_template, t->chat_template_len};
    return s;
}

/* ============================================================ encoding */

void memra_token_buf_free(memra_token_buf *b)
{
    if (!b)
        return;
    free(b->ids);
    b->ids = NULL;
    b->n = b->cap = 0;
}

static int buf_reserve(memra_token_buf *b, size_t extra, memra_err *err)
{
    if (b->n + extra <= b->cap)
        return MEMRA_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra)
        cap *= 2;
    int32_t *ids = realloc(b->ids, cap * sizeof *ids);
    if (!ids)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "token buffer of %zu ids", cap);
    b->ids = ids;
    b->cap = cap;
    return MEMRA_OK;
}

static int buf_push(memra_token_buf *b, int32_t id, memra_err *err)
{
    int rc = buf_reserve(b, 1, err);
    if (rc == MEMRA_OK)
        b->ids[b->n++] = id;
    return rc;
}

/* A candidate merge of the symbol at `pos` with its right neighbour. */
typedef struct bpe_cand {
    uint32_t rank;
    int32_t pos;
    int32_t left, right; /* the pair's ids when it was pushed; stale if either changed */
    int32_t merged;      /* the token the pair merges into */
} bpe_cand;

/* Per-call scratch: grows to the longest piece seen, reused for every piece. */
typedef struct bpe_scratch {
    int32_t *id, *prev, *next; /* [cap] symbol list over byte positions; id -1 = merged away */
    bpe_cand *heap;            /* [cap] min-heap on (rank, pos) */
    size_t cap, n_heap;
    pcre2_match_data *md;
    uint8_t *subject; /* [subject_cap] a segment with U+180E replaced, see below */
    size_t subject_cap;
} bpe_scratch;

static int cand_less(const bpe_cand *a, const bpe_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_scratch *s, bpe_cand c)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static bpe_cand heap_pop(bpe_scratch *s)
{
    bpe_cand top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const bpe_cand *best = &last;
        if (l < n && cand_less(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (l + 1 < n && cand_less(&s->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static int scratch_reserve(bpe_scratch *s, size_t n, memra_err *err)
{
    if (n <= s->cap)
        return MEMRA_OK;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n)
        cap *= 2;
    int32_t *id = realloc(s->id, cap * sizeof *id);
    if (id)
        s->id = id;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev)
        s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next)
        s->next = next;
    /* one candidate per adjacent pair alive at any time, plus one per merge: < 2 * n */
    bpe_cand *heap = realloc(s->heap, 2 * cap * sizeof *heap);
    if (heap)
        s->heap = heap;
    if (!id || !prev || !next || !heap)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "bpe scratch for a %zu-byte piece", n);
    s->cap = cap;
    return MEMRA_OK;
}

static void push_pair(const memra_tokenizer *t, bpe_scratch *s, int32_t pos)
{
    if (pos < 0 || s->next[pos] < 0)
        return;
    int32_t nx = s->next[pos];
    const merge_slot *m = merge_find(t, s->id[pos], s->id[nx]);
    if (m) {
        bpe_cand c = {m->rank, pos, s->id[pos], s->id[nx], m->id};
        heap_push(s, c);
    }
}

/* BPE over one pre-token piece p[0..n) (n > 0); appends the resulting ids. */
static int bpe_piece(const memra_tokenizer *t, bpe_scratch *s, const uint8_t *p, size_t n,
                     memra_token_buf *out, memra_err *err)
{
    int rc;
    if (n == 1)
        return buf_push(out, t->byte_token[p[0]], err);
    if (n > INT32_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "pre-token piece of %zu bytes", n);
    MEMRA_TRY(scratch_reserve(s, n, err));
    for (size_t i = 0; i < n; i++) {
        s->id[i] = t->byte_token[p[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, s, (int32_t)i);
    while (s->n_heap) {
        bpe_cand c = heap_pop(s);
        int32_t l = c.pos, r = s->next[l];
        /* stale: the left symbol was merged away or either side changed since the push */
        if (s->id[l] != c.left || r < 0 || s->id[r] != c.right)
            continue;
        s->id[l] = c.merged;
        s->id[r] = -1;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0)
            s->prev[s->next[r]] = l;
        push_pair(t, s, s->prev[l]);
        push_pair(t, s, l);
    }
    MEMRA_TRY(buf_reserve(out, n, err));
    for (int32_t i = 0; i >= 0; i = s->next[i])
        out->ids[out->n++] = s->id[i];
fail:
    return rc;
}

/* The subject PCRE2 matches. The reference (`tokenizers`, Oniguruma) reads \s as Unicode
 * White_Space; PCRE2's UCP \s is White_Space plus U+180E MONGOLIAN VOWEL SEPARATOR (its \h
 * list keeps it from before Unicode 6.3). So PCRE2 gets a copy in which every U+180E is
 * U+200B ZERO WIDTH SPACE: same UTF-8 length, and like U+180E in Oniguruma a Cf that is not
 * White_Space, so every class decides exactly as the reference does, and the pieces are cut
 * from the original text at the same offsets. Text without U+180E is matched in place. */
static const uint8_t *pcre_subject(bpe_scratch *s, const uint8_t *u, size_t n, memra_err *err)
{
    static const char mvs[3] = {(char)0xE1, (char)0xA0, (char)0x8E}; /* U+180E */
    static const uint8_t zwsp[3] = {0xE2, 0x80, 0x8B};               /* U+200B */
    const uint8_t *hit = memmem(u, n, mvs, 3);
    if (!hit)
        return u;
    if (n > s->subject_cap) {
        uint8_t *p = realloc(s->subject, n);
        if (!p) {
            MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "pre-tokenizer subject of %zu bytes", n);
            return NULL;
        }
        s->subject = p;
        s->subject_cap = n;
    }
    memcpy(s->subject, u, n);
    for (; hit; hit = memmem(hit + 3, n - (size_t)(hit + 3 - u), mvs, 3))
        memcpy(s->subject + (hit - u), zwsp, 3);
    return s->subject;
}

/* Splits segment s[0..n) with the pre-tokenizer pattern; every match and every gap between
 * matches is a piece ("isolated" behaviour of `tokenizers`' Split). The subject ends at the
 * segment end, so look-ahead never sees past an added token, as in `tokenizers`. */
static int encode_segment(const memra_tokenizer *t, bpe_scratch *s, const char *seg, size_t n,
                          memra_token_buf *out, memra_err *err)
{
    int rc = MEMRA_OK;
    size_t off = 0;
    const uint8_t *u = (const uint8_t *)seg, *subject = pcre_subject(s, u, n, err);
    if (!subject)
        return MEMRA_ERR_NOMEM;
    while (off < n) {
        int m = pcre2_match(t->re, subject, n, off, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            return bpe_piece(t, s, u + off, n - off, out, err);
        if (m < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(m, msg, sizeof msg);
            return MEMRA_FAIL(err, MEMRA_ERR_TOKENIZER, "pre-tokenizer match at byte %zu: %s", off,
                              (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match cannot happen with these patterns; step a char */
            size_t adv;
            utf8_step(u, n, ms, &adv);
            me = ms + adv;
        }
        if (ms > off)
            MEMRA_TRY(bpe_piece(t, s, u + off, ms - off, out, err));
        MEMRA_TRY(bpe_piece(t, s, u + ms, me - ms, out, err));
        off = me;
    }
fail:
    return rc;
}

/* The leftmost added token in s[from..n), longest at its position; -1 when none. */
static int32_t find_special(const memra_tokenizer *t, const char *s, size_t n, size_t from,
                            unsigned mask, size_t *at)
{
    for (size_t i = from; i < n; i++) {
        if (!(t->special_first[(uint8_t)s[i]] & mask))
            continue;
        uint8_t f = (uint8_t)s[i];
        for (uint32_t k = t->special_lo[f]; k < t->special_hi[f]; k++) {
            int32_t id = t->special[k];
            unsigned kind = t->type[id] == MEMRA_TOKEN_USER_DEFINED ? 1 : 2;
            memra_tok_str x = tok_text(t, id);
            if ((kind & mask) && x.len <= n - i && memcmp(x.ptr, s + i, x.len) == 0) {
                *at = i;
                return id;
            }
        }
    }
    return -1;
}

int memra_tokenizer_encode(const memra_tokenizer *t, const char *text, size_t len, unsigned flags,
                           memra_token_buf *out, memra_err *err)
{
    int rc;
    char *clean = NULL;
    bpe_scratch s = {0};
    if (!t || !out || (!text && len)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "encode: NULL argument");
        goto fail;
    }
    if (memra_utf8_valid_prefix(text, len) != len) {
        size_t clen;
        MEMRA_TRY(memra_utf8_sanitize(text, len, &clean, &clen, err));
        text = clean;
        len = clen;
    }
    s.md = pcre2_match_data_create(1, NULL);
    if (!s.md) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "pcre2 match data");
        goto fail;
    }
    if ((flags & MEMRA_TOKENIZE_ADD_SPECIAL) && t->add_bos && t->bos >= 0)
        MEMRA_TRY(buf_push(out, t->bos, err));
    unsigned mask = (flags & MEMRA_TOKENIZE_PARSE_SPECIAL) ? 3u : 1u;
    size_t pos = 0;
    while (pos < len) {
        size_t at = len;
        int32_t sp = find_special(t, text, len, pos, mask, &at);
        if (at > pos)
            MEMRA_TRY(encode_segment(t, &s, text + pos, at - pos, out, err));
        if (sp < 0)
            break;
        MEMRA_TRY(buf_push(out, sp, err));
        pos = at + (t->text_off[sp + 1] - t->text_off[sp]);
    }
    if ((flags & MEMRA_TOKENIZE_ADD_SPECIAL) && t->add_eos && t->eos >= 0)
        MEMRA_TRY(buf_push(out, t->eos, err));
    rc = MEMRA_OK;
fail:
    pcre2_match_data_free(s.md);
    free(s.id);
    free(s.prev);
    free(s.next);
    free(s.heap);
    free(s.subject);
    free(clean);
    return rc;
}

/* ============================================================ decoding */

int memra_tokenizer_piece(const memra_tokenizer *t, int32_t id, unsigned flags,
                          memra_tok_str *piece, memra_err *err)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "token id %d is outside the vocabulary "
                          "(%u tokens)",
                          id, t->n_tokens);
    uint8_t ty = t->type[id];
    piece->ptr = t->bytes + t->bytes_off[id];
    piece->len = (size_t)(t->bytes_off[id + 1] - t->bytes_off[id]);
    if ((ty == MEMRA_TOKEN_CONTROL || ty == MEMRA_TOKEN_UNKNOWN) &&
        !(flags & MEMRA_DETOK_RENDER_SPECIAL))
        piece->len = 0;
    return MEMRA_OK;
}

int memra_tokenizer_decode(const memra_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                           char **buf, size_t *len, memra_err *err)
{
    size_t total = *len;
    memra_tok_str p = {NULL, 0};
    for (size_t i = 0; i < n; i++) {
        int rc = memra_tokenizer_piece(t, ids[i], flags, &p, err);
        if (rc != MEMRA_OK)
            return rc;
        total += p.len;
    }
    char *b = realloc(*buf, total + 1);
    if (!b)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "decode of %zu bytes", total);
    for (size_t i = 0; i < n; i++) {
        memra_tokenizer_piece(t, ids[i], flags, &p, NULL);
        memcpy(b + *len, p.ptr, p.len);
        *len += p.len;
    }
    b[*len] = '\0';
    *buf = b;
    return MEMRA_OK;
}

struct memra_detok {
    const memra_tokenizer *t; /* borrowed */
    unsigned flags;
    uint8_t held[4]; /* an incomplete UTF-8 sequence (at most 3 bytes) */
    size_t n_held;
    uint8_t *in; /* [in_cap] held bytes + the new piece */
    size_t in_cap;
    char *out; /* [out_cap] the text returned by the last call */
    size_t out_cap;
};

int memra_detok_open(const memra_tokenizer *t, unsigned flags, memra_detok **out, memra_err *err)
{
    memra_detok *d = calloc(1, sizeof *d);
    if (!d)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "detokenizer");
    d->t = t;
    d->flags = flags;
    *out = d;
    return MEMRA_OK;
}

void memra_detok_reset(memra_detok *d)
{
    d->n_held = 0;
}

void memra_detok_close(memra_detok *d)
{
    if (!d)
        return;
    free(d->in);
    free(d->out);
    free(d);
}

/* Runs held bytes + p[0..n) through the sanitizer; keeps a trailing incomplete sequence
 * unless final. */
static int detok_feed(memra_detok *d, const char *p, size_t n, int final, const char **text,
                      size_t *len, memra_err *err)
{
    size_t m = d->n_held + n;
    if (m + 1 > d->in_cap || 3 * m + 1 > d->out_cap) {
        size_t ic = m + 64, oc = 3 * m + 64;
        uint8_t *in = realloc(d->in, ic);
        if (in) {
            d->in = in;
            d->in_cap = ic;
        }
        char *o = realloc(d->out, oc);
        if (o) {
            d->out = o;
            d->out_cap = oc;
        }
        if (!in || !o)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "detokenizer buffer of %zu bytes", oc);
    }
    memcpy(d->in, d->held, d->n_held);
    if (n)
        memcpy(d->in + d->n_held, p, n);
    size_t held;
    size_t o = utf8_sanitize_into(d->in, m, final, d->out, &held);
    memcpy(d->held, d->in + m - held, held);
    d->n_held = held;
    d->out[o] = '\0';
    *text = d->out;
    *len = o;
    return MEMRA_OK;
}

int memra_detok_push(memra_detok *d, int32_t id, const char **text, size_t *len, memra_err *err)
{
    memra_tok_str p = {NULL, 0};
    int rc = memra_tokenizer_piece(d->t, id, d->flags, &p, err);
    if (rc != MEMRA_OK)
        return rc;
    return detok_feed(d, p.ptr, p.len, 0, text, len, err);
}

int memra_detok_flush(memra_detok *d, const char **text, size_t *len, memra_err *err)
{
    return detok_feed(d, NULL, 0, 1, text, len, err);
}
