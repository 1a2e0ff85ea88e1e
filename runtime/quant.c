/*
 * quant.c — CPU reference of the GGUF block formats: scalar conversions, dequantization,
 * reference quantizers, the engine q8_1 activation quantizer and the weight-block × q8_1
 * dot products (see quant.h for THE EXACTNESS ARITHMETIC).
 *
 * Owns: the bit layout of every supported block type, the per-type dot formula the GPU mmvq
 * templates reproduce bit-for-bit, and the reference quantizers used by the model forge.
 * Must not: allocate, log, read files, or depend on the host's FP environment beyond IEEE
 * round-to-nearest (no FTZ is assumed; -ffp-contract=off is set globally, so every a*b+c
 * below is two roundings, as written).
 * Invariants:
 *   - Dequantization performs exactly the fp32 operations of spec/gguf-and-quants.md §3 in
 *     the stated order, so it is bit-identical to ggml / gguf-py (tests/test_quant.c checks
 *     it against gguf-py golden data with memcmp).
 *   - Every dot product is "integer part, then float epilogue": all sums of code × q8
 *     products are int32 (exact, so any thread split or order on the GPU gives the same
 *     integer), and the float epilogue is a fixed, short sequence of RN fp32 operations
 *     written once per type in the comment block that opens the type's section.
 *   - Quantizers are deterministic pure functions of their input.
 *
 * Sections, in dependency order: 1 bytes and scalar formats, 2 integer kernels and the tree
 * sum, 3 q8_1, 4 float types, 5 32-element types, 6 FP4 types, 7 K-quant helpers, 8 Q4_K /
 * Q5_K, 9 Q6_K, 10 IQ4_XS, 11 Q8_K, 12 the type table and the public row API.
 */
#include "quant.h"

#include <math.h>
#include <string.h>

/* ================================ 1. bytes and scalar formats ============================= */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Blocks are only byte-aligned (spec §3 preamble): read little-endian fields byte by byte. */
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* fp16 -> fp32 is exact; NaN payloads are kept (shifted into the fp32 mantissa). The
 * magnitude bits shifted into place read as 2^-112 times the value (an fp16 subnormal
 * becomes an fp32 subnormal), and the multiply by 2^112 is exact; Inf/NaN get the fp32
 * all-ones exponent instead. Straight-line code, so loops over it vectorize. */
static inline float fp16_to_f32(uint16_t h)
{
    const uint32_t mag = (uint32_t)(h & 0x7FFFu) << 13;
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t fin = f32_bits(bits_f32(mag) * 0x1p112f);
    const uint32_t special = 0u - (uint32_t)((h & 0x7C00u) == 0x7C00u); /* all ones: Inf/NaN */
    return bits_f32(sign | (fin & ~special) | ((mag | 0x7F800000u) & special));
}

float memra_fp16_to_f32(uint16_t h) { return fp16_to_f32(h); }

static inline float rdf16(const uint8_t *p) { return fp16_to_f32(rd16(p)); }

/* fp32 -> fp16, round to nearest even, overflow to ±Inf, no flush of subnormals; NaN ->
 * sign | 0x7E00 (the canonical quiet NaN ggml writes, spec §0). Integer arithmetic only. */
uint16_t memra_f32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7E00u;
    if (a >= 0x477FF000u) /* >= 65520 = 65504 + half an ulp: rounds (ties-to-even) to Inf */
        return sign | 0x7C00u;
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero, unit 2^-24 */
        uint32_t e = a >> 23;
        if (e < 102) /* < 2^-25: rounds to zero */
            return sign;
        uint32_t mant = (a & 0x7FFFFFu) | 0x800000u; /* value = mant · 2^(e-150) */
        uint32_t shift = 126 - e;                     /* value · 2^24 = mant >> shift */
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++; /* r = 0x400 becomes the smallest normal: the encoding is continuous */
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    uint32_t h = r >> 13, rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float memra_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* fp32 -> bf16, round to nearest even, no flush of subnormals; NaN keeps its top bits with
 * the quiet bit forced (ggml_compute_fp32_to_bf16 of the reference tree). */
uint16_t memra_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* MXFP4 half scale H(e) = 2^(e-128), built as a bit pattern (spec §3.9): e >= 2 is a normal
 * fp32, e = 1 and e = 0 are the subnormals 2^-127 and 2^-128. e = 255 gives 2^127. */
float memra_e8m0_half_to_f32(uint8_t e)
{
    return bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* NVFP4 half scale U(x) (spec §3.10). [engine] bit 7 is treated as 0: U(x) = U(x & 0x7F),
 * with U(0) = U(0x7F) = 0; E = x >> 3, M = x & 7; E = 0: M · 2^-10, else (8 + M) · 2^(E-11);
 * exact in fp32. Converters and memra's quantizer never set bit 7. The only byte where this
 * differs from ggml's CPU decoder and gguf-py is 0xFF (they compare with 0x7F before
 * ignoring bit 7 and get 240; memra gives 0, as ggml's CUDA path does, which reads bit 7 as
 * a sign and forces 0x7F/0xFF to 0). tests/test_quant.c records that disagreement. */
float memra_ue4m3_half_to_f32(uint8_t x)
{
    x &= 0x7F;
    if (x == 0 || x == 0x7F)
        return 0.0f;
    const uint32_t e = (uint32_t)x >> 3, m = x & 7u;
    if (e == 0)
        return (float)m * 0x1p-10f;
    return bits_f32(((e + 119) << 23) | (m << 20)); /* (1 + m/8) · 2^(e-8) */
}

/* Nearest UE4M3 code (full scale, not halved) to v >= 0, ties to even code, saturating at
 * 0x7E = 448; never sets bit 7. Used by the NVFP4 quantizer only. */
static uint8_t f32_to_ue4m3(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= 448.0f)
        return 0x7E;
    uint32_t u = f32_bits(v);
    int e = (int)(u >> 23) - 127;
    if (e < -6) /* subnormal range: code = RN(v · 2^9), 8 is the smallest normal (0x08) */
        return (uint8_t)rintf(v * 512.0f);
    uint32_t q = (u & 0x7FFFFFu) >> 20, rem = u & 0xFFFFFu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1)))
        q++; /* a carry into the exponent is the correct next code */
    uint32_t code = ((uint32_t)(e + 7) << 3) + q;
    return (uint8_t)(code > 0x7E ? 0x7E : code);
}

/* Round to nearest, ties to even, for |x| < 2^22 (adding 1.5·2^23 puts the integer in the
 * low mantissa bits); the reference quantizers' nearest_int. */
static inline int nearest_int(float x)
{
    uint32_t u = f32_bits(x + 12582912.0f);
    return (int)(u & 0x7FFFFFu) - 0x400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Codebooks (spec §3.8, §3.9). KVF holds the doubled E2M1 values; the scales are halved. */
static const int8_t k_kv4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t k_kvf[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ============================ 2. integer kernels and the tree sum ========================= */

/* Σ w_j · q_j over n int8 pairs; exact in int32 for n <= 256 (|w|, |q| <= 128). Plain loops
 * with a fixed trip count, written so the compiler vectorizes them. */
static inline int32_t idot(const int8_t *w, const int8_t *q, int n)
{
    int32_t s = 0;
    for (int j = 0; j < n; j++)
        s += (int32_t)w[j] * (int32_t)q[j];
    return s;
}

static inline int32_t isum(const int8_t *q, int n)
{
    int32_t s = 0;
    for (int j = 0; j < n; j++)
        s += q[j];
    return s;
}

/* The fixed fp32 tree over the 8 sub-block terms of a 256-element block:
 * ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)). Because a + b == b + a exactly, a
 * butterfly over 8 lanes (v += shfl_xor(v, 1); then 2; then 4) gives these bits on every
 * lane, as does one thread evaluating it left to right. */
static inline float tree8(const float c[8])
{
    return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
}

static inline float da_of(const memra_block_q8_1 *a) { return fp16_to_f32(a->d); }

/* Unpack the 32 nibbles of a Q4_0-style qs[16] (element j: lo(qs[j]) for j < 16, else
 * hi(qs[j-16])) through a 16-entry codebook. */
static inline void unpack_nib32(const uint8_t *qs, const int8_t *book, int8_t *w)
{
    for (int j = 0; j < 16; j++) {
        w[j] = book[qs[j] & 15];
        w[j + 16] = book[qs[j] >> 4];
    }
}

/* The same placement without a codebook: code = nibble - bias (vectorizes). */
static inline void unpack_nib32_sub(const uint8_t *qs, int bias, int8_t *w)
{
    for (int j = 0; j < 16; j++) {
        w[j] = (int8_t)((qs[j] & 15) - bias);
        w[j + 16] = (int8_t)((qs[j] >> 4) - bias);
    }
}

/* ===================================== 3. q8_1 ============================================ *
 * Engine quantizer (spec §4.2 [engine]), per 32-block of x:
 *   amax = fmaxf-reduction of |x_j| (NaN ignored unless all 32 are NaN; order-free)
 *   d    = amax / 127                      (IEEE fp32 division, RN)
 *   q_j  = 0 if d == 0 (amax = 0, or amax/127 underflowed), else
 *          v = roundf(x_j / d) (IEEE division by the fp32 d, half away from zero),
 *          q_j = 0 if v is NaN, else clamp(v, -127, 127)
 *          (the clamp acts only when d is subnormal and so inexact; an Inf input makes
 *          d = Inf, so every q_j of that block is 0 and s = ±Inf or NaN)
 *   stored d = fp16_RN(d); stored s = fp16_RN(butterfly sum of x: v_i += v_(i xor o) for
 *          o = 16, 8, 4, 2, 1 in fp32, lane 0's value).
 * No FTZ anywhere. A row whose length is not a multiple of 32 is zero-padded to the next
 * block (as the reference pads rows); n = 32k needs exactly k blocks.
 */
static void q8_1_block(const float *x, int n, memra_block_q8_1 *y)
{
    float v[32];
    for (int j = 0; j < 32; j++)
        v[j] = j < n ? x[j] : 0.0f;
    float amax = fabsf(v[0]);
    for (int j = 1; j < 32; j++)
        amax = fmaxf(amax, fabsf(v[j]));
    const float d = amax / 127.0f;
    for (int j = 0; j < 32; j++) {
        float r = d == 0.0f ? 0.0f : roundf(v[j] / d);
        r = r != r ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f);
        y->qs[j] = (int8_t)r;
    }
    for (int o = 16; o >= 1; o >>= 1) /* lane i < o holds v_i + v_(i+o) = v_(i+o) + v_i */
        for (int i = 0; i < o; i++)
            v[i] = v[i] + v[i + o];
    y->d = memra_f32_to_fp16(d);
    y->s = memra_f32_to_fp16(v[0]);
}

void memra_quantize_q8_1(const float *x, memra_block_q8_1 *y, int64_t n)
{
    if (!x || !y || n <= 0)
        return;
    for (int64_t i = 0; i < n; i += 32)
        q8_1_block(x + i, n - i < 32 ? (int)(n - i) : 32, y + i / 32);
}

/* ==================================== 4. float types ====================================== *
 * F32 (4 B), F16 (2 B), BF16 (2 B) per element; dequantization is the exact widening.
 * Dot block = 32 elements against one q8_1 block (memra_quant_dot_block_elems = 32):
 *   p = 0; p = p + w_j × f(q_j) for j = 0..31 in order;  r = d_a × p    (fp32, RN, no FMA)
 * For F16/BF16 every product is exact (11 or 8 significant bits times 8), so only the sums
 * round. p starts at +0 (so an all-(-0) block gives +0). One GPU thread runs the 32-term
 * chain of a block (64 B of F16); nvrtc_templates/mmvq.cuh block_float does exactly this.
 * These types are rare as mat-vec weights (small F32 tensors), so the latency-bound chain
 * costs little.
 */
static void deq_f32(const uint8_t *src, float *y, int64_t nb)
{
    memcpy(y, src, (size_t)nb * sizeof(float));
}

static void deq_f16(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        y[i] = rdf16(src + 2 * i);
}

static void deq_bf16(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        y[i] = memra_bf16_to_f32(rd16(src + 2 * i));
}

static void quant_f32(const float *x, uint8_t *dst, int64_t nb)
{
    memcpy(dst, x, (size_t)nb * sizeof(float));
}

static void quant_f16(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        wr16(dst + 2 * i, memra_f32_to_fp16(x[i]));
}

static void quant_bf16(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        wr16(dst + 2 * i, memra_f32_to_bf16(x[i]));
}

static inline float dot_float_tail(const float *w, const memra_block_q8_1 *a)
{
    float p = 0.0f;
    for (int j = 0; j < 32; j++)
        p = p + w[j] * (float)a->qs[j];
    return da_of(a) * p;
}

static float dot_f32(const uint8_t *wb, const memra_block_q8_1 *a)
{
    float w[32];
    memcpy(w, wb, sizeof w);
    return dot_float_tail(w, a);
}

static float dot_f16(const uint8_t *wb, const memra_block_q8_1 *a)
{
    float w[32];
    deq_f16(wb, w, 32);
    return dot_float_tail(w, a);
}

static float dot_bf16(const uint8_t *wb, const memra_block_q8_1 *a)
{
    float w[32];
    deq_bf16(wb, w, 32);
    return dot_float_tail(w, a);
}

/* ================================ 5. 32-element types ===================================== *
 * One weight block = one q8_1 block. d_w, m_w are the block's fp16 fields as fp32; d_a the
 * q8_1 scale; c_j the signed integer code of element j; q_j the q8_1 codes.
 *   Q8_0   (34 B: d, qs[32] int8)          c_j = qs[j]
 *   Q4_0   (18 B: d, qs[16])               c_j = n_j − 8
 *   Q5_0   (22 B: d, qh u32, qs[16])       c_j = n_j − 16 (n_j = nibble | 16·bit_j(qh))
 *   IQ4_NL (18 B: d, qs[16])               c_j = KV4[n_j]
 *     S = Σ c_j·q_j (int32);  r = (d_w × d_a) × f(S).
 *     d_w × d_a is exact (two fp16 significands, product within the fp32 normal range), so
 *     r = RN(d_w·d_a·S): the correctly rounded block dot. q8_1's s is not used.
 *   Q4_1   (20 B: d, m, qs[16])            n_j = nibble
 *   Q5_1   (24 B: d, m, qh u32, qs[16])    n_j = nibble | 16·bit_j(qh)
 *     S = Σ n_j·q_j, Q = Σ q_j (int32);  r = (d_w × d_a) × f(S) + (m_w × d_a) × f(Q).
 *     (The min term uses the integer Σq, as Q4_K does, so every type dots the weights with
 *     the same dequantized activations d_a·q_j.)
 * Dequantization (spec §3.1, 3.2, 3.8, 3.11): Q8_0/Q4_0/Q5_0: f(c_j) × d;
 * IQ4_NL: d × f(KV4[n]); Q4_1/Q5_1: (d × f(n)) + m.
 */
#define QK 32

static void deq_q8_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, src += 34, y += QK) {
        const float d = rdf16(src);
        for (int j = 0; j < QK; j++)
            y[j] = (float)(int8_t)src[2 + j] * d;
    }
}

static void deq_q4_0(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[QK];
    for (int64_t i = 0; i < nb; i++, src += 18, y += QK) {
        const float d = rdf16(src);
        unpack_nib32_sub(src + 2, 8, c);
        for (int j = 0; j < QK; j++)
            y[j] = (float)c[j] * d;
    }
}

static void unpack_q5(const uint8_t *qh4, const uint8_t *qs, int8_t *n)
{
    const uint32_t qh = rd32(qh4);
    unpack_nib32_sub(qs, 0, n);
    for (int j = 0; j < QK; j++)
        n[j] = (int8_t)(n[j] | (((qh >> j) & 1u) << 4));
}

static void deq_q5_0(const uint8_t *src, float *y, int64_t nb)
{
    int8_t n[QK];
    for (int64_t i = 0; i < nb; i++, src += 22, y += QK) {
        const float d = rdf16(src);
        unpack_q5(src + 2, src + 6, n);
        for (int j = 0; j < QK; j++)
            y[j] = (float)(n[j] - 16) * d;
    }
}

static void deq_iq4_nl(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[QK];
    for (int64_t i = 0; i < nb; i++, src += 18, y += QK) {
        const float d = rdf16(src);
        unpack_nib32(src + 2, k_kv4, c);
        for (int j = 0; j < QK; j++)
            y[j] = d * (float)c[j];
    }
}

static void deq_q4_1(const uint8_t *src, float *y, int64_t nb)
{
    int8_t n[QK];
    for (int64_t i = 0; i < nb; i++, src += 20, y += QK) {
        const float d = rdf16(src), m = rdf16(src + 2);
        unpack_nib32_sub(src + 4, 0, n);
        for (int j = 0; j < QK; j++)
            y[j] = d * (float)n[j] + m;
    }
}

static void deq_q5_1(const uint8_t *src, float *y, int64_t nb)
{
    int8_t n[QK];
    for (int64_t i = 0; i < nb; i++, src += 24, y += QK) {
        const float d = rdf16(src), m = rdf16(src + 2);
        unpack_q5(src + 4, src + 8, n);
        for (int j = 0; j < QK; j++)
            y[j] = d * (float)n[j] + m;
    }
}

static float dot_q8_0(const uint8_t *w, const memra_block_q8_1 *a)
{
    const int32_t s = idot((const int8_t *)(w + 2), a->qs, QK);
    return (rdf16(w) * da_of(a)) * (float)s;
}

static float dot_q4_0(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QK];
    unpack_nib32_sub(w + 2, 8, c);
    return (rdf16(w) * da_of(a)) * (float)idot(c, a->qs, QK);
}

static float dot_q5_0(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QK];
    unpack_q5(w + 2, w + 6, c);
    for (int j = 0; j < QK; j++)
        c[j] = (int8_t)(c[j] - 16);
    return (rdf16(w) * da_of(a)) * (float)idot(c, a->qs, QK);
}

static float dot_iq4_nl(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QK];
    unpack_nib32(w + 2, k_kv4, c);
    return (rdf16(w) * da_of(a)) * (float)idot(c, a->qs, QK);
}

static float dot_q4_1(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t n[QK];
    unpack_nib32_sub(w + 4, 0, n);
    const float da = da_of(a);
    const float s = (float)idot(n, a->qs, QK), q = (float)isum(a->qs, QK);
    return (rdf16(w) * da) * s + (rdf16(w + 2) * da) * q;
}

static float dot_q5_1(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t n[QK];
    unpack_q5(w + 4, w + 8, n);
    const float da = da_of(a);
    const float s = (float)idot(n, a->qs, QK), q = (float)isum(a->qs, QK);
    return (rdf16(w) * da) * s + (rdf16(w + 2) * da) * q;
}

/* ---- reference quantizers of the 32-element types (ggml's *_ref algorithms; bit-identical
 * to gguf-py's numpy quantizers, which tests/test_quant.c checks) ---- */

static void quant_q8_0(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 34) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(dst, memra_f32_to_fp16(d));
        for (int j = 0; j < QK; j++)
            dst[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* Signed element of largest magnitude, first one on ties. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* Symmetric 4/5-bit: d = max / -half, code = min(top, trunc(x/d + half + 0.5)). */
static void quant_sym(const float *x, float half, int top, uint16_t *d16, int8_t *n)
{
    const float d = signed_absmax(x, QK) / -half, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d16 = memra_f32_to_fp16(d);
    for (int j = 0; j < QK; j++) {
        const float v = x[j] * id + (half + 0.5f);
        n[j] = (int8_t)(v < 0.0f ? 0 : v > (float)top ? top : (int)v);
    }
}

/* Affine 4/5-bit: d = (max - min) / top, m = min, code = min(top, trunc((x-min)/d + 0.5)). */
static void quant_aff(const float *x, int top, uint16_t *d16, uint16_t *m16, int8_t *n)
{
    float mn = x[0], mx = x[0];
    for (int j = 1; j < QK; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    const float d = (mx - mn) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d16 = memra_f32_to_fp16(d);
    *m16 = memra_f32_to_fp16(mn);
    for (int j = 0; j < QK; j++) {
        const float v = (x[j] - mn) * id + 0.5f;
        n[j] = (int8_t)(v < 0.0f ? 0 : v > (float)top ? top : (int)v);
    }
}

static void pack_nib32(const int8_t *n, uint8_t *qs)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((n[j] & 15) | ((n[j + 16] & 15) << 4));
}

static void pack_q5(const int8_t *n, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < QK; j++)
        qh |= (uint32_t)((n[j] >> 4) & 1) << j;
    wr32(qh4, qh);
    pack_nib32(n, qs);
}

static void quant_q4_0(const float *x, uint8_t *dst, int64_t nb)
{
    int8_t n[QK];
    uint16_t d;
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 18) {
        quant_sym(x, 8.0f, 15, &d, n);
        wr16(dst, d);
        pack_nib32(n, dst + 2);
    }
}

static void quant_q5_0(const float *x, uint8_t *dst, int64_t nb)
{
    int8_t n[QK];
    uint16_t d;
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 22) {
        quant_sym(x, 16.0f, 31, &d, n);
        wr16(dst, d);
        pack_q5(n, dst + 2, dst + 6);
    }
}

static void quant_q4_1(const float *x, uint8_t *dst, int64_t nb)
{
    int8_t n[QK];
    uint16_t d, m;
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 20) {
        quant_aff(x, 15, &d, &m, n);
        wr16(dst, d);
        wr16(dst + 2, m);
        pack_nib32(n, dst + 4);
    }
}

static void quant_q5_1(const float *x, uint8_t *dst, int64_t nb)
{
    int8_t n[QK];
    uint16_t d, m;
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 24) {
        quant_aff(x, 31, &d, &m, n);
        wr16(dst, d);
        wr16(dst + 2, m);
        pack_q5(n, dst + 4, dst + 8);
    }
}

/* ---- IQ4 codebook search (ggml's quantize_row_iq4_nl_impl, used by IQ4_NL and IQ4_XS) ---- */

/* Index of the codebook entry nearest to v (KV4 is sorted); ties go to the upper entry. */
static int kv4_nearest(float v)
{
    if (v <= (float)k_kv4[0])
        return 0;
    if (v >= (float)k_kv4[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < (float)k_kv4[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - (float)k_kv4[hi - 1] < (float)k_kv4[hi] - v ? hi - 1 : hi;
}

/* Weighted fit of 32 values onto KV4 at reciprocal scale id (weights w_j = x_j^2). */
static void iq4_fit(const float *x, float id, float *sumqx, float *sumq2)
{
    float sx = 0.0f, s2 = 0.0f;
    for (int j = 0; j < QK; j++) {
        const float q = (float)k_kv4[kv4_nearest(id * x[j])], w = x[j] * x[j];
        sx += w * q * x[j];
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

/* Least-squares scale of a 32-group onto KV4: first the max-anchored fit (max -> +127 side),
 * then the 15 reciprocal scales (itry + KV4[0]) / max, itry = -7..7, keeping the best
 * weighted error. Returns the fp32 scale (0 for an all-(near-)zero group). */
static float iq4_group_scale(const float *x)
{
    const float max = signed_absmax(x, QK);
    if (fabsf(max) < 1e-15f)
        return 0.0f;
    float sumqx, sumq2;
    const float d0 = -max / (float)k_kv4[0];
    iq4_fit(x, 1.0f / d0, &sumqx, &sumq2);
    if (!(sumq2 > 0.0f)) /* every x_j^2 underflowed: keep the anchor scale */
        return d0;
    float d = sumqx / sumq2, best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        iq4_fit(x, ((float)itry + (float)k_kv4[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Codes of 32 values for the (fp32) group scale dl; dl = 0 gives code of 0 (KV4 index 8). */
static void iq4_codes(const float *x, float dl, uint8_t *L)
{
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < QK; j++)
        L[j] = (uint8_t)kv4_nearest(idl * x[j]);
}

static void quant_iq4_nl(const float *x, uint8_t *dst, int64_t nb)
{
    uint8_t L[QK];
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 18) {
        const float d = iq4_group_scale(x);
        wr16(dst, memra_f32_to_fp16(d));
        iq4_codes(x, d, L);
        for (int j = 0; j < 16; j++)
            dst[2 + j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

/* ===================================== 6. FP4 types ======================================= *
 * MXFP4 (17 B: e (E8M0), qs[16]; nibble placement as Q4_0), H(e) = 2^(e-128) exact.
 *   dequant: f(KVF[n]) × H(e).
 *   dot: S = Σ KVF[n_j]·q_j (int32);  r = (H(e) × d_a) × f(S).
 *   H × d_a is exact unless the product is below 2^-126 (then it is the IEEE RN subnormal —
 *   the GPU must not flush denormals).
 * NVFP4 (36 B: d[4] UE4M3, qs[32]; sub-block s of 16 elements uses qs[8s..8s+7], element
 *   16s+j = lo(qs[8s+j]) for j < 8, hi(qs[8s+j-8]) for j >= 8), U = half UE4M3 (above).
 *   dequant: f(KVF[n]) × U(d_s). The per-tensor `.scale` companion is the caller's.
 *   dot: S_s = Σ_{16 elements of s} KVF[n_j]·q_j (int32), c_s = U(d_s) × f(S_s) (exact: U
 *   has <= 4 significant bits, |S_s| < 2^15);
 *   r = d_a(0) × (c_0 + c_1) + d_a(1) × (c_2 + c_3)   (q8_1 block t covers s = 2t, 2t+1).
 */
static void deq_mxfp4(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[QK];
    for (int64_t i = 0; i < nb; i++, src += 17, y += QK) {
        const float h = memra_e8m0_half_to_f32(src[0]);
        unpack_nib32(src + 1, k_kvf, c);
        for (int j = 0; j < QK; j++)
            y[j] = (float)c[j] * h;
    }
}

static void unpack_nvfp4_sub(const uint8_t *qs8, int8_t *c)
{
    for (int j = 0; j < 8; j++) {
        c[j] = k_kvf[qs8[j] & 15];
        c[j + 8] = k_kvf[qs8[j] >> 4];
    }
}

static void deq_nvfp4(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[16];
    for (int64_t i = 0; i < nb; i++, src += 36) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float u = memra_ue4m3_half_to_f32(src[s]);
            unpack_nvfp4_sub(src + 4 + 8 * s, c);
            for (int j = 0; j < 16; j++)
                y[j] = (float)c[j] * u;
        }
    }
}

static float dot_mxfp4(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QK];
    unpack_nib32(w + 1, k_kvf, c);
    return (memra_e8m0_half_to_f32(w[0]) * da_of(a)) * (float)idot(c, a->qs, QK);
}

static float dot_nvfp4(const uint8_t *w, const memra_block_q8_1 *a)
{
    float c[4];
    int8_t v[16];
    for (int s = 0; s < 4; s++) {
        unpack_nvfp4_sub(w + 4 + 8 * s, v);
        c[s] = memra_ue4m3_half_to_f32(w[s]) * (float)idot(v, a[s / 2].qs + 16 * (s % 2), 16);
    }
    return da_of(&a[0]) * (c[0] + c[1]) + da_of(&a[1]) * (c[2] + c[3]);
}

/* Code of x for half scale h: nearest KVF[i]·h by |error|, first index on ties (so +0 wins
 * over -0); ggml's best_index_mxfp4. */
static uint8_t fp4_code(float x, float h)
{
    int best = 0;
    float best_err = fabsf((float)k_kvf[0] * h - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)k_kvf[i] * h - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return (uint8_t)best;
}

/* MXFP4 (spec §3.9): e = floor(log2(amax)) - 2 + 127 clamped to [0, 254] (0 for amax = 0),
 * so the top code 6·2^(e-127) = 1.5·2^floor(log2 amax); larger values saturate. floor(log2)
 * is taken exactly from the exponent (ggml uses log2f, which can round up within an ulp
 * below a power of two; gguf-py agrees with this file on the tested data). */
static void quant_mxfp4(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 17) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0.0f) {
            int ex;
            frexpf(amax, &ex); /* amax = f · 2^ex, f in [0.5, 1): floor(log2 amax) = ex - 1 */
            e = clampi(ex - 1 - 2 + 127, 0, 254);
        }
        dst[0] = (uint8_t)e;
        const float h = memra_e8m0_half_to_f32((uint8_t)e);
        for (int j = 0; j < 16; j++)
            dst[1 + j] = (uint8_t)(fp4_code(x[j], h) | (fp4_code(x[j + 16], h) << 4));
    }
}

/* NVFP4: per 16-element sub-block, scale code = nearest UE4M3 to amax / 6 (bit 7 clear,
 * saturating at 448, so |x| > 2688 clips: the converter's per-tensor scale is meant to keep
 * weights in range), then codes by fp4_code against the decoded half scale. */
static void quant_nvfp4(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, dst += 36) {
        for (int s = 0; s < 4; s++, x += 16) {
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            dst[s] = f32_to_ue4m3(amax / 6.0f);
            const float u = memra_ue4m3_half_to_f32(dst[s]);
            for (int j = 0; j < 8; j++)
                dst[4 + 8 * s + j] = (uint8_t)(fp4_code(x[j], u) | (fp4_code(x[j + 8], u) << 4));
        }
    }
}

/* ================================== 7. K-quant helpers ==================================== */

#define QKK 256

/* 6-bit scale/min packing shared by Q4_K and Q5_K (spec §3.4): bytes 0-3 sc_0..3 plus the
 * top two bits of sc_4..7, bytes 4-7 the same for the mins, bytes 8-11 the low nibbles of
 * sc_4..7 (low half) and m_4..7 (high half). */
static void kq_unpack_scales(const uint8_t *S, uint8_t *sc, uint8_t *m)
{
    for (int k = 0; k < 4; k++) {
        sc[k] = S[k] & 63;
        m[k] = S[k + 4] & 63;
        sc[k + 4] = (uint8_t)((S[k + 8] & 15) | ((S[k] >> 6) << 4));
        m[k + 4] = (uint8_t)((S[k + 8] >> 4) | ((S[k + 4] >> 6) << 4));
    }
}

static void kq_pack_scales(const uint8_t *sc, const uint8_t *m, uint8_t *S)
{
    for (int k = 0; k < 4; k++) {
        S[k] = (uint8_t)(sc[k] | ((sc[k + 4] >> 4) << 6));
        S[k + 4] = (uint8_t)(m[k] | ((m[k + 4] >> 4) << 6));
        S[k + 8] = (uint8_t)((sc[k + 4] & 15) | ((m[k + 4] & 15) << 4));
    }
}

/* One affine trial of the K-quant scale search: codes at reciprocal scale iscale from min,
 * and the weighted sums the least-squares fit needs. */
static void kq_trial(const float *x, const float *w, int nmax, float iscale, float min,
                     uint8_t *L, float *sum_l, float *sum_l2, float *sum_xl)
{
    float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
    for (int i = 0; i < QK; i++) {
        const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
        L[i] = (uint8_t)l;
        sl += w[i] * (float)l;
        sl2 += w[i] * (float)l * (float)l;
        sxl += w[i] * (float)l * x[i];
    }
    *sum_l = sl;
    *sum_l2 = sl2;
    *sum_xl = sxl;
}

static float kq_error(const float *x, const float *w, const uint8_t *L, float scale, float min)
{
    float err = 0.0f;
    for (int i = 0; i < QK; i++) {
        const float diff = scale * (float)L[i] + min - x[i];
        err += w[i] * (diff * diff);
    }
    return err;
}

/* Scale and min of a 32-group for codes 0..nmax (ggml's make_qkx2_quants): start from the
 * min/max grid, then try nstep+1 grids (rmin + rdelta·is + nmax)/(max - min) and keep the
 * weighted least-squares (scale, min) with the smallest weighted squared error. The min is
 * clamped to <= 0. Returns the scale; *neg_min = -min >= 0; L = codes. */
static float kq_fit_min(const float *x, const float *w, int nmax, float rmin, float rdelta,
                        int nstep, uint8_t *L, float *neg_min)
{
    float min = x[0], max = x[0], sum_w = 0.0f, sum_x = 0.0f;
    for (int i = 0; i < QK; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    min = min > 0.0f ? 0.0f : min;
    if (max == min) {
        memset(L, 0, QK);
        *neg_min = -min;
        return 0.0f;
    }
    const float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale, sl, sl2, sxl;
    kq_trial(x, w, nmax, iscale, min, L, &sl, &sl2, &sxl);
    float best = kq_error(x, w, L, scale, min);
    uint8_t Laux[QK];
    for (int is = 0; is <= nstep; is++) {
        kq_trial(x, w, nmax, (rmin + rdelta * (float)is + (float)nmax) / (max - min), min, Laux,
                 &sl, &sl2, &sxl);
        const float D = sum_w * sl2 - sl * sl;
        if (!(D > 0.0f))
            continue;
        float s = (sum_w * sxl - sum_x * sl) / D, m = (sl2 * sum_x - sl * sxl) / D;
        if (m > 0.0f) {
            m = 0.0f;
            s = sxl / sl2;
        }
        const float err = kq_error(x, w, Laux, s, m);
        if (err < best) {
            memcpy(L, Laux, QK);
            best = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* ================================== 8. Q4_K and Q5_K ===================================== *
 * Q4_K (144 B): d, dmin (fp16), scales[12] (6-bit sc_k, m_k, §3.4), qs[128]; element
 *   e = 32k + l (k = sub-block 0..7): n = lo(qs[32(k/2) + l]) if k even else hi(...).
 * Q5_K (176 B): d, dmin, scales[12], qh[32], qs[128]; n as Q4_K plus 16·((qh[l] >> k) & 1).
 *   dequant: D_k = d × f(sc_k), M_k = dmin × f(m_k); value = D_k × f(n) − M_k.
 *   dot (q8_1 block k covers sub-block k exactly):
 *     X_k = sc_k · Σ_{j in k} n_j·q_j,  Y_k = m_k · Σ_{j in k} q_j    (int32; |X_k| < 2^23,
 *           |Y_k| < 2^18, so f() is exact; Σq is a property of the activation block alone)
 *     A_k = d_a(k) × f(X_k),  B_k = d_a(k) × f(Y_k)
 *     r = (d × tree8(A)) − (dmin × tree8(B))          (tree8: section 2)
 */
static void unpack_q4_k(const uint8_t *qs, int8_t *n)
{
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            n[64 * g + l] = (int8_t)(qs[32 * g + l] & 15);
            n[64 * g + 32 + l] = (int8_t)(qs[32 * g + l] >> 4);
        }
}

static void unpack_q5_k(const uint8_t *qh, const uint8_t *qs, int8_t *n)
{
    unpack_q4_k(qs, n);
    for (int k = 0; k < 8; k++) {
        int8_t *nk = n + 32 * k;
        for (int l = 0; l < 32; l++)
            nk[l] = (int8_t)(nk[l] | (((qh[l] >> k) & 1) << 4));
    }
}

static void deq_kq(const uint8_t *blk, const int8_t *n, float *y)
{
    uint8_t sc[8], m[8];
    kq_unpack_scales(blk + 4, sc, m);
    const float d = rdf16(blk), dmin = rdf16(blk + 2);
    for (int k = 0; k < 8; k++) {
        const float D = d * (float)sc[k], M = dmin * (float)m[k];
        for (int l = 0; l < 32; l++)
            y[32 * k + l] = D * (float)n[32 * k + l] - M;
    }
}

void memra_q4_k_unpack(const void *blk, uint8_t sc[8], uint8_t m[8], int8_t codes[256])
{
    kq_unpack_scales((const uint8_t *)blk + 4, sc, m);
    unpack_q4_k((const uint8_t *)blk + 16, codes);
}

static void deq_q4_k(const uint8_t *src, float *y, int64_t nb)
{
    int8_t n[QKK];
    for (int64_t i = 0; i < nb; i++, src += 144, y += QKK) {
        unpack_q4_k(src + 16, n);
        deq_kq(src, n, y);
    }
}

static void deq_q5_k(const uint8_t *src, float *y, int64_t nb)
{
    int8_t n[QKK];
    for (int64_t i = 0; i < nb; i++, src += 176, y += QKK) {
        unpack_q5_k(src + 16, src + 48, n);
        deq_kq(src, n, y);
    }
}

static float dot_kq(const uint8_t *blk, const int8_t *n, const memra_block_q8_1 *a)
{
    uint8_t sc[8], m[8];
    float A[8], B[8];
    kq_unpack_scales(blk + 4, sc, m);
    for (int k = 0; k < 8; k++) {
        const int32_t X = (int32_t)sc[k] * idot(n + 32 * k, a[k].qs, 32);
        const int32_t Y = (int32_t)m[k] * isum(a[k].qs, 32);
        const float da = da_of(&a[k]);
        A[k] = da * (float)X;
        B[k] = da * (float)Y;
    }
    return rdf16(blk) * tree8(A) - rdf16(blk + 2) * tree8(B);
}

static float dot_q4_k(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t n[QKK];
    unpack_q4_k(w + 16, n);
    return dot_kq(w, n, a);
}

static float dot_q5_k(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t n[QKK];
    unpack_q5_k(w + 16, w + 48, n);
    return dot_kq(w, n, a);
}

/* Reference K-quant quantizer of one 256-block (ggml's quantize_row_q4_K_ref / q5_K_ref):
 * per 32-group weights av|x| + |x_j|, kq_fit_min, then the 8 scales and mins are quantized
 * to 6 bits against d = max_scale/63 and dmin = max_min/63, and the codes are recomputed
 * from the fp16-rounded super-scales. Writes d, dmin, scales[12] and L (codes 0..nmax). */
static void kq_quant_block(const float *x, int nmax, float rmin, int nstep, uint8_t *blk,
                           uint8_t *L)
{
    float scales[8], mins[8], w[QK], max_scale = 0.0f, max_min = 0.0f;
    for (int k = 0; k < 8; k++) {
        const float *xk = x + 32 * k;
        float sum_x2 = 0.0f;
        for (int l = 0; l < QK; l++)
            sum_x2 += xk[l] * xk[l];
        const float av_x = sqrtf(sum_x2 / (float)QK);
        for (int l = 0; l < QK; l++)
            w[l] = av_x + fabsf(xk[l]);
        scales[k] = kq_fit_min(xk, w, nmax, rmin, 0.1f, nstep, L + 32 * k, &mins[k]);
        max_scale = scales[k] > max_scale ? scales[k] : max_scale;
        max_min = mins[k] > max_min ? mins[k] : max_min;
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t sc[8], m[8];
    for (int k = 0; k < 8; k++) {
        sc[k] = (uint8_t)clampi(nearest_int(inv_scale * scales[k]), 0, 63);
        m[k] = (uint8_t)clampi(nearest_int(inv_min * mins[k]), 0, 63);
    }
    wr16(blk, memra_f32_to_fp16(max_scale / 63.0f));
    wr16(blk + 2, memra_f32_to_fp16(max_min / 63.0f));
    kq_pack_scales(sc, m, blk + 4);
    const float d = rdf16(blk), dmin = rdf16(blk + 2);
    for (int k = 0; k < 8; k++) {
        const float dd = d * (float)sc[k], dm = dmin * (float)m[k];
        for (int l = 0; l < QK; l++)
            L[32 * k + l] = dd == 0.0f ? 0
                                       : (uint8_t)clampi(nearest_int((x[32 * k + l] + dm) / dd), 0,
                                                         nmax);
    }
}

static void quant_q4_k(const float *x, uint8_t *dst, int64_t nb)
{
    uint8_t L[QKK];
    for (int64_t i = 0; i < nb; i++, x += QKK, dst += 144) {
        kq_quant_block(x, 15, -1.0f, 20, dst, L);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                dst[16 + 32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

static void quant_q5_k(const float *x, uint8_t *dst, int64_t nb)
{
    uint8_t L[QKK];
    for (int64_t i = 0; i < nb; i++, x += QKK, dst += 176) {
        kq_quant_block(x, 31, -0.5f, 15, dst, L);
        memset(dst + 16, 0, 32);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                dst[48 + 32 * g + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                dst[16 + l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
    }
}

/* ======================================== 9. Q6_K ======================================== *
 * Q6_K (210 B): ql[128], qh[64], scales[16] int8, d (fp16). Element e: h = e/128, r = e%128,
 *   k = r/32, l = r%32; low4 = lo/hi (k < 2 / k >= 2) of ql[64h + l + 32(k & 1)];
 *   high2 = (qh[32h + l] >> 2k) & 3; c = (low4 | high2 << 4) − 32 in [−32, 31].
 *   dequant: (d × f(scales[e/16])) × f(c).
 *   dot (q8_1 block k = elements 32k..32k+31 = scale groups 2k, 2k+1):
 *     X_k = sc_2k · Σ_{j<16} c·q + sc_2k+1 · Σ_{j>=16} c·q    (int32, |X_k| <= 2^24: exact)
 *     A_k = d_a(k) × f(X_k);   r = d × tree8(A)
 */
static void unpack_q6_k(const uint8_t *blk, int8_t *c)
{
    for (int h = 0; h < 2; h++, c += 128) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        for (int l = 0; l < 32; l++) { /* k = 0..3 are the four 32-runs of this half */
            c[l] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
            c[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            c[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            c[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void memra_q6_k_unpack(const void *blk, int8_t codes[256])
{
    unpack_q6_k((const uint8_t *)blk, codes);
}

static void deq_q6_k(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[QKK];
    for (int64_t i = 0; i < nb; i++, src += 210, y += QKK) {
        const float d = rdf16(src + 208);
        unpack_q6_k(src, c);
        for (int g = 0; g < 16; g++) {
            const float D = d * (float)(int8_t)src[192 + g];
            for (int j = 0; j < 16; j++)
                y[16 * g + j] = D * (float)c[16 * g + j];
        }
    }
}

static float dot_q6_k(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QKK];
    float A[8];
    unpack_q6_k(w, c);
    const int8_t *sc = (const int8_t *)(w + 192);
    for (int k = 0; k < 8; k++) {
        const int32_t X = sc[2 * k] * idot(c + 32 * k, a[k].qs, 16) +
                          sc[2 * k + 1] * idot(c + 32 * k + 16, a[k].qs + 16, 16);
        A[k] = da_of(&a[k]) * (float)X;
    }
    return rdf16(w + 208) * tree8(A);
}

/* Scale of a 16-group for signed codes -32..31 weighted by x^2 (ggml's make_qx_quants with
 * rmse_type 1): anchor the extremal value at -32, then try -(32 + 0.1·is)/max for
 * is = -9..9 and keep the best weighted least-squares fit. L = codes (-32..31). */
static void q6_trial(const float *x, float iscale, int8_t *L, float *sumlx, float *suml2)
{
    float slx = 0.0f, sl2 = 0.0f;
    for (int i = 0; i < 16; i++) {
        const int l = clampi(nearest_int(iscale * x[i]), -32, 31);
        const float w = x[i] * x[i];
        if (L)
            L[i] = (int8_t)l;
        slx += w * x[i] * (float)l;
        sl2 += w * (float)l * (float)l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

static float q6_fit(const float *x, int8_t *L)
{
    const float max = signed_absmax(x, 16);
    if (fabsf(max) < 1e-15f) {
        memset(L, 0, 16);
        return 0.0f;
    }
    float slx, sl2;
    q6_trial(x, -32.0f / max, L, &slx, &sl2);
    float scale = sl2 != 0.0f ? slx / sl2 : 0.0f, best = scale * slx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        const float iscale = -(32.0f + 0.1f * (float)is) / max;
        q6_trial(x, iscale, NULL, &slx, &sl2);
        if (sl2 > 0.0f && slx * slx > best * sl2) {
            q6_trial(x, iscale, L, &slx, &sl2);
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

static void q6_pack(const int8_t *c, uint8_t *blk)
{
    memset(blk, 0, 192);
    for (int e = 0; e < QKK; e++) {
        const int h = e / 128, r = e % 128, k = r / 32, l = r % 32, u = c[e] + 32;
        blk[64 * h + l + 32 * (k & 1)] |= (uint8_t)((u & 15) << (k < 2 ? 0 : 4));
        blk[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
    }
}

/* ggml's quantize_row_q6_K_ref: 16 group scales by q6_fit, quantized to int8 against
 * d = max_scale / -128 (the extremal scale maps to -128), codes recomputed from fp16 d. */
static void quant_q6_k(const float *x, uint8_t *dst, int64_t nb)
{
    int8_t c[QKK];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += QKK, dst += 210) {
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int g = 0; g < 16; g++) {
            scales[g] = q6_fit(x + 16 * g, c + 16 * g);
            if (fabsf(scales[g]) > max_abs) {
                max_abs = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        memset(dst, 0, 210);
        if (max_abs < 1e-15f) /* all-(near-)zero block: every value 0 at d = 0 */
            continue;
        const float iscale = -128.0f / max_scale;
        wr16(dst + 208, memra_f32_to_fp16(1.0f / iscale));
        const float d = rdf16(dst + 208);
        for (int g = 0; g < 16; g++) {
            const int sc = clampi(nearest_int(iscale * scales[g]), -128, 127);
            dst[192 + g] = (uint8_t)(int8_t)sc;
            const float dd = d * (float)sc;
            for (int j = 0; j < 16; j++)
                c[16 * g + j] = (int8_t)(dd == 0.0f ? 0 : clampi(nearest_int(x[16 * g + j] / dd), -32, 31));
        }
        q6_pack(c, dst);
    }
}

/* ======================================= 10. IQ4_XS ====================================== *
 * IQ4_XS (136 B): d (fp16), scales_h (u16), scales_l[4], qs[128]. Sub-block b (32 elements):
 *   ls_b = ((scales_l[b/2] >> 4(b%2)) & 15) | (((scales_h >> 2b) & 3) << 4), in 0..63;
 *   element 32b + j: n = lo(qs[16b + j]) for j < 16, hi(qs[16b + j - 16]) for j >= 16.
 *   dequant: (d × f(ls_b − 32)) × f(KV4[n]).
 *   dot: X_b = (ls_b − 32) · Σ_{j in b} KV4[n_j]·q_j   (int32, |X_b| < 2^24: exact)
 *        A_b = d_a(b) × f(X_b);   r = d × tree8(A)
 */
static int iq4_xs_ls(const uint8_t *blk, int b)
{
    const uint16_t sh = rd16(blk + 2);
    return ((blk[4 + b / 2] >> (4 * (b % 2))) & 15) | (((sh >> (2 * b)) & 3) << 4);
}

static void deq_iq4_xs(const uint8_t *src, float *y, int64_t nb)
{
    int8_t c[QK];
    for (int64_t i = 0; i < nb; i++, src += 136) {
        const float d = rdf16(src);
        for (int b = 0; b < 8; b++, y += QK) {
            const float dl = d * (float)(iq4_xs_ls(src, b) - 32);
            unpack_nib32(src + 8 + 16 * b, k_kv4, c);
            for (int j = 0; j < QK; j++)
                y[j] = dl * (float)c[j];
        }
    }
}

static float dot_iq4_xs(const uint8_t *w, const memra_block_q8_1 *a)
{
    int8_t c[QK];
    float A[8];
    for (int b = 0; b < 8; b++) {
        unpack_nib32(w + 8 + 16 * b, k_kv4, c);
        const int32_t X = (iq4_xs_ls(w, b) - 32) * idot(c, a[b].qs, QK);
        A[b] = da_of(&a[b]) * (float)X;
    }
    return rdf16(w) * tree8(A);
}

/* ggml's IQ4_XS reference: 8 group scales by iq4_group_scale, quantized to 6 bits against
 * d = -max_scale/32 (fp32 d for the codes, as the reference does), codes per group. */
static void quant_iq4_xs(const float *x, uint8_t *dst, int64_t nb)
{
    uint8_t L[QK];
    float scales[8];
    for (int64_t i = 0; i < nb; i++, x += QKK, dst += 136) {
        float max_scale = 0.0f, amax_scale = 0.0f;
        for (int b = 0; b < 8; b++) {
            scales[b] = iq4_group_scale(x + 32 * b);
            if (fabsf(scales[b]) > amax_scale) {
                amax_scale = fabsf(scales[b]);
                max_scale = scales[b];
            }
        }
        const float d = -max_scale / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        memset(dst, 0, 8);
        wr16(dst, memra_f32_to_fp16(d));
        uint16_t sh = 0;
        for (int b = 0; b < 8; b++) {
            const int l = clampi(nearest_int(id * scales[b]), -32, 31);
            iq4_codes(x + 32 * b, d * (float)l, L);
            for (int j = 0; j < 16; j++)
                dst[8 + 16 * b + j] = (uint8_t)(L[j] | (L[j + 16] << 4));
            dst[4 + b / 2] |= (uint8_t)(((l + 32) & 15) << (4 * (b % 2)));
            sh |= (uint16_t)(((l + 32) >> 4) << (2 * b));
        }
        wr16(dst + 2, sh);
    }
}

/* ======================================== 11. Q8_K ======================================== *
 * Q8_K (292 B): d (fp32), qs[256] int8, bsums[16] int16 (Σ of each 16 codes). An
 * intermediate activation format in ggml, never a model weight: dequantize and quantize
 * only. dequant: d × f(q). Quantizer (ggml's): iscale = -127/max (max = signed extremal),
 * q = min(127, RN(iscale·x)), d = 1/iscale.
 */
static void deq_q8_k(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, src += 292, y += QKK) {
        const float d = bits_f32(rd32(src));
        for (int j = 0; j < QKK; j++)
            y[j] = d * (float)(int8_t)src[4 + j];
    }
}

static void quant_q8_k(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QKK, dst += 292) {
        memset(dst, 0, 292);
        const float max = signed_absmax(x, QKK);
        if (max == 0.0f)
            continue;
        const float iscale = -127.0f / max;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                const int q = clampi(nearest_int(iscale * x[16 * g + j]), -128, 127);
                dst[4 + 16 * g + j] = (uint8_t)(int8_t)q;
                sum += q;
            }
            wr16(dst + 260 + 2 * g, (uint16_t)(int16_t)sum);
        }
        wr32(dst, f32_bits(1.0f / iscale));
    }
}

/* ============================ 12. the type table and the row API ========================== */

/* Row dot: T = 0; T = T + r_b for dot blocks b in increasing order (quant.h). One copy per
 * type so the block function inlines into the loop. */
#define DOT_ROW(name, bytes, nq8)                                                                  \
    static float dot_row_##name(const uint8_t *w, const memra_block_q8_1 *a, int64_t nb)           \
    {                                                                                              \
        float t = 0.0f;                                                                            \
        for (int64_t b = 0; b < nb; b++)                                                           \
            t = t + dot_##name(w + b * (bytes), a + b * (nq8));                                    \
        return t;                                                                                  \
    }
DOT_ROW(f32, 128, 1)
DOT_ROW(f16, 64, 1)
DOT_ROW(bf16, 64, 1)
DOT_ROW(q8_0, 34, 1)
DOT_ROW(q4_0, 18, 1)
DOT_ROW(q4_1, 20, 1)
DOT_ROW(q5_0, 22, 1)
DOT_ROW(q5_1, 24, 1)
DOT_ROW(iq4_nl, 18, 1)
DOT_ROW(mxfp4, 17, 1)
DOT_ROW(nvfp4, 36, 2)
DOT_ROW(q4_k, 144, 8)
DOT_ROW(q5_k, 176, 8)
DOT_ROW(q6_k, 210, 8)
DOT_ROW(iq4_xs, 136, 8)
#undef DOT_ROW

typedef struct qt_ops {
    void (*deq)(const uint8_t *src, float *y, int64_t nblocks);
    void (*quant)(const float *x, uint8_t *dst, int64_t nblocks);
    float (*dot)(const uint8_t *w, const memra_block_q8_1 *a);
    float (*dot_row)(const uint8_t *w, const memra_block_q8_1 *a, int64_t ndot);
    uint32_t dot_elems; /* elements per dot block: 32 for the float types, else block_elems */
} qt_ops;

#define OPS(n, e) {deq_##n, quant_##n, dot_##n, dot_row_##n, e}
static const qt_ops k_ops[MEMRA_QT_COUNT] = {
    [MEMRA_QT_F32] = OPS(f32, 32),     [MEMRA_QT_F16] = OPS(f16, 32),
    [MEMRA_QT_BF16] = OPS(bf16, 32),   [MEMRA_QT_Q8_0] = OPS(q8_0, 32),
    [MEMRA_QT_Q4_0] = OPS(q4_0, 32),   [MEMRA_QT_Q4_1] = OPS(q4_1, 32),
    [MEMRA_QT_Q5_0] = OPS(q5_0, 32),   [MEMRA_QT_Q5_1] = OPS(q5_1, 32),
    [MEMRA_QT_IQ4_NL] = OPS(iq4_nl, 32), [MEMRA_QT_MXFP4] = OPS(mxfp4, 32),
    [MEMRA_QT_NVFP4] = OPS(nvfp4, 64), [MEMRA_QT_Q4_K] = OPS(q4_k, 256),
    [MEMRA_QT_Q5_K] = OPS(q5_k, 256),  [MEMRA_QT_Q6_K] = OPS(q6_k, 256),
    [MEMRA_QT_IQ4_XS] = OPS(iq4_xs, 256),
    [MEMRA_QT_Q8_K] = {deq_q8_k, quant_q8_k, NULL, NULL, 0},
};
#undef OPS

static const qt_ops *ops_get(memra_qtype t)
{
    if ((unsigned)t >= MEMRA_QT_COUNT || !memra_qtype_get((uint32_t)t))
        return NULL;
    return &k_ops[t];
}

size_t memra_quant_row_bytes(memra_qtype t, int64_t n)
{
    const memra_qtype_info *info = memra_qtype_get((uint32_t)t);
    if (!info || n < 0 || n % info->block_elems != 0)
        return 0;
    return (size_t)(n / info->block_elems) * info->block_bytes;
}

int memra_quant_can_dequantize(memra_qtype t)
{
    const qt_ops *o = ops_get(t);
    return o && o->deq;
}

int memra_quant_can_quantize(memra_qtype t)
{
    const qt_ops *o = ops_get(t);
    return o && o->quant;
}

int memra_quant_can_dot(memra_qtype t)
{
    const qt_ops *o = ops_get(t);
    return o && o->dot;
}

int memra_quant_dot_block_elems(memra_qtype t)
{
    const qt_ops *o = ops_get(t);
    return o && o->dot ? (int)o->dot_elems : 0;
}

size_t memra_quant_dot_block_bytes(memra_qtype t)
{
    return memra_quant_row_bytes(t, memra_quant_dot_block_elems(t));
}

int memra_dequantize_row(memra_qtype t, const void *src, float *dst, int64_t n)
{
    const qt_ops *o = ops_get(t);
    if (!o || !o->deq || !src || !dst || n < 0 || n % memra_qtype_get((uint32_t)t)->block_elems)
        return -1;
    o->deq((const uint8_t *)src, dst, n / memra_qtype_get((uint32_t)t)->block_elems);
    return 0;
}

int memra_quantize_row(memra_qtype t, const float *src, void *dst, int64_t n)
{
    const qt_ops *o = ops_get(t);
    if (!o || !o->quant || !src || !dst || n < 0)
        return -1;
    const uint32_t be = memra_qtype_get((uint32_t)t)->block_elems;
    if (n % be)
        return -1;
    /* Block formats cannot represent Inf/NaN; the float types carry them through. */
    if (be > 1)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(src[i]))
                return -1;
    o->quant(src, (uint8_t *)dst, n / be);
    return 0;
}

float memra_vec_dot_block(memra_qtype t, const void *wblock, const memra_block_q8_1 *a)
{
    const qt_ops *o = ops_get(t);
    if (!o || !o->dot || !wblock || !a)
        return NAN;
    return o->dot((const uint8_t *)wblock, a);
}

float memra_vec_dot_q8_1(memra_qtype t, const void *wrow, const memra_block_q8_1 *a, int64_t n)
{
    const qt_ops *o = ops_get(t);
    if (!o || !o->dot || !wrow || !a || n < 0 || n % o->dot_elems)
        return NAN;
    return o->dot_row((const uint8_t *)wrow, a, n / o->dot_elems);
}
