/*
 * qwen35.h — the Qwen3.5 hybrid model family (GGUF `qwen35`, `qwen35moe`) as data: its
 * hyperparameters read from GGUF metadata, and the binding of every tensor the forward pass
 * reads, looked up by name with its shape and type checked (spec/qwen35.md §1, §2).
 *
 * This module is shared by every backend (the CPU reference, the CPU backend, the planner,
 * the CUDA loader). It must not compute anything beyond validation: no math, no allocation of
 * weights, no copies of tensor data. It only reads the opened GGUF (borrowed, must outlive the
 * binding).
 *
 * Invariants after a successful memra_qwen35_hparams_load():
 *   - every dimension the forward pass uses is > 0 where the spec requires it, dv == dk,
 *     key_length == value_length, n_rot is even and <= head_dim, n_head % n_head_kv == 0,
 *     Hv % Hk == 0, rope sections have exactly 4 entries, eps is finite and > 0;
 *   - is_recurrent[l] is the spec's layer pattern ((l+1) mod full_attention_interval != 0).
 * After a successful memra_qwen35_bind(): every tensor pointer the layer kind needs is
 * non-NULL with exactly the expected ne[] and an accepted type, and the file contains no
 * tensor the binding did not claim (the reference loader refuses those too).
 */
#ifndef MEMRA_QWEN35_H
#define MEMRA_QWEN35_H

#include <stdint.h>

#include "err.h"
#include "gguf.h"

/* Layers beyond this are refused (the largest Qwen3.5 has 64). Keeps the per-layer tables
 * fixed-size. */
#define MEMRA_QWEN35_MAX_LAYERS 256

typedef enum memra_qwen35_arch {
    MEMRA_QWEN35_ARCH_DENSE = 0, /* GGUF "qwen35": dense SwiGLU FFN */
    MEMRA_QWEN35_ARCH_MOE = 1,   /* GGUF "qwen35moe": routed experts + shared expert */
} memra_qwen35_arch;

typedef struct memra_qwen35_hparams {
    memra_qwen35_arch arch;
    char arch_name[16]; /* "qwen35" | "qwen35moe" */

    uint32_t n_ctx_train; /* context_length */
    uint32_t n_embd;      /* D */
    uint32_t n_layer;     /* L */
    uint32_t n_vocab;     /* V = token_embd.weight ne1 */
    float eps;            /* rms eps: every RMSNorm and the GDN L2 norm */

    /* gated full attention */
    uint32_t n_head;    /* Hq */
    uint32_t n_head_kv; /* Hkv (default Hq) */
    uint32_t head_dim;  /* dh = key_length = value_length (default D / Hq) */
    uint32_t n_rot;     /* R, rotary dims (default head_dim) */
    int32_t rope_sections[4];
    float freq_base;  /* default 10000 */
    float freq_scale; /* 1 / rope.scaling.factor (linear), 1 without scaling */

    /* gated delta net */
    uint32_t ssm_conv_kernel;   /* K */
    uint32_t ssm_inner_size;    /* Cv = Hv * dv */
    uint32_t ssm_state_size;    /* dk */
    uint32_t ssm_n_v_heads;     /* Hv = ssm.time_step_rank */
    uint32_t ssm_n_k_heads;     /* Hk = ssm.group_count */
    uint32_t ssm_head_v_dim;    /* dv = Cv / Hv (== dk) */
    uint32_t ssm_conv_channels; /* Cc = 2 * Hk * dk + Cv */

    uint32_t full_attention_interval;              /* default 4 */
    uint32_t n_attn_layers;                        /* layers with a KV cache */
    uint32_t n_recurrent_layers;                   /* layers with conv + SSM state */
    uint8_t is_recurrent[MEMRA_QWEN35_MAX_LAYERS]; /* [n_layer] 1 = GDN, 0 = attention */

    /* FFN */
    uint32_t n_ff;          /* F, dense width (may be 0 for MoE files) */
    uint32_t n_expert;      /* E */
    uint32_t n_expert_used; /* k */
    uint32_t n_ff_exp;      /* Fe (default F / k) */
    uint32_t n_ff_shexp;    /* Fs (default F); 0 = no shared expert */
} memra_qwen35_hparams;

/* A matrix used as y = W·x (ne0 = in, ne1 = out [, ne2 = expert]) and its optional NVFP4-style
 * companion `<name>.scale` (f32, [1] or [E]) that multiplies the product. */
typedef struct memra_qwen35_mat {
    const memra_gguf_tensor *w;     /* borrowed from the gguf */
    const memra_gguf_tensor *scale; /* NULL when absent */
} memra_qwen35_mat;

typedef struct memra_qwen35_layer {
    const memra_gguf_tensor *attn_norm;           /* [D] */
    const memra_gguf_tensor *post_attention_norm; /* [D] */

    /* full attention (is_recurrent == 0) */
    memra_qwen35_mat attn_q;              /* {D, 2*Hq*dh}, per-head [q_i | gate_i] */
    memra_qwen35_mat attn_k, attn_v;      /* {D, Hkv*dh} */
    memra_qwen35_mat attn_output;         /* {Hq*dh, D} */
    const memra_gguf_tensor *attn_q_norm; /* [dh] */
    const memra_gguf_tensor *attn_k_norm; /* [dh] */

    /* gated delta net (is_recurrent == 1) */
    memra_qwen35_mat attn_qkv;            /* {D, Cc} = [q: Ck][k: Ck][v: Cv] */
    memra_qwen35_mat attn_gate;           /* {D, Cv} (z) */
    memra_qwen35_mat ssm_beta, ssm_alpha; /* {D, Hv} */
    memra_qwen35_mat ssm_out;             /* {Cv, D} */
    const memra_gguf_tensor *ssm_conv1d;  /* {K, Cc} */
    const memra_gguf_tensor *ssm_dt_bias; /* [Hv] */
    const memra_gguf_tensor *ssm_a;       /* [Hv], already -exp(A_log) */
    const memra_gguf_tensor *ssm_norm;    /* [dv], no +1 */

    /* dense FFN (qwen35) */
    memra_qwen35_mat ffn_gate, ffn_up; /* {D, F} */
    memra_qwen35_mat ffn_down;         /* {F, D} */

    /* MoE FFN (qwen35moe) */
    memra_qwen35_mat ffn_gate_inp;       /* {D, E} router */
    memra_qwen35_mat ffn_gate_exps;      /* {D, Fe, E}; NULL when fused */
    memra_qwen35_mat ffn_up_exps;        /* {D, Fe, E}; NULL when fused */
    memra_qwen35_mat ffn_gate_up_exps;   /* {D, 2*Fe, E}: rows [0,Fe) gate, [Fe,2Fe) up; optional */
    memra_qwen35_mat ffn_down_exps;      /* {Fe, D, E} */
    memra_qwen35_mat ffn_gate_inp_shexp; /* {D} (one output row); NULL when Fs == 0 */
    memra_qwen35_mat ffn_gate_shexp, ffn_up_shexp; /* {D, Fs} */
    memra_qwen35_mat ffn_down_shexp;               /* {Fs, D} */
} memra_qwen35_layer;

typedef struct memra_qwen35_weights {
    memra_qwen35_mat token_embd;          /* {D, V}: row t = embedding of token t (×scale) */
    const memra_gguf_tensor *output_norm; /* [D] */
    memra_qwen35_mat output;              /* {D, V}; == token_embd (with its scale) when tied */
    int output_tied;                      /* 1 when output.weight was absent */
    memra_qwen35_layer layers[MEMRA_QWEN35_MAX_LAYERS]; /* [n_layer] */
} memra_qwen35_weights;

/* Read and validate the hyperparameters. MEMRA_ERR_UNSUPPORTED names an unknown
 * architecture; MEMRA_ERR_NOT_FOUND / MEMRA_ERR_FORMAT name the key (or token_embd.weight,
 * from which n_vocab is taken). */
int memra_qwen35_hparams_load(const memra_gguf *g, memra_qwen35_hparams *hp, memra_err *err);

/* Bind every tensor of the model described by hp (as loaded from the same file). Errors name
 * the tensor: MEMRA_ERR_NOT_FOUND (missing), MEMRA_ERR_FORMAT (wrong shape, extra tensor),
 * MEMRA_ERR_UNSUPPORTED (a type this engine cannot read). */
int memra_qwen35_bind(const memra_gguf *g, const memra_qwen35_hparams *hp, memra_qwen35_weights *w,
                      memra_err *err);

/* Accepted tensor types. Element-wise vectors (norms, conv taps, ssm_a, dt bias, .scale):
 * F32, F16, BF16. Matrices: any type memra_quant can dequantize. */
int memra_qwen35_vector_type_ok(uint32_t type);
int memra_qwen35_matrix_type_ok(uint32_t type);

#endif
