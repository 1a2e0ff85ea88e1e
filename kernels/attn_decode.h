/*
 * attn_decode.h — args of attn_decode (catalog: ATTN_DECODE): gated attention of one decode
 * token over the row's own KV cache, output quantized for the o-projection
 * (spec qwen35.md §3.3 steps 6-7).
 *
 * Per row b, q head i, kv head j = i / G (G = n_head / n_head_kv, grouped GQA),
 * len = positions[b] + 1:  s_t = (q_i . k_{j,t}) * scale, t < len;
 *   o_i = sum_t softmax(s)_t v_{j,t};  o_i <- o_i * sigmoid(gate_i) with
 *   gate_i = qg[b, 2*dh*i + dh ..) (raw, from the q proj);
 *   y_q[b] = memra_quantize_q8_1(o[b])  (q8_1 [b, n_head*head_dim/32]).
 * A position outside [0, n_ctx) produces a zero row. Cache layout: attn_prep.h.
 *
 * EXACT ARITHMETIC (the CUDA kernel's parallel order; kernels/ref/attn_decode.c emulates it
 * bit for bit; f32 RN, fmaf only where written, exp = memra_x_expf, sigmoid =
 * memra_x_sigmoidf). Everything depends on (len, max_split, head_dim, G) only.
 *  Splits: nsplit = clamp(ceil(len / 64), 1, max_split) (memra_attn_nsplit);
 *   per = round_up(ceil(len / nsplit), 16) (memra_attn_split_keys); split s holds keys
 *   [s*per, min(len, (s+1)*per)) (possibly empty).
 *  Order geometry (memra_attn_order_of): "fast" when head_dim is 64, 128, 256 or 512:
 *   VPL = head_dim > 256 ? head_dim / 256 : 1, LPK = head_dim / (8 VPL) lanes per key,
 *   KPW = 32 / LPK keys per warp step, U = 4 (2 when HG = 8; HG = memra_attn_hg(dh, G))
 *   keys per stream per batch; lane l < LPK of a key holds dims 8 (l + LPK v) + c
 *   (v < VPL, c < 8) in the order e = 8v + c. "generic" otherwise: LPK = 32, KPW = 1,
 *   U = 1, lane l holds dims l + 32 e (e = 0, 1, .. while < head_dim).
 *  Score of key t: lane partials acc = fmaf(q_d, k_d, acc) from +0 over the lane's dims in
 *   its order; the LPK partials are added by the xor butterfly (offsets LPK/2, .., 1:
 *   p[l] = p[l] + p[l + o] for l < o, result p[0]); s_t = that * scale. k_d, v_d: the
 *   cache value as f32 (fp16 exactly; q8_0 (float)code * d16).
 *  Streams: warp w (of MEMRA_ATTN_WARPS = 4) and sub k (< KPW) of split [t0, t1) process
 *   batches base = t0 + w KPW U + n (4 KPW U), n = 0, 1, .. while base < t1; batch keys
 *   t_u = base + u KPW + k (u < U), valid when t_u < t1. State (m, l, o[dh]) starts
 *   (-inf, 0, 0). Per batch: sc_u = valid ? s_t : -inf; mb = fmaxf(..fmaxf(-inf, sc_0)..,
 *   sc_{U-1}); mn = fmaxf(m, mb); corr = m == -inf ? 0 : exp(m - mn);
 *   p_u = valid ? exp(sc_u - mn) : 0; ls = ((0 + p_0) + p_1) + ..; l = l*corr + ls; m = mn;
 *   o_d = o_d * corr; then for u = 0..U-1: o_d = fmaf(p_u, v_{t_u,d}, o_d) (v = 0 when
 *   invalid).
 *  merge(A, B) (symmetric): M = fmaxf(mA, mB), wX = mX == -inf ? 0 : exp(mX - M);
 *   l = lA wA + lB wB; o_d = oA_d wA + oB_d wB; m = M.
 *  Warp: subs merged by the xor butterfly over sub offsets 1, 2, .., KPW/2 (after offset
 *   d, sub k (k % 2d == 0) holds merge(sub k, sub k + d)). Split: M = fmaxf over warps
 *   0..3 (from -inf), w_w = m_w == -inf ? 0 : exp(m_w - M), L = (((0 + l_0 w_0) + l_1 w_1)
 *   + ..), O_d likewise; the partial is (O, M, L) (an empty split: L = 0).
 *  Combine: M = fmaxf over splits s < nsplit with L_s != 0 (from -inf); for those s in
 *   increasing order: w = exp(M_s - M), L = L + L_s w, O_d = O_d + O_s,d w (from 0);
 *   out_d = (O_d * (1.0f / L)) * sigmoid(gate_d).
 * The CUDA kernel computes every exp of a batch once per key group and broadcasts it by
 * shuffle (same function, same bits); the scratch holds [b, n_head, max_split, dh + 2]
 * partials. The reference model calls memra_attn_head (below) with the plan's max_split.
 * Scheduling, never the bits (the CPU reference ignores both): split_ctas says how many CTAs
 * per (kv head, row) the CUDA split kernel launches, each taking splits x, x + split_ctas, ...
 * of its row (the partials and the combine are the same whichever CTA computes a split);
 * prefetch_batches, how many key batches ahead of the one it computes a warp pulls into L2
 * (the first ones before the kernel's PDL wait, under attn_prep's tail: positions, k_cache
 * and v_cache are read before the wait then, so the kernel launched just before this one must
 * not write them; in the engine they are tick inputs).
 */
#ifndef MEMRA_KERNEL_ATTN_DECODE_H
#define MEMRA_KERNEL_ATTN_DECODE_H

#include <stdint.h>

#include "attn_prep.h"

/* Keys per split below which a row uses fewer splits; warps per split CTA. */
#define MEMRA_ATTN_SPLIT_KEYS 64
/* The split bound the engine's plans use (max_split): part of attention's summation order,
 * so the reference model uses it too and it is the same at every tier. The planner gives it
 * to plan scripts as host.attn_max_split. */
#define MEMRA_ATTN_MAX_SPLIT 128
#define MEMRA_ATTN_WARPS 4
/* memra_attn_decode_args.split_ctas: one CTA per split up to max_split (0, the default: a
 * grid of max_split CTAs per (kv head, row) whatever the row's length), that many CTAs
 * (1..max_split; more are clamped), or AUTO: as many as keep the whole grid resident on
 * the device at once (kernels/attn_decode.cu) */
#define MEMRA_ATTN_SPLIT_CTAS_AUTO (-1)
/* memra_attn_decode_args.prefetch_batches: 0 (default, none) .. this */
#define MEMRA_ATTN_MAX_PREFETCH 8
/* Fast-kernel geometry (compile-time in the kernel, run-time in the reference). */
#define MEMRA_ATTN_VPL(dh) ((dh) > 256 ? (dh) / 256 : 1)
#define MEMRA_ATTN_LPK(dh) ((dh) / (8 * MEMRA_ATTN_VPL(dh)))
#define MEMRA_ATTN_HG(dh, g) ((g) <= 1 ? 1 : (g) <= 2 ? 2 : ((g) <= 4 || (dh) > 256) ? 4 : 8)
#define MEMRA_ATTN_U(hg) ((hg) >= 8 ? 2 : 4)

MEMRA_ATTN_HD int32_t memra_attn_nsplit(int32_t len, int32_t max_split)
{
    const int32_t n = (len + MEMRA_ATTN_SPLIT_KEYS - 1) / MEMRA_ATTN_SPLIT_KEYS;
    return n < 1 ? 1 : (n > max_split ? max_split : n);
}

MEMRA_ATTN_HD int32_t memra_attn_split_keys(int32_t len, int32_t nsplit)
{
    return (((len + nsplit - 1) / nsplit) + 15) & ~15;
}

MEMRA_ATTN_HD int memra_attn_fast_dim(int32_t head_dim)
{
    return head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512;
}

/* The reduction order of a (head_dim, group) shape (see the header comment). */
typedef struct memra_attn_order {
    int32_t fast; /* lane dims 8 (l + LPK v) + c, else l + 32 e */
    int32_t lpk;  /* lanes per key */
    int32_t vpl;  /* 8-dim vectors per lane (fast) */
    int32_t kpw;  /* keys (streams) per warp */
    int32_t u;    /* keys per stream per batch */
} memra_attn_order;

MEMRA_ATTN_HD memra_attn_order memra_attn_order_of(int32_t head_dim, int32_t group)
{
    memra_attn_order o;
    o.fast = memra_attn_fast_dim(head_dim);
    if (o.fast) {
        o.vpl = MEMRA_ATTN_VPL(head_dim);
        o.lpk = MEMRA_ATTN_LPK(head_dim);
        o.kpw = 32 / o.lpk;
        o.u = MEMRA_ATTN_U(MEMRA_ATTN_HG(head_dim, group));
    } else {
        o.vpl = 0;
        o.lpk = 32;
        o.kpw = 1;
        o.u = 1;
    }
    return o;
}

typedef struct memra_attn_decode_args {
    const float *q;           /* [b, n_head * head_dim] (attn_prep output) */
    const float *qg;          /* [b, n_head, 2, head_dim]: the gate halves */
    const int32_t *positions; /* [b] */
    const uint64_t *k_cache;  /* [b] row bases */
    const uint64_t *v_cache;  /* [b] row bases */
    float *scratch;           /* [b, n_head, max_split, head_dim + 2] GPU partials; unused
                                 by the CPU reference (may be NULL there) */
    void *y_q;                /* q8_1 blocks [b, n_head * head_dim / 32] */
    float *o;                 /* [b, n_head * head_dim] f32 copy of the output, or NULL */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t kv_type;
    int32_t n_ctx;
    int32_t max_split;
    int32_t b;
    float scale;              /* 1/sqrt(head_dim) for qwen35 (attention.scale is ignored) */
    int32_t split_ctas;       /* CUDA scheduling only: 0, 1..max_split or
                                 MEMRA_ATTN_SPLIT_CTAS_AUTO (above) */
    int32_t prefetch_batches; /* CUDA scheduling only: 0..MEMRA_ATTN_MAX_PREFETCH (above) */
} memra_attn_decode_args;

static inline const char *memra_attn_decode_check(const memra_attn_decode_args *a)
{
    if (!a->q || !a->qg || !a->positions || !a->k_cache || !a->v_cache || !a->y_q)
        return "null pointer";
    if (a->b <= 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return "head counts must be positive with n_head a multiple of n_head_kv";
    if (a->head_dim <= 0 || a->head_dim > MEMRA_ATTN_MAX_HEAD_DIM)
        return "head_dim out of range 1..1024";
    if (((int64_t)a->n_head * a->head_dim) % 32 != 0)
        return "n_head * head_dim is not a multiple of 32 (q8_1 output)";
    if (memra_kv_head_bytes(a->kv_type, a->head_dim) == 0)
        return "KV cache type must be f16, or q8_0 with head_dim % 32 == 0";
    if (a->n_ctx <= 0 || a->max_split <= 0 || !(a->scale > 0.0f))
        return "n_ctx, max_split or scale out of range";
    if (a->split_ctas < MEMRA_ATTN_SPLIT_CTAS_AUTO)
        return "split_ctas must be 0, positive or MEMRA_ATTN_SPLIT_CTAS_AUTO";
    if (a->prefetch_batches < 0 || a->prefetch_batches > MEMRA_ATTN_MAX_PREFETCH)
        return "prefetch_batches out of range 0..8";
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_attn_decode_ref(const memra_attn_decode_args *a);

/* The canonical attention of one q head (the exact arithmetic above, before the gate):
 * o[head_dim] = O * (1.0f / L) over keys t < len (len >= 1), where k / v point at the head's
 * entry of position 0 (kv_type F16 or Q8_0) and entry t lies t * t_stride bytes further;
 * group = n_head / n_head_kv. The gated output is o_d * memra_x_sigmoidf(gate_d). */
void memra_attn_head(const float *q, const uint8_t *k, const uint8_t *v, uint64_t t_stride,
                     int32_t kv_type, int32_t len, int32_t head_dim, int32_t group,
                     int32_t max_split, float scale, float *o);
#ifdef __cplusplus
}
#endif

#endif
