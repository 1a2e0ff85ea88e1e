/*
 * test_nvrtc.c — specialization keys, the on-disk cubin cache, mmvq launch geometry, and the
 * CI gate that every NVRTC specialization compiles: every mmvq qtype x B = 1..16 for sm_90,
 * merged multi-weight keys, and the q8_1 quantizer. No GPU is needed (NVRTC runs on the
 * CPU); the compiles run on two threads (the CI machine has two cores) into a fresh cache
 * directory, so they really compile, and a second pass must then come entirely from the cache
 * with identical bytes.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qtype.h"
#include "quant.h"
#include "runtime/nvrtc.h"
#include "test_util.h"

/* ------------------------------------------ keys ------------------------------------------ */

START_TEST(test_key_canonical)
{
    memra_kernel_spec s;
    memra_err e;
    char buf[MEMRA_KERNEL_KEY_MAX];
    memra_err_clear(&e);
    ck_assert_int_eq(memra_kernel_spec_parse("mmvq:qt=Q4_k:b=8", 90, &s, &e), MEMRA_OK);
    ck_assert_int_eq(s.tpl, MEMRA_TPL_MMVQ);
    ck_assert_int_eq(s.b, 8);
    ck_assert_int_eq(s.n_qt, 1);
    ck_assert_int_eq(s.qt[0], MEMRA_QT_Q4_K);
    ck_assert_int_eq(memra_kernel_spec_key(&s, buf, sizeof buf, &e), MEMRA_OK);
    ck_assert_str_eq(buf, "mmvq:qt=q4_K:b=8:sm=90");
    ck_assert_str_eq(memra_kernel_spec_entry(&s), "memra_mmvq");

    ck_assert_int_eq(memra_kernel_spec_parse("mmvq:qt=q4_K+q4_K+q6_K:b=16:sm=90", 0, &s, &e),
                     MEMRA_OK);
    ck_assert_int_eq(s.n_qt, 3);
    ck_assert_int_eq(s.qt[2], MEMRA_QT_Q6_K);
    ck_assert_int_eq(memra_kernel_spec_key(&s, buf, sizeof buf, &e), MEMRA_OK);
    ck_assert_str_eq(buf, "mmvq:qt=q4_K+q4_K+q6_K:b=16:sm=90");
    /* the smem of a merged launch is that of its largest slot (Q6_K: 240-byte slots) */
    ck_assert_uint_eq(memra_kernel_spec_smem(&s), MEMRA_MMVQ_SMEM(240));
    /* B = 2 direct-type specializations hold both paths: the larger of the two */
    ck_assert_int_eq(memra_kernel_spec_parse("mmvq:qt=q4_K+q6_K:b=2:sm=90", 0, &s, &e), MEMRA_OK);
    ck_assert_uint_eq(memra_kernel_spec_smem(&s),
                      MEMRA_MMVQ_DIRECT_SMEM(32768, 1, 2) + MEMRA_MMVQ_SWIGLU_SMEM(2));
    ck_assert_uint_le(memra_kernel_spec_smem(&s), 227 * 1024);
    ck_assert_int_eq(memra_kernel_spec_parse("mmvq:qt=q4_K:b=3:sm=90", 0, &s, &e), MEMRA_OK);
    ck_assert_uint_eq(memra_kernel_spec_smem(&s), MEMRA_MMVQ_SMEM(144));

    ck_assert_int_eq(memra_kernel_spec_parse("quantize_q8_1:sm=90", 90, &s, &e), MEMRA_OK);
    ck_assert_int_eq(memra_kernel_spec_key(&s, buf, sizeof buf, &e), MEMRA_OK);
    ck_assert_str_eq(buf, "quantize_q8_1:sm=90");
    ck_assert_int_eq(memra_kernel_spec_threads(&s), 256);
    ck_assert_int_eq(e.code, MEMRA_OK);
}
END_TEST

/* Every malformed key fails with a message naming the problem, and the expected code. */
START_TEST(test_key_errors)
{
    static const struct {
        const char *key;
        int sm, code;
        const char *needle;
    } cases[] = {
        {"gemm:qt=q4_K:b=1", 90, MEMRA_ERR_UNSUPPORTED, "unknown template"},
        {"mmvq:qt=q4_X:b=1", 90, MEMRA_ERR_INVALID_ARG, "unknown qtype"},
        {"mmvq:qt=q2_K:b=1", 90, MEMRA_ERR_UNSUPPORTED, "no q2_K kernel"},
        {"mmvq:qt=q4_K:b=0", 90, MEMRA_ERR_INVALID_ARG, "bad value"},
        {"mmvq:qt=q4_K:b=17", 90, MEMRA_ERR_INVALID_ARG, "bad value"},
        {"mmvq:qt=q4_K:b=1x", 90, MEMRA_ERR_INVALID_ARG, "bad value"},
        {"mmvq:qt=q4_K", 90, MEMRA_ERR_INVALID_ARG, "needs qt= and b="},
        {"mmvq:b=2", 90, MEMRA_ERR_INVALID_ARG, "needs qt= and b="},
        {"mmvq:qt=q4_K:b=1:b=2", 90, MEMRA_ERR_INVALID_ARG, "repeated"},
        {"mmvq:qt=q4_K:b=1:sm=80", 90, MEMRA_ERR_INVALID_ARG, "is for sm_80"},
        {"mmvq:qt=q4_K:b=1", 0, MEMRA_ERR_INVALID_ARG, "names no architecture"},
        {"mmvq:qt=q4_K:b=1", 80, MEMRA_ERR_UNSUPPORTED, "sm_90 or newer"},
        {"mmvq:qt=q4_K+q4_K+q4_K+q4_K+q4_K:b=1", 90, MEMRA_ERR_INVALID_ARG, "more than 4"},
        {"mmvq:qt=q4_K++q6_K:b=1", 90, MEMRA_ERR_INVALID_ARG, "empty"},
        {"mmvq:qt=q4_K:b=1:", 90, MEMRA_ERR_INVALID_ARG, "has no '='"},
        {"mmvq:qt=q4_K:b=1:zz=3", 90, MEMRA_ERR_INVALID_ARG, "unknown field"},
        {"quantize_q8_1:b=2", 90, MEMRA_ERR_INVALID_ARG, "unknown field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memra_kernel_spec s;
        memra_err e;
        memra_err_clear(&e);
        const int rc = memra_kernel_spec_parse(cases[i].key, cases[i].sm, &s, &e);
        ck_assert_msg(rc == cases[i].code, "%s: rc %d, want %d (%s)", cases[i].key, rc,
                      cases[i].code, e.msg);
        ck_assert_msg(strstr(e.msg, cases[i].needle), "%s: message '%s' lacks '%s'",
                      cases[i].key, e.msg, cases[i].needle);
    }
    char longkey[300];
    memset(longkey, 'q', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    memra_kernel_spec s;
    ck_assert_int_eq(memra_kernel_spec_parse(longkey, 90, &s, NULL), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_kernel_spec_parse(NULL, 90, &s, NULL), MEMRA_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_source_text)
{
    memra_kernel_spec s;
    char src[1024];
    ck_assert_int_eq(memra_kernel_spec_parse("mmvq:qt=q8_0+nvfp4:b=3", 90, &s, NULL), MEMRA_OK);
    ck_assert_int_eq(memra_nvrtc_source(&s, src, sizeof src, NULL), MEMRA_OK);
    ck_assert_ptr_nonnull(strstr(src, "mmvq_main<3, 8, 40, -1, -1>(p)"));
    ck_assert_ptr_nonnull(strstr(src, "memra_mmvq("));
    ck_assert_int_eq(memra_nvrtc_source(&s, src, 10, NULL), MEMRA_ERR_INTERNAL);
    /* the embedded sources are the four template files and kernels/exact_math.h */
    ck_assert_int_eq(memra_nvrtc_n_files, 5);
    ck_assert_str_eq(memra_nvrtc_files[4].name, "exact_math.h");
    for (int i = 0; i < memra_nvrtc_n_files; i++)
        ck_assert_msg(strlen(memra_nvrtc_files[i].text) > 500, "%s is short",
                      memra_nvrtc_files[i].name);
}
END_TEST

/* ------------------------------------ launch geometry ------------------------------------- */

static memra_mmvq_args mmvq_args(int qt, int n_in, int n_out, int b)
{
    static _Alignas(16) char wbuf[64];
    static float ybuf[16];
    memra_mmvq_args a = {.a = wbuf, .n_in = n_in, .b = b, .n_w = 1};
    const int elems = memra_mmvq_dot_elems(qt);
    const memra_qtype_info *qi = memra_qtype_get((uint32_t)qt);
    const uint64_t dot_bytes = (uint64_t)qi->block_bytes * (uint64_t)elems / qi->block_elems;
    a.out[0] = (memra_mmvq_out){.w = wbuf, .y = ybuf, .qtype = qt, .n_out = n_out,
                                .row_bytes = (uint64_t)(n_in / elems) * dot_bytes};
    return a;
}

/* The geometry table the kernels are built from (mmvq_params.h) agrees with runtime/quant.c's
 * dot blocks for every type mmvq specializes, and every type quant.c can dot has a kernel. */
START_TEST(test_geometry_matches_quant)
{
    int n = 0;
    for (int qt = 0; qt < MEMRA_QT_COUNT; qt++) {
        if (!memra_qtype_get((uint32_t)qt))
            continue;
        const int dots = memra_quant_can_dot((memra_qtype)qt);
        ck_assert_msg(memra_mmvq_supports(qt) == dots, "qtype %d: mmvq %d, quant dot %d", qt,
                      memra_mmvq_supports(qt), dots);
        if (!dots)
            continue;
        n++;
        ck_assert_int_eq(memra_mmvq_dot_elems(qt), memra_quant_dot_block_elems((memra_qtype)qt));
        /* kernels/mmvq.h's step (the canonical order's unit) is the template's stage step */
        int step = 0;
#define STEP_CASE(id, name, de, db, sb)                                                            \
    if (qt == id)                                                                                  \
        step = sb;
        MEMRA_MMVQ_TYPES(STEP_CASE)
#undef STEP_CASE
        ck_assert_int_eq(memra_mmvq_step_blocks(qt), step);
        /* the planner's view of the direct path is the template's */
        ck_assert_int_eq(memra_mmvq_direct(qt), MEMRA_MMVQ_DIRECT(qt));
        ck_assert_int_eq(memra_mmvq_direct_max_b(), MEMRA_MMVQ_DIRECT_MAX_B);
        memra_mmvq_args a = mmvq_args(qt, 256, 1, 1);
        ck_assert_uint_eq(a.out[0].row_bytes,
                          memra_quant_row_bytes((memra_qtype)qt, 256));
        memra_mmvq_launch l;
        ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, NULL), MEMRA_OK);
    }
    ck_assert_int_eq(n, 15);
}
END_TEST

START_TEST(test_mmvq_prepare)
{
    memra_mmvq_launch l;
    memra_err e;
    memra_err_clear(&e);
    memra_mmvq_args a = mmvq_args(MEMRA_QT_Q4_K, 4096, 4097, 8);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_str_eq(l.key, "mmvq:qt=q4_K:b=8:sm=90");
    /* 4097 outputs = 257 tiles of 16; n_in 4096 gives the canonical P = 8 parts, one warp
     * each: 257 CUDA blocks of 8 warps */
    ck_assert_int_eq(l.params.ksplit, 8);
    ck_assert_int_eq(l.params.ksplit, memra_mmvq_parts(4096));
    ck_assert_uint_eq(l.grid, 257);
    ck_assert_uint_eq(l.threads, 256);
    ck_assert_uint_eq(l.smem, MEMRA_MMVQ_SMEM(144));
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 1, &l, &e), MEMRA_OK);
    ck_assert_uint_eq(l.grid, 33); /* ceil(257 / 8) */

    /* ksplit depends on n_in only, never on b, n_out or the other weights */
    for (int b = 1; b <= 16; b++) {
        a.b = b;
        ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
        ck_assert_int_eq(l.params.ksplit, 8);
    }
    memra_mmvq_args few = mmvq_args(MEMRA_QT_Q4_K, 4096, 16, 1); /* one tile: still 8 parts */
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.ksplit, 8);
    few = mmvq_args(MEMRA_QT_Q4_K, 256, 16, 1); /* one 256-step: no split */
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.ksplit, 1);
    /* B = 1 with q4_K only is the direct path: its shared memory is the q8_1 row (codes, fp32
     * d, int32 sums: 1.25 n_in bytes) and the warps' rings; warps own whole rows, as few per
     * warp as one wave of the CUDA blocks an SM holds allows */
    few = mmvq_args(MEMRA_QT_Q4_K, 12288, 4096, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_uint_eq(l.smem, 12288 / 256 * 288 + 12288 / 32 * 8 + MEMRA_MMVQ_FLAT_RING(0));
    /* 3 CUDA blocks per SM: 3 168 warps hold 4 096 rows at 2 per warp: 2 048 warps */
    ck_assert_int_eq(l.params.rpw, 2);
    ck_assert_uint_eq(l.grid, 256);
    /* 248 320 rows (an lm_head): one wave would be 79 per warp (3 144 warps); B = 1 caps it at
     * MEMRA_MMVQ_DIRECT_MAX_RPW_B1 = 16: 15 520 warps, 1 940 CUDA blocks; as q6_K the same (2
     * CUDA blocks per SM: one wave would be 118). Below the cap nothing changes: 50 688 rows is
     * exactly 16 per warp in one wave of q4_K's 3 168 warps, one row more is still 16 (was 17),
     * 47 520 is 15. B = 2 keeps one wave (unmeasured there). */
    static const struct {
        int qt, rows, b, rpw, grid; /* grid 0: not checked */
    } cap[] = {{MEMRA_QT_Q4_K, 248320, 1, 16, 1940}, {MEMRA_QT_Q6_K, 248320, 1, 16, 1940},
               {MEMRA_QT_Q4_K, 50688, 1, 16, 396},   {MEMRA_QT_Q4_K, 50689, 1, 16, 0},
               {MEMRA_QT_Q4_K, 47520, 1, 15, 396},   {MEMRA_QT_Q4_K, 248320, 2, 79, 0}};
    for (size_t i = 0; i < sizeof cap / sizeof cap[0]; i++) {
        few = mmvq_args(cap[i].qt, 4096, cap[i].rows, cap[i].b);
        ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
        ck_assert_msg(l.params.rpw == cap[i].rpw &&
                          (!cap[i].grid || l.grid == (unsigned)cap[i].grid),
                      "case %zu: rpw %d grid %u", i, l.params.rpw, l.grid);
    }
    few = mmvq_args(MEMRA_QT_Q4_K, 4096, 248320, 1);
    /* one SM: 24 warps, capped at 16 rows each; a forced split keeps the rows */
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 1, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 16);
    ck_assert_int_eq(memra_mmvq_force_rpw(&l, 1, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 1);
    ck_assert_uint_eq(l.grid, 248320 / 8);
    ck_assert_int_eq(memra_mmvq_force_rpw(&l, 0, &e), MEMRA_ERR_INVALID_ARG);
    memra_err_clear(&e);
    /* the largest n_in: one CUDA block per SM */
    few = mmvq_args(MEMRA_QT_Q4_K, MEMRA_MMVQ_DIRECT_MAX_IN(1), 16, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 1);
    ck_assert_uint_le(l.smem, 227 * 1024);
    few = mmvq_args(MEMRA_QT_Q4_K, 256, 16, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_uint_eq(l.smem, MEMRA_MMVQ_DIRECT_SMEM(256, 0, 1));
    /* q6_K is direct too, with the larger slot (210-byte blocks, unaligned row starts) */
    few = mmvq_args(MEMRA_QT_Q6_K, 1024, 4096, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.q6k, 1);
    ck_assert_uint_eq(l.smem, MEMRA_MMVQ_DIRECT_SMEM(1024, 1, 1));
    ck_assert_int_eq(memra_mmvq_force_rpw(&l, 3, &e), MEMRA_OK);
    /* B = 2 is direct too, with 2 staged q8_1 rows: 2 rows of 12288 and the q4_K rings are
     * 88 KB, two CUDA blocks per SM, so 4 096 rows take 2 per warp */
    few = mmvq_args(MEMRA_QT_Q4_K, 12288, 4096, 2);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_uint_eq(l.smem, 2 * (12288 / 256 * 288 + 12288 / 32 * 8) + MEMRA_MMVQ_FLAT_RING(0));
    ck_assert_int_eq(l.params.rpw, 2);
    ck_assert_uint_eq(l.grid, 256);
    /* ... up to MEMRA_MMVQ_DIRECT_MAX_IN(b); a longer row stages (rpw 0), and B = 3 always */
    few = mmvq_args(MEMRA_QT_Q4_K, MEMRA_MMVQ_DIRECT_MAX_IN(2), 16, 2);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 1);
    ck_assert_uint_le(l.smem, 227 * 1024);
    few = mmvq_args(MEMRA_QT_Q4_K, MEMRA_MMVQ_DIRECT_MAX_IN(2) + 256, 16, 2);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 0);
    ck_assert_uint_eq(l.smem, MEMRA_MMVQ_SMEM(144));
    ck_assert_int_eq(memra_mmvq_force_rpw(&l, 1, &e), MEMRA_ERR_INVALID_ARG); /* not direct */
    ck_assert_ptr_nonnull(strstr(e.msg, "not a direct launch"));
    memra_err_clear(&e);
    few = mmvq_args(MEMRA_QT_Q4_K, 256, 16, 3);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(l.params.rpw, 0);
    ck_assert_uint_eq(l.smem, MEMRA_MMVQ_SMEM(144));
    few = mmvq_args(MEMRA_QT_Q4_K, MEMRA_MMVQ_DIRECT_MAX_IN(1) + 256, 16, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&few, 90, 132, 0, &l, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "B = 1 path"));
    memra_err_clear(&e);
    /* the fused SwiGLU epilogue: a direct {gate, up} launch of N rows each, N % 32 == 0,
     * becomes N / 32 CUDA blocks of 8 rows per warp (gate rows in warps 0..3, up in 4..7) */
    static char yq[64];
    a = mmvq_args(MEMRA_QT_Q4_K, 4096, 12288, 1);
    a.n_w = 2;
    a.out[1] = a.out[0];
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    const unsigned unfused_smem = l.smem;
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_OK);
    ck_assert_ptr_eq(l.params.swiglu_q, yq);
    ck_assert_int_eq(l.params.rpw, MEMRA_MMVQ_SWIGLU_RPW);
    ck_assert_uint_eq(l.grid, 12288 / 32);
    ck_assert_uint_eq(l.smem, unfused_smem + MEMRA_MMVQ_SWIGLU_SMEM(1));
    a.b = 2; /* B = 2 direct too */
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_OK);
    ck_assert_uint_le(l.smem, 227 * 1024);
    a.b = 3; /* staged: refused, the launch unchanged */
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_null(l.params.swiglu_q);
    memra_err_clear(&e);
    a.b = 1;
    a.out[1].n_out = 12256; /* unequal rows */
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_ERR_UNSUPPORTED);
    memra_err_clear(&e);
    a.out[0].n_out = a.out[1].n_out = 12248; /* not a multiple of 32 */
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_ERR_UNSUPPORTED);
    memra_err_clear(&e);
    a.out[0].n_out = a.out[1].n_out = 12288;
    a.out[1].mode = MEMRA_MMVQ_ADD; /* adds into its output */
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_OK);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, yq, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "adds or scales"));
    memra_err_clear(&e);
    ck_assert_int_eq(memra_mmvq_fuse_swiglu(&l, NULL, &e), MEMRA_ERR_INVALID_ARG);
    memra_err_clear(&e);

    static const int parts[][2] = {{32, 1},   {511, 1},   {512, 1},   {1023, 1}, {1024, 2},
                                   {2048, 4}, {3072, 4},  {4096, 8},  {12288, 8}, {14336, 8}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        ck_assert_int_eq(memra_mmvq_parts(parts[i][0]), parts[i][1]);

    a = mmvq_args(MEMRA_QT_Q4_K, 4096, 16, 1);
    a.out[0].row_bytes += 1;
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "row_bytes"));
    memra_err_clear(&e);
    a = mmvq_args(MEMRA_QT_Q4_K, 4000, 16, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "not a multiple"));
    memra_err_clear(&e);
    a = mmvq_args(MEMRA_QT_Q4_0, 64, 16, 1);
    a.out[0].w = (const char *)a.out[0].w + 2;
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "aligned"));
    memra_err_clear(&e);
    a = mmvq_args(MEMRA_QT_Q4_0, 64, 16, 17);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_ERR_INVALID_ARG);
    a = mmvq_args(MEMRA_QT_Q4_0, 64, 16, 1);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 3, &l, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 16, &l, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 8, &l, &e), MEMRA_OK);
    a.out[0].qtype = MEMRA_QT_Q2_K;
    ck_assert_int_eq(memra_mmvq_prepare(&a, 90, 132, 0, &l, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_int_eq(memra_mmvq_prepare(NULL, 90, 132, 0, &l, &e), MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ------------------------------------- compile all ---------------------------------------- */

#define MAX_KEYS 320

typedef struct compile_job {
    const char *const *keys;
    int n;
    atomic_int next;
    memra_cubin *out; /* [n] */
    int rc[MAX_KEYS];
    char msg[MAX_KEYS][160];
} compile_job;

static void *compile_worker(void *arg)
{
    compile_job *j = arg;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        memra_err e;
        memra_err_clear(&e);
        j->rc[i] = memra_nvrtc_compile(j->keys[i], 90, &j->out[i], &e);
        snprintf(j->msg[i], sizeof j->msg[i], "%.150s", e.msg);
    }
    return NULL;
}

/* Compiles keys on two threads (the CI machine's cores); returns the wall time. */
static double compile_all(compile_job *j)
{
    struct timespec t0, t1;
    pthread_t th[2];
    atomic_store(&j->next, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, compile_worker, j), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < j->n; i++)
        ck_assert_msg(j->rc[i] == MEMRA_OK, "%s: rc %d: %s", j->keys[i], j->rc[i], j->msg[i]);
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Under ASan, NVRTC's own allocations go through ASan's allocator and a compile is ~5x
 * slower (795 s of CPU for the full set, measured), so the sanitized build compiles the
 * tier extremes B = 1 and 16 of every qtype; scripts/test.sh also runs the plain build's
 * test_nvrtc, which compiles every B = 1..16. */
#if defined(__SANITIZE_ADDRESS__)
#define NVRTC_TEST_B_STEP 15
#else
#define NVRTC_TEST_B_STEP 1
#endif
#define NVRTC_TEST_N_B (15 / NVRTC_TEST_B_STEP + 1)

static int build_keys(char (*buf)[MEMRA_KERNEL_KEY_MAX], const char **keys)
{
    static const char *const qts[] = {"f32",  "f16",   "bf16",   "q4_0", "q4_1",
                                      "q5_0", "q5_1",  "q8_0",   "iq4_nl", "mxfp4",
                                      "nvfp4", "q4_K", "q5_K",   "q6_K", "iq4_xs"};
    static const char *const merged[] = {"mmvq:qt=q4_K+q4_K+q6_K:b=1", "mmvq:qt=q4_K+q6_K:b=16",
                                         "mmvq:qt=q8_0+f32+bf16+nvfp4:b=9"};
    int n = 0;
    for (size_t q = 0; q < sizeof qts / sizeof qts[0]; q++)
        for (int b = 1; b <= 16; b += NVRTC_TEST_B_STEP)
            snprintf(buf[n++], MEMRA_KERNEL_KEY_MAX, "mmvq:qt=%s:b=%d:sm=90", qts[q], b);
    for (size_t i = 0; i < sizeof merged / sizeof merged[0]; i++)
        snprintf(buf[n++], MEMRA_KERNEL_KEY_MAX, "%s", merged[i]);
    snprintf(buf[n++], MEMRA_KERNEL_KEY_MAX, "quantize_q8_1:sm=90");
    for (int i = 0; i < n; i++)
        keys[i] = buf[i];
    return n;
}

static void rm_cache_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Every supported qtype x B = 1..16 (every mmvq specialization a plan can name), merged
 * launches and the quantizer compile for sm_90; a second pass reads them all back from the
 * cache with identical bytes; a corrupted cache file is detected and recompiled. */
START_TEST(test_compile_every_specialization)
{
    static char buf[MAX_KEYS][MEMRA_KERNEL_KEY_MAX];
    static const char *keys[MAX_KEYS];
    static memra_cubin first[MAX_KEYS], second[MAX_KEYS];
    static compile_job job;
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "-cubins");
    ck_assert_int_eq(memra_nvrtc_set_cache_dir(dir, NULL), MEMRA_OK);
    ck_assert_str_eq(memra_nvrtc_cache_dir(), dir);
    const int n = build_keys(buf, keys);
    ck_assert_int_eq(n, 15 * NVRTC_TEST_N_B + 4);

    memra_nvrtc_stats s0, s1, s2, s3;
    memra_nvrtc_stats_get(&s0);
    job.keys = keys;
    job.n = n;
    job.out = first;
    const double t_compile = compile_all(&job);
    memra_nvrtc_stats_get(&s1);
    ck_assert_int_eq(s1.compiles - s0.compiles, n);
    ck_assert_int_eq(s1.cache_writes - s0.cache_writes, n);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(first[i].size > 1000 && !first[i].from_cache, "%s", keys[i]);
        ck_assert_msg(memcmp(first[i].data, "\177ELF", 4) == 0, "%s: not an ELF cubin", keys[i]);
    }

    job.out = second;
    const double t_cached = compile_all(&job);
    memra_nvrtc_stats_get(&s2);
    ck_assert_int_eq(s2.compiles, s1.compiles);
    ck_assert_int_eq(s2.cache_hits - s1.cache_hits, n);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(second[i].from_cache && second[i].size == first[i].size &&
                          memcmp(second[i].data, first[i].data, first[i].size) == 0,
                      "%s: cached cubin differs", keys[i]);
        memra_cubin_free(&second[i]);
    }

    /* Flip a byte in the payload of one cache file: it must be rejected and rebuilt. */
    char cmd[700];
    snprintf(cmd, sizeof cmd,
             "f=$(ls '%s'/*.cubin | head -1); printf 'X' | dd of=\"$f\" bs=1 seek=2000 "
             "conv=notrunc status=none",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    job.out = second;
    compile_all(&job);
    memra_nvrtc_stats_get(&s3);
    ck_assert_int_eq(s3.cache_bad - s2.cache_bad, 1);
    ck_assert_int_eq(s3.compiles - s2.compiles, 1);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(second[i].size == first[i].size &&
                          memcmp(second[i].data, first[i].data, first[i].size) == 0,
                      "%s: recompiled cubin differs", keys[i]);
        memra_cubin_free(&second[i]);
        memra_cubin_free(&first[i]);
    }
    printf("nvrtc: %d specializations compiled in %.1f s on 2 threads, read back from the "
           "cache in %.2f s\n",
           n, t_compile, t_cached);
    rm_cache_dir(dir);
    memra_nvrtc_set_cache_dir(NULL, NULL);
}
END_TEST

START_TEST(test_compile_errors)
{
    memra_cubin c;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_nvrtc_set_cache_dir("", NULL), MEMRA_OK);
    ck_assert_int_eq(memra_nvrtc_compile("mmvq:qt=q2_K:b=1", 90, &c, &e), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_null(c.data);
    memra_err_clear(&e);
    ck_assert_int_eq(memra_nvrtc_compile("quantize_q8_1", 90, NULL, &e), MEMRA_ERR_INVALID_ARG);
    int major = 0, minor = -1;
    memra_nvrtc_version(&major, &minor);
    ck_assert_int_ge(major, 12);
    ck_assert_int_ge(minor, 0);
    memra_nvrtc_set_cache_dir(NULL, NULL);
}
END_TEST

static void write_file(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_ge(fputs(a, f), 0);
    ck_assert_int_ge(fputs(b, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

static const char *embedded_text(const char *name)
{
    for (int i = 0; i < memra_nvrtc_n_files; i++)
        if (strcmp(memra_nvrtc_files[i].name, name) == 0)
            return memra_nvrtc_files[i].text;
    ck_abort_msg("no embedded %s", name);
    return NULL;
}

/* One compile of key; returns its from_cache. */
static int compile_once(const char *key)
{
    memra_cubin c;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_msg(memra_nvrtc_compile(key, 90, &c, &e) == MEMRA_OK, "%s: %s", key, e.msg);
    const int hit = c.from_cache;
    memra_cubin_free(&c);
    return hit;
}

/* MEMRA_NVRTC_TEMPLATES (bench/device-ab.sh): a same-named file of the folder replaces the
 * embedded template (a broken mmvq.cuh breaks mmvq compiles only), and the cache key covers
 * the texts in use: a variant misses the cache, switching back hits the embedded entry. */
START_TEST(test_template_override)
{
    char dir[512], cache[512], path[600];
    tu_tmp_path(dir, sizeof dir, "-tpl");
    tu_tmp_path(cache, sizeof cache, "-tplcache");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/mmvq.cuh", dir);
    write_file(path, "#error memra-override-marker\n", "");
    ck_assert_int_eq(memra_nvrtc_set_cache_dir("", NULL), MEMRA_OK);
    ck_assert_int_eq(setenv("MEMRA_NVRTC_TEMPLATES", dir, 1), 0);
    memra_cubin c;
    memra_err e;
    memra_err_clear(&e);
    ck_assert_int_eq(memra_nvrtc_compile("mmvq:qt=q4_K:b=1", 90, &c, &e), MEMRA_ERR_CUDA);
    ck_assert_msg(strstr(e.msg, "memra-override-marker"), "%s", e.msg);
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 0); /* its template is embedded */

    ck_assert_int_eq(memra_nvrtc_set_cache_dir(cache, NULL), MEMRA_OK);
    ck_assert_int_eq(unsetenv("MEMRA_NVRTC_TEMPLATES"), 0);
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 0);
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 1);
    snprintf(path, sizeof path, "%s/quantize_q8_1.cuh", dir);
    write_file(path, embedded_text("quantize_q8_1.cuh"), "\n/* a variant */\n");
    ck_assert_int_eq(setenv("MEMRA_NVRTC_TEMPLATES", dir, 1), 0);
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 0); /* other texts: other key */
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 1);
    ck_assert_int_eq(unsetenv("MEMRA_NVRTC_TEMPLATES"), 0);
    ck_assert_int_eq(compile_once("quantize_q8_1:sm=90"), 1); /* the embedded entry again */
    memra_nvrtc_set_cache_dir(NULL, NULL);
    rm_cache_dir(cache);
    rm_cache_dir(dir);
}
END_TEST

Suite *make_nvrtc_suite(void)
{
    Suite *s = suite_create("nvrtc");
    TCase *tc = tcase_create("keys");
    tcase_add_test(tc, test_key_canonical);
    tcase_add_test(tc, test_key_errors);
    tcase_add_test(tc, test_source_text);
    tcase_add_test(tc, test_geometry_matches_quant);
    tcase_add_test(tc, test_mmvq_prepare);
    tcase_add_test(tc, test_compile_errors);
    suite_add_tcase(s, tc);
    TCase *tcc = tcase_create("compile");
    /* 244 NVRTC compiles on 2 threads: about 150 s of CPU (250 s under ASan, whose malloc
     * NVRTC then uses), so 1.5 to 2.5 min on two idle cores; the limit leaves room for a
     * loaded machine (a 12-deep load average stretched it past 15 min here). */
    tcase_set_timeout(tcc, 2400);
    tcase_add_test(tcc, test_compile_every_specialization);
    tcase_add_test(tcc, test_template_override); /* 5 small compiles */
    suite_add_tcase(s, tcc);
    return s;
}
