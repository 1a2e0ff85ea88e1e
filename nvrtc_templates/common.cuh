/*
 * common.cuh — device helpers shared by the NVRTC templates: fixed-width types, exact scalar
 * decoders (fp16, bf16, UE4M3, E8M0) that match runtime/quant.c bit for bit, byte-aligned
 * loads, codebook lookups, int8 tensor-core mma wrappers and cp.async.
 *
 * Compiled by NVRTC without any system or CUDA header (only the builtins NVRTC always
 * provides), and usable from nvcc-compiled kernels too.
 * Must not: use fast-math intrinsics or anything whose rounding differs from IEEE RN; every
 * float operation the exactness contract covers is written with __fmul_rn / __fadd_rn, and
 * the templates are compiled with -fmad=false -ftz=false -prec-div=true.
 * Invariants: every decoder returns exactly what its runtime/quant.c counterpart returns
 * for every input bit pattern (NaN payloads aside).
 */
#ifndef MEMRA_NVRTC_COMMON_CUH
#define MEMRA_NVRTC_COMMON_CUH

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define MEMRA_DEV static __device__ __forceinline__

/* qtype ids: runtime/qtype.h (ggml numbering). */
enum {
    QT_NONE = -1,
    QT_F32 = 0,
    QT_F16 = 1,
    QT_Q4_0 = 2,
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,
    QT_Q4_K = 12,
    QT_Q5_K = 13,
    QT_Q6_K = 14,
    QT_IQ4_NL = 20,
    QT_IQ4_XS = 23,
    QT_BF16 = 30,
    QT_MXFP4 = 39,
    QT_NVFP4 = 40,
};

/* q8_1 activation block (runtime/quant.h memra_block_q8_1): d fp16, s fp16, qs[32] int8. */
#define Q8_1_BYTES 36

/* ---------------------------------- scalar decoders ----------------------------------- */

/* fp16 -> fp32, exact (subnormal fp16 become normal fp32; no flush is involved). */
MEMRA_DEV float f16_to_f32(u16 h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* fp32 -> fp16, round to nearest even, no flush (quant.c memra_f32_to_fp16 for non-NaN). */
MEMRA_DEV u16 f32_to_f16_rn(float f)
{
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

MEMRA_DEV float bf16_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }

/* NVFP4 half scale U(x) (quant.c memra_ue4m3_half_to_f32): bit 7 ignored; 0 and 0x7F are 0;
 * E = 0: M * 2^-10; else (1 + M/8) * 2^(E-8), built as a bit pattern (exact). */
MEMRA_DEV float ue4m3_half_to_f32(u32 x)
{
    x &= 0x7F;
    const u32 e = x >> 3, m = x & 7;
    if (x == 0 || x == 0x7F)
        return 0.0f;
    if (e == 0)
        return __fmul_rn((float)m, 0.0009765625f); /* m * 2^-10, exact */
    return __uint_as_float(((e + 119) << 23) | (m << 20));
}

/* MXFP4 half scale H(e) = 2^(e-128) (quant.c memra_e8m0_half_to_f32), subnormal for e < 2. */
MEMRA_DEV float e8m0_half_to_f32(u32 e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* int32 -> fp32. f() of runtime/quant.c: exact for |i| <= 2^24 (cvt.rn.f32.s32). */
MEMRA_DEV float i2f(i32 i) { return __int2float_rn(i); }

/* The same value for |i| < 2^22 without the conversion pipe (a quarter-rate unit on sm_90):
 * 1.5*2^23 + i is an fp32 whose low mantissa bits are i; subtracting 1.5*2^23 is exact.
 * Gives +0.0f for i = 0, as (float)0 does. */
MEMRA_DEV float i2f_22(i32 i)
{
    return __fsub_rn(__int_as_float(0x4B400000 + i), 12582912.0f);
}

/* ------------------------------------ loads ------------------------------------------- */

/* A 32-bit little-endian word at p whose alignment is only known to be ALIGN bytes. */
template <int ALIGN> MEMRA_DEV u32 ld_u32(const u8 *p)
{
    if (ALIGN >= 4)
        return *(const u32 *)p;
    if (ALIGN == 2)
        return (u32)((const u16 *)p)[0] | ((u32)((const u16 *)p)[1] << 16);
    const u64 a = (u64)p;
    const u32 *w = (const u32 *)(a & ~(u64)3);
    return __funnelshift_r(w[0], w[1], (u32)(a & 3) * 8);
}

template <int ALIGN> MEMRA_DEV u32 ld_u16(const u8 *p)
{
    if (ALIGN >= 2)
        return *(const u16 *)p;
    return (u32)p[0] | ((u32)p[1] << 8);
}

/* Read-only global loads through the non-coherent path (activations: L1-cached). */
MEMRA_DEV u32 ldg_u32(const void *p) { return __ldg((const unsigned int *)p); }
MEMRA_DEV u32 ldg_u16(const void *p) { return __ldg((const unsigned short *)p); }

/* ------------------------------- codebook lookups ------------------------------------- */

/* Packs four int8 values into a little-endian word (compile-time tables). */
#define PACK4(a, b, c, d)                                                                          \
    ((u32)(u8)(i8)(a) | ((u32)(u8)(i8)(b) << 8) | ((u32)(u8)(i8)(c) << 16) |                    \
     ((u32)(u8)(i8)(d) << 24))

/* IQ4 codebook KV4 (spec §3.8) and the doubled E2M1 values KVF (spec §3.9). */
struct book_kv4 {
    static constexpr u32 t0 = PACK4(-127, -104, -83, -65), t1 = PACK4(-49, -35, -22, -10);
    static constexpr u32 t2 = PACK4(1, 13, 25, 38), t3 = PACK4(53, 69, 89, 113);
};
struct book_kvf {
    static constexpr u32 t0 = PACK4(0, 1, 2, 3), t1 = PACK4(4, 6, 8, 12);
    static constexpr u32 t2 = PACK4(0, -1, -2, -3), t3 = PACK4(-4, -6, -8, -12);
};

/* Looks up the 8 nibbles of w (byte i = lo nibble n_2i, hi nibble n_2i+1) in a 16-entry int8
 * book. lo receives book[lo nibble of byte i] in byte i, hi book[hi nibble of byte i].
 * __byte_perm uses the low 3 bits of each selector nibble; bit 3 picks the upper half. */
template <class BOOK> MEMRA_DEV void book_lookup(u32 w, u32 &lo, u32 &hi)
{
    const u32 pick = 0x32103210u | ((w & 0x88888888u) >> 1);
    const u32 a0 = __byte_perm(BOOK::t0, BOOK::t1, w), b0 = __byte_perm(BOOK::t2, BOOK::t3, w);
    const u32 a1 = __byte_perm(BOOK::t0, BOOK::t1, w >> 16);
    const u32 b1 = __byte_perm(BOOK::t2, BOOK::t3, w >> 16);
    const u32 m0 = __byte_perm(a0, b0, pick), m1 = __byte_perm(a1, b1, pick >> 16);
    lo = __byte_perm(m0, m1, 0x6420);
    hi = __byte_perm(m0, m1, 0x7531);
}

/* Bytes x_i in [0, 2^bits) minus 2^(bits-1), as int8, with no borrow between bytes:
 * x + (0x80 - half) stays below 0x100, and flipping bit 7 subtracts 0x80 modulo 256. */
MEMRA_DEV u32 sub8(u32 x) { return (x + 0x78787878u) ^ 0x80808080u; }
MEMRA_DEV u32 sub16(u32 x) { return (x + 0x70707070u) ^ 0x80808080u; }
MEMRA_DEV u32 sub32(u32 x) { return (x + 0x60606060u) ^ 0x80808080u; }

/* Spreads bits 0..3 of x to bit 4 of bytes 0..3 (the 5th bit of four Q5 codes). */
MEMRA_DEV u32 spread4_bit4(u32 x) { return (((x & 15u) * 0x00204081u) & 0x01010101u) << 4; }

/* ------------------------------- int8 tensor-core mma --------------------------------- */
/*
 * m16n8k32 s8 x s8 -> s32 (PTX ISA "mma.m16n8k32"): lane = 4g + t (g = lane/4, t = lane%4).
 *   A (16 x 32, row): a0 = row g, k 4t..4t+3; a1 = row g+8, same k; a2 = row g, k 16+4t..;
 *                     a3 = row g+8, k 16+4t..
 *   B (32 x 8, col):  b0 = k 4t..4t+3 of column g; b1 = k 16+4t.. of column g
 *   C (16 x 8):       c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1)
 * m16n8k16 s8: a0 = row g, k 4t..4t+3; a1 = row g+8; b0 = k 4t.. of column g; C as above.
 * Integer products and sums are exact, so the k order inside an mma is irrelevant: the
 * templates only need each lane's A and B words to cover the same k positions.
 */
MEMRA_DEV void mma_k32(i32 (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

MEMRA_DEV void mma_k16(i32 (&c)[4], u32 a0, u32 a1, u32 b0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5}, {%6}, {%7,%7,%7,%7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* ------------------------------------- cp.async --------------------------------------- */

/* Copies 16 bytes global -> shared asynchronously (L2 only: weights are streamed once). */
MEMRA_DEV void cp_async16(void *smem, const void *gmem, u32 bytes)
{
    const u32 s = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes)
                 : "memory");
}

/* The same for a whole 16-byte unit, to a shared address already converted (a loop over a
 * stage's units converts its base once). */
MEMRA_DEV void cp_async16_s(u32 sdst, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sdst), "l"(gmem) : "memory");
}

MEMRA_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> MEMRA_DEV void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Programmatic dependent launch (no-ops when the launch did not enable it): wait for the
 * previous kernel's results; let the next kernel start its independent prologue. */
MEMRA_DEV void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
MEMRA_DEV void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }

/* The engine's PDL policy: every kernel releases its dependent AS SOON AS its own wait
 * returns. Correctness never depends on where the release sits: the dependent's
 * griddepcontrol.wait still waits for this whole grid to finish and flush its memory. What
 * the early release buys: the dependent is scheduled once every CTA of this grid has passed
 * its wait (so it never takes a slot an unscheduled CTA of this grid needs), and an mmvq
 * dependent streams its first weight stages (which depend on nothing) while a small kernel
 * (a norm, a gate, an attention or GDN step that leaves most SMs idle at small B) runs. */
MEMRA_DEV void pdl_wait_release()
{
    pdl_wait();
    pdl_launch_dependents();
}

/* The other order, for a small-grid kernel whose dependent is a big mmvq (rms_norm_q8 at
 * the tiers of memra_cuda_opts.norm_release_tiers: b x ceil(n / 1024) CTAs): the dependent is
 * scheduled while this kernel still waits, onto the SMs the predecessor frees, and streams its
 * first weight stages through both waits. Correct for the reason above; deadlock-free because a
 * dependent is scheduled only once every CUDA block of this grid has started. */
MEMRA_DEV void pdl_release_wait()
{
    pdl_launch_dependents();
    pdl_wait();
}

#endif
