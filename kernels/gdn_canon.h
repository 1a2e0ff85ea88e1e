/*
 * gdn_canon.h — the canonical arithmetic of gdn_step (kernels/gdn_step.h), in one place for the
 * CUDA kernel (kernels/gdn_step.cu), its CPU reference (kernels/ref/gdn_step.c) and the
 * reference model (runtime/refmodel.c): same operations, same order, same bits.
 *
 * Two kinds of function:
 *   - scalar pieces (host + device): the conv tap sum, the gates, the two norm scales, the
 *     gated output. Both sides call these very functions.
 *   - whole-vector primitives (host only): the CPU emulation of the kernel's warp order.
 *     Lane layout of a dk-vector (q, k, a state row S[., j]): element i belongs to lane
 *     (i / 4) % 32, i.e. lane l holds i = 128 m + 4 l + c (m = 0, 1, ..; c = 0..3), in
 *     increasing i; a dv-vector (the head output o) is laid out j -> lane j % 32. A lane's
 *     partial starts at 0 and adds its terms in increasing index; the 32 partials are then
 *     combined by the xor butterfly: for off = 16, 8, 4, 2, 1 every lane l takes
 *     p_l + p_(l ^ off) (simultaneously; a + b == b + a exactly, so all lanes end equal).
 *
 * Must not: call libm transcendentals (exact_math.h only); depend on B, the row, the block
 * size or the SM count (the order is a function of dk / dv alone).
 * Build contract (as exact_math.h): C with -ffp-contract=off; nvcc with --fmad=false
 * -prec-div=true -prec-sqrt=true; device code spells the f32 products/sums as __fmul_rn /
 * __fadd_rn anyway (MEMRA_GC_MUL / MEMRA_GC_ADD).
 */
#ifndef MEMRA_KERNEL_GDN_CANON_H
#define MEMRA_KERNEL_GDN_CANON_H

#include <stdint.h>

#include "exact_math.h"

#ifdef __CUDACC__
#define MEMRA_GC static __host__ __device__ __forceinline__
#else
#include <math.h>

#include "ref/ref_common.h"
#define MEMRA_GC static inline
#endif

#ifdef __CUDA_ARCH__
#define MEMRA_GC_ADD(x, y) __fadd_rn((x), (y))
#define MEMRA_GC_MUL(x, y) __fmul_rn((x), (y))
#else
#define MEMRA_GC_ADD(x, y) ((x) + (y))
#define MEMRA_GC_MUL(x, y) ((x) * (y))
#endif

/* ---------------------------- scalar pieces (both sides) ----------------------------- */

/* silu of one conv channel: acc = 0; acc += w[t] * win[t] for t = 0..K-2 (oldest first); acc +=
 * w[K-1] * x (the new raw sample); f32, each op rounded; then memra_x_siluf. In two parts
 * (the CUDA kernel forms the first before its PDL wait: it reads only the conv state and the
 * weights, not the new sample): memra_gdn_conv_old, then memra_gdn_conv_new. */
MEMRA_GC float memra_gdn_conv_old(const float *w, const float *win, int32_t K)
{
    float acc = 0.0f;
    for (int32_t t = 0; t < K - 1; t++)
        acc = MEMRA_GC_ADD(acc, MEMRA_GC_MUL(w[t], win[t]));
    return acc;
}

MEMRA_GC float memra_gdn_conv_new(float acc, float w_last, float x)
{
    return memra_x_siluf(MEMRA_GC_ADD(acc, MEMRA_GC_MUL(w_last, x)));
}

MEMRA_GC float memra_gdn_conv_silu(const float *w, const float *win, float x, int32_t K)
{
    return memra_gdn_conv_new(memra_gdn_conv_old(w, win, K), w[K - 1], x);
}

/* beta = sigmoid(logit). */
MEMRA_GC float memra_gdn_beta(float logit) { return memra_x_sigmoidf(logit); }

/* lambda = exp(g), g = ssm_a * softplus(alpha + dt_bias) (ssm_a = -exp(A_log), f32 ops). */
MEMRA_GC float memra_gdn_decay(float ssm_a, float alpha, float dt_bias)
{
    return memra_x_expf(MEMRA_GC_MUL(ssm_a, memra_x_softplusf(MEMRA_GC_ADD(alpha, dt_bias))));
}

/* q's extra scale 1 / sqrt(dk) (applied after the L2 norm, as its own multiply). */
MEMRA_GC float memra_gdn_q_scale(int32_t dk) { return 1.0f / sqrtf((float)dk); }

/* L2-norm scale from the f64 sum of squares: 1 / max(||x||, eps). */
MEMRA_GC float memra_gdn_l2_scale(double ss, float eps)
{
    return 1.0f / fmaxf((float)sqrt(ss), eps);
}

/* RMS scale from the f64 sum of squares of n values: 1 / sqrtf(mean + eps). */
MEMRA_GC float memra_gdn_rms_scale(double ss, int32_t n, float eps)
{
    return 1.0f / sqrtf((float)memra_x_div_n(ss, n) + eps); /* = ss / (double)n */
}

/* Gated-norm output with the gate's silu(z) already formed (sz = memra_x_siluf(z)). */
MEMRA_GC float memra_gdn_gate_s(float o, float scale, float w, float sz)
{
    return MEMRA_GC_MUL(MEMRA_GC_MUL(w, MEMRA_GC_MUL(o, scale)), sz);
}

/* Gated-norm output: (w * (o * scale)) * silu(z). */
MEMRA_GC float memra_gdn_gate(float o, float scale, float w, float z)
{
    return memra_gdn_gate_s(o, scale, w, memra_x_siluf(z));
}

/* ------------------------- whole vectors: CPU emulation (host) ------------------------ */
#ifndef __CUDACC__

/* The xor butterfly over 32 lane partials (BFLY above) is ref_common's kref_warp_sum_f32 /
 * kref_warp_sum_f64: lane 0's value, which every lane ends with. */

/* sum_i x_i y_i over a dk-vector, f32: lane (i / 4) % 32 partials, then the butterfly. */
static inline float memra_gdn_dot(const float *x, const float *y, int64_t n)
{
    float p[32] = {0};
    for (int64_t i = 0; i < n; i++)
        p[(i >> 2) & 31] += x[i] * y[i];
    return kref_warp_sum_f32(p);
}

/* sum_i x_i^2 over a dk-vector, f64 (exact squares): lane (i / 4) % 32, then the butterfly. */
static inline double memra_gdn_ss_dk(const float *x, int64_t n)
{
    double p[32] = {0};
    for (int64_t i = 0; i < n; i++)
        p[(i >> 2) & 31] += (double)x[i] * (double)x[i];
    return kref_warp_sum_f64(p);
}

/* sum_j x_j^2 over a dv-vector, f64: lane j % 32, then the butterfly. */
static inline double memra_gdn_ss_dv(const float *x, int64_t n)
{
    double p[32] = {0};
    for (int64_t j = 0; j < n; j++)
        p[j & 31] += (double)x[j] * (double)x[j];
    return kref_warp_sum_f64(p);
}

/* L2 norm of a dk-vector (q or k of one key head); y may alias x. */
static inline void memra_gdn_l2_norm(float *y, const float *x, int64_t n, float eps)
{
    const float scale = memra_gdn_l2_scale(memra_gdn_ss_dk(x, n), eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale;
}

/* The delta rule on one value head's S^T (St[j * dk + i] = S[i, j]), row j by row j:
 *   s *= lambda; r = dot(s, k); delta = beta (v_j - r); s += k delta; o_j = dot(s, q)
 * (dot: memra_gdn_dot). The parameter list is the model's equation (spec §3.4 step 9). */
static inline void memra_gdn_delta_rule(float *St, float *o, const float *q, const float *k,
                                        const float *v, float beta, float lambda, int64_t dk,
                                        int64_t dv)
{
    for (int64_t j = 0; j < dv; j++) {
        float *s = St + j * dk;
        for (int64_t i = 0; i < dk; i++)
            s[i] *= lambda;
        const float delta = beta * (v[j] - memra_gdn_dot(s, k, dk));
        for (int64_t i = 0; i < dk; i++)
            s[i] += k[i] * delta;
        o[j] = memra_gdn_dot(s, q, dk);
    }
}

/* o_j <- (w_j * (o_j * rms_scale(o))) * silu(z_j) over one value head (n = dv). */
static inline void memra_gdn_gated_norm(float *o, const float *z, const float *w, int64_t n,
                                        float eps)
{
    const float scale = memra_gdn_rms_scale(memra_gdn_ss_dv(o, n), (int32_t)n, eps);
    for (int64_t j = 0; j < n; j++)
        o[j] = memra_gdn_gate(o[j], scale, w[j], z[j]);
}

#endif /* !__CUDACC__ */

#undef MEMRA_GC
#undef MEMRA_GC_ADD
#undef MEMRA_GC_MUL
#endif
