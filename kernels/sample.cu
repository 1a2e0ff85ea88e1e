/*
 * sample.cu — CUDA sample (rule: kernels/sample.h): greedy argmax, or temperature + top-k +
 * top-p with the Philox draw of runtime/rng.h keyed by the row's (seed, step).
 *
 * One thread-block cluster of 8 CTAs (512 threads each) per row; CTA c owns the slice
 * [c S, (c + 1) S) of the vocabulary, S = ceil(n_vocab / 8), held in shared memory when
 * n_vocab <= MEMRA_SAMPLE_SMEM_VOCAB (otherwise logits are re-read from global memory and p
 * lives in scratch). Cluster-wide values are exchanged through distributed shared memory:
 * each CTA publishes its part, the cluster barrier, then every CTA reads all 8 parts in
 * rank order and derives the same result. The steps follow the reference's definitions:
 *  1. argmax (lowest index on ties, NaN skipped) and the non-NaN count; greedy rows stop.
 *  2. top-k: t_k = the top_k-th largest order-preserving key, found exactly by a 4-round
 *     MSB-first radix select (8-bit digits, integer histograms) instead of bisection — the
 *     same number: the largest t with #{key >= t} >= top_k.
 *  3. p_i = memra_x_expf((l_i - l_max) / T) for i in C (else marked -1): kernels/exact_math.h,
 *     the reference's bits.
 *  4. top-p: the largest bit pattern t_p with mass(p >= t_p) >= top_p * Z, by the same radix
 *     select over the bits of p with per-bin MASSES.
 *  5. draw: first i in K (increasing id) whose running mass exceeds u * mass(K).
 * Masses are exact integers: p * 2^100 truncated to a 128-bit fixed-point value (p <= 1, at
 * most 2^24 terms, so no overflow; terms below 2^-77 vanish, < 2^-53 of Z in total), summed
 * with shared-memory 64-bit integer atomics (carry propagated; lanes of a warp with equal
 * bins aggregated first), which are associative: the sums are exact and independent of
 * thread order. Radix walks over the 256 bins are done by one warp (lane suffix sums). The
 * reference computes the very same integers (kernels/ref/sample.c), so the token is
 * bit-identical; the draw target floor(mass(K) * u24 / 2^24) is exact.
 * Must not: use float atomics or CUDA's expf, or let a row see another row (each cluster is
 * one row); change the fixed-point mass (fx) without the reference.
 */
#include <cooperative_groups.h>

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "exact_math.h"
#include "rng.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kCluster = 8, kThreads = 512, kWarps = kThreads / 32; /* 512: 128 registers a thread */
typedef unsigned __int128 u128;

struct sample_geom {
    int slice; /* S: vocabulary entries per CTA */
    int fits;  /* the slice lives in shared memory */
};

struct sample_shared {
    /* published to the cluster */
    float ex_v;
    int ex_i, ex_n;
    unsigned hist_c[2][256];
    u64 hist_m[2][256][2]; /* 128-bit bins as (lo, hi) */
    u64 ex_sum[2][2];
    /* local */
    unsigned tot_c[256];
    u128 tot_m[256];
    float red_v[kWarps];
    int red_i[kWarps], red_n[kWarps];
    u128 red_s[kWarps];
    u32 bc_prefix;
    int bc_rem;
    u128 bc_rem_m, bc_above, bc_total;
};

/* Order-preserving key of a non-NaN float (sample.c fkey). */
__device__ __forceinline__ u32 fkey(float f)
{
    const u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* p (in [0, 1]) * 2^100, truncated. */
__device__ __forceinline__ u128 fx(float p)
{
    const u32 bits = __float_as_uint(p), E = bits >> 23;
    const u64 m = (bits & 0x7FFFFFu) | (E ? 0x800000u : 0u);
    const int sh = (int)(E ? E : 1) - 50;
    return sh >= 0 ? (u128)m << sh : (u128)(m >> -sh);
}

__device__ __forceinline__ double u128_to_f64(u128 x)
{
    return (double)(u64)(x >> 64) * 18446744073709551616.0 + (double)(u64)x;
}

/* floor(d) for 0 <= d < 2^127 (exact: the remainder below 2^64 is a double too). */
__device__ __forceinline__ u128 f64_to_u128(double d)
{
    if (d < 18446744073709551616.0)
        return (u128)(u64)d;
    const u64 hi = (u64)(d / 18446744073709551616.0);
    return ((u128)hi << 64) | (u64)(d - (double)hi * 18446744073709551616.0);
}

__device__ __forceinline__ u128 shfl_xor_u128(u128 v, int o)
{
    const u64 lo = __shfl_xor_sync(FULL_MASK, (u64)v, o), hi = __shfl_xor_sync(FULL_MASK, (u64)(v >> 64), o);
    return ((u128)hi << 64) | lo;
}

__device__ __forceinline__ u128 shfl_up_u128(u128 v, int o)
{
    const u64 lo = __shfl_up_sync(FULL_MASK, (u64)v, o), hi = __shfl_up_sync(FULL_MASK, (u64)(v >> 64), o);
    return ((u128)hi << 64) | lo;
}

__device__ __forceinline__ u128 shfl_down_u128(u128 v, int o)
{
    const u64 lo = __shfl_down_sync(FULL_MASK, (u64)v, o), hi = __shfl_down_sync(FULL_MASK, (u64)(v >> 64), o);
    return ((u128)hi << 64) | lo;
}

__device__ __forceinline__ u128 shfl_u128(u128 v, int src)
{
    const u64 lo = __shfl_sync(FULL_MASK, (u64)v, src), hi = __shfl_sync(FULL_MASK, (u64)(v >> 64), src);
    return ((u128)hi << 64) | lo;
}

__device__ __forceinline__ unsigned shfl_down_any(unsigned v, int o) { return __shfl_down_sync(FULL_MASK, v, o); }
__device__ __forceinline__ u128 shfl_down_any(u128 v, int o) { return shfl_down_u128(v, o); }
__device__ __forceinline__ unsigned shfl_any(unsigned v, int src) { return __shfl_sync(FULL_MASK, v, src); }
__device__ __forceinline__ u128 shfl_any(u128 v, int src) { return shfl_u128(v, src); }

/* 128-bit add into a shared (lo, hi) bin with two 64-bit integer atomics. */
__device__ __forceinline__ void atomic_add_u128(u64 *bin, u128 v)
{
    const u64 lo = (u64)v, old = atomicAdd((unsigned long long *)bin, (unsigned long long)lo);
    const u64 hi = (u64)(v >> 64) + (old + lo < old ? 1u : 0u);
    if (hi)
        atomicAdd((unsigned long long *)bin + 1, (unsigned long long)hi);
}

__device__ __forceinline__ u128 bin_u128(const u64 *bin) { return ((u128)bin[1] << 64) | bin[0]; }

/* Histogram adds, called by all 32 lanes of a warp (bin < 0: the lane adds nothing). The
 * hot bins of a logit / probability histogram would serialise plain shared atomics, so
 * lanes with equal bins are aggregated first (the sums are integers: any grouping gives the
 * same bins). Counts: one atomicAdd of the group size per distinct bin. */
__device__ __forceinline__ void hist_add_count(unsigned *hist, int bin)
{
    const unsigned grp = __match_any_sync(FULL_MASK, bin);
    if (bin >= 0 && (int)(threadIdx.x & 31) == __ffs(grp) - 1)
        atomicAdd(&hist[bin], (unsigned)__popc(grp));
}

/* Masses: with at most 8 distinct bins in the warp, each group's sum is a butterfly over
 * the warp (non-members add 0) and one 128-bit atomic add; more distinct bins mean little
 * contention, so the lanes add directly. */
__device__ __forceinline__ void hist_add_mass(u64 (*hist)[2], int bin, u128 v)
{
    const int lane = threadIdx.x & 31;
    const unsigned grp = __match_any_sync(FULL_MASK, bin);
    unsigned todo = __ballot_sync(FULL_MASK, bin >= 0 && lane == __ffs(grp) - 1);
    if (__popc(todo) > 8) {
        if (bin >= 0)
            atomic_add_u128(hist[bin], v);
        return;
    }
    while (todo) { /* the same in every lane: a warp-uniform loop */
        const int leader = __ffs(todo) - 1;
        todo &= todo - 1;
        const int b = __shfl_sync(FULL_MASK, bin, leader);
        u128 sum = bin == b ? v : 0;
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1)
            sum += shfl_xor_u128(sum, o);
        if (lane == leader)
            atomic_add_u128(hist[b], sum);
    }
}

/* The radix walk, by warp 0: the largest bin `sel` whose suffix total (bins >= sel) reaches
 * rem, and the total of the bins above it (what the reference's descending walk finds).
 * Lane l owns bins [8l, 8l + 8); the lane suffix sums are non-increasing in l, so the
 * crossing lane is the highest lane whose suffix sum reaches rem. */
template <typename T>
__device__ void warp_walk(const T *tot, T rem, int &sel, T &above)
{
    const int lane = threadIdx.x & 31;
    T t = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        t += tot[8 * lane + k];
    T suf = t;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T up = shfl_down_any(suf, o);
        if (lane + o < 32)
            suf += up;
    }
    const unsigned reach = __ballot_sync(FULL_MASK, suf >= rem);
    const int L = reach ? 31 - __clz((int)reach) : 0;
    T cum = shfl_any(suf - t, L); /* bins above lane L's */
    int s = 8 * L;
    if (lane == L)
        for (int k = 7; k >= 0; k--) {
            if (cum + tot[8 * L + k] >= rem) {
                s = 8 * L + k;
                break;
            }
            cum += tot[8 * L + k];
        }
    sel = __shfl_sync(FULL_MASK, s, L);
    above = shfl_any(cum, L);
}

/* Block sum of u128 (exact); every thread gets it. */
__device__ u128 block_sum_u128(u128 v, sample_shared &sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v += shfl_xor_u128(v, o);
    if (lane == 0)
        sm.red_s[warp] = v;
    __syncthreads();
    u128 t = 0;
    for (int w = 0; w < kWarps; w++)
        t += sm.red_s[w];
    __syncthreads();
    return t;
}

/* Exclusive prefix of v over thread order (exact). */
__device__ u128 block_exscan_u128(u128 v, sample_shared &sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u128 inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u128 up = shfl_up_u128(inc, o);
        if (lane >= o)
            inc += up;
    }
    if (lane == 31)
        sm.red_s[warp] = inc;
    __syncthreads();
    u128 before = 0;
    for (int w = 0; w < warp; w++)
        before += sm.red_s[w];
    __syncthreads();
    return before + inc - v;
}

/* a ranks before b in the argmax: larger, lower index on ties; i < 0 = none. */
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib)
{
    return ia >= 0 && (ib < 0 || va > vb || (va == vb && ia < ib));
}

/* Phase 1: the row's argmax and non-NaN count (every CTA of the cluster gets them). */
__device__ void row_argmax(const float *lg, float *dyn, int n, int lo, const sample_geom &g,
                           sample_shared &sm, cg::cluster_group &cl, float &bv, int &bi, int &nok)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    bv = 0.0f;
    bi = -1;
    nok = 0;
    constexpr int U = 8; /* independent loads in flight per thread */
    for (int base = 0; base < n; base += kThreads * U) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = base + u * kThreads + (int)threadIdx.x;
            v[u] = i < n ? lg[i] : NAN;
        }
#pragma unroll
        for (int u = 0; u < U; u++) { /* increasing i per thread: strict > keeps the lowest */
            const int i = base + u * kThreads + (int)threadIdx.x;
            if (i >= n)
                continue;
            if (g.fits)
                dyn[i] = v[u];
            if (!isnan(v[u])) {
                nok++;
                if (bi < 0 || v[u] > bv) {
                    bv = v[u];
                    bi = lo + i;
                }
            }
        }
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
        const float vo = __shfl_xor_sync(FULL_MASK, bv, o);
        const int io = __shfl_xor_sync(FULL_MASK, bi, o);
        nok += __shfl_xor_sync(FULL_MASK, nok, o);
        if (better(vo, io, bv, bi)) {
            bv = vo;
            bi = io;
        }
    }
    if (lane == 0) {
        sm.red_v[warp] = bv;
        sm.red_i[warp] = bi;
        sm.red_n[warp] = nok;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = sm.red_v[0];
        int i = sm.red_i[0], c = sm.red_n[0];
        for (int w = 1; w < kWarps; w++) {
            c += sm.red_n[w];
            if (better(sm.red_v[w], sm.red_i[w], v, i)) {
                v = sm.red_v[w];
                i = sm.red_i[w];
            }
        }
        sm.ex_v = v;
        sm.ex_i = i;
        sm.ex_n = c;
    }
    cl.sync();
    bv = 0.0f;
    bi = -1;
    nok = 0;
    for (int r = 0; r < kCluster; r++) {
        const sample_shared *o = cl.map_shared_rank(&sm, r);
        nok += o->ex_n;
        if (better(o->ex_v, o->ex_i, bv, bi)) {
            bv = o->ex_v;
            bi = o->ex_i;
        }
    }
}

/* Phase 2: the top_k-th largest key among the non-NaN logits (exact radix select). */
__device__ u32 topk_threshold(const float *L, int n, int top_k, sample_shared &sm, cg::cluster_group &cl)
{
    u32 prefix = 0;
    int rem = top_k;
    for (int r = 0; r < 4; r++) {
        const int shift = 24 - 8 * r, buf = r & 1;
        if (threadIdx.x < 256)
            sm.hist_c[buf][threadIdx.x] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += kThreads) { /* block-uniform trip count */
            const int i = base + (int)threadIdx.x;
            int bin = -1;
            if (i < n && !isnan(L[i])) {
                const u32 k = fkey(L[i]);
                if (r == 0 || (k >> (shift + 8)) == (prefix >> (shift + 8)))
                    bin = (int)((k >> shift) & 255);
            }
            hist_add_count(sm.hist_c[buf], bin);
        }
        __syncthreads();
        cl.sync();
        if (threadIdx.x < 256) {
            unsigned t = 0;
            for (int q = 0; q < kCluster; q++)
                t += cl.map_shared_rank(&sm, q)->hist_c[buf][threadIdx.x];
            sm.tot_c[threadIdx.x] = t;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            int sel;
            unsigned cum;
            warp_walk<unsigned>(sm.tot_c, (unsigned)rem, sel, cum);
            if (threadIdx.x == 0) {
                sm.bc_rem = rem - (int)cum;
                sm.bc_prefix = prefix | ((u32)sel << shift);
            }
        }
        __syncthreads();
        rem = sm.bc_rem;
        prefix = sm.bc_prefix;
        __syncthreads();
    }
    return prefix;
}

/* Phase 4: the top-p threshold (bit pattern of p) for mass target `target`; *total gets
 * mass(p >= threshold). */
__device__ u32 topp_threshold(const float *P, int n, u128 target, u128 *total, sample_shared &sm,
                              cg::cluster_group &cl)
{
    u32 prefix = 0;
    u128 rem = target, above = 0;
    for (int r = 0; r < 4; r++) {
        const int shift = 24 - 8 * r, buf = r & 1;
        if (threadIdx.x < 256)
            sm.hist_m[buf][threadIdx.x][0] = sm.hist_m[buf][threadIdx.x][1] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += kThreads) { /* block-uniform trip count */
            const int i = base + (int)threadIdx.x;
            int bin = -1;
            u128 m = 0;
            if (i < n && P[i] >= 0.0f) {
                const u32 pb = __float_as_uint(P[i]);
                if (r == 0 || (pb >> (shift + 8)) == (prefix >> (shift + 8))) {
                    bin = (int)((pb >> shift) & 255);
                    m = fx(P[i]);
                }
            }
            hist_add_mass(sm.hist_m[buf], bin, m);
        }
        __syncthreads();
        cl.sync();
        if (threadIdx.x < 256) {
            u128 t = 0;
            for (int q = 0; q < kCluster; q++)
                t += bin_u128(cl.map_shared_rank(&sm, q)->hist_m[buf][threadIdx.x]);
            sm.tot_m[threadIdx.x] = t;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            int sel;
            u128 cum;
            warp_walk<u128>(sm.tot_m, rem, sel, cum);
            if (threadIdx.x == 0) {
                sm.bc_rem_m = rem - cum;
                sm.bc_above = above + cum;
                sm.bc_total = above + cum + sm.tot_m[sel];
                sm.bc_prefix = prefix | ((u32)sel << shift);
            }
        }
        __syncthreads();
        rem = sm.bc_rem_m;
        above = sm.bc_above;
        prefix = sm.bc_prefix;
        *total = sm.bc_total;
        __syncthreads();
    }
    return prefix;
}

/* Phase 5 in the CTA whose slice holds the crossing: the first i with running mass
 * (base + kept p up to i) > target. */
__device__ void draw_in_slice(const float *P, int n, int lo, u32 pmin, u128 base, u128 target,
                              int32_t *out, sample_shared &sm)
{
    const int ch = (n + kThreads - 1) / kThreads, i0 = min(n, (int)threadIdx.x * ch), i1 = min(n, i0 + ch);
    u128 cs = 0;
    for (int i = i0; i < i1; i++)
        if (P[i] >= 0.0f && __float_as_uint(P[i]) >= pmin)
            cs += fx(P[i]);
    u128 cum = base + block_exscan_u128(cs, sm);
    if (cum <= target && target < cum + cs) {
        for (int i = i0; i < i1; i++) {
            if (!(P[i] >= 0.0f && __float_as_uint(P[i]) >= pmin))
                continue;
            cum += fx(P[i]);
            if (cum > target) {
                *out = lo + i;
                break;
            }
        }
    }
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(memra_sample_args a, sample_geom g)
{
    extern __shared__ float dyn[]; /* [slice] logits, then p, when g.fits */
    __shared__ sample_shared sm;
    cg::cluster_group cl = cg::this_cluster();
    const int c = (int)cl.block_rank(), row = blockIdx.y, V = a.n_vocab;
    const int lo = min(V, c * g.slice), n = min(V, lo + g.slice) - lo;
    const float *lg = a.logits + (size_t)row * (size_t)V + (size_t)lo;
    float *P = g.fits ? dyn : a.scratch + (size_t)row * (size_t)V + (size_t)lo;
    const float *L = g.fits ? dyn : lg;
    pdl_wait_release();
    const memra_sample_params prm = a.params[row];
    float lmax;
    int best, nok;
    row_argmax(lg, dyn, n, lo, g, sm, cl, lmax, best, nok);
    __syncthreads();
    if (!(prm.temperature > 0.0f) || prm.top_k == 1 || best < 0 || isinf(lmax)) {
        if (c == 0 && threadIdx.x == 0)
            a.out_tokens[row] = best < 0 ? 0 : best;
        cl.sync(); /* no CTA leaves while another may read its shared memory */
        return;
    }
    const u32 kmin = prm.top_k > 0 && prm.top_k < nok ? topk_threshold(L, n, prm.top_k, sm, cl) : 0u;
    u128 z = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) {
        const float v = L[i];
        const bool in_c = !isnan(v) && fkey(v) >= kmin;
        const float p =
            in_c ? memra_x_expf(__fdiv_rn(__fsub_rn(v, lmax), prm.temperature)) : -1.0f;
        P[i] = p;
        if (in_c)
            z += fx(p);
    }
    z = block_sum_u128(z, sm);
    u32 pmin = 0;
    u128 total;
    if (threadIdx.x == 0) {
        sm.ex_sum[0][0] = (u64)z;
        sm.ex_sum[0][1] = (u64)(z >> 64);
    }
    cl.sync();
    z = 0;
    for (int r = 0; r < kCluster; r++)
        z += bin_u128(cl.map_shared_rank(&sm, r)->ex_sum[0]);
    total = z;
    if (prm.top_p > 0.0f && prm.top_p < 1.0f) {
        u128 target = f64_to_u128((double)prm.top_p * u128_to_f64(z));
        pmin = topp_threshold(P, n, target ? target : 1, &total, sm, cl);
    }
    /* draw: target = floor(total * u24 / 2^24) exactly (u = u24 * 2^-24, rng.h) */
    const u32 ctr[4] = {(u32)prm.step, (u32)(prm.step >> 32), 0u, 0u};
    const u32 key[2] = {(u32)prm.seed, (u32)(prm.seed >> 32)};
    u32 rnd[4];
    memra_philox4x32_10(ctr, key, rnd);
    const u32 u24 = rnd[0] >> 8;
    const u128 target = (total >> 24) * u24 + (((total & 0xFFFFFFu) * u24) >> 24);
    u128 mine = 0;
    for (int i = threadIdx.x; i < n; i += kThreads)
        if (P[i] >= 0.0f && __float_as_uint(P[i]) >= pmin)
            mine += fx(P[i]);
    mine = block_sum_u128(mine, sm);
    if (threadIdx.x == 0) {
        sm.ex_sum[1][0] = (u64)mine;
        sm.ex_sum[1][1] = (u64)(mine >> 64);
    }
    cl.sync();
    u128 before = 0;
    for (int r = 0; r < c; r++)
        before += bin_u128(cl.map_shared_rank(&sm, r)->ex_sum[1]);
    if (before <= target && target < before + mine) /* exactly one CTA: target < total */
        draw_in_slice(P, n, lo, pmin, before, target, a.out_tokens + row, sm);
    cl.sync();
}

} /* namespace */

extern "C" int memra_sample_cuda(const memra_sample_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("sample: null args");
    const char *why = memra_sample_check(a);
    if (why)
        return cuda_ops_invalid(why);
    if (a->b > 65535)
        return cuda_ops_invalid("sample: b exceeds the grid limit 65535");
    sample_geom g;
    g.slice = (a->n_vocab + kCluster - 1) / kCluster;
    g.fits = a->n_vocab <= MEMRA_SAMPLE_SMEM_VOCAB;
    if (!g.fits && !a->scratch)
        return cuda_ops_invalid("sample: n_vocab > MEMRA_SAMPLE_SMEM_VOCAB needs scratch [2, b, n_vocab]");
    const size_t smem = g.fits ? (size_t)g.slice * sizeof(float) : 0;
    return cuda_ops_result(cuda_ops_launch(sample_kernel, dim3(kCluster, a->b), dim3(kThreads), smem, s,
                                           kCluster, *a, g));
}
