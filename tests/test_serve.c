/*
 * test_serve.c — memra-serve's server (tools/serve.c) in-process on the CPU backend, spoken to
 * over real sockets with a minimal HTTP/1.0 client (so streamed responses come unchunked).
 *
 * The model is a 4-layer qwen35 with a 320-token synthetic vocabulary (its plain ChatML
 * template is not one memra renders, so chat requests are refused with the reason here; the
 * openai-client check in scripts/test.sh covers chat on the real template). What is checked:
 *   - routes, methods, malformed and unsupported requests, a model name that is not served,
 *     a prompt over the context, a body over the limit: the status and an OpenAI error body;
 *   - a completion equals what the public API gives for the same prompt (greedy);
 *   - isolation through HTTP: requests sent together (sampled, each with its own seed)
 *     return the same text as each sent alone;
 *   - streaming: the events' text concatenates to the non-streamed text, the last event
 *     has the finish reason and usage, then "data: [DONE]";
 *   - stop strings cut the text (streamed or not) and finish with "stop".
 */
#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "forge.h"
#include "memra.h"
#include "serve.h"
#include "test_util.h"

static char g_model[512];
static memra_engine *g_e;
static memra_server *g_sv;
static uint16_t g_port;
static int g_forged;

static const memra_forge_shape k_shape = {.name = "serve-small",
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
                                          .provenance = "tests/test_serve.c"};

#define N_CTX 64

static void setup(void)
{
    tu_tmp_path(g_model, sizeof g_model, "-serve.gguf");
    memra_forge_opts o;
    memra_forge_opts_init(&o);
    o.shape = &k_shape;
    o.seed = 5;
    o.n_threads = 1;
    o.mix = MEMRA_FORGE_MIX_NONE;
    o.type = MEMRA_QT_Q8_0;
    memra_err err;
    memra_err_clear(&err);
    memra_forge_vocab *v = NULL;
    if (memra_forge_vocab_synthetic(0, 59, &v, &err) != MEMRA_OK)
        return;
    o.vocab = v;
    const int rc = memra_forge_write(&o, g_model, &err);
    memra_forge_vocab_free(v);
    if (rc != MEMRA_OK)
        fprintf(stderr, "forge: %s\n", err.msg);
    else
        g_forged = 1;
}

/* Per test (a checked fixture: in the test's own process when Check forks, so no server
 * thread outlives its test): the engine and the server. */
static void server_up(void)
{
    if (!g_forged)
        return;
    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = g_model;
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = 6;
    c.n_ctx = N_CTX;
    c.n_tiers = 3;
    c.tiers[0] = 1, c.tiers[1] = 2, c.tiers[2] = 4;
    if (memra_engine_open(&c, &g_e) != MEMRA_OK) {
        fprintf(stderr, "engine: %s\n", memra_last_error());
        return;
    }
    memra_serve_opts so;
    memra_serve_opts_init(&so);
    so.model_name = "small";
    so.max_body = 64 * 1024;
    so.default_max_tokens = 12;
    char msg[256];
    if (memra_serve_start(g_e, &so, &g_sv, msg, sizeof msg) != MEMRA_OK) {
        fprintf(stderr, "serve: %s\n", msg);
        return;
    }
    g_port = memra_serve_port(g_sv);
}

static void server_down(void)
{
    memra_serve_stop(g_sv);
    memra_engine_close(g_e);
    g_sv = NULL, g_e = NULL;
}

static void teardown(void)
{
    unlink(g_model);
}

/* ================================== a tiny client ==================================== */

typedef struct resp {
    int status;
    char *body; /* NUL-terminated */
} resp;

/* One HTTP/1.0 exchange; body NULL sends no body. */
static resp http(const char *method, const char *path, const char *body)
{
    resp r = {0, NULL};
    ck_assert_msg(g_sv, "server fixture failed; see stderr");
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const size_t blen = body ? strlen(body) : 0;
    char head[256];
    const int hn = snprintf(head, sizeof head,
                            "%s %s HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\n\r\n",
                            method, path, blen);
    ck_assert_int_eq(write(fd, head, (size_t)hn), hn);
    for (size_t off = 0; off < blen;) {
        const ssize_t w = write(fd, body + off, blen - off);
        if (w <= 0)
            break; /* the server may answer (413) and close before reading it all */
        off += (size_t)w;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 2048 > cap)
            buf = realloc(buf, cap *= 2);
        const ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    sscanf(buf, "HTTP/1.%*d %d", &r.status);
    const char *b = strstr(buf, "\r\n\r\n");
    r.body = strdup(b ? b + 4 : "");
    free(buf);
    return r;
}

static json_t *json_of(const resp *r)
{
    json_t *v = json_loads(r->body, JSON_ALLOW_NUL, NULL); /* text may hold U+0000 */
    ck_assert_msg(v, "not JSON: %s", r->body);
    return v;
}

/* A request's status and, for an error, that the body is OpenAI's error shape. */
static void expect_error(const char *method, const char *path, const char *body, int status,
                         const char *needle)
{
    resp r = http(method, path, body);
    ck_assert_msg(r.status == status, "%s %s: status %d, want %d: %s", method, path, r.status,
                  status, r.body);
    json_t *v = json_of(&r);
    const char *msg = json_string_value(json_object_get(json_object_get(v, "error"), "message"));
    ck_assert_msg(msg && strstr(msg, needle), "message '%s' lacks '%s'", msg ? msg : "(none)",
                  needle);
    json_decref(v);
    free(r.body);
}

/* text, finish_reason, completion_tokens of a completion response */
static char *completion(const char *body, const char **finish, int *n_gen)
{
    resp r = http("POST", "/v1/completions", body);
    ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *v = json_of(&r);
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    char *text = strdup(json_string_value(json_object_get(c, "text")));
    static char fin[16];
    snprintf(fin, sizeof fin, "%s", json_string_value(json_object_get(c, "finish_reason")));
    if (finish)
        *finish = fin;
    if (n_gen)
        *n_gen = (int)json_integer_value(
            json_object_get(json_object_get(v, "usage"), "completion_tokens"));
    ck_assert_str_eq(json_string_value(json_object_get(v, "object")), "text_completion");
    json_decref(v);
    free(r.body);
    return text;
}

/* ======================================= tests ======================================= */

START_TEST(test_routes_and_errors)
{
    resp r = http("GET", "/health", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"status\":\"ok\""), "%s", r.body);
    free(r.body);
    r = http("GET", "/v1/models", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"id\":\"small\""), "%s", r.body);
    free(r.body);
    expect_error("GET", "/nope", NULL, 404, "no route");
    expect_error("GET", "/v1/completions", NULL, 405, "POST");
    expect_error("POST", "/v1/completions", "{not json", 400, "JSON");
    expect_error("POST", "/v1/completions", "[1,2]", 400, "JSON object");
    expect_error("POST", "/v1/completions", "{\"model\":\"gpt-4\",\"prompt\":\"hi\"}", 404,
                 "gpt-4");
    expect_error("POST", "/v1/completions", "{\"prompt\":\"hi\",\"n\":2}", 400, "'n'");
    expect_error("POST", "/v1/completions", "{\"prompt\":\"hi\",\"logprobs\":3}", 400, "logprobs");
    expect_error("POST", "/v1/completions", "{\"prompt\":\"hi\",\"frequency_penalty\":0.5}", 400,
                 "frequency_penalty");
    expect_error("POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"auto\"}",
                 400, "tool_choice");
    { /* a message cut inside a multi-byte character by the length limit is still sent */
        char body[1024] = "{\"model\":\"";
        for (int i = 0; i < 300; i++)
            strcat(body, "\xC3\xA9"); /* é */
        strcat(body, "\",\"prompt\":\"hi\"}");
        expect_error("POST", "/v1/completions", body, 404, "model '\xC3\xA9");
    }
    expect_error("POST", "/v1/completions", "{\"prompt\":\"hi\",\"temperature\":3}", 400,
                 "temperature");
    expect_error("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":0}", 400,
                 "max_tokens");
    expect_error("POST", "/v1/completions", "{\"prompt\":[1,2,320]}", 400, "token id");
    expect_error("POST", "/v1/completions", "{\"prompt\":\"\"}", 400, "no tokens");
    expect_error("POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", 400, "one request per");
    expect_error("POST", "/v1/completions", "{\"max_tokens\":3}", 400, "'prompt'");
    expect_error("POST", "/v1/completions",
                 "{\"prompt\":\"hi\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop");
    /* the context holds 64 tokens: a 64-token prompt leaves none to generate */
    char big[1024] = "{\"prompt\":[";
    for (int i = 0; i < N_CTX; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s%d", i ? "," : "", 3 + i);
    strcat(big, "]}");
    expect_error("POST", "/v1/completions", big, 400, "context");
    /* a body over max_body (64 KiB) */
    char *huge = malloc(100 * 1024);
    memset(huge, ' ', 100 * 1024 - 1);
    huge[100 * 1024 - 1] = '\0';
    memcpy(huge, "{\"prompt\":\"", 11);
    expect_error("POST", "/v1/completions", huge, 413, "bytes");
    free(huge);
    /* chat on a template memra does not render: refused with the reason */
    expect_error("POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 400, "chat template");
    expect_error("POST", "/v1/chat/completions", "{\"messages\":[]}", 400, "messages");
}
END_TEST

START_TEST(test_completion_equals_api)
{
    ck_assert_msg(g_sv, "fixture failed");
    static const int32_t prompt[] = {17, 4, 250, 33, 9};
    /* the public API's own greedy text for this prompt, on a second engine */
    memra_engine_config c;
    memra_engine_config_init(&c);
    c.model_path = g_model;
    c.backend = MEMRA_BACKEND_CPU;
    c.n_slots = 1;
    c.n_ctx = N_CTX;
    c.n_tiers = 1;
    c.tiers[0] = 1;
    memra_engine *e = NULL;
    ck_assert_msg(memra_engine_open(&c, &e) == MEMRA_OK, "%s", memra_last_error());
    memra_session *s;
    memra_text_stream *ts;
    int32_t next;
    ck_assert_int_eq(memra_session_open(e, NULL, &s), MEMRA_OK);
    ck_assert_int_eq(memra_session_feed(e, s, prompt, 5, &next), MEMRA_OK);
    ck_assert_int_eq(memra_text_stream_open(e, 0, &ts), MEMRA_OK);
    char want[512] = "";
    int n_want = 0;
    for (; n_want < 10 && !memra_token_is_eog(e, next); n_want++) {
        const char *t;
        size_t l;
        ck_assert_int_eq(memra_text_stream_push(ts, next, &t, &l), MEMRA_OK);
        strncat(want, t, l);
        memra_row row = {.session = s, .token = next};
        ck_assert_int_eq(memra_step(e, &row, 1), MEMRA_OK);
        next = row.out_token;
    }
    const char *t;
    size_t l;
    ck_assert_int_eq(memra_text_stream_flush(ts, &t, &l), MEMRA_OK);
    strncat(want, t, l);
    memra_text_stream_close(ts);
    memra_session_close(s);
    memra_engine_close(e);

    const char *finish;
    int n_gen;
    char *got = completion("{\"model\":\"small\",\"prompt\":[17,4,250,33,9],\"max_tokens\":10,"
                           "\"temperature\":0}",
                           &finish, &n_gen);
    ck_assert_str_eq(got, want);
    ck_assert_int_eq(n_gen, n_want);
    ck_assert_str_eq(finish, n_want == 10 ? "length" : "stop");
    free(got);
}
END_TEST

#define N_PAR 6

typedef struct par_req {
    char body[256];
    char *text;
} par_req;

static void *par_thread(void *arg)
{
    par_req *p = arg;
    p->text = completion(p->body, NULL, NULL);
    return NULL;
}

START_TEST(test_concurrent_equals_alone)
{
    ck_assert_msg(g_sv, "fixture failed");
    par_req req[N_PAR];
    char *alone[N_PAR];
    for (int i = 0; i < N_PAR; i++) {
        snprintf(req[i].body, sizeof req[i].body,
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0.9,\"top_k\":30,"
                 "\"seed\":%d}",
                 i % 2 ? "the cat sat on" : "once upon a time there", 30 + i, 100 + i);
        alone[i] = completion(req[i].body, NULL, NULL);
    }
    pthread_t th[N_PAR];
    for (int i = 0; i < N_PAR; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, par_thread, &req[i]), 0);
    for (int i = 0; i < N_PAR; i++)
        pthread_join(th[i], NULL);
    /* they really shared ticks (else this test would compare serial runs) */
    resp h = http("GET", "/health", NULL);
    json_t *hv = json_of(&h);
    const json_int_t most = json_integer_value(json_object_get(hv, "max_rows_per_tick"));
    ck_assert_msg(most >= 2, "no tick held two requests: %s", h.body);
    json_decref(hv);
    free(h.body);
    for (int i = 0; i < N_PAR; i++) {
        ck_assert_msg(!strcmp(req[i].text, alone[i]), "request %d: '%s' together, '%s' alone", i,
                      req[i].text, alone[i]);
        free(req[i].text);
        free(alone[i]);
    }
    /* a seed is a seed: the same request again gives the same text */
    char *a = completion(req[0].body, NULL, NULL), *b = completion(req[0].body, NULL, NULL);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
}
END_TEST

/* The concatenated text of a streamed completion; checks the event protocol. */
static char *streamed(const char *body, char *finish, size_t fin_len)
{
    resp r = http("POST", "/v1/completions", body);
    ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
    char *text = calloc(1, 1);
    size_t tlen = 0;
    int done = 0;
    finish[0] = '\0';
    for (char *ev = r.body; (ev = strstr(ev, "data: ")); ev += 6) {
        ck_assert_msg(!done, "an event after [DONE]");
        if (!strncmp(ev + 6, "[DONE]", 6)) {
            done = 1;
            continue;
        }
        json_error_t je;
        json_t *v = json_loadb(ev + 6, strcspn(ev + 6, "\n"), JSON_ALLOW_NUL, &je);
        ck_assert_msg(v, "bad event: %.80s", ev);
        json_t *c = json_array_get(json_object_get(v, "choices"), 0);
        const char *t = json_string_value(json_object_get(c, "text"));
        ck_assert_ptr_nonnull(t);
        text = realloc(text, tlen + strlen(t) + 1);
        strcpy(text + tlen, t);
        tlen += strlen(t);
        const char *f = json_string_value(json_object_get(c, "finish_reason"));
        if (f) {
            snprintf(finish, fin_len, "%s", f);
            ck_assert_ptr_nonnull(json_object_get(v, "usage"));
        }
        json_decref(v);
    }
    ck_assert_msg(done && finish[0], "no final event or no [DONE]: %s", r.body);
    free(r.body);
    return text;
}

START_TEST(test_stream_and_stop)
{
    ck_assert_msg(g_sv, "fixture failed");
    const char *body = "{\"prompt\":\"a story\",\"max_tokens\":14,\"temperature\":0}";
    const char *fin;
    char *full = completion(body, &fin, NULL);
    char sfin[16];
    char *s =
        streamed("{\"prompt\":\"a story\",\"max_tokens\":14,\"temperature\":0,\"stream\":true}",
                 sfin, sizeof sfin);
    ck_assert_str_eq(s, full);
    ck_assert_str_eq(sfin, fin);
    free(s);
    ck_assert_msg(strlen(full) >= 6, "too little text to test stops: '%s'", full);

    /* a stop string from the middle of the greedy text: the text ends before it */
    char stop[8] = "", req[256];
    for (size_t i = 1; full[i] && full[i + 1] && !stop[0]; i++) /* two ASCII bytes past the start */
        if (full[i] > ' ' && full[i] < 127 && full[i + 1] > ' ' && full[i + 1] < 127 &&
            !strchr("\"\\", full[i]) && !strchr("\"\\", full[i + 1]))
            memcpy(stop, full + i, 2), stop[2] = '\0';
    ck_assert_msg(stop[0], "no ASCII pair in '%s' to stop at", full);
    const char *at = strstr(full, stop);
    json_t *js = json_string(stop);
    char *jstop = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    ck_assert_msg(jstop, "the stop text '%s' is not UTF-8", stop);
    snprintf(req, sizeof req,
             "{\"prompt\":\"a story\",\"max_tokens\":14,\"temperature\":0,\"stop\":[\"zzzz\",%s]}",
             jstop);
    free(jstop);
    char *cut = completion(req, &fin, NULL);
    ck_assert_uint_eq(strlen(cut), (size_t)(at - full));
    ck_assert_int_eq(strncmp(cut, full, strlen(cut)), 0);
    ck_assert_str_eq(fin, "stop");
    snprintf(req + strlen(req) - 1, sizeof req - strlen(req) + 1, ",\"stream\":true}");
    s = streamed(req, sfin, sizeof sfin);
    ck_assert_str_eq(s, cut);
    ck_assert_str_eq(sfin, "stop");
    free(s);
    free(cut);
    free(full);
}
END_TEST

Suite *make_serve_suite(void)
{
    Suite *s = suite_create("serve");
    TCase *tc = tcase_create("serve");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_checked_fixture(tc, server_up, server_down);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_routes_and_errors);
    tcase_add_test(tc, test_completion_equals_api);
    tcase_add_test(tc, test_concurrent_equals_alone);
    tcase_add_test(tc, test_stream_and_stop);
    suite_add_tcase(s, tc);
    return s;
}
