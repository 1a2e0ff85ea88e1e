/*
 * attn_prep.cu — CUDA attn_prep (contract and exact arithmetic: kernels/attn_prep.h): per-head
 * q/k RMSNorm, partial NEOX / IMRoPE rotation, and the KV-cache append at positions[b].
 *
 * One CTA of MEMRA_ATTN_PREP_THREADS (128) threads per (head slot, row): slots [0, n_head)
 * are the q heads, slots [n_head, n_head + n_head_kv) the kv heads (norm + rope k, store k
 * and v). Bit-identical to kernels/ref/attn_prep.c: the head's sum of squares is the f64
 * block_sum_f64 order the header spells out (the reference emulates it), the angle and its
 * cos/sin are the shared inline memra_attn_rope_cs (exact_math.h), the rest is the same f32
 * sequence with __fmul_rn / __fadd_rn. The cache entry bytes are memra_f32_to_fp16 / the q8_0
 * reference quantizer of the same floats. The norm weights and the rope's cos / sin are
 * loaded and computed before the PDL wait, from positions[b] (head_pre says why that is final).
 * Must not: write a cache slot outside [0, n_ctx) (such a row writes only q); call CUDA's
 * pow / sin / cos / expf (exact_math.h only).
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace
{

constexpr int kThreads = MEMRA_ATTN_PREP_THREADS;              /* the norm's reduction order */
constexpr int kPer = MEMRA_ATTN_MAX_HEAD_DIM / kThreads;       /* head values per thread */
constexpr int kPairs = MEMRA_ATTN_MAX_HEAD_DIM / 2 / kThreads; /* rotary pairs per thread */
static_assert(MEMRA_ATTN_MAX_HEAD_DIM % (2 * kThreads) == 0, "whole pairs per thread");

/* What a head's norm and rotation need that no kernel of the tick writes: the thread's norm
 * weights (d = t + 128 i: model weights) and its pairs' cos / sin (m = t + 128 i) at the row's
 * position. Loaded and computed before the PDL wait, so the f64 pow and sincos chains and the
 * weights' L2 round trip run under the previous kernel's tail. Why positions[b] is final here:
 * the stage's tick-block copy (memra_copy_words_cuda) writes it at the start of the tick, and
 * attn_prep's predecessor, the q/k/v mmvq, releases its dependents only after its own PDL
 * wait; every kernel completes only after its wait, so once any attn_prep CTA runs, the copy
 * and every kernel before that mmvq have completed (kernels/cuda_ops.h states the rule). */
struct head_pre {
    float w[kPer], c[kPairs], s[kPairs];
};

__device__ __forceinline__ void head_pre_load(const memra_attn_prep_args &a, const float *w, int p,
                                              head_pre &h)
{
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        const int d = threadIdx.x + kThreads * i;
        h.w[i] = d < a.head_dim ? w[d] : 0.0f;
    }
    const int half = a.n_rot / 2;
#pragma unroll
    for (int i = 0; i < kPairs; i++) {
        const int m = threadIdx.x + kThreads * i;
        h.c[i] = h.s[i] = 0.0f;
        if (m < half)
            memra_attn_rope_cs(memra_attn_rope_pos(a.sections, m, p), m, a.n_rot, a.freq_base,
                               a.freq_scale, &h.c[i], &h.s[i]);
    }
}

/* y[dh] = rmsnorm(x) * w, then rotated at position p (in shared memory); w, cos and sin
 * from head_pre_load. */
__device__ __forceinline__ void norm_rope(const memra_attn_prep_args &a, const float *x,
                                          const head_pre &h, float *y, double *red)
{
    const int dh = a.head_dim;
    double ss = 0.0;
    for (int d = threadIdx.x; d < dh; d += kThreads)
        ss += (double)x[d] * (double)x[d];
    ss = block_sum_f64(ss, red);
    const float scale = 1.0f / sqrtf((float)memra_x_div_n(ss, dh) + a.eps); /* ss / (double)dh */
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        const int d = threadIdx.x + kThreads * i;
        if (d < dh)
            y[d] = __fmul_rn(h.w[i], __fmul_rn(x[d], scale));
    }
    __syncthreads();
    const int half = a.n_rot / 2;
#pragma unroll
    for (int i = 0; i < kPairs; i++) {
        const int m = threadIdx.x + kThreads * i;
        if (m < half) {
            const float c = h.c[i], s = h.s[i];
            const float x0 = y[m], x1 = y[m + half];
            y[m] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            y[m + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        }
    }
    __syncthreads();
}

/* One cache entry (head_dim values of src) as kv_type at dst. */
__device__ void kv_store(int kv_type, int dh, const float *src, u8 *dst)
{
    if (kv_type == MEMRA_QT_F16) {
        for (int d = threadIdx.x; d < dh; d += kThreads) {
            const u16 h = dev_f32_to_fp16(src[d]);
            dst[2 * d] = (u8)h;
            dst[2 * d + 1] = (u8)(h >> 8);
        }
        return;
    }
    /* q8_0 (quant.c quant_q8_0): amax from 0 (NaN ignored), d = amax / 127, id = 1 / d,
     * q = (int8) roundf(x * id). One warp per 34-byte block. */
    const int lane = threadIdx.x & 31;
    for (int k = threadIdx.x >> 5; k < dh / 32; k += kThreads / 32) {
        const float v = src[32 * k + lane];
        const float amax = warp_max_f32(fmaxf(0.0f, fabsf(v)));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        u8 *blk = dst + 34 * k;
        blk[2 + lane] = (u8)(i8)(i32)roundf(__fmul_rn(v, id));
        if (lane == 0) {
            const u16 h = dev_f32_to_fp16(d);
            blk[0] = (u8)h;
            blk[1] = (u8)(h >> 8);
        }
    }
}

__global__ void __launch_bounds__(kThreads) attn_prep_kernel(memra_attn_prep_args a)
{
    __shared__ double red[33];
    __shared__ float y[MEMRA_ATTN_MAX_HEAD_DIM];
    const int slot = blockIdx.x, b = blockIdx.y, dh = a.head_dim;
    const int p = a.positions[b]; /* final before the wait: see head_pre */
    const bool q_slot = slot < a.n_head, kv_row = p >= 0 && p < a.n_ctx;
    head_pre h;
    if (q_slot || kv_row) /* block-uniform */
        head_pre_load(a, q_slot ? a.q_norm : a.k_norm, p, h);
    pdl_wait_release();
    if (q_slot) {
        const float *src = a.qg + (size_t)b * (size_t)(2 * a.n_head * dh) + (size_t)(2 * slot * dh);
        norm_rope(a, src, h, y, red);
        float *q = a.q + (size_t)b * (size_t)(a.n_head * dh) + (size_t)(slot * dh);
        for (int d = threadIdx.x; d < dh; d += kThreads)
            q[d] = y[d];
    } else if (kv_row) {
        const int j = slot - a.n_head;
        const size_t off = (size_t)b * (size_t)(a.n_head_kv * dh) + (size_t)(j * dh);
        const u64 hb = a.kv_type == MEMRA_QT_F16 ? (u64)dh * 2u : (u64)(dh / 32) * 34u;
        const u64 entry = ((u64)p * (u64)a.n_head_kv + (u64)j) * hb;
        norm_rope(a, a.k + off, h, y, red);
        kv_store(a.kv_type, dh, y, (u8 *)(uintptr_t)a.k_cache[b] + entry);
        kv_store(a.kv_type, dh, a.v + off, (u8 *)(uintptr_t)a.v_cache[b] + entry);
    }
}

} /* namespace */

extern "C" int memra_attn_prep_cuda(const memra_attn_prep_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("attn_prep: null args");
    const char *why = memra_attn_prep_check(a);
    if (why)
        return cuda_ops_invalid(why);
    return cuda_ops_result(cuda_ops_launch(attn_prep_kernel, dim3(a->n_head + a->n_head_kv, a->b),
                                           dim3(kThreads), 0, s, 1, *a));
}
