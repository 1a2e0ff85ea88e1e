/*
 * moe_route.cu — CUDA moe_route (contract: kernels/moe_route.h): softmax over the router
 * logits, top n_used (descending, lower index first on ties, NaN last), renormalised.
 *
 * One CTA of MEMRA_MOE_ROUTE_THREADS (256) threads per row. mx = block fmaxf (order-free);
 * Z = sum of memra_x_expf(l - mx) in the header's canonical order (thread-strided f32
 * partial sums, then block_sum_f32), which the reference emulates exactly (kref_exp_sum_blk);
 * pi = e * (1 / Z) as the reference, so ids and weights are bit-identical. The top-k is
 * n_used block arg-max passes under the reference's total order ranks_before (so the
 * selection is independent of the reduction order); pi is cached in
 * shared memory when n_expert <= kCacheExperts, else recomputed each pass (pure function of
 * (l, mx, Z): same bits every pass). The renormalisation is one thread's rank-order f32 sum,
 * exactly the reference's.
 * Must not: use atomics on floats, CUDA's expf, or let a row read another row; change
 * kThreads or the reduction without the reference (kernels/ref/moe_route.c).
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "exact_math.h"

namespace {

constexpr int kThreads = MEMRA_MOE_ROUTE_THREADS; /* part of the summation order */
constexpr int kCacheExperts = 8192; /* 32 KiB of pi in shared memory */

/* pa (expert a) ranks before pb (expert b): larger, NaN after every number, lower index on
 * ties; b < 0 means "no candidate yet". */
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b)
{
    if (b < 0)
        return a >= 0;
    if (a < 0)
        return false;
    if (isnan(pb))
        return !isnan(pa) || a < b;
    if (isnan(pa))
        return false;
    return pa > pb || (pa == pb && a < b);
}

/* The best (pi, index) of the block under ranks_before; every thread gets it. */
__device__ void block_best(float &p, int &i, float *rp, int *ri)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
        const float po = __shfl_xor_sync(FULL_MASK, p, o);
        const int io = __shfl_xor_sync(FULL_MASK, i, o);
        if (ranks_before(po, io, p, i)) {
            p = po;
            i = io;
        }
    }
    if (lane == 0) {
        rp[warp] = p;
        ri[warp] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; w++)
            if (ranks_before(rp[w], ri[w], rp[0], ri[0])) {
                rp[0] = rp[w];
                ri[0] = ri[w];
            }
    }
    __syncthreads();
    p = rp[0];
    i = ri[0];
    __syncthreads();
}

template <bool CACHE>
__global__ void __launch_bounds__(kThreads) moe_route_kernel(memra_moe_route_args a)
{
    extern __shared__ float pi_cache[]; /* [n_expert] when CACHE */
    __shared__ float red[33], rp[kThreads / 32];
    __shared__ int ri[kThreads / 32], ids[MEMRA_MOE_MAX_USED];
    __shared__ float wts[MEMRA_MOE_MAX_USED];
    __shared__ unsigned taken[MEMRA_MOE_MAX_EXPERTS / 32];
    const int b = blockIdx.x, E = a.n_expert;
    const float *l = a.logits + (size_t)b * (size_t)E; /* [n_expert] */
    for (int w = threadIdx.x; w < (E + 31) / 32; w += kThreads)
        taken[w] = 0;
    pdl_wait_release();
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += kThreads)
        mx = fmaxf(mx, l[e]);
    mx = block_max_f32(mx, red);
    float z = 0.0f;
    for (int e = threadIdx.x; e < E; e += kThreads)
        z = __fadd_rn(z, memra_x_expf(__fsub_rn(l[e], mx)));
    z = block_sum_f32(z, red);
    const float inv = 1.0f / z;
    if (CACHE)
        for (int e = threadIdx.x; e < E; e += kThreads)
            pi_cache[e] = memra_x_expf(__fsub_rn(l[e], mx)) * inv;
    __syncthreads();
    for (int k = 0; k < a.n_used; k++) {
        float pb = 0.0f;
        int ib = -1;
        for (int e = threadIdx.x; e < E; e += kThreads) {
            if (taken[e / 32] & (1u << (e % 32)))
                continue;
            const float pe = CACHE ? pi_cache[e] : memra_x_expf(__fsub_rn(l[e], mx)) * inv;
            if (ranks_before(pe, e, pb, ib)) {
                pb = pe;
                ib = e;
            }
        }
        block_best(pb, ib, rp, ri);
        if (threadIdx.x == 0) {
            taken[ib / 32] |= 1u << (ib % 32);
            ids[k] = ib;
            wts[k] = pb;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int k = 0; k < a.n_used; k++)
            sum = __fadd_rn(sum, wts[k]);
        const float denom = fmaxf(sum, 6.103515625e-5f); /* 2^-14, spec §3.5 step 3 */
        for (int k = 0; k < a.n_used; k++) {
            a.ids[(size_t)b * (size_t)a.n_used + (size_t)k] = ids[k];
            a.weights[(size_t)b * (size_t)a.n_used + (size_t)k] = wts[k] / denom;
        }
    }
}

} /* namespace */

extern "C" int memra_moe_route_cuda(const memra_moe_route_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("moe_route: null args");
    const char *why = memra_moe_route_check(a);
    if (why)
        return cuda_ops_invalid(why);
    if (a->n_expert <= kCacheExperts)
        return cuda_ops_result(cuda_ops_launch(moe_route_kernel<true>, dim3(a->b), dim3(kThreads),
                                               (size_t)a->n_expert * sizeof(float), s, 1, *a));
    return cuda_ops_result(
        cuda_ops_launch(moe_route_kernel<false>, dim3(a->b), dim3(kThreads), 0, s, 1, *a));
}
