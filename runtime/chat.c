/*
 * chat.c — recognition of the Qwen3.5/3.6 chat templates and a C rendering of them (see
 * chat.h). Every string operation below is the Python/Jinja one the template applies
 * (`|trim` = str.strip(), .split('</think>')[0], .lstrip('\n'), ...), named after it, so the
 * output is byte-identical to jinja2's rendering of the same messages.
 *
 * Must not: evaluate template text, or accept a template whose behaviour it does not
 * implement. Invariant: the output is valid UTF-8 whenever every message is (messages that
 * are not valid UTF-8 are refused: a Python str, which the template sees, cannot hold them).
 */
#include "chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* ============================================================ recognition */

/* Markers every recognized template contains: ChatML framing, the render_content macro and
 * last-query scan of the Qwen3.5 family, its XML tool-call format (Qwen3's JSON one differs),
 * the assistant think block, and the enable_thinking prefill. */
static const char *const k_markers[] = {
    "<|im_start|>",
    "<|im_end|>",
    "render_content(",
    "ns.last_query_index",
    "<tool_call>\\n<function=",
    /* one marker, split only to fit the line */
    ("'<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' "
     "+ content"),
    "enable_thinking is defined and enable_thinking is false",
    "'<think>\\n\\n</think>\\n\\n'",
};
/* The one line where 3.5 and 3.6 differ: when an assistant turn keeps its thinking. */
static const char k_qwen35_keep[] = "{%- if loop.index0 > ns.last_query_index %}";
static const char k_qwen36_keep[] = "{%- if (preserve_thinking is defined and preserve_thinking "
                                    "is true) or (loop.index0 > ns.last_query_index) %}";
/* Features of later templates this renderer does not implement. */
static const char *const k_refused[] = {"reasoning_effort"};

static int contains(const char *s, size_t n, const char *m)
{
    return memmem(s, n, m, strlen(m)) != NULL;
}

int memra_chat_detect(const char *tmpl, size_t len, memra_chat_kind *kind, memra_err *err)
{
    *kind = MEMRA_CHAT_NONE;
    if (!tmpl || !len)
        return MEMRA_FAIL(err, MEMRA_ERR_NOT_FOUND,
                          "the model carries no chat template "
                          "(tokenizer.chat_template); use plain completion");
    for (size_t i = 0; i < sizeof k_markers / sizeof k_markers[0]; i++)
        if (!contains(tmpl, len, k_markers[i]))
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "chat template not recognized as "
                              "Qwen3.5/3.6: it lacks \"%s\"",
                              k_markers[i]);
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
        if (contains(tmpl, len, k_refused[i]))
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "chat template uses \"%s\", which "
                              "memra's Qwen3.5/3.6 renderer does not implement",
                              k_refused[i]);
    if (contains(tmpl, len, k_qwen36_keep))
        *kind = MEMRA_CHAT_QWEN36;
    else if (contains(tmpl, len, k_qwen35_keep) && !contains(tmpl, len, "preserve_thinking"))
        *kind = MEMRA_CHAT_QWEN35;
    else
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "chat template not recognized: neither "
                          "the Qwen3.5 nor the Qwen3.6 thinking-history rule is present");
    return MEMRA_OK;
}

const char *memra_chat_kind_name(memra_chat_kind kind)
{
    switch (kind) {
    case MEMRA_CHAT_QWEN35:
        return "qwen3.5";
    case MEMRA_CHAT_QWEN36:
        return "qwen3.6";
    default:
        return "none";
    }
}

void memra_chat_opts_init(memra_chat_opts *o)
{
    o->add_generation_prompt = 1;
    o->enable_thinking = -1;
    o->preserve_thinking = 0;
}

/* ============================================================ Python string operations */

typedef struct view {
    const char *p;
    size_t n;
} view;

static view view_of(const char *s)
{
    view v = {s ? s : "", s ? strlen(s) : 0};
    return v;
}

/* Python's str.isspace(): bidirectional class WS, B or S, or category Zs. */
static int py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Code point of valid UTF-8 starting at s (length >= 1 available). */
static uint32_t cp_at(const unsigned char *s, size_t *len)
{
    if (s[0] < 0x80) {
        *len = 1;
        return s[0];
    }
    if (s[0] < 0xE0) {
        *len = 2;
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (s[0] < 0xF0) {
        *len = 3;
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* Jinja's |trim: str.strip() with no argument. */
static view py_strip(view v)
{
    const unsigned char *s = (const unsigned char *)v.p;
    size_t a = 0, b = v.n, l;
    while (a < b && py_isspace(cp_at(s + a, &l)))
        a += l;
    while (b > a) {
        size_t k = b - 1;
        while (k > a && (s[k] & 0xC0) == 0x80)
            k--;
        if (!py_isspace(cp_at(s + k, &l)))
            break;
        b = k;
    }
    view r = {v.p + a, b - a};
    return r;
}

static view lstrip_nl(view v)
{
    while (v.n && v.p[0] == '\n') {
        v.p++;
        v.n--;
    }
    return v;
}

static view rstrip_nl(view v)
{
    while (v.n && v.p[v.n - 1] == '\n')
        v.n--;
    return v;
}

/* Start of the first / last occurrence of m in v, or NULL. */
static const char *find_first(view v, const char *m)
{
    return memmem(v.p, v.n, m, strlen(m));
}

static const char *find_last(view v, const char *m)
{
    const char *last = NULL, *p = v.p;
    size_t ml = strlen(m);
    for (;;) {
        const char *h = memmem(p, v.n - (size_t)(p - v.p), m, ml);
        if (!h)
            return last;
        last = h;
        p = h + 1;
    }
}

static int view_starts(view v, const char *m)
{
    size_t n = strlen(m);
    return v.n >= n && memcmp(v.p, m, n) == 0;
}

static int view_ends(view v, const char *m)
{
    size_t n = strlen(m);
    return v.n >= n && memcmp(v.p + v.n - n, m, n) == 0;
}

/* ============================================================ output */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int failed;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}
static void putv(sbuf *b, view v)
{
    put(b, v.p, v.n);
}

/* ============================================================ rendering */

static int role_is(const memra_chat_msg *m, const char *r)
{
    return m->role && !strcmp(m->role, r);
}

/* The template's reverse scan: the last user message that is not a bare tool response. */
static int last_query_index(const memra_chat_msg *msgs, size_t n, size_t *out, memra_err *err)
{
    for (size_t k = n; k-- > 0;) {
        if (!role_is(&msgs[k], "user"))
            continue;
        view c = py_strip(view_of(msgs[k].content));
        if (!(view_starts(c, "<tool_response>") && view_ends(c, "</tool_response>"))) {
            *out = k;
            return MEMRA_OK;
        }
    }
    return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "No user query found in messages.");
}

/* An assistant turn: reasoning from reasoning_content, or split out of "<think>..</think>". */
static void render_assistant(sbuf *b, const memra_chat_msg *m, view content, int keep_think)
{
    view reasoning = view_of(NULL);
    if (m->reasoning_content) {
        reasoning = view_of(m->reasoning_content);
    } else if (find_first(content, "</think>")) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        view head = {content.p, (size_t)(find_first(content, "</think>") - content.p)};
        head = rstrip_nl(head);
        const char *open = find_last(head, "<think>");
        if (open) {
            head.n -= (size_t)(open + 7 - head.p);
            head.p = open + 7;
        }
        reasoning = lstrip_nl(head);
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *close = find_last(content, "</think>");
        content.n -= (size_t)(close + 8 - content.p);
        content.p = close + 8;
        content = lstrip_nl(content);
    }
    reasoning = py_strip(reasoning);
    if (keep_think) {
        puts_(b, "<|im_start|>assistant\n<think>\n");
        putv(b, reasoning);
        puts_(b, "\n</think>\n\n");
    } else {
        puts_(b, "<|im_start|>assistant\n");
    }
    putv(b, content);
    puts_(b, "<|im_end|>\n");
}

static int render_messages(sbuf *b, memra_chat_kind kind, const memra_chat_msg *msgs, size_t n,
                           const memra_chat_opts *o, size_t last_query, memra_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const memra_chat_msg *m = &msgs[i];
        view content = py_strip(view_of(m->content));
        if (role_is(m, "system")) {
            if (i != 0)
                return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                                  "System message must be at the beginning.");
        } else if (role_is(m, "user")) {
            puts_(b, "<|im_start|>user\n");
            putv(b, content);
            puts_(b, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            int keep = i > last_query || (kind == MEMRA_CHAT_QWEN36 && o->preserve_thinking);
            render_assistant(b, m, content, keep);
        } else if (role_is(m, "tool")) {
            if (i > 0 && !role_is(&msgs[i - 1], "tool"))
                puts_(b, "<|im_start|>user");
            puts_(b, "\n<tool_response>\n");
            putv(b, content);
            puts_(b, "\n</tool_response>");
            if (i + 1 == n || !role_is(&msgs[i + 1], "tool"))
                puts_(b, "<|im_end|>\n");
        } else {
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                              "Unexpected message role. (message "
                              "%zu: \"%s\")",
                              i, m->role ? m->role : "(null)");
        }
    }
    return MEMRA_OK;
}

static int check_utf8(const memra_chat_msg *msgs, size_t n, memra_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *f[2] = {msgs[i].content, msgs[i].reasoning_content};
        for (int k = 0; k < 2; k++)
            if (f[k] && memra_utf8_valid_prefix(f[k], strlen(f[k])) != strlen(f[k]))
                return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                                  "message %zu: %s is not valid "
                                  "UTF-8",
                                  i, k ? "reasoning_content" : "content");
    }
    return MEMRA_OK;
}

int memra_chat_format(memra_chat_kind kind, const memra_chat_msg *msgs, size_t n,
                      const memra_chat_opts *o, char **out, size_t *out_len, memra_err *err)
{
    int rc;
    sbuf b = {0};
    size_t last_query = 0;
    *out = NULL;
    if (kind != MEMRA_CHAT_QWEN35 && kind != MEMRA_CHAT_QWEN36) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "no recognized chat template");
        goto fail;
    }
    if (!n || !msgs) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "No messages provided.");
        goto fail;
    }
    MEMRA_TRY(check_utf8(msgs, n, err));
    if (role_is(&msgs[0], "system")) {
        puts_(&b, "<|im_start|>system\n");
        putv(&b, py_strip(view_of(msgs[0].content)));
        puts_(&b, "<|im_end|>\n");
    }
    MEMRA_TRY(last_query_index(msgs, n, &last_query, err));
    MEMRA_TRY(render_messages(&b, kind, msgs, n, o, last_query, err));
    if (o->add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        puts_(&b, o->enable_thinking == 0 ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
    puts_(&b, ""); /* an empty conversation output is still a valid, NUL-terminated string */
    if (b.failed) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "chat output of %zu bytes", b.n);
        goto fail;
    }
    *out = b.p;
    *out_len = b.n;
    return MEMRA_OK;
fail:
    free(b.p);
    return rc;
}
