/*
 * forge.h — the model forge: writes real GGUF v3 checkpoints of the Qwen3.5 hybrid
 * architectures (`qwen35`, `qwen35moe`) with seeded random weights, for tests, benches and
 * tools. Library memra_forge; the CLI is tools/memra-forge.c.
 *
 * What a forged file is: the complete metadata and the complete tensor set of
 * spec/qwen35.md §1-2 (exact names, shapes {ne0, ne1, ne2}, orientation and types), in the
 * order llama-quantize lists tensors (see forge.c "Tensor order"), plus a tokenizer from a
 * pluggable vocabulary provider. Any GGUF reader (ours, gguf-py, llama.cpp) opens it as a
 * Qwen3.5 checkpoint; only the weights are synthetic.
 *
 * Determinism: every float weight is a pure function of (seed, tensor name, element index)
 * through a counter-based generator, so generation is parallel and the file bytes depend
 * only on (shape, type, seed, vocabulary): never on the thread count or the machine
 * (except for the libm expf/logf used by the two tiny GDN vectors ssm_a and ssm_dt.bias).
 * The same seed with a different --type gives the SAME underlying floats, encoded
 * differently, so quantization error can be measured between two forged files.
 *
 * Streaming: tensors are generated and quantized in row chunks and streamed through the GGUF
 * writer; memory use is a few chunk buffers, independent of the model size.
 *
 * The library never prints; progress goes through a callback (memra_forge_opts.progress).
 */
#ifndef MEMRA_FORGE_H
#define MEMRA_FORGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "qtype.h"

/* ---------------------------------------------------------------------------------------
 * Vocabulary: what the forge writes under tokenizer.*. A provider fills one of these; the
 * forge only reads it. Two providers are planned: the synthetic byte-level BPE vocabulary
 * (forge_vocab.c, below) and the real Qwen3.5 vocabulary (`--vocab qwen35`, another area).
 * Every pointer is owned by the struct and released by memra_forge_vocab_free(), so a
 * provider allocates with memra_forge_vocab_alloc() and fills the arrays.
 * ------------------------------------------------------------------------------------- */

/* llama.cpp token types (tokenizer.ggml.token_type values). */
enum {
    MEMRA_TOKEN_TYPE_NORMAL = 1,
    MEMRA_TOKEN_TYPE_UNKNOWN = 2,
    MEMRA_TOKEN_TYPE_CONTROL = 3,
    MEMRA_TOKEN_TYPE_USER_DEFINED = 4,
    MEMRA_TOKEN_TYPE_UNUSED = 5,
    MEMRA_TOKEN_TYPE_BYTE = 6,
};

typedef struct memra_forge_vocab {
    uint32_t n_tokens;
    char **tokens;        /* [n_tokens] token text (byte-level BPE: GPT-2 byte-to-unicode
                             mapped UTF-8); each also NUL-terminated for convenience */
    uint64_t *token_lens; /* [n_tokens] byte length of tokens[i], excluding the NUL */
    int32_t *token_types; /* [n_tokens] MEMRA_TOKEN_TYPE_* */
    uint32_t n_merges;
    char **merges;        /* [n_merges] "left right" in rank order, NUL-terminated */
    char *model;          /* tokenizer.ggml.model, e.g. "gpt2" */
    char *pre;            /* tokenizer.ggml.pre, e.g. "qwen35"; NULL = key not written */
    int32_t bos_id;       /* -1 = key not written */
    int32_t eos_id;       /* -1 = key not written */
    int32_t pad_id;       /* -1 = key not written */
    int add_bos;          /* tokenizer.ggml.add_bos_token */
    char *chat_template;  /* tokenizer.chat_template; NULL = key not written */
} memra_forge_vocab;

/* Zeroed arrays for n_tokens tokens and n_merges merges; ids set to -1. */
int memra_forge_vocab_alloc(uint32_t n_tokens, uint32_t n_merges, memra_forge_vocab **out,
                            memra_err *err);
void memra_forge_vocab_free(memra_forge_vocab *v); /* NULL is a no-op */
/* Set token i (copies len bytes of text). */
int memra_forge_vocab_set_token(memra_forge_vocab *v, uint32_t i, const char *text, size_t len,
                                int32_t type, memra_err *err);
/* Check a vocabulary is consistent: every token set, ids in range, every merge "a b" names
 * two tokens whose concatenation is a token. Any provider's output must pass. */
int memra_forge_vocab_validate(const memra_forge_vocab *v, memra_err *err);

/* The synthetic provider: a byte-level BPE vocabulary trained deterministically on a small
 * built-in English text (256 byte tokens in GPT-2 order, then up to max_merges merged
 * tokens, then the Qwen-style specials <|endoftext|> <|im_start|> <|im_end|> <think>
 * </think>), a ChatML chat template, eos = <|im_end|>, bos = pad = <|endoftext|>,
 * add_bos = false, model "gpt2", pre "qwen35". When n_vocab is larger than that, the
 * vocabulary is padded with "[PAD<id>]" tokens of type UNUSED (as the Qwen converter pads
 * to the embedding size); n_vocab = 0 keeps the natural size; a smaller nonzero n_vocab
 * fails. */
int memra_forge_vocab_synthetic(uint32_t n_vocab, uint32_t max_merges, memra_forge_vocab **out,
                                memra_err *err);
/* The GGUF provider: copies the tokenizer.* keys of an existing GGUF file (a real Qwen3.5
 * checkpoint, a vocabulary-only GGUF, or a forged file): tokens, token types (NORMAL when
 * absent), merges, model, pre, bos/eos/padding ids, add_bos_token, chat template. Fails
 * with MEMRA_ERR_NOT_FOUND when the file has no tokenizer.ggml.tokens / .model. */
int memra_forge_vocab_from_gguf(const char *path, memra_forge_vocab **out, memra_err *err);
/* Default merge budget of the synthetic vocabulary (tiny presets). */
#define MEMRA_FORGE_SYNTH_MERGES 768

/* ---------------------------------------------------------------------------------------
 * Shapes and presets (spec/qwen35.md §0 notation in the comments).
 * ------------------------------------------------------------------------------------- */
typedef struct memra_forge_shape {
    const char *name;            /* preset name */
    const char *arch;            /* "qwen35" | "qwen35moe" */
    uint32_t n_layer;            /* L */
    uint32_t n_embd;             /* D */
    uint32_t n_head;             /* Hq */
    uint32_t n_head_kv;          /* Hkv */
    uint32_t head_dim;           /* dh */
    uint32_t rope_dim;           /* R (partial rotary dims) */
    uint32_t n_ff;               /* F, dense FFN width (0 for MoE: key not written) */
    uint32_t ssm_n_group;        /* Hk, GDN key heads */
    uint32_t ssm_dt_rank;        /* Hv, GDN value heads */
    uint32_t ssm_d_state;        /* dk = dv */
    uint32_t ssm_d_conv;         /* K */
    uint32_t full_attn_interval; /* layer i is full attention iff (i+1) % this == 0 */
    uint32_t n_expert;           /* E (MoE only) */
    uint32_t n_expert_used;      /* k */
    uint32_t n_ff_exp;           /* Fe */
    uint32_t n_ff_shexp;         /* Fs */
    uint32_t n_vocab;            /* V; 0 = the vocabulary's own size */
    uint32_t n_ctx_train;        /* context_length */
    const char *provenance;      /* where the numbers come from */
} memra_forge_shape;

size_t memra_forge_n_presets(void);
const memra_forge_shape *memra_forge_preset_at(size_t i);
const memra_forge_shape *memra_forge_preset(const char *name); /* NULL when unknown */
/* rope.dimension_sections for a rope_dim: the R/2 rotary pairs split over t,h,w as evenly as
 * possible, larger first, 0 for e (R = 64 gives Qwen3.5's [11, 11, 10, 0]). */
void memra_forge_rope_sections(uint32_t rope_dim, int32_t out[4]);

/* ---------------------------------------------------------------------------------------
 * Options.
 * ------------------------------------------------------------------------------------- */
typedef enum memra_forge_mix {
    MEMRA_FORGE_MIX_NONE = 0, /* every matrix in opts.type */
    MEMRA_FORGE_MIX_Q4_K_M,   /* llama.cpp's Q4_K_M recipe (forge.c "Q4_K_M") */
} memra_forge_mix;

typedef struct memra_forge_progress {
    uint32_t tensor;       /* index of the tensor being written (file order) */
    uint32_t n_tensors;
    const char *name;      /* its name */
    uint64_t bytes_done;   /* tensor data bytes written so far, whole file */
    uint64_t bytes_total;  /* tensor data bytes of the whole file */
} memra_forge_progress;
typedef void (*memra_forge_progress_fn)(const memra_forge_progress *p, void *user);

typedef struct memra_forge_opts {
    const memra_forge_shape *shape; /* borrowed; default: the "tiny" preset */
    memra_forge_mix mix;            /* default MEMRA_FORGE_MIX_Q4_K_M */
    memra_qtype type;               /* matrix type when mix = NONE; default Q8_0 */
    uint64_t seed;                  /* default 1 */
    const memra_forge_vocab *vocab; /* borrowed; NULL = synthetic, padded to shape->n_vocab */
    uint32_t n_threads;             /* 0 = every online CPU (default) */
    uint32_t alignment;             /* 0 = no general.alignment key, data aligned to 32
                                       (default); else written and used (power of two) */
    memra_forge_progress_fn progress; /* NULL = none (default); called from the caller's
                                         thread after every chunk */
    void *progress_user;
} memra_forge_opts;

void memra_forge_opts_init(memra_forge_opts *o);
/* Parse a weight type name: "q4_k_m" (the mix) or one of f32 f16 bf16 q8_0 q4_0 q4_k q5_k
 * q6_k iq4_xs mxfp4 nvfp4 (any type memra_quantize_row supports). */
int memra_forge_parse_type(const char *s, memra_forge_opts *o, memra_err *err);
/* "q4_k_m" or the qtype name; static storage. */
const char *memra_forge_type_name(const memra_forge_opts *o);
/* llama_ftype written to general.file_type for these options (forge.c lists the map). */
uint32_t memra_forge_file_type(const memra_forge_opts *o);

/* ---------------------------------------------------------------------------------------
 * The tensor plan: what the file will contain, in file order.
 * ------------------------------------------------------------------------------------- */
typedef enum memra_forge_role {
    MEMRA_FORGE_TOKEN_EMBD,
    MEMRA_FORGE_OUTPUT_NORM,
    MEMRA_FORGE_OUTPUT,
    MEMRA_FORGE_ATTN_NORM,
    MEMRA_FORGE_POST_ATTN_NORM,
    MEMRA_FORGE_ATTN_Q,
    MEMRA_FORGE_ATTN_K,
    MEMRA_FORGE_ATTN_V,
    MEMRA_FORGE_ATTN_OUTPUT,
    MEMRA_FORGE_ATTN_Q_NORM,
    MEMRA_FORGE_ATTN_K_NORM,
    MEMRA_FORGE_SSM_QKV,   /* attn_qkv */
    MEMRA_FORGE_SSM_GATE,  /* attn_gate (z) */
    MEMRA_FORGE_SSM_CONV1D,
    MEMRA_FORGE_SSM_DT_BIAS,
    MEMRA_FORGE_SSM_A,
    MEMRA_FORGE_SSM_BETA,
    MEMRA_FORGE_SSM_ALPHA,
    MEMRA_FORGE_SSM_NORM,
    MEMRA_FORGE_SSM_OUT,
    MEMRA_FORGE_FFN_GATE,
    MEMRA_FORGE_FFN_UP,
    MEMRA_FORGE_FFN_DOWN,
    MEMRA_FORGE_FFN_GATE_INP, /* router */
    MEMRA_FORGE_FFN_GATE_EXPS,
    MEMRA_FORGE_FFN_UP_EXPS,
    MEMRA_FORGE_FFN_DOWN_EXPS,
    MEMRA_FORGE_FFN_GATE_INP_SHEXP,
    MEMRA_FORGE_FFN_GATE_SHEXP,
    MEMRA_FORGE_FFN_UP_SHEXP,
    MEMRA_FORGE_FFN_DOWN_SHEXP,
    MEMRA_FORGE_NVFP4_SCALE, /* "<matrix>.scale" companion of an NVFP4 matrix */
    MEMRA_FORGE_ROLE_COUNT,
} memra_forge_role;

typedef struct memra_forge_tensor {
    char name[64];
    memra_forge_role role;
    int32_t layer;        /* block index, -1 for global tensors */
    memra_qtype type;
    uint32_t n_dims;
    int64_t ne[4];        /* ne[0] contiguous; unused dims are 1 */
    int32_t scale_of;     /* NVFP4_SCALE: plan index of its matrix; else -1 */
    float std;            /* init scale from forge.c's init table (normal: std; norms:
                             jitter; conv: bound); a companion copies its matrix's */
    int32_t per_expert;   /* 1: 3-D expert tensor (or its companion): per-expert gain */
    uint64_t nbytes;
} memra_forge_tensor;

typedef struct memra_forge_plan {
    memra_forge_tensor *t; /* [n] in file order */
    size_t n;
    uint32_t n_vocab;      /* V actually used */
    uint64_t data_bytes;   /* sum of tensor bytes (without alignment padding) */
    uint64_t n_params;     /* elements of every tensor except NVFP4 scale companions */
} memra_forge_plan;

/* Build the plan for opts with a vocabulary of n_vocab tokens (used when the shape's
 * n_vocab is 0; must not exceed a nonzero shape n_vocab). */
int memra_forge_plan_build(const memra_forge_opts *o, uint32_t n_vocab, memra_forge_plan *out,
                           memra_err *err);
void memra_forge_plan_free(memra_forge_plan *p);
/* Index of a tensor by name, -1 when absent. */
long memra_forge_plan_find(const memra_forge_plan *p, const char *name);

/* The unquantized float values of rows [row0, row0+n_rows) of plan tensor t (a row is ne[0]
 * elements; rows run over ne[1]*ne[2]). For NVFP4 matrices these are the true weights
 * (the file holds weights / scale in NVFP4 and the scale in the companion). */
void memra_forge_fill_rows(const memra_forge_opts *o, const memra_forge_tensor *t, int64_t row0,
                           int64_t n_rows, float *dst);
/* The value of an NVFP4 companion element (expert e, or 0 for a 2-D matrix). */
float memra_forge_nvfp4_scale(const memra_forge_opts *o, const memra_forge_tensor *matrix,
                              int64_t e);

/* ---------------------------------------------------------------------------------------
 * Writing.
 * ------------------------------------------------------------------------------------- */
/* Forge a checkpoint at path (created or truncated). On failure the partial file is
 * removed. Codes: INVALID_ARG (bad options), UNSUPPORTED (a type the quantizer lacks, or a
 * shape the type cannot hold), IO, NOMEM. */
int memra_forge_write(const memra_forge_opts *opts, const char *path, memra_err *err);

#endif
