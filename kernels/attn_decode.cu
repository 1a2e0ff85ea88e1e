/*
 * attn_decode.cu — CUDA attn_decode (contract and EXACT arithmetic: kernels/attn_decode.h):
 * flash-decoding of one token per row over the row's own KV cache, gated by sigmoid(gate),
 * quantized to q8_1. Bit-identical to kernels/ref/attn_decode.c, which emulates the order
 * the header writes down; any change of an order here changes the header and the reference.
 *
 * Two kernels, one launch each, both capturable and independent of the context length:
 *  1. attn_split: CTAs (MEMRA_ATTN_WARPS = 4 warps) of (x, kv head j, row b), x taking the
 *     splits s = x, x + gridDim.x, ... of row b (gridDim.x: split_ctas, by default max_split,
 *     so one split each). The row's length len = positions[b] + 1, read on the device, fixes
 *     its split count and split length (memra_attn_nsplit / memra_attn_split_keys); a CTA
 *     whose x >= nsplit exits at once. Per split, the CTA handles ALL q heads of kv head j
 *     (GQA group, in chunks of HG <= 8 heads), so each K/V byte is read once per group.
 *     Inside, warp w takes key batches w, w + 4, ... of KPW * U keys; a key is read by
 *     LPK = head_dim / (8 * VPL) lanes with 16-byte loads (f16: 8 halves; q8_0: 8 codes +
 *     the block scale), each lane holding its 8 * VPL dims of q and of the output
 *     accumulator in registers. Scores: per-lane fmaf partial dot, the xor butterfly over
 *     the LPK lanes, times scale. Online softmax per batch; the batch's HG * (U + 1) exps
 *     (memra_x_expf, or memra_x_expf_seq where that spills: split_exp_seq; f64 inside)
 *     are spread over the key's LPK lanes and broadcast by shuffle, so the f64 work stays
 *     off the critical path. Lane subgroups merge by
 *     butterfly (symmetric formula, so both partners hold the same bits), warps 0..3 in
 *     order (each warp weight exp(m_w - M) once, by its own thread, in shared memory; the
 *     partial written by a loop unrolled by 4: by 8 the 9b's kernel lost a CTA per SM).
 *     The partial (o unnormalised, m, l) goes to scratch [b][i][s][head_dim + 2]; an empty
 *     split writes l = 0. head_dim not in {64, 128, 256, 512} uses a scalar kernel of the
 *     same order with U = 1, KPW = 1 (one key per warp, dims strided over lanes), always one
 *     CTA per split.
 *  2. attn_combine: one warp per q8_1 output block; each lane merges its element's partials
 *     in increasing s (split weights computed once per warp and shuffled when the block
 *     lies in one head; the first 32 splits' m, l and O loaded together, one L2 round
 *     trip), then out = O * (1 / L) * memra_x_sigmoidf(gate) and the shared warp quantizer.
 *     Launched with PDL, so its launch overlaps the split kernel's tail; the sigmoid of the
 *     gate (written before the split kernel) is formed before its PDL wait.
 * Row b reads only row b's q, gate, positions and cache; the float order depends only on
 * (len, max_split, head_dim, group), never on b. A row whose position is outside
 * [0, n_ctx), or whose cache bases are not 16-byte aligned, yields a zero output row
 * (never a fault).
 * Must not: call expf / __expf / CUDA's exp (exact_math.h only); let fmad contraction in
 * (--fmad=false; every fmaf is explicit and mirrored by the reference).
 */
#include <cuda_fp16.h>

#include <atomic>

#include "cuda_common.cuh"
#include "cuda_ops.h"

#ifdef MEMRA_ATTN_PROBE
/* bench/attn_probe.cu only (never in the engine's build): thread 0 of each CTA stamps
 * %globaltimer and clock64 at the split kernel's marks (ATTN_MARK: its first pass only) and at
 * the combine kernel's (ATTN_CMARK), so the probe can say where a launch's time goes.
 * "memory" keeps the stamps in program order with the loads and stores around them; a value a
 * stamp must follow is named with ATTN_AFTER. */
#define MEMRA_ATTN_PROBE_CTAS 8192
#define MEMRA_ATTN_PROBE_MARKS 8
__device__ unsigned long long g_attn_probe[2][MEMRA_ATTN_PROBE_CTAS][MEMRA_ATTN_PROBE_MARKS][2];
__device__ __forceinline__ void attn_mark(int k, int i)
{
    const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x != 0 || cta >= MEMRA_ATTN_PROBE_CTAS)
        return;
    unsigned long long t, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    g_attn_probe[k][cta][i][0] = t;
    g_attn_probe[k][cta][i][1] = c;
}
#define ATTN_MARK(i) attn_mark(0, i)
#define ATTN_CMARK(i) attn_mark(1, i)
#define ATTN_AFTER(x) asm volatile("" ::"f"(x) : "memory")
#else
#define ATTN_MARK(i) ((void)0)
#define ATTN_CMARK(i) ((void)0)
#define ATTN_AFTER(x) ((void)0)
#endif

namespace {

constexpr int kWarps = MEMRA_ATTN_WARPS;

struct attn_geom {
    int group;  /* n_head / n_head_kv */
    int pstride; /* head_dim + 2: floats per partial */
    u64 hb;     /* bytes of one (position, kv head) cache entry */
};

/* The row's length when it is attended, else 0 (zero output row). */
__device__ __forceinline__ int row_len(const memra_attn_decode_args &a, int b)
{
    const int p = a.positions[b];
    if (p < 0 || p >= a.n_ctx || ((a.k_cache[b] | a.v_cache[b]) & 15u) != 0)
        return 0;
    return p + 1;
}

__device__ __forceinline__ int row_nsplit(int len, int max_split) { return memra_attn_nsplit(len, max_split); }

__device__ __forceinline__ int split_keys(int len, int nsplit) { return memra_attn_split_keys(len, nsplit); }

__device__ __forceinline__ float *partial(const memra_attn_decode_args &a, const attn_geom &g,
                                          int b, int i, int s)
{
    return a.scratch + (((size_t)b * (size_t)a.n_head + (size_t)i) * (size_t)a.max_split + (size_t)s) *
                           (size_t)g.pstride;
}

/* exp(m - M) as a merge weight: 0 for an empty accumulator (m = -inf). SEQ: by
 * memra_x_expf_seq, else by the branch-free memra_x_expf (the same bits, fewer cycles, more
 * registers). */
template <bool SEQ = true> __device__ __forceinline__ float merge_w(float m, float M)
{
    return m == -INFINITY ? 0.0f : SEQ ? memra_x_expf_seq(m - M) : memra_x_expf(m - M);
}

/* ---------------------------------- cache entries ------------------------------------ */

/* 8 consecutive dims of one cache entry, raw, and their f32 values. A8: entries are 8-byte
 * aligned (q8_0 with head_dim % 128 == 0). */
template <int KV, bool A8> struct kv8;

template <bool A8> struct kv8<MEMRA_QT_F16, A8> {
    uint4 r;
    __device__ __forceinline__ void load(const u8 *entry, int d0) { r = __ldg((const uint4 *)(entry + 2 * d0)); }
    /* the byte offset of what load reads (the prefetch target) */
    static __device__ __forceinline__ int offset(int d0)
    {
        return 2 * d0;
    }
    __device__ __forceinline__ void zero() { r = make_uint4(0, 0, 0, 0); }
    __device__ __forceinline__ void to_f32(float *f) const
    {
        const u32 w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float2 v = __half22float2(*(const __half2 *)&w[c]);
            f[2 * c] = v.x;
            f[2 * c + 1] = v.y;
        }
    }
};

/* q8_0: dims d0..d0+7 lie in block d0 / 32 (34 bytes: fp16 d, 32 int8); value = q * d as
 * quant.c deq_q8_0. The 8 codes start at an even offset o = 34k + 2 + (d0 % 32): with 8-byte
 * aligned entries one or two aligned 8-byte loads and a funnel shift fetch them (the second
 * word, needed when o % 8 != 0, ends <= 6 bytes into block k + 1; the last block of an
 * entry has o % 8 == 0 since o = 2k + 2 (mod 8) and k + 1 = head_dim / 32 is a multiple of 4,
 * so no load leaves the entry), else four 2-byte loads. */
template <bool A8> struct kv8<MEMRA_QT_Q8_0, A8> {
    u32 lo, hi, d;
    /* the byte offset of the codes load reads (the prefetch target; their block's scale lies
     * 2 + d0 % 32 bytes before, in the same line or the one before) */
    static __device__ __forceinline__ int offset(int d0)
    {
        return 34 * (d0 / 32) + 2 + d0 % 32;
    }
    __device__ __forceinline__ void load(const u8 *entry, int d0)
    {
        const int o = 34 * (d0 / 32) + 2 + d0 % 32;
        d = __ldg((const u16 *)(entry + 34 * (d0 / 32)));
        if (A8) {
            const u64 *w = (const u64 *)(entry + (o & ~7));
            const int sh = 8 * (o & 7);
            const u64 w0 = __ldg(w);
            const u64 r = sh ? (w0 >> sh) | (__ldg(w + 1) << (64 - sh)) : w0;
            lo = (u32)r;
            hi = (u32)(r >> 32);
        } else {
            const u16 *q = (const u16 *)(entry + o);
            lo = (u32)__ldg(q) | ((u32)__ldg(q + 1) << 16);
            hi = (u32)__ldg(q + 2) | ((u32)__ldg(q + 3) << 16);
        }
    }
    __device__ __forceinline__ void zero() { lo = hi = d = 0; }
    /* code q as f32 without the quarter-rate I2F: byte q + 128 placed under the exponent of
     * 2^23 is the float 2^23 + q + 128, and subtracting 2^23 + 128 is exact. */
    static __device__ __forceinline__ float code(u32 biased, int c)
    {
        return __fsub_rn(__int_as_float((int)__byte_perm(biased, 0x4B000000u, 0x7440u | (u32)c)), 8388736.0f);
    }
    __device__ __forceinline__ void to_f32(float *f) const
    {
        const float s = f16_to_f32((u16)d);
        const u32 bl = lo ^ 0x80808080u, bh = hi ^ 0x80808080u;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            f[c] = __fmul_rn(code(bl, c), s);
            f[4 + c] = __fmul_rn(code(bh, c), s);
        }
    }
};

/* -------------------------------- split kernel (fast) -------------------------------- */

/* The header's order geometry (attn_decode.h macros: one definition for kernel and
 * reference). */
template <int DH, int HG> struct split_cfg {
    static constexpr int VPL = MEMRA_ATTN_VPL(DH); /* 8-dim vectors per lane per key */
    static constexpr int LPK = MEMRA_ATTN_LPK(DH); /* lanes per key: 8, 16 or 32 */
    static constexpr int KPW = 32 / LPK;           /* keys per warp step */
    static constexpr int NE = 8 * VPL;             /* dims per lane */
    static constexpr int U = MEMRA_ATTN_U(HG);     /* warp steps per batch */
    static constexpr int NX = HG * (U + 1);        /* exps per batch: corr[h], p[u][h] */
    static constexpr int RX = (NX + LPK - 1) / LPK; /* of them per lane */
};

/* Loads (masked: keys >= t1 are zero and not read) the batch of keys starting at base. PF,
 * ahead > 0: also pulls the same pieces of the keys `ahead` further (below t1) into L2
 * (prefetch_batches: no registers held, no bit changed). */
template <int DH, int HG, int KV, bool A8, bool PF>
__device__ __forceinline__ void
load_batch(const u8 *kb, const u8 *vb, u64 tstride, int base, int t1, int ahead,
           kv8<KV, A8> (&kr)[split_cfg<DH, HG>::U][split_cfg<DH, HG>::VPL],
           kv8<KV, A8> (&vr)[split_cfg<DH, HG>::U][split_cfg<DH, HG>::VPL],
           bool (&ok)[split_cfg<DH, HG>::U])
{
    using C = split_cfg<DH, HG>;
    const int lane = threadIdx.x & 31, sub = lane / C::LPK, sl = lane % C::LPK;
    const u64 skip = PF ? (u64)ahead * tstride : 0;
#pragma unroll
    for (int u = 0; u < C::U; u++) {
        const int t = base + u * C::KPW + sub;
        ok[u] = t < t1;
        const bool pf = PF && ahead > 0 && t + ahead < t1;
#pragma unroll
        for (int v = 0; v < C::VPL; v++) {
            if (ok[u]) {
                const u8 *ke = kb + (u64)t * tstride, *ve = vb + (u64)t * tstride;
                const int d0 = 8 * (sl + C::LPK * v);
                kr[u][v].load(ke, d0);
                vr[u][v].load(ve, d0);
                if (pf) {
                    prefetch_l2(ke + skip + kv8<KV, A8>::offset(d0));
                    prefetch_l2(ve + skip + kv8<KV, A8>::offset(d0));
                }
            } else {
                kr[u][v].zero();
                vr[u][v].zero();
            }
        }
    }
}

/* Merges accumulator (m2, l2, o2) into (m, l, o): symmetric in its two operands. */
template <int N>
__device__ __forceinline__ void merge_acc(float &m, float &l, float *o, float m2, float l2, const float *o2)
{
    const float M = fmaxf(m, m2), w1 = merge_w(m, M), w2 = merge_w(m2, M);
    l = __fadd_rn(__fmul_rn(l, w1), __fmul_rn(l2, w2));
#pragma unroll
    for (int e = 0; e < N; e++)
        o[e] = __fadd_rn(__fmul_rn(o[e], w1), __fmul_rn(o2[e], w2));
    m = M;
}

/* The instantiations whose batch exps keep the sequenced memra_x_expf_seq: with the
 * branch-free memra_x_expf (the same bits, ~200 cycles a dependent call on the H100 against
 * ~370) ptxas interleaves the batch's exps and spills these 4-16 bytes (CUDA 13.0, ptxas -v);
 * every other instantiation takes the branch-free form without a spill. The build fails on any
 * spill (cmake/cudakernels.cmake), so a compiler that spills another stops the build and that
 * instantiation joins the list. */
template <int DH, int HG, int KV, bool A8, bool PF> struct split_exp_seq {
    static constexpr bool F16 = KV == MEMRA_QT_F16, Q8 = KV == MEMRA_QT_Q8_0;
    static constexpr bool value =
        (DH == 128 && HG == 1 && F16 && !PF) || (DH == 128 && HG == 1 && Q8 && A8 && !PF) ||
        (DH == 256 && HG == 1 && F16 && PF) || (DH == 256 && HG == 4 && F16 && !PF) ||
        (DH == 512 && HG == 1 && F16 && PF) || (DH == 512 && HG == 4 && Q8 && A8 && PF);
};

/* One batch of keys (raw kr / vr, validity ok) folded into the online-softmax state
 * (m, l, o) of this lane's subgroup. SEQ: the batch's exps by memra_x_expf_seq
 * (split_exp_seq), else by memra_x_expf; the same bits either way. */
template <int DH, int HG, int KV, bool A8, bool SEQ>
__device__ __forceinline__ void
batch_update(const memra_attn_decode_args &a,
             const kv8<KV, A8> (&kr)[split_cfg<DH, HG>::U][split_cfg<DH, HG>::VPL],
             const kv8<KV, A8> (&vr)[split_cfg<DH, HG>::U][split_cfg<DH, HG>::VPL],
             const bool (&ok)[split_cfg<DH, HG>::U], const float (&q)[HG][split_cfg<DH, HG>::NE],
             float (&m)[HG], float (&l)[HG], float (&o)[HG][split_cfg<DH, HG>::NE])
{
    using C = split_cfg<DH, HG>;
    {
        float sc[C::U][HG];
#pragma unroll
        for (int u = 0; u < C::U; u++) {
            float kf[C::NE];
#pragma unroll
            for (int v = 0; v < C::VPL; v++)
                kr[u][v].to_f32(kf + 8 * v);
#pragma unroll
            for (int h = 0; h < HG; h++) {
                float acc = 0.0f;
#pragma unroll
                for (int e = 0; e < C::NE; e++)
                    acc = fmaf(q[h][e], kf[e], acc);
                sc[u][h] = acc;
            }
        }
#pragma unroll
        for (int off = C::LPK / 2; off >= 1; off >>= 1)
#pragma unroll
            for (int u = 0; u < C::U; u++)
#pragma unroll
                for (int h = 0; h < HG; h++)
                    sc[u][h] = __fadd_rn(sc[u][h], __shfl_xor_sync(FULL_MASK, sc[u][h], off));
        /* exp arguments: xa[h] = m - mn (the correction), xa[HG + u HG + h] = sc - mn */
        float mn[HG], xa[C::NX];
#pragma unroll
        for (int h = 0; h < HG; h++) {
            float mb = -INFINITY;
#pragma unroll
            for (int u = 0; u < C::U; u++) {
                sc[u][h] = ok[u] ? __fmul_rn(sc[u][h], a.scale) : -INFINITY;
                mb = fmaxf(mb, sc[u][h]);
            }
            mn[h] = fmaxf(m[h], mb);
            xa[h] = __fsub_rn(m[h], mn[h]);
#pragma unroll
            for (int u = 0; u < C::U; u++)
                xa[HG + u * HG + h] = __fsub_rn(sc[u][h], mn[h]);
        }
        /* lane sl of the key's LPK lanes computes exps sl, sl + LPK, ...; every lane then
         * reads exp x from lane (x % LPK) of its own subgroup (same function, same bits) */
        const int sl = (threadIdx.x & 31) % C::LPK, lbase = (threadIdx.x & 31) - sl;
        float xe[C::RX];
#pragma unroll
        for (int r = 0; r < C::RX; r++) {
            const int idx = r * C::LPK + sl;
            float x = 0.0f;
#pragma unroll
            for (int i = 0; i < C::NX; i++)
                x = i == idx ? xa[i] : x;
            xe[r] = SEQ ? memra_x_expf_seq(x) : memra_x_expf(x);
        }
        float pr[C::U][HG];
#pragma unroll
        for (int h = 0; h < HG; h++) {
            const float ec = __shfl_sync(FULL_MASK, xe[h / C::LPK], lbase + h % C::LPK);
            const float corr = m[h] == -INFINITY ? 0.0f : ec;
            float ls = 0.0f;
#pragma unroll
            for (int u = 0; u < C::U; u++) {
                const int i = HG + u * HG + h;
                const float ep = __shfl_sync(FULL_MASK, xe[i / C::LPK], lbase + i % C::LPK);
                pr[u][h] = ok[u] ? ep : 0.0f;
                ls = __fadd_rn(ls, pr[u][h]);
            }
            l[h] = __fadd_rn(__fmul_rn(l[h], corr), ls);
            m[h] = mn[h];
#pragma unroll
            for (int e = 0; e < C::NE; e++)
                o[h][e] = __fmul_rn(o[h][e], corr);
        }
#pragma unroll
        for (int u = 0; u < C::U; u++) {
            float vf[C::NE];
#pragma unroll
            for (int v = 0; v < C::VPL; v++)
                vr[u][v].to_f32(vf + 8 * v);
#pragma unroll
            for (int h = 0; h < HG; h++)
#pragma unroll
                for (int e = 0; e < C::NE; e++)
                    o[h][e] = fmaf(pr[u][h], vf[e], o[h][e]);
        }
    }
}

/* The first pf batches of this warp's pass over [t0, t1) into L2 (prefetch_batches; each lane
 * its own pieces of what load_batch reads): no registers held, no bit changed. */
template <int DH, int HG, int KV, bool A8>
__device__ __forceinline__ void prefetch_head(const u8 *kb, const u8 *vb, u64 tstride, int t0,
                                              int t1, int pf)
{
    using C = split_cfg<DH, HG>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / C::LPK,
              sl = lane % C::LPK;
    const int step = kWarps * C::KPW * C::U;
    for (int d = 0, base = t0 + warp * C::KPW * C::U; d < pf && base < t1; d++, base += step)
#pragma unroll
        for (int u = 0; u < C::U; u++) {
            const int t = base + u * C::KPW + sub;
            if (t < t1)
#pragma unroll
                for (int v = 0; v < C::VPL; v++) {
                    const int off = kv8<KV, A8>::offset(8 * (sl + C::LPK * v));
                    prefetch_l2(kb + (u64)t * tstride + off);
                    prefetch_l2(vb + (u64)t * tstride + off);
                }
        }
}

/* One warp's pass over its key batches of [t0, t1) (batches warp, warp + 4, ...), for the
 * heads whose q this lane holds; PF with pf > 0: each batch's loads also pull the batch pf
 * steps ahead into L2 (prefetch_head has pulled the first pf). */
template <int DH, int HG, int KV, bool A8, bool PF>
__device__ __forceinline__ void
split_scan(const memra_attn_decode_args &a, const u8 *kb, const u8 *vb, u64 tstride, int t0, int t1,
           int pf, const float (&q)[HG][split_cfg<DH, HG>::NE], float (&m)[HG], float (&l)[HG],
           float (&o)[HG][split_cfg<DH, HG>::NE])
{
    using C = split_cfg<DH, HG>;
    const int warp = threadIdx.x >> 5, step = kWarps * C::KPW * C::U;
    for (int base = t0 + warp * C::KPW * C::U; base < t1; base += step) {
        kv8<KV, A8> kr[C::U][C::VPL], vr[C::U][C::VPL];
        bool ok[C::U];
        /* all U keys in flight at once */
        load_batch<DH, HG, KV, A8, PF>(kb, vb, tstride, base, t1, pf * step, kr, vr, ok);
        batch_update<DH, HG, KV, A8, split_exp_seq<DH, HG, KV, A8, PF>::value>(a, kr, vr, ok, q, m,
                                                                               l, o);
    }
}

/* PF: the prefetch_batches kernel (a separate instantiation: the prefetch addresses cost
 * registers, and the default kernel keeps its own count) */
template <int DH, int HG, int KV, bool A8, bool PF>
__global__ void __launch_bounds__(kWarps * 32)
    attn_split_fast(memra_attn_decode_args a, attn_geom g)
{
    using C = split_cfg<DH, HG>;
    __shared__ float sm_o[kWarps][HG][DH];
    __shared__ float sm_m[kWarps][HG], sm_l[kWarps][HG], sm_w[kWarps][HG], sm_M[HG];
    const int j = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / C::LPK, sl = lane % C::LPK;
    const int pf = PF ? a.prefetch_batches : 0;
    ATTN_MARK(0);
    if (PF && pf > 0) {
        /* The row's length and cache bases are tick inputs, written before the graph's first
         * kernel, and every kernel before attn_prep has completed once this one runs: so the
         * first pass's first pf batches stream into L2 before the wait, under attn_prep's tail
         * (attn_prep's new key included: L2 holds its writes). */
        const int len = row_len(a, b), nsplit = len ? row_nsplit(len, a.max_split) : 0;
        if ((int)blockIdx.x < nsplit) {
            const int per = split_keys(len, nsplit), t0 = (int)blockIdx.x * per;
            prefetch_head<DH, HG, KV, A8>((const u8 *)(uintptr_t)a.k_cache[b] + (u64)j * g.hb,
                                          (const u8 *)(uintptr_t)a.v_cache[b] + (u64)j * g.hb,
                                          (u64)a.n_head_kv * g.hb, t0, min(len, t0 + per), pf);
        }
    }
    ATTN_MARK(1);
    pdl_wait_release();
    ATTN_MARK(2);
    const int len = row_len(a, b);
    const int nsplit = len ? row_nsplit(len, a.max_split) : 0;
    /* splits x, x + gridDim.x, ... of the row (split_ctas): the same partials whichever CTA
     * computes a split; every pass ends in a CTA barrier, so the shared arrays are free */
#pragma unroll 1
    for (int s = blockIdx.x; s < nsplit; s += gridDim.x) {
        const int per = split_keys(len, nsplit), t0 = s * per, t1 = min(len, t0 + per);
        const u64 tstride = (u64)a.n_head_kv * g.hb;
        const u8 *kb = (const u8 *)(uintptr_t)a.k_cache[b] + (u64)j * g.hb;
        const u8 *vb = (const u8 *)(uintptr_t)a.v_cache[b] + (u64)j * g.hb;
        if (PF && pf > 0 && s != (int)blockIdx.x) /* the first pass's came before the wait */
            prefetch_head<DH, HG, KV, A8>(kb, vb, tstride, t0, t1, pf);
        for (int g0 = 0; g0 < g.group; g0 += HG) {
            float q[HG][C::NE], m[HG], l[HG], o[HG][C::NE];
#pragma unroll
            for (int h = 0; h < HG; h++) {
                const int i = j * g.group + g0 + h;
                const float *qi = a.q + ((size_t)b * (size_t)a.n_head + (size_t)i) * DH;
                m[h] = -INFINITY;
                l[h] = 0.0f;
#pragma unroll
                for (int e = 0; e < C::NE; e++) {
                    q[h][e] = g0 + h < g.group ? qi[8 * (sl + C::LPK * (e / 8)) + e % 8] : 0.0f;
                    o[h][e] = 0.0f;
                }
            }
#ifdef MEMRA_ATTN_PROBE
            const bool first = s == (int)blockIdx.x && g0 == 0;
            ATTN_AFTER(q[0][0]);
            if (first)
                ATTN_MARK(3);
#endif
            split_scan<DH, HG, KV, A8, PF>(a, kb, vb, tstride, t0, t1, pf, q, m, l, o);
#ifdef MEMRA_ATTN_PROBE
            ATTN_AFTER(o[0][0]);
            ATTN_AFTER(l[0]);
            if (first)
                ATTN_MARK(4);
#endif
#pragma unroll
            for (int off = C::LPK; off < 32; off <<= 1)
#pragma unroll
                for (int h = 0; h < HG; h++) {
                    float o2[C::NE];
#pragma unroll
                    for (int e = 0; e < C::NE; e++)
                        o2[e] = __shfl_xor_sync(FULL_MASK, o[h][e], off);
                    const float m2 = __shfl_xor_sync(FULL_MASK, m[h], off);
                    const float l2 = __shfl_xor_sync(FULL_MASK, l[h], off);
                    merge_acc<C::NE>(m[h], l[h], o[h], m2, l2, o2);
                }
            if (sub == 0) {
#pragma unroll
                for (int h = 0; h < HG; h++) {
#pragma unroll
                    for (int e = 0; e < C::NE; e++)
                        sm_o[warp][h][8 * (sl + C::LPK * (e / 8)) + e % 8] = o[h][e];
                    if (sl == 0) {
                        sm_m[warp][h] = m[h];
                        sm_l[warp][h] = l[h];
                    }
                }
            }
            __syncthreads();
#ifdef MEMRA_ATTN_PROBE
            if (first)
                ATTN_MARK(5);
#endif
            if (threadIdx.x < kWarps * HG) { /* weight (w, h) by thread w * HG + h: one exp each */
                const int h = threadIdx.x % HG, w = threadIdx.x / HG;
                float M = -INFINITY;
#pragma unroll
                for (int v = 0; v < kWarps; v++)
                    M = fmaxf(M, sm_m[v][h]);
                sm_w[w][h] = merge_w<false>(sm_m[w][h], M);
                if (w == 0)
                    sm_M[h] = M;
            }
            __syncthreads();
#ifdef MEMRA_ATTN_PROBE
            if (first)
                ATTN_MARK(6);
#endif
            /* unrolled by 4, so the elements' shared loads and chains overlap (by 8, the
             * 9b's prefetching kernel took 197 registers: 2 CTAs per SM instead of 3; by 4,
             * 167 against main's 166); L once per head */
            float *const part0 = partial(a, g, b, j * g.group + g0, 0) + (size_t)s * g.pstride;
            const size_t hstride = (size_t)a.max_split * (size_t)g.pstride; /* head i -> i + 1 */
            constexpr int kPer = (HG * DH + kWarps * 32 - 1) / (kWarps * 32);
#pragma unroll 4
            for (int k = 0; k < kPer; k++) {
                const int idx = threadIdx.x + k * kWarps * 32, h = idx / DH, d = idx % DH;
                if (idx >= HG * DH || g0 + h >= g.group)
                    continue;
                float O = 0.0f;
#pragma unroll
                for (int w = 0; w < kWarps; w++)
                    O = __fadd_rn(O, __fmul_rn(sm_o[w][h][d], sm_w[w][h]));
                float *part = part0 + (size_t)h * hstride;
                part[d] = O;
                if (d == 0) {
                    float L = 0.0f;
#pragma unroll
                    for (int w = 0; w < kWarps; w++)
                        L = __fadd_rn(L, __fmul_rn(sm_l[w][h], sm_w[w][h]));
                    part[DH] = sm_M[h];
                    part[DH + 1] = L;
                }
            }
            __syncthreads();
        }
    }
    ATTN_MARK(7); /* a CTA without a split stamps 1, 2 and 7 only */
}

/* ------------------------------ split kernel (generic) ------------------------------- */

/* Element d of a cache entry as f32 (scalar loads; any head_dim). */
template <int KV> __device__ __forceinline__ float kv_elem(const u8 *entry, int d)
{
    if (KV == MEMRA_QT_F16)
        return f16_to_f32(__ldg((const u16 *)entry + d));
    const u8 *blk = entry + 34 * (d / 32);
    return __fmul_rn(i2f((i32)(i8)__ldg(blk + 2 + d % 32)), f16_to_f32(__ldg((const u16 *)blk)));
}

constexpr int kGenDims = MEMRA_ATTN_MAX_HEAD_DIM / 32; /* dims per lane */

/* memra_x_expf_seq out of line: the scalar kernel keeps 64 floats of q and o live in registers
 * and the inlined f64 body would spill (same function, same bits). */
__device__ __noinline__ float expf_call(float x)
{
    return memra_x_expf_seq(x);
}

template <int KV>
__global__ void __launch_bounds__(kWarps * 32) attn_split_generic(memra_attn_decode_args a, attn_geom g)
{
    __shared__ float sm_o[kWarps][MEMRA_ATTN_MAX_HEAD_DIM];
    __shared__ float sm_m[kWarps], sm_l[kWarps], sm_w[kWarps], sm_M;
    const int s = blockIdx.x, j = blockIdx.y, b = blockIdx.z, dh = a.head_dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    pdl_wait_release();
    const int len = row_len(a, b);
    const int nsplit = len ? row_nsplit(len, a.max_split) : 0;
    if (s >= nsplit) {
        return;
    }
    const int per = split_keys(len, nsplit), t0 = s * per, t1 = min(len, t0 + per);
    const u64 tstride = (u64)a.n_head_kv * g.hb;
    const u8 *kb = (const u8 *)(uintptr_t)a.k_cache[b] + (u64)j * g.hb;
    const u8 *vb = (const u8 *)(uintptr_t)a.v_cache[b] + (u64)j * g.hb;
    for (int h = 0; h < g.group; h++) {
        const int i = j * g.group + h;
        const float *qi = a.q + ((size_t)b * (size_t)a.n_head + (size_t)i) * (size_t)dh;
        float q[kGenDims], o[kGenDims], m = -INFINITY, l = 0.0f;
#pragma unroll
        for (int e = 0; e < kGenDims; e++) {
            q[e] = lane + 32 * e < dh ? qi[lane + 32 * e] : 0.0f;
            o[e] = 0.0f;
        }
        for (int t = t0 + warp; t < t1; t += kWarps) {
            const u8 *ke = kb + (u64)t * tstride, *ve = vb + (u64)t * tstride;
            float acc = 0.0f;
#pragma unroll
            for (int e = 0; e < kGenDims; e++)
                if (lane + 32 * e < dh)
                    acc = fmaf(q[e], kv_elem<KV>(ke, lane + 32 * e), acc);
            const float sc = __fmul_rn(warp_sum_f32(acc), a.scale);
            const float mn = fmaxf(m, sc);
            /* lane 0: the correction exp(m - mn), lane 1: p = exp(sc - mn); shuffled */
            const float ex = expf_call(__fsub_rn(lane == 0 ? m : sc, mn));
            const float ec = __shfl_sync(FULL_MASK, ex, 0), p = __shfl_sync(FULL_MASK, ex, 1);
            const float corr = m == -INFINITY ? 0.0f : ec;
            l = __fadd_rn(__fmul_rn(l, corr), p);
            m = mn;
#pragma unroll
            for (int e = 0; e < kGenDims; e++)
                if (lane + 32 * e < dh)
                    o[e] = fmaf(p, kv_elem<KV>(ve, lane + 32 * e), __fmul_rn(o[e], corr));
        }
#pragma unroll
        for (int e = 0; e < kGenDims; e++)
            if (lane + 32 * e < dh)
                sm_o[warp][lane + 32 * e] = o[e];
        if (lane == 0) {
            sm_m[warp] = m;
            sm_l[warp] = l;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float M = -INFINITY;
            for (int w = 0; w < kWarps; w++)
                M = fmaxf(M, sm_m[w]);
            for (int w = 0; w < kWarps; w++)
                sm_w[w] = merge_w(sm_m[w], M);
            sm_M = M;
        }
        __syncthreads();
        float *part = partial(a, g, b, i, s);
        for (int d = threadIdx.x; d < dh; d += kWarps * 32) {
            float L = 0.0f, O = 0.0f;
            for (int w = 0; w < kWarps; w++) {
                const float wt = sm_w[w];
                L = __fadd_rn(L, __fmul_rn(sm_l[w], wt));
                O = __fadd_rn(O, __fmul_rn(sm_o[w][d], wt));
            }
            part[d] = O;
            if (d == 0) {
                part[dh] = sm_M;
                part[dh + 1] = L;
            }
        }
        __syncthreads();
    }
}

/* ---------------------------------- combine kernel ----------------------------------- */

constexpr int kCombineWarps = 8;

__global__ void __launch_bounds__(kCombineWarps * 32) attn_combine(memra_attn_decode_args a, attn_geom g)
{
    const int b = blockIdx.y, lane = threadIdx.x & 31, dh = a.head_dim;
    const int nblk = a.n_head * dh / 32, blk = blockIdx.x * kCombineWarps + (threadIdx.x >> 5);
    const int e = 32 * blk + lane, i = e / dh, d = e % dh;
    ATTN_CMARK(0);
    /* sigmoid(gate) before the wait: the split kernel releases its dependents after its own
     * wait, so every kernel before it (the q projection that wrote qg included) has completed
     * once this one runs, and the split kernel does not write qg */
    const float sg =
        blk < nblk
            ? memra_x_sigmoidf(
                  a.qg[(size_t)b * (size_t)(2 * a.n_head * dh) + (size_t)(2 * i * dh + dh + d)])
            : 0.0f;
    pdl_wait_release();
    ATTN_CMARK(1);
    if (blk < nblk) {
        const int len = row_len(a, b);
        float out = 0.0f;
        if (len) {
            const int nsplit = row_nsplit(len, a.max_split);
            const float *p0 = partial(a, g, b, i, 0);
            const size_t pst = (size_t)g.pstride;
            float M = -INFINITY, L = 0.0f, O = 0.0f;
            if (dh % 32 == 0) {
                /* The warp's block lies in head i, so every loop below is warp-uniform. No
                 * load waits on the previous split's arithmetic (a chain of nsplit dependent
                 * L2 round trips was the kernel's cost at 100+ splits): lane k reads split
                 * s0 + k's (m, l) and computes its weight once, and the 32 values O_s,d of a
                 * chunk are loaded before the chain consumes them. The chain itself is the
                 * canonical one: increasing s, empty splits (l = 0) skipped. M: fmaxf is
                 * exact, so the lane tree gives the sequential scan's value. */
                /* Every split's (m, l) up to kPre * 32 splits (MEMRA_ATTN_MAX_SPLIT, the
                 * plans' bound) and the first 32 O_s,d are loaded at once, before M: one L2
                 * round trip where a loop over the chunks took one per chunk. The chain below
                 * takes the preloaded (m, l) and loads each chunk's values as it comes (no
                 * double buffer: 32 more registers cost the kernel occupancy). Splits past
                 * kPre * 32 (a max_split above the plans') take the loop below. */
                constexpr int kPre = MEMRA_ATTN_MAX_SPLIT / 32;
                static_assert(kPre >= 1, "the preload holds at least the first 32 splits");
                float lc[kPre], mc[kPre], v[32];
#pragma unroll
                for (int c = 0; c < kPre; c++) {
                    const int sk = 32 * c + lane;
                    lc[c] = sk < nsplit ? p0[(size_t)sk * pst + dh + 1] : 0.0f;
                    mc[c] = sk < nsplit ? p0[(size_t)sk * pst + dh] : -INFINITY;
                }
#pragma unroll
                for (int k = 0; k < 32; k++)
                    v[k] = k < nsplit ? p0[(size_t)k * pst + d] : 0.0f;
#pragma unroll
                for (int c = 0; c < kPre; c++)
                    if (lc[c] != 0.0f) /* l = 0: empty split (and none past nsplit) */
                        M = fmaxf(M, mc[c]);
                for (int s0 = 32 * kPre; s0 < nsplit; s0 += 32) {
                    const int sk = s0 + lane;
                    if (sk < nsplit) {
                        const float ls = p0[(size_t)sk * pst + dh + 1],
                                    ms = p0[(size_t)sk * pst + dh];
                        if (ls != 0.0f)
                            M = fmaxf(M, ms);
                    }
                }
#pragma unroll
                for (int o = 16; o >= 1; o >>= 1)
                    M = fmaxf(M, __shfl_xor_sync(FULL_MASK, M, o));
                ATTN_AFTER(M);
                ATTN_CMARK(2);
                for (int s0 = 0; s0 < nsplit; s0 += 32) {
                    const int sk = s0 + lane, n = min(32, nsplit - s0), c = s0 / 32;
                    float lk, mk;
                    if (c < kPre) { /* the preloaded (m, l); select, not an indexed array */
                        lk = lc[0], mk = mc[0];
#pragma unroll
                        for (int q = 1; q < kPre; q++)
                            if (c == q)
                                lk = lc[q], mk = mc[q];
                    } else {
                        lk = sk < nsplit ? p0[(size_t)sk * pst + dh + 1] : 0.0f;
                        mk = sk < nsplit ? p0[(size_t)sk * pst + dh] : -INFINITY;
                    }
                    if (s0 != 0) {
#pragma unroll
                        for (int k = 0; k < 32; k++)
                            v[k] = k < n ? p0[(size_t)(s0 + k) * pst + d] : 0.0f;
                    }
                    const float wk = lk != 0.0f ? memra_x_expf(__fsub_rn(mk, M)) : 0.0f;
#pragma unroll
                    for (int k = 0; k < 32; k++) {
                        const float ls = __shfl_sync(FULL_MASK, lk, k), w = __shfl_sync(FULL_MASK, wk, k);
                        if (k < n && ls != 0.0f) {
                            L = __fadd_rn(L, __fmul_rn(ls, w));
                            O = __fadd_rn(O, __fmul_rn(v[k], w));
                        }
                    }
                }
            } else {
                for (int s = 0; s < nsplit; s++)
                    if (p0[(size_t)s * pst + dh + 1] != 0.0f) /* l = 0: empty split */
                        M = fmaxf(M, p0[(size_t)s * pst + dh]);
                for (int s = 0; s < nsplit; s++) {
                    const float *ps = p0 + (size_t)s * g.pstride;
                    if (ps[dh + 1] == 0.0f)
                        continue;
                    const float w = memra_x_expf(__fsub_rn(ps[dh], M));
                    L = __fadd_rn(L, __fmul_rn(ps[dh + 1], w));
                    O = __fadd_rn(O, __fmul_rn(ps[d], w));
                }
            }
            ATTN_AFTER(O);
            ATTN_AFTER(L);
            ATTN_CMARK(3);
            out = __fmul_rn(__fmul_rn(O, 1.0f / L), sg);
            ATTN_AFTER(out);
            ATTN_CMARK(4);
        }
        q8_1_quantize_warp(out, lane, (u8 *)a.y_q + ((size_t)b * (size_t)nblk + (size_t)blk) * Q8_1_BYTES);
        if (a.o)
            a.o[(size_t)b * (size_t)(a.n_head * dh) + (size_t)e] = out;
    }
    ATTN_CMARK(5);
}

/* ------------------------------------- launch ---------------------------------------- */

using split_kernel = void (*)(memra_attn_decode_args, attn_geom);

/* The split grid's x of kernel K: split_ctas CTAs per (kv head, row) (the header's encoding;
 * 0 = max_split). AUTO: the most that keep every CTA of the grid resident at once (K's
 * occupancy x the SM count over n_head_kv * b, at least 1, at most max_split), so no CTA
 * waits for a slot only to find its split empty: with one CTA per split up to max_split, a
 * row of len keys leaves max_split - ceil(len / 64) of its CTAs nothing to do (at the 9b's
 * depth 1024, 1025 keys: 111 of 128), and at b = 16 that grid is 15.5 waves of 4 CTAs per SM.
 * The occupancy is K's on sm_90 (every device this build runs on has its limits), cached once
 * known; a failed query (its error cleared) gives max_split for this launch. */
template <split_kernel K> int split_grid_x(const memra_attn_decode_args *a)
{
    static std::atomic<int> occupancy{0}; /* K's CTAs per SM */
    if (a->split_ctas != MEMRA_ATTN_SPLIT_CTAS_AUTO)
        return a->split_ctas > 0 && a->split_ctas < a->max_split ? a->split_ctas : a->max_split;
    int per_sm = occupancy.load(std::memory_order_relaxed);
    if (per_sm == 0) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K, kWarps * 32, 0) !=
                cudaSuccess ||
            per_sm < 1) {
            (void)cudaGetLastError();
            return a->max_split;
        }
        occupancy.store(per_sm, std::memory_order_relaxed);
    }
    const long fit = (long)per_sm * memra_cuda_sm_count() / ((long)a->n_head_kv * a->b);
    return fit < 1 ? 1 : fit < a->max_split ? (int)fit : a->max_split;
}

/* Launches split kernel K on its grid; with grid_x non-NULL only says the grid's x. */
template <split_kernel K>
cudaError_t launch_split_kernel(const memra_attn_decode_args *a, const attn_geom &g, cudaStream_t s,
                                int *grid_x)
{
    const int x = split_grid_x<K>(a);
    if (grid_x) {
        *grid_x = x;
        return cudaSuccess;
    }
    const dim3 grid((unsigned)x, (unsigned)a->n_head_kv, (unsigned)a->b);
    return cuda_ops_launch(K, grid, dim3(kWarps * 32), 0, s, 1, *a, g);
}

template <int DH, int KV, bool PF>
cudaError_t launch_fast(const memra_attn_decode_args *a, const attn_geom &g, cudaStream_t s,
                        int *grid_x)
{
    constexpr bool A8 = KV == MEMRA_QT_Q8_0 && DH % 128 == 0; /* 34 * DH / 32 % 8 == 0 */
    switch (MEMRA_ATTN_HG(DH, g.group)) { /* HG fixes U: part of the order (header) */
    case 1:
        return launch_split_kernel<attn_split_fast<DH, 1, KV, A8, PF>>(a, g, s, grid_x);
    case 2:
        return launch_split_kernel<attn_split_fast<DH, 2, KV, A8, PF>>(a, g, s, grid_x);
    case 4:
        return launch_split_kernel<attn_split_fast<DH, 4, KV, A8, PF>>(a, g, s, grid_x);
    default: /* 8; never for DH > 256 */
        return launch_split_kernel<attn_split_fast<DH, (DH > 256 ? 4 : 8), KV, A8, PF>>(a, g, s,
                                                                                        grid_x);
    }
}

template <int DH, int KV>
cudaError_t launch_fast(const memra_attn_decode_args *a, const attn_geom &g, cudaStream_t s,
                        int *grid_x)
{
    return a->prefetch_batches > 0 ? launch_fast<DH, KV, true>(a, g, s, grid_x)
                                   : launch_fast<DH, KV, false>(a, g, s, grid_x);
}

/* The split kernel of a's shape (grid_x non-NULL: only its grid's x, nothing launched). */
template <int KV>
cudaError_t launch_split(const memra_attn_decode_args *a, const attn_geom &g, cudaStream_t s,
                         int *grid_x)
{
    switch (a->head_dim) { /* the fast set of memra_attn_fast_dim */
    case 64:
        return launch_fast<64, KV>(a, g, s, grid_x);
    case 128:
        return launch_fast<128, KV>(a, g, s, grid_x);
    case 256:
        return launch_fast<256, KV>(a, g, s, grid_x);
    case 512:
        return launch_fast<512, KV>(a, g, s, grid_x);
    default: { /* one split per CTA whatever split_ctas says (a rare shape: not worth the
                * registers a split loop takes in this kernel) */
        memra_attn_decode_args one = *a;
        one.split_ctas = 0;
        return launch_split_kernel<attn_split_generic<KV>>(&one, g, s, grid_x);
    }
    }
}

} /* namespace */

/* The entry's checks and the geometry; MEMRA_OK or the refusal. */
static int decode_prepare(const memra_attn_decode_args *a, attn_geom *g)
{
    if (!a)
        return cuda_ops_invalid("attn_decode: null args");
    const char *why = memra_attn_decode_check(a);
    if (why)
        return cuda_ops_invalid(why);
    if (!a->scratch)
        return cuda_ops_invalid("attn_decode: the CUDA kernel needs scratch [b, n_head, max_split, head_dim + 2]");
    if (a->b > 65535 || a->n_head_kv > 65535)
        return cuda_ops_invalid("attn_decode: b or n_head_kv exceeds the grid limit 65535");
    g->group = a->n_head / a->n_head_kv;
    g->pstride = a->head_dim + 2;
    g->hb = memra_kv_head_bytes(a->kv_type, a->head_dim);
    return MEMRA_OK;
}

extern "C" int memra_attn_decode_cuda_split_ctas(const memra_attn_decode_args *a, int32_t *ctas)
{
    attn_geom g;
    const int rc = decode_prepare(a, &g);
    if (rc != MEMRA_OK)
        return rc;
    int x = 0;
    const cudaError_t e = a->kv_type == MEMRA_QT_F16 ? launch_split<MEMRA_QT_F16>(a, g, 0, &x)
                                                     : launch_split<MEMRA_QT_Q8_0>(a, g, 0, &x);
    if (e != cudaSuccess)
        return cuda_ops_result(e);
    *ctas = x;
    return MEMRA_OK;
}

extern "C" int memra_attn_decode_cuda(const memra_attn_decode_args *a, cudaStream_t s)
{
    attn_geom g;
    const int rc = decode_prepare(a, &g);
    if (rc != MEMRA_OK)
        return rc;
    cudaError_t e = a->kv_type == MEMRA_QT_F16 ? launch_split<MEMRA_QT_F16>(a, g, s, NULL)
                                               : launch_split<MEMRA_QT_Q8_0>(a, g, s, NULL);
    if (e != cudaSuccess)
        return cuda_ops_result(e);
    const int nblk = a->n_head * a->head_dim / 32;
    return cuda_ops_result(cuda_ops_launch(attn_combine, dim3(cdiv_u(nblk, kCombineWarps), a->b),
                                           dim3(kCombineWarps * 32), 0, s, 1, *a, g));
}
