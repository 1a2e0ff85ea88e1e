/*
 * test_mmvq_gpu.c — the NVRTC mmvq and quantize_q8_1 kernels on a real GPU (binary
 * memra-gpu-tests, run with CK_FORK=no). Every test SKIPs, saying why, when the driver or a
 * device is missing.
 *
 * For each weight qtype and B = 1..16, over K in {one dot block, three, 4096, 14336} and
 * N in {1, 3, 127, 4097}:
 *   (a) the GPU q8_1 quantizer writes the bytes of memra_quantize_q8_1 (memcmp);
 *   (b) y[b, o] vs memra_mmvq_dot on the CPU (kernels/mmvq.h: the canonical order of P =
 *       memra_mmvq_parts(K) parts): bit-identical (memcmp) for the default launch, whose
 *       ksplit is that P; a test-forced ksplit != P only changes the summation order, so
 *       |y - ref| <= 2 (n - 1) 2^-24 sum_i |r_i| (the bound for two orderings of an n-term
 *       fp32 sum: each is within (n - 1) u sum |r_i| of the exact sum, u = 2^-24, to first
 *       order; the factor 1.001 below covers the second-order term for n < 2^14);
 *   (c) row b of the B-wide call is memcmp-equal to the B = 1 call on row b alone;
 *   (d) a second launch gives the same bytes.
 * Merged launches (three or four weights, of different or repeated qtypes, store and add-into,
 * output scale) get the same checks. A bandwidth measurement (printed, not asserted) times mmvq on
 * the real decode shapes of a 9B model (n_embd 4096) at B = 1, 2, 4, 8, 16: each shape launched
 * back to back in a captured CUDA graph with PDL, as in a tick, weights rotated through 2 GiB so
 * every launch reads HBM, against a device-to-device copy measured in the same run.
 *
 * Lines starting with "TABLE|" are the summary scripts/device-run.sh prints last.
 * MEMRA_GPU_QUICK=1 (test tooling only) drops the two largest shapes, for sanitizer runs;
 * MEMRA_GPU_BENCH_ONLY=1 runs only the bandwidth measurement (a baseline build).
 */
#include <check.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_util.h"
#include "silu_mul_q8.h"
#include "quant.h"
#include "runtime/nvrtc.h"
#include "test_util.h"

/* --------------------------------------- GPU state ---------------------------------------- */

static struct {
    int tried, ok, sm;
    char why[600];
    memra_kernel_cache *kc;
    CUstream st;
} G;

static int gpu_ready(void)
{
    if (G.tried)
        return G.ok;
    G.tried = 1;
    memra_err e;
    memra_err_clear(&e);
    if (memra_cu_device_open(0, &G.sm, &e) != MEMRA_OK) {
        snprintf(G.why, sizeof G.why, "%s", e.msg);
        return 0;
    }
    if (G.sm < 90) {
        snprintf(G.why, sizeof G.why, "device is sm_%d; the templates need sm_90", G.sm);
        return 0;
    }
    /* G.st stays the legacy default stream: the synchronous copies and memsets the checks
     * use are ordered with the launches only on that stream. */
    if (memra_kernel_cache_open(&G.kc, &e) != MEMRA_OK) {
        snprintf(G.why, sizeof G.why, "setup failed: %s", e.msg);
        return 0;
    }
    G.ok = 1;
    return 1;
}

#define GPU_OR_SKIP()                                                                              \
    do {                                                                                           \
        if (!gpu_ready()) {                                                                        \
            printf("SKIP %s: %s\n", __func__, G.why);                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* MEMRA_GPU_BENCH_ONLY=1: a baseline build times its kernel and checks nothing. */
#define BENCH_ONLY_SKIP()                                                                          \
    do {                                                                                           \
        const char *q_ = getenv("MEMRA_GPU_BENCH_ONLY");                                           \
        if (q_ && *q_ && *q_ != '0') {                                                             \
            printf("SKIP %s: MEMRA_GPU_BENCH_ONLY\n", __func__);                                   \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CU_OK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = memra_cu()->call;                                                            \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            memra_err e_;                                                                          \
            memra_err_clear(&e_);                                                                  \
            memra_cu_fail(&e_, r_, #call, __FILE__, __LINE__);                                     \
            ck_abort_msg("%s", e_.msg);                                                            \
        }                                                                                          \
    } while (0)

static CUdeviceptr dalloc(size_t n)
{
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc(&p, n ? n : 1));
    return p;
}

static void *dptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

static CUfunction kernel(const char *key)
{
    CUfunction f;
    memra_err e;
    memra_err_clear(&e);
    const int rc = memra_kernel_get(G.kc, key, &f, &e);
    ck_assert_msg(rc == MEMRA_OK, "%s: %s", key, e.msg);
    return f;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The weight types mmvq specializes, in table order. */
static const int k_types[] = {MEMRA_QT_Q4_0,  MEMRA_QT_Q8_0,  MEMRA_QT_Q4_K,  MEMRA_QT_Q5_K,
                              MEMRA_QT_Q6_K,  MEMRA_QT_IQ4_XS, MEMRA_QT_NVFP4, MEMRA_QT_F16,
                              MEMRA_QT_BF16,  MEMRA_QT_F32,   MEMRA_QT_MXFP4, MEMRA_QT_IQ4_NL,
                              MEMRA_QT_Q4_1,  MEMRA_QT_Q5_0,  MEMRA_QT_Q5_1};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* Compiles every specialization these tests launch, 16 at a time (NVRTC is thread-safe and
 * the GPU machine has the cores), so the tests time kernels, not compilers. The keys: each
 * qtype at B = 1..16, three of the 3-weight merged launch, the 4-weight merged launches of
 * test_mmvq_merged (q4_K+q6_K+q8_0 and a fourth q6_K or iq4_xs, at its B = 1 isolation
 * reference and mg_bs4's 3, 9, 12, 16), quantize_q8_1. */
#define N_PREWARM (N_TYPES * 16 + 3 + 10 + 1)
static void *prewarm_worker(void *arg)
{
    atomic_int *next = arg;
    for (int i; (i = atomic_fetch_add(next, 1)) < N_PREWARM;) {
        char key[MEMRA_KERNEL_KEY_MAX];
        const int j = i - N_TYPES * 16 - 3; /* the 4-weight keys: 0..9 */
        if (i < N_TYPES * 16)
            snprintf(key, sizeof key, "mmvq:qt=%s:b=%d", memra_qtype_get(k_types[i / 16])->name,
                     i % 16 + 1);
        else if (i < N_TYPES * 16 + 3)
            snprintf(key, sizeof key, "mmvq:qt=q4_K+q6_K+q8_0:b=%d", (int[]){1, 5, 16}[i % 3]);
        else if (j < 10)
            snprintf(key, sizeof key, "mmvq:qt=q4_K+q6_K+q8_0+%s:b=%d", j < 5 ? "q6_K" : "iq4_xs",
                     (int[]){1, 3, 9, 12, 16}[j % 5]);
        else
            snprintf(key, sizeof key, "quantize_q8_1");
        memra_cubin c;
        if (memra_nvrtc_compile(key, G.sm, &c, NULL) == MEMRA_OK)
            memra_cubin_free(&c);
    }
    return NULL;
}

START_TEST(test_prewarm)
{
    GPU_OR_SKIP();
    BENCH_ONLY_SKIP();
    atomic_int next = 0;
    pthread_t th[16];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, (size_t)64 << 20); /* compilers recurse deeply */
    const double t0 = now_s();
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(pthread_create(&th[i], &at, prewarm_worker, &next), 0);
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&at);
    memra_nvrtc_stats s;
    memra_nvrtc_stats_get(&s);
    printf("TABLE|prewarm: %d keys, %ld compiled, %ld from cache %s, %.1f s\n", N_PREWARM,
           s.compiles, s.cache_hits, memra_nvrtc_cache_dir(), now_s() - t0);
}
END_TEST

/* ----------------------------------------- data ------------------------------------------- */

/* A finite fp16 scale: +-2^-12 .. 2^-4, one in 32 a subnormal fp16. */
static uint16_t rand_scale16(tu_rng *r)
{
    if (tu_rng_u64(r) % 32 == 0)
        return (uint16_t)(1 + tu_rng_u64(r) % 0x3FF);
    const float v = exp2f(-12.0f + 8.0f * tu_rng_uniform(r));
    return memra_f32_to_fp16(tu_rng_u64(r) & 1 ? -v : v);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Random dot blocks of type qt: random bytes (every code pattern is valid) with the scale
 * fields replaced by finite values, so every output is finite. */
static void fill_block(int qt, uint8_t *p, size_t bytes, tu_rng *r)
{
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = tu_rng_u64(r);
        memcpy(p + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    switch (qt) {
    case MEMRA_QT_F32:
        for (size_t i = 0; i < bytes / 4; i++) {
            const float f = tu_rng_normal(r);
            memcpy(p + 4 * i, &f, 4);
        }
        break;
    case MEMRA_QT_F16:
        for (size_t i = 0; i < bytes / 2; i++)
            put16(p + 2 * i, memra_f32_to_fp16(tu_rng_normal(r)));
        break;
    case MEMRA_QT_BF16:
        for (size_t i = 0; i < bytes / 2; i++)
            put16(p + 2 * i, memra_f32_to_bf16(tu_rng_normal(r)));
        break;
    case MEMRA_QT_Q4_1:
    case MEMRA_QT_Q5_1:
    case MEMRA_QT_Q4_K:
    case MEMRA_QT_Q5_K:
        put16(p, rand_scale16(r));
        put16(p + 2, rand_scale16(r));
        break;
    case MEMRA_QT_Q6_K:
        put16(p + 208, rand_scale16(r));
        break;
    case MEMRA_QT_MXFP4: /* mostly moderate exponents; 1 in 16 the subnormal half scales */
        p[0] = tu_rng_u64(r) % 16 == 0 ? (uint8_t)(tu_rng_u64(r) % 3)
                                        : (uint8_t)(110 + tu_rng_u64(r) % 25);
        break;
    case MEMRA_QT_NVFP4: /* any scale byte is finite (bit 7 ignored, 0x7F = 0) */
        break;
    default: /* Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: fp16 d first */
        put16(p, rand_scale16(r));
        break;
    }
}

/* x [rows, n]: normal values scaled per row by 2^(row - 8), with one all-zero 32-block and
 * one block holding an exact tie (amax 127, x = 2.5) per row where n allows. */
static void fill_acts(float *x, int rows, int n, tu_rng *r)
{
    for (int b = 0; b < rows; b++) {
        float *xr = x + (size_t)b * n;
        for (int j = 0; j < n; j++)
            xr[j] = ldexpf(tu_rng_normal(r), b - 8);
        if (n >= 64) {
            memset(xr + 32, 0, 32 * sizeof(float));
        }
        if (n >= 96) {
            xr[64] = 127.0f;
            xr[65] = 2.5f;
            xr[66] = -2.5f;
        }
    }
}

/* 16 rows of fill_acts' activations quantized to q8_1 (malloc'd [16, K/32]). */
static memra_block_q8_1 *q8_acts16(int K, tu_rng *r)
{
    float *x = malloc((size_t)16 * K * 4);
    memra_block_q8_1 *a = malloc((size_t)16 * (K / 32) * sizeof *a);
    ck_assert(x && a);
    fill_acts(x, 16, K, r);
    for (int b = 0; b < 16; b++)
        memra_quantize_q8_1(x + (size_t)b * K, a + (size_t)b * (K / 32), K);
    free(x);
    return a;
}

/* ------------------------------------- CPU reference -------------------------------------- */

typedef struct ref_job {
    int qt, K, N;
    const uint8_t *w;           /* [N] rows */
    const memra_block_q8_1 *a;  /* [16, K/32] */
    float *ref, *sabs;          /* [16, N]; sabs NULL: only the exact checks follow */
    atomic_int next;
} ref_job;

static void *ref_worker(void *arg)
{
    ref_job *j = arg;
    const size_t rb = memra_quant_row_bytes((memra_qtype)j->qt, j->K);
    const int de = memra_quant_dot_block_elems((memra_qtype)j->qt);
    const size_t db = memra_quant_dot_block_bytes((memra_qtype)j->qt);
    for (int o; (o = atomic_fetch_add(&j->next, 64)) < j->N;)
        for (int oo = o; oo < o + 64 && oo < j->N; oo++)
            for (int b = 0; b < 16; b++) {
                const uint8_t *row = j->w + (size_t)oo * rb;
                const memra_block_q8_1 *ab = j->a + (size_t)b * (j->K / 32);
                j->ref[(size_t)b * j->N + oo] = memra_mmvq_dot(j->qt, row, ab, j->K);
                if (!j->sabs)
                    continue;
                double s = 0;
                for (int k = 0; k < j->K / de; k++)
                    s += fabs((double)memra_vec_dot_block((memra_qtype)j->qt, row + k * db,
                                                          ab + (size_t)k * de / 32));
                j->sabs[(size_t)b * j->N + oo] = (float)s;
            }
    return NULL;
}

static void cpu_ref(ref_job *j)
{
    long nth = sysconf(_SC_NPROCESSORS_ONLN);
    nth = nth < 1 ? 1 : nth > 32 ? 32 : nth;
    pthread_t th[32];
    atomic_store(&j->next, 0);
    for (long i = 0; i < nth; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, ref_worker, j), 0);
    for (long i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
}

/* ------------------------------------- mmvq launches -------------------------------------- */

static void mmvq_run(const memra_mmvq_args *args, int ksplit, int *ks_used)
{
    memra_mmvq_launch L;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_mmvq_prepare(args, G.sm, 0, ksplit, &L, &e) == MEMRA_OK, "%s", e.msg);
    CUfunction f = kernel(L.key);
    void *params[] = {&L.params};
    CU_OK(cuLaunchKernel(f, L.grid, 1, 1, L.threads, 1, 1, L.smem, G.st, params, NULL));
    if (ks_used)
        *ks_used = L.params.ksplit;
}

/* A direct-path launch (mmvq_params.h; B <= 2) with rpw rows per warp forced instead of the
 * one-wave choice; 0 when the launch is not direct. */
static int mmvq_run_rpw(const memra_mmvq_args *args, int rpw)
{
    memra_mmvq_launch L;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_mmvq_prepare(args, G.sm, 0, 0, &L, &e) == MEMRA_OK, "%s", e.msg);
    if (L.params.rpw == 0)
        return 0;
    ck_assert_msg(memra_mmvq_force_rpw(&L, rpw, &e) == MEMRA_OK, "%s", e.msg);
    CUfunction f = kernel(L.key);
    void *params[] = {&L.params};
    CU_OK(cuLaunchKernel(f, L.grid, 1, 1, L.threads, 1, 1, L.smem, G.st, params, NULL));
    return 1;
}

/* Per-qtype tallies of one test, printed as a TABLE line. */
typedef struct tally {
    long exact_pairs, exact_bad, tol_pairs, tol_bad, iso_bad, rerun_bad, launches;
    double worst; /* max |y - ref| / tol over the tolerance-checked pairs */
    int shown;
} tally;

static void report(tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(tally *t, const char *fmt, ...)
{
    if (t->shown++ >= 6)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* y [B, N] against the CPU reference rows 0..B-1: memcmp when exact, else the bound. */
static void check_vs_ref(tally *t, const char *what, const float *y, const float *ref,
                         const float *sabs, int B, int N, int nblk, int exact)
{
    for (int b = 0; b < B; b++)
        for (int o = 0; o < N; o++) {
            const size_t i = (size_t)b * N + o;
            if (exact) {
                t->exact_pairs++;
                if (memcmp(&y[i], &ref[i], 4) != 0) {
                    t->exact_bad++;
                    report(t, "%s: b=%d o=%d not bit-identical: gpu %.9g (0x%08x) cpu %.9g", what,
                           b, o, y[i], *(const uint32_t *)&y[i], ref[i]);
                }
                continue;
            }
            t->tol_pairs++;
            const double tol = 2.0 * 1.001 * (nblk - 1) * 0x1p-24 * (double)sabs[i];
            const double d = fabs((double)y[i] - (double)ref[i]);
            const double ratio = tol > 0 ? d / tol : (d > 0 ? INFINITY : 0);
            if (ratio > t->worst || !isfinite(y[i]))
                t->worst = isfinite(y[i]) ? ratio : INFINITY;
            if (!(d <= tol) || !isfinite(y[i])) {
                t->tol_bad++;
                report(t, "%s: b=%d o=%d gpu %.9g cpu %.9g |d| %.3g > tol %.3g", what, b, o, y[i],
                       ref[i], d, tol);
            }
        }
}

/* One (qtype, K, N) case: the B = 1..16 sweep plus forced ksplit variants. */
static void mmvq_case(int qt, int K, int N, tally *t, tu_rng *rng)
{
    const size_t rb = memra_quant_row_bytes((memra_qtype)qt, K);
    const size_t wbytes = rb * N, ab = (size_t)16 * (K / 32) * sizeof(memra_block_q8_1);
    const int nblk = K / memra_quant_dot_block_elems((memra_qtype)qt);
    uint8_t *w = malloc(wbytes);
    float *x = malloc((size_t)16 * K * sizeof(float));
    memra_block_q8_1 *a = malloc(ab);
    float *ref = malloc((size_t)16 * N * 4), *sabs = malloc((size_t)16 * N * 4);
    float *y = malloc((size_t)16 * N * 4), *y1 = malloc((size_t)16 * N * 4);
    ck_assert(w && x && a && ref && sabs && y && y1);
    const size_t db = memra_quant_dot_block_bytes((memra_qtype)qt);
    for (size_t off = 0; off < wbytes; off += db)
        fill_block(qt, w + off, db, rng);
    fill_acts(x, 16, K, rng);
    for (int b = 0; b < 16; b++)
        memra_quantize_q8_1(x + (size_t)b * K, a + (size_t)b * (K / 32), K);
    ref_job j = {.qt = qt, .K = K, .N = N, .w = w, .a = a, .ref = ref, .sabs = sabs};
    cpu_ref(&j);

    /* weights get an allocation of exactly their size: the kernel must not read past it */
    CUdeviceptr dw = dalloc(wbytes), da = dalloc(ab), dy = dalloc((size_t)16 * N * 4);
    CU_OK(cuMemcpyHtoD(dw, w, wbytes));
    CU_OK(cuMemcpyHtoD(da, a, ab));
    memra_mmvq_args args = {.a = dptr(da), .n_in = K, .n_w = 1};
    args.out[0] = (memra_mmvq_out){.w = dptr(dw), .y = dptr(dy), .qtype = qt, .n_out = N,
                                   .row_bytes = rb, .mode = MEMRA_MMVQ_STORE};
    char what[96];
    const size_t rowa = (size_t)(K / 32) * sizeof(memra_block_q8_1);

    /* B = 1 on each row alone: the isolation reference */
    for (int b = 0; b < 16; b++) {
        args.b = 1;
        args.a = dptr(da + b * rowa);
        args.out[0].y = dptr(dy + (size_t)b * N * 4);
        mmvq_run(&args, 0, NULL);
    }
    CU_OK(cuMemcpyDtoH(y1, dy, (size_t)16 * N * 4));
    args.a = dptr(da);
    args.out[0].y = dptr(dy);
    for (int B = 1; B <= 16; B++) {
        int ks;
        args.b = B;
        CU_OK(cuMemsetD8(dy, 0xFF, (size_t)16 * N * 4)); /* NaN: an unwritten output fails */
        mmvq_run(&args, 0, &ks);
        t->launches++;
        CU_OK(cuMemcpyDtoH(y, dy, (size_t)B * N * 4));
        snprintf(what, sizeof what, "%s K=%d N=%d B=%d ksplit=%d", memra_qtype_get(qt)->name, K,
                 N, B, ks);
        check_vs_ref(t, what, y, ref, sabs, B, N, nblk, ks == memra_mmvq_parts(K));
        for (int b = 0; b < B; b++)
            if (memcmp(y + (size_t)b * N, y1 + (size_t)b * N, (size_t)N * 4) != 0) {
                t->iso_bad++;
                report(t, "%s: row %d differs from the B=1 call on that row", what, b);
            }
    }
    /* run-to-run: the B = 16 output again, byte for byte */
    CU_OK(cuMemsetD8(dy, 0xFF, (size_t)16 * N * 4));
    mmvq_run(&args, 0, NULL);
    CU_OK(cuMemcpyDtoH(y1, dy, (size_t)16 * N * 4));
    if (memcmp(y, y1, (size_t)16 * N * 4) != 0) {
        t->rerun_bad++;
        report(t, "%s K=%d N=%d: second B=16 launch differs", memra_qtype_get(qt)->name, K, N);
    }
    /* the direct path (B = 1..2) with several rows per warp (3 and 7: warps whose rows end
     * mid-launch): bit-identical to the CPU */
    static const int rpws[] = {1, 2, 3, 7, 64};
    for (int B = 1; B <= MEMRA_MMVQ_DIRECT_MAX_B; B++)
        for (int ri = 0; ri < 5; ri++) {
            args.b = B;
            CU_OK(cuMemsetD8(dy, 0xFF, (size_t)16 * N * 4));
            if (!mmvq_run_rpw(&args, rpws[ri]))
                continue;
            t->launches++;
            CU_OK(cuMemcpyDtoH(y, dy, (size_t)B * N * 4));
            snprintf(what, sizeof what, "%s K=%d N=%d B=%d direct rpw=%d",
                     memra_qtype_get(qt)->name, K, N, B, rpws[ri]);
            check_vs_ref(t, what, y, ref, sabs, B, N, nblk, 1);
        }
    args.b = 16;
    /* every ksplit on B = 16: the canonical one must be bit-identical to the CPU */
    for (int ks = 1; ks <= 8; ks *= 2) {
        CU_OK(cuMemsetD8(dy, 0xFF, (size_t)16 * N * 4));
        mmvq_run(&args, ks, NULL);
        CU_OK(cuMemcpyDtoH(y, dy, (size_t)16 * N * 4));
        snprintf(what, sizeof what, "%s K=%d N=%d B=16 forced ksplit=%d",
                 memra_qtype_get(qt)->name, K, N, ks);
        check_vs_ref(t, what, y, ref, sabs, 16, N, nblk, ks == memra_mmvq_parts(K));
    }
    CU_OK(cuMemFree(dw));
    CU_OK(cuMemFree(da));
    CU_OK(cuMemFree(dy));
    free(w), free(x), free(a), free(ref), free(sabs), free(y), free(y1);
}

/* Test-tooling switches for sanitizer runs (scripts/device-run.sh): MEMRA_GPU_QUICK=1 drops
 * the largest shapes, MEMRA_GPU_TYPES=q4_0,q6_K limits the qtypes, MEMRA_GPU_NO_BENCH=1 skips
 * the bandwidth measurement. */
static int env_on(const char *name)
{
    const char *q = getenv(name);
    return q && *q && *q != '0';
}

static int quick(void) { return env_on("MEMRA_GPU_QUICK"); }

/* Whether an item of the comma-separated list equals name (prefix: is a prefix of name). */
static int in_list(const char *list, const char *name, int prefix)
{
    const size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        if (n > 0 && (prefix ? n <= len : n == len) && strncmp(name, p, n) == 0)
            return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

static int type_selected(const char *name)
{
    const char *list = getenv("MEMRA_GPU_TYPES");
    return !list || !*list || in_list(list, name, 0);
}

START_TEST(test_mmvq_qtype)
{
    GPU_OR_SKIP();
    BENCH_ONLY_SKIP();
    const int qt = k_types[_i];
    if (!type_selected(memra_qtype_get(qt)->name)) {
        printf("SKIP mmvq %s: not in MEMRA_GPU_TYPES\n", memra_qtype_get(qt)->name);
        return;
    }
    const int de = memra_quant_dot_block_elems((memra_qtype)qt);
    const int Ks[4] = {de, 3 * de, 4096, 14336}, Ns[4] = {1, 3, 127, 4097};
    tally t = {0};
    tu_rng rng;
    tu_rng_seed(&rng, 0x6d6d7671ull + (uint64_t)qt);
    const double t0 = now_s();
    for (int ki = 0; ki < 4; ki++)
        for (int ni = 0; ni < 4; ni++) {
            if (quick() && (ki == 3 || (ki == 2 && ni == 3)))
                continue;
            mmvq_case(qt, Ks[ki], Ns[ni], &t, &rng);
        }
    /* direct types: rows longer than MEMRA_MMVQ_DIRECT_MAX_IN(2), so B = 2 launches of a
     * direct specialization stage while B = 1 stays direct, all bit-identical */
    if (memra_mmvq_direct(qt))
        mmvq_case(qt, MEMRA_MMVQ_DIRECT_MAX_IN(2) + 256, 37, &t, &rng);
    printf("TABLE|mmvq %-7s exact %ld/%ld  tol %ld/%ld (worst |d|/tol %.3f)  isolation %s  "
           "rerun %s  %ld launches  %.1f s\n",
           memra_qtype_get(qt)->name, t.exact_pairs - t.exact_bad, t.exact_pairs,
           t.tol_pairs - t.tol_bad, t.tol_pairs, t.worst, t.iso_bad ? "FAIL" : "ok",
           t.rerun_bad ? "FAIL" : "ok", t.launches, now_s() - t0);
    ck_assert_msg(t.exact_bad == 0 && t.tol_bad == 0 && t.iso_bad == 0 && t.rerun_bad == 0,
                  "%s: %ld not bit-identical, %ld out of tolerance, %ld isolation, %ld rerun",
                  memra_qtype_get(qt)->name, t.exact_bad, t.tol_bad, t.iso_bad, t.rerun_bad);
}
END_TEST

/* ------------------------------------ merged launches ------------------------------------- */

/* Three or four weights on one input: store, add-into with scale 0.5, store with scale -1.25
 * (and add-into with scale -0.75). Expected (CPU): v = ref (× scale), y = v or y_init + v.
 * With the canonical ksplit (memra_mmvq_parts(K)) the GPU
 * must match byte for byte; otherwise v is within the summation bound times |scale| (an exact
 * power-of-two scale keeps it exact, -1.25 and -0.75 add one rounding: + 2^-24 |v|), and the
 * add into y_init one more rounding each side (+ 2^-23 |y|). Weight 3 has 45 outputs: its
 * last tile is partial. */
static const int mg_n[MEMRA_MMVQ_MAX_W] = {300, 77, 129, 45};
static const int mg_modes[MEMRA_MMVQ_MAX_W] = {0, 1, 0, 1};
static const float mg_scales[MEMRA_MMVQ_MAX_W] = {1.0f, 0.5f, -1.25f, -0.75f};

typedef struct merged {
    memra_block_q8_1 *a; /* [16, K/32] */
    CUdeviceptr da, dw[MEMRA_MMVQ_MAX_W], dy[MEMRA_MMVQ_MAX_W], dsc[MEMRA_MMVQ_MAX_W];
    uint8_t *w[MEMRA_MMVQ_MAX_W];
    float *ref[MEMRA_MMVQ_MAX_W], *sabs[MEMRA_MMVQ_MAX_W];                       /* [16, n_i] */
    float *yinit[MEMRA_MMVQ_MAX_W], *y[MEMRA_MMVQ_MAX_W], *y1[MEMRA_MMVQ_MAX_W]; /* [16, n_i] */
    memra_mmvq_args args;
    int qt[MEMRA_MMVQ_MAX_W], n_w, K;
} merged;

static void merged_open(merged *m, tu_rng *rng, const int *qt, int n_w, int K)
{
    ck_assert(n_w >= 1 && n_w <= MEMRA_MMVQ_MAX_W);
    m->K = K;
    m->n_w = n_w;
    memcpy(m->qt, qt, sizeof *qt * n_w);
    const size_t ab = (size_t)16 * (m->K / 32) * sizeof *m->a;
    m->a = q8_acts16(m->K, rng);
    m->da = dalloc(ab);
    CU_OK(cuMemcpyHtoD(m->da, m->a, ab));
    m->args = (memra_mmvq_args){.a = dptr(m->da), .n_in = m->K, .n_w = n_w};
    for (int i = 0; i < n_w; i++) {
        const size_t rb = memra_quant_row_bytes((memra_qtype)m->qt[i], m->K);
        const size_t db = memra_quant_dot_block_bytes((memra_qtype)m->qt[i]), n = 16 * mg_n[i];
        m->w[i] = malloc(rb * mg_n[i]);
        for (size_t off = 0; off < rb * mg_n[i]; off += db)
            fill_block(m->qt[i], m->w[i] + off, db, rng);
        m->ref[i] = malloc(n * 4), m->sabs[i] = malloc(n * 4), m->yinit[i] = malloc(n * 4);
        m->y[i] = malloc(n * 4), m->y1[i] = malloc(n * 4);
        for (size_t k = 0; k < n; k++)
            m->yinit[i][k] = tu_rng_normal(rng);
        ref_job j = {.qt = m->qt[i], .K = m->K, .N = mg_n[i], .w = m->w[i], .a = m->a,
                     .ref = m->ref[i], .sabs = m->sabs[i]};
        cpu_ref(&j);
        m->dw[i] = dalloc(rb * mg_n[i]), m->dy[i] = dalloc(n * 4), m->dsc[i] = dalloc(4);
        CU_OK(cuMemcpyHtoD(m->dw[i], m->w[i], rb * mg_n[i]));
        CU_OK(cuMemcpyHtoD(m->dsc[i], &mg_scales[i], 4));
        m->args.out[i] = (memra_mmvq_out){.w = dptr(m->dw[i]), .y = dptr(m->dy[i]),
                                          .qtype = m->qt[i], .n_out = mg_n[i], .row_bytes = rb,
                                          .mode = mg_modes[i],
                                          .scale = i ? dptr(m->dsc[i]) : NULL};
    }
}

static void merged_close(merged *m)
{
    for (int i = 0; i < m->n_w; i++) {
        CU_OK(cuMemFree(m->dw[i]));
        CU_OK(cuMemFree(m->dy[i]));
        CU_OK(cuMemFree(m->dsc[i]));
        free(m->w[i]), free(m->ref[i]), free(m->sabs[i]), free(m->yinit[i]);
        free(m->y[i]), free(m->y1[i]);
    }
    CU_OK(cuMemFree(m->da));
    free(m->a);
}

/* One launch of B rows with ksplit ks (0 = auto) against the CPU expectation; returns the
 * number of wrong outputs and adds the outputs checked to *pairs. */
static long merged_values(merged *m, int B, int ks, long *pairs)
{
    long bad = 0;
    int used;
    m->args.b = B;
    for (int i = 0; i < m->n_w; i++)
        CU_OK(cuMemcpyHtoD(m->dy[i], m->yinit[i], (size_t)16 * mg_n[i] * 4));
    mmvq_run(&m->args, ks, &used);
    for (int i = 0; i < m->n_w; i++) {
        const int nblk = m->K / memra_quant_dot_block_elems((memra_qtype)m->qt[i]);
        CU_OK(cuMemcpyDtoH(m->y[i], m->dy[i], (size_t)B * mg_n[i] * 4));
        for (int k = 0; k < B * mg_n[i]; k++, (*pairs)++) {
            const float v = m->ref[i][k] * mg_scales[i];
            const float want = mg_modes[i] ? m->yinit[i][k] + v : v;
            const double tol = 2.0 * 1.001 * (nblk - 1) * 0x1p-24 * m->sabs[i][k] *
                                   fabsf(mg_scales[i]) +
                               0x1p-24 * fabs(v) + 0x1p-23 * fabs(want);
            const int exact = used == memra_mmvq_parts(m->K);
            const int ok = exact ? memcmp(&m->y[i][k], &want, 4) == 0
                                 : fabs((double)m->y[i][k] - want) <= tol;
            if (!ok && bad++ < 6)
                printf("  FAIL merged B=%d ksplit=%d weight %d [%d]: gpu %.9g want %.9g tol "
                       "%.3g\n",
                       B, used, i, k, m->y[i][k], want, exact ? 0.0 : tol);
        }
    }
    return bad;
}

/* B = 16 rows vs B = 1 per row (auto ksplit), y reset before each launch; 0 when equal. */
static long merged_isolation(merged *m)
{
    long bad = 0;
    m->args.b = 16;
    for (int i = 0; i < m->n_w; i++)
        CU_OK(cuMemcpyHtoD(m->dy[i], m->yinit[i], (size_t)16 * mg_n[i] * 4));
    mmvq_run(&m->args, 0, NULL);
    for (int i = 0; i < m->n_w; i++)
        CU_OK(cuMemcpyDtoH(m->y[i], m->dy[i], (size_t)16 * mg_n[i] * 4));
    const size_t rowa = (size_t)(m->K / 32) * sizeof(memra_block_q8_1);
    for (int b = 0; b < 16; b++) {
        memra_mmvq_args one = m->args;
        one.b = 1;
        one.a = dptr(m->da + b * rowa);
        for (int i = 0; i < m->n_w; i++) {
            const size_t off = (size_t)b * mg_n[i];
            one.out[i].y = dptr(m->dy[i] + off * 4);
            CU_OK(cuMemcpyHtoD(m->dy[i] + off * 4, m->yinit[i] + off, (size_t)mg_n[i] * 4));
        }
        mmvq_run(&one, 0, NULL);
    }
    for (int i = 0; i < m->n_w; i++) {
        CU_OK(cuMemcpyDtoH(m->y1[i], m->dy[i], (size_t)16 * mg_n[i] * 4));
        bad += memcmp(m->y[i], m->y1[i], (size_t)16 * mg_n[i] * 4) != 0;
    }
    return bad;
}

/* The widths of the 3-weight cases: 1..2 the direct path when all weights are direct. */
static const int mg_bs3[] = {1, 2, 3, 4, 5, 16};
/* The widths of the 4-weight cases (every one staged: q8_0 has no direct path): 3 reads the
 * q8_1 rows from (a, rs) at every load; 9 and 12 through q8_ptrs (B >= MMVQ_Q8_PTRS_MIN_B,
 * nvrtc_templates/mmvq.cuh) with a partial second column tile; 16 two whole ones. */
static const int mg_bs4[] = {3, 9, 12, 16};

static void merged_case(const char *name, const int *qt, int n_w, int K, const int *Bs, int n_bs)
{
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    merged m;
    merged_open(&m, &rng, qt, n_w, K);
    long bad = 0, pairs = 0;
    for (int bi = 0; bi < n_bs; bi++)
        for (int ks = 0; ks <= 1; ks++) /* canonical (exact), then forced 1 */
            bad += merged_values(&m, Bs[bi], ks, &pairs);
    const long iso_bad = merged_isolation(&m);
    printf("TABLE|mmvq merged %s K=%d: %ld/%ld ok, isolation %s\n", name, K, pairs - bad, pairs,
           iso_bad ? "FAIL" : "ok");
    merged_close(&m);
    ck_assert_msg(bad == 0 && iso_bad == 0, "merged %s: %ld wrong, %ld isolation", name, bad,
                  iso_bad);
}

START_TEST(test_mmvq_merged)
{
    GPU_OR_SKIP();
    BENCH_ONLY_SKIP();
    const int n3 = (int)(sizeof mg_bs3 / sizeof mg_bs3[0]);
    const int n4 = (int)(sizeof mg_bs4 / sizeof mg_bs4[0]);
    static const int mixed[3] = {MEMRA_QT_Q4_K, MEMRA_QT_Q6_K, MEMRA_QT_Q8_0};
    merged_case("q4_K+q6_K(add,x0.5)+q8_0(x-1.25)", mixed, 3, 4096, mg_bs3, n3);
    /* every weight q4_K: B = 1 takes the direct path; K = 2048 gives P = 4, so a CUDA block
     * holds two tiles, and with 300 outputs (19 tiles) block 9 straddles weights 0 and 1 */
    static const int direct[3] = {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K};
    merged_case("q4_K+q4_K(add,x0.5)+q4_K(x-1.25)", direct, 3, 4096, mg_bs3, n3);
    merged_case("q4_K+q4_K(add,x0.5)+q4_K(x-1.25)", direct, 3, 2048, mg_bs3, n3);
    /* 11 blocks in P = 4 parts: 3, 3, 3, 2 steps */
    merged_case("q4_K+q4_K(add,x0.5)+q4_K(x-1.25)", direct, 3, 2816, mg_bs3, n3);
    /* q4_K and q6_K mixed on the direct path; q6_K rows of 2310 bytes start 2-byte aligned */
    static const int direct6[3] = {MEMRA_QT_Q6_K, MEMRA_QT_Q4_K, MEMRA_QT_Q6_K};
    merged_case("q6_K+q4_K(add,x0.5)+q6_K(x-1.25)", direct6, 3, 2816, mg_bs3, n3);
    /* four weights on the staged path's shared bodies (mmvq_staged): weight 3's q6_K repeats
     * weight 1's, so its tiles run the QT1 body with out[3]; then a fourth distinct qtype, the
     * N3 body */
    static const int rep4[4] = {MEMRA_QT_Q4_K, MEMRA_QT_Q6_K, MEMRA_QT_Q8_0, MEMRA_QT_Q6_K};
    merged_case("q4_K+q6_K(add,x0.5)+q8_0(x-1.25)+q6_K(add,x-0.75)", rep4, 4, 4096, mg_bs4, n4);
    static const int dist4[4] = {MEMRA_QT_Q4_K, MEMRA_QT_Q6_K, MEMRA_QT_Q8_0, MEMRA_QT_IQ4_XS};
    merged_case("q4_K+q6_K(add,x0.5)+q8_0(x-1.25)+iq4_xs(add,x-0.75)", dist4, 4, 4096, mg_bs4, n4);
}
END_TEST

/* ------------------------------------- fused SwiGLU -------------------------------------- */

/* A direct {gate, up} launch folded with silu_mul_q8 (memra_mmvq_fuse_swiglu) writes the
 * bytes memra_silu_mul_q8_ref writes from memra_mmvq_dot's gate and up outputs (memcmp), for
 * every row of B = 1 and 2, and stores nothing to g and u (left poisoned); a second launch
 * gives the same bytes. */
static long swiglu_case(int qt_g, int qt_u, int K, int N)
{
    tu_rng rng;
    tu_rng_seed(&rng, 777u + (unsigned)K + (unsigned)N);
    const int qt[2] = {qt_g, qt_u}, nb = N / 32;
    const size_t ab = (size_t)16 * (K / 32) * sizeof(memra_block_q8_1), ob = (size_t)16 * N * 4;
    memra_block_q8_1 *a = q8_acts16(K, &rng);
    const CUdeviceptr da = dalloc(ab), dq = dalloc((size_t)2 * nb * 36 + 64);
    CU_OK(cuMemcpyHtoD(da, a, ab));
    memra_mmvq_args args = {.a = dptr(da), .n_in = K, .n_w = 2};
    CUdeviceptr dw[2], dy[2];
    float *ref[2];
    for (int i = 0; i < 2; i++) {
        const size_t rb = memra_quant_row_bytes((memra_qtype)qt[i], K);
        const size_t db = memra_quant_dot_block_bytes((memra_qtype)qt[i]);
        uint8_t *w = malloc(rb * N);
        for (size_t off = 0; off < rb * N; off += db)
            fill_block(qt[i], w + off, db, &rng);
        ref[i] = malloc(ob);
        ref_job j = {.qt = qt[i], .K = K, .N = N, .w = w, .a = a, .ref = ref[i]};
        cpu_ref(&j);
        dw[i] = dalloc(rb * N), dy[i] = dalloc(ob);
        CU_OK(cuMemcpyHtoD(dw[i], w, rb * N));
        free(w);
        args.out[i] = (memra_mmvq_out){.w = dptr(dw[i]), .y = dptr(dy[i]), .qtype = qt[i],
                                       .n_out = N, .row_bytes = rb};
    }
    long bad = 0;
    uint8_t *want = malloc((size_t)2 * nb * 36), *got = malloc((size_t)2 * nb * 36 + 64);
    float *yb = malloc(ob);
    for (int B = 1; B <= 2; B++) {
        memra_silu_mul_q8_args sm = {.b = B, .n_slots = 1};
        sm.slot[0] =
            (memra_silu_mul_q8_slot){.g = ref[0], .u = ref[1], .y_q = want, .n = N, .m = 1};
        ck_assert_int_eq(memra_silu_mul_q8_ref(&sm), MEMRA_OK);
        args.b = B;
        memra_mmvq_launch L;
        memra_err e;
        memra_err_clear(&e);
        ck_assert_msg(memra_mmvq_prepare(&args, G.sm, 0, 0, &L, &e) == MEMRA_OK, "%s", e.msg);
        ck_assert_msg(memra_mmvq_fuse_swiglu(&L, dptr(dq), &e) == MEMRA_OK, "%s", e.msg);
        CUfunction f = kernel(L.key);
        void *params[] = {&L.params};
        for (int run = 0; run < 2; run++) {
            CU_OK(cuMemsetD8(dq, 0xAB, (size_t)2 * nb * 36 + 64));
            for (int i = 0; i < 2; i++)
                CU_OK(cuMemsetD8(dy[i], 0xCD, ob));
            CU_OK(cuLaunchKernel(f, L.grid, 1, 1, L.threads, 1, 1, L.smem, G.st, params, NULL));
            CU_OK(cuStreamSynchronize(G.st));
            CU_OK(cuMemcpyDtoH(got, dq, (size_t)2 * nb * 36 + 64));
            for (int k = 0; k < B * nb; k++)
                if (memcmp(got + (size_t)k * 36, want + (size_t)k * 36, 36) && bad++ < 6)
                    printf("  FAIL swiglu K=%d N=%d B=%d run %d: q8_1 block %d differs\n", K, N,
                           B, run, k);
            for (size_t k = (size_t)B * nb * 36; k < (size_t)2 * nb * 36 + 64; k++)
                if (got[k] != 0xAB && bad++ < 6)
                    printf("  FAIL swiglu K=%d N=%d B=%d: byte %zu past the output written\n", K,
                           N, B, k);
            for (int i = 0; i < 2; i++) {
                CU_OK(cuMemcpyDtoH(yb, dy[i], ob));
                for (size_t k = 0; k < ob; k++)
                    if (((uint8_t *)yb)[k] != 0xCD) {
                        if (bad++ < 6)
                            printf("  FAIL swiglu K=%d N=%d B=%d: weight %d output written\n",
                                   K, N, B, i);
                        break;
                    }
            }
        }
    }
    printf("TABLE|mmvq fused swiglu %s+%s K=%d N=%d B=1..2: %s\n",
           memra_qtype_get((uint32_t)qt_g)->name, memra_qtype_get((uint32_t)qt_u)->name, K, N,
           bad ? "FAIL" : "ok");
    for (int i = 0; i < 2; i++) {
        CU_OK(cuMemFree(dw[i]));
        CU_OK(cuMemFree(dy[i]));
        free(ref[i]);
    }
    CU_OK(cuMemFree(da));
    CU_OK(cuMemFree(dq));
    free(a), free(want), free(got), free(yb);
    return bad;
}

START_TEST(test_mmvq_swiglu)
{
    GPU_OR_SKIP();
    BENCH_ONLY_SKIP();
    long bad = 0;
    bad += swiglu_case(MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, 4096, 1024); /* the 9b FFN's K, 32 blocks */
    bad += swiglu_case(MEMRA_QT_Q4_K, MEMRA_QT_Q6_K, 2816, 352); /* q6_K rows 2-byte aligned */
    bad += swiglu_case(MEMRA_QT_Q6_K, MEMRA_QT_Q6_K, 1024, 32);  /* one CUDA block */
    bad += swiglu_case(MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, 12288, 96); /* long rows: 2 staged rows */
    /* the 9b FFN itself: 384 CUDA blocks, about one wave at 3 per SM, more at fewer */
    bad += swiglu_case(MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, 4096, 12288);
    ck_assert_msg(bad == 0, "fused swiglu: %ld wrong", bad);
}
END_TEST

/* ------------------------------------- q8_1 quantizer ------------------------------------- */

/* x [rows, n] with the cases spec §6.3 names: zeros, exact ties (amax 127 so d = 1), a
 * negative extremal element, values whose d is not an fp16, huge (1e30) and subnormal
 * (1e-40) inputs, a +Inf, and a tail when n is not a multiple of 32. */
static void fill_quant_cases(float *x, int rows, int n, tu_rng *r)
{
    fill_acts(x, rows, n, r);
    for (int b = 0; b < rows; b++) {
        float *xr = x + (size_t)b * n;
        for (int j = 96; j < n && j < 128; j++) /* negative extremal, d not an fp16 */
            xr[j] = j == 100 ? -100.3f : tu_rng_normal(r);
        for (int j = 128; j < n && j < 160; j++)
            xr[j] = 1e30f * tu_rng_normal(r);
        for (int j = 160; j < n && j < 192; j++)
            xr[j] = 1e-40f * tu_rng_normal(r);
        if (n > 200)
            xr[200] = INFINITY;
        for (int j = 224; j < n && j < 256; j++) /* ties at d = 1 */
            xr[j] = j == 224 ? 127.0f : (float)(j % 7) - 2.5f;
    }
}

START_TEST(test_quantize_q8_1_bytes)
{
    GPU_OR_SKIP();
    BENCH_ONLY_SKIP();
    static const int ns[] = {32, 96, 4096, 4100, 14336};
    CUfunction f = kernel("quantize_q8_1");
    tu_rng rng;
    tu_rng_seed(&rng, 777);
    long blocks = 0, bad = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int rows = 1; rows <= 16; rows += 15) {
            const int n = ns[i], nb = (n + 31) / 32;
            float *x = malloc((size_t)rows * n * 4);
            memra_block_q8_1 *want = malloc((size_t)rows * nb * 36),
                             *got = malloc((size_t)rows * nb * 36);
            fill_quant_cases(x, rows, n, &rng);
            for (int b = 0; b < rows; b++)
                memra_quantize_q8_1(x + (size_t)b * n, want + (size_t)b * nb, n);
            CUdeviceptr dx = dalloc((size_t)rows * n * 4), dq = dalloc((size_t)rows * nb * 36);
            CU_OK(cuMemcpyHtoD(dx, x, (size_t)rows * n * 4));
            CU_OK(cuMemsetD8(dq, 0xA5, (size_t)rows * nb * 36));
            void *params[] = {&dx, &dq, (void *)&n, &rows};
            const unsigned grid = (unsigned)((rows * nb + 7) / 8);
            CU_OK(cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, G.st, params, NULL));
            CU_OK(cuMemcpyDtoH(got, dq, (size_t)rows * nb * 36));
            for (int k = 0; k < rows * nb; k++, blocks++)
                if (memcmp(&got[k], &want[k], 36) != 0 && bad++ < 4)
                    printf("  FAIL q8_1 n=%d rows=%d block %d: gpu d %04x s %04x q0 %d, cpu d %04x "
                           "s %04x q0 %d\n",
                           n, rows, k, got[k].d, got[k].s, got[k].qs[0], want[k].d, want[k].s,
                           want[k].qs[0]);
            CU_OK(cuMemFree(dx));
            CU_OK(cuMemFree(dq));
            free(x), free(want), free(got);
        }
    printf("TABLE|quantize_q8_1: %ld/%ld blocks byte-identical to memra_quantize_q8_1\n",
           blocks - bad, blocks);
    ck_assert_msg(bad == 0, "%ld q8_1 blocks differ", bad);
}
END_TEST

/* ---------------------------------------- bandwidth --------------------------------------- */

static float median(float *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

enum { BENCH_REPS = 7 };

/* Driver entry points the shared table (runtime/cuda_util.h) does not carry: graph capture
 * and the PDL launch, looked up in the library the table already loaded. */
typedef struct graph_api {
    CUresult (*begin)(CUstream, CUstreamCaptureMode);
    CUresult (*end)(CUstream, CUgraph *);
    CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*launch)(CUgraphExec, CUstream);
    CUresult (*exec_destroy)(CUgraphExec);
    CUresult (*destroy)(CUgraph);
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
} graph_api;

static int graph_api_get(graph_api *g)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 0;
    *(void **)&g->begin = dlsym(lib, "cuStreamBeginCapture_v2");
    *(void **)&g->end = dlsym(lib, "cuStreamEndCapture");
    *(void **)&g->inst = dlsym(lib, "cuGraphInstantiateWithFlags");
    *(void **)&g->launch = dlsym(lib, "cuGraphLaunch");
    *(void **)&g->exec_destroy = dlsym(lib, "cuGraphExecDestroy");
    *(void **)&g->destroy = dlsym(lib, "cuGraphDestroy");
    *(void **)&g->launch_ex = dlsym(lib, "cuLaunchKernelEx");
    return g->begin && g->end && g->inst && g->launch && g->exec_destroy && g->destroy &&
           g->launch_ex;
}

#define GR_OK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        ck_assert_msg(r_ == CUDA_SUCCESS, "%s: CUresult %d", #call, (int)r_);                     \
    } while (0)

/* One PDL-attributed launch into the capturing stream (as the backend launches). */
static void pdl_launch(const graph_api *ga, CUstream st, CUfunction f, unsigned grid,
                       unsigned threads, unsigned smem, void **params)
{
    CUlaunchAttribute attr;
    CUlaunchConfig cfg;
    memra_cu_pdl_config(&cfg, &attr, grid, threads, smem, st);
    GR_OK(ga->launch_ex(&cfg, f, params, NULL));
}

/* The chain tests' start: a GPU, checks on, the graph entry points in ga (else SKIP). */
#define CHAIN_PROLOGUE(ga)                                                                         \
    GPU_OR_SKIP();                                                                                 \
    BENCH_ONLY_SKIP();                                                                             \
    graph_api ga;                                                                                  \
    if (!graph_api_get(&ga)) {                                                                     \
        printf("SKIP %s: no graph / cuLaunchKernelEx entry points\n", __func__);                   \
        return;                                                                                    \
    }

/* quantize_q8_1 of B rows of K floats at x into the q8_1 rows at a, PDL-launched as the tick
 * launches it. */
static void pdl_quantize(const graph_api *ga, CUstream st, CUfunction fq, CUdeviceptr x,
                         CUdeviceptr a, int K, int B)
{
    int n = K, rows = B;
    void *qp[] = {&x, &a, &n, &rows};
    pdl_launch(ga, st, fq, (unsigned)((B * (K / 32) + 7) / 8), 256, 0, qp);
}

/* End the capture on st into *g and instantiate it. */
static CUgraphExec capture_end(const graph_api *ga, CUstream st, CUgraph *g)
{
    CUgraphExec ge;
    GR_OK(ga->end(st, g));
    GR_OK(ga->inst(&ge, *g, 0));
    return ge;
}

/* A real decode launch of the 9b preset (n_embd 4096) at every tier: up to 4 weights merged on
 * one input, with the types tests/forge.c gives Q4_K_M (llama.cpp's rule): the GDN attn_qkv
 * and the attention attn_v are q6_K in the 16 of 32 layers use_more_bits picks (12 GDN, 4
 * attention), ffn_down in 16, everything else q4_K. Both q4_K and q6_K take the direct path,
 * so tiers 1-2 launch these merged too (plans/dsl.lua Plan:mmvq). Per 9b tick: 12 of each
 * gdn_in, 4 of each attn_qkv, 32 out_proj (24 ssm_out + 8 attn_output) and gate+up, 16 of
 * each ffn_down, one lm_head. (Until session 12 this table had gdn_in with q6_K beta/alpha and
 * q4_K-only "t1" rows: neither is a launch the 9b makes.) */
typedef struct bench_shape {
    const char *name;
    int K, n_w, qt[4], n[4], mode;
} bench_shape;

static const bench_shape k_shapes[] = {
    {"gdn_in q4K8192+q4K4096+q4K32x2", 4096, 4,
     {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K}, {8192, 4096, 32, 32}, 0},
    {"gdn_in q6K8192+q4K4096+q4K32x2", 4096, 4,
     {MEMRA_QT_Q6_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K}, {8192, 4096, 32, 32}, 0},
    {"attn_qkv q4K8192+q4K1024+q4K1024", 4096, 3, {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K},
     {8192, 1024, 1024}, 0},
    {"attn_qkv q4K8192+q4K1024+q6K1024", 4096, 3, {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q6_K},
     {8192, 1024, 1024}, 0},
    {"out_proj q4K4096 (add)", 4096, 1, {MEMRA_QT_Q4_K}, {4096}, 1},
    {"ffn_gate_up q4K12288x2", 4096, 2, {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K}, {12288, 12288}, 0},
    {"ffn_down q4K K12288 (add)", 12288, 1, {MEMRA_QT_Q4_K}, {4096}, 1},
    {"ffn_down q6K K12288 (add)", 12288, 1, {MEMRA_QT_Q6_K}, {4096}, 1},
    {"lm_head q6K248320", 4096, 1, {MEMRA_QT_Q6_K}, {248320}, 0},
};
#define N_SHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))
static const int k_bench_B[5] = {1, 2, 4, 8, 16};

static size_t shape_bytes(const bench_shape *sh)
{
    size_t n = 0;
    for (int i = 0; i < sh->n_w; i++)
        n += memra_quant_row_bytes((memra_qtype)sh->qt[i], sh->K) * (size_t)sh->n[i];
    return n;
}

/* The launch args of shape sh at tier B, weights at successive 256-byte aligned offsets from
 * wbuf + off (wrapping inside cap). */
static memra_mmvq_args shape_args(const bench_shape *sh, int B, CUdeviceptr wbuf, size_t cap,
                                  size_t off, CUdeviceptr da, CUdeviceptr dy)
{
    memra_mmvq_args a = {.a = dptr(da), .n_in = sh->K, .b = B, .n_w = sh->n_w};
    size_t yo = 0;
    for (int i = 0; i < sh->n_w; i++) {
        const size_t rb = memra_quant_row_bytes((memra_qtype)sh->qt[i], sh->K);
        const size_t bytes = (rb * sh->n[i] + 255) / 256 * 256;
        if (off + bytes > cap)
            off = 0;
        a.out[i] = (memra_mmvq_out){.w = dptr(wbuf + off), .y = dptr(dy + yo * 4),
                                    .qtype = sh->qt[i], .n_out = sh->n[i], .row_bytes = rb,
                                    .mode = sh->mode};
        off += bytes;
        yo += (size_t)16 * sh->n[i];
    }
    return a;
}

/* Compiles the bench's specializations in parallel (16 threads) before anything is timed. */
typedef struct bench_keys {
    char key[N_SHAPES * 5][MEMRA_KERNEL_KEY_MAX];
    atomic_int next;
} bench_keys;

static void *bench_key_worker(void *arg)
{
    bench_keys *k = arg;
    for (int i; (i = atomic_fetch_add(&k->next, 1)) < N_SHAPES * 5;) {
        memra_cubin c;
        if (memra_nvrtc_compile(k->key[i], G.sm, &c, NULL) == MEMRA_OK)
            memra_cubin_free(&c);
    }
    return NULL;
}

static void bench_prewarm(CUdeviceptr da, CUdeviceptr dy)
{
    static bench_keys k;
    for (int si = 0; si < N_SHAPES; si++)
        for (int bi = 0; bi < 5; bi++) {
            memra_mmvq_args a = shape_args(&k_shapes[si], k_bench_B[bi], 256, (size_t)1 << 40, 0,
                                           da, dy);
            memra_mmvq_launch L;
            ck_assert_int_eq(memra_mmvq_prepare(&a, G.sm, 0, 0, &L, NULL), MEMRA_OK);
            snprintf(k.key[si * 5 + bi], MEMRA_KERNEL_KEY_MAX, "%s", L.key);
        }
    atomic_store(&k.next, 0);
    pthread_t th[16];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, (size_t)64 << 20);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(pthread_create(&th[i], &at, bench_key_worker, &k), 0);
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&at);
}

/* Median microseconds per launch of shape sh at tier B: R launches back to back in one
 * captured graph, each PDL-enabled (as the backend launches mmvq), weights rotated so that
 * no launch finds its weights in L2. rpw > 0 forces the direct path's rows per warp (the
 * caller checks it applies). */
static double bench_shape_us(const graph_api *ga, CUstream st, const bench_shape *sh, int B,
                             int rpw, CUdeviceptr wbuf, size_t cap, CUdeviceptr da, CUdeviceptr dy,
                             CUevent e0, CUevent e1)
{
    const size_t bytes = shape_bytes(sh) + 256 * sh->n_w;
    int R = (int)(((size_t)3 << 30) / bytes); /* about 3 GB of weights per replay */
    R = R < 2 ? 2 : R > 256 ? 256 : R;
    CUgraph g;
    CUgraphExec ge;
    GR_OK(ga->begin(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    size_t off = 0;
    for (int r = 0; r < R; r++) {
        memra_mmvq_args a = shape_args(sh, B, wbuf, cap, off, da, dy);
        off = (size_t)((const uint8_t *)a.out[sh->n_w - 1].w - (const uint8_t *)dptr(wbuf)) +
              (memra_quant_row_bytes((memra_qtype)sh->qt[sh->n_w - 1], sh->K) *
                   sh->n[sh->n_w - 1] + 255) / 256 * 256;
        memra_mmvq_launch L;
        memra_err e;
        memra_err_clear(&e);
        ck_assert_msg(memra_mmvq_prepare(&a, G.sm, 0, 0, &L, &e) == MEMRA_OK, "%s", e.msg);
        if (rpw > 0)
            ck_assert_msg(memra_mmvq_force_rpw(&L, rpw, &e) == MEMRA_OK, "%s", e.msg);
        void *params[] = {&L.params};
        pdl_launch(ga, st, kernel(L.key), L.grid, L.threads, L.smem, params);
    }
    GR_OK(ga->end(st, &g));
    GR_OK(ga->inst(&ge, g, 0));
    float ms[BENCH_REPS];
    for (int it = -1; it < BENCH_REPS; it++) {
        CU_OK(cuEventRecord(e0, st));
        GR_OK(ga->launch(ge, st));
        CU_OK(cuEventRecord(e1, st));
        CU_OK(cuEventSynchronize(e1));
        if (it >= 0)
            CU_OK(cuEventElapsedTime(&ms[it], e0, e1));
    }
    GR_OK(ga->exec_destroy(ge));
    GR_OK(ga->destroy(g));
    return 1e3 * median(ms, BENCH_REPS) / R;
}

/* Random bytes (never time on zeros) over the weight buffer, 64 MB generated once and tiled;
 * q8_1 activations of 16 rows of 12288 values. */
static void bench_fill(CUdeviceptr wbuf, size_t cap, CUdeviceptr da)
{
    const size_t chunk = (size_t)64 << 20;
    uint64_t *h = malloc(chunk);
    tu_rng rng;
    tu_rng_seed(&rng, 99);
    for (size_t i = 0; i < chunk / 8; i++)
        h[i] = tu_rng_u64(&rng);
    for (size_t off = 0; off < cap; off += chunk)
        CU_OK(cuMemcpyHtoD(wbuf + off, h, chunk));
    float *x = malloc((size_t)16 * 12288 * 4);
    memra_block_q8_1 *a = malloc((size_t)16 * 12288 / 32 * 36);
    fill_acts(x, 16, 12288, &rng);
    for (int b = 0; b < 16; b++)
        memra_quantize_q8_1(x + (size_t)b * 12288, a + (size_t)b * 384, 12288);
    CU_OK(cuMemcpyHtoD(da, a, (size_t)16 * 12288 / 32 * 36));
    free(h), free(x), free(a);
}

/* Device-to-device copy bandwidth, bytes read plus bytes written per second (GB/s). */
static double bench_copy(CUstream st, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUevent e0,
                         CUevent e1)
{
    float ms[BENCH_REPS];
    for (int it = -2; it < BENCH_REPS; it++) {
        CU_OK(cuEventRecord(e0, st));
        CU_OK(cuMemcpyDtoDAsync(dst, src, bytes, st));
        CU_OK(cuEventRecord(e1, st));
        CU_OK(cuEventSynchronize(e1));
        if (it >= 0)
            CU_OK(cuEventElapsedTime(&ms[it], e0, e1));
    }
    return 2.0 * (double)bytes / (median(ms, BENCH_REPS) * 1e-3) / 1e9;
}

/* MEMRA_GPU_PROFILE=1 (bench/device-ncu.sh): each bench shape once at B = 1, 4, 16, plainly
 * launched (no graph, no PDL) between cuProfilerStart and cuProfilerStop, for
 * `ncu --profile-from-start off`: 3 kernels per shape, weights at the start of the buffer.
 * MEMRA_GPU_PROFILE_B=16 keeps one B (any of 1..16), MEMRA_GPU_PROFILE_SHAPES="lm_head,ffn_gate"
 * the shapes whose names start with one of the comma-separated prefixes (the source-level
 * profile of NCU_SOURCE=1, which costs a replay per section and kernel). */
static void bench_profile(CUdeviceptr da, CUdeviceptr dy, CUdeviceptr wbuf, size_t cap)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*start)(void) = lib ? (CUresult(*)(void))dlsym(lib, "cuProfilerStart") : NULL;
    CUresult (*stop)(void) = lib ? (CUresult(*)(void))dlsym(lib, "cuProfilerStop") : NULL;
    ck_assert_msg(start && stop, "no cuProfilerStart / cuProfilerStop in libcuda.so.1");
    int Bs[] = {1, 4, 16}, nb = 3;
    const char *only_b = getenv("MEMRA_GPU_PROFILE_B"), *shapes = getenv("MEMRA_GPU_PROFILE_SHAPES");
    if (only_b && *only_b) {
        Bs[0] = atoi(only_b), nb = 1;
        ck_assert_msg(Bs[0] >= 1 && Bs[0] <= 16, "MEMRA_GPU_PROFILE_B=%s not in 1..16", only_b);
    }
    ck_assert_int_eq(start(), CUDA_SUCCESS);
    for (int si = 0; si < N_SHAPES; si++)
        for (int bi = 0; bi < nb; bi++) {
            if (shapes && *shapes && !in_list(shapes, k_shapes[si].name, 1))
                continue;
            memra_mmvq_args a = shape_args(&k_shapes[si], Bs[bi], wbuf, cap, 0, da, dy);
            mmvq_run(&a, 0, NULL);
            CU_OK(cuCtxSynchronize());
            printf("profiled: %s B=%d\n", k_shapes[si].name, Bs[bi]);
        }
    ck_assert_int_eq(stop(), CUDA_SUCCESS);
    if (lib)
        dlclose(lib);
}

/* The direct path (B = 1, the shapes whose weights are all of direct types) at several rows
 * per warp, us per launch and % of the copy rate; "auto" is prepare()'s one-wave choice for
 * 132 SMs. */
static void bench_direct_table(const graph_api *ga, CUstream st, double copy_gbs,
                               CUdeviceptr wbuf, size_t cap, CUdeviceptr da, CUdeviceptr dy,
                               CUevent e0, CUevent e1)
{
    /* auto: runtime/nvrtc.c's choice (one wave; at B = 1 at most MEMRA_MMVQ_DIRECT_MAX_RPW_B1) */
    enum { N_RPW = 7 };
    static const int rpws[N_RPW] = {0, 1, 2, 4, 8, 16, 32};
    for (int b = 1; b <= MEMRA_MMVQ_DIRECT_MAX_B; b++) {
        printf("TABLE|direct path at B=%d by rows per warp (us per launch, %% copy)\n", b);
        printf("TABLE|%-34s %7s %9s %8s", "shape", "MB", "floor_us", "auto");
        for (int c = 1; c < N_RPW; c++)
            printf("   rpw=%-2d", rpws[c]);
        printf("\n");
        for (int si = 0; si < N_SHAPES; si++) {
            const bench_shape *sh = &k_shapes[si];
            int direct = 1;
            for (int i = 0; i < sh->n_w; i++)
                direct &= memra_mmvq_direct(sh->qt[i]);
            if (!direct)
                continue;
            const double mb = (double)shape_bytes(sh) / 1e6;
            char us_line[192] = "", pct_line[192] = "";
            int ul = 0, pl = 0;
            for (int c = 0; c < N_RPW; c++) {
                const double us = bench_shape_us(ga, st, sh, b, rpws[c], wbuf, cap, da, dy, e0, e1);
                ul += snprintf(us_line + ul, sizeof us_line - ul, " %8.1f", us);
                pl += snprintf(pct_line + pl, sizeof pct_line - pl, " %7.0f%%",
                               100.0 * mb * 1e6 / (us * 1e-6) / 1e9 / copy_gbs);
            }
            printf("TABLE|%-34s %7.1f %9.2f%s\n", sh->name, mb, mb * 1e6 / (copy_gbs * 1e9) * 1e6,
                   us_line);
            printf("TABLE|%-34s %7s %9s%s\n", "", "", "  % copy", pct_line);
        }
    }
}

START_TEST(test_bandwidth)
{
    GPU_OR_SKIP();
    if (env_on("MEMRA_GPU_NO_BENCH")) {
        printf("SKIP bandwidth: MEMRA_GPU_NO_BENCH\n");
        return;
    }
    graph_api ga;
    if (!graph_api_get(&ga)) {
        printf("SKIP bandwidth: no graph / cuLaunchKernelEx entry points\n");
        return;
    }
    const size_t cap = (size_t)2 << 30;
    CUdeviceptr wbuf = dalloc(cap), dst = dalloc((size_t)1 << 30);
    CUdeviceptr da = dalloc((size_t)16 * 12288 / 32 * 36);
    size_t ymax = 0;
    for (int si = 0; si < N_SHAPES; si++) {
        size_t n = 0;
        for (int i = 0; i < k_shapes[si].n_w; i++)
            n += (size_t)16 * k_shapes[si].n[i];
        ymax = n > ymax ? n : ymax;
    }
    CUdeviceptr dy = dalloc(ymax * 4);
    CU_OK(cuMemsetD8(dy, 0, ymax * 4));
    bench_fill(wbuf, cap, da);
    const double t0 = now_s();
    bench_prewarm(da, dy);
    printf("bench: specializations ready in %.1f s\n", now_s() - t0);
    CUstream st;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CUevent e0, e1;
    CU_OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU_OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    if (env_on("MEMRA_GPU_PROFILE")) { /* bench/device-ncu.sh: one launch per (shape, B) */
        bench_profile(da, dy, wbuf, cap);
        CU_OK(cuStreamDestroy(st));
        CU_OK(cuMemFree(wbuf));
        CU_OK(cuMemFree(dst));
        CU_OK(cuMemFree(da));
        CU_OK(cuMemFree(dy));
        return;
    }
    const double copy_gbs = bench_copy(st, dst, wbuf, (size_t)1 << 30, e0, e1);
    printf("TABLE|bandwidth: device-to-device copy of 1 GiB: %.0f GB/s (read + write); "
           "mmvq in graphs of back-to-back PDL launches, us per launch and %% of that copy "
           "rate (weight bytes / time)\n",
           copy_gbs);
    printf("TABLE|%-34s %7s %9s %8s %8s %8s %8s %8s\n", "shape", "MB", "floor_us", "B=1",
           "B=2", "B=4", "B=8", "B=16");
    double tot_bytes = 0, tot_us[5] = {0};
    for (int si = 0; si < N_SHAPES; si++) {
        const bench_shape *sh = &k_shapes[si];
        const double mb = (double)shape_bytes(sh) / 1e6;
        char us_line[128] = "", pct_line[128] = "";
        int ul = 0, pl = 0;
        for (int bi = 0; bi < 5; bi++) {
            const double us =
                bench_shape_us(&ga, st, sh, k_bench_B[bi], 0, wbuf, cap, da, dy, e0, e1);
            tot_us[bi] += us;
            ul += snprintf(us_line + ul, sizeof us_line - ul, " %8.1f", us);
            pl += snprintf(pct_line + pl, sizeof pct_line - pl, " %7.0f%%",
                           100.0 * mb * 1e6 / (us * 1e-6) / 1e9 / copy_gbs);
        }
        tot_bytes += mb * 1e6;
        printf("TABLE|%-34s %7.1f %9.2f%s\n", sh->name, mb, mb * 1e6 / (copy_gbs * 1e9) * 1e6,
               us_line);
        printf("TABLE|%-34s %7s %9s%s\n", "", "", "  % copy", pct_line);
    }
    printf("TABLE|%-34s %7.1f %9.2f", "sum of one of each", tot_bytes / 1e6,
           tot_bytes / (copy_gbs * 1e9) * 1e6);
    for (int bi = 0; bi < 5; bi++)
        printf(" %8.1f", tot_us[bi]);
    printf("\n");
    bench_direct_table(&ga, st, copy_gbs, wbuf, cap, da, dy, e0, e1);
    CU_OK(cuEventDestroy(e0));
    CU_OK(cuEventDestroy(e1));
    CU_OK(cuStreamDestroy(st));
    CU_OK(cuMemFree(wbuf));
    CU_OK(cuMemFree(dst));
    CU_OK(cuMemFree(da));
    CU_OK(cuMemFree(dy));
}
END_TEST

/* ------------------------------ the tick's PDL chain, exact ------------------------------- */

enum { CHAIN_STEPS = 3, CHAIN_REPLAYS = 2 };

/* The tick's pattern at every 9b shape (k_shapes) and B = 1, 2, 4, 8, 16: per step a
 * PDL-launched quantize_q8_1 writes the one activation buffer and the shape's PDL-launched
 * mmvq reads it (so the next step's quantize overwrites what the previous mmvq read: PDL must
 * order the write after the read), each step into its own outputs (add-mode shapes onto
 * known values, restored by a copy at the graph's start); one captured graph, replayed
 * twice. Every output memcmp-equal to the CPU reference. Unlike test_mmvq_qtype's small
 * shapes, the grids here are the engine's (one-wave direct grids, the lm_head's many waves),
 * launched back to back with their producer as in the tick. */
START_TEST(test_mmvq_pdl_chain)
{
    CHAIN_PROLOGUE(ga);
    CUfunction fq = kernel("quantize_q8_1");
    bench_prewarm(256, 256); /* the shapes' specializations, compiled in parallel */
    CUstream st;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    long pairs = 0, bad = 0, launches = 0;
    const double t0 = now_s();
    for (int si = 0; si < N_SHAPES; si++) {
        const bench_shape *sh = &k_shapes[si];
        const int K = sh->K, nb = K / 32;
        if (quick() && sh->n[0] > 100000)
            continue;
        size_t rb[4], yo[CHAIN_STEPS][4], ytot = 0; /* y: [step][weight][16][n] floats */
        uint8_t *w[4];
        CUdeviceptr dw[4];
        for (int i = 0; i < sh->n_w; i++) {
            rb[i] = memra_quant_row_bytes((memra_qtype)sh->qt[i], K);
            const size_t bytes = rb[i] * (size_t)sh->n[i],
                         db = memra_quant_dot_block_bytes((memra_qtype)sh->qt[i]);
            ck_assert_ptr_nonnull(w[i] = malloc(bytes));
            for (size_t off = 0; off < bytes; off += db)
                fill_block(sh->qt[i], w[i] + off, db, &rng);
            dw[i] = dalloc(bytes);
            CU_OK(cuMemcpyHtoD(dw[i], w[i], bytes));
        }
        for (int s = 0; s < CHAIN_STEPS; s++)
            for (int i = 0; i < sh->n_w; i++) {
                yo[s][i] = ytot;
                ytot += (size_t)16 * sh->n[i];
            }
        /* 16 rows of activations per step; tier B uses the first B (rows are contiguous) */
        float *x = malloc((size_t)CHAIN_STEPS * 16 * K * 4), *init = malloc(ytot * 4);
        float *want = malloc(ytot * 4), *got = malloc(ytot * 4);
        memra_block_q8_1 *a = malloc((size_t)16 * nb * sizeof *a);
        ck_assert(x && init && want && got && a);
        for (size_t j = 0; j < ytot; j++)
            init[j] = sh->mode ? tu_rng_normal(&rng) : 0.0f;
        for (int s = 0; s < CHAIN_STEPS; s++) {
            float *xs = x + (size_t)s * 16 * K;
            fill_acts(xs, 16, K, &rng);
            for (int b = 0; b < 16; b++)
                memra_quantize_q8_1(xs + (size_t)b * K, a + (size_t)b * nb, K);
            for (int i = 0; i < sh->n_w; i++) {
                ref_job j = {.qt = sh->qt[i], .K = K, .N = sh->n[i], .w = w[i], .a = a,
                             .ref = want + yo[s][i]};
                cpu_ref(&j);
                if (sh->mode)
                    for (size_t k = 0; k < (size_t)16 * sh->n[i]; k++)
                        want[yo[s][i] + k] = init[yo[s][i] + k] + want[yo[s][i] + k];
            }
        }
        CUdeviceptr dx = dalloc((size_t)CHAIN_STEPS * 16 * K * 4),
                    da = dalloc((size_t)16 * nb * 36), dy = dalloc(ytot * 4),
                    dinit = dalloc(ytot * 4);
        CU_OK(cuMemcpyHtoD(dx, x, (size_t)CHAIN_STEPS * 16 * K * 4));
        CU_OK(cuMemcpyHtoD(dinit, init, ytot * 4));
        for (int bi = 0; bi < 5; bi++) {
            const int B = k_bench_B[bi];
            /* the launches first (kernels loaded outside the capture), then the graph */
            memra_mmvq_launch L[CHAIN_STEPS];
            CUfunction fm = NULL;
            for (int s = 0; s < CHAIN_STEPS; s++) {
                memra_mmvq_args args = {.a = dptr(da), .n_in = K, .b = B, .n_w = sh->n_w};
                for (int i = 0; i < sh->n_w; i++)
                    args.out[i] = (memra_mmvq_out){.w = dptr(dw[i]), .y = dptr(dy + yo[s][i] * 4),
                                                   .qtype = sh->qt[i], .n_out = sh->n[i],
                                                   .row_bytes = rb[i], .mode = sh->mode};
                memra_err e;
                memra_err_clear(&e);
                ck_assert_msg(memra_mmvq_prepare(&args, G.sm, 0, 0, &L[s], &e) == MEMRA_OK, "%s",
                              e.msg);
                fm = kernel(L[s].key);
            }
            CUgraph g;
            CUgraphExec ge;
            GR_OK(ga.begin(st, CU_STREAM_CAPTURE_MODE_RELAXED));
            CU_OK(cuMemcpyDtoDAsync(dy, dinit, ytot * 4, st));
            for (int s = 0; s < CHAIN_STEPS; s++) {
                pdl_quantize(&ga, st, fq, dx + (size_t)s * 16 * K * 4, da, K, B);
                void *mp[] = {&L[s].params};
                pdl_launch(&ga, st, fm, L[s].grid, L[s].threads, L[s].smem, mp);
                launches += 2;
            }
            ge = capture_end(&ga, st, &g);
            for (int rep = 0; rep < CHAIN_REPLAYS; rep++) {
                GR_OK(ga.launch(ge, st));
                CU_OK(cuStreamSynchronize(st));
                CU_OK(cuMemcpyDtoH(got, dy, ytot * 4));
                for (int s = 0; s < CHAIN_STEPS; s++)
                    for (int i = 0; i < sh->n_w; i++)
                        for (int c = 0; c < B; c++)
                            for (int o = 0; o < sh->n[i]; o++) {
                                const size_t k = yo[s][i] + (size_t)c * sh->n[i] + o;
                                pairs++;
                                if (memcmp(&got[k], &want[k], 4) != 0 && bad++ < 6)
                                    printf("  FAIL pdl chain %s B=%d replay %d step %d weight %d "
                                           "row %d out %d: gpu %.9g cpu %.9g\n",
                                           sh->name, B, rep, s, i, c, o, got[k], want[k]);
                            }
            }
            GR_OK(ga.exec_destroy(ge));
            GR_OK(ga.destroy(g));
        }
        for (int i = 0; i < sh->n_w; i++) {
            CU_OK(cuMemFree(dw[i]));
            free(w[i]);
        }
        CU_OK(cuMemFree(dx));
        CU_OK(cuMemFree(da));
        CU_OK(cuMemFree(dy));
        CU_OK(cuMemFree(dinit));
        free(x), free(init), free(want), free(got), free(a);
    }
    CU_OK(cuStreamDestroy(st));
    printf("TABLE|mmvq PDL chain (quantize_q8_1 -> mmvq, 9b shapes, B = 1..16, %d steps x %d "
           "replays): %ld/%ld outputs bit-identical to the CPU, %ld launches, %.1f s\n",
           CHAIN_STEPS, CHAIN_REPLAYS, pairs - bad, pairs, launches, now_s() - t0);
    ck_assert_msg(bad == 0, "%ld of %ld outputs differ from the CPU", bad, pairs);
}
END_TEST

/* Random q4_K / q6_K blocks (fill_block) with moderate scales (weights of magnitude < 2), so
 * that a whole FFN stays finite: fill_block's scales span the fp16 range, and silu(g) u must
 * stay below 127 x 65504 for its q8_1 scale (fp16) to be finite. */
static void ffn_weight(int qt, uint8_t *w, size_t bytes, tu_rng *r)
{
    const size_t db = memra_quant_dot_block_bytes((memra_qtype)qt);
    for (size_t off = 0; off < bytes; off += db) {
        uint8_t *p = w + off;
        fill_block(qt, p, db, r);
        const float u = tu_rng_uniform(r);
        if (qt == MEMRA_QT_Q6_K) { /* int8 sub-block scales up to 128, codes up to 32 */
            put16(p + 208, memra_f32_to_fp16(ldexpf(1.0f + u, -13)));
        } else {
            put16(p, memra_f32_to_fp16(ldexpf(1.0f + u, -10)));
            put16(p + 2, memra_f32_to_fp16(ldexpf(u, -10)));
        }
    }
}

/* The tick's FFN at the 9b shape (D 4096, F 12288), B = 1 and 2, exactly as the engine
 * launches it with fusion on: per step a PDL quantize_q8_1 writes the activations, the fused
 * {gate, up} + SwiGLU mmvq (memra_mmvq_fuse_swiglu) reads them and writes the q8_1 rows of
 * silu(g) u, and the PDL down mmvq (q4_K on even steps, q6_K on odd ones, as Q4_K_M mixes
 * them) reads those and adds onto known values. Each kernel's input is its predecessor's
 * output, which the PDL chain test's shapes do not cover (their mmvq feeds nothing). One
 * captured graph, replayed twice; every output and the last step's q8_1 rows memcmp-equal
 * to the CPU (memra_mmvq_dot, memra_silu_mul_q8_ref). */
START_TEST(test_mmvq_ffn_chain)
{
    CHAIN_PROLOGUE(ga);
    enum { D = 4096, F = 12288 };
    const int qt[4] = {MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q4_K, MEMRA_QT_Q6_K};
    const int kin[4] = {D, D, F, F}, nout[4] = {F, F, D, D}; /* gate, up, down q4_K, down q6_K */
    CUfunction fq = kernel("quantize_q8_1");
    CUstream st;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    tu_rng rng;
    tu_rng_seed(&rng, 5151);
    const double t0 = now_s();
    uint8_t *w[4];
    CUdeviceptr dw[4];
    size_t rb[4];
    for (int i = 0; i < 4; i++) {
        rb[i] = memra_quant_row_bytes((memra_qtype)qt[i], kin[i]);
        const size_t bytes = rb[i] * (size_t)nout[i];
        ck_assert_ptr_nonnull(w[i] = malloc(bytes));
        ffn_weight(qt[i], w[i], bytes, &rng);
        dw[i] = dalloc(bytes);
        CU_OK(cuMemcpyHtoD(dw[i], w[i], bytes));
    }
    /* CPU: per step 16 rows; tier B checks the first B */
    const size_t qb = (size_t)16 * (F / 32) * sizeof(memra_block_q8_1);
    float *x = malloc((size_t)CHAIN_STEPS * 16 * D * 4), *init = malloc((size_t)16 * D * 4);
    float *want = malloc((size_t)CHAIN_STEPS * 16 * D * 4), *got = malloc((size_t)16 * D * 4);
    float *g = malloc((size_t)16 * F * 4), *u = malloc((size_t)16 * F * 4);
    memra_block_q8_1 *a = malloc((size_t)16 * (D / 32) * sizeof *a);
    memra_block_q8_1 *yq = malloc((size_t)CHAIN_STEPS * qb), *gotq = malloc(qb);
    ck_assert(x && init && want && got && g && u && a && yq && gotq);
    for (size_t j = 0; j < (size_t)16 * D; j++)
        init[j] = tu_rng_normal(&rng);
    for (int s = 0; s < CHAIN_STEPS; s++) {
        float *xs = x + (size_t)s * 16 * D; /* normed hidden states: unit scale x 2^(b%4 - 1) */
        for (int b = 0; b < 16; b++)
            for (int j = 0; j < D; j++)
                xs[(size_t)b * D + j] = ldexpf(tu_rng_normal(&rng), b % 4 - 1);
        for (int b = 0; b < 16; b++)
            memra_quantize_q8_1(xs + (size_t)b * D, a + (size_t)b * (D / 32), D);
        ref_job jg = {.qt = qt[0], .K = D, .N = F, .w = w[0], .a = a, .ref = g};
        ref_job ju = {.qt = qt[1], .K = D, .N = F, .w = w[1], .a = a, .ref = u};
        cpu_ref(&jg);
        cpu_ref(&ju);
        memra_block_q8_1 *ys = yq + (size_t)s * 16 * (F / 32);
        memra_silu_mul_q8_args sm = {.b = 16, .n_slots = 1};
        sm.slot[0] = (memra_silu_mul_q8_slot){.g = g, .u = u, .y_q = ys, .n = F, .m = 1};
        ck_assert_int_eq(memra_silu_mul_q8_ref(&sm), MEMRA_OK);
        const int di = 2 + (s & 1);
        float *ws = want + (size_t)s * 16 * D;
        ref_job jd = {.qt = qt[di], .K = F, .N = D, .w = w[di], .a = ys, .ref = ws};
        cpu_ref(&jd);
        for (size_t k = 0; k < (size_t)16 * D; k++) {
            ws[k] = init[k] + ws[k];
            ck_assert_msg(isfinite(ws[k]), "ffn chain: CPU output %zu of step %d not finite", k, s);
        }
    }
    const size_t xb = (size_t)CHAIN_STEPS * 16 * D * 4; /* x, y, init: [step][16][D] f32 */
    CUdeviceptr dx = dalloc(xb), da = dalloc((size_t)16 * (D / 32) * 36), dq = dalloc(qb),
                dy = dalloc(xb), dinit = dalloc(xb), dg = dalloc((size_t)16 * F * 4);
    CU_OK(cuMemcpyHtoD(dx, x, xb));
    for (int s = 0; s < CHAIN_STEPS; s++)
        CU_OK(cuMemcpyHtoD(dinit + (size_t)s * 16 * D * 4, init, (size_t)16 * D * 4));
    long pairs = 0, bad = 0, launches = 0;
    for (int B = 1; B <= 2; B++) {
        memra_mmvq_launch Lf, Ld[2];
        memra_err e;
        memra_err_clear(&e);
        /* gate and up store nowhere once fused; dg only satisfies the args' checks */
        memra_mmvq_args af = {.a = dptr(da), .n_in = D, .b = B, .n_w = 2};
        for (int i = 0; i < 2; i++)
            af.out[i] = (memra_mmvq_out){
                .w = dptr(dw[i]), .y = dptr(dg), .qtype = qt[i], .n_out = F, .row_bytes = rb[i]};
        ck_assert_msg(memra_mmvq_prepare(&af, G.sm, 0, 0, &Lf, &e) == MEMRA_OK, "%s", e.msg);
        ck_assert_msg(memra_mmvq_fuse_swiglu(&Lf, dptr(dq), &e) == MEMRA_OK, "%s", e.msg);
        CUfunction ff = kernel(Lf.key), fd[2];
        for (int i = 0; i < 2; i++) {
            memra_mmvq_args ad = {.a = dptr(dq), .n_in = F, .b = B, .n_w = 1};
            ad.out[0] = (memra_mmvq_out){.w = dptr(dw[2 + i]),
                                         .y = dptr(dy),
                                         .qtype = qt[2 + i],
                                         .n_out = D,
                                         .row_bytes = rb[2 + i],
                                         .mode = MEMRA_MMVQ_ADD};
            ck_assert_msg(memra_mmvq_prepare(&ad, G.sm, 0, 0, &Ld[i], &e) == MEMRA_OK, "%s", e.msg);
            fd[i] = kernel(Ld[i].key);
        }
        CUgraph gr;
        CUgraphExec ge;
        GR_OK(ga.begin(st, CU_STREAM_CAPTURE_MODE_RELAXED));
        CU_OK(cuMemcpyDtoDAsync(dy, dinit, xb, st));
        for (int s = 0; s < CHAIN_STEPS; s++) {
            pdl_quantize(&ga, st, fq, dx + (size_t)s * 16 * D * 4, da, D, B);
            void *fp[] = {&Lf.params};
            pdl_launch(&ga, st, ff, Lf.grid, Lf.threads, Lf.smem, fp);
            memra_mmvq_launch L = Ld[s & 1];
            L.params.out[0].y = dptr(dy + (size_t)s * 16 * D * 4);
            void *dp[] = {&L.params};
            pdl_launch(&ga, st, fd[s & 1], L.grid, L.threads, L.smem, dp);
            launches += 3;
        }
        ge = capture_end(&ga, st, &gr);
        for (int rep = 0; rep < CHAIN_REPLAYS; rep++) {
            GR_OK(ga.launch(ge, st));
            CU_OK(cuStreamSynchronize(st));
            for (int s = 0; s < CHAIN_STEPS; s++) {
                CU_OK(cuMemcpyDtoH(got, dy + (size_t)s * 16 * D * 4, (size_t)B * D * 4));
                const float *ws = want + (size_t)s * 16 * D;
                for (int k = 0; k < B * D; k++) {
                    pairs++;
                    if (memcmp(&got[k], &ws[k], 4) != 0 && bad++ < 6)
                        printf("  FAIL ffn chain B=%d replay %d step %d row %d out %d: gpu %.9g "
                               "cpu %.9g\n",
                               B, rep, s, k / D, k % D, got[k], ws[k]);
                }
            }
            /* the last step's q8_1 rows of silu(g) u (dq holds them after the graph) */
            CU_OK(cuMemcpyDtoH(gotq, dq, (size_t)B * (F / 32) * sizeof *gotq));
            const memra_block_q8_1 *wq = yq + (size_t)(CHAIN_STEPS - 1) * 16 * (F / 32);
            for (int k = 0; k < B * (F / 32); k++) {
                pairs++;
                if (memcmp(&gotq[k], &wq[k], sizeof *gotq) != 0 && bad++ < 6)
                    printf("  FAIL ffn chain B=%d replay %d: q8_1 block %d of silu(g) u\n", B, rep,
                           k);
            }
        }
        GR_OK(ga.exec_destroy(ge));
        GR_OK(ga.destroy(gr));
    }
    for (int i = 0; i < 4; i++) {
        CU_OK(cuMemFree(dw[i]));
        free(w[i]);
    }
    CUdeviceptr fr[] = {dx, da, dq, dy, dinit, dg};
    for (int i = 0; i < 6; i++)
        CU_OK(cuMemFree(fr[i]));
    CU_OK(cuStreamDestroy(st));
    free(x), free(init), free(want), free(got), free(g), free(u), free(a), free(yq), free(gotq);
    printf("TABLE|mmvq FFN chain (quantize_q8_1 -> fused gate/up SwiGLU -> down, 9b, B = 1..2, "
           "%d steps x %d replays): %ld/%ld outputs bit-identical to the CPU, %ld launches, "
           "%.1f s\n",
           CHAIN_STEPS, CHAIN_REPLAYS, pairs - bad, pairs, launches, now_s() - t0);
    ck_assert_msg(bad == 0, "%ld of %ld outputs differ from the CPU", bad, pairs);
}
END_TEST

/* Without a driver or a device every test says SKIP and passes; the skip path itself must
 * not crash or leave state behind. */
/* A crash in this binary prints where (the output of a GPU run is all there is). */
static void on_crash(int sig)
{
    void *frames[48];
    const int n = backtrace(frames, 48);
    fprintf(stderr, "memra-gpu-tests: signal %d, backtrace:\n", sig);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

START_TEST(test_device_or_skip)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGSEGV, on_crash);
    signal(SIGABRT, on_crash);
    signal(SIGBUS, on_crash);
    if (!gpu_ready()) {
        printf("SKIP %s: %s\n", __func__, G.why);
        ck_assert(G.why[0] != '\0');
        return;
    }
    ck_assert_int_ge(G.sm, 90);
    ck_assert_int_eq(memra_kernel_cache_sm(G.kc), G.sm);
}
END_TEST

Suite *make_mmvq_gpu_suite(void)
{
    Suite *s = suite_create("mmvq_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 3600);
    tcase_add_test(tc, test_device_or_skip);
    tcase_add_test(tc, test_prewarm);
    tcase_add_test(tc, test_quantize_q8_1_bytes);
    tcase_add_loop_test(tc, test_mmvq_qtype, 0, N_TYPES);
    tcase_add_test(tc, test_mmvq_merged);
    tcase_add_test(tc, test_mmvq_swiglu);
    tcase_add_test(tc, test_bandwidth);
    suite_add_tcase(s, tc);
    /* the tick's kernel chains at the 9b shapes: CK_RUN_CASE=chain runs only these */
    TCase *chain = tcase_create("chain");
    tcase_set_timeout(chain, 3600);
    tcase_add_test(chain, test_mmvq_pdl_chain);
    tcase_add_test(chain, test_mmvq_ffn_chain);
    suite_add_tcase(s, chain);
    return s;
}
