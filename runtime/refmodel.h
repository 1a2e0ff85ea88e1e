/*
 * refmodel.h — the CPU reference forward pass of Qwen3.5 (qwen35, qwen35moe): one token of one
 * sequence at a time, plain C loops that read like spec/qwen35.md §3. It is the oracle every
 * faster path (CPU backend, CUDA plans) is compared against, so clarity beats speed here.
 *
 * Arithmetic contract: THE SAME BITS AS THE ENGINE. Every op below is the canonical arithmetic
 * of the matching kernel (the functions kernels/ref and kernels/<op>.h expose for exactly this),
 * so the reference model, the CPU backend and the CUDA backend produce memcmp-equal logits:
 *   - mat-vec: the input is quantized with memra_quantize_q8_1; a dense weight's row is
 *     summed in mmvq's canonical parts (memra_mmvq_dot, kernels/mmvq.h), a routed expert's
 *     (and the shared expert's down projection) in one block chain (memra_vec_dot_q8_1, the
 *     order of mmvq_moe / moe_down). NVFP4 `.scale` companions multiply the row result.
 *     Weights without a q8_1 dot are dequantized per row and dotted in f32 (no plan uses one).
 *   - norms: RMSNorm in rms_norm_q8's order (kref_rms_norm_canon, f64 sum of exact squares);
 *     the per-head q/k norm and RoPE of attn_prep (memra_attn_head_norm / memra_attn_rope);
 *     L2 norm, delta rule and gated norm of gdn_step (kernels/gdn_canon.h).
 *   - transcendentals: kernels/exact_math.h only (exp, sigmoid, silu, softplus, sincos, pow);
 *     never libm, whose last bits differ from CUDA's.
 *   - attention: memra_attn_head (attn_decode's split-K order with the plans' max_split 32);
 *     MoE routing softmax in moe_route's order (kref_softmax_blk, 256 lanes).
 *   - Threads (memra_ref_model_config.n_threads) only split the output rows of a mat-vec; each
 *     row is computed by the same code in the same order, so logits are bit-identical for any
 *     thread count.
 *   - The KV cache is f16 (RN-even on append); recurrent state (conv window, delta-rule state)
 *     is f32 (spec §0).
 * The orders are a function of the model's shapes alone (never of a batch, a thread count or
 * a device). The f64 spec checks of tests/test_refmodel.c keep the arithmetic honest.
 *
 * Must not: keep per-sequence data in the model (many sequences share one model; all state is
 * in memra_ref_seq), or depend on anything but the GGUF file and the token stream.
 */
#ifndef MEMRA_REFMODEL_H
#define MEMRA_REFMODEL_H

#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "qtype.h"
#include "qwen35.h"

typedef struct memra_ref_model memra_ref_model;
typedef struct memra_ref_seq memra_ref_seq;

typedef struct memra_ref_model_config {
    int n_threads; /* threads per mat-vec (>= 1; default 1); results do not depend on it */
    /* An accuracy experiment, NOT the engine's arithmetic (default 0 = the engine's bits).
     * Nonzero: every mat-vec whose weight has a q8_1 dot dequantizes its rows and dots them
     * in f64 against activations that are either exact (MEMRA_REF_ACT_F32) or rounded as
     * q8_1 rounds them but with one scale per act_sim elements (a multiple of 32 up to
     * 1024): code = round(x / d), d = amax / 127 over the group, value = code x fp16(d).
     * 32 is today's q8_1; larger groups model the grouped activation scales of
     * bench/results/mmvq-notes.md run 17 (bench/act_eval.c compares them). */
    int act_sim;
    /* With act_sim > 32 only: 0, or L in 2..64: every 32 elements of a group also carry an
     * integer multiplier m in 1..L, step = fp16(d) m / L with m = ceil(L amax_32 / amax), so
     * a 32-block far below its group's largest value keeps a finer step (run 22). */
    int act_sim_mult;
    /* An accuracy experiment of a tensor-core mat-vec, NOT the engine's arithmetic (default 0;
     * nonzero only with act_sim = 0). 1 (f16) or 2 (bf16): every mat-vec whose weight has a
     * q8_1 dot rounds its input once to f16 (1) or bfloat16 (2), RN-even, ±Inf on overflow
     * (counted: memra_ref_seq_f16_counts), instead of quantizing it to q8_1; dequantizes its
     * rows to f16 as a GPU would (memra_ref_dequantize_row_f16, both values); and sums the
     * exact products in f64, standing for an MMA that accumulates in fp32 (f16 x f16 and
     * bf16 x f16 products are exact in fp32; only the accumulation would round).
     * bench/act_eval.c's formats "f16" and "bf16". */
    int act_f16;
} memra_ref_model_config;
#define MEMRA_REF_ACT_F32 (-1)

/* Defaults: n_threads = 1, act_sim = 0, act_sim_mult = 0, act_f16 = 0. */
void memra_ref_model_config_default(memra_ref_model_config *cfg);

/* Open a GGUF file, load and validate hparams, bind and check every tensor, convert the small
 * element-wise tensors (norms, conv taps, ssm_a, dt bias, scales) to f32. cfg may be NULL
 * (defaults). The weights stay memory-mapped. */
int memra_ref_model_open(const char *path, const memra_ref_model_config *cfg, memra_ref_model **out,
                         memra_err *err);
/* Same over an already opened GGUF; the model takes ownership of g (closed by _close, also on
 * failure). */
int memra_ref_model_open_gguf(memra_gguf *g, const memra_ref_model_config *cfg,
                              memra_ref_model **out, memra_err *err);
void memra_ref_model_close(memra_ref_model *m); /* NULL is a no-op */

const memra_qwen35_hparams *memra_ref_model_hparams(const memra_ref_model *m);

/* A sequence: KV cache for n_ctx positions on every attention layer, conv + SSM state on every
 * GDN layer (zero = a fresh sequence), and its own scratch. The model is borrowed and must
 * outlive the sequence. Distinct sequences may run on distinct threads concurrently. */
int memra_ref_seq_init(const memra_ref_model *m, uint32_t n_ctx, memra_ref_seq **out,
                       memra_err *err);
void memra_ref_seq_free(memra_ref_seq *s);          /* NULL is a no-op */
uint32_t memra_ref_seq_pos(const memra_ref_seq *s); /* tokens consumed so far */
/* Forget everything: position 0, zero recurrent state (the KV cache is overwritten later),
 * zero f16 counts. */
void memra_ref_seq_reset(memra_ref_seq *s);

/* With config.act_f16: what rounding to 16 bits did in this sequence since init or reset. An
 * activation is counted once per mat-vec that reads it, a weight once per read of its row. */
typedef struct memra_ref_f16_counts {
    uint64_t act_values;       /* activations rounded to f16 / bf16 */
    uint64_t act_inf;          /* of them, finite values that overflowed to ±Inf */
    uint64_t weight_values;    /* weights dequantized to f16 */
    uint64_t weight_nonfinite; /* of them, ±Inf or NaN (an f16 scale overflow) */
} memra_ref_f16_counts;
void memra_ref_seq_f16_counts(const memra_ref_seq *s, memra_ref_f16_counts *out);

/* Run `token` at position memra_ref_seq_pos(s), write n_vocab logits, advance the position.
 * MEMRA_ERR_INVALID_ARG for a token outside [0, n_vocab), MEMRA_ERR_CAPACITY when the
 * sequence already holds n_ctx tokens (state is then unchanged). */
int memra_ref_forward(const memra_ref_model *m, memra_ref_seq *s, int32_t token,
                      float *logits /* [n_vocab] */, memra_err *err);

/* Greedy choice: index of the largest logit, lowest index on ties; NaN never wins. */
int32_t memra_ref_argmax(const float *logits, int64_t n);

/* config.act_f16's weights: n elements of type t (a whole number of blocks) dequantized to f16
 * as a GPU kernel converting to half for an MMA would, each written as the f32 of an f16:
 *   q4_K, per 32-element sub-block k: ds = f16(d sc_k), dm = f16(dmin m_k),
 *         w = f16(q ds - dm);
 *   q6_K, per 16-element group g: ds = f16(d sc_g) (sc_g the int8 scale), w = f16((q - 32) ds);
 *   any other type: w = f16(the value memra_dequantize_row gives).
 * Every f16() is one RN-even rounding of the exact value (products and differences are taken
 * in f64, where they are exact), ±Inf past 65504. Returns how many outputs are not finite, or
 * -1 for a type memra_dequantize_row refuses or an n that is not a whole number of blocks. */
int64_t memra_ref_dequantize_row_f16(memra_qtype t, const void *src, float *dst, int64_t n);

/* ======================================================================================== */
/* The ops (spec §3), exposed for tests and for other backends' CPU comparisons.            */
/* All pointers are f32 arrays unless stated; outputs may alias inputs where noted.         */
/* ======================================================================================== */

/* y_i = w_i · x_i / sqrt(mean(x²) + eps); w NULL = 1. Σx² in double. y may alias x. */
void memra_ref_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps);
/* y = x / max(||x||₂, eps); Σx² in double. y may alias x. */
void memra_ref_l2_norm(float *y, const float *x, int64_t n, float eps);
float memra_ref_sigmoid(float x);
float memra_ref_silu(float x);
float memra_ref_softplus(float x); /* x if x > 20 else log1p(exp(x)) */
/* y = softmax(x): subtract max, expf, sum in increasing order, multiply by 1/sum.
 * y may alias x. */
void memra_ref_softmax(float *y, const float *x, int64_t n);

/* RoPE (spec §3.3 step 4) in place on one head x[head_dim]: IMRoPE sector choice over
 * `sections` with text positions (t = h = w = pos, e = 0), NEOX half-split pairs (m, m+R/2)
 * for m < n_rot/2, θ = p_sec · freq_base^(−2m/n_rot) · freq_scale; dims >= n_rot pass. */
void memra_ref_rope(float *x, int64_t n_rot, const int32_t sections[4], int64_t pos,
                    float freq_base, float freq_scale);

/* Decode attention for all q heads (spec §3.3 steps 6): q [n_head * head_dim] (normed,
 * rotated); k_cache / v_cache f16 [n_kv, n_head_kv * head_dim]; head i reads kv head
 * i / (n_head / n_head_kv). scores = q·k · 1/sqrt(head_dim), softmax over τ ∈ [0, n_kv),
 * o = Σ α_τ v_τ. scratch [n_kv]. out [n_head * head_dim]. */
typedef struct memra_ref_attn_args {
    const float *q;
    const uint16_t *k_cache, *v_cache;
    int64_t n_kv, n_head, n_head_kv, head_dim;
    float *scratch;
    float *out;
} memra_ref_attn_args;
void memra_ref_attention(const memra_ref_attn_args *a);

/* Causal depthwise conv step (spec §3.4 step 4), before silu: for channel c,
 * window = [state(c, 0..K-2), u_raw_c], u_c = Σ_j taps[c·K + j]·window[j] (j increasing),
 * then state(c,·) = window[1..K-1]. state [Cc, K-1] time-fastest, taps [Cc, K]. */
void memra_ref_conv_step(float *u, float *state, const float *u_raw, const float *taps,
                         int64_t n_channels, int64_t kernel);

/* One delta-rule step of one value head (spec §3.4 step 9) on the reference state layout
 * St [dv, dk] (St[j·dk + i] = S[i, j], i = key, j = value): decay, r = Sᵀk, δ = β(v − r),
 * S += kδᵀ, o = Sᵀq with the updated S. q already L2-normed and scaled. */
void memra_ref_delta_rule(float *St, float *o, const float *q, const float *k, const float *v,
                          float beta, float decay, int64_t dk, int64_t dv);

/* o ← RMSNorm(o, w) ⊙ silu(z) over n (spec §3.4 step 10; w has no +1). */
void memra_ref_gated_norm(float *o, const float *z, const float *w, int64_t n, float eps);

/* MoE routing (spec §3.5 steps 1-3): probs = softmax(router_logits) [n_expert]; ids[k] = the
 * top-k experts by probability, highest first, ties to the lower expert index (NaN never
 * selected before a number); weights[r] = probs[ids[r]] / max(Σ_r probs[ids[r]], 2^-14), the
 * sum taken in rank order. Requires 1 <= k <= n_expert. */
void memra_ref_moe_route(const float *router_logits, int64_t n_expert, int64_t k, float *probs,
                         int32_t *ids, float *weights);

#endif
