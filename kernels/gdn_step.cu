/*
 * gdn_step.cu — CUDA gdn_step (contract and canonical order: kernels/gdn_step.h): one Gated
 * DeltaNet decode token per row: causal conv step + silu, L2 norms, decay / beta, the delta
 * rule on the S^T state, gated RMSNorm with silu(z), q8_1 output. Bit-identical (memcmp) to
 * the CPU reference: every piece is a gdn_canon.h function or the lane / butterfly order of
 * gdn_step.h, which both paths below implement for any shape.
 *
 * Fast kernel (head_k_dim 128 or 256, head_v_dim % 32 == 0, Hv / Hk <= 8): value head h of
 * row b is split over `split` CTAs (4, 2 or 1: the most that keep whole q8_1 blocks per CTA,
 * a cluster of <= 8 and the grid within 1 CTA per SM, or what memra_gdn_step_cuda_tune
 * forces; 1 with 4-warp CTAs once Hv * b exceeds 2 CTAs per SM), CTA sp owning state rows j
 * in [sp * dv / split, (sp + 1) * dv / split). The CTAs of
 * the value heads that share key head a (r = Hv / Hk) form one thread-block cluster of
 * r * split, rank mi * split + sp. Conv step, small grids (8-warp CTAs): every conv channel
 * has exactly one reader in the grid, which shifts it when reading it: each CTA
 * computes an even share of q_a, k_a's channels and pushes the values into every CTA of the
 * cluster (distributed shared memory: st.async, each word counted on the receiver's mbarrier,
 * which its threads wait on; no cluster barrier round trip), and the v channels of its own
 * rows. Large grids (4-warp CTAs, LQK): each CTA computes every channel of q_a, k_a itself
 * (no push, one cluster barrier round less before the L2 norms) and shifts its share at its
 * end, once every CTA of the cluster has read them. A conv item's sum over the K - 1 old samples
 * (and its reader's old half of the shift) is formed before the PDL wait; after it only the new
 * sample is read. lambda, beta and the gate's silu(z) are formed meanwhile by a ninth warp
 * (fast_chain: the 4-float4 tasks, the 9b at B = 1), else where the conv step leaves threads
 * idle by those, else by every thread after its conv items (bench/gdn_probe.cu times the chain).
 * Lane l of every warp then holds q_i, k_i for i = 4l..4l+3 (+128): exactly the canonical dk lane
 * layout, so each warp forms the L2 sums in registers (every warp of every CTA the same bits). The
 * state S_h^T is [head_v_dim rows j][head_k_dim] f32; a warp task is G rows (4, 8 or 16 / VEC),
 * loaded with coalesced 16-byte loads (same layout; the warp's first task before the PDL wait, the
 * rows past the first W tasks streamed into L2 by bulk prefetches, and with G * VEC <= 8 the warp's
 * next task loaded while it computes the current one); per row s *= lambda;  r = sum_i s_i k_i;
 * delta = beta (v_j - r);  s += k delta;  o_j = sum_i s_i q_i with each sum the lane partial
 * (increasing i) followed by the xor butterfly. Rows are written back in place. o_j goes into the
 * shared memory of every CTA of head h (pushing kernels: by st.async on the receiver's second
 * mbarrier; LQK: plain DSMEM stores), so each forms the gated norm's sum of squares over all dv
 * outputs in the dv lane layout (lane l: j = l, l + 32, ...; the same bits everywhere), and
 * quantizes its own rows' q8_1 blocks. Cluster barrier phases: 0 (pushing kernels; arrived at entry
 * once the mbarriers are set) every CTA runs before the first push; LQK: 1 every CTA has read its
 * conv inputs and runs (waited after the delta rule, before o pushes and shifts), 2 (split > 1) o_h
 * whole, after which no CTA touches another's shared memory. A pushing CTA has no DSMEM access
 * after its mbarriers complete: every push into it has landed, none comes later. Generic kernel
 * (every other shape): one CTA (8 warps) per row walks the value heads in order; warp w updates
 * state rows j = w, w + 8, ... with the same lane layout (lane l: i = 128 m + 4 l
 * + c, scalar loads) and butterflies; warps 0 / 1 L2-normalise q / k. It stages the row's
 * output (Cv floats, <= kGenericMaxCv) in shared memory and quantizes it at the end (q8_1 blocks
 * may straddle heads there), then shifts the conv state.
 * Must not: let a row touch another row's state, or shift a conv channel another CTA still
 * has to read; call CUDA's expf / log1pf (exact_math.h through gdn_canon.h only); use an order
 * that depends on b, blockDim or the SM count.
 */
#include <cooperative_groups.h>
#include <cuda/ptx>

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "gdn_canon.h"

namespace cg = cooperative_groups;
namespace ptx = cuda::ptx;

#ifdef MEMRA_GDN_PROBE
/* bench/gdn_probe.cu only (never in the engine's build): thread 0 of each fast CTA stamps
 * %globaltimer and clock64 at the kernel's marks (GDN_MARK), so the probe can say where a
 * launch's time goes. "memory" keeps the stamps in program order with the loads and stores
 * around them; a value the stamp must follow is named with GDN_AFTER. */
#define MEMRA_GDN_PROBE_CTAS 8192
#define MEMRA_GDN_PROBE_MARKS 10
__device__ unsigned long long g_gdn_probe[MEMRA_GDN_PROBE_CTAS][MEMRA_GDN_PROBE_MARKS][2];
__device__ unsigned g_gdn_probe_shape[2]; /* the launch's CTAs and cluster size (CTA 0, mark 0) */
__device__ __forceinline__ void gdn_mark(int i)
{
    const unsigned cta = blockIdx.x + blockIdx.y * gridDim.x;
    if (threadIdx.x != 0 || cta >= MEMRA_GDN_PROBE_CTAS)
        return;
    if (cta == 0 && i == 0) {
        unsigned ncl;
        asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(ncl));
        g_gdn_probe_shape[0] = gridDim.x * gridDim.y;
        g_gdn_probe_shape[1] = ncl;
    }
    unsigned long long t, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    g_gdn_probe[cta][i][0] = t;
    g_gdn_probe[cta][i][1] = c;
}
#define GDN_MARK(i) gdn_mark(i)
#define GDN_AFTER(x) asm volatile("" ::"f"(x) : "memory")
#else
#define GDN_MARK(i) ((void)0)
#define GDN_AFTER(x) ((void)0)
#endif

namespace {

/* warps per fast CTA: 8 while the grid fits the GPU at 2 CTAs per SM (small b: more of a
 * head's state in flight at once), else 4 (4 CTAs per SM); no bit depends on it */
constexpr int kFastWarpsSmall = 8, kFastWarpsLarge = 4;
constexpr int kMaxSplit = 4;   /* CTAs per value head at small grids (>= 32 rows each at dv 128) */
constexpr int kClusterMax = 8; /* portable cluster size */
constexpr unsigned kPrefetchChunk = 4096; /* bytes per bulk L2 prefetch */
constexpr int kGenericThreads = 256;
constexpr int kGenericMaxCv = 40960; /* 160 KiB of staged output row */

struct gdn_geom {
    int ck;    /* Hk * dk */
    int cc;    /* conv channels 2 * Ck + Cv */
    int cv;    /* Hv * dv */
    int r;     /* Hv / Hk: value heads per key head */
    int split; /* fast kernel: CTAs per value head, each owning head_v_dim / split state rows */
    int cs;    /* fast kernel: cluster size r * split (every CTA that reads key head a's q, k) */
    int bulk;  /* fast kernel: stream the rows past the first W tasks into L2 (bulk prefetch) */
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

/* v into the shared word p of cluster CTA d by st.async, its 4 bytes counted on d's mbarrier
 * `bar` (the same shared offset there): no barrier round trip, the reader waits on its own. */
__device__ __forceinline__ void push_async(float *p, float v, uint64_t *bar, int d)
{
    cg::cluster_group cl = cg::this_cluster();
    ptx::st_async(cl.map_shared_rank(p, d), v, cl.map_shared_rank(bar, d));
}

/* Until the mbarrier's first phase completes (every byte it expects has landed); acquire at
 * cluster scope makes the st.async data visible to this thread. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar)
{
    while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, bar, 0u)) {
    }
}

/* Named CTA barriers (0 is __syncthreads'): bar.sync waits for `n` threads (whole warps)
 * to reach barrier `id`, bar.arrive counts this warp without waiting; both order the calling
 * threads' earlier shared memory accesses before the barrier completes. */
__device__ __forceinline__ void bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

constexpr int kBarQK = 1, kBarLB = 2; /* the working warps' q/k share; lambda, beta published */

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

/* The fast kernel's conv channel c of row b before its PDL wait: returns the old samples' part
 * of the conv sum (memra_gdn_conv_old) and, when `shift` (the channel's only reader), moves
 * C(c, 1..K-2) to C(c, 0..K-3); conv_new completes both once qkv[b, c] may be read. */
__device__ __forceinline__ float conv_old(const memra_gdn_step_args &a, int b, int c, bool shift)
{
    const int K = a.conv_k;
    float *win = (float *)(uintptr_t)a.conv_state[b] + (size_t)c * (size_t)(K - 1);
    const float acc = memra_gdn_conv_old(a.conv_w + (size_t)c * (size_t)K, win, K);
    if (shift)
        for (int j = 0; j < K - 2; j++)
            win[j] = win[j + 1];
    return acc;
}

/* After the wait: silu(acc + w[K-1] x) with x = qkv[b, c]; with `shift`, C(c, K-2) <- x. */
__device__ __forceinline__ float conv_new(const memra_gdn_step_args &a, const gdn_geom &g, int b,
                                          int c, float acc, bool shift)
{
    const int K = a.conv_k;
    const float x = a.qkv[(size_t)b * (size_t)g.cc + (size_t)c];
    const float u = memra_gdn_conv_new(acc, a.conv_w[(size_t)c * (size_t)K + (size_t)(K - 1)], x);
    if (shift)
        ((float *)(uintptr_t)a.conv_state[b])[(size_t)c * (size_t)(K - 1) + (size_t)(K - 2)] = x;
    return u;
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

/* The chain warp (CH): the small grids' CTAs whose warp tasks hold 4 float4 per lane (86
 * registers) get a warp W besides the W working warps, which forms lambda, beta and the gated
 * norm's silu(z_j) while the working warps (NT threads) run the conv step, the q/k exchange
 * and the L2 norms; lambda and beta are published by named barrier kBarLB just before the
 * delta rule, silu(z) by the barrier before the gated norm (9b B = 1: -1.1 % in the tick).
 * Not on larger tasks: at 8 float4 (112 registers) the 9-warp CTA measured a straggling CTA
 * per launch (9b B = 2 +1.9 %), at 16 it would spill. Those CTAs, like the 4-warp ones (large
 * grids, 4 per SM), form lambda and beta on every thread after their conv items, or where the
 * conv step leaves enough threads idle (`early`) on the last threads during it. */
__host__ __device__ constexpr bool fast_chain(int warps, int task_f4)
{
    return warps != kFastWarpsLarge && task_f4 <= 4;
}
__host__ __device__ constexpr int fast_threads(int warps, int task_f4)
{
    return (warps + fast_chain(warps, task_f4)) * 32;
}

/* f(rr, v, p) for lane l's 16-byte pieces p of rows [jb, jb + G) of S_h^T: piece v of row
 * jb + rr, elements 4 l + 128 v .. + 3 (the canonical dk lane layout). */
template <int VEC, int G, typename F>
__device__ __forceinline__ void for_row_pieces(const float *St, int jb, F f)
{
    constexpr int DK = 128 * VEC;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int rr = 0; rr < G; rr++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            f(rr, v, St + (size_t)(jb + rr) * DK + 4 * lane + 128 * v);
}

/* Lane l's share of rows [jb, jb + G) of S_h^T: one warp task, all its 16-byte loads in
 * flight together (G * 512 * VEC bytes per warp). */
template <int VEC, int G>
__device__ __forceinline__ void load_rows(const float *St, int jb, float4 (&s)[G][VEC])
{
    for_row_pieces<VEC, G>(St, jb,
                           [&](int rr, int v, const float *p) { s[rr][v] = *(const float4 *)p; });
}

/* The same pieces pulled into L2 (prefetch_tasks): no registers held. */
template <int VEC, int G> __device__ __forceinline__ void prefetch_rows(const float *St, int jb)
{
    for_row_pieces<VEC, G>(St, jb, [](int, int, const float *p) { prefetch_l2(p); });
}

/* The delta rule on one warp task: rows [jb, jb + G) of S_h^T (DK = 128 * VEC), held in s
 * (load_rows; consumed) and written back in place; returns o_{jb + lane} in lanes 0..G-1.
 * Which warp / CTA runs which rows changes no bit: each row is its own sums.
 * Lane l's elements of a row: 4l..4l+3, then 128+4l.. (VEC = 2): increasing i, the canonical
 * lane layout. */
template <int VEC, int G>
__device__ __forceinline__ float delta_rows(float *St, int jb, const float (&k)[VEC][4],
                                            const float (&q)[VEC][4], const float *uv, float lambda,
                                            float beta, float4 (&s)[G][VEC])
{
    constexpr int DK = 128 * VEC;
    const int lane = threadIdx.x & 31;
    float r[G];
#pragma unroll
    for (int rr = 0; rr < G; rr++) {
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
    for (int rr = 0; rr < G; rr++)
        r[rr] = bfly_f32(r[rr]);
    float po[G];
#pragma unroll
    for (int rr = 0; rr < G; rr++) {
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
    float my_o = 0.0f;
#pragma unroll
    for (int rr = 0; rr < G; rr++) {
        const float o = bfly_f32(po[rr]);
        if (lane == rr)
            my_o = o;
    }
    return my_o;
}

/* Conv channel of item t of a fast CTA: its share [qk0, qk0 + nqk) of key head ka's q / k
 * channels (index ci < DK: q, else k), then its own value rows' v channels. */
__device__ __forceinline__ int fast_channel(const gdn_geom &g, int DK, int ka, int h, int dv,
                                            int qk0, int nqk, int j_lo, int t)
{
    if (t >= nqk)
        return 2 * g.ck + h * dv + j_lo + t - nqk;
    const int ci = qk0 + t;
    return ci < DK ? ka * DK + ci : g.ck + ka * DK + ci - DK;
}

/* One CTA per (value-head part, row b); see the file comment. VEC: dk / 128; W: warps; G:
 * state rows per warp task; PF: the prefetch_tasks kernel (its own instantiation, so the
 * prefetch addresses take no registers from the default kernel): a warp pulls its tasks
 * warp + W d, d = 1..prefetch_tasks, into L2 before the PDL wait, and at task grp the task
 * grp + W (prefetch_tasks + 1), so the prefetch_tasks tasks after the one loading into
 * registers are in flight. */
template <int VEC, int W, int G, bool PF>
__global__ void __launch_bounds__(fast_threads(W, G *VEC), W == kFastWarpsLarge ? 4 : 2)
    gdn_step_fast(memra_gdn_step_args a, gdn_geom g)
{
    constexpr bool CH = fast_chain(W, G * VEC);
    constexpr int DK = 128 * VEC, NT = W * 32;
    /* double-buffer the warp's next task while the registers allow it (2 x 32 per lane) */
    constexpr bool PIPE = G * VEC <= 8;
    /* local q_a, k_a (the large grids' 4-warp CTAs): every CTA of the cluster computes all of
     * q_a, k_a's conv channels itself instead of a share pushed to the others (see the file
     * comment; measured in the tick: B = 16 -1.2 %, B = 1 +1.2 % with it, so small grids push) */
    constexpr bool LQK = W == kFastWarpsLarge;
    __shared__ float uqk[2 * DK], uv[MEMRA_GDN_MAX_HEAD_DIM], so[MEMRA_GDN_MAX_HEAD_DIM];
    /* cluster rank cr = mi * split + sp: value head mi of key head ka, row part sp */
    const int cr = g.cs > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const int ka = blockIdx.x / g.cs, mi = cr / g.split, sp = cr % g.split, b = blockIdx.y;
    const int h = a.head_map == MEMRA_GDN_HEADS_TILED ? ka + mi * a.n_k_head : ka * g.r + mi;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    GDN_MARK(0);
    /* The push exchanges (not LQK, a cluster): each CTA's mbarriers count the bytes the
     * cluster's other CTAs st.async into it, mb[0] q_a, k_a's shares (all but its own nqk
     * channels), mb[1] o_h's rows of the head's other CTAs (split > 1); both are set up before
     * phase 0, so no push reaches one before its count. */
    __shared__ alignas(8) uint64_t mb[2];
    const bool push = !LQK && g.cs > 1;
    const int chunk = (2 * DK + g.cs - 1) / g.cs, qk0 = min(2 * DK, cr * chunk);
    const int nqk = min(2 * DK, qk0 + chunk) - qk0;
    const int dv = a.head_v_dim, rows = dv / g.split, j_lo = sp * rows, ntask = rows / G;
    if (push && tid == 0) {
        ptx::mbarrier_init(&mb[0], 1);
        ptx::mbarrier_init(&mb[1], 1);
        ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &mb[0],
                                       (uint32_t)sizeof(float) * (uint32_t)(2 * DK - nqk));
        ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &mb[1],
                                       (uint32_t)sizeof(float) * (uint32_t)(dv - rows));
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    if (push) /* phase 0 of the cluster barrier: this CTA runs, its mbarriers are set */
        __cluster_barrier_arrive_relaxed();
    __shared__ float s_lb[2], s_gz[MEMRA_GDN_MAX_HEAD_DIM];
    if (CH && warp == W) { /* the chain warp (bench/gdn_probe.cu --chains, H100 cycles since
                            * session 27: lambda's exp, log1p, exp ~1080, silu ~525) */
        pdl_wait_release();
        const size_t bh = (size_t)b * (size_t)a.n_v_head + (size_t)h;
        /* every lane the same pair (no divergence; the two chains interleave), lane 0 keeps it */
        const float lambda = memra_gdn_decay(a.ssm_a[h], a.alpha[bh], a.dt_bias[h]);
        const float beta = memra_gdn_beta(a.beta[bh]);
        if (lane == 0) {
            s_lb[0] = lambda;
            s_lb[1] = beta;
        }
        bar_arrive(kBarLB, NT + 32);
        const float *z = a.z + (size_t)b * (size_t)g.cv + (size_t)h * (size_t)dv + j_lo;
        for (int j = lane; j < rows; j += 32)
            s_gz[j_lo + j] = memra_x_siluf(z[j]);
        if (push)
            __cluster_barrier_wait(); /* phase 0 (this warp touches no other CTA) */
        __syncthreads();              /* the working warps' barrier before the gated norm */
        return;
    }
    /* The warp's first task loads before the wait. S is this op's own state, last written a
     * tick ago (every kernel before the previous one has completed once this one runs: the
     * previous one, an mmvq, releases this one only after its own wait; only rms_norm_q8 may
     * release first, and no gdn_step follows one directly), so its DRAM latency overlaps the
     * previous kernel's tail and the conv step below. Tasks past the first W stream into L2. */
    float *St = (float *)(uintptr_t)a.ssm_state[b] + (size_t)h * (size_t)dv * DK;
    float4 cur[G][VEC];
    if (warp < ntask)
        load_rows<VEC, G>(St, j_lo + G * warp, cur);
    const int ahead = PF ? a.prefetch_tasks : 0;
    if (PF) /* the next `ahead` tasks (the first of them loads into registers at the loop's
             * first step, after the wait; the loop prefetches the rest) */
        for (int d = 1; d <= ahead && warp + W * d < ntask; d++)
            prefetch_rows<VEC, G>(St, j_lo + G * (warp + W * d));
    if (g.bulk && warp == W - 1 && ntask > W) {
        const char *p0 = (const char *)(St + (size_t)(j_lo + G * W) * DK);
        const unsigned n = (unsigned)(rows - G * W) * DK * (unsigned)sizeof(float);
        for (unsigned off = (unsigned)lane * kPrefetchChunk; off < n; off += 32u * kPrefetchChunk)
            prefetch_l2_bulk(p0 + off, n - off < kPrefetchChunk ? n - off : kPrefetchChunk);
    }
    /* conv items: q_a, k_a's channels (LQK: all of them; else an even share [qk0, qk0 + nqk)
     * over the cluster's CTAs), then v_h's channels of this CTA's rows. The CTA shifts its
     * share and its v channels: without LQK right after reading them (each has this one
     * reader in the grid), with LQK the share at the kernel's end, once every CTA of the
     * cluster has read it (phase 1). */
    const int c0 = LQK ? 0 : qk0, nc = LQK ? 2 * DK : nqk, items = nc + rows;
    /* Before the wait, the part of each item that reads only the conv state and the weights
     * (its sum over the K - 1 old samples, kept in the item's slot of uqk / uv, and the old
     * half of the shift where this CTA is the channel's only reader); after it, only qkv's
     * new sample is read. */
    for (int t = tid; t < items; t += NT) {
        const int c = fast_channel(g, DK, ka, h, dv, c0, nc, j_lo, t);
        const float acc = conv_old(a, b, c, !LQK || t >= nc);
        if (t < nc)
            uqk[c0 + t] = acc;
        else
            uv[j_lo + t - nc] = acc;
    }
    /* Without the chain warp, where the conv step leaves enough threads idle (`early`):
     * lambda on the CTA's last thread (rt 0), beta on the one before it and the gated norm's
     * silu(z_j) of this CTA's rows on the ones before those, in parallel with the conv step,
     * kept in shared memory and published by the barrier before the L2 norms. */
    const int rt = NT - 1 - tid;
    const bool early = !CH && items + 2 + rows <= NT, own = !CH && !early; /* own: every thread */
    const float ssm_a = CH ? 0.0f : a.ssm_a[h], dt_bias = CH ? 0.0f : a.dt_bias[h];
    GDN_MARK(1);
    pdl_wait_release();
    GDN_MARK(2);
    const size_t bh = (size_t)b * (size_t)a.n_v_head + (size_t)h;
    const float *z = a.z + (size_t)b * (size_t)g.cv + (size_t)h * (size_t)dv;
    /* the chains' inputs, in flight during the conv step */
    const float chain_x = !early          ? 0.0f
                          : rt == 0       ? a.alpha[bh]
                          : rt == 1       ? a.beta[bh]
                          : rt - 2 < rows ? z[j_lo + rt - 2]
                                          : 0.0f;
    const float alpha_x = own ? a.alpha[bh] : 0.0f, beta_x = own ? a.beta[bh] : 0.0f;
    float z0 = 0.0f, w0 = 0.0f; /* the warp's first q8_1 block's gate inputs */
    if (warp < rows / 32) {
        if (own)
            z0 = z[j_lo + 32 * warp + lane];
        w0 = a.norm_w[j_lo + 32 * warp + lane];
    }
    for (int t = tid; t < items; t += NT) { /* each slot is this thread's own: no barrier */
        const int c = fast_channel(g, DK, ka, h, dv, c0, nc, j_lo, t);
        float &slot = t < nc ? uqk[c0 + t] : uv[j_lo + t - nc];
        slot = conv_new(a, g, b, c, slot, !LQK || t >= nc); /* only reader: shift done */
    }
    GDN_MARK(3);
    if (LQK && g.cs > 1) /* phase 1 of the cluster barrier: this CTA's conv reads are done */
        __cluster_barrier_arrive();
    float lambda = 0.0f, beta = 0.0f;
    if (own) { /* off the critical path only where the cluster's others are still in conv
                * (forming them with the first conv item instead measured 0.5 % slower at B = 4,
                * 8 and 16 on the 9b: bench/results/ab-latency-pack-2026-12-06-s27-h100.txt) */
        beta = memra_gdn_beta(beta_x);
        lambda = memra_gdn_decay(ssm_a, alpha_x, dt_bias);
    } else if (early) {
        if (rt == 0)
            s_lb[0] = memra_gdn_decay(ssm_a, chain_x, dt_bias);
        else if (rt == 1)
            s_lb[1] = memra_gdn_beta(chain_x);
        else if (rt - 2 < rows)
            s_gz[j_lo + rt - 2] = memra_x_siluf(chain_x);
    }
    if (push) {
        __cluster_barrier_wait(); /* phase 0: every CTA of the cluster runs, mbarriers set */
        for (int t = tid; t < nqk; t += NT) /* this thread's own values: no CTA barrier needed */
            for (int d = 0; d < g.cs; d++)
                if (d != cr)
                    push_async(&uqk[qk0 + t], uqk[qk0 + t], &mb[0], d);
        bar_sync(kBarQK, NT); /* the working warps: this CTA's own share (early: s_lb, s_gz) */
        mbar_wait(&mb[0]);    /* the others': uqk is whole */
    } else {
        bar_sync(kBarQK, NT); /* (without a chain warp NT is every thread) */
    }
    GDN_MARK(4);
    if (early) {
        lambda = s_lb[0];
        beta = s_lb[1];
    }
    /* q_a, k_a in the canonical lane layout; L2 sums per lane in increasing i, butterfly */
    float k[VEC][4], q[VEC][4];
    double sq = 0.0, sk = 0.0;
#pragma unroll
    for (int v = 0; v < VEC; v++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            q[v][c] = uqk[4 * lane + 128 * v + c];
            k[v][c] = uqk[DK + 4 * lane + 128 * v + c];
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
    if (CH) { /* lambda and beta from the chain warp */
        bar_sync(kBarLB, NT + 32);
        lambda = s_lb[0];
        beta = s_lb[1];
    }
    GDN_AFTER(q[0][0]);
    GDN_AFTER(k[0][0]);
    GDN_MARK(5);
    for (int grp = warp; grp < ntask; grp += W) {
        const int jb = j_lo + G * grp;
        const bool more = PIPE && grp + W < ntask;
        float4 nxt[G][VEC];
        if (more) /* the warp's next task, in flight during this one's arithmetic */
            load_rows<VEC, G>(St, jb + G * W, nxt);
        if (PF && ahead > 0 && grp + W * (ahead + 1) < ntask)
            prefetch_rows<VEC, G>(St, jb + G * W * (ahead + 1));
        if (!PIPE && grp != warp)
            load_rows<VEC, G>(St, jb, cur);
        const float o = delta_rows<VEC, G>(St, jb, k, q, uv, lambda, beta, cur);
        if (lane < G) {
            so[jb + lane] = o;
            if (push && g.split > 1) /* every CTA of head h gets the whole o_h */
                for (int d = 0; d < g.split; d++)
                    if (d != sp)
                        push_async(&so[jb + lane], o, &mb[1], mi * g.split + d);
        }
        if (more)
#pragma unroll
            for (int rr = 0; rr < G; rr++)
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    cur[rr][v] = nxt[rr][v];
    }
    GDN_MARK(6);
    if (LQK && g.cs > 1) /* phase 1 complete: every CTA of the cluster runs and has read q_a, k_a */
        __cluster_barrier_wait();
    if (LQK && g.split > 1) /* (forced splits) every CTA of head h gets the whole o_h; each lane
                             * pushes the so[] it wrote */
        for (int grp = warp; grp < ntask; grp += W)
            if (lane < G)
                for (int d = 0; d < g.split; d++)
                    if (d != sp)
                        *cg::this_cluster().map_shared_rank(&so[j_lo + G * grp + lane],
                                                            mi * g.split + d) =
                            so[j_lo + G * grp + lane];
    if (LQK && g.split > 1) { /* phase 2: o_h whole in every CTA of head h; no DSMEM access
                               * after it */
        __cluster_barrier_arrive();
        __cluster_barrier_wait();
    } else {
        __syncthreads(); /* this CTA's own rows of o_h */
        if (push && g.split > 1)
            mbar_wait(&mb[1]); /* the head's other CTAs' rows (no push reaches this CTA after) */
    }
    GDN_MARK(7);
    /* gated norm: dv lane layout (lane l: j = l, l + 32, ...), every warp of every CTA of the
     * head the same bits; the CTA quantizes its own rows' q8_1 blocks */
    double ss = 0.0;
    for (int j = lane; j < dv; j += 32)
        ss = add_sq(ss, so[j]);
    const float scale = memra_gdn_rms_scale(bfly_f64(ss), dv, a.eps);
    GDN_AFTER(scale);
    GDN_MARK(8);
    for (int grp = warp; grp < rows / 32; grp += W) {
        const int j = j_lo + 32 * grp + lane;
        const float sz = own ? memra_x_siluf(grp == warp ? z0 : z[j]) : s_gz[j];
        const float y = memra_gdn_gate_s(so[j], scale, grp == warp ? w0 : a.norm_w[j], sz);
        const size_t blk = (size_t)b * (size_t)(g.cv / 32) + (size_t)(h * dv + j - lane) / 32;
        q8_1_quantize_warp(y, lane, (u8 *)a.y_q + blk * Q8_1_BYTES);
        if (a.o)
            a.o[(size_t)b * (size_t)g.cv + (size_t)(h * dv + j)] = y;
    }
    if (LQK) /* this CTA's share of q_a, k_a's conv channels, after every reader (phase 1) */
        for (int t = tid; t < nqk; t += NT)
            conv_shift(a, g, b, fast_channel(g, DK, ka, h, dv, qk0, nqk, j_lo, t));
    GDN_MARK(9);
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

/* memra_gdn_step_cuda_tune (measurements only): 0 = the launcher's choice */
int g_tune_split = 0, g_tune_bulk = -1;

/* Rows per warp task of a small-grid CTA owning `rows` state rows: one task per warp where the
 * rows allow it (G = rows / 8), at most 16 / VEC (64 state registers per lane). */
int fast_small_rows(int rows, int vec)
{
    return rows <= 32 ? 4 : rows <= 64 ? 8 : 16 / vec;
}

template <int VEC>
int launch_fast(const memra_gdn_step_args *a, const gdn_geom &g, bool large, cudaStream_t s)
{
    void (*k)(memra_gdn_step_args, gdn_geom);
    if (large) { /* several tasks per warp: where prefetch_tasks applies */
        k = a->prefetch_tasks > 0 ? gdn_step_fast<VEC, kFastWarpsLarge, 8 / VEC, true>
                                  : gdn_step_fast<VEC, kFastWarpsLarge, 8 / VEC, false>;
    } else {
        const int G = fast_small_rows(a->head_v_dim / g.split, VEC);
        k = G == 4   ? gdn_step_fast<VEC, kFastWarpsSmall, 4, false>
            : G == 8 ? gdn_step_fast<VEC, kFastWarpsSmall, 8, false>
                     : gdn_step_fast<VEC, kFastWarpsSmall, 16 / VEC, false>;
    }
    const dim3 grid(a->n_v_head * g.split, a->b);
    const dim3 blk(
        large ? kFastWarpsLarge * 32
              : fast_threads(kFastWarpsSmall, fast_small_rows(a->head_v_dim / g.split, VEC) * VEC));
    return cuda_ops_result(cuda_ops_launch(k, grid, blk, 0, s, g.cs, *a, g));
}

} /* namespace */

extern "C" void memra_gdn_step_cuda_tune(int split, int bulk)
{
    g_tune_split = split;
    g_tune_bulk = bulk;
}

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
    g.split = 1;
    g.cs = 1;
    g.bulk = 1;
    if (a->b > 65535)
        return cuda_ops_invalid("gdn_step: b exceeds the grid limit 65535");
    const bool fast = (a->head_k_dim == 128 || a->head_k_dim == 256) &&
                      a->head_v_dim % 32 == 0 && g.r <= kClusterMax;
    if (fast) {
        /* small grids: split each head's rows over the most CTAs the cluster limit, whole
         * q8_1 blocks per CTA and one CTA per SM allow (at 2 per SM, 9b b = 2 ran 256 CTAs in
         * clusters of 8 and measured 2x its b = 1 time in the tick). Launched alone, back to
         * back, the unsplit kernel is faster (bench/results/ops-timing-gdn-sweep-2026-12-04.txt:
         * 9b b = 1 7.5 us vs 8.4 at split 4), but in the tick the split wins: the 9b B = 1 tick
         * took 2.680 ms with it and 2.772 without, the 0.8b 1.136 vs 1.186 (more CTAs load their
         * first state rows before the PDL wait, under the previous kernel's tail). The bulk L2
         * prefetch of rows past a CTA's first tasks: on for 8-warp CTAs, off for the 4-warp
         * grids (all resident at once, each warp double-buffering its tasks: b = 16 29.5 us
         * without, 31.8 with; the B = 16 tick 7.790 -> 7.719 ms). */
        const long sms = memra_cuda_sm_count();
        const bool large = (long)a->n_v_head * a->b > 2L * sms;
        for (int sp = kMaxSplit; !large && sp > 1 && g.split == 1; sp /= 2)
            if (g.r * sp <= kClusterMax && (a->head_v_dim / 32) % sp == 0 &&
                (long)a->n_v_head * a->b * sp <= sms)
                g.split = sp;
        /* a forced split (the launch's, else memra_gdn_step_cuda_tune's) where the shape takes it
         */
        const int force = a->split > 0 ? a->split : g_tune_split;
        if (force > 0 && force <= kMaxSplit && g.r * force <= kClusterMax &&
            (a->head_v_dim / 32) % force == 0)
            g.split = force;
        g.cs = g.r * g.split;
        g.bulk = g_tune_bulk >= 0 ? g_tune_bulk : !large;
        return a->head_k_dim == 128 ? launch_fast<1>(a, g, large, s)
                                    : launch_fast<2>(a, g, large, s);
    }
    if (g.cv > kGenericMaxCv)
        return cuda_ops_invalid("gdn_step: this shape needs the generic kernel, whose output row "
                                "(n_v_head * head_v_dim) must be <= 40960");
    const size_t smem = sizeof(float) * ((size_t)g.cv + 2 * (size_t)a->head_k_dim + (size_t)a->head_v_dim);
    return cuda_ops_result(
        cuda_ops_launch(gdn_step_generic, dim3(a->b), dim3(kGenericThreads), smem, s, 1, *a, g));
}
