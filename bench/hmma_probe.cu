/*
 * hmma_probe.cu — what a tensor-core mat-vec would buy: weights dequantized to f16 in registers
 * and multiplied by f16 activations with mma.sync.m16n8k16 (fp32 accumulation), one kernel for
 * every tier. A measurement tool, not part of the engine (bench/results/mmvq-notes.md, "A
 * tensor-core mat-vec, probed"). It answers three questions before anyone builds the design:
 *   speed       us per launch of the 9b's mat-vec shapes at B = 1, 2, 4, 8, 16, against the
 *               device-to-device copy rate of the same run (the engine's q8_1 mmvq on the same
 *               shapes: memra-gpu-tests' bandwidth table, MEMRA_GPU_BENCH_ONLY=1);
 *   exactness   whether a column's outputs are bit-identical whatever its slot in the MMA and
 *               whatever the other columns hold (B = 1 against every tier, memcmp): the batch
 *               invariance memra's contract needs from a tensor-core path;
 *   accuracy    the outputs against a CPU reference (f64 dot of the same weights and f16
 *               activations), as the worst |d| over a bound, for every configuration.
 *
 * Why it could be fast: the engine's q8_1 activations carry one scale per 32 elements, so the
 * staged mmvq's exact epilogue pays ~8 instructions per (row, column, 32 elements) (528 of a
 * q4_K b = 16 step's ~870). With f16 activations no activation scale is left; what remains is
 * the weights' own per-32 scale, handled two ways:
 *   v1, v3  folded into f16 weights before the MMA, which accumulates the whole K:
 *           w = f16(q ds - dm) (q4_K), f16((q - 32) ds) (q6_K-r), one rounding each (HFMA2).
 *   v4      (q4_K) raw codes into the MMA (f16 magic numbers 1024 + q, 64 + q: exact), one
 *           sub-block per k-step pair, ds and the offset applied in fp32 per (row, column,
 *           sub-block) (see sb_mma_raw).
 * Kernels: v1, a CUDA block = one 16-row tile and S warps splitting K, partials summed in
 * warp order; v3, W warps x 16 rows per block through a two-stage cp.async ring over items of
 * R super-blocks, K parts summed in part order by the last block of a row group; v4, v3 with
 * raw codes. Every split is fixed by the shape, never by B. Launches go out with programmatic
 * stream serialization: weights are loaded before griddepcontrol.wait, activations after.
 * (v2, whole-tile staging without overlap, was measured in session 22 and removed.)
 * Options of v3 / v4 (session 23): " t", the weights repacked at load into 16-row tiles,
 * super-block-major (a tile's 16 blocks of one super-block are contiguous), so an item's copy
 * is W x R contiguous runs of 16 blocks instead of 16 W rows' R blocks each (the engine's load
 * probe, pattern-probe-2026-12-04.txt, found 16-row-wide loads stop at 59-68 % of the copy
 * rate); " s3", a three-stage ring (two items in flight while one is computed).
 *
 * Formats:
 *   q4_K    GGUF's block (144 bytes, 16-byte aligned in rows of n_in / 256 blocks).
 *   q6_K-r  q6_K repacked at load (GGUF's 210-byte blocks are only 2-byte aligned): 208 bytes,
 *           ql[128] (quarter t at 32 t: byte j holds the low nibbles of elements 64 t + j and
 *           64 t + 32 + j, as q4_K's qs), qh[64] (quarter t at 128 + 16 t, see repack_q6k),
 *           sc[16] (int8, GGUF order); d apart (one f16 per block). Bytes read per block: 210.
 * The k-slot map (v1, v3): lane t = lane & 3 of an MMA owns a quarter of each super-block
 * (elements 64 t .. 64 t + 63); 32-bit code word w (0..7) of the quarter gives two k-steps:
 * elements 64 t + 4 w + (0..3) (low nibbles), then 64 t + 32 + 4 w + (0..3) (high), with
 * k-slots (2 t, 2 t + 1, 2 t + 8, 2 t + 9) <- (e, e + 1, e + 2, e + 3). Activations are read
 * in the same order (8 bytes per k-step per column), so no shuffle is needed.
 *
 *   nvcc -O3 -arch=sm_90 -std=c++17 -o hmma-probe bench/hmma_probe.cu   (bench/device-probe.sh)
 *   hmma-probe [--quick]   prints the checks, then a table: shape, configuration, us per launch at
 * each B, % of the copy rate; exit status 1 when a check fails. --quick leaves out the LM head.
 *   hmma-probe --host-check  replays the kernel's bit work on the host (no device).
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <type_traits>
#include <vector>

#include "probe_check.cuh"
extern "C" {
#include "runtime/quant.h" /* the blocks' fields: memra_q4_k_unpack, memra_q6_k_unpack */
}

enum { QT_Q4K = 0, QT_Q6KR = 1 };
constexpr int QK = 256, Q4K_BYTES = 144, Q6KR_BYTES = 208, Q6K_BYTES = 210, MAX_S = 16;

/* ---------------------------------------------------------------- device: loads, dequant */

__device__ __forceinline__ uint4 ldg_w(const uint8_t *p)
{
    uint4 v; /* weights: streamed once per tick, kept out of L1 */
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 ldg_x(const __half *p)
{
    return __ldg(reinterpret_cast<const uint4 *>(p)); /* activations: reused, cached */
}

/* (a & mask) | magic in one LOP3: written in C, ptxas emitted two (a review of session 22
 * found it in the SASS); 0xea is the truth table of (A & B) | C */
template <uint32_t MASK> __device__ __forceinline__ uint32_t lop_or(uint32_t a, uint32_t magic)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "n"(MASK), "r"(magic));
    return d;
}

/* (a & mask) | b in one LOP3 (q6_K-r: the high bits merged into an already formed code) */
template <uint32_t MASK> __device__ __forceinline__ uint32_t lop_or_r(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "n"(MASK), "r"(b));
    return d;
}

__device__ __forceinline__ uint32_t h2u(__half2 h)
{
    return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ __half2 u2h(uint32_t u)
{
    return *reinterpret_cast<__half2 *>(&u);
}

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* one lane's raw bytes of one super-block, rows g and g + 8 of the tile */
template <int QT> struct lane_sb;
template <> struct lane_sb<QT_Q4K> {
    uint4 hdr[2], qs[2][2];
};
template <> struct lane_sb<QT_Q6KR> {
    uint4 ql[2][2], qh[2];
    uint32_t sc[2];
    uint32_t d[2];
};

template <int QT>
__device__ __forceinline__ void load_sb(lane_sb<QT> &s, const uint8_t *w0, const uint8_t *w1,
                                        const __half *d0, const __half *d1, int t);

template <>
__device__ __forceinline__ void load_sb<QT_Q4K>(lane_sb<QT_Q4K> &s, const uint8_t *w0,
                                                const uint8_t *w1, const __half *, const __half *,
                                                int t)
{
    s.hdr[0] = ldg_w(w0);
    s.qs[0][0] = ldg_w(w0 + 16 + 32 * t);
    s.qs[0][1] = ldg_w(w0 + 32 + 32 * t);
    s.hdr[1] = ldg_w(w1);
    s.qs[1][0] = ldg_w(w1 + 16 + 32 * t);
    s.qs[1][1] = ldg_w(w1 + 32 + 32 * t);
}

template <>
__device__ __forceinline__ void load_sb<QT_Q6KR>(lane_sb<QT_Q6KR> &s, const uint8_t *w0,
                                                 const uint8_t *w1, const __half *d0,
                                                 const __half *d1, int t)
{
    s.ql[0][0] = ldg_w(w0 + 32 * t);
    s.ql[0][1] = ldg_w(w0 + 16 + 32 * t);
    s.qh[0] = ldg_w(w0 + 128 + 16 * t);
    s.sc[0] = __ldg(reinterpret_cast<const uint32_t *>(w0 + 192 + 4 * t));
    s.d[0] = __ldg(reinterpret_cast<const unsigned short *>(d0));
    s.ql[1][0] = ldg_w(w1 + 32 * t);
    s.ql[1][1] = ldg_w(w1 + 16 + 32 * t);
    s.qh[1] = ldg_w(w1 + 128 + 16 * t);
    s.sc[1] = __ldg(reinterpret_cast<const uint32_t *>(w1 + 192 + 4 * t));
    s.d[1] = __ldg(reinterpret_cast<const unsigned short *>(d1));
}

__device__ __forceinline__ uint32_t word_of(const uint4 (&q)[2], int w)
{
    const uint4 &v = q[w >> 2];
    const int k = w & 3;
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/* q4_K: lane t's two sub-blocks (2 t, 2 t + 1), (sc, m) from the 12 packed scale bytes (s0..s3,
 * s4..s7, s8..s11), branch-free: GGUF keeps sc_j, m_j in bytes j, j + 4 for j < 4; for j >= 4
 * their low 4 bits in byte j + 4, their top 2 bits in the top bits of bytes j - 4 and j.
 * Host and device (the host check replays it against quant.c's memra_q4_k_unpack). */
__host__ __device__ inline void q4k_lane_scales(uint32_t s0, uint32_t s1, uint32_t s2, int t,
                                                int &sc0, int &sc1, int &m0, int &m1)
{
    const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    const uint32_t scw = t < 2 ? sc_lo : sc_hi, mw = t < 2 ? m_lo : m_hi;
    const int sh = 16 * (t & 1);
    sc0 = (int)((scw >> sh) & 0xff);
    sc1 = (int)((scw >> (sh + 8)) & 0xff);
    m0 = (int)((mw >> sh) & 0xff);
    m1 = (int)((mw >> (sh + 8)) & 0xff);
}

/*
 * Dequantization, one code word at a time (8 weights of a row): f[0] = (e, e + 1), f[1] =
 * (e + 2, e + 3) for k-step 2 w (low nibbles), f[2], f[3] the same for k-step 2 w + 1 (high
 * nibbles), e = 64 t + 4 w. Per row and super-block the scales are formed once (row_scales).
 */
struct q4k_rs {
    __half2 ds0, dm0, ds1, dm1; /* sub-blocks 2 t (low nibbles) and 2 t + 1 (high) */
};

__device__ __forceinline__ q4k_rs q4k_row_scales(const uint4 &hdr, int t)
{
    const float d = __half2float(__ushort_as_half((unsigned short)(hdr.x & 0xffff)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    int sc0, sc1, m0, m1;
    q4k_lane_scales(hdr.y, hdr.z, hdr.w, t, sc0, sc1, m0, m1);
    q4k_rs r;
    r.ds0 = __half2half2(__float2half_rn(d * (float)sc0));
    r.dm0 = __half2half2(__float2half_rn(-dmin * (float)m0));
    r.ds1 = __half2half2(__float2half_rn(d * (float)sc1));
    r.dm1 = __half2half2(__float2half_rn(-dmin * (float)m1));
    return r;
}

__device__ __forceinline__ void q4k_word(uint32_t v, const q4k_rs &s, uint32_t (&f)[4])
{
    const __half2 k1024 = u2h(0x64006400u), k64 = u2h(0x54005400u);
    const uint32_t u0 = __byte_perm(v, 0, 0x3120); /* bytes b0 b2 b1 b3 */
    const uint32_t u1 = u0 >> 8;
    f[0] = h2u(__hfma2(__hsub2(u2h(lop_or<0x000f000fu>(u0, 0x64006400u)), k1024), s.ds0, s.dm0));
    f[1] = h2u(__hfma2(__hsub2(u2h(lop_or<0x000f000fu>(u1, 0x64006400u)), k1024), s.ds0, s.dm0));
    f[2] = h2u(__hfma2(__hsub2(u2h(lop_or<0x00f000f0u>(u0, 0x54005400u)), k64), s.ds1, s.dm1));
    f[3] = h2u(__hfma2(__hsub2(u2h(lop_or<0x00f000f0u>(u1, 0x54005400u)), k64), s.ds1, s.dm1));
}

struct q6k_rs {
    __half2 ds[4]; /* the lane's four 16-element groups: lo w < 4, lo w >= 4, hi w < 4, hi w >= 4 */
};

__device__ __forceinline__ q6k_rs q6k_row_scales(uint32_t sc4, uint32_t dbits)
{
    const float d = __half2float(__ushort_as_half((unsigned short)dbits));
    q6k_rs r;
#pragma unroll
    for (int i = 0; i < 4; i++)
        r.ds[i] = __half2half2(__float2half_rn(d * (float)(int8_t)(sc4 >> (8 * i))));
    return r;
}

/* q6_K-r: the high 2 bits of code word w's half2 k sit at bits 16 z + 8 (w & 1) + 2 k of qh
 * word w / 2 (z: which half of the half2) */
__device__ __forceinline__ void q6k_word(uint32_t v, uint32_t qhw, int w, const q6k_rs &s,
                                         uint32_t (&f)[4])
{
    const __half2 k1056 = u2h(0x64206420u), k96 = u2h(0x56005600u); /* 1024 + 32, 64 + 32 */
    const uint32_t u0 = __byte_perm(v, 0, 0x3120), u1 = u0 >> 8;
    const uint32_t qp = qhw >> (8 * (w & 1));
    const uint32_t q4 = qp << 4, q2 = qp << 2;
    const uint32_t c0 = lop_or_r<0x000f000fu>(u0, lop_or<0x00300030u>(q4, 0x64006400u));
    const uint32_t c1 = lop_or_r<0x000f000fu>(u1, lop_or<0x00300030u>(q2, 0x64006400u));
    const uint32_t c2 = lop_or_r<0x00f000f0u>(u0, lop_or<0x03000300u>(q4, 0x54005400u));
    const uint32_t c3 = lop_or_r<0x00f000f0u>(u1, lop_or<0x03000300u>(q2, 0x54005400u));
    const __half2 slo = s.ds[w >> 2], shi = s.ds[2 + (w >> 2)];
    f[0] = h2u(__hmul2(__hsub2(u2h(c0), k1056), slo));
    f[1] = h2u(__hmul2(__hsub2(u2h(c1), k1056), slo));
    f[2] = h2u(__hmul2(__hsub2(u2h(c2), k96), shi));
    f[3] = h2u(__hmul2(__hsub2(u2h(c3), k96), shi));
}

__device__ __forceinline__ uint32_t word4(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* v1 and v3's inner step: code words 2 wp and 2 wp + 1 of rows g (c0) and g + 8 (c1),
 * dequantized (q6_K-r's high bits in hw0, hw1: qh word wp), two k-steps of MMA each per
 * 8-column tile against the activations xl (low nibbles' elements), xh (high) */
template <int QT, int NT, typename RS>
__device__ __forceinline__ void wordpair_mma(const uint4 (&c0)[2], const uint4 (&c1)[2],
                                             uint32_t hw0, uint32_t hw1, const RS &s0, const RS &s1,
                                             int wp, const uint4 (&xl)[NT], const uint4 (&xh)[NT],
                                             float (&acc)[NT][4])
{
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const int w_ = 2 * wp + p;
        uint32_t f0[4], f1[4];
        if constexpr (QT == QT_Q4K) {
            q4k_word(word_of(c0, w_), s0, f0);
            q4k_word(word_of(c1, w_), s1, f1);
        } else {
            q6k_word(word_of(c0, w_), hw0, w_, s0, f0);
            q6k_word(word_of(c1, w_), hw1, w_, s1, f1);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint32_t bl0 = p ? xl[nt].z : xl[nt].x, bl1 = p ? xl[nt].w : xl[nt].y;
            const uint32_t bh0 = p ? xh[nt].z : xh[nt].x, bh1 = p ? xh[nt].w : xh[nt].y;
            mma16816(acc[nt], f0[0], f1[0], f0[1], f1[1], bl0, bl1);
            mma16816(acc[nt], f0[2], f1[2], f0[3], f1[3], bh0, bh1);
        }
    }
}

/*
 * y[b][row] = sum_k w[row][k] x[b][k] for the rows of this CUDA block's tile; x [b, n_in] f16,
 * y [b, n_rows] f32. NT: 8-column MMA tiles (1 for B <= 8, 2 for B <= 16).
 */
template <int QT, int NT>
__global__ void __launch_bounds__(MAX_S * 32)
    hmma_mv(const uint8_t *__restrict__ w, const __half *__restrict__ wd,
            const __half *__restrict__ x, float *__restrict__ y, int n_rows, int n_in, int b)
{
    asm volatile("griddepcontrol.launch_dependents;");
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nsb = n_in / QK, blk_bytes = QT == QT_Q4K ? Q4K_BYTES : Q6KR_BYTES;
    const size_t row_bytes = (size_t)nsb * blk_bytes;
    const int r0 = blockIdx.x * 16 + g, r1 = r0 + 8;
    const int sb0 = nsb * warp / nw, sb1 = nsb * (warp + 1) / nw;
    const uint8_t *w0 = w + (size_t)min(r0, n_rows - 1) * row_bytes;
    const uint8_t *w1 = w + (size_t)min(r1, n_rows - 1) * row_bytes;
    const __half *d0 = wd + (size_t)min(r0, n_rows - 1) * nsb;
    const __half *d1 = wd + (size_t)min(r1, n_rows - 1) * nsb;
    float acc[NT][4] = {};
    lane_sb<QT> cur, nxt;
    if (sb0 < sb1)
        load_sb<QT>(cur, w0 + (size_t)sb0 * blk_bytes, w1 + (size_t)sb0 * blk_bytes, d0 + sb0,
                    d1 + sb0, t);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int sb = sb0; sb < sb1; sb++) {
        if (sb + 1 < sb1)
            load_sb<QT>(nxt, w0 + (size_t)(sb + 1) * blk_bytes, w1 + (size_t)(sb + 1) * blk_bytes,
                        d0 + sb + 1, d1 + sb + 1, t);
        /* per row: its scales once, then a code word at a time: dequantize 8 weights per
         * row, two k-steps of MMA per 8-column tile */
        using rs_t = typename std::conditional<QT == QT_Q4K, q4k_rs, q6k_rs>::type;
        rs_t s0, s1;
        if constexpr (QT == QT_Q4K) {
            s0 = q4k_row_scales(cur.hdr[0], t);
            s1 = q4k_row_scales(cur.hdr[1], t);
        } else {
            s0 = q6k_row_scales(cur.sc[0], cur.d[0]);
            s1 = q6k_row_scales(cur.sc[1], cur.d[1]);
        }
#pragma unroll
        for (int wp = 0; wp < 4; wp++) {
            uint4 xl[NT], xh[NT]; /* x[col][64 t + 8 wp ..], x[col][64 t + 32 + 8 wp ..] */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int col = nt * 8 + g;
                const __half *xp = x + (size_t)col * n_in + (size_t)sb * QK + 64 * t + 8 * wp;
                xl[nt] = col < b ? ldg_x(xp) : make_uint4(0, 0, 0, 0);
                xh[nt] = col < b ? ldg_x(xp + 32) : make_uint4(0, 0, 0, 0);
            }
            if constexpr (QT == QT_Q4K)
                wordpair_mma<QT, NT>(cur.qs[0], cur.qs[1], 0u, 0u, s0, s1, wp, xl, xh, acc);
            else
                wordpair_mma<QT, NT>(cur.ql[0], cur.ql[1], word4(cur.qh[0], wp),
                                     word4(cur.qh[1], wp), s0, s1, wp, xl, xh, acc);
        }
        if (sb + 1 < sb1)
            cur = nxt;
    }
    /* partials summed in warp order: the same order at every b */
    __shared__ float red[MAX_S][NT * 4][32];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            red[warp][nt * 4 + i][lane] = acc[nt][i];
    __syncthreads();
    if (warp != 0)
        return;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float s = red[0][nt * 4 + i][lane];
            for (int k = 1; k < nw; k++)
                s += red[k][nt * 4 + i][lane];
            const int row = i < 2 ? r0 : r1, col = nt * 8 + 2 * t + (i & 1);
            if (row < n_rows && col < b)
                y[(size_t)col * n_rows + row] = s;
        }
}

/* one super-block of the tile from shared memory (v3): rows g and g + 8 read at wb0, wb1
 * (their block), activations of column c at xq + c xstride (the lane's quarter), q6_K-r's d
 * of the two rows in d0, d1; accumulates into acc */
template <int QT, int NT>
__device__ __forceinline__ void sb_mma(const uint8_t *wb0, const uint8_t *wb1, const uint8_t *xq,
                                       int xstride, int g, int t, int b, uint32_t d0, uint32_t d1,
                                       float (&acc)[NT][4])
{
    using rs_t = typename std::conditional<QT == QT_Q4K, q4k_rs, q6k_rs>::type;
    rs_t s0, s1;
    uint4 c0[2], c1[2], h0 = {}, h1 = {};
    if constexpr (QT == QT_Q4K) {
        s0 = q4k_row_scales(*reinterpret_cast<const uint4 *>(wb0), t);
        s1 = q4k_row_scales(*reinterpret_cast<const uint4 *>(wb1), t);
        c0[0] = *reinterpret_cast<const uint4 *>(wb0 + 16 + 32 * t);
        c0[1] = *reinterpret_cast<const uint4 *>(wb0 + 32 + 32 * t);
        c1[0] = *reinterpret_cast<const uint4 *>(wb1 + 16 + 32 * t);
        c1[1] = *reinterpret_cast<const uint4 *>(wb1 + 32 + 32 * t);
    } else {
        s0 = q6k_row_scales(*reinterpret_cast<const uint32_t *>(wb0 + 192 + 4 * t), d0);
        s1 = q6k_row_scales(*reinterpret_cast<const uint32_t *>(wb1 + 192 + 4 * t), d1);
        c0[0] = *reinterpret_cast<const uint4 *>(wb0 + 32 * t);
        c0[1] = *reinterpret_cast<const uint4 *>(wb0 + 16 + 32 * t);
        c1[0] = *reinterpret_cast<const uint4 *>(wb1 + 32 * t);
        c1[1] = *reinterpret_cast<const uint4 *>(wb1 + 16 + 32 * t);
        h0 = *reinterpret_cast<const uint4 *>(wb0 + 128 + 16 * t);
        h1 = *reinterpret_cast<const uint4 *>(wb1 + 128 + 16 * t);
    }
#pragma unroll
    for (int wp = 0; wp < 4; wp++) {
        uint4 xl[NT], xh[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int col = nt * 8 + g;
            const uint8_t *xp = xq + (size_t)col * xstride + 16 * wp;
            xl[nt] = col < b ? *reinterpret_cast<const uint4 *>(xp) : make_uint4(0, 0, 0, 0);
            xh[nt] = col < b ? *reinterpret_cast<const uint4 *>(xp + 64) : make_uint4(0, 0, 0, 0);
        }
        wordpair_mma<QT, NT>(c0, c1, word4(h0, wp), word4(h1, wp), s0, s1, wp, xl, xh, acc);
    }
}

/* the block's results (v3): straight to y when K is one part, else to the workspace, and
 * the last block of the row group to arrive (a device counter) sums the parts in part order */
template <int NT>
__device__ __forceinline__ void store_parts(const float (&acc)[NT][4], float *y, float *ws,
                                            unsigned *cnt, int r0, int r1, int t, int b, int n_rows,
                                            int row0, int rows, int ks, int nks)
{
    float *dst = nks == 1 ? y : ws + (size_t)ks * 16 * n_rows;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = i < 2 ? r0 : r1, col = nt * 8 + 2 * t + (i & 1);
            if (row < n_rows && col < b)
                dst[(size_t)col * n_rows + row] = acc[nt][i];
        }
    if (nks == 1)
        return;
    __threadfence();
    __syncthreads();
    __shared__ unsigned last;
    if (threadIdx.x == 0)
        last = atomicAdd(&cnt[blockIdx.x], 1u) == (unsigned)nks - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    for (int i = threadIdx.x; i < b * rows; i += blockDim.x) {
        const int col = i / rows, row = row0 + i % rows;
        if (row >= n_rows)
            continue;
        float s = __ldcg(ws + (size_t)col * n_rows + row);
        for (int k = 1; k < nks; k++)
            s += __ldcg(ws + ((size_t)k * 16 + col) * n_rows + row);
        y[(size_t)col * n_rows + row] = s;
    }
    if (threadIdx.x == 0)
        cnt[blockIdx.x] = 0;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem));
}

__host__ __device__ inline int pad_to(int bytes, int rem) /* smallest >= bytes, = rem mod 128 */
{
    return bytes + ((rem - bytes % 128) + 128) % 128;
}

/*
 * v4, "raw codes" (q4_K; the review of session 22): the MMA takes the codes as f16 magic
 * numbers, exact ((1024 + q) for low nibbles, (64 + q) for high: one LOP3 per half2, no
 * HSUB2/HFMA2), with every k-step inside one 32-element sub-block: lane t of k-step (sub-block
 * s, half h) holds elements 16 h + 4 t + (0..3) of s, i.e. qs word 32 c + 16 h + 4 t of chunk
 * c = s / 2 (low nibbles: s even, high: s odd). A sub-block's two k-steps start from C = 0, and
 * the scale goes on in fp32, in a fixed order per (row, column, sub-block):
 *   acc = fma(ds, D, acc); acc = fma(-koff, S_x, acc)
 * with ds = d sc, koff = (1024 or 64) ds + dmin m (per row and sub-block, staged in shared
 * memory by rs[] once per item) and S_x the sum of the sub-block's 32 activations of the
 * column (sx_sum[], once per item; in an engine the activation producer would write it, as
 * q8_1's s is today). Batch-invariant for the same reason as v3 (the MMA's columns are
 * independent, the epilogue is per column); no f16 rounding of weights at all.
 */
template <int NT>
__device__ __forceinline__ void sb_mma_raw(const uint8_t *wb0, const uint8_t *wb1,
                                           const uint8_t *xq, int xstride, const float2 *rs0,
                                           const float2 *rs1, const float *sxs, int g, int t, int b,
                                           float (&acc)[NT][4])
{
#pragma unroll
    for (int c = 0; c < 4; c++) {
        uint32_t f0[2][4], f1[2][4]; /* [h][low e01, low e23, high e01, high e23] */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t v0 =
                *reinterpret_cast<const uint32_t *>(wb0 + 16 + 32 * c + 16 * h + 4 * t);
            const uint32_t v1 =
                *reinterpret_cast<const uint32_t *>(wb1 + 16 + 32 * c + 16 * h + 4 * t);
            const uint32_t a0 = __byte_perm(v0, 0, 0x3120), a1 = a0 >> 8;
            const uint32_t b0 = __byte_perm(v1, 0, 0x3120), b1 = b0 >> 8;
            f0[h][0] = lop_or<0x000f000fu>(a0, 0x64006400u);
            f0[h][1] = lop_or<0x000f000fu>(a1, 0x64006400u);
            f0[h][2] = lop_or<0x00f000f0u>(a0, 0x54005400u);
            f0[h][3] = lop_or<0x00f000f0u>(a1, 0x54005400u);
            f1[h][0] = lop_or<0x000f000fu>(b0, 0x64006400u);
            f1[h][1] = lop_or<0x000f000fu>(b1, 0x64006400u);
            f1[h][2] = lop_or<0x00f000f0u>(b0, 0x54005400u);
            f1[h][3] = lop_or<0x00f000f0u>(b1, 0x54005400u);
        }
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const int sblk = 2 * c + p;
            const float2 k0 = rs0[sblk], k1 = rs1[sblk]; /* (ds, koff) of rows g, g + 8 */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                float d[4] = {0.f, 0.f, 0.f, 0.f};
                const int col = nt * 8 + g;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* x elements 32 sblk + 16 h + 4 t .. + 3: quarter sblk / 2, offset
                     * 32 (sblk & 1) + 16 h + 4 t halves */
                    uint2 xv = make_uint2(0, 0);
                    if (col < b)
                        xv = *reinterpret_cast<const uint2 *>(
                            xq + (size_t)col * xstride + (sblk >> 1) * 144 +
                            2 * (32 * (sblk & 1) + 16 * h + 4 * t));
                    mma16816(d, f0[h][2 * p], f1[h][2 * p], f0[h][2 * p + 1], f1[h][2 * p + 1],
                             xv.x, xv.y);
                }
                const float2 sx =
                    *reinterpret_cast<const float2 *>(sxs + sblk * 16 + nt * 8 + 2 * t);
                acc[nt][0] = fmaf(-k0.y, sx.x, fmaf(k0.x, d[0], acc[nt][0]));
                acc[nt][1] = fmaf(-k0.y, sx.y, fmaf(k0.x, d[1], acc[nt][1]));
                acc[nt][2] = fmaf(-k1.y, sx.x, fmaf(k1.x, d[2], acc[nt][2]));
                acc[nt][3] = fmaf(-k1.y, sx.y, fmaf(k1.x, d[3], acc[nt][3]));
            }
        }
    }
}

/*
 * Shared layouts (bank-conflict-free for the fragment reads): weight rows at a stride = 16
 * (mod 128) bytes; activations per column in 64-element quarters of 144 bytes (128 + 16 pad),
 * columns at a stride = 64 (mod 128). (v2 of session 22 staged a block's whole tile before
 * griddepcontrol.wait and computed it after: loads and compute did not overlap; removed.)
 *
 * v3, "pipelined": a CUDA block (W warps x 16 rows) walks its K part
 * (n_sb / KS super-blocks) in items of R super-blocks through a two-stage cp.async ring: the
 * weights and activations of item i + 1 are in flight while item i is computed, so the loads
 * and the dequantization overlap inside a block instead of across blocks. The accumulators
 * stay in registers across the items (the MMA chain runs in K order); with KS > 1 the parts
 * meet in a workspace and the last block of a row group to arrive (a device counter) sums
 * them in part order, never arrival order. R is a template parameter, so the cp.async
 * address arithmetic divides by constants.
 */
template <int QT, int NT, int R, int MODE = 0>
__global__ void __launch_bounds__(256)
    hmma_mv3(const uint8_t *__restrict__ w, const __half *__restrict__ wd,
             const __half *__restrict__ x, float *__restrict__ y, float *__restrict__ ws,
             unsigned *__restrict__ cnt, int n_rows, int n_in, int b)
{
    asm volatile("griddepcontrol.launch_dependents;");
    extern __shared__ __align__(16) uint8_t sm[];
    constexpr bool RAW = MODE & 1, TILED = MODE & 2; /* v4's raw codes; the tiled layout */
    constexpr int NS = MODE & 4 ? 3 : 2;             /* stages of the cp.async ring */
    constexpr int BLK = QT == QT_Q4K ? Q4K_BYTES : Q6KR_BYTES, PIECES = R * BLK / 16;
    constexpr int WSTRIDE = (R * BLK) + (((16 - (R * BLK) % 128) + 128) % 128);
    constexpr int XSTRIDE = (R * 576) + (((64 - (R * 576) % 128) + 128) % 128);
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int nsb = n_in / QK, rows = 16 * nw, row0 = blockIdx.x * rows;
    const int ks = blockIdx.y, nks = gridDim.y, items = nsb / (nks * R);
    const int sb_first = ks * items * R;
    const size_t wbytes = (size_t)rows * WSTRIDE, stage = wbytes + (size_t)b * XSTRIDE;
    const int r0 = row0 + 16 * warp + g, r1 = r0 + 8;
    /* a block has 2 threads per row (32 W threads, 16 W rows): thread 2 r + c copies pieces c,
     * c + 2, ... of row r, from pointers formed once (the review of session 22 counted ~26
     * instructions per piece when each piece divided its index) */
    const int wr = threadIdx.x >> 1, wc = threadIdx.x & 1;
    const int wdst = wr * WSTRIDE + 16 * wc;
    /* TILED: the weights repacked at load, 16-row tiles, super-block by super-block (16
     * consecutive blocks of one tile and super-block are contiguous), so an item's copy is
     * W x R runs of 16 x BLK bytes instead of 16 W rows' R x BLK bytes each; piece p of a row
     * sits at (p / PER) 16 BLK + (p % PER) 16, a constant per unrolled k and wc */
    constexpr int PER = BLK / 16;
    const uint8_t *wsrc = TILED ? w + ((size_t)((row0 + wr) >> 4) * nsb + sb_first) * 16 * BLK +
                                      ((row0 + wr) & 15) * BLK
                                : w + ((size_t)(row0 + wr) * nsb + sb_first) * BLK + 16 * wc;
    auto issue_w = [&](int item, uint8_t *st) {
        const uint8_t *src = wsrc + (size_t)item * (TILED ? R * 16 * BLK : R * BLK);
#pragma unroll
        for (int k = 0; k < (PIECES + 1) / 2; k++)
            if (2 * k + wc < PIECES) {
                const int off =
                    !TILED ? 32 * k
                           : (wc ? ((2 * k + 1) / PER) * 16 * BLK + ((2 * k + 1) % PER) * 16
                                 : ((2 * k) / PER) * 16 * BLK + ((2 * k) % PER) * 16);
                cp_async16(st + wdst + 32 * k, src + off);
            }
    };
    auto issue_x = [&](int item, uint8_t *st) {
        const int sb0 = sb_first + item * R;
        uint8_t *sx = st + wbytes;
        for (int i = threadIdx.x; i < b * 32 * R; i += blockDim.x) {
            const int c = i / (32 * R), u = i % (32 * R);
            cp_async16(sx + (size_t)c * XSTRIDE + (u >> 3) * 144 + 16 * (u & 7),
                       x + (size_t)c * n_in + (size_t)sb0 * QK + 8 * u);
        }
    };
    /* one commit group per copy, always committed (empty when there is no such item), so the
     * count is the same in every block: the weights of items 0 .. NS - 1 (before the wait:
     * they do not depend on the previous kernel), then their activations, then one group per
     * refill. wait_group NS - 1 before item i leaves the newest NS - 1 groups (items i + 1 ..
     * i + NS - 1) in flight: item 0 needs its weights and activations, not item 1's
     * activations (groups complete in order, so item 0 also waits for the prologue's other
     * weights). */
#pragma unroll
    for (int i = 0; i < NS; i++) {
        if (i < items)
            issue_w(i, sm + i * stage);
        asm volatile("cp.async.commit_group;");
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
    for (int i = 0; i < NS; i++) {
        if (i < items)
            issue_x(i, sm + i * stage);
        asm volatile("cp.async.commit_group;");
    }
    float acc[NT][4] = {};
    /* q6_K-r's d (global, 2 bytes a block): loaded one item ahead, so its latency hides under
     * the previous item's compute */
    uint32_t dc0[R], dc1[R], dn0[R], dn1[R];
    auto load_d = [&](int item, uint32_t(&a0)[R], uint32_t(&a1)[R]) {
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int sb = sb_first + item * R + j;
            a0[j] =
                QT == QT_Q6KR
                    ? __ldg(reinterpret_cast<const unsigned short *>(wd + (size_t)r0 * nsb + sb))
                    : 0;
            a1[j] =
                QT == QT_Q6KR
                    ? __ldg(reinterpret_cast<const unsigned short *>(wd + (size_t)r1 * nsb + sb))
                    : 0;
        }
    };
    load_d(0, dc0, dc1);
    for (int it = 0; it < items; it++) {
        if (it + 1 < items)
            load_d(it + 1, dn0, dn1);
        /* NS - 1 newer groups may stay in flight: items it + 1 .. it + NS - 1 */
        if constexpr (NS == 3)
            asm volatile("cp.async.wait_group 2;" ::: "memory");
        else
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        const uint8_t *st = sm + (size_t)(it % NS) * stage;
        const uint8_t *sx = st + wbytes;
        const uint8_t *wr0 = st + (size_t)(16 * warp + g) * WSTRIDE,
                      *wr1 = wr0 + 8 * (size_t)WSTRIDE;
        if constexpr (RAW) {
            /* v4: per item, the rows' (ds, koff) of every sub-block and the columns' S_x, in
             * the aux region after the two stages (read in this iteration only) */
            float2 *rs = reinterpret_cast<float2 *>(sm + NS * stage);  /* [rows][8 R] */
            float *sxs = reinterpret_cast<float *>(rs + rows * 8 * R); /* [8 R][16] */
            for (int i = threadIdx.x; i < rows * R; i += blockDim.x) {
                const int r = i / R, j = i % R;
                const uint4 hd =
                    *reinterpret_cast<const uint4 *>(st + (size_t)r * WSTRIDE + j * BLK);
                const float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
                const float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
#pragma unroll
                for (int tt = 0; tt < 4; tt++) {
                    int sc0, sc1, m0, m1;
                    q4k_lane_scales(hd.y, hd.z, hd.w, tt, sc0, sc1, m0, m1);
                    const float ds0 = d * (float)sc0, ds1 = d * (float)sc1;
                    rs[r * 8 * R + 8 * j + 2 * tt] =
                        make_float2(ds0, fmaf(1024.f, ds0, dmin * (float)m0));
                    rs[r * 8 * R + 8 * j + 2 * tt + 1] =
                        make_float2(ds1, fmaf(64.f, ds1, dmin * (float)m1));
                }
            }
            for (int i = threadIdx.x; i < 8 * R * 16; i += blockDim.x) {
                const int sblk = i / 16, col = i % 16; /* sub-block sblk of the item */
                float acc_x = 0.f;
                if (col < b) {
                    const __half *xs = reinterpret_cast<const __half *>(
                        sx + (size_t)col * XSTRIDE + (sblk >> 1) * 144 + 64 * (sblk & 1));
                    for (int e = 0; e < 32; e++)
                        acc_x += __half2float(xs[e]);
                }
                sxs[sblk * 16 + col] = acc_x;
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < R; j++)
                sb_mma_raw<NT>(wr0 + j * BLK, wr1 + j * BLK, sx + 4 * j * 144, XSTRIDE,
                               rs + (16 * warp + g) * 8 * R + 8 * j,
                               rs + (16 * warp + g + 8) * 8 * R + 8 * j, sxs + 8 * j * 16, g, t, b,
                               acc);
        } else {
#pragma unroll
            for (int j = 0; j < R; j++)
                sb_mma<QT, NT>(wr0 + j * BLK, wr1 + j * BLK, sx + (4 * j + t) * 144, XSTRIDE, g, t,
                               b, dc0[j], dc1[j], acc);
        }
#pragma unroll
        for (int j = 0; j < R; j++) {
            dc0[j] = dn0[j];
            dc1[j] = dn1[j];
        }
        __syncthreads(); /* every warp is done with this stage: refill it with item it + NS */
        if (it + NS < items) {
            issue_w(it + NS, sm + (size_t)(it % NS) * stage);
            issue_x(it + NS, sm + (size_t)(it % NS) * stage);
        }
        asm volatile("cp.async.commit_group;");
    }
    store_parts<NT>(acc, y, ws, cnt, r0, r1, t, b, n_rows, row0, rows, ks, nks);
}

/* v3's shared memory: two stages of (weight tile + activations); v4 adds the rows' (ds, koff)
 * and the columns' S_x of one item */
static size_t smem_v3(int qt, int nw, int R, int b, bool raw, int ns)
{
    const int blk = qt == QT_Q4K ? Q4K_BYTES : Q6KR_BYTES;
    const size_t stages = (size_t)(ns == 3 ? 3 : 2) * ((size_t)16 * nw * pad_to(R * blk, 16) +
                                                       (size_t)b * pad_to(R * 4 * 144, 64));
    return stages + (raw ? (size_t)16 * nw * 8 * R * 8 + (size_t)8 * R * 16 * 4 : 0);
}

/* ---------------------------------------------------------------- host: formats, reference */

struct rng {
    uint64_t s;
    uint64_t next()
    {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float uni()
    {
        return (float)((next() >> 40) * (1.0 / 16777216.0));
    } /* [0, 1) */
};

static float h2f(uint16_t h)
{
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
}
static uint16_t f2h(float f)
{
    __half_raw r = __half(__float2half_rn(f));
    return r.x;
}
static uint16_t d2h(double v)
{
    return ((__half_raw)__double2half(v)).x;
}

/* random q4_K rows: small positive d, dmin; scales and codes uniform */
static void gen_q4k(std::vector<uint8_t> &w, size_t n_blocks, rng &r)
{
    w.resize(n_blocks * Q4K_BYTES);
    for (size_t i = 0; i < n_blocks; i++) {
        uint8_t *b = &w[i * Q4K_BYTES];
        const uint16_t d = f2h(0.0005f + 0.001f * r.uni()), dm = f2h(0.0005f + 0.001f * r.uni());
        memcpy(b, &d, 2);
        memcpy(b + 2, &dm, 2);
        for (int k = 4; k < Q4K_BYTES; k += 8) {
            const uint64_t v = r.next();
            memcpy(b + k, &v, std::min(8, Q4K_BYTES - k));
        }
    }
}

/* One q4_K block's weights, each output optional: f16w as v1 / v3 form them (ds = f16(d sc),
 * dm = f16(dmin m), w = f16(q ds - dm): HFMA2, one rounding); exact (v4's reference: d sc
 * and dmin m are exact, w = d sc q - dmin m in f64); koff, each element's v4 offset constant
 * (1024 or 64) d sc + dmin m (for v4's bound). */
static void deq_q4k(const uint8_t *b, float *f16w, double *exact = nullptr, double *koff = nullptr)
{
    uint16_t dh, mh;
    memcpy(&dh, b, 2);
    memcpy(&mh, b + 2, 2);
    const float d = h2f(dh), dmin = h2f(mh);
    uint8_t scs[8], ms[8];
    int8_t codes[QK];
    memra_q4_k_unpack(b, scs, ms, codes);
    for (int j = 0; j < 8; j++) {
        const int sc = scs[j], m = ms[j];
        const double ds = h2f(f2h(d * (float)sc)), dm = h2f(f2h(dmin * (float)m));
        for (int l = 0; l < 32; l++) {
            const int q = codes[32 * j + l];
            if (f16w)
                f16w[32 * j + l] = h2f(d2h(q * ds - dm));
            if (exact)
                exact[32 * j + l] = (double)d * sc * q - (double)dmin * m;
            if (koff)
                koff[32 * j + l] = ((j & 1) ? 64.0 : 1024.0) * d * sc + (double)dmin * m;
        }
    }
}

/* random GGUF q6_K blocks (ql[128], qh[64], sc[16] int8, d) */
static void gen_q6k(std::vector<uint8_t> &w, size_t n_blocks, rng &r)
{
    w.resize(n_blocks * Q6K_BYTES);
    for (size_t i = 0; i < n_blocks; i++) {
        uint8_t *b = &w[i * Q6K_BYTES];
        for (int k = 0; k < 208; k += 8) {
            const uint64_t v = r.next();
            memcpy(b + k, &v, 8);
        }
        for (int k = 0; k < 16; k++)
            b[192 + k] = (uint8_t)(int8_t)((int)(r.next() % 127) - 63);
        const uint16_t d = f2h(0.0002f + 0.0004f * r.uni());
        memcpy(b + 208, &d, 2);
    }
}

static void deq_q6k(const uint8_t *b, float *out)
{
    uint16_t dh;
    memcpy(&dh, b + 208, 2);
    const float d = h2f(dh);
    int8_t codes[QK];
    memra_q6_k_unpack(b, codes);
    for (int e = 0; e < QK; e++) {
        const float ds = h2f(f2h(d * (float)(int8_t)b[192 + e / 16]));
        out[e] = h2f(f2h((float)codes[e] * ds));
    }
}

/* GGUF q6_K -> q6_K-r (208 bytes) + d */
static void repack_q6k(const uint8_t *b, uint8_t *o, uint16_t *d)
{
    int8_t c8[QK];
    memra_q6_k_unpack(b, c8);
    int code[QK]; /* the 6-bit codes 0..63 */
    for (int e = 0; e < QK; e++)
        code[e] = c8[e] + 32;
    memset(o, 0, Q6KR_BYTES);
    for (int t = 0; t < 4; t++)
        for (int j = 0; j < 32; j++)
            o[32 * t + j] =
                (uint8_t)((code[64 * t + j] & 0xf) | ((code[64 * t + 32 + j] & 0xf) << 4));
    /* qh: code word w of quarter t, byte c of it; after the byte permutation (b0 b2 b1 b3),
     * half2 k holds (c0, c1) for k = 0 (lo), (c2, c3) for k = 1 (lo), (c0, c1) for k = 2 (hi),
     * (c2, c3) for k = 3 (hi); z = c & 1 is the half */
    for (int t = 0; t < 4; t++)
        for (int w = 0; w < 8; w++) {
            uint32_t word = 0;
            uint8_t *q = o + 128 + 16 * t + 4 * (w >> 1);
            memcpy(&word, q, 4);
            for (int c = 0; c < 4; c++)
                for (int h = 0; h < 2; h++) {
                    const int e = 64 * t + 32 * h + 4 * w + c;
                    const int k = 2 * h + (c >> 1), z = c & 1, p = w & 1;
                    word |= (uint32_t)(code[e] >> 4) << (16 * z + 8 * p + 2 * k);
                }
            memcpy(q, &word, 4);
        }
    memcpy(o + 192, b + 192, 16);
    memcpy(d, b + 208, 2);
}

/*
 * The kernel's bit work replayed on the host, before any device time is spent on it: for each
 * lane t, code word w and half2 k, the f16 pair the kernel would form (byte permutation,
 * masks, magic numbers, the q6_K-r high bits) must be the reference's weights of the
 * elements its k-slots stand for. Returns the number of mismatches.
 */
static uint32_t byte_perm_host(uint32_t v, uint32_t sel)
{
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= ((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

static int host_check_mapping(rng &r)
{
    int bad = 0;
    for (int qt = 0; qt < 2; qt++) {
        std::vector<uint8_t> blk, rep(Q6KR_BYTES);
        uint16_t dv = 0;
        float ref[QK];
        uint8_t scs[8], ms[8]; /* q4_K: the reference scales and mins (quant.c) */
        if (qt == QT_Q4K) {
            gen_q4k(blk, 1, r);
            deq_q4k(blk.data(), ref);
            int8_t codes[QK];
            memra_q4_k_unpack(blk.data(), scs, ms, codes);
        } else {
            gen_q6k(blk, 1, r);
            deq_q6k(blk.data(), ref);
            repack_q6k(blk.data(), rep.data(), &dv);
        }
        for (int t = 0; t < 4; t++)
            for (int w = 0; w < 8; w++) {
                uint32_t v, qhw = 0;
                if (qt == QT_Q4K)
                    memcpy(&v, &blk[16 + 32 * t + 4 * w], 4);
                else {
                    memcpy(&v, &rep[32 * t + 4 * w], 4);
                    memcpy(&qhw, &rep[128 + 16 * t + 4 * (w >> 1)], 4);
                }
                const uint32_t u0 = byte_perm_host(v, 0x3120), u1 = u0 >> 8;
                const uint32_t qp = qhw >> (8 * (w & 1)), q4 = qp << 4, q2 = qp << 2;
                uint32_t c[4] = {(u0 & 0x000f000fu) | 0x64006400u, (u1 & 0x000f000fu) | 0x64006400u,
                                 (u0 & 0x00f000f0u) | 0x54005400u,
                                 (u1 & 0x00f000f0u) | 0x54005400u};
                if (qt == QT_Q6KR) {
                    c[0] |= q4 & 0x00300030u;
                    c[1] |= q2 & 0x00300030u;
                    c[2] |= q4 & 0x03000300u;
                    c[3] |= q2 & 0x03000300u;
                }
                for (int k = 0; k < 4; k++)
                    for (int z = 0; z < 2; z++) {
                        /* the code the half holds, from its magic number */
                        const float mag = h2f((uint16_t)(c[k] >> (16 * z)));
                        const int code = (int)(mag - (k < 2 ? 1024.0f : 64.0f));
                        const int e = 64 * t + 32 * (k >> 1) + 4 * w + 2 * (k & 1) + z;
                        float wv;
                        if (qt == QT_Q4K) {
                            int lsc[2], lm[2], hsc, hm;
                            const int sc = scs[2 * t + (k >> 1)], m = ms[2 * t + (k >> 1)];
                            uint32_t sw[3];
                            memcpy(sw, &blk[4], 12);
                            q4k_lane_scales(sw[0], sw[1], sw[2], t, lsc[0], lsc[1], lm[0], lm[1]);
                            hsc = lsc[k >> 1];
                            hm = lm[k >> 1];
                            if (hsc != sc || hm != m) {
                                if (bad < 5)
                                    printf("  SCALES q4_K t %d sub-block %d: (%d, %d), "
                                           "reference (%d, %d)\n",
                                           t, 2 * t + (k >> 1), hsc, hm, sc, m);
                                bad++;
                            }
                            uint16_t dh, mh;
                            memcpy(&dh, &blk[0], 2);
                            memcpy(&mh, &blk[2], 2);
                            const double ds = h2f(f2h(h2f(dh) * (float)sc));
                            const double dm = h2f(f2h(h2f(mh) * (float)m));
                            wv = h2f(d2h(code * ds - dm));
                        } else {
                            const float ds =
                                h2f(f2h(h2f(dv) *
                                        (float)(int8_t)rep[192 + 4 * t + 2 * (k >> 1) + (w >> 2)]));
                            wv = h2f(f2h((float)(code - 32) * ds));
                        }
                        if (memcmp(&wv, &ref[e], 4)) {
                            if (bad < 5)
                                printf("  MAPPING %s t %d w %d k %d z %d: element %d %g, reference "
                                       "%g\n",
                                       qt == QT_Q4K ? "q4_K" : "q6_K-r", t, w, k, z, e, wv, ref[e]);
                            bad++;
                        }
                    }
            }
    }
    return bad;
}

/* ---------------------------------------------------------------- the run */

struct shape {
    const char *name;
    int qt, n_rows, n_in, per_tick; /* launches per 9b tick */
};

/* the 9b's mat-vec shapes (forge preset 9b, Q4_K_M mix; merged launches as one matrix) */
static const shape SHAPES[] = {
    {"gdn_in q4_K 12352x4096", QT_Q4K, 12352, 4096, 24},
    {"attn_qkv q4_K 10240x4096", QT_Q4K, 10240, 4096, 8},
    {"out_proj q4_K 4096x4096", QT_Q4K, 4096, 4096, 32},
    {"ffn_gate_up q4_K 24576x4096", QT_Q4K, 24576, 4096, 32},
    {"ffn_down q4_K 4096x12288", QT_Q4K, 4096, 12288, 16},
    {"ffn_down q6_K 4096x12288", QT_Q6KR, 4096, 12288, 16},
    {"lm_head q6_K 248320x4096", QT_Q6KR, 248320, 4096, 1},
};

struct dev_weights {
    uint8_t *w = nullptr;  /* copies x [n_rows, row bytes] */
    uint8_t *wt = nullptr; /* the same blocks in the tiled layout: [n_rows / 16, nsb, 16] */
    __half *wd = nullptr;  /* copies x [n_rows, nsb] (q6_K-r only) */
    size_t w_bytes = 0, wd_n = 0;
    int copies = 1;
    std::vector<uint8_t> host; /* GGUF blocks of one copy (reference) */
};

/* a kernel configuration: v1 (warp-split, S = a warps per 16 rows), v3 (pipelined: W = a warps
 * x 16 rows per block, items of R super-blocks, KS parts of K) or v4 (v3 with raw codes, q4_K); v2
 * (a block's whole tile staged, then computed) measured in session 22 and removed: v3 keeps its
 * layouts */
struct kcfg {
    int v, a, R, ks;
    int occ; /* v3: at most this many blocks per SM (shared memory padded to it), 0: no cap */
    int tl;  /* v3 / v4: weights in the tiled layout (16-row tiles, super-block-major) */
    int ns;  /* v3 / v4: stages of the cp.async ring (2 or 3) */
};

static const kcfg CONFIGS[] = {
    {1, 8, 0, 0, 0, 0, 2}, {3, 4, 2, 1, 0, 0, 2}, {3, 4, 2, 1, 3, 0, 2}, {3, 4, 1, 2, 0, 0, 2},
    {3, 4, 2, 2, 0, 0, 2}, {3, 4, 2, 4, 0, 0, 2}, {3, 4, 1, 4, 0, 0, 2}, {3, 8, 1, 1, 0, 0, 2},
    {3, 4, 2, 1, 0, 0, 3}, {3, 4, 2, 2, 0, 0, 3}, {3, 4, 1, 1, 0, 1, 2}, {3, 4, 2, 1, 0, 1, 2},
    {3, 4, 2, 1, 3, 1, 2}, {3, 4, 1, 2, 0, 1, 2}, {3, 4, 2, 2, 0, 1, 2}, {3, 4, 1, 4, 0, 1, 2},
    {3, 4, 2, 4, 0, 1, 2}, {3, 8, 1, 1, 0, 1, 2}, {3, 8, 2, 1, 0, 1, 2}, {3, 2, 2, 2, 0, 1, 2},
    {3, 2, 2, 4, 0, 1, 2}, {3, 4, 1, 1, 0, 1, 3}, {3, 4, 2, 1, 0, 1, 3}, {3, 4, 1, 2, 0, 1, 3},
    {3, 4, 2, 2, 0, 1, 3}, {3, 4, 1, 4, 0, 1, 3}, {3, 8, 1, 1, 0, 1, 3}, {4, 4, 2, 2, 0, 1, 2},
    {4, 4, 2, 4, 0, 1, 2}, {4, 4, 1, 2, 0, 1, 3}};

static bool cfg_ok(const kcfg &c, const shape &s)
{
    const int nsb = s.n_in / QK;
    if (c.v == 1)
        return c.a <= nsb;
    if (c.v == 4 && s.qt != QT_Q4K) /* v4 is written for q4_K only */
        return false;
    return nsb % (c.R * c.ks) == 0 && s.n_rows % (16 * c.a) == 0;
}

static void cfg_name(const kcfg &c, char *buf, size_t n)
{
    if (c.v == 1)
        snprintf(buf, n, "v1 S=%d", c.a);
    else
        snprintf(buf, n, c.occ ? "v%d W%d R%d K%d o%d%s%s" : "v%d W%d R%d K%d%.0d%s%s", c.v, c.a,
                 c.R, c.ks, c.occ, c.tl ? " t" : "", c.ns == 3 ? " s3" : "");
}

struct workspace {
    float *ws = nullptr;     /* [n_ks, 16, n_rows] */
    unsigned *cnt = nullptr; /* [row groups], zero between launches */
};

template <int QT, int NT, int MODE> static void set_smem_attr_mode(void)
{
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    CK(cudaFuncSetAttribute(hmma_mv3<QT, NT, 1, MODE>, a, 200 * 1024));
    CK(cudaFuncSetAttribute(hmma_mv3<QT, NT, 2, MODE>, a, 200 * 1024));
}

template <int QT, int NT> static void set_smem_attr(void)
{
    set_smem_attr_mode<QT, NT, 0>();
    set_smem_attr_mode<QT, NT, 2>();
    set_smem_attr_mode<QT, NT, 4>();
    set_smem_attr_mode<QT, NT, 6>();
    if constexpr (QT == QT_Q4K) {
        set_smem_attr_mode<QT, NT, 1>();
        set_smem_attr_mode<QT, NT, 3>();
        set_smem_attr_mode<QT, NT, 5>();
        set_smem_attr_mode<QT, NT, 7>();
    }
}

template <int QT, int NT, int MODE = 0>
static void launch_v3(cudaLaunchConfig_t &cfg, int R, const uint8_t *w, const __half *wd,
                      const __half *x, float *y, const workspace &wk, int n, int k, int b)
{
    if (R == 1)
        CK(cudaLaunchKernelEx(&cfg, hmma_mv3<QT, NT, 1, MODE>, w, wd, x, y, wk.ws, wk.cnt, n, k,
                              b));
    else
        CK(cudaLaunchKernelEx(&cfg, hmma_mv3<QT, NT, 2, MODE>, w, wd, x, y, wk.ws, wk.cnt, n, k,
                              b));
}

/* RAW (v4), the layout (tl) and the ring's stages (ns) as the kernel's MODE bits */
template <int QT, int NT, int RAW>
static void launch_v3_mode(cudaLaunchConfig_t &cfg, int tl, int ns, int R, const uint8_t *w,
                           const __half *wd, const __half *x, float *y, const workspace &wk, int n,
                           int k, int b)
{
    switch ((tl ? 2 : 0) | (ns == 3 ? 4 : 0)) {
    case 0:
        launch_v3<QT, NT, RAW>(cfg, R, w, wd, x, y, wk, n, k, b);
        break;
    case 2:
        launch_v3<QT, NT, RAW | 2>(cfg, R, w, wd, x, y, wk, n, k, b);
        break;
    case 4:
        launch_v3<QT, NT, RAW | 4>(cfg, R, w, wd, x, y, wk, n, k, b);
        break;
    default:
        launch_v3<QT, NT, RAW | 6>(cfg, R, w, wd, x, y, wk, n, k, b);
    }
}

static void launch(const shape &s, const dev_weights &dw, int copy, const __half *x, float *y,
                   int b, const kcfg &kc, const workspace &wk, cudaStream_t st)
{
    cudaLaunchConfig_t cfg = {};
    if (kc.v == 1) {
        cfg.gridDim = dim3((unsigned)((s.n_rows + 15) / 16));
        cfg.blockDim = dim3((unsigned)(32 * kc.a));
    } else {
        cfg.gridDim = dim3((unsigned)(s.n_rows / (16 * kc.a)), (unsigned)kc.ks);
        cfg.blockDim = dim3((unsigned)(32 * kc.a));
        cfg.dynamicSmemBytes = smem_v3(s.qt, kc.a, kc.R, b, kc.v == 4, kc.ns);
        if (kc.occ) /* pad: the SM's 228 KB less 1 KB per block for the system */
            cfg.dynamicSmemBytes =
                std::max(cfg.dynamicSmemBytes, (size_t)(228 * 1024 / kc.occ - 1024 - 64));
    }
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const uint8_t *w = dw.w + (size_t)copy * dw.w_bytes;
    const uint8_t *wt = kc.tl ? dw.wt + (size_t)copy * dw.w_bytes : w;
    const __half *wd = dw.wd ? dw.wd + (size_t)copy * dw.wd_n : nullptr;
    const int n = s.n_rows, k = s.n_in;
    if (kc.v == 1) {
        if (s.qt == QT_Q4K)
            CK(cudaLaunchKernelEx(&cfg, b <= 8 ? hmma_mv<QT_Q4K, 1> : hmma_mv<QT_Q4K, 2>, w, wd, x,
                                  y, n, k, b));
        else
            CK(cudaLaunchKernelEx(&cfg, b <= 8 ? hmma_mv<QT_Q6KR, 1> : hmma_mv<QT_Q6KR, 2>, w, wd,
                                  x, y, n, k, b));
    } else if (kc.v == 4) {
        if (b <= 8)
            launch_v3_mode<QT_Q4K, 1, 1>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
        else
            launch_v3_mode<QT_Q4K, 2, 1>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
    } else {
        if (s.qt == QT_Q4K && b <= 8)
            launch_v3_mode<QT_Q4K, 1, 0>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
        else if (s.qt == QT_Q4K)
            launch_v3_mode<QT_Q4K, 2, 0>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
        else if (b <= 8)
            launch_v3_mode<QT_Q6KR, 1, 0>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
        else
            launch_v3_mode<QT_Q6KR, 2, 0>(cfg, kc.tl, kc.ns, kc.R, wt, wd, x, y, wk, n, k, b);
    }
}

static void upload(const shape &s, dev_weights &dw, rng &r, size_t rotate_bytes)
{
    const size_t nsb = (size_t)s.n_in / QK, nb = (size_t)s.n_rows * nsb;
    std::vector<uint8_t> dev_img;
    std::vector<uint16_t> dvals;
    if (s.qt == QT_Q4K) {
        gen_q4k(dw.host, nb, r);
        dev_img = dw.host;
    } else {
        gen_q6k(dw.host, nb, r);
        dev_img.resize(nb * Q6KR_BYTES);
        dvals.resize(nb);
        for (size_t i = 0; i < nb; i++)
            repack_q6k(&dw.host[i * Q6K_BYTES], &dev_img[i * Q6KR_BYTES], &dvals[i]);
    }
    dw.w_bytes = dev_img.size();
    dw.wd_n = dvals.size();
    const size_t one = dw.w_bytes + dw.wd_n * 2;
    dw.copies = (int)std::max<size_t>(1, (rotate_bytes + one - 1) / one);
    CK(cudaMalloc(&dw.w, dw.w_bytes * dw.copies));
    CK(cudaMemcpy(dw.w, dev_img.data(), dw.w_bytes, cudaMemcpyHostToDevice));
    for (int c = 1; c < dw.copies; c++)
        CK(cudaMemcpy(dw.w + (size_t)c * dw.w_bytes, dw.w, dw.w_bytes, cudaMemcpyDeviceToDevice));
    { /* the tiled layout: block (row, sb) at ((row / 16) nsb + sb) 16 + row % 16 */
        const size_t blk = s.qt == QT_Q4K ? Q4K_BYTES : Q6KR_BYTES;
        std::vector<uint8_t> tiled(dev_img.size());
        for (size_t row = 0; row < (size_t)s.n_rows; row++)
            for (size_t sb = 0; sb < nsb; sb++)
                memcpy(&tiled[(((row / 16) * nsb + sb) * 16 + row % 16) * blk],
                       &dev_img[(row * nsb + sb) * blk], blk);
        CK(cudaMalloc(&dw.wt, dw.w_bytes * dw.copies));
        CK(cudaMemcpy(dw.wt, tiled.data(), dw.w_bytes, cudaMemcpyHostToDevice));
        for (int c = 1; c < dw.copies; c++)
            CK(cudaMemcpy(dw.wt + (size_t)c * dw.w_bytes, dw.wt, dw.w_bytes,
                          cudaMemcpyDeviceToDevice));
    }
    if (dw.wd_n) {
        CK(cudaMalloc(&dw.wd, dw.wd_n * 2 * dw.copies));
        CK(cudaMemcpy(dw.wd, dvals.data(), dw.wd_n * 2, cudaMemcpyHostToDevice));
        for (int c = 1; c < dw.copies; c++)
            CK(cudaMemcpy(dw.wd + (size_t)c * dw.wd_n, dw.wd, dw.wd_n * 2,
                          cudaMemcpyDeviceToDevice));
    }
}

/* f16 activations, N(0, 1)-ish */
static void gen_x(std::vector<uint16_t> &x, size_t n, rng &r)
{
    x.resize(n);
    for (auto &v : x) {
        const float u = r.uni() + r.uni() + r.uni() - 1.5f;
        v = f2h(2.0f * u);
    }
}

static double copy_gbs(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int i = 0; i < 6; i++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i)
            best = std::min(best, ms);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * bytes / (best * 1e-3) / 1e9;
}

int main(int argc, char **argv)
{
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (argc > 1 && !strcmp(argv[1], "--host-check")) { /* no device needed (scripts/test.sh) */
        rng r{0x9e3779b97f4a7c15ull};
        int bad = 0;
        for (int i = 0; i < 64; i++)
            bad += host_check_mapping(r);
        printf("host replay of the kernel's dequantization, 64 random blocks per type: %s\n",
               bad ? "FAIL" : "ok");
        return bad ? 1 : 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const double gbs = copy_gbs();
    printf("hmma-probe on %s (%d SMs); device-to-device copy %.0f GB/s (read + write, 1 GiB)\n",
           prop.name, prop.multiProcessorCount, gbs);
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int tiers[] = {1, 2, 4, 8, 16};
    set_smem_attr<QT_Q4K, 1>();
    set_smem_attr<QT_Q4K, 2>();
    set_smem_attr<QT_Q6KR, 1>();
    set_smem_attr<QT_Q6KR, 2>();
    rng r{0x9e3779b97f4a7c15ull};
    int failures = host_check_mapping(r);
    printf("host replay of the kernel's dequantization: %s\n", failures ? "FAIL" : "ok");
    struct result {
        kcfg best;
        double us[5];
    };
    std::vector<result> results;
    double tick_us[5] = {}, tick_floor = 0;
    for (const shape &s : SHAPES) {
        if (quick && s.n_rows > 100000)
            continue;
        dev_weights dw;
        upload(s, dw, r, (size_t)256 << 20);
        const size_t nsb = (size_t)s.n_in / QK;
        const double bytes = (double)s.n_rows * nsb * (s.qt == QT_Q4K ? Q4K_BYTES : Q6K_BYTES);
        std::vector<uint16_t> xh;
        gen_x(xh, (size_t)16 * s.n_in, r);
        __half *x, *x1;
        float *y;
        CK(cudaMalloc(&x, xh.size() * 2));
        CK(cudaMalloc(&x1, xh.size() * 2));
        CK(cudaMalloc(&y, (size_t)16 * s.n_rows * 4));
        CK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
        workspace wk;
        CK(cudaMalloc(&wk.ws, (size_t)(s.n_in / QK) * 16 * s.n_rows * 4));
        CK(cudaMalloc(&wk.cnt, (size_t)(s.n_rows / 16) * 4));
        CK(cudaMemset(wk.cnt, 0, (size_t)(s.n_rows / 16) * 4));

        /* accuracy, every configuration at tier 16, against CPU dots of 256 rows (all when
         * fewer; an odd step, so every lane's row residue mod 16 shows): v1 / v3 against the
         * f16 weights they form, v4 against the exact weights (it never rounds one), with
         * fp32 bounds: 2^-24 x (n_in / 16 + 4) x sum |w x| (accumulation; 4x room for the
         * MMA's internal alignment), plus for v4 2^-24 x 32 x sum koff |x| (its codes carry
         * the offset 1024 or 64, cancelled in the fp32 epilogue) */
        std::vector<float> yh((size_t)16 * s.n_rows), yb1(s.n_rows), yb((size_t)16 * s.n_rows);
        const int step = std::max(1, s.n_rows / 256) | 1;
        std::vector<int> rows_chk;
        for (int row = 0; row < s.n_rows; row += step)
            rows_chk.push_back(row);
        std::vector<double> ref16(rows_chk.size() * 16), refx(rows_chk.size() * 16),
            mag16(rows_chk.size() * 16), magx(rows_chk.size() * 16);
        {
            std::vector<float> wrow(s.n_in);
            std::vector<double> wex(s.n_in), koff(s.n_in);
            for (size_t ri = 0; ri < rows_chk.size(); ri++) {
                const int row = rows_chk[ri];
                for (size_t k = 0; k < nsb; k++) {
                    const uint8_t *blk = &dw.host[((size_t)row * nsb + k) *
                                                  (s.qt == QT_Q4K ? Q4K_BYTES : Q6K_BYTES)];
                    if (s.qt == QT_Q4K) {
                        deq_q4k(blk, &wrow[k * QK], &wex[k * QK], &koff[k * QK]);
                    } else {
                        deq_q6k(blk, &wrow[k * QK]);
                        for (int e = 0; e < QK; e++)
                            wex[k * QK + e] = wrow[k * QK + e], koff[k * QK + e] = 0;
                    }
                }
                for (int c = 0; c < 16; c++) {
                    double r16 = 0, rx = 0, m16 = 0, mx = 0;
                    for (int k = 0; k < s.n_in; k++) {
                        const double xv = h2f(xh[(size_t)c * s.n_in + k]);
                        r16 += (double)wrow[k] * xv;
                        m16 += fabs((double)wrow[k] * xv);
                        rx += wex[k] * xv;
                        mx += koff[k] * fabs(xv);
                    }
                    ref16[ri * 16 + c] = r16, refx[ri * 16 + c] = rx;
                    mag16[ri * 16 + c] = m16, magx[ri * 16 + c] = mx;
                }
            }
        }
        double worst = 0;
        for (const kcfg &kc : CONFIGS) {
            if (!cfg_ok(kc, s))
                continue;
            launch(s, dw, 0, x, y, 16, kc, wk, st);
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(yh.data(), y, yh.size() * 4, cudaMemcpyDeviceToHost));
            char nm[32];
            cfg_name(kc, nm, sizeof nm);
            for (size_t ri = 0; ri < rows_chk.size(); ri++)
                for (int c = 0; c < 16; c++) {
                    const size_t i = ri * 16 + c;
                    const double ref = kc.v == 4 ? refx[i] : ref16[i];
                    const double bound = ldexp(1.0, -24) * (4.0 * (s.n_in / 16 + 4) * mag16[i] +
                                                            (kc.v == 4 ? 32.0 * magx[i] : 0.0)) +
                                         1e-30;
                    const double got = yh[(size_t)c * s.n_rows + rows_chk[ri]];
                    if (!std::isfinite(got) || fabs(got - ref) > bound) {
                        if (failures < 10)
                            printf("  ACCURACY %s %s row %d col %d: got %.9g ref %.9g bound "
                                   "%.3g\n",
                                   s.name, nm, rows_chk[ri], c, got, ref, bound);
                        failures++;
                    }
                    worst = std::max(worst, fabs(got - ref) / bound);
                }
        }

        /* batch invariance: column 0 alone (B = 1) against the same column at every slot of
         * every tier, the other columns random (memcmp), for each configuration */
        int inv_bad = 0, inv_n = 0;
        for (const kcfg &kc : CONFIGS) {
            if (!cfg_ok(kc, s))
                continue;
            char nm[32];
            cfg_name(kc, nm, sizeof nm);
            CK(cudaMemcpy(x1, x, (size_t)s.n_in * 2, cudaMemcpyDeviceToDevice));
            launch(s, dw, 0, x1, y, 1, kc, wk, st);
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(yb1.data(), y, (size_t)s.n_rows * 4, cudaMemcpyDeviceToHost));
            for (int b : tiers) {
                for (int slot = 0; slot < b; slot++) {
                    /* x1 = random columns with column 0 of x at this slot */
                    std::vector<uint16_t> xs;
                    gen_x(xs, (size_t)b * s.n_in, r);
                    memcpy(&xs[(size_t)slot * s.n_in], xh.data(), (size_t)s.n_in * 2);
                    CK(cudaMemcpy(x1, xs.data(), xs.size() * 2, cudaMemcpyHostToDevice));
                    launch(s, dw, 0, x1, y, b, kc, wk, st);
                    CK(cudaStreamSynchronize(st));
                    CK(cudaMemcpy(yb.data(), y, (size_t)b * s.n_rows * 4, cudaMemcpyDeviceToHost));
                    inv_n++;
                    if (memcmp(&yb[(size_t)slot * s.n_rows], yb1.data(), (size_t)s.n_rows * 4)) {
                        inv_bad++;
                        if (failures < 10)
                            printf("  INVARIANCE %s %s B=%d slot %d: column differs from B=1\n",
                                   s.name, nm, b, slot);
                        failures++;
                    }
                }
            }
        }
        printf("%-28s accuracy worst |d|/bound %.3f  invariance %d/%d ok\n", s.name, worst,
               inv_n - inv_bad, inv_n);

        /* speed: each (configuration, B), launches back to back over rotated copies (PDL) */
        result res{kcfg{0, 0, 0, 0, 0}, {}};
        double best_sum = 1e30;
        for (const kcfg &kc : CONFIGS) {
            if (!cfg_ok(kc, s))
                continue;
            double us[5];
            for (int ti = 0; ti < 5; ti++) {
                const int b = tiers[ti], reps = std::max(20, std::min(400, dw.copies * 4));
                for (int i = 0; i < 4; i++)
                    launch(s, dw, i % dw.copies, x, y, b, kc, wk, st);
                CK(cudaEventRecord(e0, st));
                for (int i = 0; i < reps; i++)
                    launch(s, dw, i % dw.copies, x, y, b, kc, wk, st);
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                us[ti] = 1e3 * ms / reps;
            }
            char nm[32];
            cfg_name(kc, nm, sizeof nm);
            printf("  %-16s", nm);
            for (int ti = 0; ti < 5; ti++)
                printf("  B=%-2d %7.1f us %3.0f%%", tiers[ti], us[ti],
                       100.0 * bytes / (us[ti] * 1e-6) / (gbs * 1e9));
            printf("\n");
            double sum = 0;
            for (double u : us)
                sum += u;
            if (sum < best_sum) {
                best_sum = sum;
                res.best = kc;
                memcpy(res.us, us, sizeof us);
            }
        }
        results.push_back(res);
        const double floor_us = bytes / (gbs * 1e9) * 1e6;
        for (int ti = 0; ti < 5; ti++)
            tick_us[ti] += s.per_tick * res.us[ti];
        tick_floor += s.per_tick * floor_us;
        CK(cudaFree(x));
        CK(cudaFree(x1));
        CK(cudaFree(y));
        CK(cudaFree(wk.ws));
        CK(cudaFree(wk.cnt));
        CK(cudaFree(dw.w));
        CK(cudaFree(dw.wt));
        if (dw.wd)
            CK(cudaFree(dw.wd));
        CK(cudaGetLastError());
    }

    printf("\nTABLE| shape | MB | floor us | kernel | B=1 | B=2 | B=4 | B=8 | B=16 (us per launch, "
           "the configuration with the least sum over tiers; %% of copy below)\n");
    int k = 0;
    for (const shape &s : SHAPES) {
        if (quick && s.n_rows > 100000)
            continue;
        const double bytes =
            (double)s.n_rows * (s.n_in / QK) * (s.qt == QT_Q4K ? Q4K_BYTES : Q6K_BYTES);
        const result &res = results[k++];
        char nm[32];
        cfg_name(res.best, nm, sizeof nm);
        printf("TABLE| %-28s | %7.1f | %8.2f | %-16s |", s.name, bytes / 1e6,
               bytes / (gbs * 1e9) * 1e6, nm);
        for (double u : res.us)
            printf(" %7.1f |", u);
        printf("\nTABLE| %-28s |         |          |                  |", "  % copy");
        for (double u : res.us)
            printf(" %6.0f%% |", 100.0 * bytes / (u * 1e-6) / (gbs * 1e9));
        printf("\n");
    }
    printf("TABLE| %-28s |         | %8.1f |                  |", "9b tick (launches x us)",
           tick_floor);
    for (double u : tick_us)
        printf(" %7.1f |", u);
    printf("\n%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
