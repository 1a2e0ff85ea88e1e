/*
 * gdn_step.cu — CUDA gdn_step (contract and canonical order: kernels/gdn_step.h): one Gated
 * DeltaNet decode token per row: causal conv step + silu, L2 norms, decay / beta, the delta
 * rule on the S^T state, gated RMSNorm with silu(z), q8_1 output. Bit-identical (memcmp) to
 * the CPU reference: every piece is a gdn_canon.h function or the lane / butterfly order of
 * gdn_step.h, which both paths below implement for any shape.
 *
 * Fast kernel (head_k_dim 128 or 256, head_v_dim % 32 == 0, Hv / Hk <= 8): one CTA of 8 warps
 * (4 when Hv * b exceeds 2 CTAs per SM) per (value head h, row b). The value heads that share
 * key head a form one thread-block cluster: each CTA recomputes q_a, k_a from the OLD conv
 * state, the cluster barrier then guarantees every reader is done before the cluster's first
 * CTA shifts those channels (a CTA's own v channels are shifted by the thread that read
 * them). Lane l of every warp holds q_i, k_i for i = 4l..4l+3 (+128): exactly the canonical
 * dk lane layout, so each warp forms the L2 sums in registers (every warp the same bits).
 * The state S_h^T is [head_v_dim rows j][head_k_dim] f32; a warp takes 16 rows at a time
 * (head_v_dim / 16 tasks over the warps: at head_v_dim 128 and 8 warps one each, the whole
 * 64 KiB head in flight at once), loads them with coalesced 16-byte loads (same layout) and
 * per row computes
 *   s *= lambda;  r = sum_i s_i k_i;  delta = beta (v_j - r);  s += k delta;  o_j = sum_i s_i q_i
 * with each sum the lane partial (increasing i) followed by the xor butterfly. Rows are written
 * back in place. o_j goes to shared memory; the gated norm's sum of squares is formed by every
 * warp from there in the dv lane layout (lane l: j = l, l + 32, ...), and warp w quantizes the
 * q8_1 blocks w, w + W, ... of the head.
 * Generic kernel (every other shape): one CTA (8 warps) per row walks the value heads in order;
 * warp w updates state rows j = w, w + 8, ... with the same lane layout (lane l: i = 128 m + 4 l
 * + c, scalar loads) and butterflies; warps 0 / 1 L2-normalise q / k. It stages the row's
 * output (Cv floats, <= kGenericMaxCv) in shared memory and quantizes it at the end (q8_1 blocks
 * may straddle heads there), then shifts the conv state.
 * Must not: let a row touch another row's state, or shift a conv channel another CTA still
 * has to read; call CUDA's expf / log1pf (exact_math.h through gdn_canon.h only); use an order
 * that depends on b, blockDim or the SM count.
 */
#include <cooperative_groups.h>

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "gdn_canon.h"

namespace cg = cooperative_groups;

namespace {

/* warps per fast CTA: 8 while the grid fits the GPU at 2 CTAs per SM (small b: more of a
 * head's state in flight at once), else 4 (4 CTAs per SM); no bit depends on it */
constexpr int kFastWarpsSmall = 8, kFastWarpsLarge = 4;
constexpr int kFastRows = 16; /* state rows per warp task: all their loads in flight at once */
constexpr int kGenericThreads = 256;
constexpr int kGenericMaxCv = 40960; /* 160 KiB of staged output row */

struct gdn_geom {
    int ck;    /* Hk * dk */
    int cc;    /* conv channels 2 * Ck + Cv */
    int cv;    /* Hv * dv */
    int r;     /* Hv / Hk: value heads per key head (cluster size of the fast kernel) */
    float q_scale; /* memra_gdn_q_scale(dk) */
};

/* The canonical butterfly (gdn_step.h BFLY): p_l <- p_l + p_(l xor off), off = 16 .. 1. */
__device__ __forceinline__ float bfly_f32(float v)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ double bfly_f64(double v)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v = __dadd_rn(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* acc + x^2 in f64 (the square is exact). */
__device__ __forceinline__ double add_sq(double acc, float x)
{
    return __dadd_rn(acc, __dmul_rn((double)x, (double)x));
}

/* silu(causal conv) of channel c of row b (memra_gdn_conv_silu; OLD state). */
__device__ __forceinline__ float conv_silu(const memra_gdn_step_args &a, const gdn_geom &g, int b, int c)
{
    const int K = a.conv_k;
    const float *win = (const float *)(uintptr_t)a.conv_state[b] + (size_t)c * (size_t)(K - 1);
    return memra_gdn_conv_silu(a.conv_w + (size_t)c * (size_t)K, win,
                               a.qkv[(size_t)b * (size_t)g.cc + (size_t)c], K);
}

/* C(c, .) <- [C(c, 1..K-2), qkv[b, c]] (gdn_step.c conv_shift). */
__device__ __forceinline__ void conv_shift(const memra_gdn_step_args &a, const gdn_geom &g, int b, int c)
{
    const int K = a.conv_k;
    float *win = (float *)(uintptr_t)a.conv_state[b] + (size_t)c * (size_t)(K - 1);
    for (int j = 0; j < K - 2; j++)
        win[j] = win[j + 1];
    win[K - 2] = a.qkv[(size_t)b * (size_t)g.cc + (size_t)c];
}

/* Key head of value head h. */
__device__ __forceinline__ int key_head(const memra_gdn_step_args &a, const gdn_geom &g, int h)
{
    return a.head_map == MEMRA_GDN_HEADS_TILED ? h % a.n_k_head : h / g.r;
}

/* ----------------------------------- fast kernel ------------------------------------- */

/* Lane l's share of rows [jb, jb + 16 / VEC) of S_h^T (one step of delta_rows). */
template <int VEC>
__device__ __forceinline__ void load_rows(const float *St, int jb, float4 (&s)[16 / VEC][VEC])
{
    constexpr int DK = 128 * VEC;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int rr = 0; rr < 16 / VEC; rr++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            s[rr][v] = *(const float4 *)(St + (size_t)(jb + rr) * DK + 4 * lane + 128 * v);
}

/* The delta rule on one warp's kFastRows rows [j0, j0 + 16) of S_h^T (DK = 128 * VEC), ROWS
 * rows per step (all their loads in flight together: 8 KiB per warp); returns o_{j0 + lane}
 * in lanes 0..15. Which warp runs which rows changes no bit: each row is its own sums.
 * Lane l's elements of a row: 4l..4l+3, then 128+4l.. (VEC = 2): increasing i, the canonical
 * lane layout. first: the rows of step 0, loaded by the caller (load_rows at j0). */
template <int VEC>
__device__ float delta_rows(float *St, int j0, const float (&k)[VEC][4], const float (&q)[VEC][4],
                            const float *uv, float lambda, float beta,
                            const float4 (&first)[16 / VEC][VEC])
{
    constexpr int DK = 128 * VEC, ROWS = 16 / VEC;
    const int lane = threadIdx.x & 31;
    float my_o = 0.0f;
#pragma unroll
    for (int step = 0; step < kFastRows / ROWS; step++) {
        const int jb = j0 + step * ROWS;
        float4 s[ROWS][VEC];
        if (step == 0) {
#pragma unroll
            for (int rr = 0; rr < ROWS; rr++)
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    s[rr][v] = first[rr][v];
        } else {
            load_rows<VEC>(St, jb, s);
        }
        float r[ROWS];
#pragma unroll
        for (int rr = 0; rr < ROWS; rr++) {
            float acc = 0.0f;
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                float *e = &s[rr][v].x;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    e[c] = __fmul_rn(e[c], lambda);
                    acc = __fadd_rn(acc, __fmul_rn(e[c], k[v][c]));
                }
            }
            r[rr] = acc;
        }
#pragma unroll
        for (int rr = 0; rr < ROWS; rr++)
            r[rr] = bfly_f32(r[rr]);
        float po[ROWS];
#pragma unroll
        for (int rr = 0; rr < ROWS; rr++) {
            const float delta = __fmul_rn(beta, __fsub_rn(uv[jb + rr], r[rr]));
            float acc = 0.0f;
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                float *e = &s[rr][v].x;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    e[c] = __fadd_rn(e[c], __fmul_rn(k[v][c], delta));
                    acc = __fadd_rn(acc, __fmul_rn(e[c], q[v][c]));
                }
                *(float4 *)(St + (size_t)(jb + rr) * DK + 4 * lane + 128 * v) = s[rr][v];
            }
            po[rr] = acc;
        }
#pragma unroll
        for (int rr = 0; rr < ROWS; rr++)
            po[rr] = bfly_f32(po[rr]);
#pragma unroll
        for (int rr = 0; rr < ROWS; rr++)
            if (lane == step * ROWS + rr)
                my_o = po[rr];
    }
    return my_o;
}

template <int VEC, int W>
__global__ void __launch_bounds__(W * 32) gdn_step_fast(memra_gdn_step_args a, gdn_geom g)
{
    constexpr int DK = 128 * VEC;
    __shared__ float uq[DK], uk[DK], uv[MEMRA_GDN_MAX_HEAD_DIM], so[MEMRA_GDN_MAX_HEAD_DIM];
    const int ka = blockIdx.x / g.r, mi = blockIdx.x % g.r, b = blockIdx.y, dv = a.head_v_dim;
    const int h = a.head_map == MEMRA_GDN_HEADS_TILED ? ka + mi * a.n_k_head : ka * g.r + mi;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* Small grids (W = 8): the warp's first state rows load before the wait. S is this op's
     * own state, last written a tick ago (every kernel before the previous one has completed
     * once this one runs: each releases its dependent only after its own wait), so its DRAM
     * latency overlaps the previous kernel's tail and the conv step below. (W = 4 grids fill
     * the GPU anyway, and holding the rows there spills.) */
    constexpr bool PRE = W == kFastWarpsSmall;
    float *St = (float *)(uintptr_t)a.ssm_state[b] + (size_t)h * (size_t)dv * DK;
    float4 first[16 / VEC][VEC];
    if (PRE && warp < dv / kFastRows)
        load_rows<VEC>(St, kFastRows * warp, first);
    pdl_wait_release();
    /* conv + silu of q_a, k_a, v_h from the old state; v_h's channels are this CTA's only */
    for (int ci = threadIdx.x; ci < 2 * DK + dv; ci += blockDim.x) {
        if (ci < DK) {
            uq[ci] = conv_silu(a, g, b, ka * DK + ci);
        } else if (ci < 2 * DK) {
            uk[ci - DK] = conv_silu(a, g, b, g.ck + ka * DK + ci - DK);
        } else {
            const int c = 2 * g.ck + h * dv + ci - 2 * DK;
            uv[ci - 2 * DK] = conv_silu(a, g, b, c);
            conv_shift(a, g, b, c);
        }
    }
    __syncthreads();
    if (g.r > 1)
        cg::this_cluster().sync(); /* every CTA of key head a has read q_a, k_a's old state */
    if (mi == 0)
        for (int ci = threadIdx.x; ci < 2 * DK; ci += blockDim.x)
            conv_shift(a, g, b, ci < DK ? ka * DK + ci : g.ck + ka * DK + ci - DK);
    /* q_a, k_a in the canonical lane layout; L2 sums per lane in increasing i, butterfly */
    float k[VEC][4], q[VEC][4];
    double sq = 0.0, sk = 0.0;
#pragma unroll
    for (int v = 0; v < VEC; v++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            k[v][c] = uk[4 * lane + 128 * v + c];
            q[v][c] = uq[4 * lane + 128 * v + c];
            sq = add_sq(sq, q[v][c]);
            sk = add_sq(sk, k[v][c]);
        }
    const float scq = memra_gdn_l2_scale(bfly_f64(sq), a.eps), sck = memra_gdn_l2_scale(bfly_f64(sk), a.eps);
#pragma unroll
    for (int v = 0; v < VEC; v++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            q[v][c] = __fmul_rn(__fmul_rn(q[v][c], scq), g.q_scale);
            k[v][c] = __fmul_rn(k[v][c], sck);
        }
    const size_t bh = (size_t)b * (size_t)a.n_v_head + (size_t)h;
    const float beta = memra_gdn_beta(a.beta[bh]);
    const float lambda = memra_gdn_decay(a.ssm_a[h], a.alpha[bh], a.dt_bias[h]);
    for (int grp = warp; grp < dv / kFastRows; grp += W) {
        if (!PRE || grp != warp)
            load_rows<VEC>(St, kFastRows * grp, first);
        const float o = delta_rows<VEC>(St, kFastRows * grp, k, q, uv, lambda, beta, first);
        if (lane < kFastRows)
            so[kFastRows * grp + lane] = o;
    }
    __syncthreads();
    /* gated norm: dv lane layout (lane l: j = l, l + 32, ...), every warp the same bits */
    double ss = 0.0;
    for (int j = lane; j < dv; j += 32)
        ss = add_sq(ss, so[j]);
    const float scale = memra_gdn_rms_scale(bfly_f64(ss), dv, a.eps);
    const float *z = a.z + (size_t)b * (size_t)g.cv + (size_t)h * (size_t)dv;
    for (int grp = warp; grp < dv / 32; grp += W) {
        const int j = 32 * grp + lane;
        const float y = memra_gdn_gate(so[j], scale, a.norm_w[j], z[j]);
        const size_t blk = (size_t)b * (size_t)(g.cv / 32) + (size_t)(h * dv + 32 * grp) / 32;
        q8_1_quantize_warp(y, lane, (u8 *)a.y_q + blk * Q8_1_BYTES);
        if (a.o)
            a.o[(size_t)b * (size_t)g.cv + (size_t)(h * dv + j)] = y;
    }
}

/* ---------------------------------- generic kernel ----------------------------------- */

/* Value head h of row b: L2 norms (warp 0: q, warp 1: k), state update (warp w: rows j = w,
 * w + nw, ...; lane l: i = 128 m + 4 l + c increasing, then the butterfly) and the gated norm,
 * into orow[dv]. Called by the whole CTA. */
__device__ void generic_head(const memra_gdn_step_args &a, const gdn_geom &g, int b, int h,
                             float *u, float *orow)
{
    const int dk = a.head_k_dim, dv = a.head_v_dim, ka = key_head(a, g, h);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *uq = u, *uk = u + dk, *uv = u + 2 * dk;
    for (int ci = threadIdx.x; ci < 2 * dk + dv; ci += blockDim.x) {
        const int c = ci < dk ? ka * dk + ci : ci < 2 * dk ? g.ck + ka * dk + ci - dk : 2 * g.ck + h * dv + ci - 2 * dk;
        u[ci] = conv_silu(a, g, b, c);
    }
    __syncthreads();
    if (warp < 2) { /* each lane reads and rewrites only its own elements */
        float *x = warp == 0 ? uq : uk;
        double ss = 0.0;
        for (int i0 = 4 * lane; i0 < dk; i0 += 128)
            for (int i = i0; i < i0 + 4 && i < dk; i++)
                ss = add_sq(ss, x[i]);
        const float sc = memra_gdn_l2_scale(bfly_f64(ss), a.eps);
        for (int i0 = 4 * lane; i0 < dk; i0 += 128)
            for (int i = i0; i < i0 + 4 && i < dk; i++) {
                const float y = __fmul_rn(x[i], sc);
                x[i] = warp == 0 ? __fmul_rn(y, g.q_scale) : y;
            }
    }
    __syncthreads();
    const size_t bh = (size_t)b * (size_t)a.n_v_head + (size_t)h;
    const float beta = memra_gdn_beta(a.beta[bh]);
    const float lambda = memra_gdn_decay(a.ssm_a[h], a.alpha[bh], a.dt_bias[h]);
    float *St = (float *)(uintptr_t)a.ssm_state[b] + (size_t)h * (size_t)dv * (size_t)dk;
    for (int j = warp; j < dv; j += nw) {
        float *s = St + (size_t)j * (size_t)dk; /* s[i] = S[i, j] */
        float r = 0.0f;
        for (int i0 = 4 * lane; i0 < dk; i0 += 128)
            for (int i = i0; i < i0 + 4 && i < dk; i++) {
                const float e = __fmul_rn(s[i], lambda);
                s[i] = e;
                r = __fadd_rn(r, __fmul_rn(e, uk[i]));
            }
        r = bfly_f32(r);
        const float delta = __fmul_rn(beta, __fsub_rn(uv[j], r));
        float acc = 0.0f;
        for (int i0 = 4 * lane; i0 < dk; i0 += 128)
            for (int i = i0; i < i0 + 4 && i < dk; i++) {
                const float e = __fadd_rn(s[i], __fmul_rn(uk[i], delta));
                s[i] = e;
                acc = __fadd_rn(acc, __fmul_rn(e, uq[i]));
            }
        acc = bfly_f32(acc);
        if (lane == 0)
            orow[j] = acc;
    }
    __syncthreads();
    double ss = 0.0; /* every warp forms the same sum (dv lane layout) */
    for (int j = lane; j < dv; j += 32)
        ss = add_sq(ss, orow[j]);
    const float scale = memra_gdn_rms_scale(bfly_f64(ss), dv, a.eps);
    __syncthreads(); /* all sums read orow before it is overwritten */
    const float *z = a.z + (size_t)b * (size_t)g.cv + (size_t)h * (size_t)dv;
    for (int j = threadIdx.x; j < dv; j += blockDim.x)
        orow[j] = memra_gdn_gate(orow[j], scale, a.norm_w[j], z[j]);
    __syncthreads();
}

__global__ void __launch_bounds__(kGenericThreads) gdn_step_generic(memra_gdn_step_args a, gdn_geom g)
{
    extern __shared__ float sh[]; /* [Cv] output row, then [2 dk + dv] conv outputs */
    const int b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *orow = sh, *u = sh + g.cv;
    pdl_wait_release();
    for (int h = 0; h < a.n_v_head; h++)
        generic_head(a, g, b, h, u, orow + (size_t)h * (size_t)a.head_v_dim);
    for (int k = warp; k < g.cv / 32; k += kGenericThreads / 32) {
        const float y = orow[32 * k + lane];
        q8_1_quantize_warp(y, lane, (u8 *)a.y_q + ((size_t)b * (size_t)(g.cv / 32) + (size_t)k) * Q8_1_BYTES);
        if (a.o)
            a.o[(size_t)b * (size_t)g.cv + (size_t)(32 * k + lane)] = y;
    }
    for (int c = threadIdx.x; c < g.cc; c += kGenericThreads) /* every head has read the old state */
        conv_shift(a, g, b, c);
}

/* Multiprocessors of the current device (cached per ordinal; 132 if the query fails). */
int sm_count()
{
    static int cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return 132;
    if (!cache[dev]) {
        int n = 0;
        const bool ok = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
        cache[dev] = ok && n > 0 ? n : 132;
    }
    return cache[dev];
}

} /* namespace */

extern "C" int memra_gdn_step_cuda(const memra_gdn_step_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("gdn_step: null args");
    const char *why = memra_gdn_step_check(a);
    if (why)
        return cuda_ops_invalid(why);
    gdn_geom g;
    g.ck = a->n_k_head * a->head_k_dim;
    g.cv = a->n_v_head * a->head_v_dim;
    g.cc = 2 * g.ck + g.cv;
    g.r = a->n_v_head / a->n_k_head;
    g.q_scale = memra_gdn_q_scale(a->head_k_dim);
    if (a->b > 65535)
        return cuda_ops_invalid("gdn_step: b exceeds the grid limit 65535");
    const bool fast = (a->head_k_dim == 128 || a->head_k_dim == 256) && a->head_v_dim % 32 == 0 && g.r <= 8;
    if (fast) {
        const dim3 grid(a->n_v_head, a->b);
        const bool small = (long)a->n_v_head * a->b <= 2L * sm_count();
        const dim3 blk((small ? kFastWarpsSmall : kFastWarpsLarge) * 32);
        if (a->head_k_dim == 128)
            return cuda_ops_result(cuda_ops_launch(small ? gdn_step_fast<1, kFastWarpsSmall>
                                                         : gdn_step_fast<1, kFastWarpsLarge>,
                                                   grid, blk, 0, s, g.r, *a, g));
        return cuda_ops_result(cuda_ops_launch(small ? gdn_step_fast<2, kFastWarpsSmall>
                                                     : gdn_step_fast<2, kFastWarpsLarge>,
                                               grid, blk, 0, s, g.r, *a, g));
    }
    if (g.cv > kGenericMaxCv)
        return cuda_ops_invalid("gdn_step: this shape needs the generic kernel, whose output row "
                                "(n_v_head * head_v_dim) must be <= 40960");
    const size_t smem = sizeof(float) * ((size_t)g.cv + 2 * (size_t)a->head_k_dim + (size_t)a->head_v_dim);
    return cuda_ops_result(
        cuda_ops_launch(gdn_step_generic, dim3(a->b), dim3(kGenericThreads), smem, s, 1, *a, g));
}
