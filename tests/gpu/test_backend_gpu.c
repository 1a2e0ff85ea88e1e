/*
 * test_backend_gpu.c — the CUDA backend's gates (GPU binary memra-gpu-backend-tests, run
 * with CK_FORK=no; every test says SKIP with the reason where there is no CUDA device).
 *
 * On the forged `tiny` model (Q4_K_M mix), plans made in-process (tiers 1,2,4,8,12,16):
 *   (2) isolation: 16 sequences with different prompts, lengths (128..256 tokens) and
 *       sampling params run with continuous batching at every width 1..16 (tiers 1, 2, 4,
 *       8, 12, 16, padded in between and as sequences finish): each row's logits are
 *       memcmp-equal to the same sequence alone at tier 1, and every sampled token equal;
 *   (3) graph replay == eager launches (memcmp);
 *   (4) two pipeline stages == one stage (memcmp), graph and eager;
 *   (5) agreement with the CPU backend: logits memcmp-equal and identical greedy tokens for
 *       256 steps (the exactness contract: every op is CPU-exact);
 *   failure handling: a launch-time CUDA error names its launch and fails only its tick's
 *   sessions; a sticky fault poisons the engine, is reported as such, and a new engine works
 *   after close; bad input is refused without side effects.
 * On the forged `tiny-moe` model (case "moe"): gates 2 and 5 on the MoE ops (short runs).
 * With MEMRA_GPU_TEST_MODEL=<gguf> (scripts/device-gates.sh forges the 0.8b preset), gates
 * 2-5 also run on that model (shorter: its rows are 248320 logits; the CPU side is the
 * reference model, which the CPU backend equals bit for bit, with threads), and a table of
 * tick times per tier (graph vs eager) is printed.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <xxhash.h>

#include "attn_decode.h"
#include "backend_cpu.h"
#include "backend_cuda.h"
#include "cuda_util.h"
#include "forge.h"
#include "memra.h"
#include "planner.h"
#include "refmodel.h"
#include "test_util.h"

/* ====================================== fixture ====================================== */

typedef struct model_fix {
    char path[512];   /* GGUF */
    char plans1[512]; /* one stage, tiers 1,2,4,8,12,16 */
    char plans2[512]; /* two stages, same tiers */
    int forged;       /* path is ours to remove */
    int ok;
} model_fix;

static model_fix g_tiny, g_big, g_moe;
static int g_gpu = -1; /* -1 unknown, 0 none, 1 present */
static char g_gpu_why[512];

static int gpu_ok(void)
{
    if (g_gpu < 0) {
        memra_err err;
        memra_err_clear(&err);
        int sm = 0;
        g_gpu = memra_cu_device_open(0, &sm, &err) == MEMRA_OK;
        if (g_gpu)
            memra_cu_device_close(0);
        else
            snprintf(g_gpu_why, sizeof g_gpu_why, "%s", err.msg);
    }
    return g_gpu;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!gpu_ok()) {                                                                           \
            fprintf(stderr, "SKIP %s: no CUDA device (%s)\n", __func__, g_gpu_why);                \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static int plan_dir(const char *model, const char *dir, uint32_t n_stages)
{
    static const uint32_t tiers[] = {1, 2, 4, 8, 12, 16};
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = model;
    po.out_dir = dir;
    po.n_stages = n_stages;
    po.n_tiers = 6;
    memcpy(po.tiers, tiers, sizeof tiers);
    memra_planner_result *res = NULL;
    memra_err err;
    memra_err_clear(&err);
    int rc = memra_planner_run(&po, &res, &err);
    if (rc != MEMRA_OK)
        fprintf(stderr, "planning %s failed: %s\n", model, err.msg);
    memra_planner_result_free(res);
    return rc;
}

/* path == NULL: forge the tiny preset; else plan the given model. */
/* path: an existing model; NULL: forge `preset` (seed 7) into a temporary file. */
static void fix_setup(model_fix *f, const char *path, const char *preset)
{
    memset(f, 0, sizeof *f);
    if (!gpu_ok())
        return; /* nothing to run: do not spend CI time forging */
    tu_tmp_path(f->plans1, sizeof f->plans1, "-plans1");
    tu_tmp_path(f->plans2, sizeof f->plans2, "-plans2");
    if (path) {
        snprintf(f->path, sizeof f->path, "%s", path);
    } else {
        tu_tmp_path(f->path, sizeof f->path, ".gguf");
        memra_forge_opts o;
        memra_forge_opts_init(&o);
        o.shape = memra_forge_preset(preset);
        o.seed = 7;
        memra_err err;
        memra_err_clear(&err);
        f->forged = 1;
        if (memra_forge_write(&o, f->path, &err) != MEMRA_OK) {
            fprintf(stderr, "forge %s failed: %s\n", preset, err.msg);
            return;
        }
    }
    if (plan_dir(f->path, f->plans1, 1) != MEMRA_OK || plan_dir(f->path, f->plans2, 2) != MEMRA_OK)
        return;
    f->ok = 1;
}

static void fix_teardown(model_fix *f)
{
    if (f->forged)
        unlink(f->path);
    if (f->plans1[0])
        memra_planner_remove_dir(f->plans1);
    if (f->plans2[0])
        memra_planner_remove_dir(f->plans2);
}

static void tiny_setup(void)
{
    fix_setup(&g_tiny, NULL, "tiny");
}
static void tiny_teardown(void)
{
    fix_teardown(&g_tiny);
}
static void big_setup(void)
{
    const char *p = getenv("MEMRA_GPU_TEST_MODEL");
    if (p && *p)
        fix_setup(&g_big, p, NULL);
    else
        memset(&g_big, 0, sizeof g_big);
}
static void big_teardown(void)
{
    fix_teardown(&g_big);
}

/* The forged tiny-moe preset (qwen35moe: 8 experts, top-2, a shared expert; Q4_K_M mix). */
static void moe_setup(void)
{
    fix_setup(&g_moe, NULL, "tiny-moe");
}
static void moe_teardown(void)
{
    fix_teardown(&g_moe);
}

#define REQUIRE_BIG()                                                                              \
    do {                                                                                           \
        REQUIRE_GPU();                                                                             \
        if (!getenv("MEMRA_GPU_TEST_MODEL")) {                                                     \
            fprintf(stderr, "SKIP %s: MEMRA_GPU_TEST_MODEL is not set\n", __func__);               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* An open CUDA backend on a fixture's plan set. */
typedef struct gpu_ctx {
    memra_gguf *g;
    memra_cuda_backend *be;
    uint32_t n_vocab;
} gpu_ctx;

/* The scheduling options (never the bytes) the engines gopen opens take: the backend's
 * defaults (memra_cuda_opts_init) while `on` is 0; sched_gate sets `on` and these options
 * around its engines (its reference with each of them off: attention's plain kernel with one
 * CTA per split at every tier, no gdn_step prefetch, no side branch). The options not here
 * (pdl, fuse unless fuse_always, norm_release_tiers, gdn_split) keep their defaults in every
 * engine, the reference included: it runs tier 1 only, outside the default norm-release tiers,
 * and pdl and fuse are on in the engines it is compared with too. */
static struct {
    int on;
    int attn_split_ctas, attn_prefetch, gdn_prefetch;
    uint32_t l2_side_mib;
    int l2_side_spread;
    int fuse_always; /* opts.fuse = 2: the SwiGLU fold on tiny too (folded launches skipped) */
} g_sched;

static void gopen(gpu_ctx *c, const model_fix *f, const char *plans, int graphs, uint32_t n_ctx)
{
    ck_assert_msg(f->ok, "fixture (forge + planner) failed; see stderr");
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_gguf_open(f->path, &c->g, &err) == MEMRA_OK, "%s", err.msg);
    memra_cuda_opts o;
    memra_cuda_opts_init(&o);
    o.n_slots = 16;
    o.n_ctx = n_ctx;
    o.graphs = graphs;
    if (g_sched.on) {
        o.attn_split_ctas = g_sched.attn_split_ctas;
        o.attn_auto_tiers = 0; /* attn_split_ctas alone: 0 is one CTA per split everywhere */
        o.attn_prefetch = g_sched.attn_prefetch;
        o.gdn_prefetch = g_sched.gdn_prefetch;
        o.l2_side_mib = g_sched.l2_side_mib;
        o.l2_side_spread = g_sched.l2_side_spread;
    }
    if (g_sched.fuse_always)
        o.fuse = 2;
    int rc = memra_cuda_backend_open(plans, c->g, &o, &c->be, &err);
    ck_assert_msg(rc == MEMRA_OK, "open (%s): %s", memra_strerror(rc), err.msg);
    c->n_vocab = memra_cuda_backend_n_vocab(c->be);
}

static void gclose(gpu_ctx *c)
{
    memra_cuda_backend_close(c->be);
    memra_gguf_close(c->g);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* ================================= the sequence gate ================================= */

#define N_SEQ 16
#define MAX_LEN 256

/* One sequence: a prompt, then its own sampled tokens fed back. The tier-1 solo run records
 * the logits (full rows when `full`, else their XXH3 hash: a 248320-logit model would need
 * gigabytes) and sampled tokens every other run must reproduce bit for bit. */
typedef struct gate_seq {
    int n_prompt, len;
    int32_t prompt[32];
    memra_sample_params params;
    float *logits;          /* [len, n_vocab] when full */
    uint64_t hash[MAX_LEN]; /* XXH3-64 of each step's logits row */
    int32_t sampled[MAX_LEN];
} gate_seq;

typedef struct gate {
    gate_seq s[N_SEQ];
    int n;
    int full;
    uint32_t n_vocab;
    float *rows; /* [16, n_vocab] scratch */
} gate;

/* n sequences; lengths spread from max_len down to max_len/2 (every length differs), prompts
 * of 3..18 random tokens, a mix of greedy and seeded sampling with every cut-off. */
static void gate_make(gate *gt, int n, int max_len, uint32_t n_vocab, int full)
{
    tu_rng r;
    tu_rng_seed(&r, 4242);
    memset(gt, 0, sizeof *gt);
    gt->n = n;
    gt->full = full;
    gt->n_vocab = n_vocab;
    gt->rows = xcalloc((size_t)16 * n_vocab, sizeof(float));
    for (int i = 0; i < n; i++) {
        gate_seq *s = &gt->s[i];
        s->len = max_len - i * (max_len / 2) / (n > 1 ? n - 1 : 1);
        s->n_prompt = 3 + (int)(tu_rng_u64(&r) % 16);
        for (int k = 0; k < s->n_prompt; k++)
            s->prompt[k] = (int32_t)(tu_rng_u64(&r) % n_vocab);
        s->params =
            (memra_sample_params){.temperature = i % 3 == 0 ? 0.0f : 0.6f + 0.1f * (float)(i % 5),
                                  .top_k = i % 4 == 1 ? 20 : 0,
                                  .top_p = i % 4 == 2 ? 0.9f : 1.0f,
                                  .seed = 1000u + (uint64_t)i};
        if (full)
            s->logits = xcalloc((size_t)s->len * n_vocab, sizeof(float));
    }
}

static void gate_free(gate *gt)
{
    for (int i = 0; i < gt->n; i++)
        free(gt->s[i].logits);
    free(gt->rows);
}

static int32_t gate_token(const gate_seq *s, int k)
{
    return k < s->n_prompt ? s->prompt[k] : s->sampled[k - 1];
}

/* Record or compare row r's logits (in gt->rows) for sequence q at step k. */
static void gate_check_row(gate *gt, int q, int k, int r, int active, const char *what, int record)
{
    gate_seq *s = &gt->s[q];
    const float *got = gt->rows + (size_t)r * gt->n_vocab;
    const uint64_t h = XXH3_64bits(got, sizeof(float) * gt->n_vocab);
    if (record) {
        s->hash[k] = h;
        if (gt->full)
            memcpy(s->logits + (size_t)k * gt->n_vocab, got, sizeof(float) * gt->n_vocab);
        return;
    }
    if (gt->full) {
        const float *want = s->logits + (size_t)k * gt->n_vocab;
        if (memcmp(want, got, sizeof(float) * gt->n_vocab) != 0) {
            uint32_t j = 0;
            while (memcmp(&want[j], &got[j], sizeof(float)) == 0)
                j++;
            ck_abort_msg("%s: sequence %d step %d (row %d of %d) differs from the reference at "
                         "logit %u: got %.9g want %.9g",
                         what, q, k, r, active, j, (double)got[j], (double)want[j]);
        }
    }
    ck_assert_msg(h == s->hash[k],
                  "%s: sequence %d step %d (row %d of %d): logits hash %016llx, "
                  "reference %016llx",
                  what, q, k, r, active, (unsigned long long)h, (unsigned long long)s->hash[k]);
}

/* Continuous batching with rows of at most `width` (tier 0: the backend picks the smallest
 * tier >= rows): admit while rows are free, step, retire finished sequences, rotate the row
 * order every tick. Returns the number of ticks. */
static int gate_run(gpu_ctx *c, gate *gt, uint32_t width, const char *what, int record)
{
    memra_err err;
    memra_err_clear(&err);
    uint32_t sid[N_SEQ];
    int idx[N_SEQ], active = 0, next = 0, step[N_SEQ] = {0}, tick = 0;
    while (next < gt->n || active > 0) {
        while (active < (int)width && next < gt->n) {
            ck_assert_int_eq(
                memra_cuda_session_admit(c->be, &gt->s[next].params, &sid[active], &err), MEMRA_OK);
            idx[active++] = next++;
        }
        uint32_t rows[N_SEQ];
        int32_t toks[N_SEQ], out[N_SEQ];
        int order[N_SEQ];
        for (int r = 0; r < active; r++) {
            order[r] = (r + tick) % active;
            rows[r] = sid[order[r]];
            toks[r] = gate_token(&gt->s[idx[order[r]]], step[idx[order[r]]]);
        }
        memra_cuda_step st = {
            .n_rows = (uint32_t)active, .sessions = rows, .tokens = toks, .out_tokens = out};
        ck_assert_msg(memra_cuda_backend_step(c->be, &st, &err) == MEMRA_OK, "%s: %s", what,
                      err.msg);
        ck_assert_int_eq(memra_cuda_backend_logits(c->be, 0, (uint32_t)active, gt->rows, &err),
                         MEMRA_OK);
        for (int r = 0; r < active; r++) {
            const int q = idx[order[r]], k = step[q]++;
            gate_check_row(gt, q, k, r, active, what, record);
            if (record)
                gt->s[q].sampled[k] = out[r];
            else
                ck_assert_msg(out[r] == gt->s[q].sampled[k],
                              "%s: sequence %d step %d sampled %d, "
                              "reference %d",
                              what, q, k, out[r], gt->s[q].sampled[k]);
        }
        for (int r = 0; r < active;) {
            if (step[idx[r]] == gt->s[idx[r]].len) {
                ck_assert_int_eq(memra_cuda_session_retire(c->be, sid[r], &err), MEMRA_OK);
                sid[r] = sid[active - 1];
                idx[r] = idx[active - 1];
                active--;
            } else {
                r++;
            }
        }
        tick++;
    }
    return tick;
}

/* (2) isolation at every width 1..16 against each sequence alone at tier 1. */
static void isolation_gate(const model_fix *f, int n_seq, int max_len, int full,
                           const uint32_t *widths, int n_widths)
{
    gpu_ctx c;
    gopen(&c, f, f->plans1, 1, MAX_LEN);
    gate gt;
    gate_make(&gt, n_seq, max_len, c.n_vocab, full);
    int ticks = gate_run(&c, &gt, 1, "tier 1 alone", 1);
    for (int w = 0; w < n_widths; w++) {
        char what[64];
        snprintf(what, sizeof what, "width %u", widths[w]);
        ticks += gate_run(&c, &gt, widths[w], what, 0);
    }
    fprintf(stderr,
            "isolation gate: %d sequences (%d..%d tokens), %d widths, %d ticks: "
            "every row memcmp-equal to its sequence alone\n",
            n_seq, gt.s[n_seq - 1].len, max_len, n_widths + 1, ticks);
    gate_free(&gt);
    gclose(&c);
}

START_TEST(test_isolation_gate)
{
    REQUIRE_GPU();
    static const uint32_t widths[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    isolation_gate(&g_tiny, N_SEQ, MAX_LEN, 1, widths, 15);
}
END_TEST

/* (3) graph replay == eager launches; (4) two stages == one. The reference is the one-stage
 * graph engine at tier 1; every other engine and width must reproduce it bit for bit. */
static void engines_gate(const model_fix *f, int n_seq, int max_len, int full)
{
    gpu_ctx ref, eager, two, two_eager;
    gopen(&ref, f, f->plans1, 1, MAX_LEN);
    gate gt;
    gate_make(&gt, n_seq, max_len, ref.n_vocab, full);
    gate_run(&ref, &gt, 1, "graph tier 1", 1);
    gate_run(&ref, &gt, 16, "graph width 16", 0);
    gclose(&ref);
    gopen(&eager, f, f->plans1, 0, MAX_LEN);
    gate_run(&eager, &gt, 1, "eager tier 1 vs graph", 0);
    gate_run(&eager, &gt, 7, "eager width 7 vs graph", 0);
    gate_run(&eager, &gt, 16, "eager width 16 vs graph", 0);
    gclose(&eager);
    gopen(&two, f, f->plans2, 1, MAX_LEN);
    ck_assert_uint_eq(memra_cuda_backend_manifest(two.be)->n_stages, 2);
    gate_run(&two, &gt, 1, "two stages tier 1 vs one", 0);
    gate_run(&two, &gt, 16, "two stages width 16 vs one", 0);
    gclose(&two);
    gopen(&two_eager, f, f->plans2, 0, MAX_LEN);
    gate_run(&two_eager, &gt, 5, "two stages eager width 5 vs one", 0);
    gclose(&two_eager);
    fprintf(stderr, "graph == eager and two stages == one: %d sequences bit-identical\n", n_seq);
    gate_free(&gt);
}

/* The scheduling options (attention's split grid AUTO and its L2 prefetch, gdn_step's L2
 * prefetch, the side-branch L2 prefetch) through the whole backend: AUTO resolved at bind,
 * the prefetching kernels captured into the graphs and run in the PDL chain, the side
 * branch forked and joined in every stage (graph and eager; end to end in the first graph
 * engine, spread over the warps in the second and the eager ones). Every row of every width,
 * graph and eager, one stage and two, must be memcmp-equal to the tier-1 run of its sequence
 * on an engine with each of g_sched's options off (the defaults turn attention's prefetch and
 * its AUTO at tier 1 on; the other gates run the defaults). */
static void sched_gate(const model_fix *f, int n_seq, int max_len)
{
    memset(&g_sched, 0, sizeof g_sched);
    g_sched.on = 1; /* the reference: g_sched's options off (attn_split_ctas 0, no AUTO tier) */
    gpu_ctx ref, c, spread, eager, two;
    gopen(&ref, f, f->plans1, 1, MAX_LEN);
    gate gt;
    gate_make(&gt, n_seq, max_len, ref.n_vocab, 1);
    gate_run(&ref, &gt, 1, "default engine tier 1", 1);
    const memra_cuda_info *ri = memra_cuda_backend_info(ref.be);
    uint32_t ref_nodes[MEMRA_PLAN_MAX_TIERS];
    for (uint32_t t = 0; t < ri->n_tiers; t++) { /* the given grid: one CTA per split */
        ck_assert_uint_eq(ri->attn_split_ctas[t], MEMRA_ATTN_MAX_SPLIT);
        ck_assert_uint_eq(ri->attn_split_auto[t], 0); /* attn_split_ctas given: AUTO nowhere */
        ck_assert_uint_eq(ri->l2_side_forks[t], 0); /* off by default */
        ref_nodes[t] = ri->graph_nodes[t];
    }
    gclose(&ref);
    g_sched.attn_split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO;
    /* the default's depth: AUTO's grid depends on the kernel's occupancy, so c's grids are the
     * expected ones of the default engine's AUTO tiers below only at the same prefetch */
    _Static_assert(MEMRA_CUDA_ATTN_PREFETCH > 0, "sched_gate's option engines must run the "
                                                 "prefetching kernel: give them their own depth");
    g_sched.attn_prefetch = MEMRA_CUDA_ATTN_PREFETCH;
    g_sched.gdn_prefetch = 2;
    const uint32_t side_mib = 4; /* the side-branch budget per fork */
    g_sched.l2_side_mib = side_mib;
    g_sched.fuse_always = 1; /* the forks skip folded launches (the fold is exact: same bits) */
    gopen(&c, f, f->plans1, 1, MAX_LEN);
    g_sched.l2_side_spread = 1; /* the others take the spread form */
    gopen(&spread, f, f->plans1, 1, MAX_LEN);
    gopen(&eager, f, f->plans1, 0, MAX_LEN);
    gopen(&two, f, f->plans2, 0, MAX_LEN);
    memset(&g_sched, 0, sizeof g_sched);
    const memra_cuda_info *ci = memra_cuda_backend_info(c.be);
    const memra_cuda_info *si = memra_cuda_backend_info(spread.be);
    const memra_cuda_info *ei = memra_cuda_backend_info(eager.be);
    for (uint32_t t = 0; t < ci->n_tiers; t++) { /* AUTO resolved at bind, per tier */
        ck_assert(ci->attn_split_ctas[t] >= 1 && ci->attn_split_ctas[t] <= MEMRA_ATTN_MAX_SPLIT);
        ck_assert_uint_eq(ci->attn_split_auto[t], 1); /* attn_split_ctas AUTO: every tier */
        /* the side branch is in the graph: one prefetch node per fork, nothing else (less
         * the launches the fold skips), in either form; every fork prefetches something */
        for (const memra_cuda_info *in = ci; in; in = in == ci ? si : NULL) {
            ck_assert_uint_gt(in->l2_side_forks[t], 0);
            ck_assert(in->tiers[t] != 1 || in->folded[t] > 0);
            ck_assert_uint_eq(in->graph_nodes[t] + in->folded[t],
                              ref_nodes[t] + in->l2_side_forks[t]);
            ck_assert_uint_ge(in->l2_side_bytes[t], (uint64_t)16 * in->l2_side_forks[t]);
            /* at most the budget per fork */
            ck_assert_uint_le(in->l2_side_bytes[t],
                              (uint64_t)in->l2_side_forks[t] * ((uint64_t)side_mib << 20));
        }
        ck_assert_uint_eq(ei->l2_side_forks[t], si->l2_side_forks[t]);
        ck_assert_uint_eq(ei->l2_side_bytes[t], si->l2_side_bytes[t]);
        fprintf(stderr, "%s%u: %u (%u forks, %llu / %llu bytes)",
                t ? ", B=" : "AUTO split CTAs B=", ci->tiers[t], ci->attn_split_ctas[t],
                ci->l2_side_forks[t], (unsigned long long)ci->l2_side_bytes[t],
                (unsigned long long)si->l2_side_bytes[t]);
    }
    fprintf(stderr, "\n");
    /* the defaults (memra_cuda_opts_init, g_sched off): AUTO at the tiers of
     * MEMRA_CUDA_ATTN_AUTO_TIERS (tier 1), with c's grid there, and one CTA per split at the
     * others. The grid alone cannot tell them apart where AUTO resolves to max_split (tiny at
     * B = 1 and 2: 128), so attn_split_auto says which the launch took; and at least one tier
     * of the fixture must take AUTO, or the check would see nothing. */
    gpu_ctx def;
    gopen(&def, f, f->plans1, 1, MAX_LEN);
    const memra_cuda_info *di = memra_cuda_backend_info(def.be);
    ck_assert_uint_eq(di->n_tiers, ci->n_tiers);
    uint32_t n_auto = 0;
    for (uint32_t t = 0; t < di->n_tiers; t++) {
        const uint32_t want = (MEMRA_CUDA_ATTN_AUTO_TIERS >> di->tiers[t]) & 1;
        ck_assert_uint_eq(di->attn_split_auto[t], want);
        ck_assert_uint_eq(di->attn_split_ctas[t],
                          want ? ci->attn_split_ctas[t] : MEMRA_ATTN_MAX_SPLIT);
        n_auto += want;
    }
    ck_assert_msg(n_auto > 0, "MEMRA_CUDA_ATTN_AUTO_TIERS takes no tier of the fixture");
    gclose(&def);
    gate_run(&c, &gt, 1, "options: graph tier 1 vs default", 0);
    gate_run(&c, &gt, 16, "options: graph width 16 vs default", 0);
    gate_run(&spread, &gt, 16, "options: graph width 16 spread vs default", 0);
    gate_run(&eager, &gt, 7, "options: eager width 7 vs default", 0);
    gate_run(&two, &gt, 5, "options: two stages eager width 5 vs default", 0);
    gclose(&c);
    gclose(&spread);
    gclose(&eager);
    gclose(&two);
    fprintf(stderr,
            "scheduling options (attn AUTO + prefetch %d, gdn prefetch 2, L2 side 4 MiB end to "
            "end and spread): %d sequences bit-identical to the reference engine\n",
            MEMRA_CUDA_ATTN_PREFETCH, n_seq);
    gate_free(&gt);
}

START_TEST(test_scheduling_options)
{
    REQUIRE_GPU();
    sched_gate(&g_tiny, N_SEQ, 96);
}
END_TEST

START_TEST(test_graph_eager_stages)
{
    REQUIRE_GPU();
    engines_gate(&g_tiny, N_SEQ, 96, 1);
}
END_TEST

/* (5) agreement with the CPU: EXACT. Every CUDA op and its CPU reference run the same
 * arithmetic in the same order (kernels/exact_math.h for the transcendentals, each op's
 * canonical reduction order in its header), the CPU backend is the composition of the CPU
 * references and the reference model calls the same canonical functions. So the GPU's
 * logits must be memcmp-equal to the CPU's at every step and every greedy token equal. On a
 * mismatch the report still measures the deviation (max|d| / max|logit| per step), which
 * tells an op that is wrong (O(1) of the logits' scale at once) from an order slip (one ulp
 * somewhere, growing through the layers and the recurrent state). */
typedef struct agree_stats {
    int n;
    double rel[1024];  /* per step: max|d| / max|logit| */
    int n_equal;       /* steps whose logits are memcmp-equal */
    int first_diff;    /* first step whose logits differ, -1 = none */
    int token_diff;    /* steps whose greedy token differs */
} agree_stats;

static void agree_measure(const float *cpu, const float *gpu, uint32_t n_vocab, agree_stats *st)
{
    double amax = 0, dmax = 0;
    for (uint32_t j = 0; j < n_vocab; j++) {
        amax = fmax(amax, fabs((double)cpu[j]));
        dmax = fmax(dmax, fabs((double)cpu[j] - (double)gpu[j]));
    }
    if (memcmp(cpu, gpu, sizeof(float) * n_vocab) == 0)
        st->n_equal++;
    else if (st->first_diff < 0)
        st->first_diff = st->n;
    st->rel[st->n++] = amax > 0 ? dmax / amax : dmax;
}

static void agree_report(const char *what, const agree_stats *st)
{
    int worst = 0;
    for (int i = 0; i < st->n; i++)
        if (st->rel[i] > st->rel[worst])
            worst = i;
    fprintf(stderr,
            "CPU agreement (%s): %d steps; logits memcmp-equal at %d/%d steps (first "
            "difference: step %d); greedy tokens differ at %d steps; max|d|/max|l| worst %.3g "
            "at step %d\n",
            what, st->n, st->n_equal, st->n, st->first_diff, st->token_diff, st->rel[worst],
            worst);
}
/* CPU side: the CPU backend (small models) or the reference model (bit-identical to it;
 * with threads, for the large model). */
typedef struct cpu_side {
    memra_gguf *g;
    memra_cpu_backend *be;
    uint32_t sid;
    memra_ref_model *m;
    memra_ref_seq *seq;
} cpu_side;

static void cpu_open(cpu_side *c, const model_fix *f, int use_ref, uint32_t n_ctx)
{
    memra_err err;
    memra_err_clear(&err);
    memset(c, 0, sizeof *c);
    if (use_ref) {
        memra_ref_model_config cfg;
        memra_ref_model_config_default(&cfg);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.n_threads = n > 1 ? (int)(n > 64 ? 64 : n) : 1;
        ck_assert_msg(memra_ref_model_open(f->path, &cfg, &c->m, &err) == MEMRA_OK, "%s", err.msg);
        ck_assert_msg(memra_ref_seq_init(c->m, n_ctx, &c->seq, &err) == MEMRA_OK, "%s", err.msg);
        return;
    }
    ck_assert_msg(memra_gguf_open(f->path, &c->g, &err) == MEMRA_OK, "%s", err.msg);
    memra_cpu_opts o = {.n_slots = 1, .n_ctx = n_ctx};
    ck_assert_msg(memra_cpu_backend_open(f->plans1, c->g, &o, &c->be, &err) == MEMRA_OK, "%s",
                  err.msg);
    ck_assert_int_eq(memra_cpu_session_admit(c->be, NULL, &c->sid, &err), MEMRA_OK);
}

static int32_t cpu_forward(cpu_side *c, int32_t tok, float *logits, uint32_t n_vocab)
{
    memra_err err;
    memra_err_clear(&err);
    if (c->m) {
        ck_assert_msg(memra_ref_forward(c->m, c->seq, tok, logits, &err) == MEMRA_OK, "%s",
                      err.msg);
        return memra_ref_argmax(logits, n_vocab);
    }
    int32_t out = -1;
    memra_cpu_step st = {.n_rows = 1, .sessions = &c->sid, .tokens = &tok, .out_tokens = &out};
    ck_assert_msg(memra_cpu_backend_step(c->be, &st, &err) == MEMRA_OK, "%s", err.msg);
    memcpy(logits, memra_cpu_backend_logits(c->be, 0), sizeof(float) * n_vocab);
    return out;
}

static void cpu_close(cpu_side *c)
{
    memra_ref_seq_free(c->seq);
    memra_ref_model_close(c->m);
    memra_cpu_backend_close(c->be);
    memra_gguf_close(c->g);
}

/* One greedy session: the prompt, then `steps` tokens; each backend consumes the token
 * the CPU chose (so a single slip is reported once, not as a cascade). All steps are measured
 * before anything is asserted, so a failure still reports the whole picture. */
/* fuse: memra_cuda_opts.fuse; 2 folds every SwiGLU that can be folded, and then at least
 * one must have been (the fused epilogue is what the test is about). */
static void cpu_agreement(const model_fix *f, int steps, int use_ref, int fuse)
{
    gpu_ctx c;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(f->ok, "fixture (forge + planner) failed; see stderr");
    ck_assert_msg(memra_gguf_open(f->path, &c.g, &err) == MEMRA_OK, "%s", err.msg);
    memra_cuda_opts o;
    memra_cuda_opts_init(&o);
    o.n_slots = 1;
    o.n_ctx = MAX_LEN + 16;
    o.fuse = fuse;
    ck_assert_msg(memra_cuda_backend_open(f->plans1, c.g, &o, &c.be, &err) == MEMRA_OK, "%s",
                  err.msg);
    c.n_vocab = memra_cuda_backend_n_vocab(c.be);
    if (fuse == 2)
        ck_assert_msg(memra_cuda_backend_info(c.be)->folded[0] > 0,
                      "no SwiGLU was folded at tier 1");
    cpu_side cpu;
    cpu_open(&cpu, f, use_ref, MAX_LEN + 16);
    uint32_t sid;
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &sid, &err), MEMRA_OK);
    float *lc = xcalloc(c.n_vocab, sizeof(float)), *lg = xcalloc(c.n_vocab, sizeof(float));
    static const int32_t prompt[] = {1, 17, 300, 2, 45, 99, 1000, 7};
    const int n_prompt = 8;
    agree_stats st = {.first_diff = -1};
    int32_t tok = prompt[0];
    for (int i = 0; i < n_prompt - 1 + steps && i < 1024; i++) {
        const int32_t tc = cpu_forward(&cpu, tok, lc, c.n_vocab);
        int32_t tg = -1;
        memra_cuda_step s = {.n_rows = 1, .sessions = &sid, .tokens = &tok, .out_tokens = &tg};
        ck_assert_msg(memra_cuda_backend_step(c.be, &s, &err) == MEMRA_OK, "%s", err.msg);
        ck_assert_int_eq(memra_cuda_backend_logits(c.be, 0, 1, lg, &err), MEMRA_OK);
        /* the device's greedy sample is the argmax of its own logits, exactly */
        ck_assert_msg(tg == memra_ref_argmax(lg, c.n_vocab),
                      "step %d: device sampled %d, the argmax of its logits is %d", i, tg,
                      memra_ref_argmax(lg, c.n_vocab));
        agree_measure(lc, lg, c.n_vocab, &st);
        st.token_diff += tc != tg;
        tok = i + 1 < n_prompt ? prompt[i + 1] : tc;
    }
    const char *what = use_ref ? "reference model" : "CPU backend";
    agree_report(what, &st);
    free(lc);
    free(lg);
    cpu_close(&cpu);
    gclose(&c);
    ck_assert_msg(st.n_equal == st.n && st.token_diff == 0,
                  "%s: logits differ from the GPU's at %d of %d steps (first: step %d, "
                  "max|d|/max|l| %.3g there); greedy tokens at %d steps",
                  what, st.n - st.n_equal, st.n, st.first_diff,
                  st.first_diff >= 0 ? st.rel[st.first_diff] : 0.0, st.token_diff);
}

START_TEST(test_cpu_agreement)
{
    REQUIRE_GPU();
    cpu_agreement(&g_tiny, 256, 0, 1);
    cpu_agreement(&g_tiny, 64, 0, 2); /* the fused SwiGLU epilogue at every dense FFN */
}
END_TEST

/* ================================= failure handling ================================== */

/* The first mmvq launch of tier `tier` (the only launches faults can be armed on). */
static uint32_t arm_fault(memra_cuda_backend *be, uint32_t tier, int kind)
{
    memra_err err;
    memra_err_clear(&err);
    for (uint32_t i = 0; i < 4096; i++)
        if (memra_cuda_backend_inject_fault(be, tier, i, kind, &err) == MEMRA_OK)
            return i;
    ck_abort_msg("tier %u has no mmvq launch", tier);
    return 0;
}

static void step_ok(gpu_ctx *c, uint32_t n, const uint32_t *sid, const int32_t *tok, int32_t *out)
{
    memra_err err;
    memra_err_clear(&err);
    memra_cuda_step st = {.n_rows = n, .sessions = sid, .tokens = tok, .out_tokens = out};
    ck_assert_msg(memra_cuda_backend_step(c->be, &st, &err) == MEMRA_OK, "%s", err.msg);
}

START_TEST(test_launch_error_fails_only_its_tick)
{
    /* A launch-time CUDA error (invalid block size) in a 2-row tick: MEMRA_ERR_CUDA naming
     * the launch; those two sessions are failed (refused until retired); the context is not
     * poisoned, and a session admitted afterwards computes exactly what a clean one does. */
    REQUIRE_GPU();
    gpu_ctx c;
    gopen(&c, &g_tiny, g_tiny.plans1, 1, 64);
    memra_err err;
    memra_err_clear(&err);
    uint32_t ab[2], x, y;
    int32_t tok[2] = {5, 9}, out[2];
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &ab[0], &err), MEMRA_OK);
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &ab[1], &err), MEMRA_OK);
    step_ok(&c, 2, ab, tok, out);
    const uint32_t li = arm_fault(c.be, 2, MEMRA_CUDA_FAULT_LAUNCH);
    memra_cuda_step st = {.n_rows = 2, .sessions = ab, .tokens = tok, .out_tokens = out};
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_CUDA);
    char want[64];
    snprintf(want, sizeof want, "launch %u (mmvq)", li);
    ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "marked failed"), "message: %s",
                  err.msg);
    ck_assert(!memra_cuda_backend_poisoned(c.be));
    ck_assert(memra_cuda_session_failed(c.be, ab[0]) && memra_cuda_session_failed(c.be, ab[1]));
    ck_assert_uint_eq(memra_cuda_session_pos(c.be, ab[0]), 1); /* the failed tick did not count */
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "retire"));
    /* the engine keeps serving: x (admitted after the failure) == y (after the retirement) */
    enum { N = 6 };
    const int32_t seq[N] = {3, 14, 15, 92, 65, 35};
    float *lx = xcalloc((size_t)N * c.n_vocab, sizeof(float)),
          *ly = xcalloc(c.n_vocab, sizeof(float));
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &x, &err), MEMRA_OK);
    for (int k = 0; k < N; k++) {
        step_ok(&c, 1, &x, &seq[k], out);
        ck_assert_int_eq(memra_cuda_backend_logits(c.be, 0, 1, lx + (size_t)k * c.n_vocab, &err),
                         MEMRA_OK);
    }
    ck_assert_int_eq(memra_cuda_session_retire(c.be, ab[0], &err), MEMRA_OK);
    ck_assert_int_eq(memra_cuda_session_retire(c.be, ab[1], &err), MEMRA_OK);
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &y, &err), MEMRA_OK);
    for (int k = 0; k < N; k++) {
        step_ok(&c, 1, &y, &seq[k], out);
        ck_assert_int_eq(memra_cuda_backend_logits(c.be, 0, 1, ly, &err), MEMRA_OK);
        ck_assert_msg(memcmp(ly, lx + (size_t)k * c.n_vocab, sizeof(float) * c.n_vocab) == 0,
                      "step %d after the failure differs", k);
    }
    free(lx);
    free(ly);
    gclose(&c);
}
END_TEST

START_TEST(test_sticky_error_poisons)
{
    /* An illegal address inside a kernel: sticky. The step says so, every later device call
     * of the engine refuses with the first error, and closing it does not crash. */
    REQUIRE_GPU();
    gpu_ctx c;
    gopen(&c, &g_tiny, g_tiny.plans1, 1, 64);
    memra_err err;
    memra_err_clear(&err);
    uint32_t a, b;
    int32_t tok = 5, out;
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &a, &err), MEMRA_OK);
    step_ok(&c, 1, &a, &tok, &out);
    arm_fault(c.be, 1, MEMRA_CUDA_FAULT_STICKY);
    memra_cuda_step st = {.n_rows = 1, .sessions = &a, .tokens = &tok, .out_tokens = &out};
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_CUDA);
    ck_assert_msg(strstr(err.msg, "sticky") && strstr(err.msg, "poisoned"), "message: %s", err.msg);
    ck_assert(memra_cuda_backend_poisoned(c.be));
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &b, &err), MEMRA_ERR_CUDA);
    ck_assert_ptr_nonnull(strstr(err.msg, "poisoned"));
    ck_assert_int_eq(memra_cuda_session_retire(c.be, a, &err), MEMRA_OK); /* host bookkeeping */
    memra_cuda_backend_close(c.be);
    /* Close reset the primary context. Whether the process may use the device again is the
     * driver's call: on the H200 with driver 580 it may not (the next retain still reports
     * the illegal address). Either way the next open must not crash: it works, or it fails
     * with MEMRA_ERR_CUDA naming the CUDA error. */
    memra_cuda_backend *be2 = NULL;
    memra_err_clear(&err);
    const int rc = memra_cuda_backend_open(g_tiny.plans1, c.g, NULL, &be2, &err);
    if (rc == MEMRA_OK) {
        ck_assert_int_eq(memra_cuda_session_admit(be2, NULL, &a, &err), MEMRA_OK);
        memra_cuda_step st2 = {.n_rows = 1, .sessions = &a, .tokens = &tok, .out_tokens = &out};
        ck_assert_msg(memra_cuda_backend_step(be2, &st2, &err) == MEMRA_OK, "%s", err.msg);
        fprintf(stderr, "sticky error: after close, a new engine runs in this process\n");
    } else {
        ck_assert_int_eq(rc, MEMRA_ERR_CUDA);
        ck_assert_ptr_nonnull(strstr(err.msg, "CUDA_ERROR"));
        ck_assert_ptr_null(be2);
        fprintf(stderr,
                "sticky error: after close, the device stays unusable in this process "
                "(%s): a host must restart the process\n",
                err.msg);
    }
    memra_cuda_backend_close(be2);
    memra_gguf_close(c.g);
}
END_TEST

START_TEST(test_bad_input)
{
    REQUIRE_GPU();
    gpu_ctx c;
    gopen(&c, &g_tiny, g_tiny.plans1, 1, 8);
    memra_err err;
    memra_err_clear(&err);
    uint32_t a, b;
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &a, &err), MEMRA_OK);
    ck_assert_int_eq(memra_cuda_session_admit(c.be, NULL, &b, &err), MEMRA_OK);
    int32_t tok[2] = {1, 2}, bad_tok[2] = {1, (int32_t)c.n_vocab};
    uint32_t dup[2] = {a, a}, unknown = 7, both[2] = {a, b};
    memra_cuda_step st = {.n_rows = 2, .sessions = dup, .tokens = tok};
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    st = (memra_cuda_step){.n_rows = 1, .sessions = &unknown, .tokens = tok};
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    st = (memra_cuda_step){.n_rows = 2, .sessions = both, .tokens = bad_tok};
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "vocabulary"));
    st = (memra_cuda_step){.n_rows = 2, .sessions = both, .tokens = tok, .tier = 3};
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    st = (memra_cuda_step){.n_rows = 17, .sessions = both, .tokens = tok};
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_INVALID_ARG);
    ck_assert_uint_eq(memra_cuda_session_pos(c.be, a), 0); /* refused steps change nothing */
    float row[4];
    ck_assert_int_eq(memra_cuda_backend_logits(c.be, 0, 1, row, &err), MEMRA_ERR_INVALID_ARG);
    for (int i = 0; i < 8; i++) {
        st = (memra_cuda_step){.n_rows = 1, .sessions = &a, .tokens = tok};
        ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_OK);
    }
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_backend_step(c.be, &st, &err), MEMRA_ERR_CAPACITY);
    ck_assert_uint_eq(memra_cuda_session_pos(c.be, a), 8);
    ck_assert_int_eq(memra_cuda_backend_logits(c.be, 1, 1, row, &err), MEMRA_ERR_INVALID_ARG);
    gclose(&c);
}
END_TEST

START_TEST(test_open_refusals)
{
    /* Without a GPU the open is UNSUPPORTED and says why (this runs in CI); with one, a
     * missing plan directory and bad options are refused with a message. */
    memra_cuda_backend *be = NULL;
    memra_err err;
    memra_err_clear(&err);
    /* options are checked before the device is opened: refused with or without a GPU */
    for (int k = 0; k < 7; k++) {
        memra_cuda_opts bad;
        memra_cuda_opts_init(&bad);
        static const char *const what[] = {"attn_split_ctas", "attn_prefetch", "gdn_prefetch",
                                           "gdn_split",       "l2_side_mib",   "l2_side_spread",
                                           "l2_side_spread"};
        if (k == 0)
            bad.attn_split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO - 1;
        if (k == 1)
            bad.attn_prefetch = MEMRA_ATTN_MAX_PREFETCH + 1;
        if (k == 2)
            bad.gdn_prefetch = -1;
        if (k == 3)
            bad.gdn_split = 3;
        if (k == 4)
            bad.l2_side_mib = MEMRA_CUDA_L2_SIDE_MAX_MIB + 1;
        if (k == 5)
            bad.l2_side_spread = 2;
        if (k == 6)
            bad.l2_side_spread = 1; /* with l2_side_mib 0: nothing to shape */
        memra_err_clear(&err);
        ck_assert_int_eq(memra_cuda_backend_open("/nonexistent/memra-plans", NULL, &bad, &be, &err),
                         MEMRA_ERR_INVALID_ARG);
        ck_assert_ptr_null(be);
        ck_assert_msg(strstr(err.msg, what[k]), "option %s: %s", what[k], err.msg);
    }
    memra_err_clear(&err);
    int rc = memra_cuda_backend_open("/nonexistent/memra-plans", NULL, NULL, &be, &err);
    ck_assert_ptr_null(be);
    ck_assert(err.msg[0] != '\0');
    if (!gpu_ok()) {
        ck_assert_int_eq(rc, MEMRA_ERR_UNSUPPORTED);
        return;
    }
    ck_assert_int_ne(rc, MEMRA_OK);
    memra_cuda_opts bad;
    memra_cuda_opts_init(&bad);
    bad.n_slots = 0;
    memra_err_clear(&err);
    ck_assert_int_eq(memra_cuda_backend_open("/nonexistent/memra-plans", NULL, &bad, &be, &err),
                     MEMRA_ERR_INVALID_ARG);
}
END_TEST

/* ============================= the large model (optional) ============================ */

START_TEST(test_big_isolation)
{
    REQUIRE_BIG();
    static const uint32_t widths[] = {3, 8, 16};
    isolation_gate(&g_big, N_SEQ, 24, 0, widths, 3);
}
END_TEST

START_TEST(test_big_engines)
{
    REQUIRE_BIG();
    engines_gate(&g_big, 8, 16, 0);
}
END_TEST

START_TEST(test_big_cpu_agreement)
{
    REQUIRE_BIG();
    cpu_agreement(&g_big, 256, 1, 2);
}
END_TEST

/* Device-to-device copy bandwidth (bytes read + written per second), the ceiling a tick's
 * weight stream is compared against. */
static double copy_gbs(void)
{
    const size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    float ms = 0;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess)
        return 0;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++)
        cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return ms > 0 ? 2.0 * 10 * (double)n / (ms * 1e-3) / 1e9 : 0;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median device time of 30 ticks of b sessions (after 5 warm-up ticks). */
static double tick_ms(gpu_ctx *c, uint32_t b)
{
    memra_err err;
    memra_err_clear(&err);
    uint32_t sid[16];
    int32_t tok[16], out[16];
    float ms[30];
    for (uint32_t r = 0; r < b; r++) {
        ck_assert_int_eq(memra_cuda_session_admit(c->be, NULL, &sid[r], &err), MEMRA_OK);
        tok[r] = (int32_t)(100 + r);
    }
    for (int k = 0; k < 35; k++) {
        step_ok(c, b, sid, tok, out);
        if (k >= 5)
            ms[k - 5] = memra_cuda_backend_info(c->be)->last_tick_ms;
        memcpy(tok, out, sizeof(int32_t) * b);
    }
    for (uint32_t r = 0; r < b; r++)
        ck_assert_int_eq(memra_cuda_session_retire(c->be, sid[r], &err), MEMRA_OK);
    qsort(ms, 30, sizeof ms[0], cmp_float);
    return ms[15];
}

/* Per-op device time of one tick at widths 1 and 16 (eager, an event after every launch). */
static void profile_table(const model_fix *f)
{
    memra_err err;
    memra_err_clear(&err);
    gpu_ctx c;
    ck_assert_msg(memra_gguf_open(f->path, &c.g, &err) == MEMRA_OK, "%s", err.msg);
    memra_cuda_opts o;
    memra_cuda_opts_init(&o);
    o.n_ctx = MAX_LEN;
    o.graphs = 0;
    o.profile = 1;
    ck_assert_msg(memra_cuda_backend_open(f->plans1, c.g, &o, &c.be, &err) == MEMRA_OK, "%s",
                  err.msg);
    const memra_cuda_info *in = memra_cuda_backend_info(c.be);
    double ms[2][MEMRA_OP_COUNT];
    uint64_t calls[MEMRA_OP_COUNT];
    static const uint32_t widths[2] = {1, 16};
    for (int w = 0; w < 2; w++) {
        double before[MEMRA_OP_COUNT];
        memcpy(before, in->op_ms, sizeof before);
        const uint64_t t0 = in->profiled_ticks;
        memcpy(calls, in->op_calls, sizeof calls);
        tick_ms(&c, widths[w]);
        const double n = (double)(in->profiled_ticks - t0);
        for (int op = 0; op < MEMRA_OP_COUNT; op++) {
            ms[w][op] = (in->op_ms[op] - before[op]) / n;
            calls[op] = (uint64_t)((double)(in->op_calls[op] - calls[op]) / n + 0.5);
        }
    }
    fprintf(stderr,
            "per-op device time per tick (eager, events between launches), %s:\n"
            "  op             launches   B=1 ms  B=16 ms\n",
            f->path);
    double tot[2] = {0, 0};
    for (int op = 0; op < MEMRA_OP_COUNT; op++) {
        if (!calls[op])
            continue;
        fprintf(stderr, "  %-14s %8llu  %7.3f  %7.3f\n", memra_op_get((uint32_t)op)->name,
                (unsigned long long)calls[op], ms[0][op], ms[1][op]);
        tot[0] += ms[0][op], tot[1] += ms[1][op];
    }
    fprintf(stderr, "  %-14s %8s  %7.3f  %7.3f\n", "all", "", tot[0], tot[1]);
    gclose(&c);
}

START_TEST(test_tiny_profile)
{
    REQUIRE_GPU();
    ck_assert(g_tiny.ok);
    profile_table(&g_tiny);
}
END_TEST

START_TEST(test_big_tick_times)
{
    /* Measurement, not a gate: device time per tick at every tier, graph vs eager. */
    REQUIRE_BIG();
    gpu_ctx gr, ea;
    gopen(&gr, &g_big, g_big.plans1, 1, MAX_LEN);
    gopen(&ea, &g_big, g_big.plans1, 0, MAX_LEN);
    const memra_cuda_info *in = memra_cuda_backend_info(gr.be);
    const double bw = copy_gbs();
    fprintf(stderr,
            "tick times, %s (sm_%d, %d SMs), weights %.3f GB uploaded in %.0f ms "
            "(%.2f GB/s), copy bandwidth %.0f GB/s, PDL %s\n",
            in->device_name, in->sm, in->n_sm, (double)in->weight_bytes / 1e9, in->upload_ms,
            (double)in->weight_bytes / 1e6 / in->upload_ms, bw, in->pdl ? "on" : "off");
    fprintf(stderr,
            "  tier  launches  nodes  graph ms  eager ms  tok/s(graph)  weight GB/s  of copy BW\n");
    for (uint32_t t = 0; t < in->n_tiers; t++) {
        const uint32_t b = in->tiers[t];
        const double g = tick_ms(&gr, b), e = tick_ms(&ea, b);
        const double gbs = (double)in->tick_bytes[t] / (g * 1e-3) / 1e9;
        fprintf(stderr, "  %4u  %8u  %5u  %8.3f  %8.3f  %12.0f  %11.0f  %9.0f%%\n", b,
                in->launches[t], in->graph_nodes[t], g, e, b / (g * 1e-3), gbs,
                bw > 0 ? 100 * gbs / bw : 0);
        ck_assert(g > 0 && e > 0);
    }
    gclose(&gr);
    gclose(&ea);
    profile_table(&g_big);
}
END_TEST

/* MoE (mmvq_moe, moe_route, moe_down on CUDA): rows at tiers 4 and 8 memcmp-equal to each
 * sequence alone at tier 1; logits memcmp-equal to the CPU backend's. */
START_TEST(test_moe_isolation)
{
    REQUIRE_GPU();
    static const uint32_t widths[] = {4, 8};
    isolation_gate(&g_moe, 8, 32, 1, widths, 2);
}
END_TEST

START_TEST(test_moe_cpu_agreement)
{
    REQUIRE_GPU();
    cpu_agreement(&g_moe, 64, 0, 1);
}
END_TEST

/* The public API (include/memra.h) on the GPU: MEMRA_BACKEND_AUTO picks CUDA here, and four
 * sessions (two greedy, two seeded-sampled, prompts of different lengths) stepped together
 * through memra_step, graph replay, give each row the logits bits and tokens that the CPU
 * engine gives the session stepped alone (memcmp): the API adds nothing to the backends'
 * contract, on either side. */
START_TEST(test_api_cuda_matches_cpu)
{
    REQUIRE_GPU();
    ck_assert_msg(g_tiny.ok, "fixture failed");
    enum { NS = 4, STEPS = 24 };
    memra_engine *e[2] = {NULL, NULL}; /* 0: CPU, 1: AUTO (CUDA) */
    for (int k = 0; k < 2; k++) {
        memra_engine_config c;
        memra_engine_config_init(&c);
        c.model_path = g_tiny.path;
        c.plan_dir = g_tiny.plans1;
        c.backend = k ? MEMRA_BACKEND_AUTO : MEMRA_BACKEND_CPU;
        c.n_slots = NS;
        c.n_ctx = 64;
        ck_assert_msg(memra_engine_open(&c, &e[k]) == MEMRA_OK, "%s", memra_last_error());
    }
    memra_engine_info in;
    ck_assert_int_eq(memra_engine_get_info(e[1], &in), MEMRA_OK);
    ck_assert_str_eq(in.backend, "cuda");
    const size_t nv = in.n_vocab;
    float *lg = malloc(2 * NS * STEPS * nv * sizeof *lg);
    int32_t tok[2][NS][STEPS];
    ck_assert_ptr_nonnull(lg);
    memra_sampling smp[NS];
    for (int i = 0; i < NS; i++) {
        memra_sampling_init(&smp[i]);
        if (i >= 2) {
            smp[i].temperature = 0.8f;
            smp[i].top_k = 50;
            smp[i].top_p = 0.9f;
            smp[i].seed = 77 + (uint64_t)i;
        }
    }
    for (int k = 0; k < 2; k++) {
        /* k = 0: each session alone on the CPU; k = 1: all four in one step on the GPU */
        for (int first = 0; first < NS; first += k ? NS : 1) {
            const int n = k ? NS : 1;
            memra_session *s[NS];
            int32_t cur[NS];
            for (int r = 0; r < n; r++) {
                ck_assert_int_eq(memra_session_open(e[k], &smp[first + r], &s[r]), MEMRA_OK);
                cur[r] = (int32_t)(5 + 3 * (first + r));
            }
            for (int t = 0; t < STEPS; t++) {
                memra_row rows[NS];
                for (int r = 0; r < n; r++)
                    rows[r] =
                        (memra_row){.session = s[r],
                                    .token = cur[r],
                                    .logits = lg + (((size_t)k * NS + first + r) * STEPS + t) * nv};
                ck_assert_msg(memra_step(e[k], rows, (size_t)n) == MEMRA_OK, "%s",
                              memra_last_error());
                for (int r = 0; r < n; r++) {
                    const int i = first + r;
                    ck_assert_int_eq(rows[r].status, MEMRA_OK);
                    tok[k][i][t] = rows[r].out_token;
                    /* prompts of 1..4 tokens, then generation */
                    cur[r] = t + 1 <= i ? (int32_t)(11 + t) : rows[r].out_token;
                }
            }
            for (int r = 0; r < n; r++)
                memra_session_close(s[r]);
        }
    }
    ck_assert_msg(!memcmp(tok[0], tok[1], sizeof tok[0]), "tokens differ between CPU and GPU");
    for (int i = 0; i < NS; i++)
        for (int t = 0; t < STEPS; t++)
            ck_assert_msg(!memcmp(lg + ((size_t)i * STEPS + t) * nv,
                                  lg + (((size_t)NS + i) * STEPS + t) * nv, nv * sizeof *lg),
                          "session %d step %d: GPU batched logits differ from the CPU alone", i, t);
    free(lg);
    memra_engine_close(e[0]);
    memra_engine_close(e[1]);
}
END_TEST

Suite *make_backend_gpu_suite(void)
{
    Suite *s = suite_create("backend_gpu");
    TCase *nogpu = tcase_create("open");
    tcase_add_test(nogpu, test_open_refusals);
    suite_add_tcase(s, nogpu);

    TCase *tiny = tcase_create("tiny");
    tcase_set_timeout(tiny, 600);
    tcase_add_unchecked_fixture(tiny, tiny_setup, tiny_teardown);
    tcase_add_test(tiny, test_isolation_gate);
    tcase_add_test(tiny, test_graph_eager_stages);
    tcase_add_test(tiny, test_scheduling_options);
    tcase_add_test(tiny, test_cpu_agreement);
    tcase_add_test(tiny, test_tiny_profile);
    tcase_add_test(tiny, test_bad_input);
    tcase_add_test(tiny, test_launch_error_fails_only_its_tick);
    tcase_add_test(tiny, test_api_cuda_matches_cpu);
    suite_add_tcase(s, tiny);

    TCase *big = tcase_create("model");
    tcase_set_timeout(big, 600);
    tcase_add_unchecked_fixture(big, big_setup, big_teardown);
    tcase_add_test(big, test_big_isolation);
    tcase_add_test(big, test_big_engines);
    tcase_add_test(big, test_big_cpu_agreement);
    tcase_add_test(big, test_big_tick_times);
    suite_add_tcase(s, big);

    TCase *moe = tcase_create("moe");
    tcase_set_timeout(moe, 600);
    tcase_add_unchecked_fixture(moe, moe_setup, moe_teardown);
    tcase_add_test(moe, test_moe_isolation);
    tcase_add_test(moe, test_moe_cpu_agreement);
    suite_add_tcase(s, moe);

    /* Last: it poisons the device context of this process. */
    TCase *sticky = tcase_create("sticky");
    tcase_set_timeout(sticky, 120);
    tcase_add_unchecked_fixture(sticky, tiny_setup, tiny_teardown);
    tcase_add_test(sticky, test_sticky_error_poisons);
    suite_add_tcase(s, sticky);
    return s;
}
