/*
 * test_moe_gpu.c — the CUDA MoE ops mmvq_moe and moe_down (kernels/mmvq_moe.cu,
 * kernels/moe_down.cu) against their CPU references (kernels/ref/), in the GPU binary
 * memra-gpu-ops-tests (suite moe_gpu; run with CK_FORK=no; every test SKIPs with the reason
 * where there is no usable GPU).
 *
 * Checks, per shape (the tiny-moe and 35b-a3b FFN geometries with the Q4_K_M mix's types,
 * odd sizes with partial 16-row tiles, per-expert scales and out-of-range ids, and every
 * dot-capable weight type):
 *   - bit-identical (memcmp) to the reference at every tier B = 1..16: the reference is run
 *     once on 16 rows (its rows are independent) and tier B must give its first B rows;
 *     outputs are poisoned (0xFF = NaN) before every mmvq_moe launch, and moe_down's rows
 *     >= B must stay untouched;
 *   - isolation: row 15 launched alone (B = 1, pointers moved to it) gives row 15's bytes.
 * On failure the first differing element is named with both values (%.9g and hex).
 * MEMRA_GPU_TIMING=1: test_moe_timing prints kernel times of the 35b-a3b shapes.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_ops.h"
#include "memra.h"
#include "quant.h"
#include "gpu/gpu_ops_util.h"
#include "test_util.h"

/* ================================== infrastructure ================================== */

static void d2h(void *h, const void *d, size_t n)
{
    CK_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

static float *rand_vec(tu_rng *r, size_t n, float scale)
{
    float *v = halloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = tu_rng_normal(r) * scale;
    return v;
}

/* q8_1 blocks of n random values (n % 32 == 0). */
static memra_block_q8_1 *rand_q8_1(tu_rng *r, size_t n)
{
    float *x = rand_vec(r, n, 1.0f);
    memra_block_q8_1 *q = halloc(n / 32 * sizeof *q);
    memra_quantize_q8_1(x, q, (int64_t)n);
    return q;
}

/* rows rows of k random values in type qt (the reference quantizer); *row_bytes set. */
static uint8_t *rand_weight(tu_rng *r, memra_qtype qt, int k, int rows, uint64_t *row_bytes)
{
    ck_assert_msg(memra_quant_can_quantize(qt) && memra_quant_can_dot(qt), "type %d", (int)qt);
    const size_t rb = memra_quant_row_bytes(qt, k);
    ck_assert_uint_gt(rb, 0);
    uint8_t *w = halloc(rb * (size_t)rows);
    float *x = halloc(sizeof(float) * (size_t)k);
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < k; j++)
            x[j] = tu_rng_normal(r);
        ck_assert_int_eq(memra_quantize_row(qt, x, w + rb * (size_t)i, k), 0);
    }
    *row_bytes = rb;
    return w;
}

/* ids [16, U]: U distinct experts per row (a partial Fisher-Yates), optionally with the
 * out-of-range ids -1 (row 3, rank 0) and E (row 7, last rank). */
static int32_t *rand_ids(tu_rng *r, int E, int U, int bad)
{
    int32_t *ids = halloc(sizeof(int32_t) * 16 * (size_t)U);
    int32_t *perm = halloc(sizeof(int32_t) * (size_t)E);
    for (int b = 0; b < 16; b++) {
        for (int e = 0; e < E; e++)
            perm[e] = e;
        for (int k = 0; k < U; k++) {
            const int j = k + (int)(tu_rng_u64(r) % (uint64_t)(E - k));
            const int32_t t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
            ids[b * U + k] = perm[k];
        }
    }
    if (bad) {
        ids[3 * U] = -1;
        ids[7 * U + U - 1] = E;
    }
    return ids;
}

static const memra_qtype k_types[] = {
    MEMRA_QT_F32,  MEMRA_QT_F16,  MEMRA_QT_BF16, MEMRA_QT_Q4_0,   MEMRA_QT_Q4_1,
    MEMRA_QT_Q5_0, MEMRA_QT_Q5_1, MEMRA_QT_Q8_0, MEMRA_QT_IQ4_NL, MEMRA_QT_MXFP4,
    MEMRA_QT_NVFP4, MEMRA_QT_Q4_K, MEMRA_QT_Q5_K, MEMRA_QT_Q6_K,  MEMRA_QT_IQ4_XS,
};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* ===================================== mmvq_moe ===================================== */

typedef struct mcase {
    const char *name;
    int k, n0, n1, E, U; /* n1 = 0: one weight */
    memra_qtype qt0, qt1;
    int scale0, scale1, bad_ids;
} mcase;

static void mmvq_moe_case(const mcase *c, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int nw = c->n1 > 0 ? 2 : 1, n[2] = {c->n0, c->n1}, sc[2] = {c->scale0, c->scale1};
    const memra_qtype qt[2] = {c->qt0, c->qt1};
    memra_block_q8_1 *aq = rand_q8_1(&r, (size_t)16 * (size_t)c->k);
    int32_t *ids = rand_ids(&r, c->E, c->U, c->bad_ids);
    memra_mmvq_moe_args h = {.a = aq, .ids = ids, .k = c->k, .n_used = c->U, .n_expert = c->E,
                             .b = 16, .n_w = nw};
    memra_mmvq_moe_args d = h;
    d.a = dup_h2d(aq, sizeof *aq * 16 * (size_t)(c->k / 32));
    d.ids = dup_h2d(ids, sizeof(int32_t) * 16 * (size_t)c->U);
    size_t ny[2] = {0, 0};
    float *y[2] = {NULL, NULL};
    for (int i = 0; i < nw; i++) {
        uint64_t rb;
        uint8_t *w = rand_weight(&r, qt[i], c->k, n[i] * c->E, &rb);
        float *s = NULL;
        if (sc[i]) {
            s = halloc(sizeof(float) * (size_t)c->E);
            for (int e = 0; e < c->E; e++)
                s[e] = 0.5f + 0.375f * (float)e;
        }
        ny[i] = (size_t)16 * (size_t)c->U * (size_t)n[i];
        h.out[i] = (memra_mmvq_moe_out){.w = w, .scale = s, .y = halloc(sizeof(float) * ny[i]),
                                        .qtype = qt[i], .n_out = n[i], .row_bytes = rb,
                                        .expert_bytes = rb * (uint64_t)n[i]};
        d.out[i] = h.out[i];
        d.out[i].w = dup_h2d(w, rb * (size_t)n[i] * (size_t)c->E);
        d.out[i].scale = s ? dup_h2d(s, sizeof(float) * (size_t)c->E) : NULL;
        d.out[i].y = dalloc(sizeof(float) * ny[i]);
        y[i] = halloc(sizeof(float) * ny[i]);
    }
    ck_assert_int_eq(memra_mmvq_moe_ref(&h), MEMRA_OK);
    char what[160];
    for (int B = 1; B <= 16; B++) {
        d.b = B;
        for (int i = 0; i < nw; i++)
            CK_CUDA(cudaMemset(d.out[i].y, 0xFF, sizeof(float) * ny[i]));
        CK_OP(memra_mmvq_moe_cuda(&d, 0));
        for (int i = 0; i < nw; i++) {
            d2h(y[i], d.out[i].y, sizeof(float) * ny[i]);
            snprintf(what, sizeof what, "mmvq_moe %s B=%d weight %d (%s)", c->name, B, i,
                     memra_qtype_get(qt[i])->name);
            gpu_expect_same_f32(what, y[i], h.out[i].y, (size_t)B * (size_t)c->U * (size_t)n[i]);
        }
    }
    /* row 15 alone */
    memra_mmvq_moe_args one = d;
    one.b = 1;
    one.a = (const memra_block_q8_1 *)d.a + 15 * (size_t)(c->k / 32);
    one.ids = d.ids + 15 * (size_t)c->U;
    for (int i = 0; i < nw; i++) {
        one.out[i].y = dalloc(sizeof(float) * (size_t)c->U * (size_t)n[i]);
        CK_CUDA(cudaMemset(one.out[i].y, 0xFF, sizeof(float) * (size_t)c->U * (size_t)n[i]));
    }
    CK_OP(memra_mmvq_moe_cuda(&one, 0));
    for (int i = 0; i < nw; i++) {
        d2h(y[i], one.out[i].y, sizeof(float) * (size_t)c->U * (size_t)n[i]);
        snprintf(what, sizeof what, "mmvq_moe %s row 15 alone, weight %d", c->name, i);
        gpu_expect_same_f32(what, y[i], h.out[i].y + (size_t)15 * c->U * n[i], (size_t)c->U * n[i]);
    }
}

START_TEST(test_mmvq_moe_shapes)
{
    GPU_OR_SKIP();
    static const mcase cases[] = {
        /* tiny-moe: D 256, Fe 256, E 8, top-2; gate/up Q4_K */
        {"tiny-moe", 256, 256, 256, 8, 2, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, 0, 0, 0},
        /* 35b-a3b: D 2048, Fe 512, top-8 (16 of its 256 experts stored here) */
        {"35b-a3b", 2048, 512, 512, 16, 8, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, 0, 0, 0},
        /* odd: partial tiles, three blocks, scales, bad ids, one weight */
        {"odd", 96, 7, 33, 5, 3, MEMRA_QT_Q8_0, MEMRA_QT_Q5_0, 1, 1, 1},
        {"odd one weight", 64, 40, 0, 3, 3, MEMRA_QT_Q4_0, MEMRA_QT_Q4_0, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        mmvq_moe_case(&cases[i], 100 + i);
}
END_TEST

START_TEST(test_mmvq_moe_types)
{
    GPU_OR_SKIP();
    for (int t = 0; t < N_TYPES; t++) {
        char name[64];
        snprintf(name, sizeof name, "types %s+%s", memra_qtype_get(k_types[t])->name,
                 memra_qtype_get(k_types[(t + 1) % N_TYPES])->name);
        const mcase c = {name, 512, 20, 37, 4, 2, k_types[t], k_types[(t + 1) % N_TYPES], t & 1, 1,
                         t % 3 == 0};
        mmvq_moe_case(&c, 200 + (uint64_t)t);
    }
}
END_TEST

START_TEST(test_mmvq_moe_rejects)
{
    GPU_OR_SKIP();
    memra_mmvq_moe_args a = {.a = (void *)16, .ids = (void *)16, .k = 256, .n_used = 1,
                             .n_expert = 1, .b = 1, .n_w = 1};
    a.out[0] = (memra_mmvq_moe_out){.w = (void *)16, .y = (void *)16, .qtype = MEMRA_QT_Q4_K,
                                    .n_out = 1, .row_bytes = 100, .expert_bytes = 144};
    ck_assert_int_eq(memra_mmvq_moe_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* row_bytes */
    a.out[0].qtype = MEMRA_QT_Q2_K;
    a.out[0].row_bytes = 84;
    ck_assert_int_eq(memra_mmvq_moe_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* no dot */
    a.n_w = 0;
    ck_assert_int_eq(memra_mmvq_moe_cuda(&a, 0), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ===================================== moe_down ===================================== */

typedef struct dcase {
    const char *name;
    int k, n, E, U;
    memra_qtype qt;
    int scale;
    int k_sh; /* 0: no shared expert */
    memra_qtype sh_qt;
    int sh_scale, bad_ids;
} dcase;

static void moe_down_case(const dcase *c, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    const size_t nx = (size_t)16 * (size_t)c->n;
    memra_block_q8_1 *aq = rand_q8_1(&r, (size_t)16 * (size_t)c->U * (size_t)c->k);
    int32_t *ids = rand_ids(&r, c->E, c->U, c->bad_ids);
    float *wts = halloc(sizeof(float) * 16 * (size_t)c->U);
    for (int i = 0; i < 16 * c->U; i++)
        wts[i] = tu_rng_uniform(&r);
    uint64_t rb = 0, sh_rb = 0;
    uint8_t *w = rand_weight(&r, c->qt, c->k, c->n * c->E, &rb);
    float *scale = NULL;
    if (c->scale) {
        scale = halloc(sizeof(float) * (size_t)c->E);
        for (int e = 0; e < c->E; e++)
            scale[e] = 1.25f - 0.125f * (float)e;
    }
    float *x0 = rand_vec(&r, nx, 2.0f), *want = halloc(sizeof(float) * nx);
    memcpy(want, x0, sizeof(float) * nx);
    memra_moe_down_args h = {.a = aq, .ids = ids, .wts = wts, .w = w, .scale = scale, .x = want,
                             .row_bytes = rb, .expert_bytes = rb * (uint64_t)c->n,
                             .qtype = c->qt, .k = c->k, .n = c->n, .n_used = c->U,
                             .n_expert = c->E, .b = 16};
    memra_moe_down_args d = h;
    d.a = dup_h2d(aq, sizeof *aq * 16 * (size_t)c->U * (size_t)(c->k / 32));
    d.ids = dup_h2d(ids, sizeof(int32_t) * 16 * (size_t)c->U);
    d.wts = dup_h2d(wts, sizeof(float) * 16 * (size_t)c->U);
    d.w = dup_h2d(w, rb * (size_t)c->n * (size_t)c->E);
    d.scale = scale ? dup_h2d(scale, sizeof(float) * (size_t)c->E) : NULL;
    d.x = dalloc(sizeof(float) * nx);
    if (c->k_sh) {
        memra_block_q8_1 *sq = rand_q8_1(&r, (size_t)16 * (size_t)c->k_sh);
        uint8_t *sw = rand_weight(&r, c->sh_qt, c->k_sh, c->n, &sh_rb);
        float *gate = rand_vec(&r, 16, 3.0f), *ss = NULL;
        gate[5] = 0.0f;
        gate[6] = -30.0f;
        if (c->sh_scale) {
            ss = halloc(sizeof(float));
            ss[0] = 0.8125f;
        }
        h.sh_a = sq;
        h.sh_w = sw;
        h.sh_scale = ss;
        h.sh_gate = gate;
        h.sh_row_bytes = sh_rb;
        h.sh_qtype = c->sh_qt;
        h.k_sh = c->k_sh;
        d.sh_a = dup_h2d(sq, sizeof *sq * 16 * (size_t)(c->k_sh / 32));
        d.sh_w = dup_h2d(sw, sh_rb * (size_t)c->n);
        d.sh_scale = ss ? dup_h2d(ss, sizeof(float)) : NULL;
        d.sh_gate = dup_h2d(gate, sizeof(float) * 16);
        d.sh_row_bytes = sh_rb;
        d.sh_qtype = c->sh_qt;
        d.k_sh = c->k_sh;
    }
    ck_assert_int_eq(memra_moe_down_ref(&h), MEMRA_OK);
    float *got = halloc(sizeof(float) * nx);
    char what[160];
    for (int B = 1; B <= 16; B++) {
        d.b = B;
        CK_CUDA(cudaMemcpy(d.x, x0, sizeof(float) * nx, cudaMemcpyHostToDevice));
        CK_OP(memra_moe_down_cuda(&d, 0));
        d2h(got, d.x, sizeof(float) * nx);
        snprintf(what, sizeof what, "moe_down %s (%s%s%s) B=%d", c->name,
                 memra_qtype_get(c->qt)->name, c->k_sh ? ", shared " : "",
                 c->k_sh ? memra_qtype_get(c->sh_qt)->name : "", B);
        gpu_expect_same_f32(what, got, want, (size_t)B * (size_t)c->n);
        snprintf(what, sizeof what, "moe_down %s B=%d: rows >= B untouched", c->name, B);
        gpu_expect_same_f32(what, got + (size_t)B * c->n, x0 + (size_t)B * c->n, nx - (size_t)B * c->n);
    }
    /* row 15 alone */
    memra_moe_down_args one = d;
    one.b = 1;
    one.a = (const memra_block_q8_1 *)d.a + 15 * (size_t)c->U * (size_t)(c->k / 32);
    one.ids = d.ids + 15 * (size_t)c->U;
    one.wts = d.wts + 15 * (size_t)c->U;
    one.x = dup_h2d(x0 + (size_t)15 * c->n, sizeof(float) * (size_t)c->n);
    if (c->k_sh) {
        one.sh_a = (const memra_block_q8_1 *)d.sh_a + 15 * (size_t)(c->k_sh / 32);
        one.sh_gate = d.sh_gate + 15;
    }
    CK_OP(memra_moe_down_cuda(&one, 0));
    d2h(got, one.x, sizeof(float) * (size_t)c->n);
    snprintf(what, sizeof what, "moe_down %s row 15 alone", c->name);
    gpu_expect_same_f32(what, got, want + (size_t)15 * c->n, (size_t)c->n);
}

START_TEST(test_moe_down_shapes)
{
    GPU_OR_SKIP();
    static const dcase cases[] = {
        /* tiny-moe: Fe = Fs = 256, D 256, E 8, top-2; Q6_K / Q4_K layers (Q4_K_M) */
        {"tiny-moe q6_k", 256, 256, 8, 2, MEMRA_QT_Q6_K, 0, 256, MEMRA_QT_Q6_K, 0, 0},
        {"tiny-moe q4_k", 256, 256, 8, 2, MEMRA_QT_Q4_K, 0, 256, MEMRA_QT_Q4_K, 0, 0},
        /* 35b-a3b: Fe = Fs = 512, D 2048, top-8 (16 experts stored here) */
        {"35b-a3b", 512, 2048, 16, 8, MEMRA_QT_Q6_K, 0, 512, MEMRA_QT_Q4_K, 0, 0},
        /* odd: partial tile, scales, bad ids, a shared expert of another width and type */
        {"odd", 64, 40, 4, 3, MEMRA_QT_Q8_0, 1, 96, MEMRA_QT_F16, 1, 1},
        {"odd no shared", 96, 23, 6, 5, MEMRA_QT_Q5_0, 1, 0, MEMRA_QT_F32, 0, 1},
        {"top-1 of 1", 32, 17, 1, 1, MEMRA_QT_Q8_0, 0, 32, MEMRA_QT_Q8_0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        moe_down_case(&cases[i], 300 + i);
}
END_TEST

START_TEST(test_moe_down_types)
{
    GPU_OR_SKIP();
    for (int t = 0; t < N_TYPES; t++) {
        char name[64];
        snprintf(name, sizeof name, "types %d", t);
        const dcase c = {name, 512, 24, 4, 3, k_types[t], t & 1, 256, k_types[(t + 1) % N_TYPES],
                         t % 3 == 0, t % 4 == 0};
        moe_down_case(&c, 400 + (uint64_t)t);
    }
}
END_TEST

START_TEST(test_moe_down_rejects)
{
    GPU_OR_SKIP();
    memra_moe_down_args a = {.a = (void *)16, .ids = (void *)16, .wts = (void *)16,
                             .w = (void *)16, .x = (void *)16, .row_bytes = 34,
                             .expert_bytes = 34, .qtype = MEMRA_QT_Q8_0, .k = 64, .n = 1,
                             .n_used = 1, .n_expert = 1, .b = 1};
    ck_assert_int_eq(memra_moe_down_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* row_bytes != 68 */
    a.row_bytes = a.expert_bytes = 68;
    a.n_used = 65;
    ck_assert_int_eq(memra_moe_down_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* > MAX_USED */
    a.n_used = 1;
    a.sh_a = (void *)16;
    ck_assert_int_eq(memra_moe_down_cuda(&a, 0), MEMRA_ERR_INVALID_ARG); /* sh_a alone */
}
END_TEST

/* ====================================== timing ====================================== */

static double time_us(int (*fn)(const void *), const void *args, int iters)
{
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fn(args), MEMRA_OK);
    CK_CUDA(cudaEventRecord(e0, 0));
    for (int i = 0; i < iters; i++)
        ck_assert_int_eq(fn(args), MEMRA_OK);
    CK_CUDA(cudaEventRecord(e1, 0));
    CK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 1e3 * ms / iters;
}

static int run_mmvq_moe(const void *a) { return memra_mmvq_moe_cuda(a, 0); }
static int run_moe_down(const void *a) { return memra_moe_down_cuda(a, 0); }

START_TEST(test_moe_timing)
{
    GPU_OR_SKIP();
    if (!getenv("MEMRA_GPU_TIMING")) {
        fprintf(stderr, "SKIP %s: MEMRA_GPU_TIMING is not set\n", __func__);
        return;
    }
    /* 35b-a3b layer FFN: 256 experts, top-8, D 2048, Fe = Fs 512 (zero weights: time only) */
    const int E = 256, U = 8, D = 2048, F = 512;
    const size_t rb_up = memra_quant_row_bytes(MEMRA_QT_Q4_K, D);
    const size_t rb_dn = memra_quant_row_bytes(MEMRA_QT_Q6_K, F);
    tu_rng r;
    tu_rng_seed(&r, 9);
    int32_t *ids = rand_ids(&r, E, U, 0);
    float *wts = rand_vec(&r, 16 * (size_t)U, 0.1f);
    memra_mmvq_moe_args m = {.a = dalloc((size_t)16 * D / 32 * 36), .ids = dup_h2d(ids, 16 * U * 4),
                             .k = D, .n_used = U, .n_expert = E, .n_w = 2};
    for (int i = 0; i < 2; i++) {
        void *w = dalloc(rb_up * F * E);
        CK_CUDA(cudaMemset(w, 0, rb_up * F * E));
        m.out[i] = (memra_mmvq_moe_out){.w = w, .y = dalloc((size_t)16 * U * F * 4),
                                        .qtype = MEMRA_QT_Q4_K, .n_out = F, .row_bytes = rb_up,
                                        .expert_bytes = rb_up * F};
    }
    CK_CUDA(cudaMemset((void *)m.a, 0, (size_t)16 * D / 32 * 36));
    memra_moe_down_args dn = {.a = dalloc((size_t)16 * U * F / 32 * 36), .ids = m.ids,
                              .wts = dup_h2d(wts, 16 * U * 4), .w = dalloc(rb_dn * D * E),
                              .x = dalloc((size_t)16 * D * 4), .sh_a = dalloc((size_t)16 * F / 32 * 36),
                              .sh_w = dalloc(rb_dn * D), .sh_gate = dalloc(16 * 4),
                              .row_bytes = rb_dn, .expert_bytes = rb_dn * D, .sh_row_bytes = rb_dn,
                              .qtype = MEMRA_QT_Q6_K, .sh_qtype = MEMRA_QT_Q6_K, .k = F, .n = D,
                              .n_used = U, .n_expert = E, .k_sh = F};
    CK_CUDA(cudaMemset((void *)dn.a, 0, (size_t)16 * U * F / 32 * 36));
    CK_CUDA(cudaMemset((void *)dn.w, 0, rb_dn * D * E));
    CK_CUDA(cudaMemset((void *)dn.sh_a, 0, (size_t)16 * F / 32 * 36));
    CK_CUDA(cudaMemset((void *)dn.sh_w, 0, rb_dn * D));
    CK_CUDA(cudaMemset((void *)dn.sh_gate, 0, 16 * 4));
    CK_CUDA(cudaMemset(dn.x, 0, (size_t)16 * D * 4));
    static const int bs[] = {1, 4, 16};
    for (size_t i = 0; i < 3; i++) {
        m.b = dn.b = bs[i];
        const double tm = time_us(run_mmvq_moe, &m, 50), td = time_us(run_moe_down, &dn, 50);
        const double bm = (double)bs[i] * U * 2 * F * rb_up, bd = ((double)bs[i] * U + 1) * D * rb_dn;
        fprintf(stderr,
                "TIMING moe 35b-a3b B=%2d: mmvq_moe %7.1f us (%5.0f GB/s of expert rows), "
                "moe_down %7.1f us (%5.0f GB/s)\n",
                bs[i], tm, bm / tm * 1e-3, td, bd / td * 1e-3);
    }
}
END_TEST

Suite *make_moe_gpu_suite(void);
Suite *make_moe_gpu_suite(void)
{
    Suite *s = suite_create("moe_gpu");
    GPU_ADD_CASE(s, "mmvq_moe", test_mmvq_moe_shapes, test_mmvq_moe_types, test_mmvq_moe_rejects);
    GPU_ADD_CASE(s, "moe_down", test_moe_down_shapes, test_moe_down_types, test_moe_down_rejects);
    GPU_ADD_CASE(s, "moe_timing", test_moe_timing);
    return s;
}
