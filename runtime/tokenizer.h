/*
 * tokenizer.h — the text <-> token-id boundary of the engine, driven entirely by GGUF
 * tokenizer metadata (tokenizer.ggml.*): byte-level BPE (model "gpt2") with the
 * pre-tokenizer split pattern that tokenizer.ggml.pre names, special/added tokens matched
 * before BPE, and a streaming detokenizer that only ever emits complete UTF-8.
 *
 * What it must not do: guess. An unknown tokenizer.ggml.model or tokenizer.ggml.pre, a merge
 * naming a token the vocabulary lacks, or an out-of-range special id is refused with
 * MEMRA_ERR_UNSUPPORTED / MEMRA_ERR_FORMAT and a message naming the key. It never normalizes
 * text (the GGUF carries no normalizer; see docs/readme-tokenizer.md for the NFC note).
 *
 * Invariants after a successful open:
 *   - every token text and every merge is copied (the tokenizer borrows nothing);
 *   - every merge (a, b) resolves to ids a, b and a result id whose text is a + b;
 *   - every byte value 0..255 has a token (its GPT-2 byte-level character), so any input
 *     bytes encode without an "unknown" token;
 *   - the tokenizer is immutable: encode/decode on one handle are safe from many threads
 *     (each call owns its scratch).
 *
 * Input bytes that are not valid UTF-8 are replaced, one U+FFFD per maximal invalid
 * subpart (the Unicode/WHATWG rule, identical to Python's bytes.decode("utf-8",
 * "replace")), before anything else: that is exactly the str the reference `tokenizers`
 * receives when a Python caller decodes the same bytes, so the ids match the reference.
 */
#ifndef MEMRA_TOKENIZER_H
#define MEMRA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type; GGUF stores INT32). */
typedef enum memra_token_type {
    MEMRA_TOKEN_UNDEFINED = 0,
    MEMRA_TOKEN_NORMAL = 1, /* byte-level BPE text; decoded through bytes_to_unicode */
    MEMRA_TOKEN_UNKNOWN = 2,
    MEMRA_TOKEN_CONTROL = 3,      /* special: <|im_start|>; matched only with PARSE_SPECIAL */
    MEMRA_TOKEN_USER_DEFINED = 4, /* added, not special: <think>; always matched */
    MEMRA_TOKEN_UNUSED = 5,       /* padding rows ([PAD248077]); never produced, render "" */
    MEMRA_TOKEN_BYTE = 6,         /* SentencePiece <0xNN>; not used by gpt2 vocabularies */
} memra_token_type;

/* A byte string that is not NUL-terminated (GGUF strings are not). */
typedef struct memra_tok_str {
    const char *ptr;
    size_t len;
} memra_tok_str;

/* Everything a tokenizer is built from: exactly the GGUF tokenizer metadata. All pointers
 * are borrowed for the duration of memra_tokenizer_open() only. */
typedef struct memra_tokenizer_desc {
    const char *model;           /* tokenizer.ggml.model: only "gpt2" */
    const char *pre;             /* tokenizer.ggml.pre: "qwen35" or "qwen2" */
    uint32_t n_tokens;           /* n_vocab */
    const memra_tok_str *tokens; /* [n_tokens] tokenizer.ggml.tokens, in id order */
    const int32_t *token_types;  /* [n_tokens] tokenizer.ggml.token_type; NULL: NORMAL */
    uint32_t n_merges;
    const memra_tok_str *merges;                    /* [n_merges] "left right", rank = index */
    int32_t bos_id, eos_id, eot_id, pad_id, unk_id; /* -1 when absent */
    int add_bos, add_eos;        /* tokenizer.ggml.add_bos_token / add_eos_token */
    memra_tok_str chat_template; /* tokenizer.chat_template; ptr NULL when absent */
} memra_tokenizer_desc;

/* A desc with every id -1, flags 0 and no arrays. */
void memra_tokenizer_desc_init(memra_tokenizer_desc *d);

typedef struct memra_tokenizer memra_tokenizer;
struct memra_gguf;

int memra_tokenizer_open(const memra_tokenizer_desc *d, memra_tokenizer **out, memra_err *err);
/* Reads the tokenizer.* keys of an opened GGUF (borrowed only during the call). */
int memra_tokenizer_open_gguf(const struct memra_gguf *g, memra_tokenizer **out, memra_err *err);
void memra_tokenizer_close(memra_tokenizer *t); /* NULL is a no-op */

uint32_t memra_tokenizer_n_vocab(const memra_tokenizer *t);
int32_t memra_tokenizer_bos(const memra_tokenizer *t); /* -1 when absent */
int32_t memra_tokenizer_eos(const memra_tokenizer *t);
int32_t memra_tokenizer_pad(const memra_tokenizer *t);
/* End of generation: eos, eot, and the CONTROL tokens llama.cpp also treats as such for
 * ChatML vocabularies (<|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>). */
int memra_tokenizer_is_eog(const memra_tokenizer *t, int32_t id);
memra_token_type memra_tokenizer_token_type(const memra_tokenizer *t, int32_t id);
/* The stored (GGUF) text of a token, e.g. "Ġthe"; {NULL, 0} for an invalid id. */
memra_tok_str memra_tokenizer_token_text(const memra_tokenizer *t, int32_t id);
/* Id of the token whose stored text is exactly s, or -1. */
int32_t memra_tokenizer_find(const memra_tokenizer *t, const char *s, size_t len);
/* The chat template the metadata carried; {NULL, 0} when absent. */
memra_tok_str memra_tokenizer_chat_template(const memra_tokenizer *t);
const char *memra_tokenizer_pre(const memra_tokenizer *t);

/* ---- encoding ---- */
typedef struct memra_token_buf {
    int32_t *ids; /* [n] */
    size_t n, cap;
} memra_token_buf;
void memra_token_buf_free(memra_token_buf *b); /* frees ids; the struct may be reused */

enum {
    /* Prepend BOS / append EOS when the metadata asks for it (add_bos / add_eos). */
    MEMRA_TOKENIZE_ADD_SPECIAL = 1u << 0,
    /* Match CONTROL (and UNKNOWN) token texts in the input. USER_DEFINED tokens are always
     * matched, as in llama.cpp and in `tokenizers` (added tokens). */
    MEMRA_TOKENIZE_PARSE_SPECIAL = 1u << 1,
};

/* Appends the ids of text[0..len) to out. Any bytes are accepted (see the header comment for
 * invalid UTF-8). MEMRA_ERR_NOMEM, or MEMRA_ERR_TOKENIZER if the regex engine fails. */
int memra_tokenizer_encode(const memra_tokenizer *t, const char *text, size_t len, unsigned flags,
                           memra_token_buf *out, memra_err *err);

/* ---- decoding ---- */
enum {
    /* Render CONTROL/UNKNOWN tokens as their text (default: they render as nothing). */
    MEMRA_DETOK_RENDER_SPECIAL = 1u << 0,
};

/* The raw bytes token id decodes to (NORMAL: byte-level decoded; USER_DEFINED: its text;
 * CONTROL: its text with RENDER_SPECIAL, else empty; UNUSED/BYTE/UNDEFINED: empty). The
 * bytes may be a partial UTF-8 sequence. MEMRA_ERR_INVALID_ARG for an id out of range. */
int memra_tokenizer_piece(const memra_tokenizer *t, int32_t id, unsigned flags,
                          memra_tok_str *piece, memra_err *err);

/* Appends the concatenated raw bytes of ids to *buf (realloc'ed; caller frees). Exact
 * inverse of encode for valid UTF-8 text; not UTF-8-sanitized (use the detokenizer for
 * display). */
int memra_tokenizer_decode(const memra_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                           char **buf, size_t *len, memra_err *err);

/* Streaming detokenizer: push ids one at a time (as they are sampled) and get back only
 * complete UTF-8 text. Bytes of a sequence split across tokens are held until complete;
 * an invalid subpart becomes U+FFFD (same rule as encoding). flush() ends the stream:
 * a held incomplete sequence becomes one U+FFFD. The returned text stays valid until the
 * next call on the handle. */
typedef struct memra_detok memra_detok;
int memra_detok_open(const memra_tokenizer *t, unsigned flags, memra_detok **out,
                     memra_err *err); /* t is borrowed and must outlive the handle */
int memra_detok_push(memra_detok *d, int32_t id, const char **text, size_t *len, memra_err *err);
int memra_detok_flush(memra_detok *d, const char **text, size_t *len, memra_err *err);
void memra_detok_reset(memra_detok *d);
void memra_detok_close(memra_detok *d);

/* ---- UTF-8 helpers shared with chat formatting and tests ---- */
/* Length of the longest prefix of s that is valid UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
size_t memra_utf8_valid_prefix(const char *s, size_t len);
/* Copies s to *out (malloc'ed) replacing each maximal invalid subpart with U+FFFD. */
int memra_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len, memra_err *err);

#endif
