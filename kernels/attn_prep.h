/*
 * attn_prep.h — args of attn_prep (catalog: ATTN_PREP): everything between the merged
 * q/k/v projections and the attention scan of one gated full-attention layer
 * (spec qwen35.md §3.3 steps 1-5):
 *   per q head i:  q_i = qg[b, 2*dh*i .. 2*dh*i + dh) (the gate half stays in qg for
 *                  attn_decode);  q[b, i] = rope(rmsnorm(q_i) * q_norm)
 *   per kv head j: k_j = rope(rmsnorm(k_j) * k_norm); k_j and v_j are appended to the layer's
 *                  KV cache at positions[b]
 *
 * Exact arithmetic (the CUDA kernel and the CPU reference produce the same bits; C with
 * -ffp-contract=off, nvcc with --fmad=false -prec-div=true -prec-sqrt=true):
 *   rmsnorm (memra_attn_head_norm): thread t of MEMRA_ATTN_PREP_THREADS (128) sums
 *     (double)x_d * (double)x_d (exact) for d = t, t + 128, ... in f64 from +0.0; then the
 *     cuda_common.cuh block_sum_f64 order (xor butterfly 16, 8, 4, 2, 1 inside each of the 4
 *     warps; the 4 warp sums and 28 zeros butterflied once more) = kref_rms_scale_blk(x, dh,
 *     eps, 128) of kernels/ref/ref_common.h; scale = 1.0f / sqrtf((float)(ss / dh) + eps);
 *     y_d = w_d * (x_d * scale) (f32).
 *   RoPE (memra_attn_rope_cs, the same inline function on both sides): NEOX half-split pairs
 *     (m, m + n_rot/2), m < n_rot/2, with
 *       theta_m = ((double)pos_m * memra_x_pow((double)freq_base, (-2.0 * m) / n_rot))
 *                 * (double)freq_scale                                   (f64, left to right)
 *       memra_x_sincos(theta_m) -> c = (float)cos, s = (float)sin (each rounded once)
 *       x0' = x0*c - x1*s, x1' = x0*s + x1*c (f32 products, then the f32 sum/difference).
 *   pos_m (memra_attn_rope_pos) = positions[b], except IMRoPE (sections not all zero): pair
 *   m's sector s = m mod (S0+S1+S2+S3) uses p when it is a t/h/w sector (s%3==0 && s<3*S0,
 *   s%3==1 && s<3*S1, s%3==2 && s<3*S2), else the "e" position 0 (text: t = h = w = p,
 *   e = 0). All-zero sections = plain NEOX with position p (qwen3next).
 *   Cache entries: memra_f32_to_fp16 (RN-even) of the f32 values, or quant.c's q8_0
 *   quantizer (amax from 0, d = amax / 127, q = roundf(x * (1 / d))).
 * Nothing depends on B, the row index or the launch geometry beyond the 128 threads above.
 *
 * KV cache: a state region per layer and row, base from the pointer table, layout
 * [n_ctx][n_head_kv][head_dim] of kv_type (F16 RN-even, or Q8_0 blocks over head_dim).
 * A position outside [0, n_ctx) is never written (the host refuses such a tick with
 * MEMRA_ERR_CAPACITY before it starts; the check here only keeps a bad tick in bounds).
 */
#ifndef MEMRA_KERNEL_ATTN_PREP_H
#define MEMRA_KERNEL_ATTN_PREP_H

#include <stdint.h>

#include "exact_math.h"
#include "qtype.h"

#define MEMRA_ATTN_MAX_HEAD_DIM 1024
/* Threads of the per-head norm reduction (part of the exact arithmetic above). */
#define MEMRA_ATTN_PREP_THREADS 128

/* Host + device inline functions (the same code on both sides). */
#ifdef __CUDACC__
#define MEMRA_ATTN_HD static __host__ __device__ __forceinline__
#else
#define MEMRA_ATTN_HD static inline
#endif

typedef struct memra_attn_prep_args {
    const float *qg;          /* [b, n_head, 2, head_dim] q/gate interleaved per head */
    const float *k;           /* [b, n_head_kv * head_dim] */
    const float *v;           /* [b, n_head_kv * head_dim] */
    const float *q_norm;      /* [head_dim] */
    const float *k_norm;      /* [head_dim] */
    const int32_t *positions; /* [b] tick block */
    const uint64_t *k_cache;  /* [b] row bases of the layer's K region (pointer table row) */
    const uint64_t *v_cache;  /* [b] row bases of the layer's V region */
    float *q;                 /* [b, n_head * head_dim] normed, rotated */
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_rot;            /* rotary dims R (even, <= head_dim) */
    int32_t sections[4];      /* IMRoPE sections (t, h, w, e); all 0 = NEOX */
    int32_t kv_type;          /* MEMRA_QT_F16 | MEMRA_QT_Q8_0 */
    int32_t n_ctx;            /* positions a cache region holds */
    int32_t b;
    float eps;
    float freq_base;
    float freq_scale;         /* 1 without rope scaling */
} memra_attn_prep_args;

/* Bytes of one (position, kv head) cache entry of kv_type; 0 if unsupported. */
static inline uint64_t memra_kv_head_bytes(int32_t kv_type, int32_t head_dim)
{
    if (kv_type == MEMRA_QT_F16)
        return (uint64_t)head_dim * 2u;
    if (kv_type == MEMRA_QT_Q8_0 && head_dim % 32 == 0)
        return (uint64_t)(head_dim / 32) * 34u;
    return 0;
}

static inline const char *memra_attn_prep_check(const memra_attn_prep_args *a)
{
    if (!a->qg || !a->k || !a->v || !a->q_norm || !a->k_norm || !a->positions || !a->k_cache ||
        !a->v_cache || !a->q)
        return "null pointer";
    if (a->b <= 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return "head counts must be positive with n_head a multiple of n_head_kv";
    if (a->head_dim <= 0 || a->head_dim > MEMRA_ATTN_MAX_HEAD_DIM)
        return "head_dim out of range 1..1024";
    if (a->n_rot < 0 || a->n_rot > a->head_dim || a->n_rot % 2 != 0)
        return "n_rot must be even and <= head_dim";
    for (int i = 0; i < 4; i++)
        if (a->sections[i] < 0 || a->sections[i] > 1024)
            return "rope section out of range 0..1024";
    if (memra_kv_head_bytes(a->kv_type, a->head_dim) == 0)
        return "KV cache type must be f16, or q8_0 with head_dim % 32 == 0";
    if (a->n_ctx <= 0)
        return "n_ctx must be positive";
    if (!(a->eps >= 0.0f) || !(a->freq_base > 0.0f) || !(a->freq_scale > 0.0f))
        return "eps, freq_base or freq_scale out of range";
    return 0;
}

/* The position rotary pair m uses: p, or 0 for an IMRoPE pair in the "e" section. */
MEMRA_ATTN_HD int32_t memra_attn_rope_pos(const int32_t sec[4], int32_t m, int32_t p)
{
    const int32_t sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
    if (sect_dims == 0)
        return p; /* plain NEOX */
    const int32_t s = m % sect_dims;
    if ((s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) ||
        (s % 3 == 2 && s < 3 * sec[2]))
        return p;
    return 0;
}

/* cos / sin of pair m's angle at position pos_m (the exact formula above). */
MEMRA_ATTN_HD void memra_attn_rope_cs(int32_t pos_m, int32_t m, int32_t n_rot, float freq_base,
                                      float freq_scale, float *c, float *s)
{
    const double theta = (double)pos_m *
                         memra_x_pow((double)freq_base, -2.0 * (double)m / (double)n_rot) *
                         (double)freq_scale;
    double sn, cs;
    memra_x_sincos(theta, &sn, &cs);
    *c = (float)cs;
    *s = (float)sn;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_attn_prep_ref(const memra_attn_prep_args *a);

/* Canonical primitives of the exact arithmetic above (CPU; the reference model calls these):
 * y[n] = rmsnorm(x) * w (w may be NULL: no weight; y may alias x), and the in-place RoPE of
 * one head's first n_rot values at position pos. */
void memra_attn_head_norm(const float *x, const float *w, float *y, int32_t n, float eps);
void memra_attn_rope(float *x, int32_t n_rot, const int32_t sections[4], int32_t pos,
                     float freq_base, float freq_scale);
#ifdef __cplusplus
}
#endif

#endif
