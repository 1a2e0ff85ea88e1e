/*
 * test_ops_gpu.c — every nvcc-compiled CUDA op (kernels/<op>.cu, entries in
 * kernels/cuda_ops.h) against its CPU reference (kernels/ref/, the oracle, itself checked
 * against f64 implementations in tests/test_ops.c), over shape tables with tiers 1..16 (odd
 * ones included), the qwen35 0.8B / 9B / 27B head geometries, head_dim 64 / 128 / 256 (and the
 * generic kernels' odd sizes), attention contexts 1, 7, 1000 and 5000 with f16 and q8_0 KV.
 *
 * Checks, per op:
 *   - agreement with the reference: bit-identical (memcmp) for every output of every op (the
 *     exactness contract: each op and its reference share the arithmetic and the order,
 *     kernels/exact_math.h for the transcendentals); NaN / Inf where the reference has a
 *     number fails;
 *   - outputs are poisoned (0xFF bytes = NaN) before every launch, so an unwritten element
 *     fails;
 *   - isolation: row r of a B-wide launch is memcmp-equal to the same row launched alone at
 *     B = 1 (and at another position of another tier), and two identical launches give
 *     identical bytes (run to run).
 * Binary memra-gpu-ops-tests, run with CK_FORK=no (CUDA does not survive fork). Without a
 * usable GPU every test passes with a "SKIP <test>: <reason>" line on stderr.
 * Timing (MEMRA_GPU_TIMING=1): test_timing prints per-kernel times measured with CUDA events.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_ops.h"
#include "exact_math.h"
#include "memra.h"
#include "ops.h"
#include "quant.h"
#include "synth_fill.h"
#include "gpu/gpu_ops_util.h"
#include "test_util.h"

/* ================================== infrastructure ================================== */

static void h2d(void *d, const void *h, size_t n) { CK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); }
static void d2h(void *h, const void *d, size_t n) { CK_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)); }
static void poison(void *d, size_t n) { CK_CUDA(cudaMemset(d, 0xFF, n)); }

static float *rand_vec(tu_rng *r, size_t n, float scale)
{
    float *v = halloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = tu_rng_normal(r) * scale;
    return v;
}

/* Per-row state regions (KV caches, conv / ssm state) as the slot pool lays them out: one
 * block, row b's region at slot perm(b) (rows deliberately not in slot order), 256-byte
 * aligned, with a host mirror for the CPU reference and the two pointer tables. */
typedef struct regions {
    int n;
    size_t bytes, stride;
    uint8_t *h, *d;    /* host mirror / device block */
    uint64_t *htab;    /* [n] host row bases (for the reference) */
    uint64_t *dtab;    /* [n] device array of device row bases */
    uint64_t *dbase;   /* [n] host copy of the device row bases */
} regions;

static int slot_of(int b, int n) { return n - 1 - b; } /* reversed: the table is honoured */

static void regions_init(regions *r, int n, size_t bytes)
{
    r->n = n;
    r->bytes = bytes;
    r->stride = (bytes + 255) / 256 * 256;
    r->h = halloc(r->stride * (size_t)n);
    r->d = dalloc(r->stride * (size_t)n);
    r->htab = halloc(sizeof(uint64_t) * (size_t)n);
    r->dbase = halloc(sizeof(uint64_t) * (size_t)n);
    for (int b = 0; b < n; b++) {
        r->htab[b] = (uint64_t)(uintptr_t)(r->h + (size_t)slot_of(b, n) * r->stride);
        r->dbase[b] = (uint64_t)(uintptr_t)(r->d + (size_t)slot_of(b, n) * r->stride);
    }
    r->dtab = dup_h2d(r->dbase, sizeof(uint64_t) * (size_t)n);
}

static uint8_t *region_h(const regions *r, int b) { return (uint8_t *)(uintptr_t)r->htab[b]; }
static void regions_upload(regions *r) { h2d(r->d, r->h, r->stride * (size_t)r->n); }
static void regions_download(const regions *r, uint8_t *buf) { d2h(buf, r->d, r->stride * (size_t)r->n); }
/* Row b's region as downloaded into buf (a copy of the whole block). */
static uint8_t *region_in(const regions *r, uint8_t *buf, int b)
{
    return buf + (size_t)slot_of(b, r->n) * r->stride;
}
/* A one-entry device pointer table for row b (the B = 1 isolation launches). */
static uint64_t *regions_dtab1(const regions *r, int b) { return dup_h2d(&r->dbase[b], sizeof(uint64_t)); }

/* Fails on the first element that is not finite or off by more than tol[i]; reports the
 * index, both values and the worst ratio. */
static void check_bound(const char *what, const float *got, const float *want, const double *tol, size_t n)
{
    long first = -1;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        const double ratio = isfinite(got[i]) && isfinite(want[i]) ? d / (tol[i] > 0 ? tol[i] : 1e-300) : INFINITY;
        if (ratio > worst)
            worst = ratio;
        if (!(ratio <= 1.0) && first < 0)
            first = (long)i;
    }
    ck_assert_msg(first < 0, "%s: mismatch at %ld: got %.9g want %.9g tol %.3g (worst ratio %.3g)", what, first,
                  first >= 0 ? (double)got[first] : 0.0, first >= 0 ? (double)want[first] : 0.0,
                  first >= 0 ? tol[first] : 0.0, worst);
}

/* Fails unless a and b are byte-identical; names the first differing byte. */
static void check_same(const char *what, const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    if (memcmp(x, y, n) == 0)
        return;
    size_t i = 0, ndiff = 0;
    while (x[i] == y[i])
        i++;
    for (size_t k = i; k < n; k++)
        ndiff += x[k] != y[k];
    char gx[3 * 8 + 1] = "", gy[3 * 8 + 1] = ""; /* 8 bytes from the first difference */
    for (size_t k = i; k < n && k < i + 8; k++) {
        snprintf(gx + 3 * (k - i), 4, " %02x", x[k]);
        snprintf(gy + 3 * (k - i), 4, " %02x", y[k]);
    }
    ck_abort_msg("%s: %zu of %zu bytes differ, first at %zu:%s vs%s", what, ndiff, n, i, gx, gy);
}

/* Bit-identical f32 arrays, except that any NaN equals any NaN: the GPU writes the canonical
 * NaN where x86 propagates an operand's payload (NaN scales in random-bytes tables). NaN
 * positions must still match; unwritten elements are caught by the finite-data cases. */
static void check_same_f32(const char *what, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, a + i, 4);
        memcpy(&y, b + i, 4);
        ck_assert_msg(x == y || (isnan(a[i]) && isnan(b[i])), "%s: element %zu: 0x%08x vs 0x%08x", what, i, x, y);
    }
}

/* The GPU's q8_1 bytes equal memra_quantize_q8_1 of the GPU's own f32 values. */
static void check_q8_1_of(const char *what, const void *yq_gpu, const float *y_gpu, int64_t n)
{
    memra_block_q8_1 *want = halloc(sizeof *want * (size_t)(n / 32));
    memra_quantize_q8_1(y_gpu, want, n);
    check_same(what, yq_gpu, want, sizeof *want * (size_t)(n / 32));
}

static double *tol_rel(size_t n, const float *want, double atol, double rtol)
{
    double *t = halloc(sizeof *t * n);
    for (size_t i = 0; i < n; i++)
        t[i] = atol + rtol * fabs((double)want[i]);
    return t;
}

/* ======================================= embed ====================================== */

/* The GGUF row types of quant.c: each table is the reference quantizer's output of random
 * rows (real data) or random bytes (every bit pattern, NaN scales included). */
static const memra_qtype k_embed_types[] = {
    MEMRA_QT_F32,  MEMRA_QT_F16,  MEMRA_QT_BF16, MEMRA_QT_Q8_0,   MEMRA_QT_Q4_0,  MEMRA_QT_Q4_1,
    MEMRA_QT_Q5_0, MEMRA_QT_Q5_1, MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4, MEMRA_QT_NVFP4, MEMRA_QT_Q4_K,
    MEMRA_QT_Q5_K, MEMRA_QT_Q6_K, MEMRA_QT_IQ4_XS, MEMRA_QT_Q8_K,
};

static void embed_case(memra_qtype qt, int n_embd, int n_vocab, int b, int random_bytes, tu_rng *r)
{
    const size_t rb = memra_quant_row_bytes(qt, n_embd);
    ck_assert_uint_gt(rb, 0);
    uint8_t *table = halloc(rb * (size_t)n_vocab);
    if (random_bytes) {
        for (size_t i = 0; i < rb * (size_t)n_vocab; i++)
            table[i] = (uint8_t)tu_rng_u64(r);
    } else {
        float *src = rand_vec(r, (size_t)n_embd, 1.0f);
        for (int t = 0; t < n_vocab; t++) {
            for (int e = 0; e < n_embd; e++)
                src[e] = tu_rng_normal(r) * (0.5f + (float)(t % 5));
            ck_assert_int_eq(memra_quantize_row(qt, src, table + rb * (size_t)t, n_embd), 0);
        }
    }
    int32_t *tok = halloc(sizeof *tok * (size_t)b);
    for (int i = 0; i < b; i++)
        tok[i] = (int32_t)(tu_rng_u64(r) % (uint64_t)n_vocab);
    tok[b - 1] = b > 1 ? -1 : tok[0];      /* out of range: zero row */
    if (b > 2)
        tok[b / 2] = n_vocab;
    memra_embed_args a = {.table = table, .tokens = tok, .x = halloc(sizeof(float) * (size_t)b * n_embd),
                          .qtype = qt, .n_embd = n_embd, .n_vocab = n_vocab, .b = b, .row_bytes = rb};
    ck_assert_int_eq(memra_embed_ref(&a), MEMRA_OK);
    memra_embed_args g = a;
    g.table = dup_h2d(table, rb * (size_t)n_vocab);
    g.tokens = dup_h2d(tok, sizeof *tok * (size_t)b);
    g.x = dalloc(sizeof(float) * (size_t)b * n_embd);
    poison(g.x, sizeof(float) * (size_t)b * n_embd);
    CK_OP(memra_embed_cuda(&g, 0));
    float *x = halloc(sizeof(float) * (size_t)b * n_embd);
    d2h(x, g.x, sizeof(float) * (size_t)b * n_embd);
    char what[96];
    snprintf(what, sizeof what, "embed %s n_embd %d b %d %s", memra_qtype_get(qt)->name, n_embd, b,
             random_bytes ? "random bytes" : "quantized");
    check_same_f32(what, x, a.x, (size_t)b * n_embd); /* dequantization is exact */
    if (!random_bytes) {
        double *t = tol_rel((size_t)b * n_embd, a.x, 0, 0);
        check_bound(what, x, a.x, t, (size_t)b * n_embd); /* and finite */
    }
}

START_TEST(test_embed)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xE3BEDu);
    for (size_t i = 0; i < sizeof k_embed_types / sizeof k_embed_types[0]; i++) {
        const memra_qtype qt = k_embed_types[i];
        const int be = (int)memra_qtype_get(qt)->block_elems;
        const int n = be >= 256 ? 512 : 320; /* 320: a non-power-of-two row of 32-blocks */
        embed_case(qt, n, 37, 5, 0, &r);
        embed_case(qt, n, 37, 16, 1, &r);
        embed_case(qt, be >= 64 ? be : 32, 3, 1, 0, &r);
    }
}
END_TEST

START_TEST(test_embed_rejects)
{
    GPU_OR_SKIP();
    memra_embed_args a = {.table = (void *)16, .tokens = (int32_t *)16, .x = (float *)16, .qtype = MEMRA_QT_Q2_K,
                          .n_embd = 256, .n_vocab = 4, .b = 1, .row_bytes = 84};
    ck_assert_int_eq(memra_embed_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* no GPU dequantizer */
    ck_assert_str_ne(memra_cuda_ops_error(), "");
    a.qtype = MEMRA_QT_Q4_K;
    a.row_bytes = 100; /* < one 144-byte block */
    ck_assert_int_eq(memra_embed_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    a.row_bytes = 144;
    a.x = NULL;
    ck_assert_int_eq(memra_embed_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_embed_cuda(NULL, 0), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ==================================== rms_norm_q8 =================================== */

/* q8_1 blocks: names the first differing block and its d, s and first differing code. */
static void xa_identical_q8_1(const char *what, const void *got, const void *want, size_t nblk)
{
    if (memcmp(got, want, nblk * sizeof(memra_block_q8_1)) == 0)
        return;
    const memra_block_q8_1 *g = got, *w = want;
    size_t k = 0;
    while (memcmp(g + k, w + k, sizeof *g) == 0)
        k++;
    int j = 0;
    while (j < 31 && g[k].qs[j] == w[k].qs[j])
        j++;
    ck_abort_msg("%s: q8_1 block %zu of %zu differs: d gpu %.9g (0x%04x) ref %.9g (0x%04x); s gpu %.9g (0x%04x) "
                 "ref %.9g (0x%04x); qs[%d] gpu %d ref %d",
                 what, k, nblk, (double)memra_fp16_to_f32(g[k].d), (unsigned)g[k].d, (double)memra_fp16_to_f32(w[k].d),
                 (unsigned)w[k].d, (double)memra_fp16_to_f32(g[k].s), (unsigned)g[k].s,
                 (double)memra_fp16_to_f32(w[k].s), (unsigned)w[k].s, j, g[k].qs[j], w[k].qs[j]);
}

/* Launches rms_norm_q8 on device copies of a's inputs; returns the device args. */
static memra_rms_norm_q8_args rms_gpu(const memra_rms_norm_q8_args *a, int with_f32)
{
    const size_t nx = (size_t)a->b * (size_t)a->n, nq = nx / 32 * sizeof(memra_block_q8_1);
    memra_rms_norm_q8_args g = *a;
    g.x = dup_h2d(a->x, nx * sizeof(float));
    g.w = dup_h2d(a->w, (size_t)a->n * sizeof(float));
    g.y_q = dalloc(nq);
    poison(g.y_q, nq);
    g.y_f32 = NULL;
    if (with_f32) {
        g.y_f32 = dalloc(nx * sizeof(float));
        poison(g.y_f32, nx * sizeof(float));
    }
    CK_OP(memra_rms_norm_q8_cuda(&g, 0));
    return g;
}

static void rms_case(int n, int b, tu_rng *r)
{
    const size_t nx = (size_t)b * (size_t)n, nq = nx / 32 * sizeof(memra_block_q8_1);
    memra_rms_norm_q8_args a = {.x = rand_vec(r, nx, 2.0f), .w = rand_vec(r, (size_t)n, 1.0f), .y_q = halloc(nq),
                                .y_f32 = halloc(nx * sizeof(float)), .n = n, .b = b, .eps = 1e-6f};
    ck_assert_int_eq(memra_rms_norm_q8_ref(&a), MEMRA_OK);
    memra_rms_norm_q8_args g = rms_gpu(&a, 1);
    float *y = halloc(nx * sizeof(float));
    uint8_t *yq = halloc(nq);
    d2h(y, g.y_f32, nx * sizeof(float));
    d2h(yq, g.y_q, nq);
    char what[64];
    snprintf(what, sizeof what, "rms_norm_q8 n %d b %d", n, b);
    /* the reference sums the squares in the kernel's order (rms_norm_q8.h): identical bits */
    gpu_expect_same_f32(what, y, a.y_f32, nx);
    xa_identical_q8_1(what, yq, a.y_q, nx / 32);
    /* isolation: the last row alone, at B = 1, without the f32 copy */
    memra_rms_norm_q8_args one = a;
    one.x = a.x + (size_t)(b - 1) * (size_t)n;
    one.b = 1;
    memra_rms_norm_q8_args g1 = rms_gpu(&one, 0);
    uint8_t *yq1 = halloc(nq / (size_t)b);
    d2h(yq1, g1.y_q, nq / (size_t)b);
    check_same("rms_norm_q8 row alone", yq1, yq + nq / (size_t)b * (size_t)(b - 1), nq / (size_t)b);
    /* run to run */
    memra_rms_norm_q8_args g2 = rms_gpu(&a, 1);
    uint8_t *yq2 = halloc(nq);
    d2h(yq2, g2.y_q, nq);
    check_same("rms_norm_q8 run to run", yq2, yq, nq);
}

START_TEST(test_rms_norm_q8)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x125u);
    /* 1024 threads: n < 1024 leaves threads idle, 1056 / 2080 give some threads 2 / 3 terms
     * (and a row split over CTAs a partial last one; 1600: 50 blocks, a partial 16-block slice
     * in the odd half of a register); up to 8192 the row stays in registers, 8224 and 12288
     * take the re-reading path */
    static const int ns[] = {32,   96,   1024,        1056, 1600, 2080,
                             4096, 5120, 33 * 32 * 7, 8192, 8224, 12288};
    static const int bs[] = {1, 3, 16, 7};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++)
            rms_case(ns[i], bs[j], &r);
}
END_TEST

/* ==================================== silu_mul_q8 =================================== */

/* Runs both sides for args a (host pointers); returns the GPU y_q of each slot. */
static void silu_run(const memra_silu_mul_q8_args *a, uint8_t *yq_gpu[2])
{
    memra_silu_mul_q8_args g = *a;
    for (int s = 0; s < a->n_slots; s++) {
        const size_t nv = (size_t)a->b * (size_t)a->slot[s].m * (size_t)a->slot[s].n;
        const size_t nq = nv / 32 * sizeof(memra_block_q8_1);
        g.slot[s].g = dup_h2d(a->slot[s].g, nv * sizeof(float));
        g.slot[s].u = dup_h2d(a->slot[s].u, nv * sizeof(float));
        g.slot[s].y_q = dalloc(nq);
        poison(g.slot[s].y_q, nq);
    }
    CK_OP(memra_silu_mul_q8_cuda(&g, 0));
    for (int s = 0; s < a->n_slots; s++) {
        const size_t nq = (size_t)a->b * (size_t)a->slot[s].m * (size_t)a->slot[s].n / 32 * sizeof(memra_block_q8_1);
        yq_gpu[s] = halloc(nq);
        d2h(yq_gpu[s], g.slot[s].y_q, nq);
    }
}

/* Every case is bit-identical (memra_x_siluf on both sides). exact = 1 (kept as a saturated
 * case): g in [100, 200), where e^-g < 2^-144, so silu(g) * u = g * u; otherwise g ~ 3 N(0, 1),
 * plus a few rows' worth of extreme gates (|g| up to 1e4, +-0, subnormals) in slot 0. */
static void silu_case(int b, int n0, int m0, int n1, int m1, int exact, tu_rng *r)
{
    memra_silu_mul_q8_args a = {.b = b, .n_slots = n1 ? 2 : 1};
    const int ns[2] = {n0, n1}, ms[2] = {m0, m1};
    for (int s = 0; s < a.n_slots; s++) {
        const size_t nv = (size_t)b * (size_t)ms[s] * (size_t)ns[s];
        float *gv = rand_vec(r, nv, 3.0f);
        if (exact)
            for (size_t i = 0; i < nv; i++)
                gv[i] = 100.0f + 100.0f * tu_rng_uniform(r);
        else if (s == 0) {
            static const float edge[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, -20.0f, 20.0f, -88.0f, -104.0f,
                                         -800.0f, 800.0f, -1e4f, 1e4f, 0.5f, -0.5f, 17.3f};
            for (size_t i = 0; i < nv && i < 256; i++)
                gv[i] = i < 16 ? edge[i] : gv[i] * (float)(1 + (i % 7) * 10);
        }
        a.slot[s] = (memra_silu_mul_q8_slot){.g = gv, .u = rand_vec(r, nv, 1.0f),
                                             .y_q = halloc(nv / 32 * sizeof(memra_block_q8_1)), .n = ns[s], .m = ms[s]};
    }
    ck_assert_int_eq(memra_silu_mul_q8_ref(&a), MEMRA_OK);
    uint8_t *yq[2];
    silu_run(&a, yq);
    for (int s = 0; s < a.n_slots; s++) {
        const size_t nv = (size_t)b * (size_t)ms[s] * (size_t)ns[s];
        char what[80];
        snprintf(what, sizeof what, "silu_mul_q8 slot %d b %d m %d n %d%s", s, b, ms[s], ns[s], exact ? " exact" : "");
        xa_identical_q8_1(what, yq[s], a.slot[s].y_q, nv / 32);
    }
}

START_TEST(test_silu_mul_q8)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x5170u);
    silu_case(1, 32, 1, 0, 0, 0, &r);
    silu_case(3, 96, 1, 0, 0, 0, &r);
    silu_case(16, 12288, 1, 0, 0, 0, &r);    /* 9B FFN */
    silu_case(5, 512, 8, 512, 1, 0, &r);     /* MoE: 8 routed experts + shared expert */
    silu_case(16, 3584, 1, 0, 0, 1, &r);     /* 0.8B FFN, exact inputs */
    silu_case(7, 512, 10, 1024, 1, 1, &r);   /* 397B-like MoE, exact inputs */
}
END_TEST

START_TEST(test_silu_mul_q8_isolation)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x5171u);
    const int b = 11, n = 1024;
    memra_silu_mul_q8_args a = {.b = b, .n_slots = 1};
    a.slot[0] = (memra_silu_mul_q8_slot){.g = rand_vec(&r, (size_t)b * n, 3.0f), .u = rand_vec(&r, (size_t)b * n, 1.0f),
                                         .n = n, .m = 1};
    uint8_t *full[2], *full2[2], *one[2];
    silu_run(&a, full);
    silu_run(&a, full2);
    const size_t row = (size_t)n / 32 * sizeof(memra_block_q8_1);
    check_same("silu_mul_q8 run to run", full[0], full2[0], row * b);
    memra_silu_mul_q8_args a1 = a;
    a1.b = 1;
    a1.slot[0].g += (size_t)6 * n;
    a1.slot[0].u += (size_t)6 * n;
    silu_run(&a1, one);
    check_same("silu_mul_q8 row alone", one[0], full[0] + row * 6, row);
}
END_TEST

/* ===================================== moe_route ==================================== */

static void route_gpu(const memra_moe_route_args *a, int32_t *ids, float *w)
{
    const size_t nk = (size_t)a->b * (size_t)a->n_used;
    memra_moe_route_args g = *a;
    g.logits = dup_h2d(a->logits, sizeof(float) * (size_t)a->b * (size_t)a->n_expert);
    g.ids = dalloc(nk * sizeof(int32_t));
    g.weights = dalloc(nk * sizeof(float));
    poison(g.ids, nk * sizeof(int32_t));
    poison(g.weights, nk * sizeof(float));
    CK_OP(memra_moe_route_cuda(&g, 0));
    d2h(ids, g.ids, nk * sizeof(int32_t));
    d2h(w, g.weights, nk * sizeof(float));
}

static void route_case(int n_expert, int n_used, int b, int ties, tu_rng *r)
{
    const size_t nk = (size_t)b * (size_t)n_used;
    float *l = rand_vec(r, (size_t)b * n_expert, 2.0f);
    if (ties)
        for (size_t i = 0; i < (size_t)b * n_expert; i++)
            l[i] = (float)((i * 7) % 3); /* many exact ties: lower index first */
    memra_moe_route_args a = {.logits = l, .ids = halloc(nk * sizeof(int32_t)), .weights = halloc(nk * sizeof(float)),
                              .n_expert = n_expert, .n_used = n_used, .b = b};
    ck_assert_int_eq(memra_moe_route_ref(&a), MEMRA_OK);
    int32_t *ids = halloc(nk * sizeof(int32_t));
    float *w = halloc(nk * sizeof(float));
    route_gpu(&a, ids, w);
    char what[80];
    snprintf(what, sizeof what, "moe_route E %d k %d b %d%s", n_expert, n_used, b, ties ? " ties" : "");
    /* Z in the kernel's order and memra_x_expf on both sides (moe_route.h): identical pi,
     * so identical ids (a total order) and identical weights. */
    for (size_t i = 0; i < nk; i++)
        ck_assert_msg(ids[i] == a.ids[i], "%s: ids[%zu] = %d, want %d", what, i, ids[i], a.ids[i]);
    gpu_expect_same_f32(what, w, a.weights, nk);
    if (b > 1) {
        memra_moe_route_args one = a;
        one.b = 1;
        one.logits = l + (size_t)(b - 1) * (size_t)n_expert;
        int32_t *ids1 = halloc((size_t)n_used * sizeof(int32_t));
        float *w1 = halloc((size_t)n_used * sizeof(float));
        route_gpu(&one, ids1, w1);
        check_same("moe_route ids row alone", ids1, ids + (size_t)(b - 1) * n_used, (size_t)n_used * sizeof(int32_t));
        check_same("moe_route weights row alone", w1, w + (size_t)(b - 1) * n_used, (size_t)n_used * sizeof(float));
    }
}

START_TEST(test_moe_route)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x2017u);
    route_case(8, 2, 3, 0, &r);
    route_case(64, 8, 16, 0, &r);
    route_case(256, 8, 5, 0, &r);   /* 35B-A3B */
    route_case(512, 10, 16, 0, &r); /* 397B / qwen3next */
    route_case(10000, 16, 2, 0, &r); /* pi recomputed per pass (no shared-memory cache) */
    route_case(1, 1, 1, 0, &r);
    route_case(32, 7, 4, 1, &r);
    route_case(300, 64, 3, 0, &r);   /* n_expert > 256 threads: two terms for some threads */
    route_case(8192, 8, 2, 0, &r);   /* the largest shared-memory cache */
    route_case(65536, 4, 1, 0, &r);  /* the largest n_expert */
}
END_TEST

/* ===================================== attention ==================================== */

/* One attention-layer geometry. */
typedef struct attn_shape {
    const char *name;
    int n_head, n_head_kv, head_dim, n_rot;
    int sect[4];
} attn_shape;

static const attn_shape k_attn_shapes[] = {
    {"qwen35-0.8b", 8, 2, 256, 64, {11, 11, 10, 0}},
    {"qwen35-9b", 16, 4, 256, 64, {11, 11, 10, 0}},
    {"qwen35-27b", 24, 4, 256, 64, {11, 11, 10, 0}}, /* group 6: a partly masked head chunk */
    {"dh128-g4", 8, 2, 128, 128, {0, 0, 0, 0}},
    {"dh64-mha", 4, 4, 64, 32, {0, 0, 0, 0}},
    {"dh64-g16", 32, 2, 64, 64, {0, 0, 0, 0}},      /* group 16: two head chunks */
    {"dh512", 4, 2, 512, 64, {0, 0, 0, 0}},
    {"dh96-generic", 6, 2, 96, 32, {1, 1, 1, 1}},   /* scalar kernel; IMRoPE "e" sectors */
};

static uint64_t kv_entry_bytes(int kv, int dh) { return memra_kv_head_bytes(kv, dh); }

/* Writes head_dim values as one cache entry of kv type (the reference encoders). */
static void kv_encode(int kv, const float *x, uint8_t *dst, int dh)
{
    if (kv == MEMRA_QT_F16) {
        for (int d = 0; d < dh; d++) {
            uint16_t h = memra_f32_to_fp16(x[d]);
            memcpy(dst + 2 * d, &h, 2);
        }
    } else {
        ck_assert_int_eq(memra_quantize_row(MEMRA_QT_Q8_0, x, dst, dh), 0);
    }
}

/* ------------------------------------ attn_prep ------------------------------------- */

static memra_attn_prep_args prep_dev(const memra_attn_prep_args *a, const regions *kc, const regions *vc)
{
    const size_t nq = (size_t)a->b * (size_t)(a->n_head * a->head_dim);
    const size_t nkv = (size_t)a->b * (size_t)(a->n_head_kv * a->head_dim);
    memra_attn_prep_args g = *a;
    g.qg = dup_h2d(a->qg, 2 * nq * sizeof(float));
    g.k = dup_h2d(a->k, nkv * sizeof(float));
    g.v = dup_h2d(a->v, nkv * sizeof(float));
    g.q_norm = dup_h2d(a->q_norm, (size_t)a->head_dim * sizeof(float));
    g.k_norm = dup_h2d(a->k_norm, (size_t)a->head_dim * sizeof(float));
    g.positions = dup_h2d(a->positions, (size_t)a->b * sizeof(int32_t));
    g.k_cache = kc->dtab;
    g.v_cache = vc->dtab;
    g.q = dalloc(nq * sizeof(float));
    poison(g.q, nq * sizeof(float));
    return g;
}

static void prep_case(const attn_shape *sh, int kv, int b, int n_ctx, tu_rng *r)
{
    const int dh = sh->head_dim;
    const size_t nq = (size_t)b * (size_t)(sh->n_head * dh), nkv = (size_t)b * (size_t)(sh->n_head_kv * dh);
    const uint64_t region = (uint64_t)n_ctx * (uint64_t)sh->n_head_kv * kv_entry_bytes(kv, dh);
    regions kc, vc;
    regions_init(&kc, b, region);
    regions_init(&vc, b, region);
    for (size_t i = 0; i < kc.stride * (size_t)b; i++) { /* untouched bytes must stay so */
        kc.h[i] = (uint8_t)tu_rng_u64(r);
        vc.h[i] = (uint8_t)tu_rng_u64(r);
    }
    regions_upload(&kc);
    regions_upload(&vc);
    int32_t *pos = halloc(sizeof(int32_t) * (size_t)b);
    for (int i = 0; i < b; i++)
        pos[i] = (int32_t)(tu_rng_u64(r) % (uint64_t)n_ctx);
    pos[0] = 0;
    if (b > 2)
        pos[1] = n_ctx; /* outside the cache: q only, no write */
    memra_attn_prep_args a = {.qg = rand_vec(r, 2 * nq, 2.0f), .k = rand_vec(r, nkv, 2.0f), .v = rand_vec(r, nkv, 1.0f),
                              .q_norm = rand_vec(r, (size_t)dh, 0.3f), .k_norm = rand_vec(r, (size_t)dh, 0.3f),
                              .positions = pos, .k_cache = kc.htab, .v_cache = vc.htab, .q = halloc(nq * sizeof(float)),
                              .n_head = sh->n_head, .n_head_kv = sh->n_head_kv, .head_dim = dh, .n_rot = sh->n_rot,
                              .kv_type = kv, .n_ctx = n_ctx, .b = b, .eps = 1e-6f, .freq_base = 1e7f, .freq_scale = 1.0f};
    memcpy(a.sections, sh->sect, sizeof a.sections);
    for (int d = 0; d < dh; d++) {
        ((float *)a.q_norm)[d] += 1.0f;
        ((float *)a.k_norm)[d] += 1.0f;
    }
    memra_attn_prep_args g = prep_dev(&a, &kc, &vc);
    CK_OP(memra_attn_prep_cuda(&g, 0));
    ck_assert_int_eq(memra_attn_prep_ref(&a), MEMRA_OK);
    float *q = halloc(nq * sizeof(float));
    d2h(q, g.q, nq * sizeof(float));
    /* exact: the same norm order, the same exact_math.h angle, the same f32 sequence */
    char what[96];
    snprintf(what, sizeof what, "attn_prep %s kv %d b %d q", sh->name, kv, b);
    gpu_expect_same_f32(what, q, a.q, nq);
    uint8_t *kb = halloc(kc.stride * (size_t)b), *vb = halloc(vc.stride * (size_t)b);
    regions_download(&vc, vb);
    check_same("attn_prep v cache (raw v: bit-identical)", vb, vc.h, vc.stride * (size_t)b);
    regions_download(&kc, kb);
    uint8_t *kb_gpu = halloc(kc.stride * (size_t)b);
    memcpy(kb_gpu, kb, kc.stride * (size_t)b);
    snprintf(what, sizeof what, "attn_prep %s kv %d b %d k cache (every byte)", sh->name, kv, b);
    check_same(what, kb, kc.h, kc.stride * (size_t)b);
    /* isolation: the last row alone at B = 1 rewrites the same entry and the same q */
    memra_attn_prep_args a1 = a;
    a1.b = 1;
    a1.qg += 2 * nq / (size_t)b * (size_t)(b - 1);
    a1.k += nkv / (size_t)b * (size_t)(b - 1);
    a1.v += nkv / (size_t)b * (size_t)(b - 1);
    a1.positions += b - 1;
    memra_attn_prep_args g1 = prep_dev(&a1, &kc, &vc);
    g1.k_cache = regions_dtab1(&kc, b - 1);
    g1.v_cache = regions_dtab1(&vc, b - 1);
    CK_OP(memra_attn_prep_cuda(&g1, 0));
    float *q1 = halloc(nq / (size_t)b * sizeof(float));
    d2h(q1, g1.q, nq / (size_t)b * sizeof(float));
    check_same("attn_prep q row alone", q1, q + nq / (size_t)b * (size_t)(b - 1), nq / (size_t)b * sizeof(float));
    regions_download(&kc, kb);
    check_same("attn_prep k cache after the row alone", kb, kb_gpu, kc.stride * (size_t)b);
}

START_TEST(test_attn_prep)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xA77Bu);
    static const int bs[] = {1, 3, 16};
    for (size_t i = 0; i < sizeof k_attn_shapes / sizeof k_attn_shapes[0]; i++)
        for (int kv = 0; kv < 2; kv++)
            prep_case(&k_attn_shapes[i], kv ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, bs[(i + (size_t)kv) % 3], 300, &r);
}
END_TEST

/* ----------------------------------- attn_decode ------------------------------------ */

/* Host inputs of one attn_decode case: b rows with their own positions. */
typedef struct decode_case {
    const attn_shape *sh;
    int kv, b, n_ctx, max_split;
    int split_ctas, prefetch; /* memra_attn_decode_args.split_ctas / prefetch_batches (scheduling:
                                 never the bytes) */
    int32_t *pos;
    regions kc, vc;
    float *q, *qg;
    float kmax, vmax;
} decode_case;

static void decode_fill(decode_case *c, tu_rng *r)
{
    const int dh = c->sh->head_dim, hkv = c->sh->n_head_kv;
    const uint64_t hb = kv_entry_bytes(c->kv, dh);
    const uint64_t region = (uint64_t)c->n_ctx * (uint64_t)hkv * hb;
    regions_init(&c->kc, c->b, region);
    regions_init(&c->vc, c->b, region);
    float *x = halloc(sizeof(float) * (size_t)dh);
    c->kmax = c->vmax = 0;
    for (int b = 0; b < c->b; b++) {
        const int len = c->pos[b] >= 0 && c->pos[b] < c->n_ctx ? c->pos[b] + 1 : 0;
        for (int t = 0; t < len; t++)
            for (int j = 0; j < hkv; j++) {
                const uint64_t off = ((uint64_t)t * (uint64_t)hkv + (uint64_t)j) * hb;
                for (int d = 0; d < dh; d++) {
                    x[d] = tu_rng_normal(r);
                    c->kmax = fmaxf(c->kmax, fabsf(x[d]));
                }
                kv_encode(c->kv, x, region_h(&c->kc, b) + off, dh);
                for (int d = 0; d < dh; d++) {
                    x[d] = tu_rng_normal(r);
                    c->vmax = fmaxf(c->vmax, fabsf(x[d]));
                }
                kv_encode(c->kv, x, region_h(&c->vc, b) + off, dh);
            }
    }
    c->kmax *= 1.01f; /* f16 / q8_0 rounding of the largest value */
    c->vmax *= 1.01f;
    regions_upload(&c->kc);
    regions_upload(&c->vc);
    const size_t nq = (size_t)c->b * (size_t)(c->sh->n_head * dh);
    c->q = rand_vec(r, nq, 1.0f);
    c->qg = rand_vec(r, 2 * nq, 2.0f);
}

static memra_attn_decode_args decode_args(const decode_case *c, int host)
{
    const int dh = c->sh->head_dim, width = c->sh->n_head * dh;
    memra_attn_decode_args a = {.q = c->q,
                                .qg = c->qg,
                                .positions = c->pos,
                                .n_head = c->sh->n_head,
                                .n_head_kv = c->sh->n_head_kv,
                                .head_dim = dh,
                                .kv_type = c->kv,
                                .n_ctx = c->n_ctx,
                                .max_split = c->max_split,
                                .b = c->b,
                                .scale = 1.0f / sqrtf((float)dh),
                                .split_ctas = c->split_ctas,
                                .prefetch_batches = c->prefetch};
    const size_t nq = (size_t)c->b * (size_t)width;
    if (host) {
        a.k_cache = c->kc.htab;
        a.v_cache = c->vc.htab;
        a.y_q = halloc(nq / 32 * sizeof(memra_block_q8_1));
        a.o = halloc(nq * sizeof(float));
        return a;
    }
    a.q = dup_h2d(c->q, nq * sizeof(float));
    a.qg = dup_h2d(c->qg, 2 * nq * sizeof(float));
    a.positions = dup_h2d(c->pos, (size_t)c->b * sizeof(int32_t));
    a.k_cache = c->kc.dtab;
    a.v_cache = c->vc.dtab;
    const size_t ns = (size_t)c->b * (size_t)c->sh->n_head * (size_t)c->max_split * (size_t)(dh + 2);
    a.scratch = dalloc(ns * sizeof(float));
    poison(a.scratch, ns * sizeof(float));
    a.y_q = dalloc(nq / 32 * sizeof(memra_block_q8_1));
    a.o = dalloc(nq * sizeof(float));
    poison(a.y_q, nq / 32 * sizeof(memra_block_q8_1));
    poison(a.o, nq * sizeof(float));
    return a;
}

/* Launches c on the GPU; o and y_q (host, [b, width] / blocks) receive the results. */
static void decode_gpu(const decode_case *c, float *o, uint8_t *yq)
{
    memra_attn_decode_args g = decode_args(c, 0);
    const size_t nq = (size_t)c->b * (size_t)(c->sh->n_head * c->sh->head_dim);
    CK_OP(memra_attn_decode_cuda(&g, 0));
    d2h(o, g.o, nq * sizeof(float));
    d2h(yq, g.y_q, nq / 32 * sizeof(memra_block_q8_1));
}

static void decode_check(decode_case *c, float **o_out, uint8_t **yq_out)
{
    const int width = c->sh->n_head * c->sh->head_dim;
    const size_t nq = (size_t)c->b * (size_t)width;
    memra_attn_decode_args a = decode_args(c, 1);
    ck_assert_int_eq(memra_attn_decode_ref(&a), MEMRA_OK);
    float *o = halloc(nq * sizeof(float));
    uint8_t *yq = halloc(nq / 32 * sizeof(memra_block_q8_1));
    decode_gpu(c, o, yq);
    char what[128];
    snprintf(what, sizeof what, "attn_decode %s kv %d b %d max_split %d split_ctas %d prefetch %d",
             c->sh->name, c->kv, c->b, c->max_split, c->split_ctas, c->prefetch);
    /* exact: the reference emulates the kernel's order (attn_decode.h), same exps, same
     * gate; then the same q8_1 quantizer */
    gpu_expect_same_f32(what, o, a.o, nq);
    check_same(what, yq, a.y_q, nq / 32 * sizeof(memra_block_q8_1));
    check_q8_1_of(what, yq, o, (int64_t)nq);
    *o_out = o;
    *yq_out = yq;
}

/* Isolation: row r of c, placed at row `at` of a `tier`-wide launch whose other rows are
 * c's other rows (read-only caches can be shared), gives the bytes it gave in c. */
static void decode_isolation(const decode_case *c, const float *o, const uint8_t *yq, int r, int tier, int at)
{
    const int dh = c->sh->head_dim, width = c->sh->n_head * dh;
    decode_case t = *c;
    t.b = tier;
    t.pos = halloc(sizeof(int32_t) * (size_t)tier);
    t.q = halloc(sizeof(float) * (size_t)tier * width);
    t.qg = halloc(sizeof(float) * 2 * (size_t)tier * width);
    uint64_t *kt = halloc(sizeof(uint64_t) * (size_t)tier), *vt = halloc(sizeof(uint64_t) * (size_t)tier);
    for (int i = 0; i < tier; i++) {
        const int src = i == at ? r : (i * 5 + 1) % c->b;
        t.pos[i] = c->pos[src];
        memcpy(t.q + (size_t)i * width, c->q + (size_t)src * width, sizeof(float) * (size_t)width);
        memcpy(t.qg + 2 * (size_t)i * width, c->qg + 2 * (size_t)src * width, sizeof(float) * 2 * (size_t)width);
        kt[i] = c->kc.dbase[src];
        vt[i] = c->vc.dbase[src];
    }
    t.kc.dtab = dup_h2d(kt, sizeof(uint64_t) * (size_t)tier);
    t.vc.dtab = dup_h2d(vt, sizeof(uint64_t) * (size_t)tier);
    float *o2 = halloc(sizeof(float) * (size_t)tier * width);
    uint8_t *yq2 = halloc((size_t)tier * width / 32 * sizeof(memra_block_q8_1));
    decode_gpu(&t, o2, yq2);
    const size_t qb = (size_t)width / 32 * sizeof(memra_block_q8_1);
    check_same("attn_decode o: row in another tier", o2 + (size_t)at * width, o + (size_t)r * width,
               sizeof(float) * (size_t)width);
    check_same("attn_decode y_q: row in another tier", yq2 + (size_t)at * qb, yq + (size_t)r * qb, qb);
}

static void decode_run(const attn_shape *sh, int kv, const int32_t *pos, int b, int n_ctx, int max_split, tu_rng *r)
{
    decode_case c = {.sh = sh, .kv = kv, .b = b, .n_ctx = n_ctx, .max_split = max_split};
    c.pos = halloc(sizeof(int32_t) * (size_t)b);
    memcpy(c.pos, pos, sizeof(int32_t) * (size_t)b);
    decode_fill(&c, r);
    float *o;
    uint8_t *yq;
    decode_check(&c, &o, &yq);
    const size_t nq = (size_t)b * (size_t)(sh->n_head * sh->head_dim);
    float *o2 = halloc(nq * sizeof(float));
    uint8_t *yq2 = halloc(nq / 32 * sizeof(memra_block_q8_1));
    decode_gpu(&c, o2, yq2);
    check_same("attn_decode o run to run", o2, o, nq * sizeof(float));
    check_same("attn_decode y_q run to run", yq2, yq, nq / 32 * sizeof(memra_block_q8_1));
    decode_isolation(&c, o, yq, b - 1, 1, 0);
    decode_isolation(&c, o, yq, 0, 16, 13);
    teardown_allocs(); /* the case's ~100 MB of caches, before the next case */
}

START_TEST(test_attn_decode)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xDEC0u);
    /* contexts 1, 7, 1000, 5000 (positions + 1) in one launch, plus a row outside the cache */
    static const int32_t pos[] = {999, 0, 4999, 6, 5003};
    for (size_t i = 0; i < sizeof k_attn_shapes / sizeof k_attn_shapes[0]; i++)
        for (int kv = 0; kv < 2; kv++)
            decode_run(&k_attn_shapes[i], kv ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, pos, i % 2 ? 4 : 5, 5003, 32, &r);
}
END_TEST

START_TEST(test_attn_decode_splits)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xDEC1u);
    /* max_split 1 (one CTA scans 5000 keys), 3 (long splits), 64 (more splits than the rows
     * use) and 20, where 5121 keys make 20 splits of 272 and the last one empty (l = 0). */
    static const int32_t pos[] = {4999, 256, 255, 4096}, pos2[] = {5120, 4999, 0};
    decode_run(&k_attn_shapes[1], MEMRA_QT_F16, pos, 4, 5003, 1, &r);
    decode_run(&k_attn_shapes[1], MEMRA_QT_Q8_0, pos, 4, 5003, 3, &r);
    decode_run(&k_attn_shapes[3], MEMRA_QT_F16, pos, 4, 5003, 64, &r);
    decode_run(&k_attn_shapes[7], MEMRA_QT_F16, pos, 3, 5003, 7, &r);
    decode_run(&k_attn_shapes[1], MEMRA_QT_F16, pos2, 3, 5121, 20, &r);
    decode_run(&k_attn_shapes[4], MEMRA_QT_Q8_0, pos2, 3, 5121, 20, &r);
}
END_TEST

/* The same launch twice on the same device buffers (scratch, outputs poisoned in between):
 * the second writes every output byte again, and the same ones (nothing carried over in the
 * scratch between launches). */
static void decode_twice(const decode_case *c)
{
    memra_attn_decode_args g = decode_args(c, 0);
    const size_t nq = (size_t)c->b * (size_t)(c->sh->n_head * c->sh->head_dim);
    const size_t qb = nq / 32 * sizeof(memra_block_q8_1);
    float *o1 = halloc(nq * sizeof(float)), *o2 = halloc(nq * sizeof(float));
    uint8_t *yq1 = halloc(qb), *yq2 = halloc(qb);
    CK_OP(memra_attn_decode_cuda(&g, 0));
    d2h(o1, g.o, nq * sizeof(float));
    d2h(yq1, g.y_q, qb);
    poison(g.o, nq * sizeof(float));
    poison(g.y_q, qb);
    /* and the partials: a split the second launch skipped would read as NaN */
    poison(g.scratch, (size_t)c->b * (size_t)c->sh->n_head * (size_t)c->max_split *
                          (size_t)(c->sh->head_dim + 2) * sizeof(float));
    CK_OP(memra_attn_decode_cuda(&g, 0));
    d2h(o2, g.o, nq * sizeof(float));
    d2h(yq2, g.y_q, qb);
    check_same("attn_decode o: second launch on the same buffers", o2, o1, nq * sizeof(float));
    check_same("attn_decode y_q: second launch on the same buffers", yq2, yq1, qb);
}

/* dh 512 with group 4 (HG 4 at the widest head: the largest register footprint). */
static const attn_shape k_attn_dh512_g4 = {"dh512-g4", 8, 2, 512, 64, {0, 0, 0, 0}};

START_TEST(test_attn_decode_lengths)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xDEC2u);
    /* Lengths (positions + 1) around the split scan's batches (a warp batch is KPW * U keys
     * and 4 warps step 4 KPW U, <= 64) and the split size 64 (MEMRA_ATTN_SPLIT_KEYS): 1, 63,
     * 64, 65, 128, 129, 1025 (the 9b bench case: 17 splits of 4 batches per warp), 8192
     * (fills max_split = 128: 128 full splits of 64), 8193 (129 splits' worth, clamped to 128
     * of 80 keys: split 102 partial, 103..127 empty) and 8201: outside the cache (a zero
     * row). Rows of different lengths share a launch. */
    static const int32_t p1[] = {1024}, p3[] = {64, 8191, 0},
                         p16[] = {0, 62, 63, 64, 1024, 8200, 8192, 5, 127, 128, 300, 1087, 2047, 4095, 1, 700};
    static const struct {
        const int32_t *pos;
        int b;
    } rows[] = {{p1, 1}, {p3, 3}, {p16, 16}};
    const attn_shape *shapes[] = {&k_attn_shapes[0], &k_attn_shapes[1], &k_attn_shapes[2], &k_attn_shapes[3],
                                  &k_attn_shapes[4], &k_attn_shapes[5], &k_attn_shapes[6], &k_attn_dh512_g4};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int kv = 0; kv < 2; kv++) {
            /* every shape and cache type meets two of the three batch sizes */
            for (int k = 0; k < 2; k++) {
                const int ri = (int)((i + (size_t)kv + (size_t)k) % 3);
                decode_case c = {.sh = shapes[i], .kv = kv ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, .b = rows[ri].b,
                                 .n_ctx = 8200, .max_split = MEMRA_ATTN_MAX_SPLIT};
                c.pos = halloc(sizeof(int32_t) * (size_t)c.b);
                memcpy(c.pos, rows[ri].pos, sizeof(int32_t) * (size_t)c.b);
                decode_fill(&c, &r);
                float *o;
                uint8_t *yq;
                decode_check(&c, &o, &yq);
                decode_twice(&c);
                if (c.b > 1)
                    decode_isolation(&c, o, yq, 1, 1, 0);
                teardown_allocs(); /* the case's caches (up to ~0.5 GB), before the next case */
            }
        }
}
END_TEST

/* A scheduling variant of one launch (split_ctas, prefetch): rows of 8193 keys (128 splits of
 * 80, the last 25 empty), 1025 (17 of 64), 65 (2 of 48), 1 and one outside the cache share a
 * 5-wide launch. Its bytes are
 * the CPU reference's (which ignores both fields), the same on a second launch over the same
 * buffers, and a row's bytes are the same alone at tier 1 (where AUTO picks another grid). */
static void decode_sched(const attn_shape *sh, int kv, int split_ctas, int prefetch, tu_rng *r)
{
    static const int32_t pos[] = {8192, 1024, 64, 0, 8200};
    decode_case c = {.sh = sh,
                     .kv = kv,
                     .b = 5,
                     .n_ctx = 8200,
                     .max_split = MEMRA_ATTN_MAX_SPLIT,
                     .split_ctas = split_ctas,
                     .prefetch = prefetch};
    c.pos = halloc(sizeof pos);
    memcpy(c.pos, pos, sizeof pos);
    decode_fill(&c, r);
    float *o;
    uint8_t *yq;
    decode_check(&c, &o, &yq);
    decode_twice(&c);
    decode_isolation(&c, o, yq, 0, 1, 0);
    decode_isolation(&c, o, yq, 1, 1, 0);
    teardown_allocs();
}

START_TEST(test_attn_decode_split_ctas)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xDEC3u);
    /* The split kernel on fewer CTAs than splits: CTA x takes splits x, x + n, ... of its row.
     * split_ctas 1 (one CTA walks all 128 splits), 3, 16, 127, 500 (more than max_split: one
     * per split), AUTO (b = 5: 4 x 132 SMs / (4 x 5) = 26 CTAs per (kv head, row) on the
     * H200) on the 9b and dh128 geometries (one head chunk per pass), the 27b (HG 8 over a
     * group of 6: a partly masked chunk), dh64-g16 (two head chunks per pass: the most CTA
     * barriers per split) and dh512; the generic kernel (dh96) always runs one CTA per split:
     * it must ignore the field. */
    static const int ctas[] = {1, 3, 16, 127, 500, MEMRA_ATTN_SPLIT_CTAS_AUTO};
    const attn_shape *shapes[] = {&k_attn_shapes[1], &k_attn_shapes[3], &k_attn_shapes[7]};
    const attn_shape *more[] = {&k_attn_shapes[2], &k_attn_shapes[5], &k_attn_dh512_g4};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t k = 0; k < sizeof ctas / sizeof ctas[0]; k++)
            decode_sched(shapes[i], (i + k) % 2 ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, ctas[k], 0, &r);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        decode_sched(more[i], i % 2 ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, 3, 0, &r);
        decode_sched(more[i], i % 2 ? MEMRA_QT_F16 : MEMRA_QT_Q8_0, MEMRA_ATTN_SPLIT_CTAS_AUTO, 0,
                     &r);
    }
}
END_TEST

START_TEST(test_attn_decode_prefetch)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xDEC4u);
    /* The prefetching split kernel (a separate instantiation): each warp pulls batches pf
     * ahead into L2, the first ones before its PDL wait. pf 1, 2 and 8 (beyond a warp's last
     * batch at dh 256: at most 5 batches of 4 keys per split of 80), with one CTA per split and
     * with fewer CTAs (whose later passes prefetch after the wait); every fast geometry (HG 1:
     * dh64-mha, HG 2: dh512, HG 4, HG 8) and both cache types; the generic kernel (dh96) has
     * no prefetching form and must ignore the field. The 9b geometry takes every (pf, CTAs)
     * pair, the others one each in turn (a case fills and checks ~9 300 keys per head on the
     * CPU: the gates' budget). */
    static const int pfs[] = {1, 2, 8}, ctas[] = {0, 5, MEMRA_ATTN_SPLIT_CTAS_AUTO};
    const attn_shape *shapes[] = {&k_attn_shapes[2], &k_attn_shapes[3], &k_attn_shapes[4],
                                  &k_attn_shapes[5], &k_attn_shapes[6], &k_attn_dh512_g4,
                                  &k_attn_shapes[7]};
    for (size_t k = 0; k < 3; k++)
        decode_sched(&k_attn_shapes[1], k % 2 ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, ctas[k], pfs[k], &r);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        decode_sched(shapes[i], i % 2 ? MEMRA_QT_Q8_0 : MEMRA_QT_F16, ctas[(i + 1) % 3], pfs[i % 3],
                     &r);
}
END_TEST

/* A kernel as an op entry enqueues it: captured into a graph and read back (nothing runs). */
typedef struct captured_kernel {
    dim3 grid, block;
    void *func;
} captured_kernel;

/* The kernels enqueue(args) launches, in a throwaway graph; their count (<= max). The args
 * need not point at real buffers: nothing is run. */
static int capture_kernels(int (*enqueue)(const void *, cudaStream_t), const void *args,
                           captured_kernel *out, int max)
{
    cudaStream_t s;
    CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t gr;
    CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const int rc = enqueue(args, s);
    CK_CUDA(cudaStreamEndCapture(s, &gr));
    ck_assert_msg(rc == MEMRA_OK, "capture: rc %d (%s)", rc, memra_cuda_ops_error());
    size_t n = 0;
    CK_CUDA(cudaGraphGetNodes(gr, NULL, &n));
    cudaGraphNode_t *nodes = halloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    if (n) /* CUDA 13 refuses a node array with a count of 0 (an enqueue that launched nothing) */
        CK_CUDA(cudaGraphGetNodes(gr, nodes, &n));
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        CK_CUDA(cudaGraphNodeGetType(nodes[i], &t));
        if (t != cudaGraphNodeTypeKernel)
            continue;
        struct cudaKernelNodeParams p;
        CK_CUDA(cudaGraphKernelNodeGetParams(nodes[i], &p));
        ck_assert_int_lt(k, max);
        out[k++] = (captured_kernel){.grid = p.gridDim, .block = p.blockDim, .func = p.func};
    }
    CK_CUDA(cudaGraphDestroy(gr));
    CK_CUDA(cudaStreamDestroy(s));
    return k;
}

static int attn_enqueue(const void *a, cudaStream_t s)
{
    return memra_attn_decode_cuda(a, s);
}

/* attn_decode's split kernel (its 128-thread launch) as enqueued for a. */
static captured_kernel attn_split_captured(const memra_attn_decode_args *a)
{
    captured_kernel k[4];
    const int n = capture_kernels(attn_enqueue, a, k, 4);
    ck_assert_int_eq(n, 2); /* split, combine */
    const captured_kernel split = k[0].block.x == 128 ? k[0] : k[1];
    ck_assert_uint_eq(split.block.x, 128);
    ck_assert_uint_eq(split.grid.y, (unsigned)a->n_head_kv);
    ck_assert_uint_eq(split.grid.z, (unsigned)a->b);
    int32_t x = -1; /* the query the backend resolves AUTO with says the same grid */
    CK_OP(memra_attn_decode_cuda_split_ctas(a, &x));
    ck_assert_uint_eq(split.grid.x, (unsigned)x);
    return split;
}

START_TEST(test_attn_decode_launch_shape)
{
    GPU_OR_SKIP();
    /* The scheduling fields take effect (the byte tests cannot tell: the CPU reference
     * ignores them): split_ctas sets the split grid's x (0 and counts past max_split: max_split;
     * AUTO: 1..max_split, the grid resident at 4 CTAs per SM for the 9b kernel's 128 registers,
     * which memra-gpu-ops-tests' register line and bench/ops-regs.sh show); prefetch_batches > 0
     * launches the other instantiation, the same for every count; the generic kernel (dh96)
     * ignores both. */
    memra_attn_decode_args a = {.q = (float *)256,
                                .qg = (float *)256,
                                .positions = (int32_t *)256,
                                .k_cache = (uint64_t *)256,
                                .v_cache = (uint64_t *)256,
                                .scratch = (float *)256,
                                .y_q = (void *)256,
                                .n_head = 16,
                                .n_head_kv = 4,
                                .head_dim = 256,
                                .kv_type = MEMRA_QT_F16,
                                .n_ctx = 4096,
                                .max_split = MEMRA_ATTN_MAX_SPLIT,
                                .b = 5,
                                .scale = 0.0625f};
    static const struct {
        int ctas;
        unsigned x;
    } want[] = {{0, MEMRA_ATTN_MAX_SPLIT}, {1, 1}, {3, 3}, {127, 127}, {500, MEMRA_ATTN_MAX_SPLIT}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        a.split_ctas = want[i].ctas;
        ck_assert_uint_eq(attn_split_captured(&a).grid.x, want[i].x);
    }
    int sms = 0;
    CK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (int b = 1; b <= 16; b *= 4) {
        a.b = b;
        a.split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO;
        const unsigned x = attn_split_captured(&a).grid.x;
        ck_assert(x >= 1 && x <= MEMRA_ATTN_MAX_SPLIT);
        ck_assert_msg(x == MEMRA_ATTN_MAX_SPLIT || x * 4u * (unsigned)b <= 32u * (unsigned)sms,
                      "AUTO at b %d: %u CTAs per (kv head, row) do not fit the device", b, x);
        if (b == 16) /* 4 per SM: 4 x SMs / (4 kv heads x 16 rows) */
            ck_assert_uint_eq(x, (unsigned)(4 * sms / 64));
    }
    a.b = 5;
    a.split_ctas = 0;
    const void *plain = attn_split_captured(&a).func;
    a.prefetch_batches = 2;
    const void *pf2 = attn_split_captured(&a).func;
    a.prefetch_batches = MEMRA_ATTN_MAX_PREFETCH;
    ck_assert_ptr_ne(pf2, plain);
    ck_assert_ptr_eq(attn_split_captured(&a).func, pf2);
    /* the generic kernel: one CTA per split and one instantiation whatever the fields say */
    a.head_dim = 96;
    a.prefetch_batches = 0;
    const void *gen = attn_split_captured(&a).func;
    a.split_ctas = 3;
    a.prefetch_batches = 2;
    const captured_kernel g3 = attn_split_captured(&a);
    ck_assert_uint_eq(g3.grid.x, MEMRA_ATTN_MAX_SPLIT);
    ck_assert_ptr_eq(g3.func, gen);
}
END_TEST

START_TEST(test_attn_rejects)
{
    GPU_OR_SKIP();
    memra_attn_decode_args a = {.q = (float *)16, .qg = (float *)16, .positions = (int32_t *)16,
                                .k_cache = (uint64_t *)16, .v_cache = (uint64_t *)16, .scratch = NULL,
                                .y_q = (void *)16, .n_head = 8, .n_head_kv = 2, .head_dim = 64,
                                .kv_type = MEMRA_QT_F16, .n_ctx = 10, .max_split = 4, .b = 1, .scale = 0.125f};
    ck_assert_int_eq(memra_attn_decode_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* no scratch */
    a.scratch = (float *)16;
    a.n_head_kv = 3;
    ck_assert_int_eq(memra_attn_decode_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    a.n_head_kv = 2;
    a.kv_type = MEMRA_QT_Q4_0;
    ck_assert_int_eq(memra_attn_decode_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    a.kv_type = MEMRA_QT_F16;
    a.split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO - 1;
    ck_assert_int_eq(memra_attn_decode_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    a.split_ctas = 0;
    a.prefetch_batches = MEMRA_ATTN_MAX_PREFETCH + 1;
    ck_assert_int_eq(memra_attn_decode_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    memra_attn_prep_args p = {0};
    ck_assert_int_eq(memra_attn_prep_cuda(&p, 0), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ===================================== gdn_step ===================================== */

typedef struct gdn_shape {
    const char *name;
    int hk, hv, dk, dv, conv_k, head_map;
} gdn_shape;

static const gdn_shape k_gdn_shapes[] = {
    {"qwen35-9b", 16, 32, 128, 128, 4, MEMRA_GDN_HEADS_TILED},
    {"qwen35-0.8b", 16, 16, 128, 128, 4, MEMRA_GDN_HEADS_TILED},
    {"qwen35-27b", 16, 48, 128, 128, 4, MEMRA_GDN_HEADS_TILED}, /* clusters of 3 */
    {"qwen3next", 16, 32, 128, 128, 4, MEMRA_GDN_HEADS_GROUPED},
    {"dk256", 2, 4, 256, 64, 4, MEMRA_GDN_HEADS_TILED},
    {"dk64-generic", 4, 8, 64, 64, 3, MEMRA_GDN_HEADS_GROUPED},
    {"r16-generic", 1, 16, 128, 128, 4, MEMRA_GDN_HEADS_TILED},   /* 16 heads share a key head */
    {"dv16-generic", 2, 4, 48, 16, 2, MEMRA_GDN_HEADS_TILED},     /* q8_1 blocks straddle heads */
    {"r8-grouped", 2, 16, 128, 64, 4, MEMRA_GDN_HEADS_GROUPED},   /* clusters of 8 */
    {"dk160-generic", 1, 2, 160, 32, 4, MEMRA_GDN_HEADS_TILED},   /* lanes 0..7 hold 8 dims */
    {"dk256-dv128", 2, 4, 256, 128, 4, MEMRA_GDN_HEADS_TILED},    /* VEC 2, heads split in 4 */
    {"dv256-grouped", 2, 4, 128, 256, 4, MEMRA_GDN_HEADS_GROUPED}, /* 16 warp tasks per head */
};

/* Host side of a gdn_step case: inputs, weights, the two state blocks and their initial
 * bytes. */
typedef struct gdn_case {
    const gdn_shape *sh;
    int b, cc, cv;
    float *conv_w, *dt_bias, *ssm_a, *norm_w;
    regions conv, ssm;
    uint8_t *conv0, *ssm0; /* initial state blocks */
} gdn_case;

static void gdn_init(gdn_case *c, const gdn_shape *sh, int b, tu_rng *r)
{
    c->sh = sh;
    c->b = b;
    c->cv = sh->hv * sh->dv;
    c->cc = 2 * sh->hk * sh->dk + c->cv;
    c->conv_w = rand_vec(r, (size_t)c->cc * (size_t)sh->conv_k, 0.5f);
    c->dt_bias = rand_vec(r, (size_t)sh->hv, 0.5f);
    c->ssm_a = rand_vec(r, (size_t)sh->hv, 0.5f);
    for (int h = 0; h < sh->hv; h++)
        c->ssm_a[h] = -expf(c->ssm_a[h]); /* -exp(A_log) < 0 */
    c->norm_w = rand_vec(r, (size_t)sh->dv, 0.1f);
    for (int j = 0; j < sh->dv; j++)
        c->norm_w[j] += 1.0f;
    regions_init(&c->conv, b, sizeof(float) * (size_t)c->cc * (size_t)(sh->conv_k - 1));
    regions_init(&c->ssm, b, sizeof(float) * (size_t)c->cv * (size_t)sh->dk);
    for (int i = 0; i < b; i++) {
        float *cs = (float *)region_h(&c->conv, i), *ss = (float *)region_h(&c->ssm, i);
        for (size_t e = 0; e < c->conv.bytes / sizeof(float); e++)
            cs[e] = tu_rng_normal(r);
        for (size_t e = 0; e < c->ssm.bytes / sizeof(float); e++)
            ss[e] = 0.3f * tu_rng_normal(r);
    }
    regions_upload(&c->conv);
    regions_upload(&c->ssm);
    c->conv0 = halloc(c->conv.stride * (size_t)b);
    c->ssm0 = halloc(c->ssm.stride * (size_t)b);
    memcpy(c->conv0, c->conv.h, c->conv.stride * (size_t)b);
    memcpy(c->ssm0, c->ssm.h, c->ssm.stride * (size_t)b);
}

/* prefetch_tasks and split of the cases that follow (test_gdn_step sets them around a group
 * of cases) */
static int g_gdn_prefetch, g_gdn_split;

/* One step's activations (host). */
static memra_gdn_step_args gdn_step_inputs(const gdn_case *c, tu_rng *r)
{
    const gdn_shape *sh = c->sh;
    memra_gdn_step_args a = {
        .qkv = rand_vec(r, (size_t)c->b * (size_t)c->cc, 1.0f),
        .z = rand_vec(r, (size_t)c->b * (size_t)c->cv, 1.0f),
        .beta = rand_vec(r, (size_t)c->b * (size_t)sh->hv, 1.0f),
        .alpha = rand_vec(r, (size_t)c->b * (size_t)sh->hv, 1.0f),
        .conv_w = c->conv_w,
        .dt_bias = c->dt_bias,
        .ssm_a = c->ssm_a,
        .norm_w = c->norm_w,
        .conv_state = c->conv.htab,
        .ssm_state = c->ssm.htab,
        .y_q = halloc((size_t)c->b * (size_t)c->cv / 32 * sizeof(memra_block_q8_1)),
        .o = halloc(sizeof(float) * (size_t)c->b * (size_t)c->cv),
        .n_k_head = sh->hk,
        .n_v_head = sh->hv,
        .head_k_dim = sh->dk,
        .head_v_dim = sh->dv,
        .conv_k = sh->conv_k,
        .head_map = sh->head_map,
        .b = c->b,
        .eps = 1e-6f,
        .prefetch_tasks = g_gdn_prefetch,
        .split = g_gdn_split};
    return a;
}

/* Runs a (host args) on the GPU with row tables ct / st; returns o and y_q. */
static void gdn_gpu(const gdn_case *c, const memra_gdn_step_args *a, const uint64_t *ct, const uint64_t *st,
                    float *o, uint8_t *yq)
{
    const gdn_shape *sh = c->sh;
    const size_t nq = (size_t)a->b * (size_t)c->cv / 32 * sizeof(memra_block_q8_1);
    memra_gdn_step_args g = *a;
    g.qkv = dup_h2d(a->qkv, sizeof(float) * (size_t)a->b * (size_t)c->cc);
    g.z = dup_h2d(a->z, sizeof(float) * (size_t)a->b * (size_t)c->cv);
    g.beta = dup_h2d(a->beta, sizeof(float) * (size_t)a->b * (size_t)sh->hv);
    g.alpha = dup_h2d(a->alpha, sizeof(float) * (size_t)a->b * (size_t)sh->hv);
    g.conv_w = dup_h2d(c->conv_w, sizeof(float) * (size_t)c->cc * (size_t)sh->conv_k);
    g.dt_bias = dup_h2d(c->dt_bias, sizeof(float) * (size_t)sh->hv);
    g.ssm_a = dup_h2d(c->ssm_a, sizeof(float) * (size_t)sh->hv);
    g.norm_w = dup_h2d(c->norm_w, sizeof(float) * (size_t)sh->dv);
    g.conv_state = ct;
    g.ssm_state = st;
    g.y_q = dalloc(nq);
    g.o = dalloc(sizeof(float) * (size_t)a->b * (size_t)c->cv);
    poison(g.y_q, nq);
    poison(g.o, sizeof(float) * (size_t)a->b * (size_t)c->cv);
    CK_OP(memra_gdn_step_cuda(&g, 0));
    d2h(o, g.o, sizeof(float) * (size_t)a->b * (size_t)c->cv);
    d2h(yq, g.y_q, nq);
}

/* o and y_q equal the reference's bytes; y_q is also the quantization of the GPU's own o. */
static void gdn_check_o(const gdn_case *c, const memra_gdn_step_args *a, const float *o, const uint8_t *yq,
                        const char *what)
{
    const size_t n = (size_t)c->b * (size_t)c->cv;
    char w[160];
    snprintf(w, sizeof w, "%s o", what);
    gpu_expect_same_f32(w, o, a->o, n);
    check_q8_1_of(what, yq, o, (int64_t)n);
    check_same(what, yq, a->y_q, n / 32 * sizeof(memra_block_q8_1));
}

/* Both state blocks (padding included) equal the reference's; the ssm state row by row. */
static void gdn_check_state(const gdn_case *c, const char *what)
{
    uint8_t *conv = halloc(c->conv.stride * (size_t)c->b), *ssm = halloc(c->ssm.stride * (size_t)c->b);
    regions_download(&c->conv, conv);
    regions_download(&c->ssm, ssm);
    check_same("gdn_step conv state (data movement: bit-identical)", conv, c->conv.h, c->conv.stride * (size_t)c->b);
    char part[200];
    for (int i = 0; i < c->b; i++) {
        snprintf(part, sizeof part, "%s ssm state row %d", what, i);
        gpu_expect_same_f32(part, (const float *)region_in(&c->ssm, ssm, i), (const float *)region_h(&c->ssm, i),
                            c->ssm.bytes / sizeof(float));
    }
    check_same(what, ssm, c->ssm.h, c->ssm.stride * (size_t)c->b);
}

static void gdn_case_body(const gdn_shape *sh, int b, int steps, tu_rng *r);

/* One case, its host and device buffers freed after it (the cases allocate per row). */
static void gdn_case_run(const gdn_shape *sh, int b, int steps, tu_rng *r)
{
    gdn_case_body(sh, b, steps, r);
    teardown_allocs();
}

static void gdn_case_body(const gdn_shape *sh, int b, int steps, tu_rng *r)
{
    gdn_case c;
    gdn_init(&c, sh, b, r);
    const size_t n = (size_t)b * (size_t)c.cv, nq = n / 32 * sizeof(memra_block_q8_1);
    float *o = halloc(n * sizeof(float));
    uint8_t *yq = halloc(nq);
    char what[96];
    memra_gdn_step_args a;
    for (int s = 0; s < steps; s++) {
        a = gdn_step_inputs(&c, r);
        gdn_gpu(&c, &a, c.conv.dtab, c.ssm.dtab, o, yq);
        ck_assert_int_eq(memra_gdn_step_ref(&a), MEMRA_OK);
        snprintf(what, sizeof what, "gdn_step %s b %d step %d", sh->name, b, s);
        gdn_check_o(&c, &a, o, yq, what);
    }
    snprintf(what, sizeof what, "gdn_step %s b %d ssm state", sh->name, b);
    gdn_check_state(&c, what);
    if (steps != 1)
        return;
    /* isolation and run to run (one step from the initial state) */
    uint8_t *conv1 = halloc(c.conv.stride * (size_t)b), *ssm1 = halloc(c.ssm.stride * (size_t)b);
    regions_download(&c.conv, conv1);
    regions_download(&c.ssm, ssm1);
    h2d(c.conv.d, c.conv0, c.conv.stride * (size_t)b);
    h2d(c.ssm.d, c.ssm0, c.ssm.stride * (size_t)b);
    float *o2 = halloc(n * sizeof(float));
    uint8_t *yq2 = halloc(nq), *st = halloc(c.ssm.stride * (size_t)b);
    gdn_gpu(&c, &a, c.conv.dtab, c.ssm.dtab, o2, yq2);
    regions_download(&c.ssm, st);
    check_same("gdn_step o run to run", o2, o, n * sizeof(float));
    check_same("gdn_step state run to run", st, ssm1, c.ssm.stride * (size_t)b);
    const int rr = b - 1;
    h2d(c.conv.d, c.conv0, c.conv.stride * (size_t)b);
    h2d(c.ssm.d, c.ssm0, c.ssm.stride * (size_t)b);
    memra_gdn_step_args a1 = a;
    a1.b = 1;
    a1.qkv += (size_t)rr * (size_t)c.cc;
    a1.z += (size_t)rr * (size_t)c.cv;
    a1.beta += (size_t)rr * (size_t)sh->hv;
    a1.alpha += (size_t)rr * (size_t)sh->hv;
    gdn_gpu(&c, &a1, regions_dtab1(&c.conv, rr), regions_dtab1(&c.ssm, rr), o2, yq2);
    regions_download(&c.ssm, st);
    check_same("gdn_step o row alone", o2, o + (size_t)rr * (size_t)c.cv, (size_t)c.cv * sizeof(float));
    check_same("gdn_step y_q row alone", yq2, yq + nq / (size_t)b * (size_t)rr, nq / (size_t)b);
    check_same("gdn_step state row alone", region_in(&c.ssm, st, rr), region_in(&c.ssm, ssm1, rr), c.ssm.bytes);
    uint8_t *cs = halloc(c.conv.stride * (size_t)b);
    regions_download(&c.conv, cs);
    check_same("gdn_step conv row alone", region_in(&c.conv, cs, rr), region_in(&c.conv, conv1, rr), c.conv.bytes);
}

START_TEST(test_gdn_step)
{
    GPU_OR_SKIP();
    g_gdn_prefetch = g_gdn_split = 0; /* whatever a failed run before this one left */
    tu_rng r;
    tu_rng_seed(&r, 0x6D17u);
    static const int bs[] = {1, 3, 16, 5};
    for (size_t i = 0; i < sizeof k_gdn_shapes / sizeof k_gdn_shapes[0]; i++)
        gdn_case_run(&k_gdn_shapes[i], bs[i % 4], 1, &r);
    /* Fast-kernel paths (gdn_step.cu; split <= 4 while Hv * b * split fits one CTA per SM) and
     * the cases that take them on a 132-SM H200: split = CTAs per value head, cluster = r *
     * split CTAs, <VEC, warps, rows per warp task>; "row alone" (single-step cases) reruns the
     * last row at b = 1, i.e. on the b = 1 path.
     *   <1,8,4>: 9b b 1 (3 steps below; every 9b row alone), qwen3next b 1 (grouped): split 4,
     *     cluster 8; 0.8b b 1 (row alone): r = 1, split 4, cluster 4; with the chain warp
     *     (lambda, beta, silu(z) on a ninth warp)
     *   <1,8,8>: 9b b 2: split 2, cluster 4; 0.8b b 3 (above): split 2, cluster 2; 27b b 1:
     *     split 2, cluster 6 (uneven q / k conv shares of 43 and 41 channels); r8-grouped b 1
     *     (above): dv 64 unsplit, cluster 8; dv256-grouped b 5 (above): split 4, cluster 8
     *   <1,8,16>: 9b b 3 (4 steps), 9b b 5, qwen3next b 5 (above): split 1, cluster 2; 0.8b
     *     b 12: no cluster; dv256-grouped b 40: 2 tasks per warp (the rest of the head
     *     prefetched into L2)
     *   <1,4,8>: 9b b 16 (1 and 2 steps), 27b b 16 (above, cluster 3): 4 warps, 4 tasks per
     *     warp, the next one loaded during the current one, 3 conv items per thread (lambda
     *     and beta after them); 0.8b b 20: the same, no cluster
     *   <2,8,4>: dk256 b 1 (above), b 2 (3 steps): split 2, cluster 4; dk256-dv128 b 1 (row
     *     alone): split 4, cluster 8
     *   <2,8,8>: dk256-dv128 b 16 (above): split 2; b 20, b 40: split 1, 2 tasks per warp;
     *     dk256 b 40: split 1
     *   <2,4,4>: dk256 b 80: 4 warps
     * Then the same kernels under memra_gdn_step_cuda_tune (a test and measurement hook):
     * split 4 forced on 9b b 1 (3 steps), qwen3next b 1, 0.8b b 1, dk256-dv128 b 1 and
     * dv256-grouped b 5; split 2 on 9b b 2 (3 steps), 0.8b b 3, 27b b 1, dk256 b 2 (3 steps)
     * and 9b b 16 (4-warp CTAs, 2 tasks per warp: a split the launcher never picks); the bulk
     * L2 prefetch forced on for 9b b 16 (the launcher leaves it off for 4-warp CTAs).
     * The bytes are the CPU's on every path. */
    gdn_case_run(&k_gdn_shapes[0], 2, 1, &r);
    gdn_case_run(&k_gdn_shapes[0], 5, 1, &r);
    gdn_case_run(&k_gdn_shapes[0], 16, 1, &r);
    gdn_case_run(&k_gdn_shapes[0], 1, 3, &r);  /* state and conv window carried over 3 steps */
    gdn_case_run(&k_gdn_shapes[0], 3, 4, &r);
    gdn_case_run(&k_gdn_shapes[0], 16, 2, &r);
    gdn_case_run(&k_gdn_shapes[1], 12, 1, &r);
    gdn_case_run(&k_gdn_shapes[1], 20, 1, &r);
    gdn_case_run(&k_gdn_shapes[2], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[3], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[5], 2, 3, &r);
    gdn_case_run(&k_gdn_shapes[4], 2, 3, &r);
    gdn_case_run(&k_gdn_shapes[4], 40, 1, &r);
    gdn_case_run(&k_gdn_shapes[4], 80, 1, &r);
    gdn_case_run(&k_gdn_shapes[10], 20, 1, &r);
    gdn_case_run(&k_gdn_shapes[10], 40, 1, &r);
    gdn_case_run(&k_gdn_shapes[11], 40, 1, &r);
    memra_gdn_step_cuda_tune(4, -1);
    gdn_case_run(&k_gdn_shapes[0], 1, 3, &r);
    gdn_case_run(&k_gdn_shapes[3], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[1], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[10], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[11], 5, 1, &r);
    memra_gdn_step_cuda_tune(2, -1);
    gdn_case_run(&k_gdn_shapes[0], 2, 3, &r);
    gdn_case_run(&k_gdn_shapes[1], 3, 1, &r);
    gdn_case_run(&k_gdn_shapes[2], 1, 1, &r);
    gdn_case_run(&k_gdn_shapes[4], 2, 3, &r);
    gdn_case_run(&k_gdn_shapes[0], 16, 1, &r);
    memra_gdn_step_cuda_tune(0, 1);
    gdn_case_run(&k_gdn_shapes[0], 16, 2, &r);
    memra_gdn_step_cuda_tune(0, -1);
    /* prefetch_tasks (the 4-warp kernel's own instantiation): tasks beyond the next pulled
     * into L2, the first before the PDL wait. 9b b 16 (4 tasks per warp: prefetch 1 and 2
     * reach the last, 4 runs past it), 27b b 16 (clusters of 3), 0.8b b 20 (no cluster),
     * dk256-dv128 b 80 and dv256-grouped b 80 (8 tasks per warp). */
    static const struct {
        int shape, b, steps, pf;
    } pfc[] = {
        {0, 16, 2, 1},  {0, 16, 1, 2},  {0, 16, 1, 4}, {2, 16, 1, 2}, {1, 20, 1, 1},
        {10, 80, 1, 3}, {11, 80, 2, 2}, {0, 1, 1, 2}}; /* the last: a small grid ignores it */
    for (size_t i = 0; i < sizeof pfc / sizeof pfc[0]; i++) {
        g_gdn_prefetch = pfc[i].pf;
        gdn_case_run(&k_gdn_shapes[pfc[i].shape], pfc[i].b, pfc[i].steps, &r);
    }
    g_gdn_prefetch = 0;
    /* the launch's own split (memra_gdn_step_args.split, what the backend's gdn_split sets):
     * 1 where the launcher picks 2 (9b b 2, 3 steps), 4 on 0.8b b 1 */
    g_gdn_split = 1;
    gdn_case_run(&k_gdn_shapes[0], 2, 3, &r);
    g_gdn_split = 4;
    gdn_case_run(&k_gdn_shapes[1], 1, 1, &r);
    g_gdn_split = 0;
}
END_TEST

static int gdn_enqueue(const void *a, cudaStream_t s)
{
    return memra_gdn_step_cuda(a, s);
}

START_TEST(test_gdn_launch_shape)
{
    GPU_OR_SKIP();
    /* prefetch_tasks takes effect where it applies (the byte tests cannot tell): the 9b at
     * b 16 (32 x 16 CTAs, past 2 per SM on this device: the 4-warp kernel) runs the other
     * instantiation for any count > 0; at b 1 (8-warp CTAs, one task per warp) the field is
     * ignored. */
    int sms = 0;
    CK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    memra_gdn_step_args a = {.qkv = (float *)256,
                             .z = (float *)256,
                             .beta = (float *)256,
                             .alpha = (float *)256,
                             .conv_w = (float *)256,
                             .dt_bias = (float *)256,
                             .ssm_a = (float *)256,
                             .norm_w = (float *)256,
                             .conv_state = (uint64_t *)256,
                             .ssm_state = (uint64_t *)256,
                             .y_q = (void *)256,
                             .n_k_head = 16,
                             .n_v_head = 32,
                             .head_k_dim = 128,
                             .head_v_dim = 128,
                             .conv_k = 4,
                             .head_map = MEMRA_GDN_HEADS_TILED,
                             .b = 16,
                             .eps = 1e-6f};
    ck_assert_msg(32 * 16 > 2 * sms, "this device (%d SMs) runs the 9b b 16 on the 8-warp kernel",
                  sms);
    captured_kernel k0, k2, k4;
    ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k0, 1), 1);
    ck_assert_uint_eq(k0.block.x, 128); /* 4 warps */
    a.prefetch_tasks = 2;
    ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k2, 1), 1);
    a.prefetch_tasks = MEMRA_GDN_MAX_PREFETCH;
    ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k4, 1), 1);
    ck_assert_ptr_ne(k2.func, k0.func);
    ck_assert_ptr_eq(k4.func, k2.func);
    ck_assert(k2.grid.x == k0.grid.x && k2.grid.y == k0.grid.y && k2.block.x == k0.block.x);
    a.b = 1;
    a.prefetch_tasks = 0;
    ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k0, 1), 1);
    a.prefetch_tasks = 2;
    ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k2, 1), 1);
    ck_assert_uint_eq(k0.block.x, 288); /* 8 warps and the chain warp */
    ck_assert_ptr_eq(k2.func, k0.func);
    /* split: CTAs per value head, grid.x = n_v_head x split (the launcher's 4 at b 1 on a
     * 132-SM device, or what the launch forces) */
    static const int splits[] = {1, 2, 4};
    for (size_t i = 0; i < 3; i++) {
        a.split = splits[i];
        ck_assert_int_eq(capture_kernels(gdn_enqueue, &a, &k0, 1), 1);
        ck_assert_uint_eq(k0.grid.x, 32u * (unsigned)splits[i]);
    }
}
END_TEST

START_TEST(test_gdn_rejects)
{
    GPU_OR_SKIP();
    memra_gdn_step_args a = {0};
    ck_assert_int_eq(memra_gdn_step_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_gdn_step_cuda(NULL, 0), MEMRA_ERR_INVALID_ARG);
    float f[1];
    uint64_t p[1];
    uint8_t q[64];
    a = (memra_gdn_step_args){.qkv = f,
                              .z = f,
                              .beta = f,
                              .alpha = f,
                              .conv_w = f,
                              .dt_bias = f,
                              .ssm_a = f,
                              .norm_w = f,
                              .conv_state = p,
                              .ssm_state = p,
                              .y_q = q,
                              .n_k_head = 1,
                              .n_v_head = 1,
                              .head_k_dim = 128,
                              .head_v_dim = 128,
                              .conv_k = 4,
                              .b = 1,
                              .eps = 1e-6f,
                              .prefetch_tasks = MEMRA_GDN_MAX_PREFETCH + 1};
    ck_assert_int_eq(memra_gdn_step_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_str_eq(memra_cuda_ops_error(), "prefetch_tasks out of range 0..4");
}
END_TEST

/* ====================================== sample ====================================== */

static void sample_gpu(const memra_sample_args *a, int32_t *tok)
{
    memra_sample_args g = *a;
    const size_t nl = (size_t)a->b * (size_t)a->n_vocab;
    g.logits = dup_h2d(a->logits, nl * sizeof(float));
    g.params = dup_h2d(a->params, sizeof(memra_sample_params) * (size_t)a->b);
    g.out_tokens = dalloc(sizeof(int32_t) * (size_t)a->b);
    poison(g.out_tokens, sizeof(int32_t) * (size_t)a->b);
    g.scratch = dalloc(2 * nl * sizeof(float));
    poison(g.scratch, 2 * nl * sizeof(float));
    CK_OP(memra_sample_cuda(&g, 0));
    d2h(tok, g.out_tokens, sizeof(int32_t) * (size_t)a->b);
}

/* The parameter mix of the sampling tests (cycled over the rows). */
static memra_sample_params sample_params(int i, uint64_t step)
{
    static const memra_sample_params k[] = {
        {.temperature = 0.0f},                                      /* greedy */
        {.temperature = 0.7f, .top_k = 40, .top_p = 0.9f},
        {.temperature = 1.0f, .top_k = 0, .top_p = 0.95f},
        {.temperature = 1.3f, .top_k = 0, .top_p = 1.0f},           /* temperature only */
        {.temperature = 0.8f, .top_k = 5, .top_p = 0.0f},
        {.temperature = 0.9f, .top_k = 1},                          /* greedy by top_k */
        {.temperature = 2.0f, .top_k = 1000, .top_p = 0.5f},
        {.temperature = 1e-3f, .top_k = 0, .top_p = 0.999f},
    };
    memra_sample_params p = k[i % (int)(sizeof k / sizeof k[0])];
    p.seed = 0x5EED0000u + (uint64_t)i * 977u;
    p.step = step;
    return p;
}

/* Token equality with the reference, always: both compute p with memra_x_expf and every
 * mass as the same exact 128-bit integers (sample.h), so the thresholds and the draw are the
 * same numbers (no summation order enters). */
static void sample_case(int n_vocab, int b, float spread, uint64_t step, tu_rng *r)
{
    float *l = rand_vec(r, (size_t)b * (size_t)n_vocab, spread);
    memra_sample_params *p = halloc(sizeof *p * (size_t)b);
    for (int i = 0; i < b; i++)
        p[i] = sample_params(i + (int)step, step + (uint64_t)i);
    memra_sample_args a = {.logits = l, .params = p, .out_tokens = halloc(sizeof(int32_t) * (size_t)b),
                           .n_vocab = n_vocab, .b = b};
    ck_assert_int_eq(memra_sample_ref(&a), MEMRA_OK);
    int32_t *tok = halloc(sizeof(int32_t) * (size_t)b);
    sample_gpu(&a, tok);
    for (int i = 0; i < b; i++)
        ck_assert_msg(tok[i] == a.out_tokens[i], "sample V %d row %d (T %g k %d p %g): token %d, want %d", n_vocab, i,
                      (double)p[i].temperature, p[i].top_k, (double)p[i].top_p, tok[i], a.out_tokens[i]);
    /* isolation: the last row alone */
    memra_sample_args a1 = a;
    a1.b = 1;
    a1.logits = l + (size_t)(b - 1) * (size_t)n_vocab;
    a1.params = p + b - 1;
    int32_t t1;
    sample_gpu(&a1, &t1);
    ck_assert_int_eq(t1, tok[b - 1]);
}

START_TEST(test_sample)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x5A4Du);
    sample_case(1, 1, 1.0f, 0, &r);
    sample_case(5, 8, 1.0f, 1, &r);
    sample_case(1000, 16, 3.0f, 2, &r);
    sample_case(1000, 16, 0.3f, 3, &r);     /* flat: long top-p tails */
    sample_case(32000, 9, 4.0f, 4, &r);
    sample_case(248320, 4, 3.0f, 5, &r);    /* the qwen35 vocabulary */
    sample_case(248320, 4, 1.0f, 9, &r);
    sample_case(400003, 2, 3.0f, 13, &r);   /* beyond the shared-memory slices: scratch path */
    sample_case(151936, 16, 2.0f, 21, &r);  /* tier 16, every parameter mix twice */
    sample_case(3000, 15, 0.05f, 40, &r);   /* nearly flat: top-p cuts deep in long ties */
}
END_TEST

START_TEST(test_sample_draws)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0x5A4Eu);
    /* many (seed, step) draws of one distribution: the tokens follow the reference */
    const int v = 64, b = 16;
    float *l = rand_vec(&r, (size_t)v, 1.0f);
    for (uint64_t step = 0; step < 16; step++) {
        memra_sample_args a = {.logits = halloc(sizeof(float) * (size_t)b * v), .params = halloc(sizeof(memra_sample_params) * b),
                               .out_tokens = halloc(sizeof(int32_t) * b), .n_vocab = v, .b = b};
        for (int i = 0; i < b; i++) {
            memcpy((float *)a.logits + (size_t)i * v, l, sizeof(float) * v);
            ((memra_sample_params *)a.params)[i] = (memra_sample_params){.temperature = 1.0f, .top_p = 0.9f,
                                                                         .seed = 42u + (uint64_t)i, .step = step};
        }
        ck_assert_int_eq(memra_sample_ref(&a), MEMRA_OK);
        int32_t tok[16];
        sample_gpu(&a, tok);
        for (int i = 0; i < b; i++)
            ck_assert_msg(tok[i] == a.out_tokens[i], "draw seed %d step %d: %d want %d", 42 + i, (int)step, tok[i],
                          a.out_tokens[i]);
    }
}
END_TEST

START_TEST(test_sample_edges)
{
    GPU_OR_SKIP();
    const int v = 16;
    float l[4 * 16];
    for (int i = 0; i < 4 * v; i++)
        l[i] = (float)(i % 5);
    l[v + 9] = 7.0f; /* row 1: max at 9 and 3 -> 3 */
    l[v + 3] = 7.0f;
    for (int i = 0; i < v; i++)
        l[2 * v + i] = NAN; /* row 2: all NaN -> 0 */
    l[3 * v + 11] = INFINITY; /* row 3: +inf -> greedy, 11 */
    memra_sample_params p[4];
    for (int i = 0; i < 4; i++)
        p[i] = (memra_sample_params){.temperature = i == 0 ? 0.0f : 1.0f, .top_p = 0.9f, .seed = 1, .step = 2};
    p[1].temperature = 0.0f;
    memra_sample_args a = {.logits = l, .params = p, .out_tokens = halloc(4 * sizeof(int32_t)), .n_vocab = v, .b = 4};
    ck_assert_int_eq(memra_sample_ref(&a), MEMRA_OK);
    int32_t tok[4];
    sample_gpu(&a, tok);
    ck_assert_int_eq(tok[0], 4); /* first of the ties at value 4 */
    ck_assert_int_eq(tok[1], 3);
    ck_assert_int_eq(tok[2], 0);
    ck_assert_int_eq(tok[3], 11);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(tok[i], a.out_tokens[i]);
}
END_TEST

/* ==================================== exact_math ==================================== */

/* kernels/exact_math.h evaluated on the GPU (memra_exact_math_eval_cuda, nvcc with
 * --fmad=false) and on the CPU (C, -ffp-contract=off): every function, ~1e6 inputs each
 * over its whole range plus its special values, compared bit for bit (NaN: position only,
 * the GPU's canonical NaN differs from x86's). */
static double xm_cpu(int fn, double x, double y)
{
    double sn, cs;
    switch (fn) {
    case MEMRA_XM_EXP: return memra_x_exp(x);
    case MEMRA_XM_LOG: return memra_x_log(x);
    case MEMRA_XM_LOG1P: return memra_x_log1p(x);
    case MEMRA_XM_POW: return memra_x_pow(x, y);
    case MEMRA_XM_SIN: memra_x_sincos(x, &sn, &cs); return sn;
    case MEMRA_XM_COS: memra_x_sincos(x, &sn, &cs); return cs;
    case MEMRA_XM_DIV_N:
        return x / y; /* the division itself: div_n must give its bits */
    case MEMRA_XM_EXPF: return (double)memra_x_expf((float)x);
    case MEMRA_XM_SIGMOIDF: return (double)memra_x_sigmoidf((float)x);
    case MEMRA_XM_SILUF: return (double)memra_x_siluf((float)x);
    case MEMRA_XM_SOFTPLUSF:
        return (double)memra_x_softplusf((float)x);
    default:
        return (double)memra_x_expf_seq((float)x);
    }
}

static double xm_u01(tu_rng *r) { return (double)(tu_rng_u64(r) >> 11) * 0x1p-53; }

/* Input i of function fn (y: pow's exponent, div_n's n). */
static double xm_input(int fn, size_t i, tu_rng *r, double *y)
{
    /* clang-format off */
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 4.9406564584124654e-324,
                                2.2250738585072014e-308, 709.782712893384, 709.7827128933839, -745.1332191019411,
                                -745.1332191019412, -708.3964185322641, 88.72283935546875, -103.97208404541016,
                                20.0, 1.5707963267948966, 3.141592653589793, 1.6e6,
                                709.0, -709.0, -110.0, 110.0, 1e10, -1e10}; /* memra_x_exp_fw's clamp and tail */
    /* clang-format on */
    *y = (2 * xm_u01(r) - 1) * 20;
    if (fn == MEMRA_XM_DIV_N) { /* n: powers of two 1 .. 2^30 and other integers; x: any bits */
        const uint64_t k = tu_rng_u64(r);
        *y = k % 4 ? (double)(1 << (int)(k % 31)) : (double)(1 + (int)(k >> 40) % 100000);
    }
    if (i < sizeof sp / sizeof sp[0])
        return sp[i];
    if (fn == MEMRA_XM_DIV_N) {
        const uint64_t u = tu_rng_u64(r);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    const double u = xm_u01(r), v = xm_u01(r);
    switch (fn) {
    case MEMRA_XM_EXP: return i % 2 ? -746 + 1456 * u : (2 * u - 1) * pow(10.0, -20 * v);
    case MEMRA_XM_LOG: return i % 2 ? exp(-744.4 + 1454 * u) : 0.5 + 1.5 * u;
    case MEMRA_XM_LOG1P:
        return i % 3 == 0 ? -1 + exp(-700 * u) : i % 3 == 1 ? exp(700 * u) : (2 * u - 1) * pow(10.0, -30 * v);
    case MEMRA_XM_POW: return i % 2 ? exp(-20 + 40 * u) : 1 + 1e7 * u;
    case MEMRA_XM_SIN:
    case MEMRA_XM_COS: return (2 * u - 1) * 1.6e6 * pow(10.0, -8 * v);
    default: return i % 2 ? (double)(float)(-110 + 205 * u) : (double)(tu_rng_normal(r) * 8.0f);
    }
}

START_TEST(test_exact_math_gpu)
{
    GPU_OR_SKIP();
    tu_rng r;
    tu_rng_seed(&r, 0xE3AC8u);
    const size_t n = (size_t)1 << 20;
    double *x = halloc(n * sizeof *x), *y = halloc(n * sizeof *y), *want = halloc(n * sizeof *want);
    double *got = halloc(n * sizeof *got), *dx = dalloc(n * sizeof *dx), *dy = dalloc(n * sizeof *dy);
    double *dout = dalloc(n * sizeof *dout);
    static const char *const names[MEMRA_XM_COUNT] = {"exp",      "log",   "log1p",     "pow",
                                                      "sin",      "cos",   "div_n",     "expf",
                                                      "sigmoidf", "siluf", "softplusf", "expf_seq"};
    for (int fn = 0; fn < MEMRA_XM_COUNT; fn++) {
        for (size_t i = 0; i < n; i++) {
            x[i] = xm_input(fn, i, &r, &y[i]);
            if (fn >= MEMRA_XM_EXPF)
                x[i] = (double)(float)x[i]; /* the float functions take floats */
            if (fn >= MEMRA_XM_EXPF && i % 4 == 3) { /* any float bits: the clamp, tail, NaN, inf */
                const uint32_t u = (uint32_t)tu_rng_u64(&r);
                float f;
                memcpy(&f, &u, 4);
                x[i] = (double)f;
            }
            if ((fn == MEMRA_XM_SIN || fn == MEMRA_XM_COS) && !(fabs(x[i]) <= 1.6e6))
                x[i] = 0.5; /* outside the documented range */
            want[i] = xm_cpu(fn, x[i], y[i]);
        }
        h2d(dx, x, n * sizeof *x);
        h2d(dy, y, n * sizeof *y);
        poison(dout, n * sizeof *dout);
        CK_OP(memra_exact_math_eval_cuda(fn, dx, dy, dout, (int64_t)n));
        d2h(got, dout, n * sizeof *got);
        for (size_t i = 0; i < n; i++) {
            uint64_t g, w;
            memcpy(&g, &got[i], 8);
            memcpy(&w, &want[i], 8);
            ck_assert_msg(g == w || (isnan(got[i]) && isnan(want[i])),
                          "exact_math %s(%.17g, y %.17g) element %zu: gpu %.17g (0x%016llx) cpu %.17g (0x%016llx)",
                          names[fn], x[i], y[i], i, got[i], (unsigned long long)g, want[i], (unsigned long long)w);
        }
    }
}
END_TEST

/* ====================================== timing ====================================== */

/* Mean time per launch in microseconds of `expr` (an entry call on stream 0), measured with
 * CUDA events over `iters` back-to-back launches after 3 warm-up launches. Eager launches:
 * small kernels include the launch gap (~2-4 us), which a graph replay would hide. */
#define TIME_OP(expr, iters, us_out)                                                               \
    do {                                                                                           \
        cudaEvent_t e0_, e1_;                                                                      \
        CK_CUDA(cudaEventCreate(&e0_));                                                            \
        CK_CUDA(cudaEventCreate(&e1_));                                                            \
        for (int w_ = 0; w_ < 3; w_++)                                                             \
            ck_assert_int_eq((expr), MEMRA_OK);                                                    \
        CK_CUDA(cudaEventRecord(e0_, 0));                                                          \
        for (int i_ = 0; i_ < (iters); i_++)                                                       \
            ck_assert_int_eq((expr), MEMRA_OK);                                                    \
        CK_CUDA(cudaEventRecord(e1_, 0));                                                          \
        CK_CUDA(cudaEventSynchronize(e1_));                                                        \
        float ms_ = 0;                                                                             \
        CK_CUDA(cudaEventElapsedTime(&ms_, e0_, e1_));                                             \
        (us_out) = 1000.0 * (double)ms_ / (double)(iters);                                         \
        cudaEventDestroy(e0_);                                                                     \
        cudaEventDestroy(e1_);                                                                     \
    } while (0)

static float *dev_rand(tu_rng *r, size_t n, float scale) { return dup_h2d(rand_vec(r, n, scale), n * sizeof(float)); }

static void report(const char *what, double us, double bytes)
{
    printf("timing %-58s %9.2f us", what, us);
    if (bytes > 0)
        printf("  %7.1f GB/s", bytes / (us * 1e3));
    printf("\n");
    fflush(stdout);
}

/* split_ctas / pf: memra_attn_decode_args.split_ctas (0 one CTA per split, -1 auto) and
 * prefetch_batches */
static void time_attn_decode(int b, int ctx, int kv, int max_split, int split_ctas, int pf,
                             tu_rng *r)
{
    const int hq = 16, hkv = 4, dh = 256; /* qwen35-9b */
    const uint64_t hb = memra_kv_head_bytes(kv, dh), region = (uint64_t)ctx * hkv * hb;
    uint64_t *kt = halloc(sizeof(uint64_t) * (size_t)b), *vt = halloc(sizeof(uint64_t) * (size_t)b);
    uint8_t *kd = dalloc(region * (size_t)b), *vd = dalloc(region * (size_t)b);
    CK_CUDA(cudaMemset(kd, 0x3C, region * (size_t)b)); /* f16 1.06 / q8_0 scale 1.06, codes 60 */
    CK_CUDA(cudaMemset(vd, 0x3C, region * (size_t)b));
    int32_t *pos = halloc(sizeof(int32_t) * (size_t)b);
    for (int i = 0; i < b; i++) {
        kt[i] = (uint64_t)(uintptr_t)(kd + region * (size_t)i);
        vt[i] = (uint64_t)(uintptr_t)(vd + region * (size_t)i);
        pos[i] = ctx - 1;
    }
    const size_t nq = (size_t)b * hq * dh, ns = (size_t)b * hq * (size_t)max_split * (dh + 2);
    memra_attn_decode_args a = {.q = dev_rand(r, nq, 1.0f),
                                .qg = dev_rand(r, 2 * nq, 1.0f),
                                .positions = dup_h2d(pos, sizeof(int32_t) * (size_t)b),
                                .k_cache = dup_h2d(kt, sizeof(uint64_t) * (size_t)b),
                                .v_cache = dup_h2d(vt, sizeof(uint64_t) * (size_t)b),
                                .scratch = dalloc(ns * sizeof(float)),
                                .y_q = dalloc(nq / 32 * sizeof(memra_block_q8_1)),
                                .n_head = hq,
                                .n_head_kv = hkv,
                                .head_dim = dh,
                                .kv_type = kv,
                                .n_ctx = ctx,
                                .max_split = max_split,
                                .b = b,
                                .scale = 1.0f / 16.0f,
                                .split_ctas = split_ctas,
                                .prefetch_batches = pf};
    double us;
    TIME_OP(memra_attn_decode_cuda(&a, 0), 20, us);
    char what[128], pfs[24] = "";
    if (pf)
        snprintf(pfs, sizeof pfs, " prefetch=%d", pf);
    snprintf(what, sizeof what, "attn_decode 9b b=%d ctx=%d kv=%s max_split=%d%s%s", b, ctx,
             kv == MEMRA_QT_F16 ? "f16" : "q8_0", max_split,
             split_ctas == MEMRA_ATTN_SPLIT_CTAS_AUTO ? " split_ctas=auto" : "", pfs);
    report(what, us, 2.0 * (double)region * b);
    teardown_allocs();
}

/* split / bulk: memra_gdn_step_cuda_tune (0 / -1: the launcher's choice); pf: prefetch_tasks */
static void time_gdn(int b, int split, int bulk, int pf, tu_rng *r)
{
    const int hk = 16, hv = 32, dk = 128, dv = 128, K = 4, cv = hv * dv, cc = 2 * hk * dk + cv; /* qwen35-9b */
    enum { SETS = 4 }; /* rotate 4 state sets: 4 x 32 MiB at b = 16 exceeds the 60 MB L2 */
    const size_t sb = sizeof(float) * (size_t)cv * dk, cb = sizeof(float) * (size_t)cc * (K - 1);
    uint64_t *st[SETS], *ct[SETS];
    for (int s = 0; s < SETS; s++) {
        uint64_t *hs = halloc(sizeof(uint64_t) * (size_t)b), *hc = halloc(sizeof(uint64_t) * (size_t)b);
        uint8_t *ds = (uint8_t *)dev_rand(r, sb / 4 * (size_t)b, 0.3f), *dcv = (uint8_t *)dev_rand(r, cb / 4 * (size_t)b, 1.0f);
        for (int i = 0; i < b; i++) {
            hs[i] = (uint64_t)(uintptr_t)(ds + sb * (size_t)i);
            hc[i] = (uint64_t)(uintptr_t)(dcv + cb * (size_t)i);
        }
        st[s] = dup_h2d(hs, sizeof(uint64_t) * (size_t)b);
        ct[s] = dup_h2d(hc, sizeof(uint64_t) * (size_t)b);
    }
    float *aw = halloc(sizeof(float) * hv);
    for (int h = 0; h < hv; h++)
        aw[h] = -1.0f;
    memra_gdn_step_args a = {.qkv = dev_rand(r, (size_t)b * cc, 1.0f),
                             .z = dev_rand(r, (size_t)b * cv, 1.0f),
                             .beta = dev_rand(r, (size_t)b * hv, 1.0f),
                             .alpha = dev_rand(r, (size_t)b * hv, 1.0f),
                             .conv_w = dev_rand(r, (size_t)cc * K, 0.5f),
                             .dt_bias = dev_rand(r, hv, 0.5f),
                             .ssm_a = dup_h2d(aw, sizeof(float) * hv),
                             .norm_w = dev_rand(r, dv, 1.0f),
                             .y_q = dalloc((size_t)b * cv / 32 * sizeof(memra_block_q8_1)),
                             .n_k_head = hk,
                             .n_v_head = hv,
                             .head_k_dim = dk,
                             .head_v_dim = dv,
                             .conv_k = K,
                             .head_map = MEMRA_GDN_HEADS_TILED,
                             .b = b,
                             .eps = 1e-6f,
                             .prefetch_tasks = pf};
    int set = 0;
    double us;
    memra_gdn_step_cuda_tune(split, bulk);
    TIME_OP((a.ssm_state = st[set % SETS], a.conv_state = ct[set++ % SETS], memra_gdn_step_cuda(&a, 0)), 20, us);
    memra_gdn_step_cuda_tune(0, -1);
    char sp[12] = "auto", pfs[24] = "", what[112];
    if (split)
        snprintf(sp, sizeof sp, "%d", split);
    if (pf)
        snprintf(pfs, sizeof pfs, " prefetch=%d", pf);
    snprintf(what, sizeof what, "gdn_step 9b b=%d split=%s bulk=%s%s (state read+write)", b, sp,
             bulk < 0 ? "auto"
             : bulk   ? "on"
                      : "off",
             pfs);
    report(what, us, 2.0 * (double)sb * b);
    teardown_allocs();
}

static void time_small_ops(tu_rng *r)
{
    const int b = 16;
    double us;
    memra_rms_norm_q8_args rn = {.x = dev_rand(r, (size_t)b * 4096, 1.0f), .w = dev_rand(r, 4096, 1.0f),
                                 .y_q = dalloc((size_t)b * 4096 / 32 * 36), .n = 4096, .b = b, .eps = 1e-6f};
    TIME_OP(memra_rms_norm_q8_cuda(&rn, 0), 50, us);
    report("rms_norm_q8 b=16 n=4096", us, 0);
    memra_silu_mul_q8_args sm = {.b = b, .n_slots = 1};
    sm.slot[0] = (memra_silu_mul_q8_slot){.g = dev_rand(r, (size_t)b * 12288, 1.0f), .u = dev_rand(r, (size_t)b * 12288, 1.0f),
                                          .y_q = dalloc((size_t)b * 12288 / 32 * 36), .n = 12288, .m = 1};
    TIME_OP(memra_silu_mul_q8_cuda(&sm, 0), 50, us);
    report("silu_mul_q8 b=16 n=12288", us, 0);
    memra_moe_route_args mr = {.logits = dev_rand(r, (size_t)b * 512, 2.0f), .ids = dalloc((size_t)b * 10 * 4),
                               .weights = dalloc((size_t)b * 10 * 4), .n_expert = 512, .n_used = 10, .b = b};
    TIME_OP(memra_moe_route_cuda(&mr, 0), 50, us);
    report("moe_route b=16 E=512 k=10", us, 0);
    const size_t rb = memra_quant_row_bytes(MEMRA_QT_Q4_K, 4096);
    uint8_t *tab = halloc(rb * 1000);
    for (size_t i = 0; i < rb * 1000; i++)
        tab[i] = (uint8_t)(i * 37u);
    int32_t tok[16];
    for (int i = 0; i < b; i++)
        tok[i] = i * 61;
    memra_embed_args em = {.table = dup_h2d(tab, rb * 1000), .tokens = dup_h2d(tok, sizeof tok),
                           .x = dalloc((size_t)b * 4096 * 4), .qtype = MEMRA_QT_Q4_K, .n_embd = 4096, .n_vocab = 1000,
                           .b = b, .row_bytes = rb};
    TIME_OP(memra_embed_cuda(&em, 0), 50, us);
    report("embed b=16 q4_K n_embd=4096", us, 0);
}

static void time_prep_sample(tu_rng *r)
{
    const int b = 16, hq = 16, hkv = 4, dh = 256, ctx = 4096, v = 248320;
    const uint64_t region = (uint64_t)ctx * hkv * dh * 2;
    uint8_t *kd = dalloc(region * b), *vd = dalloc(region * b);
    uint64_t kt[16], vt[16];
    int32_t pos[16];
    for (int i = 0; i < b; i++) {
        kt[i] = (uint64_t)(uintptr_t)(kd + region * (size_t)i);
        vt[i] = (uint64_t)(uintptr_t)(vd + region * (size_t)i);
        pos[i] = 100 * i;
    }
    memra_attn_prep_args ap = {.qg = dev_rand(r, (size_t)b * 2 * hq * dh, 1.0f), .k = dev_rand(r, (size_t)b * hkv * dh, 1.0f),
                               .v = dev_rand(r, (size_t)b * hkv * dh, 1.0f), .q_norm = dev_rand(r, dh, 1.0f),
                               .k_norm = dev_rand(r, dh, 1.0f), .positions = dup_h2d(pos, sizeof pos),
                               .k_cache = dup_h2d(kt, sizeof kt), .v_cache = dup_h2d(vt, sizeof vt),
                               .q = dalloc((size_t)b * hq * dh * 4), .n_head = hq, .n_head_kv = hkv, .head_dim = dh,
                               .n_rot = 64, .sections = {11, 11, 10, 0}, .kv_type = MEMRA_QT_F16, .n_ctx = ctx, .b = b,
                               .eps = 1e-6f, .freq_base = 1e7f, .freq_scale = 1.0f};
    double us;
    TIME_OP(memra_attn_prep_cuda(&ap, 0), 50, us);
    report("attn_prep 9b b=16", us, 0);
    memra_sample_params p[16];
    for (int greedy = 1; greedy >= 0; greedy--) {
        for (int i = 0; i < b; i++)
            p[i] = greedy ? (memra_sample_params){.temperature = 0} : sample_params(i % 4 == 0 ? 1 : i, (uint64_t)i);
        memra_sample_args sa = {.logits = dev_rand(r, (size_t)b * v, 3.0f), .params = dup_h2d(p, sizeof p),
                                .out_tokens = dalloc(b * 4), .scratch = NULL, .n_vocab = v, .b = b};
        TIME_OP(memra_sample_cuda(&sa, 0), 20, us);
        report(greedy ? "sample b=16 V=248320 greedy" : "sample b=16 V=248320 top-k/top-p mix", us, 4.0 * b * v);
    }
}

START_TEST(test_timing)
{
    GPU_OR_SKIP();
    if (!getenv("MEMRA_GPU_TIMING")) {
        fprintf(stderr, "SKIP %s: set MEMRA_GPU_TIMING=1 to time the kernels\n", __func__);
        return;
    }
    tu_rng r;
    tu_rng_seed(&r, 0x7173u);
    time_attn_decode(16, 32768, MEMRA_QT_F16, 32, 0, 0, &r);
    time_attn_decode(16, 32768, MEMRA_QT_F16, 64, 0, 0, &r);
    time_attn_decode(16, 32768, MEMRA_QT_Q8_0, 32, 0, 0, &r);
    time_attn_decode(1, 32768, MEMRA_QT_F16, 128, 0, 0, &r);
    time_attn_decode(16, 4096, MEMRA_QT_F16, 32, 0, 0, &r);
    /* the plans' max_split: one CTA per split against a grid that stays resident, without and
     * with the L2 prefetch of key batches ahead */
    static const int at_b[4] = {1, 2, 8, 16}, at_ctx[2] = {1024, 32768};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 2; k++) {
            time_attn_decode(at_b[i], at_ctx[k], MEMRA_QT_F16, MEMRA_ATTN_MAX_SPLIT, 0, 0, &r);
            time_attn_decode(at_b[i], at_ctx[k], MEMRA_QT_F16, MEMRA_ATTN_MAX_SPLIT,
                             MEMRA_ATTN_SPLIT_CTAS_AUTO, 0, &r);
            time_attn_decode(at_b[i], at_ctx[k], MEMRA_QT_F16, MEMRA_ATTN_MAX_SPLIT, 0, 2, &r);
            time_attn_decode(at_b[i], at_ctx[k], MEMRA_QT_F16, MEMRA_ATTN_MAX_SPLIT,
                             MEMRA_ATTN_SPLIT_CTAS_AUTO, 4, &r);
        }
    /* gdn_step: the launcher's choice, then each split with the bulk prefetch on / off */
    static const int gdn_b[5] = {1, 2, 4, 8, 16};
    for (int i = 0; i < 5; i++) {
        time_gdn(gdn_b[i], 0, -1, 0, &r);
        for (int sp = 1; sp <= 4; sp *= 2)
            for (int bulk = 0; bulk <= 1; bulk++)
                time_gdn(gdn_b[i], sp, bulk, 0, &r);
    }
    /* the 4-warp kernel (b 12, 16) with its state-row tasks prefetched 1 and 2 ahead */
    for (int b = 12; b <= 16; b += 4)
        for (int pf = 0; pf <= 2; pf++)
            time_gdn(b, 0, -1, pf, &r);
    time_small_ops(&r);
    time_prep_sample(&r);
}
END_TEST

/* ===================================== synth_fill ==================================== */

/* The benchmarks' synthetic history: the device fill writes the CPU fill's bytes (the
 * contract of memra_cuda_session_fill_synthetic), for every dtype a slot region has, with
 * the delta-rule amplitude, an odd length and the q8_0 block layout. */
START_TEST(test_synth_fill)
{
    GPU_OR_SKIP();
    static const struct {
        int32_t dtype;
        uint64_t bytes;
        float amp;
    } cs[] = {{MEMRA_DT_F32, 4 * 4099, 1.0f}, {MEMRA_DT_F32, 4 * 1000, 0.25f},
              {MEMRA_DT_F16, 2 * 4097, 1.0f}, {MEMRA_DT_Q8_0, 34 * 129, 1.0f}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        memra_synth_fill_args a = {.bytes = cs[i].bytes, .seed = 42 + i, .region = (uint32_t)(3 * i),
                                   .dtype = cs[i].dtype, .amp = cs[i].amp};
        a.dst = halloc(a.bytes);
        ck_assert_int_eq(memra_synth_fill_ref(&a), MEMRA_OK);
        const void *want = a.dst;
        void *got = halloc(a.bytes);
        a.dst = dalloc(a.bytes);
        poison(a.dst, a.bytes);
        CK_OP(memra_synth_fill_cuda(&a, 0));
        d2h(got, a.dst, a.bytes);
        char what[64];
        snprintf(what, sizeof what, "synth_fill case %zu (dtype %d)", i, (int)cs[i].dtype);
        check_same(what, got, want, a.bytes);
    }
    memra_synth_fill_args bad = {.dst = dalloc(40), .bytes = 33, .dtype = MEMRA_DT_Q8_0};
    ck_assert_int_eq(memra_synth_fill_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ==================================== copy_words ==================================== */

/* The CUDA backend's tick-block copies (memra_copy_words_cuda): mapped pinned host memory to
 * the device and back, device to device, over one word, a partial CUDA block, and more words
 * than the grid covers at once (the grid-stride loop); the bytes past the copy untouched;
 * refusals of odd sizes, misaligned and null pointers. */
START_TEST(test_copy_words)
{
    GPU_OR_SKIP();
    static const size_t sizes[] = {4, 4100, (size_t)4 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t n = sizes[i];
        uint32_t *src = NULL, *dst = NULL;
        CK_CUDA(cudaHostAlloc((void **)&src, n + 64, cudaHostAllocMapped));
        CK_CUDA(cudaHostAlloc((void **)&dst, n + 64, cudaHostAllocMapped));
        for (size_t k = 0; k < (n + 64) / 4; k++)
            src[k] = (uint32_t)(k * 2654435761u);
        memset(dst, 0xA5, n + 64);
        void *msrc = NULL, *mdst = NULL;
        CK_CUDA(cudaHostGetDevicePointer(&msrc, src, 0));
        CK_CUDA(cudaHostGetDevicePointer(&mdst, dst, 0));
        uint8_t *d1 = dalloc(n + 64), *d2 = dalloc(n + 64);
        CK_CUDA(cudaMemset(d2, 0x5A, n + 64));
        CK_OP(memra_copy_words_cuda(d1, msrc, n, 0));  /* host -> device */
        CK_OP(memra_copy_words_cuda(d2, d1, n, 0));    /* device -> device */
        CK_OP(memra_copy_words_cuda(mdst, d2, n, 0));  /* device -> host */
        CK_CUDA(cudaDeviceSynchronize());
        ck_assert_msg(memcmp(dst, src, n) == 0, "copy_words: %zu bytes differ after the round trip", n);
        for (size_t k = n; k < n + 64; k++)
            ck_assert_msg(((uint8_t *)dst)[k] == 0xA5, "copy_words: byte %zu past %zu written", k, n);
        uint8_t tail[64];
        d2h(tail, d2 + n, 64);
        for (size_t k = 0; k < 64; k++)
            ck_assert_msg(tail[k] == 0x5A, "copy_words: device byte %zu past %zu written", n + k, n);
        CK_CUDA(cudaFreeHost(src));
        CK_CUDA(cudaFreeHost(dst));
    }
    uint8_t *d = dalloc(64);
    ck_assert_int_eq(memra_copy_words_cuda(d, d + 32, 6, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_copy_words_cuda(d + 2, d + 32, 8, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_copy_words_cuda(d, d + 34, 8, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_copy_words_cuda(NULL, d, 8, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_copy_words_cuda(d, d + 32, 0, 0), MEMRA_OK);
}
END_TEST

static int l2_prefetch_enqueue(const void *a, cudaStream_t s)
{
    return memra_l2_prefetch_cuda(a, s);
}

/* The side-branch L2 prefetch (the CUDA backend's opts.l2_side_mib): it runs over real
 * buffers and changes no byte of them, its grid is one warp per 4 KiB piece up to one per SM
 * (none for empty ranges), and bad ranges are refused before anything is enqueued. */
START_TEST(test_l2_prefetch)
{
    GPU_OR_SKIP();
    const size_t n = (size_t)8 << 20;
    uint8_t *h = halloc(n + 64), *back = halloc(n + 64);
    for (size_t k = 0; k < n + 64; k++)
        h[k] = (uint8_t)(k * 131u + 7u);
    uint8_t *d = dalloc(n + 64);
    h2d(d, h, n + 64);
    memra_l2_prefetch_args a = {
        .n = 4, .p = {d, d + 16, d + 4096, d + 64}, .bytes = {0, 16, 3 * 4096 + 16, n}};
    CK_OP(memra_l2_prefetch_cuda(&a, 0));
    CK_CUDA(cudaDeviceSynchronize());
    d2h(back, d, n + 64);
    ck_assert_msg(memcmp(back, h, n + 64) == 0, "l2_prefetch changed a byte of its ranges");
    int dev = 0, sms = 0;
    CK_CUDA(cudaGetDevice(&dev));
    CK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    captured_kernel k[2];
    ck_assert_int_eq(capture_kernels(l2_prefetch_enqueue, &a, k, 2), 1);
    ck_assert_uint_eq(k[0].block.x, 32);
    ck_assert_uint_eq(k[0].grid.x, (unsigned)sms); /* 2053 pieces */
    const memra_l2_prefetch_args few = {.n = 2, .p = {d, d + 4096}, .bytes = {4096 + 16, 4096}};
    ck_assert_int_eq(capture_kernels(l2_prefetch_enqueue, &few, k, 2), 1);
    ck_assert_uint_eq(k[0].grid.x, 3); /* 2 + 1 pieces, one CTA each */
    const memra_l2_prefetch_args chunks = {
        .n = 2, .p = {d, d + 16}, .bytes = {4096 + 16, 32}, .stride = {8192, 64}, .count = {5, 3}};
    CK_OP(memra_l2_prefetch_cuda(&chunks, 0)); /* 5 x 2 + 3 pieces */
    CK_CUDA(cudaDeviceSynchronize());
    d2h(back, d, n + 64);
    ck_assert_msg(memcmp(back, h, n + 64) == 0, "l2_prefetch (chunks) changed a byte");
    ck_assert_int_eq(capture_kernels(l2_prefetch_enqueue, &chunks, k, 2), 1);
    ck_assert_uint_eq(k[0].grid.x, 13);
    /* q6_K rows: chunks 2-byte aligned at a stride of 210 bytes, each from the 16-byte
     * boundary below it, the last ending 16 bytes before the buffer's end */
    const memra_l2_prefetch_args rows = {
        .n = 1, .p = {d + n + 64 - 7 * 210 + 2}, .bytes = {192}, .stride = {210}, .count = {7}};
    CK_OP(memra_l2_prefetch_cuda(&rows, 0));
    CK_CUDA(cudaDeviceSynchronize());
    d2h(back, d, n + 64);
    ck_assert_msg(memcmp(back, h, n + 64) == 0, "l2_prefetch (q6_K rows) changed a byte");
    ck_assert_int_eq(capture_kernels(l2_prefetch_enqueue, &rows, k, 2), 1);
    ck_assert_uint_eq(k[0].grid.x, 7);
    const memra_l2_prefetch_args none = {.n = 1, .p = {d}, .bytes = {0}};
    ck_assert_int_eq(capture_kernels(l2_prefetch_enqueue, &none, k, 2), 0);
    memra_l2_prefetch_args bad = {.n = MEMRA_L2_PREFETCH_MAX_RANGES + 1};
    ck_assert_int_eq(memra_l2_prefetch_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG);
    bad = (memra_l2_prefetch_args){.n = 1, .p = {(void *)8}, .bytes = {16}}; /* below 16: NULL */
    ck_assert_int_eq(memra_l2_prefetch_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG);
    bad = (memra_l2_prefetch_args){.n = 1, .p = {d}, .bytes = {24}};
    ck_assert_int_eq(memra_l2_prefetch_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG);
    bad = (memra_l2_prefetch_args){.n = 1, .p = {d}, .bytes = {32}, .stride = {16}, .count = {2}};
    ck_assert_int_eq(memra_l2_prefetch_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG); /* overlapping */
    bad = (memra_l2_prefetch_args){.n = 1, .p = {NULL}, .bytes = {16}};
    ck_assert_int_eq(memra_l2_prefetch_cuda(&bad, 0), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_l2_prefetch_cuda(NULL, 0), MEMRA_ERR_INVALID_ARG);
}
END_TEST

Suite *make_ops_gpu_suite(void)
{
    Suite *s = suite_create("ops_gpu");
    GPU_ADD_CASE(s, "embed", test_embed, test_embed_rejects);
    GPU_ADD_CASE(s, "rms_norm_q8", test_rms_norm_q8);
    GPU_ADD_CASE(s, "silu_mul_q8", test_silu_mul_q8, test_silu_mul_q8_isolation);
    GPU_ADD_CASE(s, "moe_route", test_moe_route);
    GPU_ADD_CASE(s, "attn_prep", test_attn_prep, test_attn_rejects);
    GPU_ADD_CASE(s, "attn_decode", test_attn_decode, test_attn_decode_splits,
                 test_attn_decode_lengths, test_attn_decode_split_ctas, test_attn_decode_prefetch,
                 test_attn_decode_launch_shape);
    GPU_ADD_CASE(s, "gdn_step", test_gdn_step, test_gdn_launch_shape, test_gdn_rejects);
    GPU_ADD_CASE(s, "l2_prefetch", test_l2_prefetch);
    GPU_ADD_CASE(s, "sample", test_sample, test_sample_draws, test_sample_edges);
    GPU_ADD_CASE(s, "exact_math", test_exact_math_gpu);
    GPU_ADD_CASE(s, "synth_fill", test_synth_fill);
    GPU_ADD_CASE(s, "copy_words", test_copy_words);
    GPU_ADD_CASE(s, "timing", test_timing);
    return s;
}
