/*
 * memra-inspect — print a GGUF file's header, metadata and tensor table, or dump one tensor
 * dequantized to raw little-endian f32.
 *
 *   memra-inspect FILE                       header, every KV (arrays abbreviated), tensors
 *   memra-inspect FILE --dequant NAME -o OUT  NAME dequantized to OUT (f32 LE, ne[0] fastest)
 *   memra-inspect FILE --tokenize TEXT       ids and pieces of TEXT (runtime/tokenizer.h, special
 *                                            tokens parsed)
 *
 * Concept: a thin host over runtime/gguf.h (validation lives there) and runtime/quant.h
 * (memra_dequantize_row). Any bad file or argument: exit status 1 and one line on stderr.
 *
 * Adding an action (e.g. `--tokenize TEXT`): add a field to `opts`, a row to k_options that
 * fills it, and a row to k_actions whose `wanted` test selects it; main() needs no change.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "gguf.h"
#include "quant.h"
#include "tokenizer.h"

#define ARR_SHOW 8    /* array elements printed before "..." (like gguf-dump) */
#define STR_SHOW 60   /* bytes of a string value printed before "..." */

typedef struct opts {
    const char *file;
    const char *dequant; /* --dequant NAME */
    const char *out;     /* -o OUT */
    const char *tokenize; /* --tokenize TEXT */
} opts;

/* ------------------------------ value printing ------------------------------ */

/* A string, quoted, with control bytes, quotes and backslashes escaped, cut at `max` bytes. */
static void print_str(memra_gguf_str s, size_t max)
{
    putchar('"');
    for (uint64_t k = 0; k < s.len && k < max; k++) {
        unsigned char c = (unsigned char)s.ptr[k];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (s.len > max)
        printf("...(%" PRIu64 " bytes)", s.len);
}

/* One scalar element of type t at p (little-endian, possibly unaligned). */
static void print_scalar(memra_gguf_vtype t, const uint8_t *p)
{
    uint64_t u = 0;
    static const int size[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    for (int k = size[t] - 1; k >= 0; k--)
        u = u << 8 | p[k];
    float f;
    double d;
    uint32_t u32 = (uint32_t)u;
    switch (t) {
    case MEMRA_GGUF_UINT8: case MEMRA_GGUF_UINT16: case MEMRA_GGUF_UINT32: case MEMRA_GGUF_UINT64:
        printf("%" PRIu64, u);
        break;
    case MEMRA_GGUF_INT8: printf("%d", (int)(int8_t)u); break;
    case MEMRA_GGUF_INT16: printf("%d", (int)(int16_t)u); break;
    case MEMRA_GGUF_INT32: printf("%" PRId32, (int32_t)u32); break;
    case MEMRA_GGUF_INT64: printf("%" PRId64, (int64_t)u); break;
    case MEMRA_GGUF_FLOAT32: memcpy(&f, &u32, 4); printf("%.9g", (double)f); break;
    case MEMRA_GGUF_FLOAT64: memcpy(&d, &u, 8); printf("%.17g", d); break;
    case MEMRA_GGUF_BOOL: fputs(u ? "true" : "false", stdout); break;
    default: fputs("?", stdout); break;
    }
}

static void print_value(const memra_gguf *g, int64_t i)
{
    memra_gguf_vtype t = memra_gguf_kv_type(g, i);
    if (t == MEMRA_GGUF_STRING) {
        print_str(memra_gguf_kv_str(g, i, 0), STR_SHOW);
        return;
    }
    if (t != MEMRA_GGUF_ARRAY) {
        print_scalar(t, memra_gguf_kv_data(g, i));
        return;
    }
    memra_gguf_vtype et = memra_gguf_kv_arr_type(g, i);
    uint64_t n = memra_gguf_kv_arr_len(g, i);
    static const int size[MEMRA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    const uint8_t *p = memra_gguf_kv_data(g, i);
    putchar('[');
    for (uint64_t j = 0; j < n && j < ARR_SHOW; j++) {
        if (j)
            fputs(", ", stdout);
        if (et == MEMRA_GGUF_STRING)
            print_str(memra_gguf_kv_str(g, i, j), STR_SHOW / 2);
        else
            print_scalar(et, p + j * (uint64_t)size[et]);
    }
    printf("%s] (%" PRIu64 " element%s)", n > ARR_SHOW ? ", ..." : "", n, n == 1 ? "" : "s");
}

/* ------------------------------- the listing ------------------------------- */

static void print_header(const memra_gguf *g, const char *file)
{
    size_t size;
    memra_gguf_file_data(g, &size);
    printf("%s: GGUF v%u, %zu bytes\n", file, memra_gguf_version(g), size);
    printf("  alignment %u, %" PRId64 " key/value pairs, %" PRId64 " tensors, data at offset %"
           PRIu64 "\n",
           memra_gguf_alignment(g), memra_gguf_n_kv(g), memra_gguf_n_tensors(g),
           memra_gguf_data_offset(g));
}

static void print_kvs(const memra_gguf *g)
{
    printf("\n* %" PRId64 " key/value pairs:\n", memra_gguf_n_kv(g));
    printf("  %5s  %-10s %-40s %s\n", "idx", "type", "key", "value");
    for (int64_t i = 0; i < memra_gguf_n_kv(g); i++) {
        memra_gguf_str key = memra_gguf_kv_key(g, i);
        memra_gguf_vtype t = memra_gguf_kv_type(g, i);
        char type[24];
        if (t == MEMRA_GGUF_ARRAY)
            snprintf(type, sizeof type, "[%s]", memra_gguf_vtype_name(memra_gguf_kv_arr_type(g, i)));
        else
            snprintf(type, sizeof type, "%s", memra_gguf_vtype_name(t));
        printf("  %5" PRId64 "  %-10s %-40.*s = ", i, type, (int)(key.len > 200 ? 200 : key.len),
               key.ptr);
        print_value(g, i);
        putchar('\n');
    }
}

static void print_tensors(const memra_gguf *g)
{
    printf("\n* %" PRId64 " tensors:\n", memra_gguf_n_tensors(g));
    printf("  %5s  %-8s %-26s %12s %12s  %s\n", "idx", "type", "shape (ne0 first)", "offset",
           "bytes", "name");
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        char shape[96];
        int k = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%" PRId64, d ? ", " : "",
                          t->ne[d]);
        snprintf(shape + k, sizeof shape - (size_t)k, "]");
        printf("  %5" PRId64 "  %-8s %-26s %12" PRIu64 " %12" PRIu64 "  %s\n", i,
               memra_qtype_get(t->type)->name, shape, t->offset, t->nbytes, t->name);
    }
}

static int cmd_list(const memra_gguf *g, const opts *o)
{
    print_header(g, o->file);
    print_kvs(g);
    print_tensors(g);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ------------------------------- --dequant ------------------------------- */

/* The NVFP4 per-tensor (or per-expert) scale companion: "<base>.scale" for "<base>.weight"
 * (llama.cpp's naming), else "<name>.scale". NULL when absent. */
static const memra_gguf_tensor *find_scale(const memra_gguf *g, const char *name)
{
    char buf[MEMRA_GGUF_MAX_NAME + 16];
    size_t n = strlen(name);
    const memra_gguf_tensor *s = NULL;
    if (n > 7 && strcmp(name + n - 7, ".weight") == 0) {
        snprintf(buf, sizeof buf, "%.*s.scale", (int)(n - 7), name);
        s = memra_gguf_find_tensor(g, buf);
    }
    if (!s) {
        snprintf(buf, sizeof buf, "%s.scale", name);
        s = memra_gguf_find_tensor(g, buf);
    }
    return s;
}

/* Check the scale companion: F32 with 1 element (whole tensor) or ne[2] (one per expert). */
static int scale_ok(const memra_gguf_tensor *t, const memra_gguf_tensor *s, const char **why)
{
    int64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    if (s->type != MEMRA_QT_F32)
        *why = "is not f32";
    else if (n != 1 && n != t->ne[2])
        *why = "has neither 1 nor ne[2] elements";
    else
        return 1;
    return 0;
}

static int cmd_dequant(const memra_gguf *g, const opts *o)
{
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, o->dequant);
    if (!t)
        return fprintf(stderr, "memra-inspect: %s: no tensor named '%s'\n", o->file, o->dequant), 1;
    if (!memra_quant_can_dequantize((memra_qtype)t->type))
        return fprintf(stderr, "memra-inspect: tensor '%s': cannot dequantize type %s\n",
                       t->name, memra_qtype_get(t->type)->name), 1;
    const memra_gguf_tensor *s = t->type == MEMRA_QT_NVFP4 ? find_scale(g, t->name) : NULL;
    const char *why = NULL;
    if (s && !scale_ok(t, s, &why))
        return fprintf(stderr, "memra-inspect: scale companion '%s' %s\n", s->name, why), 1;
    int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = memra_quant_row_bytes((memra_qtype)t->type, ne0);
    float *row = malloc((size_t)ne0 * sizeof *row); /* [ne0] */
    FILE *f = row ? fopen(o->out, "wb") : NULL;
    if (!f) {
        fprintf(stderr, "memra-inspect: %s: %s\n", o->out, row ? strerror(errno) : "no memory");
        free(row);
        return 1;
    }
    const uint8_t *src = t->data;
    int bad = 0;
    for (int64_t r = 0; r < rows && !bad; r++) {
        bad = memra_dequantize_row((memra_qtype)t->type, src + (size_t)r * row_bytes, row, ne0);
        if (s) { /* per-expert scale: rows of expert e are [e*ne1, (e+1)*ne1) */
            float sc;
            int64_t e = (s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3] == 1) ? 0 : r / t->ne[1];
            memcpy(&sc, (const uint8_t *)s->data + 4 * e, 4);
            for (int64_t k = 0; k < ne0; k++)
                row[k] *= sc;
        }
        /* the host is little-endian (the GGUF reader assumes it too): raw floats are LE f32 */
        bad = bad || fwrite(row, sizeof *row, (size_t)ne0, f) != (size_t)ne0;
    }
    bad |= fclose(f) != 0;
    free(row);
    if (bad) {
        remove(o->out); /* never leave a partial dump behind */
        return fprintf(stderr, "memra-inspect: writing '%s' failed\n", o->out), 1;
    }
    printf("memra-inspect: wrote %" PRId64 " f32 values of '%s' (%s%s) to %s\n",
            ne0 * rows, t->name, memra_qtype_get(t->type)->name,
            s ? ", times its .scale companion" : "", o->out);
    return 0;
}

/* ------------------------------- --tokenize ------------------------------- */

/* The tokenizer the file's metadata describes, then one line per token: index, id, type
 * (when not NORMAL), the stored token text and the bytes it decodes to. */
static int cmd_tokenize(const memra_gguf *g, const opts *o)
{
    memra_tokenizer *t = NULL;
    memra_err err;
    memra_err_clear(&err);
    if (memra_tokenizer_open_gguf(g, &t, &err) != MEMRA_OK)
        return fprintf(stderr, "memra-inspect: tokenizer: %s\n", err.msg), 1;
    memra_tok_str ct = memra_tokenizer_chat_template(t);
    memra_chat_kind kind = MEMRA_CHAT_NONE;
    memra_err cerr;
    memra_err_clear(&cerr);
    memra_chat_detect(ct.ptr, ct.len, &kind, &cerr);
    printf("tokenizer: gpt2/%s, %u tokens, bos %d eos %d pad %d, chat template: %s\n",
           memra_tokenizer_pre(t), memra_tokenizer_n_vocab(t), memra_tokenizer_bos(t),
           memra_tokenizer_eos(t), memra_tokenizer_pad(t),
           kind != MEMRA_CHAT_NONE ? memra_chat_kind_name(kind) : cerr.msg);
    memra_token_buf b = {0};
    int rc = memra_tokenizer_encode(t, o->tokenize, strlen(o->tokenize),
                                    MEMRA_TOKENIZE_PARSE_SPECIAL, &b, &err);
    if (rc != MEMRA_OK) {
        fprintf(stderr, "memra-inspect: tokenize: %s\n", err.msg);
        memra_tokenizer_close(t);
        return 1;
    }
    static const char *const type_name[] = {"undefined", "", "unknown", "control", "user",
                                            "unused", "byte"};
    printf("%zu tokens\n", b.n);
    for (size_t i = 0; i < b.n; i++) {
        memra_tok_str text = memra_tokenizer_token_text(t, b.ids[i]), piece;
        memra_tokenizer_piece(t, b.ids[i], MEMRA_DETOK_RENDER_SPECIAL, &piece, NULL);
        printf("%6zu %8d %-7s ", i, b.ids[i], type_name[memra_tokenizer_token_type(t, b.ids[i])]);
        print_str((memra_gguf_str){text.ptr, text.len}, STR_SHOW);
        fputs("  ", stdout);
        if (memra_utf8_valid_prefix(piece.ptr, piece.len) == piece.len) {
            print_str((memra_gguf_str){piece.ptr, piece.len}, STR_SHOW);
        } else { /* part of a multi-byte character: show the bytes */
            putchar('"');
            for (size_t k = 0; k < piece.len; k++)
                printf("\\x%02x", (unsigned char)piece.ptr[k]);
            putchar('"');
        }
        putchar('\n');
    }
    printf("ids:");
    for (size_t i = 0; i < b.n; i++)
        printf("%s%d", i ? "," : " ", b.ids[i]);
    putchar('\n');
    memra_token_buf_free(&b);
    memra_tokenizer_close(t);
    return 0;
}

/* ------------------------------ options and main ------------------------------ */

/* Flags that take one argument; each stores it into a field of opts. */
static const struct {
    const char *flag;
    size_t field; /* offsetof(opts, ...) */
} k_options[] = {
    {"--dequant", offsetof(opts, dequant)},
    {"-o", offsetof(opts, out)},
    {"--tokenize", offsetof(opts, tokenize)},
};

/* Actions, first match wins; `wanted` says whether the options select it, `check` validates
 * the option combination (NULL message = fine). */
static const char *check_dequant(const opts *o) { return o->out ? NULL : "--dequant needs -o OUT"; }
static const char *check_list(const opts *o) { return o->out ? "-o needs --dequant" : NULL; }
static int want_dequant(const opts *o) { return o->dequant != NULL; }
static int want_tokenize(const opts *o) { return o->tokenize != NULL; }
static const char *check_tokenize(const opts *o)
{
    return o->out || o->dequant ? "--tokenize takes no other action" : NULL;
}
static int want_list(const opts *o) { (void)o; return 1; }

static const struct {
    int (*wanted)(const opts *o);
    const char *(*check)(const opts *o);
    int (*run)(const memra_gguf *g, const opts *o);
} k_actions[] = {
    {want_tokenize, check_tokenize, cmd_tokenize},
    {want_dequant, check_dequant, cmd_dequant},
    {want_list, check_list, cmd_list},
};

static const char k_usage[] = "usage: memra-inspect FILE [--dequant NAME -o OUT | --tokenize TEXT]";

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        size_t k = 0, n = sizeof k_options / sizeof k_options[0];
        while (k < n && strcmp(argv[i], k_options[k].flag) != 0)
            k++;
        if (k < n) {
            if (i + 1 >= argc)
                return fprintf(stderr, "memra-inspect: %s needs a value\n", argv[i]), 1;
            *(const char **)((char *)o + k_options[k].field) = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return fprintf(stderr, "memra-inspect: unknown option '%s'; %s\n", argv[i], k_usage), 1;
        } else if (!o->file) {
            o->file = argv[i];
        } else {
            return fprintf(stderr, "memra-inspect: unexpected argument '%s'; %s\n", argv[i],
                           k_usage), 1;
        }
    }
    if (!o->file)
        return fprintf(stderr, "memra-inspect: no FILE given; %s\n", k_usage), 1;
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o) != 0)
        return 1;
    size_t a = 0;
    while (!k_actions[a].wanted(&o))
        a++;
    const char *problem = k_actions[a].check(&o);
    if (problem)
        return fprintf(stderr, "memra-inspect: %s; %s\n", problem, k_usage), 1;
    memra_gguf *g = NULL;
    memra_err err;
    memra_err_clear(&err);
    memra_log_set_level(-1); /* the one-line error below says it all */
    int rc = memra_gguf_open(o.file, &g, &err);
    if (rc != MEMRA_OK)
        return fprintf(stderr, "memra-inspect: %s: %s (%s)\n", o.file, err.msg,
                       memra_strerror(rc)), 1;
    int status = k_actions[a].run(g, &o);
    memra_gguf_close(g);
    return status;
}
