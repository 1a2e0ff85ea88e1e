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
 * reference quantizer of the same floats.
 * Must not: write a cache slot outside [0, n_ctx) (such a row writes only q); call CUDA's
 * pow / sin / cos / expf (exact_math.h only).
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace {

constexpr int kThreads = MEMRA_ATTN_PREP_THREADS; /* the norm's reduction order */

/* y[dh] = rmsnorm(x) * w, then rotated at position p (in shared memory). */
__device__ void norm_rope(const memra_attn_prep_args &a, const float *x, const float *w, float *y,
                          int p, double *red)
{
    const int dh = a.head_dim;
    double ss = 0.0;
    for (int d = threadIdx.x; d < dh; d += kThreads)
        ss += (double)x[d] * (double)x[d];
    ss = block_sum_f64(ss, red);
    const float scale = 1.0f / sqrtf((float)memra_x_div_n(ss, dh) + a.eps); /* ss / (double)dh */
    for (int d = threadIdx.x; d < dh; d += kThreads)
        y[d] = __fmul_rn(w[d], __fmul_rn(x[d], scale));
    __syncthreads();
    const int half = a.n_rot / 2;
    for (int m = threadIdx.x; m < half; m += kThreads) {
        float c, s;
        memra_attn_rope_cs(memra_attn_rope_pos(a.sections, m, p), m, a.n_rot, a.freq_base,
                           a.freq_scale, &c, &s);
        const float x0 = y[m], x1 = y[m + half];
        y[m] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        y[m + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
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
    pdl_wait_release();
    const int p = a.positions[b];
    if (slot < a.n_head) {
        const float *src = a.qg + (size_t)b * (size_t)(2 * a.n_head * dh) + (size_t)(2 * slot * dh);
        norm_rope(a, src, a.q_norm, y, p, red);
        float *q = a.q + (size_t)b * (size_t)(a.n_head * dh) + (size_t)(slot * dh);
        for (int d = threadIdx.x; d < dh; d += kThreads)
            q[d] = y[d];
    } else if (p >= 0 && p < a.n_ctx) {
        const int j = slot - a.n_head;
        const size_t off = (size_t)b * (size_t)(a.n_head_kv * dh) + (size_t)(j * dh);
        const u64 hb = a.kv_type == MEMRA_QT_F16 ? (u64)dh * 2u : (u64)(dh / 32) * 34u;
        const u64 entry = ((u64)p * (u64)a.n_head_kv + (u64)j) * hb;
        norm_rope(a, a.k + off, a.k_norm, y, p, red);
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
