/*
 * mmvq.cuh — the batched quantized mat-vec y[b, o] = W[o, :] . a[b, :] for B = 1..16 rows
 * of q8_1 activations, up to 4 weights sharing one input per launch (merged projections).
 *
 * Template parameters of mmvq_main<B, QT0, QT1, QT2, QT3> (specialization key
 * "mmvq:qt=<qt0>[+<qt1>...]:b=<B>:sm=<arch>"):
 *   B        rows of the tier, 1..16. Rows are padded inside the kernel to the n = 8 of the
 *            mma (NT = ceil(B/8) column tiles); padded columns are never stored.
 *   QT0..3   qtype id of weight 0..3 (QT_NONE = absent): f32, f16, bf16, q4_0, q4_1, q5_0,
 *            q5_1, q8_0, iq4_nl, mxfp4, nvfp4, q4_K, q5_K, q6_K, iq4_xs.
 * Runtime parameters: memra_mmvq_params (mmvq_params.h).
 *
 * Work split (fixed for every B, so row b of a B-wide call is bit-identical to a B = 1 call):
 *   - the summation order is kernels/mmvq.h's canonical one: P = memra_mmvq_parts(n_in)
 *     (p.ksplit; 8 for n_in >= 4096) parts, part p owning the steps (256 elements for the
 *     integer types) s = p, p + P, ... in increasing order; a CUDA block of 8 warps runs
 *     8 / P tiles, one warp per (tile of 16 outputs, part);
 *   - the warp streams its 16 rows' step bytes global -> shared with 16-byte cp.async, 3
 *     stages deep (2 for slots > 160 B); every weight byte is read once for all B rows;
 *   - integer dots are int8 tensor-core mma (m16n8k32 / m16n8k16; exact in any order), the
 *     weights as A (16 outputs x k), the q8_1 codes as B (k x 8 rows);
 *   - for each (output, row) the lane holding that mma accumulator evaluates the per-block
 *     float epilogue of runtime/quant.c with the same operations in the same order
 *     (__fmul_rn / __fadd_rn, no FMA), giving r bit-identical to memra_vec_dot_block, then
 *     T = T + r over the warp's blocks in increasing order. For B <= 4 the K-quants use the
 *     lane-owned variant (block_kq_lk, block_q6k_lk): the same r with a quarter / half of
 *     the float work;
 *   - the parts of a tile are combined as ((T_0 + T_1) + T_2) + ... through shared memory,
 *     so y is bit-identical (memcmp) to the CPU reference memra_mmvq_dot / memra_mmvq_ref.
 *   - epilogue: v = T (* scale[0]); y = v (mode 0) or y = y + v (mode 1).
 * Launches of B <= 2 rows whose weights are all q4_K / q6_K take the direct path instead (see
 * "the direct path" below): warps own whole rows, no mma, the same arithmetic in the same
 * order.
 * Must not: use float atomics, split K by anything but n_in, or let a row's arithmetic
 * depend on another row (mma columns are independent exact integer sums).
 * Invariants: weights 16-byte aligned; nothing outside [w, w + n_out * row_bytes) is read
 * (the last, partial 16-byte unit is copied byte by byte).
 */
#ifndef MEMRA_NVRTC_MMVQ_CUH
#define MEMRA_NVRTC_MMVQ_CUH

#include "common.cuh"
#include "exact_math.h"
#include "mmvq_params.h"
#include "quantize_q8_1.cuh"

#define MMVQ_ROWS MEMRA_MMVQ_ROWS
#define MMVQ_WARPS MEMRA_MMVQ_WARPS


/* ------------------------------- geometry per qtype ----------------------------------- */

template <int QT> struct geom {
    static constexpr int qk = 1, bytes = 1, step = 1, slot = 16, align = 1;
};
#define MMVQ_GEOM(id, name, de, db, sb)                                                            \
    template <> struct geom<id> {                                                                  \
        static constexpr int qk = de, bytes = db, step = sb, slot = MEMRA_MMVQ_SLOT(db, sb);       \
        static constexpr int align = db % 16 == 0 ? 16 : db % 8 == 0 ? 8 : db % 4 == 0 ? 4       \
                                     : db % 2 == 0 ? 2 : 1;                                        \
    };
MEMRA_MMVQ_TYPES(MMVQ_GEOM)
#undef MMVQ_GEOM

template <int QT> struct slot_of {
    static constexpr int v = QT < 0 ? 0 : geom<QT>::slot;
};
__host__ __device__ constexpr int max4(int a, int b, int c, int d)
{
    return (a > b ? a : b) > (c > d ? c : d) ? (a > b ? a : b) : (c > d ? c : d);
}

/* ------------------------------- activations (B side) --------------------------------- */

/* B fragments and scales of q8_1 block i of every row: bf[nt] = words t and 4 + t of the qs
 * of row g + 8 nt (the k positions 4t..4t+3 and 16+4t..16+4t+3 of the block); da[nt][e] =
 * d of row 2t + e + 8 nt. Rows >= B read nothing and give 0. */
template <int B>
MEMRA_DEV void load_q8(const u8 *a, i64 rs, i64 i, int g, int t, u32 (&bf)[(B + 7) / 8][2],
                       float (&da)[(B + 7) / 8][2])
{
#pragma unroll
    for (int nt = 0; nt < (B + 7) / 8; nt++) {
        const int b = g + 8 * nt;
        const bool full = B >= 8 * (nt + 1); /* every row of this column tile is live */
        bf[nt][0] = bf[nt][1] = 0;
        if (full || b < B) {
            const u8 *p = a + b * rs + i * Q8_1_BYTES + 4 + 4 * t;
            bf[nt][0] = ldg_u32(p);
            bf[nt][1] = ldg_u32(p + 16);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int c = 2 * t + e + 8 * nt;
            da[nt][e] = full || c < B ? f16_to_f32((u16)ldg_u16(a + c * rs + i * Q8_1_BYTES)) : 0.0f;
        }
    }
}

/* From this width up the staged path reads a tile's q8_1 rows through pointers formed once per
 * tile_run (q8_ptrs below); narrower kernels form each load's address from (a, rs) at the load.
 * 9b Q4_K_M, depth 1024, H100, two interleaved rounds (bench/results/mmvq-notes.md, session
 * 20): B = 16 7.77 -> 7.49 ms; B = 1, 2, 8 0.2-0.3 % slower with the pointers everywhere. */
#define MMVQ_Q8_PTRS_MIN_B 9

/* The lane's q8_1 row pointers of a tile at B >= MMVQ_Q8_PTRS_MIN_B: b: the code words of row
 * g + 8 nt (+ 4 + 4 t); d: the d_a of rows 2 t + e + 8 nt (rows past B point at row 0, never
 * loaded). At B = 16 the integer work of forming 64-bit row addresses at every load dominated
 * the issue slots (mmvq-notes.md, "A static probe"); kept as opaque values the compiler holds
 * them in registers (or spills them to L1) instead. Narrower: (a, rs) as load_q8 takes them. */
template <int B> struct q8_ptrs {
    const u8 *a;
    i64 rs;
    const u8 *b[(B + 7) / 8];
    const u8 *d[(B + 7) / 8][2];
};

/* p, as a value the compiler cannot recompute from its inputs: it keeps it (in a register or
 * spilled) instead of re-deriving the address at every use. */
MEMRA_DEV const u8 *opaque_ptr(const u8 *p)
{
    asm volatile("mov.b64 %0, %0;" : "+l"(p));
    return p;
}

template <int B> MEMRA_DEV q8_ptrs<B> make_q8_ptrs(const u8 *a, i64 rs, int g, int t)
{
    q8_ptrs<B> P;
    P.a = a;
    P.rs = rs;
    if constexpr (B >= MMVQ_Q8_PTRS_MIN_B) {
#pragma unroll
        for (int nt = 0; nt < (B + 7) / 8; nt++) {
            const int b = g + 8 * nt;
            P.b[nt] = opaque_ptr(a + (b < B ? b : 0) * rs + 4 + 4 * t);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = 2 * t + e + 8 * nt;
                P.d[nt][e] = opaque_ptr(a + (c < B ? c : 0) * rs);
            }
        }
    }
    return P;
}

/* load_q8 through a tile's q8_ptrs: the same loads, the same values. */
template <int B>
MEMRA_DEV void load_q8p(const q8_ptrs<B> &P, i64 i, int g, int t, u32 (&bf)[(B + 7) / 8][2],
                        float (&da)[(B + 7) / 8][2])
{
    if constexpr (B < MMVQ_Q8_PTRS_MIN_B) {
        load_q8<B>(P.a, P.rs, i, g, t, bf, da);
    } else {
#pragma unroll
        for (int nt = 0; nt < (B + 7) / 8; nt++) {
            const int b = g + 8 * nt;
            const bool full = B >= 8 * (nt + 1);
            bf[nt][0] = bf[nt][1] = 0;
            if (full || b < B) {
                const u8 *p = P.b[nt] + i * Q8_1_BYTES;
                bf[nt][0] = ldg_u32(p);
                bf[nt][1] = ldg_u32(p + 16);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = 2 * t + e + 8 * nt;
                da[nt][e] =
                    full || c < B ? f16_to_f32((u16)ldg_u16(P.d[nt][e] + i * Q8_1_BYTES)) : 0.0f;
            }
        }
    }
}

/* Accumulator element e of column tile nt is (row g + 8 (e >> 1), column 2t + (e & 1) +
 * 8 nt); it is dead in every lane when even its smallest column is >= B (skipped at compile
 * time). */
#define MMVQ_LIVE(B, nt, e) (((e) & 1) + 8 * (nt) < (B))

MEMRA_DEV void acc_add(float &T, float r) { T = __fadd_rn(T, r); }

/* Σq of the 32 codes of each column, in accumulator layout (rows all equal). */
MEMRA_DEV void q8_sums(i32 (&q)[4], u32 b0, u32 b1)
{
    mma_k32(q, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, b0, b1);
}

/* runtime/quant.c tree8 evaluated incrementally over k = 0..7 (k a compile-time constant
 * after unrolling): st[2] ends as ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)). */
MEMRA_DEV void tree8_push(float (&st)[3], int k, float c)
{
    if ((k & 1) == 0) {
        st[0] = c;
        return;
    }
    const float pr = __fadd_rn(st[0], c);
    if (k == 1 || k == 5) {
        st[1] = pr;
        return;
    }
    const float qd = __fadd_rn(st[1], pr);
    st[2] = k == 3 ? qd : __fadd_rn(st[2], qd);
}

/* ------------------------------ 32-element types -------------------------------------- */
/*
 * Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4:  r = (d_w × d_a) × f(S)
 * Q4_1, Q5_1:                       r = (d_w × d_a) × f(S) + (m_w × d_a) × f(Q)
 * with S = Σ c_j q_j, Q = Σ q_j (quant.c §5, §6). Lane t's A words hold the codes of
 * elements 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi); |S|, |Q| < 2^22 so i2f_22 is exact.
 */
template <int QT>
MEMRA_DEV void frag32(const u8 *w, int t, u32 &lo, u32 &hi, float &d, float &m)
{
    constexpr int AL = geom<QT>::align;
    m = 0.0f;
    if (QT == QT_Q8_0) {
        d = f16_to_f32((u16)ld_u16<AL>(w));
        lo = ld_u32<AL>(w + 2 + 4 * t);
        hi = ld_u32<AL>(w + 18 + 4 * t);
    } else if (QT == QT_Q4_0) {
        d = f16_to_f32((u16)ld_u16<AL>(w));
        const u32 x = ld_u32<AL>(w + 2 + 4 * t);
        lo = sub8(x & 0x0F0F0F0Fu);
        hi = sub8((x >> 4) & 0x0F0F0F0Fu);
    } else if (QT == QT_IQ4_NL) {
        d = f16_to_f32((u16)ld_u16<AL>(w));
        book_lookup<book_kv4>(ld_u32<AL>(w + 2 + 4 * t), lo, hi);
    } else if (QT == QT_MXFP4) {
        d = e8m0_half_to_f32(w[0]);
        book_lookup<book_kvf>(ld_u32<AL>(w + 1 + 4 * t), lo, hi);
    } else if (QT == QT_Q5_0) {
        d = f16_to_f32((u16)ld_u16<AL>(w));
        const u32 qh = ld_u32<AL>(w + 2), x = ld_u32<AL>(w + 6 + 4 * t);
        lo = sub16((x & 0x0F0F0F0Fu) | spread4_bit4(qh >> (4 * t)));
        hi = sub16(((x >> 4) & 0x0F0F0F0Fu) | spread4_bit4(qh >> (16 + 4 * t)));
    } else if (QT == QT_Q4_1) {
        d = f16_to_f32((u16)ld_u16<AL>(w));
        m = f16_to_f32((u16)ld_u16<AL>(w + 2));
        const u32 x = ld_u32<AL>(w + 4 + 4 * t);
        lo = x & 0x0F0F0F0Fu;
        hi = (x >> 4) & 0x0F0F0F0Fu;
    } else { /* QT_Q5_1 */
        d = f16_to_f32((u16)ld_u16<AL>(w));
        m = f16_to_f32((u16)ld_u16<AL>(w + 2));
        const u32 qh = ld_u32<AL>(w + 4), x = ld_u32<AL>(w + 8 + 4 * t);
        lo = (x & 0x0F0F0F0Fu) | spread4_bit4(qh >> (4 * t));
        hi = ((x >> 4) & 0x0F0F0F0Fu) | spread4_bit4(qh >> (16 + 4 * t));
    }
}

template <int QT, int B>
MEMRA_DEV void block32(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                       float (&T)[(B + 7) / 8][4])
{
    constexpr int NT = (B + 7) / 8;
    constexpr bool MIN = QT == QT_Q4_1 || QT == QT_Q5_1;
    u32 lo0, hi0, lo1, hi1, bf[NT][2];
    float d[2], m[2], da[NT][2];
    frag32<QT>(w0, t, lo0, hi0, d[0], m[0]);
    frag32<QT>(w1, t, lo1, hi1, d[1], m[1]);
    load_q8p<B>(P, kq, g, t, bf, da);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        i32 S[4], Q[4];
        mma_k32(S, lo0, lo1, hi0, hi1, bf[nt][0], bf[nt][1]);
        if (MIN)
            q8_sums(Q, bf[nt][0], bf[nt][1]);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!MMVQ_LIVE(B, nt, e))
                continue;
            const float dA = da[nt][e & 1];
            float r = __fmul_rn(__fmul_rn(d[e >> 1], dA), i2f_22(S[e]));
            if (MIN)
                r = __fadd_rn(r, __fmul_rn(__fmul_rn(m[e >> 1], dA), i2f_22(Q[e])));
            acc_add(T[nt][e], r);
        }
    }
}

/* ------------------------------------ NVFP4 ------------------------------------------- */
/*
 * 64 elements, 4 sub-blocks of 16 with UE4M3 half scales U(d_s); q8_1 block u covers s = 2u,
 * 2u + 1. c_s = U(d_s) × f(S_s); r = d_a(0) × (c_0 + c_1) + d_a(1) × (c_2 + c_3) (quant.c §6).
 * Lane t takes elements 4t..4t+3 of a sub-block: word (t & 1) of its 8 bytes, lo nibbles for
 * t < 2, hi for t >= 2; one m16n8k16 per sub-block against word 4(s & 1) + t of the q8 block.
 */
template <int B>
MEMRA_DEV void block_nvfp4(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                           float (&T)[(B + 7) / 8][4])
{
    constexpr int NT = (B + 7) / 8;
    const u32 sc[2] = {ld_u32<4>(w0), ld_u32<4>(w1)};
    u32 bf[NT][2];
    float da[NT][2], c_prev[NT][4], half0[NT][4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
        if ((s & 1) == 0)
            load_q8p<B>(P, kq + s / 2, g, t, bf, da);
        u32 av[2];
        float u[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            u32 lo, hi;
            book_lookup<book_kvf>(ld_u32<4>((r ? w1 : w0) + 4 + 8 * s + 4 * (t & 1)), lo, hi);
            av[r] = t < 2 ? lo : hi;
            u[r] = ue4m3_half_to_f32((sc[r] >> (8 * s)) & 0xFF);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            i32 S[4];
            mma_k16(S, av[0], av[1], bf[nt][s & 1]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (!MMVQ_LIVE(B, nt, e))
                    continue;
                const float c = __fmul_rn(u[e >> 1], i2f_22(S[e]));
                if ((s & 1) == 0) {
                    c_prev[nt][e] = c;
                    continue;
                }
                const float m = __fmul_rn(da[nt][e & 1], __fadd_rn(c_prev[nt][e], c));
                if (s == 1)
                    half0[nt][e] = m;
                else
                    acc_add(T[nt][e], __fadd_rn(half0[nt][e], m));
            }
        }
    }
}

/* --------------------------------- Q4_K and Q5_K -------------------------------------- */
/*
 * X_k = sc_k · S_k, Y_k = m_k · Q_k (int32); A_k = d_a(k) × f(X_k), B_k = d_a(k) × f(Y_k);
 * r = (d × tree8(A)) − (dmin × tree8(B))  (quant.c §8). Sub-block k = 2p + h lives in the
 * lo (h = 0) or hi (h = 1) nibbles of qs[32p .. 32p + 31]; lane t reads words 8p + t and
 * 8p + 4 + t. Q5_K's 5th bit of element 32k + l is bit k of qh[l]. |X_k| < 2^22 for Q4_K
 * (63·15·127·32), < 2^23 for Q5_K (so the general conversion), |Y_k| < 2^18.
 */
MEMRA_DEV void kq_scale(const u32 (&s)[3], int k, i32 &sc, i32 &m)
{
    if (k < 4) {
        sc = (s[0] >> (8 * k)) & 63;
        m = (s[1] >> (8 * k)) & 63;
    } else {
        const int j = 8 * (k - 4);
        sc = ((s[2] >> j) & 15) | (((s[0] >> (j + 6)) & 3) << 4);
        m = ((s[2] >> (j + 4)) & 15) | (((s[1] >> (j + 6)) & 3) << 4);
    }
}

template <int QT, int B>
MEMRA_DEV void block_kq(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                        float (&T)[(B + 7) / 8][4])
{
    constexpr int NT = (B + 7) / 8;
    constexpr bool Q5 = QT == QT_Q5_K;
    const u8 *w[2] = {w0, w1};
    u32 s[2][3], qh[2][2] = {{0, 0}, {0, 0}}, x[2][2] = {{0, 0}, {0, 0}}, bf[NT][2];
    float da[NT][2], stA[NT][4][3], stB[NT][4][3];
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int i = 0; i < 3; i++)
            s[r][i] = ld_u32<16>(w[r] + 4 + 4 * i);
        if (Q5) {
            qh[r][0] = ld_u32<16>(w[r] + 16 + 4 * t);
            qh[r][1] = ld_u32<16>(w[r] + 32 + 4 * t);
        }
    }
    /* the 8 scales and mins of each row as bytes k & 3 of four words (kq_scale's values,
     * decoded 4 at a time: 2 to 4 instructions a word and one byte extract a value, where
     * kq_scale spends 2 to 5 a value) */
    u32 sp[2][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        sp[r][0] = s[r][0] & 0x3F3F3F3Fu;
        sp[r][1] = s[r][1] & 0x3F3F3F3Fu;
        sp[r][2] = (s[r][2] & 0x0F0F0F0Fu) | ((s[r][0] >> 2) & 0x30303030u);
        sp[r][3] = ((s[r][2] >> 4) & 0x0F0F0F0Fu) | ((s[r][1] >> 2) & 0x30303030u);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        u32 lo[2], hi[2];
        i32 sc[2], mn[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if ((k & 1) == 0) {
                const u8 *qs = w[r] + (Q5 ? 48 : 16) + 32 * (k >> 1) + 4 * t;
                x[r][0] = ld_u32<16>(qs);
                x[r][1] = ld_u32<16>(qs + 16);
            }
            lo[r] = (x[r][0] >> (4 * (k & 1))) & 0x0F0F0F0Fu;
            hi[r] = (x[r][1] >> (4 * (k & 1))) & 0x0F0F0F0Fu;
            if (Q5) {
                lo[r] |= ((qh[r][0] >> k) & 0x01010101u) << 4;
                hi[r] |= ((qh[r][1] >> k) & 0x01010101u) << 4;
            }
            sc[r] = (i32)__byte_perm(sp[r][k < 4 ? 0 : 2], 0u, 0x4440u | (k & 3));
            mn[r] = (i32)__byte_perm(sp[r][k < 4 ? 1 : 3], 0u, 0x4440u | (k & 3));
        }
        load_q8p<B>(P, kq + k, g, t, bf, da);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            i32 S[4], Q[4];
            mma_k32(S, lo[0], lo[1], hi[0], hi[1], bf[nt][0], bf[nt][1]);
            q8_sums(Q, bf[nt][0], bf[nt][1]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (!MMVQ_LIVE(B, nt, e))
                    continue;
                const i32 X = sc[e >> 1] * S[e], Y = mn[e >> 1] * Q[e];
                const float dA = da[nt][e & 1];
                tree8_push(stA[nt][e], k, __fmul_rn(dA, Q5 ? i2f(X) : i2f_22(X)));
                tree8_push(stB[nt][e], k, __fmul_rn(dA, i2f_22(Y)));
            }
        }
    }
    const float d[2] = {f16_to_f32((u16)ld_u16<16>(w0)), f16_to_f32((u16)ld_u16<16>(w1))};
    const float dm[2] = {f16_to_f32((u16)ld_u16<16>(w0 + 2)), f16_to_f32((u16)ld_u16<16>(w1 + 2))};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (MMVQ_LIVE(B, nt, e))
                acc_add(T[nt][e], __fsub_rn(__fmul_rn(d[e >> 1], stA[nt][e][2]),
                                            __fmul_rn(dm[e >> 1], stB[nt][e][2])));
}

/* ------------------------------------- Q6_K ------------------------------------------- */
/* q6_K sub-block c of the tile's rows w[0] (output g) and w[1] (output g + 8), for lane t:
 * the signed (q - 32) codes of its elements 4t.. (clo) and 16 + 4t.. (chi), packed four to a
 * word, and with SC the two int8 scales of the sub-block (s0, s1). ql / qh hold a half's loads
 * across its four quarters (loaded when k == 0). Shared by block_q6k and block_q6k_lk. */
template <bool SC>
MEMRA_DEV void q6k_codes(const u8 *(&w)[2], int c, int t, u32 (&ql)[2][4], u32 (&qh)[2][2],
                         u32 (&clo)[2], u32 (&chi)[2], i32 (&s0)[2], i32 (&s1)[2])
{
    const int n = c >> 2, k = c & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (k == 0) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                ql[r][i] = ld_u32<2>(w[r] + 64 * n + 16 * i + 4 * t);
            qh[r][0] = ld_u32<2>(w[r] + 128 + 32 * n + 4 * t);
            qh[r][1] = ld_u32<2>(w[r] + 128 + 32 * n + 16 + 4 * t);
        }
        const int sh = k >= 2 ? 4 : 0;
        const u32 lo = (ql[r][2 * (k & 1)] >> sh) & 0x0F0F0F0Fu;
        const u32 hi = (ql[r][2 * (k & 1) + 1] >> sh) & 0x0F0F0F0Fu;
        clo[r] = sub32(lo | (((qh[r][0] >> (2 * k)) & 0x03030303u) << 4));
        chi[r] = sub32(hi | (((qh[r][1] >> (2 * k)) & 0x03030303u) << 4));
        if (SC) {
            const u32 sc = ld_u16<2>(w[r] + 192 + 2 * c);
            s0[r] = (i32)(i8)(u8)sc;
            s1[r] = (i32)(i8)(u8)(sc >> 8);
        }
    }
}

/*
 * X_k = sc_2k · S_lo + sc_2k+1 · S_hi (int32, |X_k| <= 2^24), A_k = d_a(k) × f(X_k),
 * r = d × tree8(A) (quant.c §9). Sub-block c (32 elements) is half n = c / 4, k = c % 4:
 * low 4 bits from ql[64n + 32(k & 1) + l] (lo nibble for k < 2, hi for k >= 2), high 2 bits
 * (qh[32n + l] >> 2k) & 3. Lane t's elements l = 4t.. (scale group 2c) and 16 + 4t.. (group
 * 2c + 1) go through separate m16n8k16 mma because their scales differ.
 */
template <int B>
MEMRA_DEV void block_q6k(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                         float (&T)[(B + 7) / 8][4])
{
    constexpr int NT = (B + 7) / 8;
    const u8 *w[2] = {w0, w1};
    u32 ql[2][4] = {}, qh[2][2] = {}, bf[NT][2];
    float da[NT][2], st[NT][4][3];
#pragma unroll
    for (int c = 0; c < 8; c++) {
        u32 clo[2], chi[2];
        i32 s0[2], s1[2];
        q6k_codes<true>(w, c, t, ql, qh, clo, chi, s0, s1);
        load_q8p<B>(P, kq + c, g, t, bf, da);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            i32 Slo[4], Shi[4];
            mma_k16(Slo, clo[0], clo[1], bf[nt][0]);
            mma_k16(Shi, chi[0], chi[1], bf[nt][1]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (!MMVQ_LIVE(B, nt, e))
                    continue;
                const i32 X = s0[e >> 1] * Slo[e] + s1[e >> 1] * Shi[e];
                tree8_push(st[nt][e], c, __fmul_rn(da[nt][e & 1], i2f(X)));
            }
        }
    }
    const float d[2] = {f16_to_f32((u16)ld_u16<2>(w0 + 208)), f16_to_f32((u16)ld_u16<2>(w1 + 208))};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (MMVQ_LIVE(B, nt, e))
                acc_add(T[nt][e], __fmul_rn(d[e >> 1], st[nt][e][2]));
}

/* ------------------------------------ IQ4_XS ------------------------------------------ */
/*
 * X_b = (ls_b − 32) · S_b (int32, |X_b| < 2^24), A_b = d_a(b) × f(X_b), r = d × tree8(A)
 * (quant.c §10). Sub-block b is qs[16b .. 16b + 15] with Q4_0 nibble placement; lane t reads
 * its word t. ls_b = ((scales_l >> 4b) & 15) | (((scales_h >> 2b) & 3) << 4).
 */
template <int B>
MEMRA_DEV void block_iq4xs(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                           float (&T)[(B + 7) / 8][4])
{
    constexpr int NT = (B + 7) / 8;
    const u8 *w[2] = {w0, w1};
    const u32 sh[2] = {ld_u16<8>(w0 + 2), ld_u16<8>(w1 + 2)};
    const u32 sl[2] = {ld_u32<8>(w0 + 4), ld_u32<8>(w1 + 4)};
    u32 bf[NT][2];
    float da[NT][2], st[NT][4][3];
#pragma unroll
    for (int b = 0; b < 8; b++) {
        u32 lo[2], hi[2];
        i32 ls[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            book_lookup<book_kv4>(ld_u32<8>(w[r] + 8 + 16 * b + 4 * t), lo[r], hi[r]);
            ls[r] = (i32)(((sl[r] >> (4 * b)) & 15) | (((sh[r] >> (2 * b)) & 3) << 4)) - 32;
        }
        load_q8p<B>(P, kq + b, g, t, bf, da);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            i32 S[4];
            mma_k32(S, lo[0], lo[1], hi[0], hi[1], bf[nt][0], bf[nt][1]);
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (MMVQ_LIVE(B, nt, e))
                    tree8_push(st[nt][e], b, __fmul_rn(da[nt][e & 1], i2f(ls[e >> 1] * S[e])));
        }
    }
    const float d[2] = {f16_to_f32((u16)ld_u16<8>(w0)), f16_to_f32((u16)ld_u16<8>(w1))};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (MMVQ_LIVE(B, nt, e))
                acc_add(T[nt][e], __fmul_rn(d[e >> 1], st[nt][e][2]));
}

/* ------------------------- lane-owned sub-blocks (B <= 4) ------------------------------ */
/*
 * For B <= 4 most of an m16n8 accumulator is padding, so the K-quant blocks are computed with
 * the mma columns REPEATING the live rows: column n reads q8_1 row n mod BP (BP = 1, 2, 4 for
 * B = 1, 2, 3..4; rows >= B read nothing and give 0). Lane t then holds rows g, g + 8 of
 * columns 2t, 2t + 1, i.e. of q8_1 rows ra_e = (2t + (e & 1)) mod BP -- the same rows in
 * L = 8 / max(BP, 2) lanes. Those L lanes split the block's 8 sub-blocks: lane j (= t for
 * B <= 2, t >> 1 for B <= 4) keeps the mma results of sub-blocks k = j KPL .. j KPL + KPL - 1
 * (KPL = 8 / L) and evaluates only their float epilogue, then tree8 is finished across the
 * lanes with xor shuffles:
 *   KPL = 2: v = c_2j + c_2j+1; v = v + shfl_xor(v, 1); v = v + shfl_xor(v, 2)
 *   KPL = 4: v = (c_4j + c_4j+1) + (c_4j+2 + c_4j+3); v = v + shfl_xor(v, 2)
 * which is ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) in every lane (fp32 addition is
 * commutative), i.e. quant.c's tree8 bit for bit. Every lane then holds r and T for its
 * (row, column) pairs in the accumulator layout tile_store expects (lanes whose columns are
 * >= B hold copies that are never stored). Same per-block arithmetic, a quarter (B <= 2) or
 * half (B <= 4) of the float work, scale decodes and d_a loads of block_kq / block_q6k.
 */
template <int B> struct lk {
    static constexpr int BP = B == 1 ? 1 : B == 2 ? 2 : 4;
    static constexpr int KPL = B <= 2 ? 2 : 4;
};
#define LK_LIVE(B, e) ((B) > 1 || ((e) & 1) == 0)

/* q8_1 row of accumulator column parity c (0, 1) in lane t. */
template <int B> MEMRA_DEV int lk_row(int t, int c) { return (2 * t + c) & (lk<B>::BP - 1); }

/* B fragments of q8_1 block i (k slots 4t.., 16 + 4t.. of column g -> row g mod BP). */
template <int B>
MEMRA_DEV void lk_load_b(const u8 *a, i64 rs, i64 i, int g, int t, u32 &b0, u32 &b1)
{
    const int r = g & (lk<B>::BP - 1);
    b0 = b1 = 0;
    if (r < B) {
        const u8 *p = a + r * rs + i * Q8_1_BYTES + 4 + 4 * t;
        b0 = ldg_u32(p);
        b1 = ldg_u32(p + 16);
    }
}

/* d_a of q8_1 block i for the lane's two column parities. */
template <int B>
MEMRA_DEV void lk_load_da(const u8 *a, i64 rs, i64 i, int t, float (&da)[2])
{
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int r = lk_row<B>(t, c);
        if (B == 1 && c == 1) {
            da[1] = da[0];
            continue;
        }
        da[c] = r < B ? f16_to_f32((u16)ldg_u16(a + r * rs + i * Q8_1_BYTES)) : 0.0f;
    }
}

/* tree8 of the lane's KPL values c[], finished across the lanes that share its columns. */
template <int B> MEMRA_DEV float lk_tree(const float (&c)[lk<B>::KPL])
{
    if (lk<B>::KPL == 2) {
        float v = __fadd_rn(c[0], c[1]);
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    }
    const float v = __fadd_rn(__fadd_rn(c[0], c[1]), __fadd_rn(c[2 % lk<B>::KPL], c[3 % lk<B>::KPL]));
    return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* kq_scale for a run-time sub-block k (no divergence between lanes of different k). */
MEMRA_DEV void kq_scale_rt(const u32 (&s)[3], int k, i32 &sc, i32 &m)
{
    const u32 sh = 8 * (k & 3);
    const u32 x0 = s[0] >> sh, x1 = s[1] >> sh, x2 = s[2] >> sh;
    const i32 sc_hi = (i32)((x2 & 15) | (((x0 >> 6) & 3) << 4));
    const i32 m_hi = (i32)(((x2 >> 4) & 15) | (((x1 >> 6) & 3) << 4));
    sc = k < 4 ? (i32)(x0 & 63) : sc_hi;
    m = k < 4 ? (i32)(x1 & 63) : m_hi;
}

template <int QT, int B>
MEMRA_DEV void block_kq_lk(const u8 *w0, const u8 *w1, const u8 *a, i64 rs, i64 kq, int g, int t,
                           float (&T)[(B + 7) / 8][4])
{
    constexpr bool Q5 = QT == QT_Q5_K;
    constexpr int KPL = lk<B>::KPL;
    const int j = B <= 2 ? t : t >> 1;
    const u8 *w[2] = {w0, w1};
    u32 qh[2][2] = {{0, 0}, {0, 0}}, x[2][2] = {{0, 0}, {0, 0}};
    i32 Sk[KPL][4], Qk[KPL][2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (Q5) {
            qh[r][0] = ld_u32<16>(w[r] + 16 + 4 * t);
            qh[r][1] = ld_u32<16>(w[r] + 32 + 4 * t);
        }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        u32 lo[2], hi[2], b0, b1;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if ((k & 1) == 0) {
                const u8 *qs = w[r] + (Q5 ? 48 : 16) + 32 * (k >> 1) + 4 * t;
                x[r][0] = ld_u32<16>(qs);
                x[r][1] = ld_u32<16>(qs + 16);
            }
            lo[r] = (x[r][0] >> (4 * (k & 1))) & 0x0F0F0F0Fu;
            hi[r] = (x[r][1] >> (4 * (k & 1))) & 0x0F0F0F0Fu;
            if (Q5) {
                lo[r] |= ((qh[r][0] >> k) & 0x01010101u) << 4;
                hi[r] |= ((qh[r][1] >> k) & 0x01010101u) << 4;
            }
        }
        lk_load_b<B>(a, rs, kq + k, g, t, b0, b1);
        i32 S[4], Q[4];
        mma_k32(S, lo[0], lo[1], hi[0], hi[1], b0, b1);
        q8_sums(Q, b0, b1);
        if (j == k / KPL) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                Sk[k % KPL][e] = S[e];
            Qk[k % KPL][0] = Q[0];
            Qk[k % KPL][1] = Q[1];
        }
    }
    u32 sw[2][3];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int i = 0; i < 3; i++)
            sw[r][i] = ld_u32<16>(w[r] + 4 + 4 * i);
    float cA[4][KPL], cB[4][KPL];
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        const int k = j * KPL + i;
        i32 sc[2], mn[2];
        kq_scale_rt(sw[0], k, sc[0], mn[0]);
        kq_scale_rt(sw[1], k, sc[1], mn[1]);
        float da[2];
        lk_load_da<B>(a, rs, kq + k, t, da);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!LK_LIVE(B, e))
                continue;
            const i32 X = sc[e >> 1] * Sk[i][e], Y = mn[e >> 1] * Qk[i][e & 1];
            cA[e][i] = __fmul_rn(da[e & 1], Q5 ? i2f(X) : i2f_22(X));
            cB[e][i] = __fmul_rn(da[e & 1], i2f_22(Y));
        }
    }
    const float d[2] = {f16_to_f32((u16)ld_u16<16>(w0)), f16_to_f32((u16)ld_u16<16>(w1))};
    const float dm[2] = {f16_to_f32((u16)ld_u16<16>(w0 + 2)), f16_to_f32((u16)ld_u16<16>(w1 + 2))};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        if (!LK_LIVE(B, e))
            continue;
        const float tA = lk_tree<B>(cA[e]), tB = lk_tree<B>(cB[e]);
        acc_add(T[0][e], __fsub_rn(__fmul_rn(d[e >> 1], tA), __fmul_rn(dm[e >> 1], tB)));
    }
}

template <int B>
MEMRA_DEV void block_q6k_lk(const u8 *w0, const u8 *w1, const u8 *a, i64 rs, i64 kq, int g,
                            int t, float (&T)[(B + 7) / 8][4])
{
    constexpr int KPL = lk<B>::KPL;
    const int j = B <= 2 ? t : t >> 1;
    const u8 *w[2] = {w0, w1};
    u32 ql[2][4] = {}, qh[2][2] = {};
    i32 Sl[KPL][4], Sh[KPL][4];
#pragma unroll
    for (int c = 0; c < 8; c++) {
        u32 clo[2], chi[2], b0, b1;
        i32 s0_[2], s1_[2]; /* unused: the lane-owned path reads the scales itself */
        q6k_codes<false>(w, c, t, ql, qh, clo, chi, s0_, s1_);
        lk_load_b<B>(a, rs, kq + c, g, t, b0, b1);
        i32 Slo[4], Shi[4];
        mma_k16(Slo, clo[0], clo[1], b0);
        mma_k16(Shi, chi[0], chi[1], b1);
        if (j == c / KPL) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                Sl[c % KPL][e] = Slo[e];
                Sh[c % KPL][e] = Shi[e];
            }
        }
    }
    float cA[4][KPL];
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        const int c = j * KPL + i;
        i32 s0[2], s1[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const u32 sc = ld_u16<2>(w[r] + 192 + 2 * c);
            s0[r] = (i32)(i8)(u8)sc;
            s1[r] = (i32)(i8)(u8)(sc >> 8);
        }
        float da[2];
        lk_load_da<B>(a, rs, kq + c, t, da);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!LK_LIVE(B, e))
                continue;
            const i32 X = s0[e >> 1] * Sl[i][e] + s1[e >> 1] * Sh[i][e];
            cA[e][i] = __fmul_rn(da[e & 1], i2f(X));
        }
    }
    const float d[2] = {f16_to_f32((u16)ld_u16<2>(w0 + 208)), f16_to_f32((u16)ld_u16<2>(w1 + 208))};
#pragma unroll
    for (int e = 0; e < 4; e++)
        if (LK_LIVE(B, e))
            acc_add(T[0][e], __fmul_rn(d[e >> 1], lk_tree<B>(cA[e])));
}

/* --------------------------------- float weights -------------------------------------- */
/*
 * F32 / F16 / BF16, dot block of 32 elements: p = 0; p = p + w_j × f(q_j) for j = 0..31 in
 * order; r = d_a × p (quant.c §4). A sequential chain per (output, row), so no mma: each lane
 * runs the chains of its accumulator elements.
 */
template <int QT> MEMRA_DEV float wfloat(const u8 *w, int j)
{
    if (QT == QT_F32)
        return ((const float *)w)[j];
    if (QT == QT_F16)
        return f16_to_f32(((const u16 *)w)[j]);
    return bf16_to_f32(((const u16 *)w)[j]);
}

template <int QT, int B>
MEMRA_DEV void block_float(const u8 *w0, const u8 *w1, const u8 *a, i64 rs, i64 kq, int g,
                           int t, float (&T)[(B + 7) / 8][4])
{
    (void)g;
#pragma unroll
    for (int nt = 0; nt < (B + 7) / 8; nt++)
#pragma unroll
        for (int ec = 0; ec < 2; ec++) {
            if (!MMVQ_LIVE(B, nt, ec))
                continue;
            const int col = 2 * t + ec + 8 * nt;
            u32 q[8] = {};
            float dA = 0.0f;
            if (col < B) {
                const u8 *p = a + col * rs + kq * Q8_1_BYTES;
                dA = f16_to_f32((u16)ldg_u16(p));
#pragma unroll
                for (int i = 0; i < 8; i++)
                    q[i] = ldg_u32(p + 4 + 4 * i);
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const u8 *w = r ? w1 : w0;
                float p = 0.0f;
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    const float qj = i2f((i32)(i8)(u8)(q[j >> 2] >> (8 * (j & 3))));
                    p = __fadd_rn(p, __fmul_rn(wfloat<QT>(w, j), qj));
                }
                acc_add(T[nt][2 * r + ec], __fmul_rn(dA, p));
            }
        }
}

/* ------------------------------------ dispatch ---------------------------------------- */

template <int QT, int B>
MEMRA_DEV void block_any(const u8 *w0, const u8 *w1, const q8_ptrs<B> &P, i64 kq, int g, int t,
                         float (&T)[(B + 7) / 8][4])
{
    if ((QT == QT_Q4_K || QT == QT_Q5_K) && B <= 4)
        block_kq_lk<QT, B>(w0, w1, P.a, P.rs, kq, g, t, T);
    else if (QT == QT_Q6_K && B <= 4)
        block_q6k_lk<B>(w0, w1, P.a, P.rs, kq, g, t, T);
    else if (QT == QT_Q4_K || QT == QT_Q5_K)
        block_kq<QT, B>(w0, w1, P, kq, g, t, T);
    else if (QT == QT_Q6_K)
        block_q6k<B>(w0, w1, P, kq, g, t, T);
    else if (QT == QT_IQ4_XS)
        block_iq4xs<B>(w0, w1, P, kq, g, t, T);
    else if (QT == QT_NVFP4)
        block_nvfp4<B>(w0, w1, P, kq, g, t, T);
    else if (QT == QT_F32 || QT == QT_F16 || QT == QT_BF16)
        block_float<QT, B>(w0, w1, P.a, P.rs, kq, g, t, T);
    else
        block32<QT, B>(w0, w1, P, kq, g, t, T);
}

/* --------------------------------- weight streaming ----------------------------------- */

/* Copies bytes [off, off + len) of each of the tile's first nrows rows (row r at base +
 * r * row_bytes) into slot r of dst, as aligned 16-byte units so that the data keeps its
 * address mod 16: row r's bytes start at dst + r * SLOT + ((base + r * row_bytes + off) & 15).
 * The unit that crosses end (the end of the weight) is copied byte by byte up to end: a
 * cp.async with a short source size still reads 16 bytes (compute-sanitizer reports it).
 * Only the weight's last row can hold such a unit (any other row's units end at most 15
 * bytes into the next row, and every row has >= 17 bytes), so only that row pays the test;
 * the rest is 32-bit offset arithmetic. */
template <int SLOT>
MEMRA_DEV void stage_rows(u8 *dst, const u8 *base, u64 row_bytes, u64 off, u32 len, int nrows,
                          const u8 *end, int lane)
{
    constexpr int U = SLOT / 16;
    const u8 *src0 = base + off;
    const int last = base + (u64)nrows * row_bytes == end ? nrows - 1 : -1; /* the weight's */
#pragma unroll
    for (int f = lane; f < MMVQ_ROWS * U; f += 32) {
        const int r = f / U, u = f - r * U;
        if (r >= nrows)
            continue;
        const u8 *src = src0 + (u64)r * row_bytes;
        const u32 lead = (u32)(u64)src & 15u;
        if (16u * (u32)u >= len + lead) /* the unit starts at or after src + len */
            continue;
        const u8 *unit = src - lead + 16 * u;
        u8 *d = dst + r * SLOT + 16 * u;
        if (r != last) {
            cp_async16(d, unit, 16);
            continue;
        }
        const u64 avail = (u64)(end - unit);
        if (avail >= 16) {
            cp_async16(d, unit, 16);
        } else {
            for (u32 k = 0; k < 16; k++)
                d[k] = k < avail ? unit[k] : 0;
        }
    }
}

/* Whether a step of QT is whole 16-byte units (then, with 16-byte row strides and only full
 * steps, every unit of every step is aligned and inside its row: stage_rows_aligned). */
template <int QT> struct step_aligned {
    static constexpr bool v = geom<QT>::step * geom<QT>::bytes % 16 == 0;
};

/* stage_rows for aligned steps (step_aligned, row_bytes % 16 == 0, the step full): the same
 * bytes to the same slots (the data's address mod 16 is 0), with none of the per-unit range
 * tests: rows are whole units, so no unit leaves [w, w + n_out * row_bytes). src = base + off. */
template <int SLOT, int STEPB>
MEMRA_DEV void stage_rows_aligned(u8 *dst, const u8 *src, u32 row_bytes, int nrows, int lane)
{
    constexpr int UB = STEPB / 16; /* units of a row's step */
    static_assert(STEPB % 16 == 0 && STEPB <= SLOT, "aligned steps only");
#pragma unroll
    for (int f = lane; f < MMVQ_ROWS * UB; f += 32) {
        const int r = f / UB, u = f - r * UB;
        if (r < nrows)
            cp_async16(dst + r * SLOT + 16 * u, src + (u64)r * row_bytes + 16 * u, 16);
    }
}

/* Row-group staging (q4_K, q6_K): when every row is whole 16-byte units (row_bytes % 16 == 0,
 * w 16-byte aligned), the units of a row's step are the UB = rg_units<QT>::v units from
 * floor16(off) on: q4_K 9 (144-byte steps, off % 16 == 0), q6_K 14 (210-byte steps, off % 16
 * even, so 210 + (off & 15) <= 224), which is exactly the set stage_rows copies for such rows
 * (u < ceil((len + lead) / 16)), all inside the weight (a row's last step ends at the row's
 * 16-aligned end). Lane l copies unit l % UB of rows RPI i + l / UB (RPI = 32 / UB rows per
 * instruction, lanes >= RPI UB idle): its source and destination offsets are fixed for the
 * tile, so a step costs one 64-bit add and one cp.async per row group, instead of the unit
 * divisions, range tests and 64-bit row addresses of stage_rows / stage_rows_aligned. The
 * same bytes land in the same shared-memory places (slot r, unit u), so the bits cannot
 * change. 0 = not used for this qtype. */
template <int QT> struct rg_units {
    static constexpr int v = QT == QT_Q4_K ? 9 : QT == QT_Q6_K ? 14 : 0;
};

template <int QT, int SLOT> struct rg_lane {
    static constexpr int UB = rg_units<QT>::v, RPI = UB ? 32 / UB : 1,
                         NI = (MMVQ_ROWS + RPI - 1) / RPI;
    static_assert(UB == 0 || 16 * UB <= SLOT, "a row group's units must fit its slot");
    const u8 *src; /* this lane's unit in its first row of the tile, at step offset 0 */
    u32 dst;       /* its shared offset inside a stage */
    u32 rstep;     /* RPI * row_bytes */
    int ro;        /* its row inside a group; >= MMVQ_ROWS when idle */
    __device__ __forceinline__ void init(const u8 *base, u64 row_bytes, int lane)
    {
        const int r = lane / UB, u = lane - r * UB;
        ro = lane < RPI * UB ? r : MMVQ_ROWS;
        src = base + (u64)r * row_bytes + 16 * u;
        dst = (u32)(r * SLOT + 16 * u);
        rstep = (u32)(RPI * row_bytes);
    }
    /* units [floor16(off), floor16(off) + 16 UB) of the tile's first nrows rows -> stage at sbase
     */
    __device__ __forceinline__ void copy(u32 sbase, u64 off, int nrows) const
    {
        const u8 *s = src + (off & ~(u64)15);
        const u32 d = sbase + dst;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            if (ro + RPI * i < nrows)
                cp_async16_s(d + (u32)(i * RPI * SLOT), s);
            s += rstep;
        }
    }
};

/* The step loop as before (tile_run below), kept for B <= MEMRA_MMVQ_DIRECT_MAX_B: there the
 * staged path is the cold fallback of the direct kernels, whose SASS this keeps unchanged. */
template <int QT, int B, int SLOT_STRIDE, int STAGES>
MEMRA_DEV void tile_run_b2(const memra_mmvq_params &p, const memra_mmvq_out_params &o, int tile,
                           int part, u8 *wsm, int lane, float (&T)[(B + 7) / 8][4])
{
    typedef geom<QT> G;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = tile * MMVQ_ROWS;
    const int nrows = o.n_out - row0 < MMVQ_ROWS ? o.n_out - row0 : MMVQ_ROWS;
    const u8 *base = (const u8 *)o.w + (u64)row0 * o.row_bytes;
    const u8 *end = (const u8 *)o.w + (u64)o.n_out * o.row_bytes;
    const i64 nblk = p.n_in / G::qk, nsteps = (nblk + G::step - 1) / G::step;
    const i64 mine = part < nsteps ? (nsteps - 1 - part) / p.ksplit + 1 : 0;
    const u8 *a = (const u8 *)p.a;
    const i64 rs = (i64)(p.n_in / 32) * Q8_1_BYTES;
    const q8_ptrs<B> P = make_q8_ptrs<B>(a, rs, lane >> 2, lane & 3);
    constexpr int STAGE = MMVQ_ROWS * SLOT_STRIDE, STEPB = G::step * G::bytes;
    /* uniform over the launch: every step whole 16-byte units */
    const bool aligned = step_aligned<QT>::v && o.row_bytes % 16 == 0 && nblk % G::step == 0;

#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < mine) {
            const i64 s = part + (i64)i * p.ksplit, nb = nblk - s * G::step;
            if (step_aligned<QT>::v && aligned)
                stage_rows_aligned<SLOT_STRIDE, step_aligned<QT>::v ? STEPB : 16>(
                    wsm + i * STAGE, base + (u64)s * STEPB, (u32)o.row_bytes, nrows, lane);
            else
                stage_rows<SLOT_STRIDE>(wsm + i * STAGE, base, o.row_bytes, (u64)s * STEPB,
                                        (u32)((nb < G::step ? nb : G::step) * G::bytes), nrows,
                                        end, lane);
        }
        cp_async_commit();
    }
    pdl_wait_release(); /* the weights above do not depend on the previous kernel; a, y do */
    for (i64 i = 0; i < mine; i++) {
        const i64 ipre = i + STAGES - 1;
        if (ipre < mine) {
            const i64 s = part + ipre * p.ksplit, nb = nblk - s * G::step;
            if (step_aligned<QT>::v && aligned)
                stage_rows_aligned<SLOT_STRIDE, step_aligned<QT>::v ? STEPB : 16>(
                    wsm + (ipre % STAGES) * STAGE, base + (u64)s * STEPB, (u32)o.row_bytes,
                    nrows, lane);
            else
                stage_rows<SLOT_STRIDE>(wsm + (ipre % STAGES) * STAGE, base, o.row_bytes,
                                        (u64)s * STEPB,
                                        (u32)((nb < G::step ? nb : G::step) * G::bytes), nrows,
                                        end, lane);
        }
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncwarp();
        const i64 s = part + i * p.ksplit, nb = nblk - s * G::step;
        const u64 off = (u64)s * G::step * G::bytes;
        const u8 *st = wsm + (i % STAGES) * STAGE;
        const u8 *w0 = st + g * SLOT_STRIDE + (((u64)base + g * o.row_bytes + off) & 15);
        const u8 *w1 =
            st + (g + 8) * SLOT_STRIDE + (((u64)base + (g + 8) * o.row_bytes + off) & 15);
#pragma unroll 1
        for (int j = 0; j < G::step; j++)
            if (j < nb)
                block_any<QT, B>(w0 + j * G::bytes, w1 + j * G::bytes, P,
                                 (s * G::step + j) * (G::qk / 32), g, t, T);
        __syncwarp();
    }
    cp_async_wait<0>();
}

/* One warp's share of one tile: stream its K steps and accumulate T. */
template <int QT, int B, int SLOT_STRIDE, int STAGES>
MEMRA_DEV void tile_run(const memra_mmvq_params &p, const memra_mmvq_out_params &o, int tile,
                        int part, u8 *wsm, int lane, float (&T)[(B + 7) / 8][4])
{
    if constexpr (B <= MEMRA_MMVQ_DIRECT_MAX_B) {
        tile_run_b2<QT, B, SLOT_STRIDE, STAGES>(p, o, tile, part, wsm, lane, T);
        return;
    }
    typedef geom<QT> G;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = tile * MMVQ_ROWS;
    const int nrows = o.n_out - row0 < MMVQ_ROWS ? o.n_out - row0 : MMVQ_ROWS;
    const u8 *base = (const u8 *)o.w + (u64)row0 * o.row_bytes;
    const u8 *end = (const u8 *)o.w + (u64)o.n_out * o.row_bytes;
    const i64 nblk = p.n_in / G::qk, nsteps = (nblk + G::step - 1) / G::step;
    const i64 mine = part < nsteps ? (nsteps - 1 - part) / p.ksplit + 1 : 0;
    const u8 *a = (const u8 *)p.a;
    const i64 rs = (i64)(p.n_in / 32) * Q8_1_BYTES;
    const q8_ptrs<B> P = make_q8_ptrs<B>(a, rs, lane >> 2, lane & 3);
    constexpr int STAGE = MMVQ_ROWS * SLOT_STRIDE, STEPB = G::step * G::bytes;
    constexpr bool RGQ = rg_units<QT>::v > 0;
    /* uniform over the launch: every step whole 16-byte units */
    const bool aligned = step_aligned<QT>::v && o.row_bytes % 16 == 0 && nblk % G::step == 0;
    /* uniform: row-group staging (rg_lane); rows whole units, steps whole blocks */
    const bool rgs = RGQ && o.row_bytes % 16 == 0 && ((u64)o.w & 15) == 0;
    rg_lane<QT, SLOT_STRIDE> RG;
    if constexpr (RGQ) /* init divides by UB: not instantiated for the other qtypes */
        RG.init(base, o.row_bytes, lane);
    const u32 wsm_s = (u32)__cvta_generic_to_shared(wsm);

#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < mine) {
            const i64 s = part + (i64)i * p.ksplit, nb = nblk - s * G::step;
            if (RGQ && rgs)
                RG.copy(wsm_s + i * STAGE, (u64)s * STEPB, nrows);
            else if (step_aligned<QT>::v && aligned)
                stage_rows_aligned<SLOT_STRIDE, step_aligned<QT>::v ? STEPB : 16>(
                    wsm + i * STAGE, base + (u64)s * STEPB, (u32)o.row_bytes, nrows, lane);
            else
                stage_rows<SLOT_STRIDE>(wsm + i * STAGE, base, o.row_bytes, (u64)s * STEPB,
                                        (u32)((nb < G::step ? nb : G::step) * G::bytes), nrows, end,
                                        lane);
        }
        cp_async_commit();
    }
    pdl_wait_release(); /* the weights above do not depend on the previous kernel; a, y do */
    /* 32-bit step counters (a part has < 2^31 steps) and running byte offsets: stage cursors
     * cur = i % STAGES (the step computed), pre = (i + STAGES - 1) % STAGES (the step
     * copied); offp = the copied step's offset s STEPB (the row-group path's only use of s) */
    const int nmine = (int)mine, ks = p.ksplit;
    int cur = 0, pre = STAGES - 1;
    u64 offp = (u64)(part + (STAGES - 1) * ks) * STEPB;
    const u64 dstep = (u64)ks * STEPB;
    for (int i = 0; i < nmine; i++) {
        const int ipre = i + STAGES - 1;
        if (ipre < nmine) {
            if (RGQ && rgs) {
                RG.copy(wsm_s + pre * STAGE, offp, nrows);
            } else {
                const i64 s = part + (i64)ipre * ks, nb = nblk - s * G::step;
                if (step_aligned<QT>::v && aligned)
                    stage_rows_aligned<SLOT_STRIDE, step_aligned<QT>::v ? STEPB : 16>(
                        wsm + pre * STAGE, base + (u64)s * STEPB, (u32)o.row_bytes, nrows, lane);
                else
                    stage_rows<SLOT_STRIDE>(wsm + pre * STAGE, base, o.row_bytes, (u64)s * STEPB,
                                            (u32)((nb < G::step ? nb : G::step) * G::bytes), nrows,
                                            end, lane);
            }
        }
        offp += dstep;
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncwarp();
        const int s = part + i * ks;
        const i64 nb = nblk - (i64)s * G::step;
        const u64 off = (u64)s * STEPB;
        const u8 *st = wsm + cur * STAGE;
        const u8 *w0, *w1;
        if (RGQ && rgs) { /* base, row_bytes 16-aligned: every row's lead is off's */
            const u32 lead = (u32)off & 15u;
            w0 = st + g * SLOT_STRIDE + lead;
            w1 = st + (g + 8) * SLOT_STRIDE + lead;
        } else {
            w0 = st + g * SLOT_STRIDE + (((u64)base + g * o.row_bytes + off) & 15);
            w1 = st + (g + 8) * SLOT_STRIDE + (((u64)base + (g + 8) * o.row_bytes + off) & 15);
        }
        cur = cur == STAGES - 1 ? 0 : cur + 1;
        pre = pre == STAGES - 1 ? 0 : pre + 1;
#pragma unroll 1
        for (int j = 0; j < G::step; j++)
            if (j < nb)
                block_any<QT, B>(w0 + j * G::bytes, w1 + j * G::bytes, P,
                                 ((i64)s * G::step + j) * (G::qk / 32), g, t, T);
        __syncwarp();
    }
    cp_async_wait<0>();
}

/* v = T (× scale); y[col, row] = v or y + v. */
template <int B>
MEMRA_DEV void tile_store(const memra_mmvq_out_params &o, int tile, int lane,
                          const float (&T)[(B + 7) / 8][4])
{
    const int g = lane >> 2, t = lane & 3;
    const float sc = o.scale ? __ldg(o.scale) : 1.0f;
#pragma unroll
    for (int nt = 0; nt < (B + 7) / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int col = 2 * t + (e & 1) + 8 * nt, row = tile * MMVQ_ROWS + g + 8 * (e >> 1);
            if (!MMVQ_LIVE(B, nt, e) || col >= B || row >= o.n_out)
                continue;
            const float v = o.scale ? __fmul_rn(T[nt][e], sc) : T[nt][e];
            float *y = o.y + (i64)col * o.n_out + row;
            *y = o.mode ? __fadd_rn(*y, v) : v;
        }
}

/* Combines the ksplit parts of each tile in part order (fixed, B-independent). */
template <int NT>
MEMRA_DEV void parts_combine(float (&T)[NT][4], u8 *smem, int warp, int part, int ksplit,
                             int lane)
{
    float *scr = (float *)smem; /* [warp][NT * 4][32] */
    __syncthreads();            /* every warp is done with its stage buffers */
    if (part != 0)
#pragma unroll
        for (int i = 0; i < NT * 4; i++)
            scr[(warp * NT * 4 + i) * 32 + lane] = T[i >> 2][i & 3];
    __syncthreads();
    if (part == 0)
        for (int q = 1; q < ksplit; q++)
#pragma unroll
            for (int i = 0; i < NT * 4; i++)
                acc_add(T[i >> 2][i & 3], scr[((warp + q) * NT * 4 + i) * 32 + lane]);
}

/* ------------------------------ the direct path (B <= 2) ------------------------------- */
/*
 * For small B the int8 mma wastes most of its 8 columns, and 16 rows per warp instruction (a
 * tile's rows, each at its own part's block) is a poor DRAM pattern: a load-only probe of
 * that pattern reaches 59-68 % of the copy rate where a flat read of the same bytes reaches
 * 88-107 % (bench/pattern_probe.cu, bench/results/mmvq-notes.md). A direct warp instead owns
 * whole output rows (consecutive rows are consecutive bytes: one contiguous run per warp),
 * copies them flat into a shared-memory ring and computes each block with dp4a against the
 * B q8_1 rows the CUDA block staged once (stage_act). A kernel takes it when B <= 2 and every
 * weight is of a direct type (mmvq_params.h MEMRA_MMVQ_DIRECT; at B > 1 only when the rows
 * fit shared memory, MEMRA_MMVQ_DIRECT_MAX_IN). Same per-block arithmetic,
 * each row's canonical parts folded in the same order (in the warp, by shuffles): the result
 * is bit-identical (direct_main).
 *
 * q4_K: lane 2 b + h takes block b of the stage (16 blocks of one row), half h: codes
 * qs[64 h .. 64 h + 63] (4 x 16 bytes) = sub-blocks 4 h .. 4 h + 3, plus the 16-byte header (d,
 * dmin, scales; both lanes of a block read it). The dot of sub-block 4 h + i is 8 dp4a; the
 * high nibbles are dotted as 16 n (mask 0xF0, unsigned x signed dp4a) and shifted back, exact.
 * The lane evaluates A_k, B_k of its four sub-blocks and the left or right half of tree8;
 * one shuffle adds the halves (commutative, so both lanes hold the same bits).
 */
template <int QT> struct direct_of {
    static constexpr bool v = QT >= 0 && MEMRA_MMVQ_DIRECT(QT);
};

struct u32x4 {
    u32 x, y, z, w;
};

MEMRA_DEV u32x4 lds16(const u8 *p) { return *(const u32x4 *)p; }

/* The same from a 16-byte aligned address as one 128-bit load when A (the direct path's ring
 * slots and act rows are 16-byte aligned; direct_main's A16 says where the registers allow). */
template <bool A> MEMRA_DEV u32x4 lds16x(const u8 *p)
{
    if (A) {
        const uint4 v = *(const uint4 *)p;
        return u32x4{v.x, v.y, v.z, v.w};
    }
    return lds16(p);
}

/* c + sum of the 4 byte products, a unsigned, b signed (PTX dp4a.u32.s32). */
MEMRA_DEV i32 dp4a_us(u32 a, u32 b, i32 c)
{
    i32 d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

MEMRA_DEV i32 dp4a_ss(u32 a, u32 b, i32 c)
{
    i32 d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* Where sub-block q's 32 codes sit in the staged row: each 128-byte half (4 sub-blocks) of a
 * 256-element block takes 144 bytes, so that the 8 lanes of a shared-memory phase (4 blocks
 * x 2 halves, the direct kernel's mapping) read 8 different 4-bank groups. */
MEMRA_DEV int act_code_off(int q) { return 288 * (q >> 3) + 144 * ((q >> 2) & 1) + 32 * (q & 3); }

/* The B q8_1 rows a[c][0 .. n_in / 32) into shared memory, row c at act + c A (A =
 * MEMRA_MMVQ_ACT_BYTES(n_in)): codes at + act_code_off(q), d (fp32) at + C + 4 q, the code
 * sum (int32) at + C + n_in / 8 + 4 q, C = MEMRA_MMVQ_ACT_CODES(n_in). Every thread of the
 * CUDA block takes part; the caller synchronizes. */
template <int B> MEMRA_DEV void stage_act(u8 *act0, const u8 *a, int n_in)
{
    const int nq = n_in / 32;
    for (int cq = threadIdx.x; cq < B * nq; cq += 32 * MMVQ_WARPS) {
        const int c = cq / nq, q = cq - c * nq;
        u8 *act = act0 + c * MEMRA_MMVQ_ACT_BYTES(n_in);
        float *ad = (float *)(act + MEMRA_MMVQ_ACT_CODES(n_in));
        i32 *as = (i32 *)(act + MEMRA_MMVQ_ACT_CODES(n_in) + n_in / 8);
        const u8 *src = a + (i64)cq * Q8_1_BYTES;
        u32 w[9];
#pragma unroll
        for (int k = 0; k < 9; k++)
            w[k] = ldg_u32(src + 4 * k);
        i32 sum = 0;
#pragma unroll
        for (int k = 1; k < 9; k++)
            sum = dp4a_ss(w[k], 0x01010101u, sum);
        ad[q] = f16_to_f32((u16)(w[0] & 0xFFFF));
        as[q] = sum;
        *(u32x4 *)(act + act_code_off(q)) = u32x4{w[1], w[2], w[3], w[4]};
        *(u32x4 *)(act + act_code_off(q) + 16) = u32x4{w[5], w[6], w[7], w[8]};
    }
}

/* One lane's share of one q4_K block: the header and codes qs[64 h .. 64 h + 63]. */
struct q4k_lane {
    u32x4 hd, q[4];
};

/* The lane's share from a stage of the ring (shared memory). */
template <bool A> MEMRA_DEV void q4k_lds(q4k_lane &b, const u8 *blk, int h)
{
    b.hd = lds16x<A>(blk);
#pragma unroll
    for (int i = 0; i < 4; i++)
        b.q[i] = lds16x<A>(blk + 16 + 64 * h + 16 * i);
}

MEMRA_DEV u32 word_of(const u32x4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* r of the block (quant.c dot_kq) against each of the B staged rows (r[c]: row c, at act +
 * c MEMRA_MMVQ_ACT_BYTES(n_in)); kq = q8_1 block of sub-block 4 h. The weight's codes are
 * masked once for all rows. */
template <int B, bool A>
MEMRA_DEV void q4k_direct(const q4k_lane &b, const u8 *act0, int n_in, int kq, int h, float (&r)[B])
{
    const u32 x1 = b.hd.y, x2 = b.hd.z, x3 = b.hd.w;
    /* sc_k, m_k of sub-blocks 4 h .. 4 h + 3, one per byte (quant.c kq_unpack_scales) */
    const u32 sc4 = h ? (x3 & 0x0F0F0F0Fu) | ((x1 >> 2) & 0x30303030u) : x1 & 0x3F3F3F3Fu;
    const u32 m4 = h ? ((x3 >> 4) & 0x0F0F0F0Fu) | ((x2 >> 2) & 0x30303030u) : x2 & 0x3F3F3F3Fu;
    const float d = f16_to_f32((u16)(b.hd.x & 0xFFFF)), dm = f16_to_f32((u16)(b.hd.x >> 16));
#pragma unroll
    for (int c = 0; c < B; c++) {
        const u8 *act = act0 + c * MEMRA_MMVQ_ACT_BYTES(n_in);
        const u32x4 dav = lds16x<A>(act + MEMRA_MMVQ_ACT_CODES(n_in) + 4 * kq);
        const u32x4 sav = lds16x<A>(act + MEMRA_MMVQ_ACT_CODES(n_in) + n_in / 8 + 4 * kq);
        float cA[4], cB[4];
        const u8 *aq0 = act + act_code_off(kq); /* kq % 4 == 0: sub-block kq + i at + 32 i */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u8 *aq = aq0 + 32 * i;
            const u32x4 a0 = lds16x<A>(aq), a1 = lds16x<A>(aq + 16);
            i32 S = 0;
#pragma unroll
            for (int wd = 0; wd < 8; wd++) {
                const u32 code = word_of(b.q[2 * (i >> 1) + (wd >> 2)], wd & 3);
                const u32 av = word_of(wd < 4 ? a0 : a1, wd & 3);
                S = (i & 1) ? dp4a_us(code & 0xF0F0F0F0u, av, S) : dp4a_ss(code & 0x0F0F0F0Fu, av, S);
            }
            if (i & 1)
                S >>= 4; /* an exact multiple of 16 */
            const i32 X = (i32)((sc4 >> (8 * i)) & 0xFF) * S;
            const i32 Y = (i32)((m4 >> (8 * i)) & 0xFF) * (i32)word_of(sav, i);
            const float da = __uint_as_float(word_of(dav, i));
            cA[i] = __fmul_rn(da, i2f_22(X));
            cB[i] = __fmul_rn(da, i2f_22(Y));
        }
        const float lA = __fadd_rn(__fadd_rn(cA[0], cA[1]), __fadd_rn(cA[2], cA[3]));
        const float lB = __fadd_rn(__fadd_rn(cB[0], cB[1]), __fadd_rn(cB[2], cB[3]));
        const float tA = __fadd_rn(lA, __shfl_xor_sync(0xFFFFFFFFu, lA, 1));
        const float tB = __fadd_rn(lB, __shfl_xor_sync(0xFFFFFFFFu, lB, 1));
        r[c] = __fsub_rn(__fmul_rn(d, tA), __fmul_rn(dm, tB));
    }
}

/* Which weight tile t of the launch belongs to (-1: none) and its tile index in it. */
MEMRA_DEV int tile_weight(const memra_mmvq_params &p, int &tile)
{
    for (int i = 0; i < p.n_w; i++) {
        const int n = (p.out[i].n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
        if (tile < n)
            return i;
        tile -= n;
    }
    return -1;
}

/* The CUDA block's prologue on the direct path: wait for the previous kernel, stage the B
 * activation rows, synchronize. Every warp of the block calls it exactly once. */
template <int B> MEMRA_DEV void direct_prologue(const memra_mmvq_params &p, u8 *act)
{
    pdl_wait_release();
    stage_act<B>(act, (const u8 *)p.a, p.n_in);
    __syncthreads();
}

/* v = T (x scale); y[c, row] = v or y[c, row] + v (tile_store's epilogue for one output). */
MEMRA_DEV void store_one(const memra_mmvq_out_params &o, int c, int row, float T)
{
    const float v = o.scale ? __fmul_rn(T, __ldg(o.scale)) : T;
    float *y = o.y + (i64)c * o.n_out + row;
    *y = o.mode ? __fadd_rn(*y, v) : v;
}

/* N 32-bit words of shared memory from a 2-byte aligned address (two aligned words and a
 * funnel shift each; reads 4 bytes past the run's end when p is not 4-byte aligned). */
template <int N> MEMRA_DEV void lds_run(const u8 *p, u32 (&w)[N])
{
    const u32 o = (u32)(u64)p & 3u;
    const u32 s = 8u * o;
    /* pointer arithmetic, not an integer round trip: the compiler keeps knowing the run is
     * shared memory (LDS with a 32-bit address instead of generic 64-bit loads) */
    const u32 *a = (const u32 *)(p - o);
    u32 prev = a[0];
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 nx = a[i + 1];
        w[i] = __funnelshift_r(prev, nx, s);
        prev = nx;
    }
}

/* r of a q6_K block in shared memory at blk (2-byte aligned) for half h (quant.c §9): lane
 * 2 b + h holds sub-blocks k = 4 h + i, i = 0..3: codes c = (low 4 | high 2 << 4) - 32 from
 * ql[64 h + 32 (i & 1) + l] (low nibble for i < 2, high for i >= 2) and (qh[32 h + l] >> 2 i)
 * & 3; X_k = sc_2k . S_lo + sc_2k+1 . S_hi (int32, exact), A_k = d_a(k) x f(X_k); the lane's
 * half of tree8, one shuffle adds the halves; r = d x tree8(A). S over 16 codes is dotted with
 * the unsigned c + 32 and corrected by 32 x the 16 activations' sum (the first half's summed
 * by dp4a, the second half's = the block's staged sum minus it): the same integers. */
template <int B, bool A>
MEMRA_DEV void q6k_direct(const u8 *blk, const u8 *act0, int n_in, int kq, int h, float (&r)[B])
{
    u32 ql[16], qh[8], sc[2], dw[1];
    lds_run<16>(blk + 64 * h, ql);
    lds_run<8>(blk + 128 + 32 * h, qh);
    lds_run<2>(blk + 192 + 8 * h, sc);
    lds_run<1>(blk + 208, dw);
    const float d = f16_to_f32((u16)(dw[0] & 0xFFFF));
#pragma unroll
    for (int c = 0; c < B; c++) {
        const u8 *act = act0 + c * MEMRA_MMVQ_ACT_BYTES(n_in);
        const u32x4 dav = lds16x<A>(act + MEMRA_MMVQ_ACT_CODES(n_in) + 4 * kq);
        const u32x4 sav = lds16x<A>(act + MEMRA_MMVQ_ACT_CODES(n_in) + n_in / 8 + 4 * kq);
        float cA[4];
        const u8 *aq0 = act + act_code_off(kq); /* kq % 4 == 0: sub-block kq + i at + 32 i */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u8 *aq = aq0 + 32 * i;
            const u32x4 a0 = lds16x<A>(aq), a1 = lds16x<A>(aq + 16);
            i32 S[2] = {0, 0};
#pragma unroll
            for (int wd = 0; wd < 8; wd++) {
                const u32 lo = (ql[8 * (i & 1) + wd] >> (i >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
                const u32 hi = ((qh[wd] >> (2 * i)) & 0x03030303u) << 4;
                const u32 av = word_of(wd < 4 ? a0 : a1, wd & 3);
                S[wd >> 2] = dp4a_us(lo | hi, av, S[wd >> 2]); /* codes + 32, unsigned */
            }
            /* the - 32 of every code, once per 16: S = sum (c + 32) a - 32 sum a (exact); the
             * first 16 activations summed here, the second 16 = the block's sum minus them */
            i32 a_lo = 0;
#pragma unroll
            for (int wd = 0; wd < 4; wd++)
                a_lo = dp4a_ss(word_of(a0, wd), 0x01010101u, a_lo);
            const i32 a_hi = (i32)word_of(sav, i) - a_lo;
            S[0] -= 32 * a_lo;
            S[1] -= 32 * a_hi;
            const u32 sw = sc[i >> 1] >> (16 * (i & 1)); /* scales 2 i, 2 i + 1 of the half */
            const i32 X = (i32)(i8)(u8)sw * S[0] + (i32)(i8)(u8)(sw >> 8) * S[1];
            cA[i] = __fmul_rn(__uint_as_float(word_of(dav, i)), i2f(X));
        }
        const float lA = __fadd_rn(__fadd_rn(cA[0], cA[1]), __fadd_rn(cA[2], cA[3]));
        const float tA = __fadd_rn(lA, __shfl_xor_sync(0xFFFFFFFFu, lA, 1));
        r[c] = __fmul_rn(d, tA);
    }
}

/* The ring slot of one 16-block stage (mmvq_params.h MEMRA_MMVQ_FLAT_SLOT). */
MEMRA_DEV constexpr int dslot(int q0, int q1, int q2, int q3)
{
    return MEMRA_MMVQ_FLAT_SLOT(q0 == 14 || q1 == 14 || q2 == 14 || q3 == 14);
}

/* The qtype of weight wi of a launch specialized for QT0..QT3. */
template <int QT0, int QT1, int QT2, int QT3> MEMRA_DEV int direct_qt(int wi)
{
    return wi == 0 ? QT0 : wi == 1 ? QT1 : wi == 2 ? QT2 : QT3;
}

/* Which weight output row `row` of the launch (the weights' rows laid end to end) belongs
 * to (-1: none), and its row index in it. */
MEMRA_DEV int row_weight(const memra_mmvq_params &p, int &row)
{
    for (int i = 0; i < p.n_w; i++) {
        if (row < p.out[i].n_out)
            return i;
        row -= p.out[i].n_out;
    }
    return -1;
}

/*
 * The direct kernel (B <= 2 rows; q4_K and q6_K weights, any mix). Warp i of the launch owns output
 * rows [i R, (i + 1) R) (R = p.rpw) and streams their blocks, row after row, 16 blocks (one
 * "round" of a row) per stage, through a ring of MEMRA_MMVQ_FLAT_STAGES slots in shared
 * memory: lane l copies the stage's 16-byte units l, l + 32, ... (flat cp.async: a warp
 * instruction covers 512 consecutive bytes; consecutive rows of a weight are consecutive
 * bytes, so a warp's loads are one contiguous run. bench/pattern_probe.cu: 16 rows per
 * instruction, as a register-per-output-row mapping loads, reach 59-68 % of the copy rate; a
 * flat read 88-107 %). A q6_K round starts where its row does, 2-byte aligned: the copy
 * starts at the 16-byte unit holding it, and a unit past the weight's end copies only the
 * weight's bytes. The first stages go out before the PDL wait (weights depend on nothing).
 * Lane 2 b + h computes r_j of block j = 16 m + b of round m from half h (q4k_direct,
 * q6k_direct: one row, so one type, per stage). The canonical fold (kernels/mmvq.h) runs in
 * the warp: lanes of block b < P keep part b's T_p, adding r_j for j = b, b + P, ... < 16 of
 * each round in increasing j (shuffles), so T_p = 0 + r_p + r_(p+P) + ... over the row; at
 * the row's end y = ((T_0 + T_1) + T_2) + .... Same per-block arithmetic, same order:
 * bit-identical to the staged path and the CPU. With B > 1 rows each lane dots its half-block
 * against every staged row and keeps B such T; one pass over the weights serves them all.
 */
template <int B, int QT0, int QT1, int QT2, int QT3>
MEMRA_DEV void direct_main(const memra_mmvq_params &p, u8 *smem)
{
    constexpr int NST = MEMRA_MMVQ_FLAT_STAGES, SB = dslot(QT0, QT1, QT2, QT3);
    /* 128-bit shared loads where the registers allow them: B = 1, and B = 2 single-weight
     * launches (128 registers, MEMRA_MMVQ_MIN_BLOCKS); a multi-weight B = 2 kernel (80) would
     * spill their register quads */
    constexpr bool A16 = B == 1 || (B == 2 && QT1 < 0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = lane >> 1, h = lane & 1;
    const int P = p.ksplit, R = p.rpw, nblk = p.n_in / 256;
    const int rounds = (nblk + 15) / 16;
    int n_rows = 0;
    for (int i = 0; i < p.n_w; i++)
        n_rows += p.out[i].n_out;
    /* fused SwiGLU (params.swiglu_q): warps 0..3 own gate rows 32 c + 8 w.., warps 4..7 the
     * same up rows (up row o is launch row N + o) */
    const bool swiglu = p.swiglu_q != nullptr;
    const int r0 = swiglu ? (warp >> 2) * p.out[0].n_out + 32 * blockIdx.x + R * (warp & 3)
                          : (blockIdx.x * MMVQ_WARPS + warp) * R;
    const int nr = r0 >= n_rows ? 0 : n_rows - r0 < R ? n_rows - r0 : R;
    const int nst = nr * rounds; /* stages of this warp: (row, round) in order */
    u8 *act = smem;
    u8 *ring = smem + B * MEMRA_MMVQ_ACT_BYTES(p.n_in) + warp * NST * SB;
    /* fused SwiGLU: [B][64] outputs of the CUDA block (32 gate, then 32 up), after the rings */
    float *pair = (float *)(smem + B * MEMRA_MMVQ_ACT_BYTES(p.n_in) + MMVQ_WARPS * NST * SB);

    /* The warp's stages in order: (row, round) = (r0 + k / rounds, k % rounds). Two cursors walk
     * them without a division per stage: the copy cursor (c_*: the next stage to copy) and the
     * compute cursor (the stage being dotted); each holds its weight, its row in that weight
     * and its round, advanced by one stage at a time (a warp's rows are consecutive). */
    int c_row = r0;
    const int wi0 = nst > 0 ? row_weight(p, c_row) : 0, row0 = c_row;
    int c_k = 0, c_m = 0, c_wi = wi0, c_slot = 0;
    /* copy stage c_k: its round from the 16-byte unit holding its first byte; a unit past the
     * weight's end copies only its bytes; past the warp's stages only an empty group */
    auto stage = [&]() {
        if (c_k < nst) {
            const memra_mmvq_out_params &o = p.out[c_wi];
            const int bb = direct_qt<QT0, QT1, QT2, QT3>(c_wi) == 14 ? 210 : 144;
            const u8 *first = (const u8 *)o.w + (u64)c_row * o.row_bytes + (u64)(16 * bb) * c_m;
            const u8 *src = (const u8 *)((u64)first & ~(u64)15);
            const u8 *end = (const u8 *)o.w + (u64)o.n_out * o.row_bytes;
            const int nb = nblk - 16 * c_m < 16 ? nblk - 16 * c_m : 16;
            const int units = (int)((first - src) + bb * nb + 15) / 16;
            u8 *dst = ring + c_slot * SB;
            if (src + 16 * units <= end) { /* every unit whole: all stages but a weight's last */
                const u32 sdst = (u32)__cvta_generic_to_shared(dst) + 16 * lane;
                const u8 *s16 = src + 16 * lane;
#pragma unroll
                for (int i = 0; i < (SB + 511) / 512; i++)
                    if (lane + 32 * i < units)
                        cp_async16_s(sdst + 512 * i, s16 + 512 * i);
            } else {
#pragma unroll
                for (int i = 0; i < (SB + 511) / 512; i++) {
                    const int u = lane + 32 * i;
                    if (u < units) {
                        const u8 *s16 = src + 16 * u;
                        const long left = (long)(end - s16);
                        cp_async16(dst + 16 * u, s16, left < 16 ? (u32)left : 16u);
                    }
                }
            }
            if (++c_m == rounds) {
                c_m = 0;
                if (++c_row == o.n_out) {
                    c_row = 0;
                    ++c_wi;
                }
            }
        }
        c_slot = c_slot == NST - 1 ? 0 : c_slot + 1;
        ++c_k;
        cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < NST; k++)
        stage();
    direct_prologue<B>(p, act);
    const int pb = b & (P - 1); /* the part whose T this lane keeps (lanes of blocks b < P) */
    float T[B];
#pragma unroll
    for (int c = 0; c < B; c++)
        T[c] = 0.0f;
    int m = 0, wi = wi0, row = row0, rk = 0, slot = 0; /* the compute cursor; rk = k / rounds */
    /* where the row's first byte sits in its 16-byte unit (a q6_K row is 2-byte aligned) */
    u32 mis = nst > 0 ? (u32)((u64)p.out[wi0].w + (u64)row0 * p.out[wi0].row_bytes) & 15u : 0u;
#pragma unroll 1
    for (int k = 0; k < nst; k++) {
        cp_async_wait<NST - 1>();
        __syncwarp();
        const int j = 16 * m + b;
        const int qt = direct_qt<QT0, QT1, QT2, QT3>(wi);
        const int kq = 8 * (j < nblk ? j : 0) + 4 * h;
        const u8 *slotp = ring + slot * SB;
        float rj[B];
        if (qt == 14) { /* warp-uniform: one row per stage */
            q6k_direct<B, A16>(slotp + mis + 210 * b, act, p.n_in, kq, h, rj);
        } else {
            q4k_lane w;
            q4k_lds<A16>(w, slotp + 144 * b, h); /* past the row's end: unused bits */
            q4k_direct<B, A16>(w, act, p.n_in, kq, h, rj);
        }
        __syncwarp();
        stage();
        /* T_pb += r_j for the round's blocks of part pb, in increasing j */
        for (int q = 0; q < 16; q += P) {
            const bool live = 16 * m + pb + q < nblk;
#pragma unroll
            for (int c = 0; c < B; c++) {
                const float v = __shfl_sync(0xFFFFFFFFu, rj[c], 2 * (pb + q));
                if (live)
                    T[c] = __fadd_rn(T[c], v);
            }
        }
        if (m == rounds - 1) { /* the row is done: fold its parts, store */
#pragma unroll
            for (int c = 0; c < B; c++) {
                float y = __shfl_sync(0xFFFFFFFFu, T[c], 0);
                if (P == MEMRA_MMVQ_MAX_PARTS) { /* n_in >= 4096: every part, unpredicated */
#pragma unroll
                    for (int q = 1; q < MEMRA_MMVQ_MAX_PARTS; q++)
                        y = __fadd_rn(y, __shfl_sync(0xFFFFFFFFu, T[c], 2 * q));
                } else {
#pragma unroll
                    for (int q = 1; q < MEMRA_MMVQ_MAX_PARTS; q++) { /* the same order, no loop */
                        const float v = __shfl_sync(0xFFFFFFFFu, T[c], 2 * q);
                        if (q < P)
                            y = __fadd_rn(y, v);
                    }
                }
                if (lane == 0) {
                    if (swiglu)
                        pair[64 * c + 32 * (warp >> 2) + R * (warp & 3) + rk] = y;
                    else
                        store_one(p.out[wi], c, row, y);
                }
                T[c] = 0.0f;
            }
        }
        if (++m == rounds) { /* advance the compute cursor */
            m = 0;
            ++rk;
            mis = (mis + (u32)p.out[wi].row_bytes) & 15u;
            if (++row == p.out[wi].n_out) {
                row = 0;
                ++wi;
                mis = wi < p.n_w ? (u32)(u64)p.out[wi].w & 15u : 0u;
            }
        }
        slot = slot == NST - 1 ? 0 : slot + 1;
    }
    if (swiglu) { /* silu_mul_q8's arithmetic on the block's 32 (g, u) pairs of each row */
        __syncthreads();
        if (warp < B) {
            const float *pr = pair + 64 * warp;
            const float y = __fmul_rn(memra_x_siluf(pr[lane]), pr[32 + lane]);
            const i64 blk = (i64)warp * (p.out[0].n_out / 32) + blockIdx.x;
            q8_1_quantize_warp(y, lane, (u8 *)p.swiglu_q + blk * Q8_1_BYTES);
        }
    }
}

template <int B, int QT0, int QT1, int QT2, int QT3>
MEMRA_DEV void mmvq_staged(const memra_mmvq_params &p)
{
    constexpr int NT = (B + 7) / 8;
    constexpr int SLOT = max4(slot_of<QT0>::v, slot_of<QT1>::v, slot_of<QT2>::v, slot_of<QT3>::v);
    constexpr int STAGES = MEMRA_MMVQ_STAGES(SLOT);
    extern __shared__ __align__(16) u8 smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ks = p.ksplit, part = warp % ks;
    int tile = blockIdx.x * (MMVQ_WARPS / ks) + warp / ks;
    const int wi = tile_weight(p, tile);
    float T[NT][4];
#pragma unroll
    for (int i = 0; i < NT * 4; i++)
        T[i >> 2][i & 3] = 0.0f;
    u8 *wsm = smem + warp * STAGES * MMVQ_ROWS * SLOT;
    /* One code body per distinct qtype: a weight whose qtype an earlier weight of the launch
     * has runs that weight's tile_run with its own out[wi] (the same instantiation, so the
     * same instructions and bits; a merged launch of four q4_K weights holds one q4_K body
     * instead of four, which the instruction cache holds better). The last branch tests
     * qt == QT3 too: implied while the host passes no weight past its qtypes (runtime/nvrtc.c),
     * it keeps a broken invariant from running a body of the wrong type (one compare). */
    constexpr bool N1 = QT1 >= 0 && QT1 != QT0;
    constexpr bool N2 = QT2 >= 0 && QT2 != QT0 && QT2 != QT1;
    constexpr bool N3 = QT3 >= 0 && QT3 != QT0 && QT3 != QT1 && QT3 != QT2;
    const int qt = wi == 0 ? QT0 : wi == 1 ? QT1 : wi == 2 ? QT2 : QT3;
    if (wi >= 0 && qt == QT0)
        tile_run<QT0, B, SLOT, STAGES>(p, p.out[wi], tile, part, wsm, lane, T);
    else if (N1 && wi >= 0 && qt == QT1)
        tile_run<(N1 ? QT1 : QT0), B, SLOT, STAGES>(p, p.out[wi], tile, part, wsm, lane, T);
    else if (N2 && wi >= 0 && qt == QT2)
        tile_run<(N2 ? QT2 : QT0), B, SLOT, STAGES>(p, p.out[wi], tile, part, wsm, lane, T);
    else if (N3 && wi >= 0 && qt == QT3)
        tile_run<(N3 ? QT3 : QT0), B, SLOT, STAGES>(p, p.out[wi], tile, part, wsm, lane, T);
    if (wi < 0)
        pdl_wait_release();
    if (ks > 1)
        parts_combine<NT>(T, smem, warp, part, ks, lane);
    if (part == 0 && wi >= 0)
        tile_store<B>(p.out[wi], tile, lane, T);
}

template <int B, int QT0, int QT1, int QT2, int QT3>
MEMRA_DEV void mmvq_main(const memra_mmvq_params &p)
{
    /* every weight of a direct type, B <= 2 (mmvq_params.h): B = 1 has the direct path only;
     * B = 2 takes it when the host set rows per warp (the staged rows fit shared memory) */
    constexpr bool DIRECT = B <= MEMRA_MMVQ_DIRECT_MAX_B && direct_of<QT0>::v &&
                            (QT1 < 0 || direct_of<QT1>::v) && (QT2 < 0 || direct_of<QT2>::v) &&
                            (QT3 < 0 || direct_of<QT3>::v);
    if constexpr (DIRECT && B == 1) {
        extern __shared__ __align__(16) u8 smem[];
        direct_main<B, QT0, QT1, QT2, QT3>(p, smem);
    } else if constexpr (DIRECT) {
        extern __shared__ __align__(16) u8 smem[];
        if (p.rpw > 0)
            direct_main<B, QT0, QT1, QT2, QT3>(p, smem);
        else
            mmvq_staged<B, QT0, QT1, QT2, QT3>(p);
    } else {
        mmvq_staged<B, QT0, QT1, QT2, QT3>(p);
    }
}

#endif
