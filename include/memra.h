/*
 * memra.h — the one public header of memra, a static LLM decode engine.
 *
 * Anything not declared here is not API. Every fallible call returns int: MEMRA_OK (0) or a
 * MEMRA_ERR_* code (append-only). memra_strerror(code) gives static text for a code; the
 * detail (file, tensor, launch, CUDA error string) of the last failure of a call made on this
 * thread is memra_last_error().
 *
 * Worked example: greedy generation from a text prompt (examples/generate.c is this program,
 * built and run by the test suite; README.md "Embedding memra" has the rest):
 *
 *     memra_engine_config cfg;
 *     memra_engine_config_init(&cfg);
 *     cfg.model_path = "model.gguf";            // plans are generated in-process
 *     memra_engine *e;
 *     if (memra_engine_open(&cfg, &e) != MEMRA_OK) { puts(memra_last_error()); return 1; }
 *     int32_t ids[512];
 *     size_t n;
 *     memra_tokenize(e, "The sky is", 10, MEMRA_TEXT_ADD_SPECIAL, ids, 512, &n);
 *     memra_session *s;
 *     memra_session_open(e, NULL, &s);          // NULL sampling: greedy
 *     int32_t next;
 *     memra_session_feed(e, s, ids, n, &next);  // the prompt, one tick per token
 *     for (int i = 0; i < 32 && !memra_token_is_eog(e, next); i++) {
 *         memra_row row = {.session = s, .token = next};
 *         memra_step(e, &row, 1);               // or up to n_slots rows: one batched tick
 *         next = row.out_token;
 *     }
 *     memra_session_close(s);
 *     memra_engine_close(e);
 *
 * Threads: an engine and its sessions are driven by one thread at a time (a server's
 * scheduler thread); the text functions (tokenize, detokenize, chat formatting, token
 * queries) only read the engine and are safe from any number of threads, also while
 * another thread steps it. memra_last_error() is per thread.
 */
#ifndef MEMRA_H
#define MEMRA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes (append-only: never renumber) ---- */
enum {
    MEMRA_OK = 0,
    MEMRA_ERR_INVALID_ARG = 1, /* a caller passed a bad argument */
    MEMRA_ERR_IO = 2,          /* open/read/write/mmap failed */
    MEMRA_ERR_FORMAT = 3,      /* a file is malformed (GGUF, plan, JSON) */
    MEMRA_ERR_UNSUPPORTED = 4, /* valid but not supported: architecture, qtype, version */
    MEMRA_ERR_NOMEM = 5,       /* host allocation failed */
    MEMRA_ERR_NOT_FOUND = 6,   /* a key, tensor, file or id does not exist */
    MEMRA_ERR_PLAN = 7,        /* a plan failed validation */
    MEMRA_ERR_STALE_PLAN = 8,  /* plans were generated for another checkpoint */
    MEMRA_ERR_SCRIPT = 9,      /* a Lua plan script failed */
    MEMRA_ERR_CAPACITY = 10,   /* slots, context length or batch tier exhausted */
    MEMRA_ERR_CUDA = 11,       /* a CUDA driver/runtime/NVRTC call failed */
    MEMRA_ERR_TOKENIZER = 12,  /* tokenizer metadata or input problem */
    MEMRA_ERR_INTERNAL = 13,   /* an invariant broke: a bug in memra */
};

/* Static text for an error code; never NULL. */
const char *memra_strerror(int code);

/* The text of the last failure of a memra call made on this thread (the code's static text
 * plus its cause: "i/o error: open 'x.gguf': No such file or directory"); "" when no call on
 * this thread has failed yet. Valid until the next failing call on the thread. */
const char *memra_last_error(void);

/* "0.1.0" (the CMake project version). */
const char *memra_version(void);

/* Frees what a memra call returned as malloc'ed memory (detokenized text, chat text). */
void memra_free(void *p);

/* ---- engine: a checkpoint, its plans and a backend, with a pool of session slots ---- */
typedef struct memra_engine memra_engine;

enum {
    MEMRA_BACKEND_AUTO = 0, /* CUDA when a CUDA device is present, else CPU */
    MEMRA_BACKEND_CPU = 1,  /* the CPU plan backend (the reference; slow) */
    MEMRA_BACKEND_CUDA = 2, /* GPU 0: weights uploaded, one CUDA graph per tier */
};

typedef struct memra_engine_config {
    const char *model_path; /* GGUF checkpoint (qwen35, qwen35moe) */
    const char *plan_dir;   /* plans from memra-plan; NULL: generated in-process for `tiers`
                               into a temporary directory removed at close */
    int backend;            /* MEMRA_BACKEND_* */
    uint32_t n_slots;       /* sessions open at once (KV cache + recurrent state each) */
    uint32_t n_ctx;         /* tokens per session */
    uint32_t n_tiers;       /* in-process planning only: batch tiers; 0 = the planner's */
    uint32_t tiers[16];     /* default set 1, 2, 4, 8, 12, 16 */
    int no_graph;           /* CUDA: launch op by op instead of replaying graphs (same bits) */
} memra_engine_config;

/* backend AUTO, n_slots 16, n_ctx 4096, everything else 0 / NULL. */
void memra_engine_config_init(memra_engine_config *c);

/* Opens the checkpoint, plans it (plan_dir NULL) or loads and validates its plans (stale
 * plans of another checkpoint: MEMRA_ERR_STALE_PLAN), opens the tokenizer and the backend.
 * Codes: INVALID_ARG (config), IO, FORMAT, UNSUPPORTED (architecture, qtype, no CUDA driver
 * for MEMRA_BACKEND_CUDA), PLAN, SCRIPT, NOMEM, CUDA. *out is NULL on failure. */
int memra_engine_open(const memra_engine_config *c, memra_engine **out);
/* Closes every session still open, frees the engine. NULL is a no-op. */
void memra_engine_close(memra_engine *e);

typedef struct memra_engine_info {
    char arch[32];    /* "qwen35" */
    char backend[8];  /* "cpu" | "cuda" */
    char device[128]; /* the GPU's name, or "cpu" */
    uint32_t n_vocab, n_layer, n_embd;
    uint32_t n_ctx, n_slots;
    uint32_t n_tiers, tiers[16]; /* batch tiers of the plans; a tick takes the smallest >= rows */
    uint32_t max_rows;           /* the largest tier: rows per tick (memra_step splits beyond) */
    int32_t bos, eos;            /* -1 when the tokenizer has none */
    int has_tokenizer;           /* 0: the text functions fail with MEMRA_ERR_TOKENIZER */
    int has_chat_template;       /* a recognized chat template (memra_chat_apply works) */
} memra_engine_info;

int memra_engine_get_info(const memra_engine *e, memra_engine_info *out);

typedef struct memra_engine_stats {
    uint64_t ticks; /* ticks run since the engine opened */
    uint64_t rows;  /* rows those ticks advanced */
    double
        last_tick_ms; /* the last tick: device time (CUDA events) on CUDA, wall time on the CPU */
    double last_host_us; /* CUDA: host time of the last tick outside the wait for the GPU; CPU: 0 */
} memra_engine_stats;

int memra_engine_get_stats(const memra_engine *e, memra_engine_stats *out);

/* ---- text: the checkpoint's own tokenizer and chat template ---- */
enum {
    MEMRA_TEXT_ADD_SPECIAL = 1u << 0,   /* tokenize: BOS/EOS where the metadata asks for them */
    MEMRA_TEXT_PARSE_SPECIAL = 1u << 1, /* tokenize: match control tokens (<|im_start|>) */
    MEMRA_TEXT_RENDER_SPECIAL = 1u << 2 /* detokenize: control tokens as their text */
};

/* The ids of text[0..len) (any bytes: invalid UTF-8 becomes U+FFFD first). *n_ids is the
 * count; MEMRA_ERR_CAPACITY (ids untouched) when it exceeds cap, so ids = NULL, cap = 0
 * asks for the count. */
int memra_tokenize(const memra_engine *e, const char *text, size_t len, unsigned flags,
                   int32_t *ids, size_t cap, size_t *n_ids);
/* The text of ids (valid UTF-8, NUL-terminated, malloc'ed: memra_free). INVALID_ARG for an id
 * outside the vocabulary. */
int memra_detokenize(const memra_engine *e, const int32_t *ids, size_t n, unsigned flags,
                     char **text, size_t *len);
/* 1 when id ends a generation (EOS, <|im_end|>, ...), else 0. */
int memra_token_is_eog(const memra_engine *e, int32_t id);

/* Incremental detokenization as ids are sampled: only complete UTF-8 comes out; bytes of a
 * character split across tokens are held until it completes. *text stays valid until the
 * next call on the stream. flush ends it (a held partial character becomes U+FFFD). */
typedef struct memra_text_stream memra_text_stream;
int memra_text_stream_open(const memra_engine *e, unsigned flags, memra_text_stream **out);
int memra_text_stream_push(memra_text_stream *s, int32_t id, const char **text, size_t *len);
int memra_text_stream_flush(memra_text_stream *s, const char **text, size_t *len);
/* NULL is a no-op. A stream reads its engine's tokenizer: close it before the engine. */
void memra_text_stream_close(memra_text_stream *s);

typedef struct memra_chat_message {
    const char *role;              /* "system" (first only) | "user" | "assistant" | "tool" */
    const char *content;           /* UTF-8; NULL renders as "" */
    const char *reasoning_content; /* assistant only; NULL: none */
} memra_chat_message;

/* The checkpoint's chat template (Qwen3.5 / 3.6 ChatML, rendered by C; no Jinja) applied
 * to msgs: text to tokenize with MEMRA_TEXT_PARSE_SPECIAL. enable_thinking: -1 the
 * template's default, 0, 1. NOT_FOUND: the checkpoint has no template; UNSUPPORTED: one
 * memra does not recognize; INVALID_ARG: what the template itself refuses. */
int memra_chat_apply(const memra_engine *e, const memra_chat_message *msgs, size_t n,
                     int add_generation_prompt, int enable_thinking, char **text, size_t *len);

/* ---- sessions and ticks ---- */
typedef struct memra_sampling {
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;     /* <= 0: no top-k cut */
    float top_p;       /* outside (0, 1): no top-p cut */
    uint64_t seed;     /* with the session's position, the only input of the draw */
} memra_sampling;

/* Greedy: temperature 0, no cuts, seed 0. */
void memra_sampling_init(memra_sampling *s);

/* A sequence: one slot of the pool, position 0, its recurrent state zeroed. sampling NULL =
 * greedy. MEMRA_ERR_CAPACITY when every slot is taken. */
typedef struct memra_session memra_session;
int memra_session_open(memra_engine *e, const memra_sampling *sampling, memra_session **out);
/* Gives the slot back. NULL is a no-op. */
void memra_session_close(memra_session *s);
int memra_session_set_sampling(memra_session *s, const memra_sampling *sampling);
/* Tokens the session has consumed: the position its next token takes. */
uint32_t memra_session_pos(const memra_session *s);
/* 1 after a tick the session was in failed on the device (its state is lost: close it). */
int memra_session_failed(const memra_session *s);

/* One row of a step: `session` consumes `token` at its next position; out_token receives
 * the token sampled from the logits that follow, and logits (when not NULL) those n_vocab
 * floats. status is the row's own result: a bad row (NULL or foreign session, a session
 * twice in one step, a token outside the vocabulary, a full session (CAPACITY), a failed
 * session) is refused alone, with out_token -1 and nothing consumed, and the other rows
 * still run; a row whose tick failed has that tick's code and out_token -1; a row whose
 * logits could not be copied out has that code but a valid out_token (it advanced). */
typedef struct memra_row {
    memra_session *session;
    int32_t token;
    int32_t out_token; /* out */
    float *logits;     /* in: NULL, or [n_vocab] to receive the row's logits */
    int status;        /* out: MEMRA_OK or the row's error code */
} memra_row;

/* Advances every row's session by one token in as few batched ticks as possible (rows split
 * into ticks of at most max_rows; each tick takes the smallest tier that holds its rows).
 * The contract: a row's logits and sampled token are bit-identical to what the same session
 * gives stepped alone (memcmp; whatever the other rows, their number or their order).
 * Returns MEMRA_OK when every tick ran (refused rows say so in their status) or the first
 * failing tick's code (CUDA: its rows' sessions are marked failed, later ticks still run).
 * INVALID_ARG when rows is NULL or n is 0. */
int memra_step(memra_engine *e, memra_row *rows, size_t n);

/* Feeds a prompt: n ticks of this session alone, one token each; *next (may be NULL) gets
 * the token sampled after the last one. Batch prompts of several sessions by putting their
 * prompt tokens in memra_step rows instead (the same bits). CAPACITY when the prompt does
 * not fit the session; nothing is fed then. */
int memra_session_feed(memra_engine *e, memra_session *s, const int32_t *ids, size_t n,
                       int32_t *next);

/* ---- logging: one settable callback for everything the library reports ---- */
enum { MEMRA_LOG_ERROR = 0, MEMRA_LOG_WARN = 1, MEMRA_LOG_INFO = 2, MEMRA_LOG_DEBUG = 3 };
typedef void (*memra_log_fn)(int level, const char *msg, void *user);
/* fn = NULL restores the default (stderr, levels <= MEMRA_LOG_WARN). Not thread-safe with
 * concurrent logging; set it once at start-up. */
void memra_log_set_callback(memra_log_fn fn, void *user);
void memra_log_set_level(int max_level);

#ifdef __cplusplus
}
#endif
#endif /* MEMRA_H */
