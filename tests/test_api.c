/*
 * test_api.c — the public C API (include/memra.h, runtime/api.c) on the CPU backend.
 *
 * Two forged models, made once for the suite: `small`, a 4-layer qwen35 (3 GDN layers, 1
 * attention layer, q8_0, a 320-token synthetic vocabulary whose plain ChatML template memra
 * does not recognize) for everything that steps, the agreement with the hand-written
 * reference model included, and `tiny` (the forge preset with the real Qwen3.5 vocabulary
 * and chat template) for the text calls. What is checked:
 *   - open refuses bad configs, missing files and stale plans with a code and a message;
 *   - a session's logits through memra_step equal the reference model's, bit for bit;
 *   - isolation through the API: sessions stepped together (prompt and generation rows
 *     mixed, split into several ticks, greedy and seeded sampling) give each row the same
 *     logits bits and tokens as the session stepped alone (memcmp);
 *   - a bad row is refused alone: the others' results are unchanged and the refused
 *     session's state is untouched;
 *   - slots: exhaustion, reuse after close (a reused slot starts clean), feed capacity;
 *   - text: tokenize / detokenize / streaming round trips, the capacity protocol, invalid
 *     UTF-8, chat formatting with a recognized and an unrecognized template.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forge.h"
#include "forge_vocab_hf.h"
#include "memra.h"
#include "planner.h"
#include "refmodel.h"
#include "test_util.h"

#define N_CTX 48

static char g_small[512], g_tiny[512], g_small_plans[512];
static int g_ok;

static const memra_forge_shape k_small = {.name = "api-small",
                                          .arch = "qwen35",
                                          .n_layer = 4,
                                          .n_embd = 128,
                                          .n_head = 2,
                                          .n_head_kv = 1,
                                          .head_dim = 64,
                                          .rope_dim = 16,
                                          .n_ff = 256,
                                          .ssm_n_group = 2,
                                          .ssm_dt_rank = 4,
                                          .ssm_d_state = 32,
                                          .ssm_d_conv = 4,
                                          .full_attn_interval = 4,
                                          .n_vocab = 0,
                                          .n_ctx_train = 4096,
                                          .provenance = "tests/test_api.c"};

static int forge(const char *path, const memra_forge_shape *shape, const char *preset)
{
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = shape ? shape : memra_forge_preset(preset);
    o.seed = 11;
    o.n_threads = 1;
    memra_err err;
    memra_err_clear(&err);
    memra_forge_vocab *v = NULL;
    if (shape) {
        o.mix = MEMRA_FORGE_MIX_NONE;
        o.type = MEMRA_QT_Q8_0;
    }
    /* small: the synthetic vocabulary; tiny: the real Qwen3.5 one with its chat template */
    const int vrc = shape ? memra_forge_vocab_synthetic(0, 59, &v, &err)
                          : memra_forge_vocab_qwen35(NULL, NULL, 0, &v, &err);
    if (vrc != MEMRA_OK) {
        fprintf(stderr, "vocabulary: %s\n", err.msg);
        return -1;
    }
    o.vocab = v;
    const int rc = o.shape ? memra_forge_write(&o, path, &err) : MEMRA_ERR_NOT_FOUND;
    memra_forge_vocab_free(v);
    if (rc != MEMRA_OK)
        fprintf(stderr, "forge %s: %s\n", path, err.msg);
    return rc;
}

static void suite_setup(void)
{
    tu_tmp_path(g_small, sizeof g_small, "-api-small.gguf");
    tu_tmp_path(g_tiny, sizeof g_tiny, "-api-tiny.gguf");
    tu_tmp_path(g_small_plans, sizeof g_small_plans, "-api-small-plans");
    if (forge(g_small, &k_small, NULL) || forge(g_tiny, NULL, "tiny"))
        return;
    memra_planner_opts po;
    memra_planner_opts_init(&po);
    po.model_path = g_small;
    po.out_dir = g_small_plans;
    po.n_tiers = 3;
    po.tiers[0] = 1, po.tiers[1] = 2, po.tiers[2] = 4;
    memra_planner_result *res = NULL;
    memra_err err;
    memra_err_clear(&err);
    if (memra_planner_run(&po, &res, &err) != MEMRA_OK) {
        fprintf(stderr, "planning: %s\n", err.msg);
        return;
    }
    memra_planner_result_free(res);
    g_ok = 1;
}

static void suite_teardown(void)
{
    unlink(g_small);
    unlink(g_tiny);
    memra_planner_remove_dir(g_small_plans);
}

/* An engine on `small`'s plans (tiers 1, 2, 4), CPU backend. */
static memra_engine *open_small(uint32_t n_slots, uint32_t n_ctx)
{
    ck_assert_msg(g_ok, "fixture (forge + planner) failed; see stderr");
    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = g_small;
    c.plan_dir = g_small_plans;
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = n_slots;
    c.n_ctx = n_ctx;
    memra_engine *e = NULL;
    ck_assert_msg(memra_engine_open(&c, &e) == MEMRA_OK, "%s", memra_last_error());
    return e;
}

/* ================================= open and info ===================================== */

START_TEST(test_open_errors)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine *e = (memra_engine *)1;
    ck_assert_int_eq(memra_engine_open(NULL, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(memra_last_error(), "model_path"), "%s", memra_last_error());

    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = "/nonexistent/model.gguf";
    c.backend = MEMRA_BACKEND_CPU;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_IO);
    ck_assert_msg(strstr(memra_last_error(), "/nonexistent/model.gguf"), "%s", memra_last_error());

    c.model_path = g_small;
    c.backend = 7;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_INVALID_ARG);
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = 0;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_INVALID_ARG);
    c.n_slots = 2;
    c.plan_dir = g_small_plans;
    c.n_tiers = 1;
    c.tiers[0] = 1;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_INVALID_ARG);
    ck_assert_msg(strstr(memra_last_error(), "in-process"), "%s", memra_last_error());

    /* small's plans against tiny: refused as stale, naming the mismatch */
    c.n_tiers = 0;
    c.model_path = g_tiny;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_STALE_PLAN);
    ck_assert_ptr_null(e);
    ck_assert_msg(strlen(memra_last_error()) > 20, "%s", memra_last_error());

    /* a file that is not GGUF */
    char bad[512];
    tu_tmp_path(bad, sizeof bad, "-api-bad.gguf");
    FILE *f = fopen(bad, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("not a gguf file at all, just text", f);
    fclose(f);
    c.model_path = bad;
    c.plan_dir = NULL;
    ck_assert_int_eq(memra_engine_open(&c, &e), MEMRA_ERR_FORMAT);
    unlink(bad);

    /* CUDA where there is none: a code and a reason; where there is a GPU it opens */
    c.model_path = g_small;
    c.backend = MEMRA_BACKEND_CUDA;
    const int rc = memra_engine_open(&c, &e);
    if (rc == MEMRA_OK)
        memra_engine_close(e);
    else
        ck_assert_msg((rc == MEMRA_ERR_UNSUPPORTED || rc == MEMRA_ERR_CUDA) &&
                          strlen(memra_last_error()) > 0,
                      "rc %d: %s", rc, memra_last_error());
    memra_engine_close(NULL);
}
END_TEST

START_TEST(test_info_and_in_process_plans)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = g_small;
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = 3;
    c.n_ctx = 40;
    c.n_tiers = 2;
    c.tiers[0] = 1, c.tiers[1] = 3;
    memra_engine *e = NULL;
    ck_assert_msg(memra_engine_open(&c, &e) == MEMRA_OK, "%s", memra_last_error());
    memra_engine_info in;
    ck_assert_int_eq(memra_engine_get_info(e, &in), MEMRA_OK);
    ck_assert_str_eq(in.arch, "qwen35");
    ck_assert_str_eq(in.backend, "cpu");
    ck_assert_str_eq(in.device, "cpu");
    ck_assert_uint_eq(in.n_layer, 4);
    ck_assert_uint_eq(in.n_embd, 128);
    ck_assert_uint_eq(in.n_vocab, 320);
    ck_assert_uint_eq(in.n_slots, 3);
    ck_assert_uint_eq(in.n_ctx, 40);
    ck_assert_uint_eq(in.n_tiers, 2);
    ck_assert_uint_eq(in.tiers[0], 1);
    ck_assert_uint_eq(in.tiers[1], 3);
    ck_assert_uint_eq(in.max_rows, 3);
    ck_assert_int_eq(in.has_tokenizer, 1);
    ck_assert_int_eq(in.has_chat_template, 0); /* plain ChatML: not a template memra renders */
    ck_assert_int_eq(in.bos, 315);
    ck_assert_int_eq(memra_engine_get_info(e, NULL), MEMRA_ERR_INVALID_ARG);
    ck_assert_str_eq(memra_version(), "0.1.0");
    memra_engine_close(e);
}
END_TEST

/* ============================== agreement and isolation ============================== */

START_TEST(test_matches_reference_model)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine *e = open_small(2, N_CTX);
    memra_engine_info in;
    memra_engine_get_info(e, &in);
    memra_ref_model_config rc;
    memra_ref_model_config_default(&rc);
    memra_ref_model *m = NULL;
    memra_ref_seq *rs = NULL;
    memra_err err;
    memra_err_clear(&err);
    ck_assert_msg(memra_ref_model_open(g_small, &rc, &m, &err) == MEMRA_OK, "%s", err.msg);
    ck_assert_msg(memra_ref_seq_init(m, N_CTX, &rs, &err) == MEMRA_OK, "%s", err.msg);
    float *want = malloc(in.n_vocab * sizeof *want), *got = malloc(in.n_vocab * sizeof *got);
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(got);
    memra_session *s = NULL;
    ck_assert_int_eq(memra_session_open(e, NULL, &s), MEMRA_OK);
    static const int32_t prompt[] = {40, 7, 300, 12};
    int32_t tok = prompt[0];
    for (int t = 0; t < 16; t++) {
        memra_row row = {.session = s, .token = tok, .logits = got};
        ck_assert_int_eq(memra_step(e, &row, 1), MEMRA_OK);
        ck_assert_int_eq(row.status, MEMRA_OK);
        ck_assert_msg(memra_ref_forward(m, rs, tok, want, &err) == MEMRA_OK, "%s", err.msg);
        ck_assert_msg(!memcmp(got, want, in.n_vocab * sizeof *got), "logits differ at step %d", t);
        ck_assert_int_eq(row.out_token, memra_ref_argmax(want, (int32_t)in.n_vocab));
        ck_assert_uint_eq(memra_session_pos(s), (uint32_t)t + 1);
        tok = t + 1 < 4 ? prompt[t + 1] : row.out_token;
    }
    free(want);
    free(got);
    memra_ref_seq_free(rs);
    memra_ref_model_close(m);
    memra_engine_close(e);
}
END_TEST

#define N_SEQ 6
#define N_STEPS 12

typedef struct seq_spec {
    int32_t prompt[8];
    int n_prompt;
    memra_sampling smp;
} seq_spec;

static void make_specs(seq_spec *sp)
{
    for (int i = 0; i < N_SEQ; i++) {
        memset(&sp[i], 0, sizeof sp[i]);
        sp[i].n_prompt = 1 + i % 5;
        for (int k = 0; k < sp[i].n_prompt; k++)
            sp[i].prompt[k] = (int32_t)((37 * i + 11 * k + 5) % 300);
        memra_sampling_init(&sp[i].smp);
        if (i % 2) { /* odd sessions sample, each with its own seed */
            sp[i].smp.temperature = 0.9f;
            sp[i].smp.top_k = 40;
            sp[i].smp.top_p = 0.95f;
            sp[i].smp.seed = 1000 + (uint64_t)i;
        }
    }
}

/* Runs the sessions in `which` (indices into sp, in this row order) in lockstep for N_STEPS
 * steps on e, recording logits [i][step][n_vocab] and tokens [i][step]. */
static void run_lockstep(memra_engine *e, const seq_spec *sp, const int *which, int n,
                         float *logits, int32_t *tokens, uint32_t n_vocab)
{
    memra_session *s[N_SEQ];
    int32_t cur[N_SEQ];
    for (int r = 0; r < n; r++) {
        ck_assert_msg(memra_session_open(e, &sp[which[r]].smp, &s[r]) == MEMRA_OK, "%s",
                      memra_last_error());
        cur[r] = sp[which[r]].prompt[0];
    }
    for (int t = 0; t < N_STEPS; t++) {
        memra_row rows[N_SEQ];
        for (int r = 0; r < n; r++) {
            const int i = which[r];
            rows[r] = (memra_row){.session = s[r],
                                  .token = cur[r],
                                  .logits = logits + ((size_t)i * N_STEPS + t) * n_vocab};
        }
        ck_assert_msg(memra_step(e, rows, (size_t)n) == MEMRA_OK, "%s", memra_last_error());
        for (int r = 0; r < n; r++) {
            const int i = which[r];
            ck_assert_int_eq(rows[r].status, MEMRA_OK);
            tokens[i * N_STEPS + t] = rows[r].out_token;
            cur[r] = t + 1 < sp[i].n_prompt ? sp[i].prompt[t + 1] : rows[r].out_token;
        }
    }
    for (int r = 0; r < n; r++)
        memra_session_close(s[r]);
}

START_TEST(test_batch_isolation)
{
    ck_assert_msg(g_ok, "fixture failed");
    seq_spec sp[N_SEQ];
    make_specs(sp);
    memra_engine *e = open_small(N_SEQ, N_CTX); /* tiers 1, 2, 4: 6 rows = ticks of 4 and 2 */
    const uint32_t nv = 320;
    const size_t per = (size_t)N_SEQ * N_STEPS * nv;
    float *alone = malloc(per * sizeof *alone), *batch = malloc(per * sizeof *batch);
    int32_t tok_alone[N_SEQ * N_STEPS], tok_batch[N_SEQ * N_STEPS];
    ck_assert_ptr_nonnull(alone);
    ck_assert_ptr_nonnull(batch);
    for (int i = 0; i < N_SEQ; i++)
        run_lockstep(e, sp, &i, 1, alone, tok_alone, nv);
    static const int order[N_SEQ] = {3, 0, 5, 1, 4, 2}; /* not the spec order */
    run_lockstep(e, sp, order, N_SEQ, batch, tok_batch, nv);
    ck_assert_msg(!memcmp(tok_alone, tok_batch, sizeof tok_alone), "tokens differ");
    for (int i = 0; i < N_SEQ; i++)
        for (int t = 0; t < N_STEPS; t++)
            ck_assert_msg(!memcmp(alone + ((size_t)i * N_STEPS + t) * nv,
                                  batch + ((size_t)i * N_STEPS + t) * nv, nv * sizeof(float)),
                          "session %d step %d: logits differ between alone and batched", i, t);
    /* a sampled session really sampled: some token differs from the logits' argmax */
    int differs = 0;
    for (int t = 0; t < N_STEPS; t++)
        differs |= tok_alone[1 * N_STEPS + t] !=
                   memra_ref_argmax(alone + ((size_t)1 * N_STEPS + t) * nv, (int32_t)nv);
    ck_assert_msg(differs, "temperature 0.9 never left the argmax in %d steps", N_STEPS);
    /* 6 sessions alone: 6 x 12 ticks of one row; together: 12 steps of 6 rows = 12 x (4 + 2) */
    memra_engine_stats st;
    ck_assert_int_eq(memra_engine_get_stats(e, &st), MEMRA_OK);
    ck_assert_uint_eq(st.ticks, N_SEQ * N_STEPS + 2 * N_STEPS);
    ck_assert_uint_eq(st.rows, 2 * N_SEQ * N_STEPS);
    ck_assert_msg(st.last_tick_ms > 0, "last tick %g ms", st.last_tick_ms);
    free(alone);
    free(batch);
    memra_engine_close(e);
}
END_TEST

/* ================================= refusals and slots ================================ */

START_TEST(test_bad_rows_fail_alone)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine *e = open_small(4, 6);
    const uint32_t nv = 320;
    memra_session *a, *b, *full;
    ck_assert_int_eq(memra_session_open(e, NULL, &a), MEMRA_OK);
    ck_assert_int_eq(memra_session_open(e, NULL, &b), MEMRA_OK);
    ck_assert_int_eq(memra_session_open(e, NULL, &full), MEMRA_OK);
    static const int32_t six[] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(memra_session_feed(e, full, six, 6, NULL), MEMRA_OK);
    ck_assert_uint_eq(memra_session_pos(full), 6);

    /* the reference: a and b alone, one step from position 0 */
    float ref_a[320], ref_b[320], got_a[320], got_b[320];
    {
        memra_engine *r = open_small(2, 6);
        memra_session *ra, *rb;
        ck_assert_int_eq(memra_session_open(r, NULL, &ra), MEMRA_OK);
        ck_assert_int_eq(memra_session_open(r, NULL, &rb), MEMRA_OK);
        memra_row x = {.session = ra, .token = 17, .logits = ref_a};
        memra_row y = {.session = rb, .token = 99, .logits = ref_b};
        ck_assert_int_eq(memra_step(r, &x, 1), MEMRA_OK);
        ck_assert_int_eq(memra_step(r, &y, 1), MEMRA_OK);
        memra_engine_close(r);
    }
    memra_engine *other = open_small(1, 6);
    memra_session *foreign;
    ck_assert_int_eq(memra_session_open(other, NULL, &foreign), MEMRA_OK);

    memra_row rows[] = {
        {.session = a, .token = 17, .logits = got_a}, /* ok */
        {.session = NULL, .token = 1},                /* no session */
        {.session = b, .token = -3},                  /* token out of range */
        {.session = a, .token = 17},                  /* a twice */
        {.session = full, .token = 1},                /* full */
        {.session = foreign, .token = 1},             /* another engine's session */
        {.session = b, .token = (int32_t)nv},         /* b again, also out of range */
    };
    const size_t n = sizeof rows / sizeof rows[0];
    ck_assert_int_eq(memra_step(e, rows, n), MEMRA_OK);
    ck_assert_msg(strstr(memra_last_error(), "row 1"), "%s", memra_last_error());
    static const int want[] = {
        MEMRA_OK,           MEMRA_ERR_INVALID_ARG, MEMRA_ERR_INVALID_ARG, MEMRA_ERR_INVALID_ARG,
        MEMRA_ERR_CAPACITY, MEMRA_ERR_INVALID_ARG, MEMRA_ERR_INVALID_ARG};
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(rows[i].status == want[i], "row %zu: status %d, want %d", i, rows[i].status,
                      want[i]);
        if (i)
            ck_assert_int_eq(rows[i].out_token, -1);
    }
    ck_assert_msg(!memcmp(got_a, ref_a, sizeof got_a), "a's logits changed by the bad rows");
    ck_assert_uint_eq(memra_session_pos(a), 1);
    ck_assert_uint_eq(memra_session_pos(b), 0); /* refused rows consume nothing */
    ck_assert_uint_eq(memra_session_pos(full), 6);
    /* b's state is untouched: its first real step equals the reference */
    memra_row y = {.session = b, .token = 99, .logits = got_b};
    ck_assert_int_eq(memra_step(e, &y, 1), MEMRA_OK);
    ck_assert_msg(!memcmp(got_b, ref_b, sizeof got_b), "b's logits changed");

    ck_assert_int_eq(memra_step(e, NULL, 1), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_step(e, rows, 0), MEMRA_ERR_INVALID_ARG);
    memra_session_close(foreign);
    memra_engine_close(other);
    memra_engine_close(e); /* closes a, b, full */
}
END_TEST

START_TEST(test_slots_and_feed)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine *e = open_small(2, 8);
    memra_session *s1, *s2, *s3 = (memra_session *)1;
    ck_assert_int_eq(memra_session_open(e, NULL, &s1), MEMRA_OK);
    ck_assert_int_eq(memra_session_open(e, NULL, &s2), MEMRA_OK);
    ck_assert_int_eq(memra_session_open(e, NULL, &s3), MEMRA_ERR_CAPACITY);
    ck_assert_ptr_null(s3);
    ck_assert_msg(strstr(memra_last_error(), "capacity"), "%s", memra_last_error());

    /* fill s1, close it, reopen: the reused slot starts clean (same bits as s2, fresh) */
    static const int32_t p[] = {9, 8, 7, 6, 5};
    int32_t n1 = -1, n2 = -1;
    ck_assert_int_eq(memra_session_feed(e, s1, p, 5, &n1), MEMRA_OK);
    memra_session_close(s1);
    ck_assert_int_eq(memra_session_open(e, NULL, &s3), MEMRA_OK);
    ck_assert_uint_eq(memra_session_pos(s3), 0);
    float l3[320], l2[320];
    ck_assert_int_eq(memra_session_feed(e, s3, p, 4, NULL), MEMRA_OK);
    ck_assert_int_eq(memra_session_feed(e, s2, p, 4, NULL), MEMRA_OK);
    memra_row r3 = {.session = s3, .token = p[4], .logits = l3};
    memra_row r2 = {.session = s2, .token = p[4], .logits = l2};
    ck_assert_int_eq(memra_step(e, &r3, 1), MEMRA_OK);
    ck_assert_int_eq(memra_step(e, &r2, 1), MEMRA_OK);
    ck_assert_msg(!memcmp(l3, l2, sizeof l3), "a reused slot kept its old state");
    ck_assert_int_eq(r3.out_token, n1);

    /* feed: over capacity refused whole, nothing fed; bad ids refused */
    ck_assert_int_eq(memra_session_feed(e, s2, p, 4, &n2), MEMRA_ERR_CAPACITY);
    ck_assert_uint_eq(memra_session_pos(s2), 5);
    static const int32_t bad[] = {1, 320};
    ck_assert_int_eq(memra_session_feed(e, s2, bad, 2, &n2), MEMRA_ERR_INVALID_ARG);
    ck_assert_uint_eq(memra_session_pos(s2), 5);
    ck_assert_int_eq(memra_session_feed(e, s2, p, 3, &n2), MEMRA_OK); /* exactly full */
    memra_row last = {.session = s2, .token = 1};
    ck_assert_int_eq(memra_step(e, &last, 1), MEMRA_OK);
    ck_assert_int_eq(last.status, MEMRA_ERR_CAPACITY);

    /* sampling: NaN refused, a change takes effect */
    memra_sampling smp;
    memra_sampling_init(&smp);
    smp.temperature = 0.0f / 0.0f;
    ck_assert_int_eq(memra_session_set_sampling(s3, &smp), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_session_set_sampling(s3, NULL), MEMRA_OK);
    ck_assert_int_eq(memra_session_failed(s3), 0);
    memra_engine_close(e);
}
END_TEST

/* ======================================= text ======================================== */

START_TEST(test_text)
{
    ck_assert_msg(g_ok, "fixture failed");
    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = g_tiny;
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = 1;
    c.n_ctx = 16;
    c.n_tiers = 1;
    c.tiers[0] = 1;
    memra_engine *e = NULL;
    ck_assert_msg(memra_engine_open(&c, &e) == MEMRA_OK, "%s", memra_last_error());
    memra_engine_info in;
    memra_engine_get_info(e, &in);
    ck_assert_int_eq(in.has_tokenizer, 1);

    static const char text[] = "Hello, world! Grüße, 日本語 and emoji \xF0\x9F\x98\x80 ok";
    size_t n = 0;
    ck_assert_int_eq(memra_tokenize(e, text, strlen(text), 0, NULL, 0, &n), MEMRA_ERR_CAPACITY);
    ck_assert_uint_gt(n, 5);
    int32_t ids[256];
    size_t n2 = 0;
    ck_assert_int_eq(memra_tokenize(e, text, strlen(text), 0, ids, 2, &n2), MEMRA_ERR_CAPACITY);
    ck_assert_uint_eq(n2, n);
    ck_assert_int_eq(memra_tokenize(e, text, strlen(text), 0, ids, 256, &n2), MEMRA_OK);
    ck_assert_uint_eq(n2, n);
    char *back = NULL;
    size_t blen = 0;
    ck_assert_int_eq(memra_detokenize(e, ids, n, 0, &back, &blen), MEMRA_OK);
    ck_assert_str_eq(back, text);
    ck_assert_uint_eq(blen, strlen(text));
    memra_free(back);

    /* streaming: the pieces concatenate to the text, and only whole characters come out */
    memra_text_stream *ts = NULL;
    ck_assert_int_eq(memra_text_stream_open(e, 0, &ts), MEMRA_OK);
    char acc[256] = "";
    size_t alen = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        ck_assert_int_eq(memra_text_stream_push(ts, ids[i], &p, &l), MEMRA_OK);
        ck_assert_uint_lt(alen + l, sizeof acc);
        memcpy(acc + alen, p, l);
        alen += l;
    }
    const char *p;
    size_t l;
    ck_assert_int_eq(memra_text_stream_flush(ts, &p, &l), MEMRA_OK);
    memcpy(acc + alen, p, l);
    acc[alen + l] = '\0';
    ck_assert_str_eq(acc, text);
    memra_text_stream_close(ts);

    /* invalid UTF-8 in: one U+FFFD per bad byte here; a bad id out */
    ck_assert_int_eq(memra_tokenize(e,
                                    "a\xFF"
                                    "b",
                                    3, 0, ids, 256, &n),
                     MEMRA_OK);
    ck_assert_int_eq(memra_detokenize(e, ids, n, 0, &back, &blen), MEMRA_OK);
    ck_assert_str_eq(back, "a\xEF\xBF\xBD"
                           "b");
    memra_free(back);
    const int32_t bad = (int32_t)in.n_vocab;
    ck_assert_int_eq(memra_detokenize(e, &bad, 1, 0, &back, &blen), MEMRA_ERR_INVALID_ARG);
    ck_assert_ptr_null(back);
    ck_assert_int_eq(memra_tokenize(e, text, strlen(text), 0x80, ids, 256, &n),
                     MEMRA_ERR_INVALID_ARG);

    /* chat: the Qwen3.5 template, rendered, then its control tokens parsed */
    ck_assert_int_eq(in.has_chat_template, 1);
    const memra_chat_message msgs[] = {{"system", "Be brief.", NULL}, {"user", "Hi!", NULL}};
    char *chat = NULL;
    size_t clen = 0;
    ck_assert_msg(memra_chat_apply(e, msgs, 2, 1, 0, &chat, &clen) == MEMRA_OK, "%s",
                  memra_last_error());
    ck_assert_msg(strstr(chat, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"), "%s",
                  chat);
    ck_assert_uint_eq(clen, strlen(chat));
    size_t nc = 0;
    ck_assert_int_eq(memra_tokenize(e, chat, clen, MEMRA_TEXT_PARSE_SPECIAL, ids, 256, &nc),
                     MEMRA_OK);
    ck_assert_int_eq(
        memra_tokenize(e, "<|im_end|>", 10, MEMRA_TEXT_PARSE_SPECIAL, ids + 200, 8, &n), MEMRA_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(memra_token_is_eog(e, ids[200]), 1);
    ck_assert_int_eq(memra_token_is_eog(e, ids[0]), 0);
    memra_free(chat);
    const memra_chat_message bad_role[] = {{NULL, "x", NULL}};
    ck_assert_int_eq(memra_chat_apply(e, bad_role, 1, 1, -1, &chat, &clen), MEMRA_ERR_INVALID_ARG);
    ck_assert_int_eq(memra_chat_apply(e, msgs, 2, 1, 5, &chat, &clen), MEMRA_ERR_INVALID_ARG);
    memra_engine_close(e);

    /* small's plain ChatML is refused with the reason */
    memra_engine *s = open_small(1, 8);
    ck_assert_int_eq(memra_chat_apply(s, msgs, 2, 1, -1, &chat, &clen), MEMRA_ERR_UNSUPPORTED);
    ck_assert_ptr_null(chat);
    ck_assert_msg(strlen(memra_last_error()) > 20, "%s", memra_last_error());
    memra_engine_close(s);
}
END_TEST

Suite *make_api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");
    tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_info_and_in_process_plans);
    tcase_add_test(tc, test_matches_reference_model);
    tcase_add_test(tc, test_batch_isolation);
    tcase_add_test(tc, test_bad_rows_fail_alone);
    tcase_add_test(tc, test_slots_and_feed);
    tcase_add_test(tc, test_text);
    suite_add_tcase(s, tc);
    return s;
}
