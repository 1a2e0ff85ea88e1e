/*
 * test_backend_gpu.c — the CUDA backend's gates (GPU binary memra-gpu-backend-tests, run
 * with CK_FORK=no; every test says SKIP with the reason where there is no CUDA device).
 *
 * On the forged `tiny` model (Q4_K_M mix), plans made in-process (tiers 1,2,4,8,12,16):
 *   (2) isolation: 16 sequences with different prompts, lengths (121..256 tokens) and
 *       sampling params run with continuous batching at every width 1..16 (tiers 1, 2, 4,
 *       8, 12, 16, padded in between and as sequences finish): each row's logits are
 *       memcmp-equal to the same sequence alone at tier 1, and every sampled token equal;
 *   (3) graph replay == eager launches (memcmp);
 *   (4) two pipeline stages == one stage (memcmp), graph and eager;
 *   (5) agreement with the CPU backend: identical greedy tokens for 256 steps, logits within
 *       the tolerance stated at CPU_TOL_REL (measured worst case printed);
 *   failure handling: a launch-time CUDA error names its launch and fails only its tick's
 *   sessions; a sticky fault poisons the engine, is reported as such, and a new engine works
 *   after close; bad input is refused without side effects.
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

#include <xxhash.h>

#include "backend_cpu.h"
#include "backend_cuda.h"
#include "cuda_util.h"
#include "forge.h"
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

static model_fix g_tiny, g_big;
static int g_gpu = -1;           /* -1 unknown, 0 none, 1 present */
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
            fprintf(stderr, "SKIP %s: no CUDA device (%s)\n", __func__, g_gpu_why);               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

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
static void fix_setup(model_fix *f, const char *path)
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
        o.shape = memra_forge_preset("tiny");
        o.seed = 7;
        memra_err err;
        memra_err_clear(&err);
        f->forged = 1;
        if (memra_forge_write(&o, f->path, &err) != MEMRA_OK) {
            fprintf(stderr, "forge tiny failed: %s\n", err.msg);
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
        rm_dir(f->plans1);
    if (f->plans2[0])
        rm_dir(f->plans2);
}

static void tiny_setup(void) { fix_setup(&g_tiny, NULL); }
static void tiny_teardown(void) { fix_teardown(&g_tiny); }
static void big_setup(void)
{
    const char *p = getenv("MEMRA_GPU_TEST_MODEL");
    if (p && *p)
        fix_setup(&g_big, p);
    else
        memset(&g_big, 0, sizeof g_big);
}
static void big_teardown(void) { fix_teardown(&g_big); }

#define REQUIRE_BIG()                                                                              \
    do {                                                                                           \
        REQUIRE_GPU();                                                                             \
        if (!getenv("MEMRA_GPU_TEST_MODEL")) {                                                     \
            fprintf(stderr, "SKIP %s: MEMRA_GPU_TEST_MODEL is not set\n", __func__);              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* An open CUDA backend on a fixture's plan set. */
typedef struct gpu_ctx {
    memra_gguf *g;
    memra_cuda_backend *be;
    uint32_t n_vocab;
} gpu_ctx;

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
    float *logits;           /* [len, n_vocab] when full */
    uint64_t hash[MAX_LEN];  /* XXH3-64 of each step's logits row */
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
        s->params = (memra_sample_params){
            .temperature = i % 3 == 0 ? 0.0f : 0.6f + 0.1f * (float)(i % 5),
            .top_k = i % 4 == 1 ? 20 : 0, .top_p = i % 4 == 2 ? 0.9f : 1.0f, .seed = 1000u + (uint64_t)i};
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
                         "logit %u: got %.9g want %.9g", what, q, k, r, active, j, (double)got[j],
                         (double)want[j]);
        }
    }
    ck_assert_msg(h == s->hash[k], "%s: sequence %d step %d (row %d of %d): logits hash %016llx, "
                  "reference %016llx", what, q, k, r, active, (unsigned long long)h,
                  (unsigned long long)s->hash[k]);
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
            ck_assert_int_eq(memra_cuda_session_admit(c->be, &gt->s[next].params, &sid[active], &err),
                             MEMRA_OK);
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
        memra_cuda_step st = {.n_rows = (uint32_t)active, .sessions = rows, .tokens = toks,
                              .out_tokens = out};
        ck_assert_msg(memra_cuda_backend_step(c->be, &st, &err) == MEMRA_OK, "%s: %s", what, err.msg);
        ck_assert_int_eq(memra_cuda_backend_logits(c->be, 0, (uint32_t)active, gt->rows, &err), MEMRA_OK);
        for (int r = 0; r < active; r++) {
            const int q = idx[order[r]], k = step[q]++;
            gate_check_row(gt, q, k, r, active, what, record);
            if (record)
                gt->s[q].sampled[k] = out[r];
            else
                ck_assert_msg(out[r] == gt->s[q].sampled[k], "%s: sequence %d step %d sampled %d, "
                              "reference %d", what, q, k, out[r], gt->s[q].sampled[k]);
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
