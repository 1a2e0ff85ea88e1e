/*
 * rms_norm_q8.cu — CUDA rms_norm_q8 (contract: kernels/rms_norm_q8.h):
 * y = q8_1(w * (x * (1 / sqrtf(mean(x^2) + eps)))), optionally also the f32 y.
 *
 * One CTA of MEMRA_RMS_NORM_Q8_THREADS (1024) threads per row. The sum of squares is
 * accumulated in f64 (each x^2 is exact in f64) in the canonical order of the header:
 * thread-strided partial sums, then block_sum_f64_last (warp butterflies, then a butterfly
 * over the 32 warp sums); the CPU reference emulates that order exactly (kref_rms_scale_blk), so
 * ss, the scale, every y and every q8_1 byte are bit-identical. Everything after the sum is
 * the reference's f32 sequence, and the q8_1 blocks come from the shared warp quantizer.
 * Must not: depend on b (one CTA per row, fixed blockDim); change kThreads or the reduction
 * without the reference (kernels/ref/ref_common.c).
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "exact_math.h"

namespace {

constexpr int kThreads = MEMRA_RMS_NORM_Q8_THREADS; /* part of the summation order */
static_assert(kThreads % 32 == 0 && kThreads <= 1024,
              "block_sum_f64_last: whole warps, at most 32");

/* Elements per thread kept in registers between the sum and the quantization (n up to
 * kMaxPer * kThreads); wider rows read x again. Thread t's elements j = t + kThreads i are
 * both its sum terms (in that order) and, with kThreads = 32 x 32, lane t % 32 of the q8_1
 * blocks k = t / 32 + 32 i its warp quantizes. */
constexpr int kMaxPer = 8;
static_assert(kThreads == 1024, "the register path pairs sum terms with quantized blocks");

__global__ void __launch_bounds__(kThreads) rms_norm_q8_kernel(memra_rms_norm_q8_args a)
{
    __shared__ double red[32];
    const int b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *x = a.x + (size_t)b * (size_t)a.n; /* [n] */
    const bool regs = a.n <= kMaxPer * kThreads;
    float xv[kMaxPer], wv[kMaxPer];
    if (regs) /* the norm weight does not depend on the previous kernel: load it first */
#pragma unroll
        for (int i = 0; i < kMaxPer; i++) {
            const int j = threadIdx.x + kThreads * i;
            wv[i] = j < a.n ? a.w[j] : 0.0f;
        }
    if (a.release_first) /* uniform: the launch's */
        pdl_release_wait();
    else
        pdl_wait_release();
    double ss = 0.0;
    if (regs) {
#pragma unroll
        for (int i = 0; i < kMaxPer; i++) {
            const int j = threadIdx.x + kThreads * i;
            xv[i] = j < a.n ? x[j] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kMaxPer; i++)
            if (threadIdx.x + kThreads * i < a.n)
                ss += (double)xv[i] * (double)xv[i];
    } else {
        for (int j = threadIdx.x; j < a.n; j += kThreads)
            ss += (double)x[j] * (double)x[j];
    }
    ss = block_sum_f64_last(ss, red);                 /* red's only use */
    const float mean = (float)memra_x_div_n(ss, a.n); /* = ss / (double)n, the same bits */
    const float scale = 1.0f / sqrtf(mean + a.eps); /* eps inside the sqrt, added to the mean */
    const int nblk = a.n / 32;
    u8 *yq = (u8 *)a.y_q + (size_t)b * (size_t)nblk * Q8_1_BYTES;
    if (regs) {
#pragma unroll
        for (int i = 0; i < kMaxPer; i++) {
            const int k = warp + 32 * i, j = 32 * k + lane;
            if (k >= nblk)
                break;
            const float y = __fmul_rn(wv[i], __fmul_rn(xv[i], scale));
            q8_1_quantize_warp(y, lane, yq + (size_t)k * Q8_1_BYTES);
            if (a.y_f32)
                a.y_f32[(size_t)b * (size_t)a.n + (size_t)j] = y;
        }
        return;
    }
    for (int k = warp; k < nblk; k += kThreads / 32) {
        const int j = 32 * k + lane;
        const float y = __fmul_rn(a.w[j], __fmul_rn(x[j], scale));
        q8_1_quantize_warp(y, lane, yq + (size_t)k * Q8_1_BYTES);
        if (a.y_f32)
            a.y_f32[(size_t)b * (size_t)a.n + (size_t)j] = y;
    }
}

} /* namespace */

extern "C" int memra_rms_norm_q8_cuda(const memra_rms_norm_q8_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("rms_norm_q8: null args");
    const char *why = memra_rms_norm_q8_check(a);
    if (why)
        return cuda_ops_invalid(why);
    return cuda_ops_result(
        cuda_ops_launch(rms_norm_q8_kernel, dim3(a->b), dim3(kThreads), 0, s, 1, *a));
}
