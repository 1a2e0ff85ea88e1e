/*
 * test_quant.c — the quant area: scalar conversions, dequantization, reference quantizers,
 * the engine q8_1 quantizer and the weight × q8_1 dot products.
 *
 * Exactness claims are checked bit-for-bit (memcmp) against golden data that
 * tests/py/gen_quant_golden.py computed with independent code (gguf-py, numpy); see that
 * script for the file format and how to regenerate. Quality claims (round-trip error, dot
 * accuracy) use tolerances whose origin is stated next to each number.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "test_util.h"

/* ------------------------------------------------------------------ golden file loading */

typedef struct golden {
    uint32_t type;
    uint32_t na, nb;
    uint8_t *a; /* [na] */
    uint8_t *b; /* [nb] */
} golden;

/* Loads tests/data/quant/<name>; fails the test when missing or malformed. */
static void golden_load(const char *name, golden *g)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/quant/%s", name);
    FILE *f = fopen(tu_source_path(rel), "rb");
    ck_assert_msg(f != NULL, "missing golden file %s (run tests/py/gen_quant_golden.py)", rel);
    uint8_t hdr[16];
    ck_assert_msg(fread(hdr, 1, 16, f) == 16 && memcmp(hdr, "MQG1", 4) == 0, "%s: bad header", rel);
    memcpy(&g->type, hdr + 4, 4);
    memcpy(&g->na, hdr + 8, 4);
    memcpy(&g->nb, hdr + 12, 4);
    g->a = malloc(g->na + 1);
    g->b = malloc(g->nb + 1);
    ck_assert(g->a && g->b);
    ck_assert_msg(fread(g->a, 1, g->na, f) == g->na && fread(g->b, 1, g->nb, f) == g->nb,
                  "%s: truncated", rel);
    fclose(f);
}

static void golden_free(golden *g)
{
    free(g->a);
    free(g->b);
}

/* memcmp of float arrays with a message naming the first differing element. */
static void assert_same_floats(const float *got, const float *want, size_t n, const char *what)
{
    if (memcmp(got, want, n * sizeof(float)) == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        ck_assert_msg(a == b, "%s: element %zu: got %.9g (0x%08x) want %.9g (0x%08x)", what, i,
                      (double)got[i], a, (double)want[i], b);
    }
}

static void assert_same_bytes(const uint8_t *got, const uint8_t *want, size_t n, size_t unit,
                              const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "%s: byte %zu (block %zu, offset %zu): got 0x%02x want 0x%02x",
                      what, i, i / unit, i % unit, got[i], want[i]);
}

/* --------------------------------------------------------------------- the type tables */

/* Types with a gguf-py dequantization golden file (deq_<name>.bin). */
static const memra_qtype k_deq_types[] = {
    MEMRA_QT_Q4_0, MEMRA_QT_Q4_1, MEMRA_QT_Q5_0,  MEMRA_QT_Q5_1,  MEMRA_QT_Q8_0,
    MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4, MEMRA_QT_NVFP4, MEMRA_QT_Q4_K, MEMRA_QT_Q5_K,
    MEMRA_QT_Q6_K, MEMRA_QT_IQ4_XS, MEMRA_QT_Q8_K,
};
#define N_DEQ (sizeof k_deq_types / sizeof k_deq_types[0])

/* Every type with a dot product. */
static const memra_qtype k_dot_types[] = {
    MEMRA_QT_F32,   MEMRA_QT_F16,   MEMRA_QT_BF16,  MEMRA_QT_Q8_0,  MEMRA_QT_Q4_0,
    MEMRA_QT_Q4_1,  MEMRA_QT_Q5_0,  MEMRA_QT_Q5_1,  MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4,
    MEMRA_QT_NVFP4, MEMRA_QT_Q4_K,  MEMRA_QT_Q5_K,  MEMRA_QT_Q6_K,  MEMRA_QT_IQ4_XS,
};
#define N_DOT (sizeof k_dot_types / sizeof k_dot_types[0])

static const char *qname(memra_qtype t) { return memra_qtype_get((uint32_t)t)->name; }

static float *random_normal(tu_rng *r, size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    ck_assert(x);
    for (size_t i = 0; i < n; i++)
        x[i] = tu_rng_normal(r) * scale;
    return x;
}

/* -------------------------------------------------------------- 1. scalar conversions */

START_TEST(test_fp16_golden)
{
    golden g;
    golden_load("conv_f16_to_f32.bin", &g);
    size_t n = g.na / 2;
    float *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, g.a + 2 * i, 2);
        got[i] = memra_fp16_to_f32(h);
    }
    assert_same_floats(got, (const float *)g.b, n, "fp16->f32 vs numpy");
    free(got);
    golden_free(&g);

    golden_load("conv_f32_to_f16.bin", &g);
    n = g.na / 4;
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, g.a + 4 * i, 4);
        h[i] = memra_f32_to_fp16(f);
    }
    assert_same_bytes((const uint8_t *)h, g.b, n * 2, 2, "f32->fp16 vs numpy (RN-even)");
    free(h);
    golden_free(&g);

    golden_load("conv_f32_to_bf16.bin", &g);
    n = g.na / 4;
    h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, g.a + 4 * i, 4);
        h[i] = memra_f32_to_bf16(f);
    }
    assert_same_bytes((const uint8_t *)h, g.b, n * 2, 2, "f32->bf16 vs gguf-py (incl. NaN)");
    free(h);
    golden_free(&g);
}
END_TEST

/* Every fp16 and bf16 pattern: widening then narrowing is the identity for non-NaN values;
 * NaN widens to a NaN and narrows to the canonical quiet NaN with the sign kept (spec §0). */
START_TEST(test_half_exhaustive)
{
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = memra_fp16_to_f32(h);
        const int nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        if (nan) {
            ck_assert_msg(isnan(f), "fp16 0x%04x must widen to NaN", h);
            ck_assert_uint_eq(memra_f32_to_fp16(f), (h & 0x8000u) | 0x7E00u);
        } else {
            ck_assert_msg(memra_f32_to_fp16(f) == h, "fp16 0x%04x does not round-trip", h);
        }
        const float b = memra_bf16_to_f32(h);
        if (isnan(b))
            ck_assert_uint_eq(memra_f32_to_bf16(b), h | 64u);
        else
            ck_assert_msg(memra_f32_to_bf16(b) == h, "bf16 0x%04x does not round-trip", h);
    }
    /* Ties and edges: 65520 is half-way between 65504 and Inf (-> Inf, even); 2^-25 is
     * half-way between 0 and the smallest subnormal (-> 0, even). */
    ck_assert_uint_eq(memra_f32_to_fp16(65519.996f), 0x7BFF);
    ck_assert_uint_eq(memra_f32_to_fp16(65520.0f), 0x7C00);
    ck_assert_uint_eq(memra_f32_to_fp16(0x1p-25f), 0x0000);
    ck_assert_uint_eq(memra_f32_to_fp16(-0x1.000002p-25f), 0x8001);
    ck_assert_uint_eq(memra_f32_to_fp16(0x1p-149f), 0x0000);
}
END_TEST

START_TEST(test_fp4_scale_decoders)
{
    /* MXFP4 H(e) = 2^(e-128) (spec §3.9), including the two subnormal cases. */
    for (int e = 0; e < 256; e++)
        ck_assert_msg(memra_e8m0_half_to_f32((uint8_t)e) == ldexpf(1.0f, e - 128), "e=%d", e);
    /* NVFP4 U(x): the table of spec §3.10 evaluated in double, bit 7 treated as 0. */
    for (int x = 0; x < 256; x++) {
        const int c = x & 0x7F, E = c >> 3, M = c & 7;
        double want = E == 0 ? M * ldexp(1, -9) : (1 + M / 8.0) * ldexp(1, E - 7);
        want = (c == 0 || c == 0x7F) ? 0.0 : want * 0.5;
        ck_assert_msg((double)memra_ue4m3_half_to_f32((uint8_t)x) == want, "x=0x%02x", x);
    }
    ck_assert(memra_ue4m3_half_to_f32(0x7E) == 224.0f);
    ck_assert(memra_ue4m3_half_to_f32(0xFF) == 0.0f);
}
END_TEST

/* ------------------------------------------------------------------ 2. dequantization */

/* The one documented disagreement with gguf-py (see memra_ue4m3_half_to_f32): an NVFP4
 * sub-block whose scale byte is 0xFF is 0 in memra and 240 × KVF[n] in gguf-py. Checks that
 * gguf-py's golden values there are the 240 ones (so the difference is the recorded one and
 * nothing else), then rewrites them to memra's ±0 (sign of the code, as f(c) × 0 gives). */
static void nvfp4_expect_engine_0xff(const uint8_t *blocks, float *want, int64_t nblk)
{
    static const int8_t kvf[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    int seen = 0;
    for (int64_t b = 0; b < nblk; b++)
        for (int s = 0; s < 4; s++) {
            if (blocks[36 * b + s] != 0xFF)
                continue;
            seen++;
            for (int j = 0; j < 16; j++) {
                const uint8_t byte = blocks[36 * b + 4 + 8 * s + j % 8];
                const int c = kvf[j < 8 ? byte & 15 : byte >> 4];
                float *w = &want[64 * b + 16 * s + j];
                ck_assert_msg(*w == 240.0f * c, "gguf-py NVFP4 0xFF: %g != 240·%d", (double)*w, c);
                *w = (float)c * 0.0f;
            }
        }
    ck_assert_msg(seen > 0, "the NVFP4 golden data lost its 0xFF edge block");
}

/* Every type against gguf-py's dequantizer (Q8_K: numpy d × q), bit for bit. */
START_TEST(test_dequant_golden)
{
    for (size_t i = 0; i < N_DEQ; i++) {
        const memra_qtype t = k_deq_types[i];
        const memra_qtype_info *info = memra_qtype_get((uint32_t)t);
        char name[64];
        snprintf(name, sizeof name, "deq_%s.bin", info->name);
        golden g;
        golden_load(name, &g);
        ck_assert_uint_eq(g.type, (uint32_t)t);
        const int64_t nblk = g.na / info->block_bytes, n = nblk * info->block_elems;
        ck_assert_uint_eq(g.nb, (uint32_t)(n * 4));
        ck_assert_uint_eq(memra_quant_row_bytes(t, n), g.na);
        float *y = malloc((size_t)n * sizeof *y);
        ck_assert_int_eq(memra_dequantize_row(t, g.a, y, n), 0);
        if (t == MEMRA_QT_NVFP4)
            nvfp4_expect_engine_0xff(g.a, (float *)g.b, nblk);
        assert_same_floats(y, (const float *)g.b, (size_t)n, name);
        free(y);
        golden_free(&g);
    }
}
END_TEST

START_TEST(test_dequant_float_types)
{
    const float x[4] = {1.0f, -0.333333343f, 65504.0f, 0x1p-24f};
    uint8_t buf[16];
    float y[4];
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_F32, x, buf, 4), 0);
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_F32, buf, y, 4), 0);
    ck_assert_mem_eq(x, y, sizeof x);
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_F16, x, buf, 4), 0);
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_F16, buf, y, 4), 0);
    for (int i = 0; i < 4; i++)
        ck_assert(y[i] == memra_fp16_to_f32(memra_f32_to_fp16(x[i])));
    ck_assert(y[2] == 65504.0f && y[3] == 0x1p-24f);
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_BF16, x, buf, 4), 0);
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_BF16, buf, y, 4), 0);
    ck_assert(y[0] == 1.0f && y[1] == memra_bf16_to_f32(memra_f32_to_bf16(x[1])));
}
END_TEST

/* --------------------------------------------------------------------- 3. quantization */

/* Where gguf-py implements ggml's reference quantizer, memra's output is byte-identical. */
START_TEST(test_quantize_matches_gguf_py)
{
    static const memra_qtype types[] = {MEMRA_QT_Q8_0, MEMRA_QT_Q4_0, MEMRA_QT_Q4_1,
                                        MEMRA_QT_Q5_0, MEMRA_QT_Q5_1, MEMRA_QT_MXFP4,
                                        MEMRA_QT_BF16, MEMRA_QT_F16};
    golden in;
    golden_load("qref_inputs.bin", &in);
    const int64_t n = in.na / 4;
    uint8_t *q = malloc((size_t)n * 4);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "qref_%s.bin", qname(types[i]));
        golden g;
        golden_load(name, &g);
        ck_assert_uint_eq(memra_quant_row_bytes(types[i], n), g.na);
        ck_assert_int_eq(memra_quantize_row(types[i], (const float *)in.a, q, n), 0);
        assert_same_bytes(q, g.a, g.na, memra_qtype_get((uint32_t)types[i])->block_bytes, name);
        golden_free(&g);
    }
    free(q);
    golden_free(&in);
}
END_TEST

/* Types memra quantizes (block types gguf-py can read). */
static const memra_qtype k_rt_types[] = {
    MEMRA_QT_F16,   MEMRA_QT_BF16,  MEMRA_QT_Q8_0,  MEMRA_QT_Q4_0,  MEMRA_QT_Q4_1,
    MEMRA_QT_Q5_0,  MEMRA_QT_Q5_1,  MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4, MEMRA_QT_NVFP4,
    MEMRA_QT_Q4_K,  MEMRA_QT_Q5_K,  MEMRA_QT_Q6_K,  MEMRA_QT_IQ4_XS,
};

/* A memra-quantized tensor dequantizes identically in gguf-py: rt_<type>.bin holds memra's
 * bytes for rt_inputs and gguf-py's dequantization of them. The quantizer must still
 * produce those bytes (it is deterministic) and memra's dequantizer must agree bit for bit.
 * With MEMRA_QUANT_DUMP_DIR set, the bytes are written there instead (regeneration step). */
START_TEST(test_memra_quantized_reads_in_gguf_py)
{
    const char *dump = getenv("MEMRA_QUANT_DUMP_DIR");
    golden in;
    golden_load("rt_inputs.bin", &in);
    const int64_t n = in.na / 4;
    uint8_t *q = malloc((size_t)n * 4);
    float *y = malloc((size_t)n * sizeof *y);
    for (size_t i = 0; i < sizeof k_rt_types / sizeof k_rt_types[0]; i++) {
        const memra_qtype t = k_rt_types[i];
        const size_t bytes = memra_quant_row_bytes(t, n);
        ck_assert_int_eq(memra_quantize_row(t, (const float *)in.a, q, n), 0);
        char name[300];
        if (dump) {
            snprintf(name, sizeof name, "%s/memra_%s.q", dump, qname(t));
            FILE *f = fopen(name, "wb");
            ck_assert_msg(f && fwrite(q, 1, bytes, f) == bytes, "cannot write %s", name);
            fclose(f);
            continue;
        }
        snprintf(name, sizeof name, "rt_%s.bin", qname(t));
        golden g;
        golden_load(name, &g);
        ck_assert_uint_eq(g.na, bytes);
        assert_same_bytes(q, g.a, bytes, memra_qtype_get((uint32_t)t)->block_bytes, name);
        ck_assert_int_eq(memra_dequantize_row(t, q, y, n), 0);
        assert_same_floats(y, (const float *)g.b, (size_t)n, name);
        golden_free(&g);
    }
    free(q);
    free(y);
    golden_free(&in);
}
END_TEST

/* Round trip x -> quantize -> dequantize on N(0, 1) rows: RMSE / RMS(x) below a per-type
 * bound. Each bound is the value measured on this seed (given, with the rough theory: a
 * uniform grid of step D has RMS error D/sqrt(12); amax of 32 normals ~ 2.1σ, of 256 ~ 2.9σ)
 * plus 20% headroom for deliberate quantizer changes. The seed is fixed, so a regression of
 * the scale search or of a code mapping shows up as a larger number. */
static const struct rt_bound {
    memra_qtype t;
    double bound;
} k_rt_bounds[] = {
    {MEMRA_QT_F16, 2.5e-4},  /* RN to 11 bits, ~2^-11/sqrt(12)·1.2; measured 2.08e-4 */
    {MEMRA_QT_BF16, 2.0e-3}, /* RN to 8 bits, ~2^-8/sqrt(12)·1.2; measured 1.66e-3 */
    {MEMRA_QT_Q8_0, 6.5e-3}, /* D = 2.1/127: 4.8e-3; measured 5.35e-3 */
    {MEMRA_QT_Q8_K, 8.2e-3}, /* D = 2.9/127: 6.6e-3; measured 6.81e-3 */
    {MEMRA_QT_Q4_0, 0.103},  /* D = amax/8; measured 0.0857 */
    {MEMRA_QT_Q4_1, 0.093},  /* D = range/15; measured 0.0777 */
    {MEMRA_QT_Q5_0, 0.051},  /* D = amax/16; measured 0.0424 */
    {MEMRA_QT_Q5_1, 0.045},  /* D = range/31; measured 0.0377 */
    {MEMRA_QT_IQ4_NL, 0.092}, /* 16-level non-uniform codebook, fitted scale; measured 0.0763 */
    {MEMRA_QT_IQ4_XS, 0.092}, /* IQ4_NL + 6-bit group scales; measured 0.0769 */
    {MEMRA_QT_Q4_K, 0.085},  /* searched scale/min, 6-bit scales; measured 0.0709 */
    {MEMRA_QT_Q5_K, 0.044},  /* measured 0.0362 */
    {MEMRA_QT_Q6_K, 0.021},  /* D = amax/32 per 16, int8 scales; measured 0.0176 */
    {MEMRA_QT_MXFP4, 0.137}, /* E2M1 with a power-of-two scale; measured 0.114 */
    {MEMRA_QT_NVFP4, 0.113}, /* E2M1 with a UE4M3 scale per 16; measured 0.0945 */
};

START_TEST(test_roundtrip_error)
{
    const int64_t n = 16 * 1024;
    tu_rng r;
    tu_rng_seed(&r, 1234);
    float *x = random_normal(&r, (size_t)n, 1.0f), *y = malloc((size_t)n * sizeof *y);
    uint8_t *q = malloc((size_t)n * 4);
    for (size_t i = 0; i < sizeof k_rt_bounds / sizeof k_rt_bounds[0]; i++) {
        const memra_qtype t = k_rt_bounds[i].t;
        ck_assert_int_eq(memra_quantize_row(t, x, q, n), 0);
        ck_assert_int_eq(memra_dequantize_row(t, q, y, n), 0);
        double se = 0, sx = 0;
        for (int64_t j = 0; j < n; j++) {
            ck_assert_msg(isfinite(y[j]), "%s: non-finite at %lld", qname(t), (long long)j);
            se += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
            sx += (double)x[j] * x[j];
        }
        const double rel = sqrt(se / sx);
        ck_assert_msg(rel < k_rt_bounds[i].bound, "%s: RMSE/RMS %.4g >= bound %.4g", qname(t), rel,
                      k_rt_bounds[i].bound);
    }
    free(x);
    free(y);
    free(q);
}
END_TEST

/* Special inputs: zeros give zeros, a constant block is reproduced closely, all types are
 * deterministic, non-finite input is refused. */
START_TEST(test_quantize_special_inputs)
{
    const int64_t n = 512;
    float x[512], y[512];
    uint8_t q[2048], q2[2048];
    for (size_t i = 0; i < sizeof k_rt_bounds / sizeof k_rt_bounds[0]; i++) {
        const memra_qtype t = k_rt_bounds[i].t;
        memset(x, 0, sizeof x);
        ck_assert_int_eq(memra_quantize_row(t, x, q, n), 0);
        ck_assert_int_eq(memra_dequantize_row(t, q, y, n), 0);
        for (int j = 0; j < n; j++)
            ck_assert_msg(y[j] == 0.0f, "%s: zero input gives %g at %d", qname(t), (double)y[j], j);
        for (int j = 0; j < n; j++)
            x[j] = 0.3f;
        ck_assert_int_eq(memra_quantize_row(t, x, q, n), 0);
        ck_assert_int_eq(memra_quantize_row(t, x, q2, n), 0);
        ck_assert_mem_eq(q, q2, memra_quant_row_bytes(t, n));
        ck_assert_int_eq(memra_dequantize_row(t, q, y, n), 0);
        /* The coarsest grid, E2M1 (MXFP4/NVFP4), has relative gaps up to 2/4 (between 4 and
         * 6), so the nearest point is within 20% (0.3 -> 0.25 with a power-of-two scale). */
        for (int j = 0; j < n; j++)
            ck_assert_msg(fabsf(y[j] - 0.3f) <= 0.3f * 0.2f, "%s: constant 0.3 -> %g", qname(t),
                          (double)y[j]);
        x[7] = NAN;
        if (memra_qtype_get((uint32_t)t)->block_elems > 1)
            ck_assert_int_eq(memra_quantize_row(t, x, q, n), -1);
        x[7] = INFINITY;
        if (memra_qtype_get((uint32_t)t)->block_elems > 1)
            ck_assert_int_eq(memra_quantize_row(t, x, q, n), -1);
    }
}
END_TEST

/* NVFP4 scale encoding: a sub-block whose amax is 6 × (a UE4M3 value v) must get exactly
 * v's code, for every code 0x01..0x7E; bit 7 is never set. */
START_TEST(test_nvfp4_scale_codes)
{
    float x[64];
    uint8_t q[36];
    for (int c = 1; c <= 0x7E; c++) {
        const float v = 2.0f * memra_ue4m3_half_to_f32((uint8_t)c);
        for (int j = 0; j < 64; j++)
            x[j] = (j % 16 == 3) ? -6.0f * v : 0.5f * v;
        ck_assert_int_eq(memra_quantize_row(MEMRA_QT_NVFP4, x, q, 64), 0);
        for (int s = 0; s < 4; s++)
            ck_assert_msg(q[s] == c, "code 0x%02x encoded as 0x%02x", c, q[s]);
        float y[64];
        memra_dequantize_row(MEMRA_QT_NVFP4, q, y, 64);
        ck_assert(y[3] == -6.0f * v && y[0] == 0.5f * v); /* both on the E2M1 grid */
    }
    /* Above the largest scale (448 · 6) the block saturates instead of wrapping. */
    for (int j = 0; j < 64; j++)
        x[j] = 1e6f;
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_NVFP4, x, q, 64), 0);
    ck_assert_uint_eq(q[0], 0x7E);
}
END_TEST

/* MXFP4 exponent: amax in [2^k, 2^(k+1)) gives e = k - 2 + 127 (spec §3.9). */
START_TEST(test_mxfp4_exponent)
{
    float x[32];
    uint8_t q[17];
    for (int k = -120; k <= 120; k += 7) {
        for (int j = 0; j < 32; j++)
            x[j] = ldexpf(j == 9 ? 1.999f : 0.25f, k);
        ck_assert_int_eq(memra_quantize_row(MEMRA_QT_MXFP4, x, q, 32), 0);
        ck_assert_int_eq(q[0], k - 2 + 127);
    }
}
END_TEST

/* -------------------------------------------------------------------------------- 4. q8_1 */

/* The engine q8_1 against the numpy evaluation of spec §4.2 [engine] (ties, negative
 * extremal, zeros, fp16(d) != d, huge/tiny/subnormal, Inf/NaN), byte for byte. */
START_TEST(test_q8_1_golden)
{
    golden g;
    golden_load("q8_1.bin", &g);
    const int64_t n = g.na / 4, nblk = n / 32;
    ck_assert_uint_eq(g.nb, (uint32_t)(nblk * 36));
    ck_assert_uint_eq(sizeof(memra_block_q8_1), 36);
    memra_block_q8_1 *y = malloc((size_t)nblk * sizeof *y);
    memra_quantize_q8_1((const float *)g.a, y, n);
    assert_same_bytes((const uint8_t *)y, g.b, g.nb, 36, "q8_1 vs numpy engine formula");
    /* Spot checks named by spec §6.3: block 1 has d = 1 and ties 2.5 -> 3, -2.5 -> -3,
     * 0.5 -> 1; block 2's extremal element is negative -> -127; block 0 is all zero. */
    ck_assert_int_eq(y[1].qs[1], 3);
    ck_assert_int_eq(y[1].qs[2], -3);
    ck_assert_int_eq(y[1].qs[3], 1);
    ck_assert_int_eq(y[2].qs[0], -127);
    ck_assert_uint_eq(y[0].d, 0);
    ck_assert_uint_eq(y[0].s, 0);
    /* Spec §6.3 asks to record the CPU-reference variant (§4.1: s = fp16(f(Σq)·d) with the
     * fp32 d) next to the engine's s = fp16(Σx): on the random normal blocks (from block 11
     * on) they differ in most blocks, which is why the engine never mixes the two. */
    int differ = 0, total = 0;
    for (int64_t b = 11; b < nblk; b++, total++) {
        const float *xb = (const float *)g.a + 32 * b;
        float amax = 0.0f;
        int sq = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
            sq += y[b].qs[j];
        }
        differ += memra_f32_to_fp16((float)sq * (amax / 127.0f)) != y[b].s;
    }
    ck_assert_msg(differ > total / 2, "s variants differ in only %d of %d blocks", differ, total);
    free(y);
    golden_free(&g);
}
END_TEST

/* The GPU quantizer (nvrtc_templates/quantize_q8_1.cuh) forms d = amax / 127 as
 * (float)((double)amax * (1.0 / 127)): the same float as the IEEE division for every
 * amax >= 0 (all 2^31 bit patterns with the sign clear, +inf and NaN included; the exact
 * quotient is never within 2^-32 of a float rounding boundary, the double product within
 * 2^-52 of the quotient). */
START_TEST(test_q8_1_scale_by_double)
{
    uint64_t bad = 0;
    for (uint32_t u = 0; u < 0x80000000u; u++) {
        float a, x, y;
        memcpy(&a, &u, sizeof a);
        x = a / 127.0f;
        y = (float)((double)a * (1.0 / 127.0));
        bad += memcmp(&x, &y, sizeof x) != 0 && !(x != x && y != y);
    }
    ck_assert_msg(bad == 0, "%llu amax values give another d", (unsigned long long)bad);
}
END_TEST

/* A row whose length is not a multiple of 32 quantizes as if zero-padded; whole blocks
 * are independent of their neighbours. */
START_TEST(test_q8_1_tail)
{
    tu_rng r;
    tu_rng_seed(&r, 7);
    float x[96] = {0};
    for (int i = 0; i < 71; i++)
        x[i] = tu_rng_normal(&r);
    memra_block_q8_1 a[3], b[3];
    memset(a, 0xAB, sizeof a);
    memra_quantize_q8_1(x, a, 71);
    memra_quantize_q8_1(x, b, 96);
    ck_assert_mem_eq(a, b, sizeof a);
    memra_quantize_q8_1(x + 32, b, 39);
    ck_assert_mem_eq(&a[1], &b[0], 2 * sizeof a[0]);
}
END_TEST

/* ----------------------------------------------------------------------- 5. dot products */

/* A weight row of type t with n elements: half the blocks quantized from normal data (the
 * realistic case), the other half random bytes with sane fp16 scales (every code and scale
 * pattern, as spec §6.2). Returns malloc'd bytes; *w receives the dequantized row. */
static uint8_t *make_weights(tu_rng *r, memra_qtype t, int64_t n, float *w)
{
    const memra_qtype_info *info = memra_qtype_get((uint32_t)t);
    const size_t bytes = memra_quant_row_bytes(t, n);
    uint8_t *q = malloc(bytes);
    float *x = random_normal(r, (size_t)n, 0.05f);
    ck_assert_int_eq(memra_quantize_row(t, x, q, n), 0);
    free(x);
    const int64_t nblk = n / info->block_elems;
    if (info->block_elems > 1) {
        for (int64_t b = 1; b < nblk; b += 2) {
            uint8_t *blk = q + b * info->block_bytes;
            uint8_t keep[4];
            memcpy(keep, blk, 4); /* scale bytes at offset 0 (all but Q6_K) stay sane */
            for (uint32_t j = 0; j < info->block_bytes; j++)
                blk[j] = (uint8_t)tu_rng_u64(r);
            if (t == MEMRA_QT_Q6_K)
                memcpy(blk + 208, q + 208, 2);
            else if (t == MEMRA_QT_MXFP4)
                blk[0] = (uint8_t)(110 + tu_rng_u64(r) % 20);
            else if (t == MEMRA_QT_NVFP4)
                for (int s = 0; s < 4; s++)
                    blk[s] = (uint8_t)(tu_rng_u64(r) % 0x7E);
            else
                memcpy(blk, keep, 4);
        }
    }
    ck_assert_int_eq(memra_dequantize_row(t, q, w, n), 0);
    return q;
}

/* Checks one (type, n) case; returns nothing, fails with the worst numbers. */
static void check_dot_case(tu_rng *r, memra_qtype t, int64_t n)
{
    float *w = malloc((size_t)n * sizeof *w);
    uint8_t *wq = make_weights(r, t, n, w);
    float *x = random_normal(r, (size_t)n, 1.0f);
    memra_block_q8_1 *a = malloc((size_t)(n / 32) * sizeof *a);
    memra_quantize_q8_1(x, a, n);

    const float got = memra_vec_dot_q8_1(t, wq, a, n);
    ck_assert_msg(isfinite(got), "%s n=%lld: dot is %g", qname(t), (long long)n, (double)got);

    /* (c) the row dot is T = T + r_b over memra_vec_dot_block in block order, bit for bit. */
    const int de = memra_quant_dot_block_elems(t);
    const size_t db = memra_quant_dot_block_bytes(t);
    float T = 0.0f;
    for (int64_t b = 0; b < n / de; b++)
        T = T + memra_vec_dot_block(t, wq + b * db, a + b * (de / 32));
    ck_assert_msg(memcmp(&T, &got, 4) == 0, "%s: row dot %.9g != block sum %.9g", qname(t),
                  (double)got, (double)T);

    /* (a) against Σ w_j·(d_a·q_j) in f64 on the same q8_1 bytes. The engine differs by its
     * fp32 roundings only: <= 12 RN steps per dot block (tree8 epilogue depth 3 plus the
     * scale products) and one per block in the row sum, each <= 2^-24 of a partial sum
     * bounded by Σ|w_j a_j| (+ the dequantized w_j's own <= 3 roundings). So |err| <=
     * (nblocks + 16)·2^-24·Σ|w_j a_j|; we assert 2× that. */
    double ref = 0, mag = 0, xref = 0, qbound = 0;
    for (int64_t j = 0; j < n; j++) {
        const double da = memra_fp16_to_f32(a[j / 32].d), aj = da * a[j / 32].qs[j % 32];
        ref += (double)w[j] * aj;
        mag += fabs((double)w[j] * aj);
        xref += (double)w[j] * x[j];
        /* (b) |a_j - x_j| <= d/2 (rounding to the grid of the fp32 d) + |x_j|·2^-11 (fp16
         * rounding of d moves every a_j by that relative amount) + d_a·2^-11 slack. */
        qbound += fabs((double)w[j]) * (0.5 * da * (1 + 0x1p-10) + fabs((double)x[j]) * 0x1p-11);
    }
    const double tol = 2.0 * (double)(n / de + 16) * 0x1p-24 * mag;
    ck_assert_msg(fabs(got - ref) <= tol, "%s n=%lld: got %.9g want %.9g (|err| %.3g > tol %.3g)",
                  qname(t), (long long)n, (double)got, ref, fabs(got - ref), tol);
    /* (b) against the unquantized activations: the q8_1 error bound plus (a)'s. */
    ck_assert_msg(fabs(got - xref) <= qbound + tol, "%s n=%lld: got %.9g, Σw·x %.9g (|err| %.3g > %.3g)",
                  qname(t), (long long)n, (double)got, xref, fabs(got - xref), qbound + tol);
    free(w);
    free(wq);
    free(x);
    free(a);
}

START_TEST(test_dot_accuracy)
{
    tu_rng r;
    tu_rng_seed(&r, 99);
    for (size_t i = 0; i < N_DOT; i++) {
        const memra_qtype t = k_dot_types[i];
        const int64_t de = memra_quant_dot_block_elems(t);
        /* one dot block (size-1 row), a few, an odd count, and a model-sized row */
        const int64_t ns[] = {de, 3 * de, 17 * de, 4096, 14336};
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            check_dot_case(&r, t, ns[k]);
    }
}
END_TEST

/* The engine dot formula of every type (the contract the CUDA mmvq templates reproduce) vs
 * an independent numpy float32 implementation of the documented formulas, bit for bit, on
 * random weight blocks (plus edge blocks) and random q8_1 blocks including q = -128. */
START_TEST(test_dot_golden)
{
    for (size_t i = 0; i < N_DOT; i++) {
        const memra_qtype t = k_dot_types[i];
        char name[64];
        snprintf(name, sizeof name, "dot_%s.bin", qname(t));
        golden g;
        golden_load(name, &g);
        ck_assert_uint_eq(g.type, (uint32_t)t);
        const size_t db = memra_quant_dot_block_bytes(t);
        const int nq8 = memra_quant_dot_block_elems(t) / 32;
        const size_t nblk = g.nb / 4;
        ck_assert_uint_eq(g.na, nblk * (db + (size_t)nq8 * 36));
        const uint8_t *aq = g.a + nblk * db;
        float *r = malloc(nblk * sizeof *r);
        for (size_t b = 0; b < nblk; b++) {
            memra_block_q8_1 a[8];
            memcpy(a, aq + b * (size_t)nq8 * 36, (size_t)nq8 * 36);
            r[b] = memra_vec_dot_block(t, g.a + b * db, a);
        }
        assert_same_floats(r, (const float *)g.b, nblk, name);
        free(r);
        golden_free(&g);
    }
}
END_TEST

/* For the one-scale 32-element types, r = (d_w × d_a) × f(S) is the correctly rounded
 * value of d_w·d_a·S (d_w × d_a is exact). Check that claim against f64, where
 * d_a·Σ w_j q_j is exact (w_j = d_w·c_j exact in fp32, |Σ| < 2^53), rounded once to fp32. */
START_TEST(test_dot_correctly_rounded)
{
    static const memra_qtype types[] = {MEMRA_QT_Q8_0, MEMRA_QT_Q4_0, MEMRA_QT_Q5_0,
                                        MEMRA_QT_IQ4_NL};
    tu_rng r;
    tu_rng_seed(&r, 5);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const memra_qtype t = types[i];
        const int64_t n = 32 * 256;
        float *w = malloc((size_t)n * sizeof *w);
        uint8_t *wq = make_weights(&r, t, n, w);
        float *x = random_normal(&r, (size_t)n, 3.0f);
        memra_block_q8_1 *a = malloc((size_t)(n / 32) * sizeof *a);
        memra_quantize_q8_1(x, a, n);
        const size_t bb = memra_qtype_get((uint32_t)t)->block_bytes;
        for (int64_t b = 0; b < n / 32; b++) {
            double s = 0;
            for (int j = 0; j < 32; j++)
                s += (double)w[32 * b + j] * a[b].qs[j];
            const float want = (float)(s * memra_fp16_to_f32(a[b].d));
            const float got = memra_vec_dot_block(t, wq + b * bb, &a[b]);
            ck_assert_msg(memcmp(&got, &want, 4) == 0, "%s block %lld: %.9g != %.9g", qname(t),
                          (long long)b, (double)got, (double)want);
        }
        free(w);
        free(wq);
        free(x);
        free(a);
    }
}
END_TEST

/* Integer parts at their extremes stay exact: all codes at the largest magnitude against
 * q = ±127 (the int32 sums are far below overflow and below 2^24 where f() is exact). */
START_TEST(test_dot_extremes)
{
    memra_block_q8_1 a[8];
    for (int k = 0; k < 8; k++) {
        a[k].d = 0x3C00; /* 1.0 */
        a[k].s = 0;
        for (int j = 0; j < 32; j++)
            a[k].qs[j] = (int8_t)((j & 1) ? -127 : 127);
    }
    uint8_t q6[210];
    memset(q6, 0, sizeof q6); /* every code -32 */
    memset(q6 + 192, 0x80, 16); /* scales -128 */
    q6[209] = 0x3C;             /* d = 1 */
    float w[256];
    memra_dequantize_row(MEMRA_QT_Q6_K, q6, w, 256);
    double ref = 0;
    for (int j = 0; j < 256; j++)
        ref += (double)w[j] * a[j / 32].qs[j % 32];
    ck_assert(memra_vec_dot_block(MEMRA_QT_Q6_K, q6, a) == (float)ref);
    /* q = -128 is legal q8_1 bytes (the quantizer never writes it): X_k = -128·(-32·-128·16)·2
     * = -2^24, the largest |X_k| possible, still exact in fp32. */
    for (int k = 0; k < 8; k++)
        memset(a[k].qs, 0x80, 32);
    ref = 0;
    for (int j = 0; j < 256; j++)
        ref += (double)w[j] * -128;
    ck_assert(ref == -16777216.0 * 8);
    ck_assert(memra_vec_dot_block(MEMRA_QT_Q6_K, q6, a) == (float)ref);
}
END_TEST

START_TEST(test_bad_arguments)
{
    float x[64] = {0}, y[64];
    uint8_t q[256];
    memra_block_q8_1 a[2];
    memra_quantize_q8_1(x, a, 64);
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_Q4_0, q, y, 33), -1);  /* not a block multiple */
    ck_assert_int_eq(memra_dequantize_row((memra_qtype)4, q, y, 32), -1); /* removed id */
    ck_assert_int_eq(memra_dequantize_row((memra_qtype)41, q, y, 32), -1);
    ck_assert_int_eq(memra_dequantize_row((memra_qtype)-1, q, y, 32), -1);
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_Q2_K, q, y, 256), -1); /* unsupported */
    ck_assert_int_eq(memra_dequantize_row(MEMRA_QT_Q4_0, NULL, y, 32), -1);
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_Q4_K, x, q, 64), -1);
    ck_assert_int_eq(memra_quantize_row(MEMRA_QT_Q4_0, x, NULL, 32), -1);
    ck_assert(isnan(memra_vec_dot_q8_1(MEMRA_QT_Q4_0, q, a, 48)));
    ck_assert(isnan(memra_vec_dot_q8_1(MEMRA_QT_Q8_K, q, a, 256)));
    ck_assert(isnan(memra_vec_dot_block(MEMRA_QT_I32, q, a)));
    ck_assert_uint_eq(memra_quant_row_bytes(MEMRA_QT_Q4_K, 255), 0);
    ck_assert_uint_eq(memra_quant_row_bytes(MEMRA_QT_Q4_K, 512), 288);
    ck_assert_uint_eq(memra_quant_row_bytes((memra_qtype)5, 32), 0);
    ck_assert_int_eq(memra_quant_dot_block_elems(MEMRA_QT_F16), 32);
    ck_assert_int_eq(memra_quant_dot_block_elems(MEMRA_QT_Q8_K), 0);
    ck_assert_uint_eq(memra_quant_dot_block_bytes(MEMRA_QT_NVFP4), 36);
    ck_assert_uint_eq(memra_quant_dot_block_bytes(MEMRA_QT_BF16), 64);
    ck_assert(memra_quant_can_dequantize(MEMRA_QT_Q8_K) && !memra_quant_can_dot(MEMRA_QT_Q8_K));
    ck_assert(!memra_quant_can_dequantize(MEMRA_QT_Q3_K));
}
END_TEST

Suite *make_quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("exact");
    tcase_add_test(tc, test_fp16_golden);
    tcase_add_test(tc, test_half_exhaustive);
    tcase_add_test(tc, test_fp4_scale_decoders);
    tcase_add_test(tc, test_dequant_golden);
    tcase_add_test(tc, test_dequant_float_types);
    tcase_add_test(tc, test_quantize_matches_gguf_py);
    tcase_add_test(tc, test_memra_quantized_reads_in_gguf_py);
    tcase_add_test(tc, test_q8_1_golden);
    tcase_add_test(tc, test_q8_1_tail);
    tcase_add_test(tc, test_dot_golden);
    tcase_add_test(tc, test_dot_correctly_rounded);
    tcase_add_test(tc, test_dot_extremes);
    tcase_add_test(tc, test_bad_arguments);
    suite_add_tcase(s, tc);
    TCase *tq = tcase_create("quality");
    tcase_set_timeout(tq, 60);
    tcase_add_test(tq, test_roundtrip_error);
    tcase_add_test(tq, test_quantize_special_inputs);
    tcase_add_test(tq, test_nvfp4_scale_codes);
    tcase_add_test(tq, test_mxfp4_exponent);
    tcase_add_test(tq, test_dot_accuracy);
    tcase_add_test(tq, test_q8_1_scale_by_double); /* 2^31 inputs: ~2 s, more under ASan */
    suite_add_tcase(s, tq);
    return s;
}
