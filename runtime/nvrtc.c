/*
 * nvrtc.c — specialization keys, NVRTC compilation, the on-disk cubin cache, loaded kernels,
 * and the mmvq launch geometry (see nvrtc.h).
 *
 * Must not: touch a GPU before section 6 (compiling needs none); print; let a cache file it
 * did not verify reach cuModuleLoadData.
 * Invariants: the template sources are the ones embedded in this binary, or for a
 * development A/B the same-named files of $MEMRA_NVRTC_TEMPLATES (one hash covers the texts
 * in use, so the cache never mixes them); the compile options below are fixed and part of
 * that hash — in particular -fmad=false and no fast math, which the exactness contract of
 * runtime/quant.h needs.
 *
 * Sections: 1 keys, 2 sources and options, 3 disk cache, 4 compile, 5 stats and settings,
 * 6 loaded kernels, 7 mmvq launch geometry.
 */
#include "nvrtc.h" /* ours (runtime/nvrtc.h) */

#include <errno.h>
/* The toolkit's nvrtc.h by full path (cmake/nvrtc.cmake): ours shadows it on the include
 * path. */
#include MEMRA_TOOLKIT_NVRTC_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cuda_util.h"
#include "qtype.h"

/* ======================================= 1. keys ========================================== */

typedef struct mmvq_geom {
    int qk, bytes, step;
} mmvq_geom;

static int mmvq_geom_of(int qt, mmvq_geom *g)
{
    switch (qt) {
#define MEMRA_GEOM_CASE(id, name, de, db, sb)                                                      \
    case id:                                                                                       \
        g->qk = de;                                                                                \
        g->bytes = db;                                                                             \
        g->step = sb;                                                                              \
        return 1;
        MEMRA_MMVQ_TYPES(MEMRA_GEOM_CASE)
#undef MEMRA_GEOM_CASE
    default:
        return 0;
    }
}

int memra_mmvq_supports(int qt)
{
    mmvq_geom g;
    return mmvq_geom_of(qt, &g);
}

int memra_mmvq_dot_elems(int qt)
{
    mmvq_geom g;
    return mmvq_geom_of(qt, &g) ? g.qk : 0;
}

static int parse_int(const char *s, size_t n, int lo, int hi, int *out)
{
    if (n == 0 || n > 9)
        return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = 10 * v + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* "q4_K+q6_K" -> spec->qt[], spec->n_qt. */
static int parse_qts(const char *s, size_t n, memra_kernel_spec *spec, memra_err *err)
{
    spec->n_qt = 0;
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '+')
            j++;
        char name[16];
        if (j - i == 0 || j - i >= sizeof name)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: empty or long qtype name");
        memcpy(name, s + i, j - i);
        name[j - i] = '\0';
        const int qt = memra_qtype_from_name(name);
        if (qt < 0)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: unknown qtype '%s'", name);
        if (!memra_mmvq_supports(qt))
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "kernel key: mmvq has no %s kernel",
                              name);
        if (spec->n_qt == MEMRA_MMVQ_MAX_OUT)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: more than %d weights",
                              MEMRA_MMVQ_MAX_OUT);
        spec->qt[spec->n_qt++] = qt;
        i = j + 1;
    }
    return MEMRA_OK;
}

/* One "name=value" field of a key. */
static int parse_field(const char *f, size_t n, memra_kernel_spec *spec, int *key_sm,
                       unsigned *seen, memra_err *err)
{
    const char *eq = memchr(f, '=', n);
    if (!eq)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: field '%.*s' has no '='",
                          (int)n, f);
    const size_t kn = (size_t)(eq - f), vn = n - kn - 1;
    const char *v = eq + 1;
    unsigned bit;
    int ok;
    if (kn == 2 && memcmp(f, "qt", 2) == 0 && spec->tpl == MEMRA_TPL_MMVQ) {
        bit = 1;
        int rc = parse_qts(v, vn, spec, err);
        if (rc != MEMRA_OK)
            return rc;
        ok = 1;
    } else if (kn == 1 && f[0] == 'b' && spec->tpl == MEMRA_TPL_MMVQ) {
        bit = 2;
        ok = parse_int(v, vn, 1, MEMRA_MMVQ_MAX_B, &spec->b);
    } else if (kn == 2 && memcmp(f, "sm", 2) == 0) {
        bit = 4;
        ok = parse_int(v, vn, 10, 999, key_sm);
    } else {
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: unknown field '%.*s'",
                          (int)kn, f);
    }
    if (!ok)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: bad value in '%.*s'", (int)n,
                          f);
    if (*seen & bit)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: field '%.*s' repeated",
                          (int)kn, f);
    *seen |= bit;
    return MEMRA_OK;
}

/* MEMRA_TPL_* of the template a key names (the text before the first ':'), 0 if none. */
static int template_of(const char *key)
{
    const char *c = strchr(key, ':');
    const size_t tn = c ? (size_t)(c - key) : strlen(key);
    if (tn == 4 && memcmp(key, "mmvq", 4) == 0)
        return MEMRA_TPL_MMVQ;
    if (tn == 13 && memcmp(key, "quantize_q8_1", 13) == 0)
        return MEMRA_TPL_QUANTIZE_Q8_1;
    return 0;
}

int memra_kernel_spec_parse(const char *key, int sm, memra_kernel_spec *spec, memra_err *err)
{
    if (!key || !spec)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: null argument");
    memset(spec, 0, sizeof *spec);
    const size_t len = strlen(key);
    if (len >= MEMRA_KERNEL_KEY_MAX)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key longer than %d bytes",
                          MEMRA_KERNEL_KEY_MAX - 1);
    const char *c = strchr(key, ':');
    const size_t tn = c ? (size_t)(c - key) : len;
    if (!(spec->tpl = template_of(key)))
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "kernel key: unknown template '%.*s'",
                          (int)tn, key);
    int key_sm = 0;
    unsigned seen = 0;
    for (const char *f = c; f && *f;) {
        const char *next = strchr(f + 1, ':');
        const size_t fn = next ? (size_t)(next - f - 1) : strlen(f + 1);
        int rc = parse_field(f + 1, fn, spec, &key_sm, &seen, err);
        if (rc != MEMRA_OK)
            return rc;
        f = next;
    }
    if (spec->tpl == MEMRA_TPL_MMVQ && (seen & 3) != 3)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key '%s': mmvq needs qt= and b=",
                          key);
    if (sm && key_sm && sm != key_sm)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key '%s' is for sm_%d, not sm_%d",
                          key, key_sm, sm);
    spec->sm = sm ? sm : key_sm;
    if (!spec->sm)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key '%s' names no architecture",
                          key);
    if (spec->sm < 90)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "kernel key '%s': templates need sm_90 or newer (griddepcontrol)", key);
    return MEMRA_OK;
}

int memra_nvrtc_compile_key(const char *plan_key, int sm, char *buf, size_t n, memra_err *err)
{
    if (!plan_key)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key: null argument");
    if (!template_of(plan_key))
        return MEMRA_ERR_NOT_FOUND; /* an answer, not a failure: err stays untouched */
    memra_kernel_spec spec;
    const int rc = memra_kernel_spec_parse(plan_key, sm, &spec, err);
    return rc != MEMRA_OK ? rc : memra_kernel_spec_key(&spec, buf, n, err);
}

int memra_kernel_spec_key(const memra_kernel_spec *spec, char *buf, size_t n, memra_err *err)
{
    size_t used = 0;
    int w;
    if (spec->tpl == MEMRA_TPL_MMVQ) {
        w = snprintf(buf, n, "mmvq:qt=");
        for (int i = 0; w >= 0 && (size_t)w < n && i < spec->n_qt; i++) {
            used = (size_t)w;
            const memra_qtype_info *qi = memra_qtype_get((uint32_t)spec->qt[i]);
            w = (int)used + snprintf(buf + used, n - used, "%s%s", i ? "+" : "",
                                     qi ? qi->name : "?");
        }
        if (w >= 0 && (size_t)w < n) {
            used = (size_t)w;
            w = (int)used + snprintf(buf + used, n - used, ":b=%d:sm=%d", spec->b, spec->sm);
        }
    } else {
        w = snprintf(buf, n, "quantize_q8_1:sm=%d", spec->sm);
    }
    if (w < 0 || (size_t)w >= n)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel key does not fit %zu bytes", n);
    return MEMRA_OK;
}

const char *memra_kernel_spec_entry(const memra_kernel_spec *spec)
{
    return spec->tpl == MEMRA_TPL_MMVQ ? "memra_mmvq" : "memra_quantize_q8_1";
}

int memra_kernel_spec_threads(const memra_kernel_spec *spec)
{
    return spec->tpl == MEMRA_TPL_MMVQ ? 32 * MEMRA_MMVQ_WARPS : 256;
}

/* Whether a specialization has a q6_K weight (the direct path's larger ring slot). */
static int mmvq_spec_q6k(const memra_kernel_spec *spec)
{
    for (int i = 0; i < spec->n_qt; i++)
        if (spec->qt[i] == MEMRA_QT_Q6_K)
            return 1;
    return 0;
}

/* Whether a specialization has the direct path (mmvq_params.h MEMRA_MMVQ_DIRECT): B <= 2
 * and every weight of a direct type (B = 1: only that path; B = 2: also the staged one). */
static int mmvq_spec_direct(const memra_kernel_spec *spec)
{
    if (spec->tpl != MEMRA_TPL_MMVQ || spec->b > MEMRA_MMVQ_DIRECT_MAX_B)
        return 0;
    for (int i = 0; i < spec->n_qt; i++)
        if (!MEMRA_MMVQ_DIRECT(spec->qt[i]))
            return 0;
    return 1;
}

/* Shared memory of the staged path for a specialization's weight types. */
static size_t mmvq_spec_staged_smem(const memra_kernel_spec *spec)
{
    int slot = 0;
    for (int i = 0; i < spec->n_qt; i++) {
        mmvq_geom g;
        if (mmvq_geom_of(spec->qt[i], &g) && MEMRA_MMVQ_SLOT(g.bytes, g.step) > slot)
            slot = MEMRA_MMVQ_SLOT(g.bytes, g.step);
    }
    return (size_t)MEMRA_MMVQ_SMEM(slot);
}

size_t memra_kernel_spec_smem(const memra_kernel_spec *spec)
{
    if (spec->tpl != MEMRA_TPL_MMVQ)
        return 0;
    if (!mmvq_spec_direct(spec))
        return mmvq_spec_staged_smem(spec);
    /* direct: the most any launch may ask for (each passes its own size), fused SwiGLU
     * epilogue included */
    const size_t d = (size_t)MEMRA_MMVQ_DIRECT_SMEM(MEMRA_MMVQ_DIRECT_MAX_IN(spec->b),
                                                    mmvq_spec_q6k(spec), spec->b) +
                     MEMRA_MMVQ_SWIGLU_SMEM(spec->b);
    const size_t st = spec->b > 1 ? mmvq_spec_staged_smem(spec) : 0;
    return d > st ? d : st;
}

/* ============================== 2. sources and options ==================================== */

int memra_nvrtc_source(const memra_kernel_spec *spec, char *buf, size_t n, memra_err *err)
{
    int w;
    if (spec->tpl == MEMRA_TPL_MMVQ) {
        int q[MEMRA_MMVQ_MAX_OUT];
        for (int i = 0; i < MEMRA_MMVQ_MAX_OUT; i++)
            q[i] = i < spec->n_qt ? spec->qt[i] : -1;
        w = snprintf(buf, n,
                     "#include \"mmvq.cuh\"\n"
                     "extern \"C\" __global__ void\n"
                     "__launch_bounds__(%d, MEMRA_MMVQ_MIN_BLOCKS(%d, %d))\n"
                     "memra_mmvq(const __grid_constant__ memra_mmvq_params p)\n"
                     "{\n    mmvq_main<%d, %d, %d, %d, %d>(p);\n}\n",
                     32 * MEMRA_MMVQ_WARPS, spec->b, spec->n_qt, spec->b, q[0], q[1], q[2], q[3]);
    } else {
        w = snprintf(buf, n,
                     "#include \"quantize_q8_1.cuh\"\n"
                     "extern \"C\" __global__ void __launch_bounds__(256)\n"
                     "memra_quantize_q8_1(const float *x, u8 *y, int n, int b)\n"
                     "{\n    quantize_q8_1_run<8>(x, y, n, b);\n}\n");
    }
    if (w < 0 || (size_t)w >= n)
        return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "kernel source does not fit %zu bytes", n);
    return MEMRA_OK;
}

/* Fixed options: IEEE RN everywhere, no FMA contraction, no flush of subnormals (the
 * exactness arithmetic of runtime/quant.h). The architecture option is added per spec. */
static const char *const k_opts[] = {"-std=c++17", "-fmad=false", "-ftz=false",
                                     "-prec-div=true", "-prec-sqrt=true"};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

/* The template texts in use and their hash, resolved on first use and again whenever
 * $MEMRA_NVRTC_TEMPLATES changes (tests switch it; changing it while compiles run is not
 * supported). */
#define MAX_FILES 16 /* template files NVRTC is given (cmake/nvrtc.cmake embeds fewer) */
static pthread_mutex_t g_src_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_src_resolved;
static char g_src_env[1024];          /* the MEMRA_NVRTC_TEMPLATES value resolved ("" = unset) */
static uint64_t g_src_hash;           /* 0 = unknown: every cache lookup misses, compiles work */
static const char *g_text[MAX_FILES]; /* the texts compiled: embedded, or g_owned overrides */
static char *g_owned[MAX_FILES];

static int n_files(void)
{
    return memra_nvrtc_n_files < MAX_FILES ? memra_nvrtc_n_files : MAX_FILES;
}

/* MEMRA_NVRTC_TEMPLATES=DIR (development): a file of DIR named like an embedded one
 * (mmvq.cuh, ...) replaces it, so one binary can A/B template variants on a GPU
 * (bench/device-ab.sh). Absent or unreadable files keep the embedded text; a DIR of 1024 or
 * more characters is ignored. Logged at WARN: not for serving. */
static char *override_text(const char *dir, const char *name)
{
    char path[sizeof g_src_env + 64]; /* dir < 1024 characters, name a template's */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *t = NULL;
    const long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (t = malloc((size_t)n + 1)) &&
        fread(t, 1, (size_t)n, f) == (size_t)n) {
        t[n] = '\0';
    } else {
        free(t);
        t = NULL;
    }
    fclose(f);
    if (t)
        memra_log(MEMRA_LOG_WARN, "nvrtc: template %s from %s (MEMRA_NVRTC_TEMPLATES)", name, path);
    return t;
}

/* Under g_src_mu: the texts for env, then xxh64 over every file (name and text), the options
 * and the NVRTC version. */
static void src_resolve(const char *env)
{
    const int nf = n_files();
    for (int i = 0; i < nf; i++) {
        free(g_owned[i]);
        g_owned[i] = *env ? override_text(env, memra_nvrtc_files[i].name) : NULL;
        g_text[i] = g_owned[i] ? g_owned[i] : memra_nvrtc_files[i].text;
    }
    snprintf(g_src_env, sizeof g_src_env, "%s", env);
    g_src_resolved = 1;
    g_src_hash = 0;
    XXH64_state_t *st = XXH64_createState();
    if (!st)
        return;
    XXH64_reset(st, 0x6d656d7261ull);
    for (int i = 0; i < nf; i++) {
        XXH64_update(st, memra_nvrtc_files[i].name, strlen(memra_nvrtc_files[i].name) + 1);
        XXH64_update(st, g_text[i], strlen(g_text[i]) + 1);
    }
    for (size_t i = 0; i < N_OPTS; i++)
        XXH64_update(st, k_opts[i], strlen(k_opts[i]) + 1);
    int ver[2] = {0, 0};
    nvrtcVersion(&ver[0], &ver[1]);
    XXH64_update(st, ver, sizeof ver);
    g_src_hash = XXH64_digest(st) | 1; /* never 0, so 0 can mean "unknown" */
    XXH64_freeState(st);
}

/* The hash of the texts in use; with text != NULL also copies their n_files() pointers. */
static uint64_t src_texts(const char **text)
{
    const char *env = getenv("MEMRA_NVRTC_TEMPLATES");
    if (!env || strlen(env) >= sizeof g_src_env) /* a path too long to remember: ignored */
        env = "";
    pthread_mutex_lock(&g_src_mu);
    if (!g_src_resolved || strcmp(env, g_src_env) != 0)
        src_resolve(env);
    const uint64_t h = g_src_hash;
    for (int i = 0; text && i < n_files(); i++)
        text[i] = g_text[i];
    pthread_mutex_unlock(&g_src_mu);
    return h;
}

static uint64_t src_hash(void) { return src_texts(NULL); }

void memra_nvrtc_version(int *major, int *minor)
{
    int a = 0, b = 0;
    nvrtcVersion(&a, &b);
    if (major)
        *major = a;
    if (minor)
        *minor = b;
}

/* ==================================== 3. disk cache ======================================= */

static pthread_mutex_t g_dir_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_dir[1024];
static int g_dir_set; /* 0: default not yet resolved */
static atomic_long g_compiles, g_hits, g_writes, g_bad, g_tmp_seq;

static const char k_magic[8] = {'M', 'E', 'M', 'R', 'A', 'C', 'B', '1'};

/* Copies the cache directory into buf ("" = disabled), resolving the default once. */
static void cache_dir_copy(char *buf, size_t n)
{
    pthread_mutex_lock(&g_dir_mu);
    if (!g_dir_set) {
        const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
        if (x && *x)
            snprintf(g_dir, sizeof g_dir, "%s/memra/kernels", x);
        else if (h && *h)
            snprintf(g_dir, sizeof g_dir, "%s/.cache/memra/kernels", h);
        else
            g_dir[0] = '\0';
        g_dir_set = 1;
    }
    snprintf(buf, n, "%s", g_dir);
    pthread_mutex_unlock(&g_dir_mu);
}

static int mkdir_p(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static void cache_path(const char *dir, const char *key, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%016llx.cubin", dir,
             (unsigned long long)XXH64(key, strlen(key), src_hash()));
}

/* File: magic[8] | u64 src_hash | u64 size | u64 xxh64(payload) | u32 key_len | key | payload.
 * 1 = hit (out filled), 0 = no file, -1 = present but unusable. */
static int cache_read(const char *path, const char *key, memra_cubin *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int res = -1;
    char magic[8], fkey[MEMRA_KERNEL_KEY_MAX];
    uint64_t h, size, ph;
    uint32_t kl;
    void *data = NULL;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, k_magic, 8) != 0 ||
        fread(&h, 8, 1, f) != 1 || h != src_hash() || fread(&size, 8, 1, f) != 1 ||
        fread(&ph, 8, 1, f) != 1 || fread(&kl, 4, 1, f) != 1 || kl != strlen(key) ||
        fread(fkey, 1, kl, f) != kl || memcmp(fkey, key, kl) != 0 || size == 0 ||
        size > ((uint64_t)1 << 30))
        goto done;
    data = malloc((size_t)size);
    if (!data || fread(data, 1, (size_t)size, f) != size || XXH64(data, (size_t)size, 0) != ph ||
        fgetc(f) != EOF)
        goto done;
    out->data = data;
    out->size = (size_t)size;
    out->from_cache = 1;
    data = NULL;
    res = 1;
done:
    free(data);
    fclose(f);
    return res;
}

/* Best effort: a cache that cannot be written only costs the next process a compile. */
static void cache_write(const char *dir, const char *path, const char *key, const memra_cubin *c)
{
    if (mkdir_p(dir) != 0)
        return;
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%ld", path, (long)getpid(),
             (long)atomic_fetch_add(&g_tmp_seq, 1));
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    const uint64_t h = src_hash(), size = c->size, ph = XXH64(c->data, c->size, 0);
    const uint32_t kl = (uint32_t)strlen(key);
    int ok = fwrite(k_magic, 8, 1, f) == 1 && fwrite(&h, 8, 1, f) == 1 &&
             fwrite(&size, 8, 1, f) == 1 && fwrite(&ph, 8, 1, f) == 1 &&
             fwrite(&kl, 4, 1, f) == 1 && fwrite(key, 1, kl, f) == kl &&
             fwrite(c->data, 1, c->size, f) == c->size;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        atomic_fetch_add(&g_writes, 1);
    else
        unlink(tmp);
}

/* ====================================== 4. compile ======================================== */

#define NVRTC_TRY(call)                                                                            \
    do {                                                                                           \
        nvrtcResult nr_ = (call);                                                                  \
        if (nr_ != NVRTC_SUCCESS) {                                                                \
            rc = MEMRA_FAIL(err, MEMRA_ERR_CUDA, "%s: %s: %s", key, #call,                         \
                            nvrtcGetErrorString(nr_));                                             \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* The first lines of a failed compile's log go into the error, all of it to the log. */
static int compile_failed(nvrtcProgram prog, const char *key, memra_err *err)
{
    size_t n = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1 && (log = malloc(n)) &&
        nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
        memra_log(MEMRA_LOG_ERROR, "nvrtc %s:\n%s", key, log);
    int rc = MEMRA_FAIL(err, MEMRA_ERR_CUDA, "nvrtc %s failed: %.400s", key,
                        log ? log : "(no log)");
    free(log);
    return rc;
}

static int nvrtc_run(const memra_kernel_spec *spec, const char *key, memra_cubin *out,
                     memra_err *err)
{
    int rc = MEMRA_OK;
    nvrtcProgram prog = NULL;
    char src[1024], arch[32];
    const char *hdr_text[MAX_FILES], *hdr_name[MAX_FILES], *opts[N_OPTS + 1];
    MEMRA_TRY(memra_nvrtc_source(spec, src, sizeof src, err));
    const int nh = n_files();
    src_texts(hdr_text);
    for (int i = 0; i < nh; i++)
        hdr_name[i] = memra_nvrtc_files[i].name;
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", spec->sm);
    for (size_t i = 0; i < N_OPTS; i++)
        opts[i] = k_opts[i];
    opts[N_OPTS] = arch;
    NVRTC_TRY(nvrtcCreateProgram(&prog, src, "memra_kernel.cu", nh, hdr_text, hdr_name));
    atomic_fetch_add(&g_compiles, 1);
    if (nvrtcCompileProgram(prog, (int)N_OPTS + 1, opts) != NVRTC_SUCCESS) {
        rc = compile_failed(prog, key, err);
        goto fail;
    }
    NVRTC_TRY(nvrtcGetCUBINSize(prog, &out->size));
    if (!(out->data = malloc(out->size))) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "%s: cubin of %zu bytes", key, out->size);
        goto fail;
    }
    NVRTC_TRY(nvrtcGetCUBIN(prog, out->data));
    out->from_cache = 0;
fail:
    if (prog)
        nvrtcDestroyProgram(&prog);
    if (rc != MEMRA_OK)
        memra_cubin_free(out);
    return rc;
}

int memra_nvrtc_compile(const char *key, int sm, memra_cubin *out, memra_err *err)
{
    if (!out)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "memra_nvrtc_compile: null output");
    memset(out, 0, sizeof *out);
    memra_kernel_spec spec;
    char canon[MEMRA_KERNEL_KEY_MAX], dir[1024], path[1100];
    int rc = memra_kernel_spec_parse(key, sm, &spec, err);
    if (rc == MEMRA_OK)
        rc = memra_kernel_spec_key(&spec, canon, sizeof canon, err);
    if (rc != MEMRA_OK)
        return rc;
    cache_dir_copy(dir, sizeof dir);
    if (dir[0]) {
        cache_path(dir, canon, path, sizeof path);
        const int hit = cache_read(path, canon, out);
        if (hit == 1) {
            atomic_fetch_add(&g_hits, 1);
            return MEMRA_OK;
        }
        if (hit < 0)
            atomic_fetch_add(&g_bad, 1);
    }
    rc = nvrtc_run(&spec, canon, out, err);
    if (rc == MEMRA_OK && dir[0])
        cache_write(dir, path, canon, out);
    return rc;
}

void memra_cubin_free(memra_cubin *c)
{
    if (!c)
        return;
    free(c->data);
    c->data = NULL;
    c->size = 0;
}

/* ================================ 5. stats and settings =================================== */

int memra_nvrtc_set_cache_dir(const char *dir, memra_err *err)
{
    if (dir && strlen(dir) >= sizeof g_dir - 32)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel cache dir longer than %zu bytes",
                          sizeof g_dir - 32);
    pthread_mutex_lock(&g_dir_mu);
    if (dir) {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
        g_dir_set = 1;
    } else {
        g_dir_set = 0;
    }
    pthread_mutex_unlock(&g_dir_mu);
    return MEMRA_OK;
}

const char *memra_nvrtc_cache_dir(void)
{
    char tmp[8];
    cache_dir_copy(tmp, sizeof tmp); /* resolves the default */
    return g_dir;
}

void memra_nvrtc_stats_get(memra_nvrtc_stats *s)
{
    s->compiles = atomic_load(&g_compiles);
    s->cache_hits = atomic_load(&g_hits);
    s->cache_writes = atomic_load(&g_writes);
    s->cache_bad = atomic_load(&g_bad);
}

/* =================================== 6. loaded kernels ==================================== */

typedef struct kernel_entry {
    char key[MEMRA_KERNEL_KEY_MAX]; /* canonical */
    CUmodule mod;
    CUfunction fn;
} kernel_entry;

struct memra_kernel_cache {
    CUcontext ctx;
    int sm;
    int n, cap;
    kernel_entry *e; /* [cap] */
};

int memra_kernel_cache_open(memra_kernel_cache **out, memra_err *err)
{
    int rc = memra_cu_load(err), major = 0, minor = 0;
    memra_kernel_cache *kc = NULL;
    CUcontext ctx = NULL;
    CUdevice dev;
    if (rc != MEMRA_OK)
        return rc;
    MEMRA_CU_TRY(err, cuCtxGetCurrent(&ctx));
    if (!ctx)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "kernel cache: no current CUDA context");
    MEMRA_CU_TRY(err, cuCtxGetDevice(&dev));
    MEMRA_CU_TRY(err, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev));
    MEMRA_CU_TRY(err, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           dev));
    if (!(kc = calloc(1, sizeof *kc)))
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "kernel cache");
    kc->ctx = ctx;
    kc->sm = 10 * major + minor;
    *out = kc;
    return MEMRA_OK;
fail:
    return rc;
}

void memra_kernel_cache_close(memra_kernel_cache *kc)
{
    if (!kc)
        return;
    for (int i = 0; i < kc->n; i++)
        memra_cu()->cuModuleUnload(kc->e[i].mod);
    free(kc->e);
    free(kc);
}

int memra_kernel_cache_sm(const memra_kernel_cache *kc) { return kc->sm; }

static int kernel_load(memra_kernel_cache *kc, const memra_kernel_spec *spec, const char *canon,
                       kernel_entry *ke, memra_err *err)
{
    memra_cubin cubin = {0};
    int rc = memra_nvrtc_compile(canon, kc->sm, &cubin, err);
    if (rc != MEMRA_OK)
        return rc;
    ke->mod = NULL;
    MEMRA_CU_TRY(err, cuModuleLoadData(&ke->mod, cubin.data));
    MEMRA_CU_TRY(err, cuModuleGetFunction(&ke->fn, ke->mod, memra_kernel_spec_entry(spec)));
    const size_t smem = memra_kernel_spec_smem(spec);
    if (smem > 48 * 1024)
        MEMRA_CU_TRY(err, cuFuncSetAttribute(ke->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             (int)smem));
    if (spec->tpl == MEMRA_TPL_MMVQ && mmvq_spec_direct(spec)) {
        /* the direct path's rings are its bytes in flight: all the shared memory there is */
        MEMRA_CU_TRY(err, cuFuncSetAttribute(ke->fn,
                                             CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                             100));
    } else if (spec->tpl == MEMRA_TPL_MMVQ && spec->b > 4) {
        /* shared memory for the CUDA blocks the registers allow (+1 KB reserved each), as a
         * percentage of a 228 KB SM; the rest stays L1 for the q8_1 rows (16 rows of 4096
         * are 74 KB, re-read by every block). A hint: the driver rounds up to a carveout
         * it supports, so occupancy is unchanged. */
        const size_t need = (size_t)MEMRA_MMVQ_MIN_BLOCKS(spec->b, spec->n_qt) * (smem + 1024);
        const int pct = (int)((100 * need + 228 * 1024 - 1) / (228 * 1024));
        MEMRA_CU_TRY(err, cuFuncSetAttribute(ke->fn,
                                             CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                             pct > 100 ? 100 : pct));
    }
    snprintf(ke->key, sizeof ke->key, "%s", canon);
    memra_cubin_free(&cubin);
    return MEMRA_OK;
fail:
    if (ke->mod)
        memra_cu()->cuModuleUnload(ke->mod);
    memra_cubin_free(&cubin);
    return rc;
}

int memra_kernel_get(memra_kernel_cache *kc, const char *key, CUfunction *fn, memra_err *err)
{
    memra_kernel_spec spec;
    char canon[MEMRA_KERNEL_KEY_MAX];
    int rc = memra_kernel_spec_parse(key, kc->sm, &spec, err);
    if (rc == MEMRA_OK)
        rc = memra_kernel_spec_key(&spec, canon, sizeof canon, err);
    if (rc != MEMRA_OK)
        return rc;
    for (int i = 0; i < kc->n; i++)
        if (strcmp(kc->e[i].key, canon) == 0) {
            *fn = kc->e[i].fn;
            return MEMRA_OK;
        }
    if (kc->n == kc->cap) {
        const int cap = kc->cap ? 2 * kc->cap : 16;
        kernel_entry *e = realloc(kc->e, (size_t)cap * sizeof *e);
        if (!e)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "kernel cache table");
        kc->e = e;
        kc->cap = cap;
    }
    rc = kernel_load(kc, &spec, canon, &kc->e[kc->n], err);
    if (rc != MEMRA_OK)
        return rc;
    *fn = kc->e[kc->n++].fn;
    return MEMRA_OK;
}

/* ================================ 7. mmvq launch geometry ================================= */

static int mmvq_check_out(const memra_mmvq_out *o, int i, int n_in, memra_err *err)
{
    mmvq_geom g;
    if (!mmvq_geom_of(o->qtype, &g))
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "mmvq weight %d: qtype %d has no kernel", i,
                          (int)o->qtype);
    if (n_in % g.qk != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "mmvq weight %d: n_in %d is not a multiple of its block (%d)", i, n_in,
                          g.qk);
    if (o->row_bytes != (uint64_t)(n_in / g.qk) * (uint64_t)g.bytes)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "mmvq weight %d: row_bytes %llu, expected %llu for n_in %d", i,
                          (unsigned long long)o->row_bytes,
                          (unsigned long long)(n_in / g.qk) * (unsigned long long)g.bytes, n_in);
    if ((uintptr_t)o->w % 16 != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq weight %d is not 16-byte aligned", i);
    return MEMRA_OK;
}

/* The direct path's rows per warp and the grid and shared memory it implies. */
static void mmvq_set_rpw(memra_mmvq_launch *L, long rows, int rpw)
{
    const long warps = (rows + rpw - 1) / rpw;
    L->params.rpw = rpw;
    L->smem = (unsigned)MEMRA_MMVQ_DIRECT_SMEM(L->params.n_in, L->q6k, L->b);
    L->grid = (unsigned)((warps + MEMRA_MMVQ_WARPS - 1) / MEMRA_MMVQ_WARPS);
}

static long mmvq_rows(const memra_mmvq_launch *L)
{
    long rows = 0;
    for (int i = 0; i < L->params.n_w; i++)
        rows += L->params.out[i].n_out;
    return rows;
}

int memra_mmvq_force_rpw(memra_mmvq_launch *L, int rpw, memra_err *err)
{
    if (L->params.rpw == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq: %s is not a direct launch", L->key);
    if (rpw < 1)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq: %d rows per warp", rpw);
    mmvq_set_rpw(L, mmvq_rows(L), rpw);
    return MEMRA_OK;
}

int memra_mmvq_fuse_swiglu(memra_mmvq_launch *L, void *y_q, memra_err *err)
{
    const memra_mmvq_params *p = &L->params;
    const int n = p->out[0].n_out;
    if (!y_q)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq swiglu: null output");
    if (p->rpw == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "mmvq swiglu: %s is not a direct launch",
                          L->key);
    if (p->n_w != 2 || p->out[1].n_out != n || n % 32 != 0)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "mmvq swiglu: needs {gate, up} of equal rows, a multiple of 32");
    for (int i = 0; i < 2; i++)
        if (p->out[i].mode != MEMRA_MMVQ_STORE || p->out[i].scale)
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "mmvq swiglu: weight %d adds or scales its output", i);
    L->params.swiglu_q = y_q;
    mmvq_set_rpw(L, 2L * n, MEMRA_MMVQ_SWIGLU_RPW); /* n / 32 CUDA blocks of 64 rows */
    L->smem += MEMRA_MMVQ_SWIGLU_SMEM(L->b);
    return MEMRA_OK;
}

int memra_mmvq_prepare(const memra_mmvq_args *args, int sm, int n_sm, int ksplit,
                       memra_mmvq_launch *out, memra_err *err)
{
    const char *why = args ? memra_mmvq_check(args) : "null args";
    if (why)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq: %s", why);
    if (args->b > MEMRA_MMVQ_MAX_B)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq: b = %d above %d", args->b,
                          MEMRA_MMVQ_MAX_B);
    if (sm < 90)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "mmvq: sm_%d; the template needs sm_90+", sm);
    if (ksplit != 0 && ksplit != 1 && ksplit != 2 && ksplit != 4 && ksplit != 8)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "mmvq: ksplit %d not in {0, 1, 2, 4, 8}",
                          ksplit);
    memset(out, 0, sizeof *out);
    memra_kernel_spec spec = {.tpl = MEMRA_TPL_MMVQ, .sm = sm, .b = args->b, .n_qt = args->n_w};
    long tiles = 0;
    for (int i = 0; i < args->n_w; i++) {
        const memra_mmvq_out *o = &args->out[i];
        int rc = mmvq_check_out(o, i, args->n_in, err);
        if (rc != MEMRA_OK)
            return rc;
        spec.qt[i] = o->qtype;
        tiles += (o->n_out + MEMRA_MMVQ_ROWS - 1) / MEMRA_MMVQ_ROWS;
        out->params.out[i] = (memra_mmvq_out_params){.w = o->w, .scale = o->scale, .y = o->y,
                                                     .row_bytes = o->row_bytes,
                                                     .n_out = o->n_out, .mode = o->mode};
    }
    /* P of the canonical summation order (kernels/mmvq.h memra_mmvq_parts): a function of
     * n_in only, so the GPU and the CPU reference (which knows nothing of tiles, merged
     * launches or tiers) reduce every output in the same order. A CUDA block of 8 warps runs
     * 8 / P tiles, one warp per (tile, part): P = 8 for n_in >= 4096 puts 2 048 warps on a
     * 4096 x 4096 weight (15.5 per SM of an H200), each streaming 2 of the 16 steps. */
    const int ks = ksplit ? ksplit : memra_mmvq_parts(args->n_in);
    int rc = memra_kernel_spec_key(&spec, out->key, sizeof out->key, err);
    if (rc != MEMRA_OK)
        return rc;
    out->params.a = args->a;
    out->params.n_in = args->n_in;
    out->params.n_w = args->n_w;
    out->params.ksplit = ks;
    out->threads = (unsigned)memra_kernel_spec_threads(&spec);
    out->smem = (unsigned)mmvq_spec_staged_smem(&spec);
    out->b = args->b;
    const int direct = mmvq_spec_direct(&spec), max_in = MEMRA_MMVQ_DIRECT_MAX_IN(args->b);
    if (direct && args->b == 1 && args->n_in > max_in)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                          "mmvq: n_in %d above %d, the largest the B = 1 path of %s stages",
                          args->n_in, max_in, out->key);
    if (direct && args->n_in <= max_in) {
        /* rows per warp: the fewest that run the launch in one wave of the CUDA blocks an SM
         * holds (shared memory bound: 3 for q4_K up to n_in = 12288 at B = 1), i.e. the longest
         * contiguous stream per warp with no second wave, and at B = 1 at most
         * MEMRA_MMVQ_DIRECT_MAX_RPW_B1 (an LM head: more waves measured faster); a speed
         * choice only */
        out->q6k = mmvq_spec_q6k(&spec);
        /* + 1 KB the driver reserves per CUDA block, of an SM's 228 KB */
        const long smem = MEMRA_MMVQ_DIRECT_SMEM(args->n_in, out->q6k, args->b) + 1024;
        long per_sm = (long)(228 * 1024) / smem;
        per_sm = per_sm < 1 ? 1 : per_sm > 8 ? 8 : per_sm;
        const long cap = per_sm * MEMRA_MMVQ_WARPS * (n_sm > 0 ? n_sm : 132);
        const long rows = mmvq_rows(out);
        long rpw = (rows + cap - 1) / cap;
        if (args->b == 1 && rpw > MEMRA_MMVQ_DIRECT_MAX_RPW_B1)
            rpw = MEMRA_MMVQ_DIRECT_MAX_RPW_B1;
        mmvq_set_rpw(out, rows, (int)rpw);
        return MEMRA_OK;
    }
    out->grid = (unsigned)((tiles * ks + MEMRA_MMVQ_WARPS - 1) / MEMRA_MMVQ_WARPS);
    return MEMRA_OK;
}
