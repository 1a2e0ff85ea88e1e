/*
 * forge_vocab.c — the forge's vocabulary container and two providers: the synthetic one (a
 * real byte-level BPE vocabulary — GPT-2 byte-to-unicode alphabet, ranked merges — trained
 * deterministically on a small built-in English text) and the GGUF one (the tokenizer.* keys
 * of an existing file, e.g. a real Qwen3.5 checkpoint).
 *
 * Must not: depend on the host for the synthetic vocabulary (locale, libc sort order beyond
 * strcmp), or hand out a vocabulary that memra_forge_vocab_validate() rejects.
 * Invariants: token ids 0..255 are the 256 byte tokens in GPT-2 order; every merge "a b"
 * has a, b and ab in the vocabulary; merged tokens follow in the order they were first
 * created; the specials follow the regular tokens; padding "[PAD<id>]" comes last. The
 * same (n_vocab, max_merges) always gives the same vocabulary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forge.h"
#include "gguf.h"

/* ===================================================================================== */
/* Container                                                                             */
/* ===================================================================================== */

int memra_forge_vocab_alloc(uint32_t n_tokens, uint32_t n_merges, memra_forge_vocab **out,
                            memra_err *err)
{
    *out = NULL;
    memra_forge_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory for the header");
    v->n_tokens = n_tokens;
    v->n_merges = n_merges;
    v->bos_id = v->eos_id = v->pad_id = -1;
    v->tokens = calloc(n_tokens ? n_tokens : 1, sizeof *v->tokens);
    v->token_lens = calloc(n_tokens ? n_tokens : 1, sizeof *v->token_lens);
    v->token_types = calloc(n_tokens ? n_tokens : 1, sizeof *v->token_types);
    v->merges = calloc(n_merges ? n_merges : 1, sizeof *v->merges);
    if (!v->tokens || !v->token_lens || !v->token_types || !v->merges) {
        memra_forge_vocab_free(v);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory for %u tokens", n_tokens);
    }
    *out = v;
    return MEMRA_OK;
}

void memra_forge_vocab_free(memra_forge_vocab *v)
{
    if (!v)
        return;
    for (uint32_t i = 0; v->tokens && i < v->n_tokens; i++)
        free(v->tokens[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->token_lens);
    free(v->token_types);
    free(v->merges);
    free(v->model);
    free(v->pre);
    free(v->chat_template);
    free(v);
}

int memra_forge_vocab_set_token(memra_forge_vocab *v, uint32_t i, const char *text, size_t len,
                                int32_t type, memra_err *err)
{
    if (i >= v->n_tokens)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: token %u >= %u", i, v->n_tokens);
    char *s = malloc(len + 1);
    if (!s)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory for token %u", i);
    memcpy(s, text, len);
    s[len] = '\0';
    free(v->tokens[i]);
    v->tokens[i] = s;
    v->token_lens[i] = len;
    v->token_types[i] = type;
    return MEMRA_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- a string -> id hash set, so validating a 250k-token vocabulary stays linear ---- */
typedef struct str_index {
    uint32_t *slot; /* [cap] token id + 1, 0 = empty */
    uint32_t cap;   /* power of two, >= 2 * n */
    const memra_forge_vocab *v;
} str_index;

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static long str_index_find(const str_index *x, const char *s, size_t n)
{
    for (uint32_t h = (uint32_t)fnv1a(s, n) & (x->cap - 1);; h = (h + 1) & (x->cap - 1)) {
        uint32_t id = x->slot[h];
        if (id == 0)
            return -1;
        if (x->v->token_lens[id - 1] == n && memcmp(x->v->tokens[id - 1], s, n) == 0)
            return (long)(id - 1);
    }
}

/* Indexes the tokens; a duplicate token text keeps its first id. */
static int str_index_build(str_index *x, const memra_forge_vocab *v, memra_err *err)
{
    x->v = v;
    x->cap = 16;
    while (x->cap < 2u * v->n_tokens + 2u)
        x->cap *= 2;
    x->slot = calloc(x->cap, sizeof *x->slot);
    if (!x->slot)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory for the token index");
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (str_index_find(x, v->tokens[i], v->token_lens[i]) >= 0)
            continue;
        uint32_t h = (uint32_t)fnv1a(v->tokens[i], v->token_lens[i]) & (x->cap - 1);
        while (x->slot[h])
            h = (h + 1) & (x->cap - 1);
        x->slot[h] = i + 1;
    }
    return MEMRA_OK;
}

static int validate_merges(const memra_forge_vocab *v, const str_index *x, memra_err *err)
{
    char buf[1024];
    for (uint32_t m = 0; m < v->n_merges; m++) {
        const char *s = v->merges[m];
        const char *sp = s ? strchr(s, ' ') : NULL;
        if (!sp || sp == s || sp[1] == '\0' || strchr(sp + 1, ' '))
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "vocab: merge %u is not \"a b\"", m);
        size_t la = (size_t)(sp - s), lb = strlen(sp + 1);
        if (la + lb >= sizeof buf)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "vocab: merge %u too long", m);
        memcpy(buf, s, la);
        memcpy(buf + la, sp + 1, lb);
        if (str_index_find(x, s, la) < 0 || str_index_find(x, sp + 1, lb) < 0 ||
            str_index_find(x, buf, la + lb) < 0)
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                              "vocab: merge %u \"%s\" names a token not in the vocabulary", m, s);
    }
    return MEMRA_OK;
}

int memra_forge_vocab_validate(const memra_forge_vocab *v, memra_err *err)
{
    if (!v || v->n_tokens == 0 || !v->model)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: empty, or no tokenizer model");
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (!v->tokens[i])
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: token %u not set", i);
        if (v->token_types[i] < MEMRA_TOKEN_TYPE_NORMAL ||
            v->token_types[i] > MEMRA_TOKEN_TYPE_BYTE)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: token %u has type %d", i,
                              v->token_types[i]);
    }
    const int32_t ids[3] = {v->bos_id, v->eos_id, v->pad_id};
    for (int k = 0; k < 3; k++)
        if (ids[k] < -1 || ids[k] >= (int64_t)v->n_tokens)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: special id %d out of range",
                              ids[k]);
    str_index x = {0};
    int rc = str_index_build(&x, v, err);
    if (rc == MEMRA_OK)
        rc = validate_merges(v, &x, err);
    free(x.slot);
    return rc;
}

/* ===================================================================================== */
/* Synthetic byte-level BPE                                                               */
/* ===================================================================================== */

/* An original text (written for this file) the merges are trained on: prose, digits,
 * punctuation, a little code, so the vocabulary has realistic word pieces. */
static const char *const k_corpus[] = {
    "The river town woke slowly in the grey light of an early winter morning.",
    "Mara walked past the bakery, where the first bread of the day was cooling on the rack,",
    "and counted the boats tied along the stone wall: 3 red, 7 blue, and 12 painted white.",
    "Her brother had said the weather would turn before noon, and he was usually right.",
    "She thought about the letter in her pocket, the one she had not yet found the courage",
    "to open, and about the train that would leave the station at 10:45 for the capital.",
    "\"You are late again,\" said the old man who kept the library, smiling as he said it.",
    "\"The books do not mind,\" she answered, \"and neither, I think, do you.\"",
    "Inside, the reading room smelled of paper, dust and the oil of the small brass lamps.",
    "She found the atlas on the third shelf and opened it to the map of the northern coast,",
    "where the roads ended and the names of the villages grew shorter and stranger.",
    "A model that reads text one token at a time must remember what came before it;",
    "the state it carries forward is small, but it has to hold the whole story so far.",
    "In the afternoon the wind rose, the sky turned the colour of slate, and the first",
    "drops of rain began to fall on the market square, scattering the pigeons and the people.",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; i++) { sum += x[i] * w[i]; }\n",
    "The numbers were simple: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2048, 4096.",
    "When the evening came, the lamps were lit one by one along the river, and the water",
    "carried their reflections down towards the sea, where the night was already waiting.",
    "What matters most is not the speed of the answer but whether the answer is right,",
    "and whether the same question asked twice will always receive the same reply.",
    "They talked for a long time about the past, about the summers they had spent by the",
    "lake, about friends who had moved away, and about the small things that had changed.",
    "Every morning the teacher wrote a new sentence on the board, and every morning the",
    "children copied it into their notebooks, slowly, carefully, one letter after another.",
    "Questions? Answers! Lists: apples, pears, plums; colours: green, yellow, orange.",
    "The engine read the weights once for all the rows of the batch, and that was the",
    "whole secret of its speed: memory is slow, arithmetic is cheap, and waiting is costly.",
    "On Sunday the family walked up the hill behind the church to see the view over the",
    "valley, the fields divided by hedges, the farms with their red roofs, and far away the",
    "thin silver line of the river winding between the trees towards the distant mountains.",
    "Grandmother told the story of the great flood of 1953, when the water reached the",
    "second step of the town hall and the mayor rowed a small boat down the main street.",
    "Nobody believed her, of course, until she showed them the photograph in the kitchen.",
    "The station master checked his watch, blew the whistle, and waved the green flag;",
    "slowly, heavily, the train began to move, and the platform slid away behind them.",
    "Through the window she watched the houses thin out, then the gardens, then the woods,",
    "until there was nothing but open country under a wide and changing sky.",
    "She opened the letter at last. It was short, written in a careful hand, and it asked",
    "her only one question, which she would spend the rest of the journey trying to answer.",
    "import math\nprint(math.sqrt(2), math.pi, [x * x for x in range(10)])\n",
    "if (err != NULL) { fprintf(stderr, \"error: %s\\n\", msg); return -1; }\n",
    "Temperatures fell to minus 12 degrees during the night, the coldest in 40 years.",
    "Remember: measure twice, cut once; test early, test often; and write things down.",
    "The kitchen was warm and bright, full of the smell of onions, butter and fresh herbs,",
    "and the radio in the corner was playing an old song that everyone seemed to know.",
    "Several students raised their hands, but the professor kept talking, drawing another",
    "diagram on the board: arrows, boxes, numbers, and a question mark in the middle.",
    "Which path is shorter, the one through the forest or the one around the lake? Neither,",
    "said the guide, because the shortest path is always the one you already know well.",
};

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes map to themselves, the other 68
 * bytes to U+0100.. in byte order. order[k] is the byte of token id k (GPT-2 order). */
static void gpt2_byte_alphabet(uint16_t cp[256], uint8_t order[256])
{
    int k = 0, extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (printable) {
            cp[b] = (uint16_t)b;
            order[k++] = (uint8_t)b;
        }
    }
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (!printable) {
            cp[b] = (uint16_t)(256 + extra++);
            order[k++] = (uint8_t)b;
        }
    }
}

static size_t utf8_put(char *dst, uint16_t c)
{
    if (c < 0x80) {
        dst[0] = (char)c;
        return 1;
    }
    dst[0] = (char)(0xC0 | (c >> 6));
    dst[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* Training state: unique pre-tokenized words as symbol-id sequences with counts. */
typedef struct bpe_word {
    uint32_t *sym; /* [len] token ids */
    uint32_t len;
    uint32_t count;
} bpe_word;

typedef struct bpe_train {
    bpe_word *w;
    uint32_t n_w, cap_w;
    char **text;       /* [n_text] token text, grows with merges */
    uint32_t *text_len;
    uint32_t n_text, cap_text;
} bpe_train;

/* Pre-tokenizer (ASCII subset of the GPT-2/Qwen rule): " ?[A-Za-z]+", " ?[0-9]" (digits
 * one by one, as Qwen), " ?[^ A-Za-z0-9\n]+", "\n+", " +". Returns the piece length. */
static size_t pretok_next(const char *s)
{
    size_t i = 0;
#define IS_AL(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define IS_DG(c) ((c) >= '0' && (c) <= '9')
    if (s[0] == '\n') {
        while (s[i] == '\n')
            i++;
        return i;
    }
    if (s[0] == ' ' && (s[1] == ' ' || s[1] == '\n' || s[1] == '\0')) {
        while (s[i] == ' ')
            i++;
        return i;
    }
    if (s[0] == ' ')
        i = 1;
    if (IS_AL(s[i])) {
        while (IS_AL(s[i]))
            i++;
    } else if (IS_DG(s[i])) {
        i++;
    } else {
        while (s[i] && s[i] != ' ' && s[i] != '\n' && !IS_AL(s[i]) && !IS_DG(s[i]))
            i++;
    }
#undef IS_AL
#undef IS_DG
    return i;
}

static int add_word(bpe_train *t, const char *s, size_t n, const uint32_t byte_id[256])
{
    for (uint32_t k = 0; k < t->n_w; k++) {
        bpe_word *w = &t->w[k];
        if (w->len != n)
            continue;
        size_t j = 0;
        while (j < n && w->sym[j] == byte_id[(uint8_t)s[j]])
            j++;
        if (j == n) {
            w->count++;
            return 0;
        }
    }
    if (t->n_w == t->cap_w) {
        uint32_t cap = t->cap_w ? 2 * t->cap_w : 256;
        bpe_word *nw = realloc(t->w, cap * sizeof *nw);
        if (!nw)
            return -1;
        t->w = nw;
        t->cap_w = cap;
    }
    bpe_word *w = &t->w[t->n_w];
    w->sym = malloc(n * sizeof *w->sym);
    if (!w->sym)
        return -1;
    for (size_t j = 0; j < n; j++)
        w->sym[j] = byte_id[(uint8_t)s[j]];
    w->len = (uint32_t)n;
    w->count = 1;
    t->n_w++;
    return 0;
}

static int add_text(bpe_train *t, const char *s, size_t n)
{
    if (t->n_text == t->cap_text) {
        uint32_t cap = t->cap_text ? 2 * t->cap_text : 1024;
        char **nt = realloc(t->text, cap * sizeof *nt);
        if (!nt)
            return -1;
        t->text = nt;
        uint32_t *nl = realloc(t->text_len, cap * sizeof *nl);
        if (!nl)
            return -1;
        t->text_len = nl;
        t->cap_text = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return -1;
    memcpy(c, s, n);
    c[n] = '\0';
    t->text[t->n_text] = c;
    t->text_len[t->n_text] = (uint32_t)n;
    t->n_text++;
    return 0;
}

static void bpe_train_free(bpe_train *t)
{
    for (uint32_t k = 0; k < t->n_w; k++)
        free(t->w[k].sym);
    for (uint32_t k = 0; k < t->n_text; k++)
        free(t->text[k]);
    free(t->w);
    free(t->text);
    free(t->text_len);
}

/* Pair counts: an open-addressing table keyed by (a << 16 | b); ids stay below 2^16 because
 * the merge budget is bounded in memra_forge_vocab_synthetic. */
#define PAIR_CAP (1u << 16)
typedef struct pair_table {
    uint32_t *key; /* [PAIR_CAP] */
    uint32_t *cnt; /* [PAIR_CAP], 0 = empty slot */
} pair_table;

/* The pair with the highest weighted count; ties go to the smallest (left, right) ids.
 * Returns 0 when no word has two symbols left. */
static int best_pair(const bpe_train *t, pair_table *pt, uint32_t *pa, uint32_t *pb)
{
    uint32_t *key = pt->key, *cnt = pt->cnt;
    const uint32_t CAP = PAIR_CAP;
    memset(cnt, 0, CAP * sizeof *cnt);
    uint64_t best = 0;
    uint32_t best_key = 0;
    for (uint32_t k = 0; k < t->n_w; k++) {
        const bpe_word *w = &t->w[k];
        for (uint32_t j = 0; j + 1 < w->len; j++) {
            uint32_t kk = w->sym[j] << 16 | w->sym[j + 1];
            uint32_t h = (kk * 2654435761u) >> 16;
            while (cnt[h] && key[h] != kk)
                h = (h + 1) & (CAP - 1);
            key[h] = kk;
            cnt[h] += w->count;
            if (cnt[h] > best || (cnt[h] == best && kk < best_key)) {
                best = cnt[h];
                best_key = kk;
            }
        }
    }
    if (best == 0)
        return 0;
    *pa = best_key >> 16;
    *pb = best_key & 0xFFFF;
    return 1;
}

static void apply_merge(bpe_train *t, uint32_t a, uint32_t b, uint32_t id)
{
    for (uint32_t k = 0; k < t->n_w; k++) {
        bpe_word *w = &t->w[k];
        uint32_t o = 0;
        for (uint32_t j = 0; j < w->len; j++) {
            if (j + 1 < w->len && w->sym[j] == a && w->sym[j + 1] == b) {
                w->sym[o++] = id;
                j++;
            } else {
                w->sym[o++] = w->sym[j];
            }
        }
        w->len = o;
    }
}

/* Tokens 0..255 (bytes) and the words of the corpus. */
static int bpe_seed(bpe_train *t)
{
    uint16_t cp[256];
    uint8_t order[256];
    uint32_t byte_id[256];
    gpt2_byte_alphabet(cp, order);
    for (int k = 0; k < 256; k++) {
        char u[2];
        size_t n = utf8_put(u, cp[order[k]]);
        if (add_text(t, u, n))
            return -1;
        byte_id[order[k]] = (uint32_t)k;
    }
    for (size_t l = 0; l < sizeof k_corpus / sizeof k_corpus[0]; l++) {
        const char *s = k_corpus[l];
        for (size_t n; *s; s += n) {
            n = pretok_next(s);
            if (add_word(t, s, n, byte_id))
                return -1;
        }
    }
    return 0;
}

/* Runs up to max_merges merges; *merges gets "a b" strings (n of them). */
static int bpe_run(bpe_train *t, uint32_t max_merges, char ***merges, uint32_t *n)
{
    *merges = calloc(max_merges ? max_merges : 1, sizeof **merges);
    pair_table pt = {malloc(PAIR_CAP * sizeof(uint32_t)), malloc(PAIR_CAP * sizeof(uint32_t))};
    int rc = *merges && pt.key && pt.cnt ? 0 : -1;
    *n = 0;
    uint32_t a, b;
    while (rc == 0 && *n < max_merges && best_pair(t, &pt, &a, &b)) {
        size_t la = t->text_len[a], lb = t->text_len[b];
        char *m = malloc(la + lb + 2), *cat = malloc(la + lb + 1);
        if (!m || !cat) {
            free(m);
            free(cat);
            rc = -1;
            break;
        }
        memcpy(m, t->text[a], la);
        m[la] = ' ';
        memcpy(m + la + 1, t->text[b], lb + 1);
        memcpy(cat, t->text[a], la);
        memcpy(cat + la, t->text[b], lb + 1);
        (*merges)[(*n)++] = m;
        uint32_t id = t->n_text;
        for (uint32_t k = 256; k < t->n_text; k++)
            if (t->text_len[k] == la + lb && memcmp(t->text[k], cat, la + lb) == 0)
                id = k; /* the same string from another split reuses its id */
        rc = id == t->n_text && add_text(t, cat, la + lb) ? -1 : 0;
        free(cat);
        if (rc == 0)
            apply_merge(t, a, b, id);
    }
    free(pt.key);
    free(pt.cnt);
    return rc;
}

static const char *const k_specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                         "<think>", "</think>"};
static const int32_t k_special_types[] = {MEMRA_TOKEN_TYPE_CONTROL, MEMRA_TOKEN_TYPE_CONTROL,
                                          MEMRA_TOKEN_TYPE_CONTROL, MEMRA_TOKEN_TYPE_USER_DEFINED,
                                          MEMRA_TOKEN_TYPE_USER_DEFINED};
#define N_SPECIALS 5

/* ChatML, the format Qwen models use (written for this file). */
static const char k_chat_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/* Copies trained tokens, specials, padding and the tokenizer settings into v. */
static int fill_vocab(memra_forge_vocab *v, const bpe_train *t, char **merges, uint32_t n_regular,
                      memra_err *err)
{
    int rc = MEMRA_OK;
    for (uint32_t i = 0; i < n_regular; i++)
        MEMRA_TRY(memra_forge_vocab_set_token(v, i, t->text[i], t->text_len[i],
                                              MEMRA_TOKEN_TYPE_NORMAL, err));
    for (uint32_t k = 0; k < N_SPECIALS; k++)
        MEMRA_TRY(memra_forge_vocab_set_token(v, n_regular + k, k_specials[k],
                                              strlen(k_specials[k]), k_special_types[k], err));
    for (uint32_t i = n_regular + N_SPECIALS; i < v->n_tokens; i++) {
        char pad[32];
        int n = snprintf(pad, sizeof pad, "[PAD%u]", i);
        MEMRA_TRY(memra_forge_vocab_set_token(v, i, pad, (size_t)n, MEMRA_TOKEN_TYPE_UNUSED, err));
    }
    for (uint32_t m = 0; m < v->n_merges; m++) {
        v->merges[m] = merges[m];
        merges[m] = NULL;
    }
    v->model = dup_str("gpt2");
    v->pre = dup_str("qwen35");
    v->chat_template = dup_str(k_chat_template);
    if (!v->model || !v->pre || !v->chat_template)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory for tokenizer strings");
    v->bos_id = (int32_t)n_regular;     /* <|endoftext|> */
    v->pad_id = (int32_t)n_regular;     /* <|endoftext|> */
    v->eos_id = (int32_t)n_regular + 2; /* <|im_end|> */
    v->add_bos = 0;
fail:
    return rc;
}

int memra_forge_vocab_synthetic(uint32_t n_vocab, uint32_t max_merges, memra_forge_vocab **out,
                                memra_err *err)
{
    *out = NULL;
    if (max_merges > 30000) /* keeps token ids < 2^16 for the pair table in best_pair() */
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "vocab: max_merges %u > 30000", max_merges);
    bpe_train t = {0};
    char **merges = NULL;
    uint32_t n_merges = 0;
    int rc = MEMRA_OK;
    memra_forge_vocab *v = NULL;
    if (bpe_seed(&t) || bpe_run(&t, max_merges, &merges, &n_merges)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "vocab: no memory while training merges");
        goto fail;
    }
    uint32_t natural = t.n_text + N_SPECIALS;
    if (n_vocab != 0 && n_vocab < natural) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "vocab: n_vocab %u is smaller than the synthetic vocabulary (%u)", n_vocab,
                        natural);
        goto fail;
    }
    MEMRA_TRY(memra_forge_vocab_alloc(n_vocab ? n_vocab : natural, n_merges, &v, err));
    MEMRA_TRY(fill_vocab(v, &t, merges, t.n_text, err));
    *out = v;
    v = NULL;
fail:
    for (uint32_t m = 0; merges && m < n_merges; m++)
        free(merges[m]);
    free(merges);
    bpe_train_free(&t);
    memra_forge_vocab_free(v);
    return rc;
}

/* ===================================================================================== */
/* GGUF provider                                                                          */
/* ===================================================================================== */

static char *dup_gguf_str(memra_gguf_str s)
{
    if (!s.ptr || memchr(s.ptr, '\0', s.len) || s.len > ((uint64_t)1 << 30))
        return NULL;
    char *d = malloc(s.len + 1);
    if (d) {
        memcpy(d, s.ptr, s.len);
        d[s.len] = '\0';
    }
    return d;
}

/* An optional string key; *out stays NULL when absent. */
static int opt_str(const memra_gguf *g, const char *key, char **out, memra_err *err)
{
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_OK;
    if (memra_gguf_kv_type(g, i) != MEMRA_GGUF_STRING || !(*out = dup_gguf_str(
                                                               memra_gguf_kv_str(g, i, 0))))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "vocab: %s is not a string without NUL", key);
    return MEMRA_OK;
}

static int opt_id(const memra_gguf *g, const char *key, int32_t *out, memra_err *err)
{
    uint32_t v;
    if (memra_gguf_find_kv(g, key) < 0)
        return MEMRA_OK;
    int rc = memra_gguf_get_u32(g, key, &v, err);
    if (rc == MEMRA_OK && v > INT32_MAX)
        rc = MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "vocab: %s = %u out of range", key, v);
    if (rc == MEMRA_OK)
        *out = (int32_t)v;
    return rc;
}

/* Tokens and token types (types default to NORMAL). */
static int copy_tokens(const memra_gguf *g, int64_t ti, memra_forge_vocab *v, memra_err *err)
{
    int rc = MEMRA_OK;
    int64_t tt = memra_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (tt >= 0 && (memra_gguf_kv_type(g, tt) != MEMRA_GGUF_ARRAY ||
                    memra_gguf_kv_arr_type(g, tt) != MEMRA_GGUF_INT32 ||
                    memra_gguf_kv_arr_len(g, tt) != v->n_tokens))
        return MEMRA_FAIL(err, MEMRA_ERR_FORMAT,
                          "vocab: tokenizer.ggml.token_type is not an i32 array of %u", v->n_tokens);
    const uint8_t *types = tt >= 0 ? memra_gguf_kv_data(g, tt) : NULL;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        memra_gguf_str s = memra_gguf_kv_str(g, ti, i);
        int32_t type = MEMRA_TOKEN_TYPE_NORMAL;
        if (types)
            memcpy(&type, types + 4 * (size_t)i, 4); /* little-endian file, LE host */
        MEMRA_TRY(memra_forge_vocab_set_token(v, i, s.ptr ? s.ptr : "", (size_t)s.len, type, err));
    }
fail:
    return rc;
}

static int copy_merges(const memra_gguf *g, int64_t mi, memra_forge_vocab *v, memra_err *err)
{
    for (uint32_t m = 0; m < v->n_merges; m++)
        if (!(v->merges[m] = dup_gguf_str(memra_gguf_kv_str(g, mi, m))))
            return MEMRA_FAIL(err, MEMRA_ERR_FORMAT, "vocab: merge %u is not a string", m);
    return MEMRA_OK;
}

static int string_array(const memra_gguf *g, const char *key, int64_t *idx, uint64_t *n)
{
    *idx = memra_gguf_find_kv(g, key);
    *n = 0;
    if (*idx < 0)
        return 0;
    if (memra_gguf_kv_type(g, *idx) != MEMRA_GGUF_ARRAY ||
        memra_gguf_kv_arr_type(g, *idx) != MEMRA_GGUF_STRING)
        return -1;
    *n = memra_gguf_kv_arr_len(g, *idx);
    return *n > UINT32_MAX ? -1 : 0;
}

int memra_forge_vocab_from_gguf(const char *path, memra_forge_vocab **out, memra_err *err)
{
    *out = NULL;
    memra_gguf *g = NULL;
    memra_forge_vocab *v = NULL;
    int64_t ti, mi;
    uint64_t n_tok, n_merge;
    int rc = MEMRA_OK;
    MEMRA_TRY(memra_gguf_open(path, &g, err));
    if (string_array(g, "tokenizer.ggml.tokens", &ti, &n_tok) || ti < 0 || n_tok == 0 ||
        string_array(g, "tokenizer.ggml.merges", &mi, &n_merge)) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "vocab: %s has no usable tokenizer.ggml.tokens "
                        "(or merges is not a string array)", path);
        goto fail;
    }
    MEMRA_TRY(memra_forge_vocab_alloc((uint32_t)n_tok, (uint32_t)n_merge, &v, err));
    MEMRA_TRY(copy_tokens(g, ti, v, err));
    MEMRA_TRY(copy_merges(g, mi, v, err));
    MEMRA_TRY(opt_str(g, "tokenizer.ggml.model", &v->model, err));
    MEMRA_TRY(opt_str(g, "tokenizer.ggml.pre", &v->pre, err));
    MEMRA_TRY(opt_str(g, "tokenizer.chat_template", &v->chat_template, err));
    MEMRA_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", &v->bos_id, err));
    MEMRA_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", &v->eos_id, err));
    MEMRA_TRY(opt_id(g, "tokenizer.ggml.padding_token_id", &v->pad_id, err));
    if (memra_gguf_find_kv(g, "tokenizer.ggml.add_bos_token") >= 0)
        MEMRA_TRY(memra_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err));
    if (!v->model) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND, "vocab: %s has no tokenizer.ggml.model", path);
        goto fail;
    }
    MEMRA_TRY(memra_forge_vocab_validate(v, err));
    *out = v;
    v = NULL;
fail:
    memra_forge_vocab_free(v);
    memra_gguf_close(g);
    return rc;
}
