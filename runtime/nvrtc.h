/*
 * nvrtc.h — kernel specializations: parse a specialization key, compile the NVRTC template it
 * names for one GPU architecture, cache the cubin on disk, and load it into a CUDA context.
 *
 * A key names a template and its parameters; it is both the plan's kernel id and the cache
 * key (STYLE.md):
 *     mmvq:qt=q4_K:b=8:sm=90            batched mat-vec, one Q4_K weight, tier 8, sm_90
 *     mmvq:qt=q4_K+q4_K+q6_K:b=1        merged launch of three weights (sm from the caller)
 *     quantize_q8_1:sm=90               the q8_1 activation quantizer
 * qtype names are runtime/qtype.c's ("q4_K", case-insensitive on input); the canonical form
 * (memra_kernel_spec_key) orders fields as above and always carries sm.
 *
 * Disk cache: <cache dir>/<16 hex>.cubin, the hex being xxh64 of the canonical key and of a
 * hash over every embedded template source, the NVRTC options and the NVRTC version, so an
 * edited template or another NVRTC never reuses a stale cubin. Each file carries the key and
 * the payload's xxh64 and is verified on read; a bad file is recompiled and replaced. Files
 * are written to a temporary name and renamed, so concurrent processes never see a torn file.
 *
 * Must not: touch a GPU in memra_nvrtc_compile (NVRTC needs none; CI compiles every
 * specialization on machines without one); print (logs go through memra_log).
 * Thread safety: memra_nvrtc_compile may run concurrently; set the cache dir before that.
 * A memra_kernel_cache belongs to one context and one thread at a time.
 */
#ifndef MEMRA_NVRTC_H
#define MEMRA_NVRTC_H

#include <cuda.h>
#include <stddef.h>

#include "err.h"
#include "kernels/mmvq.h"
#include "nvrtc_templates/mmvq_params.h"

#define MEMRA_KERNEL_KEY_MAX 128

enum { MEMRA_TPL_MMVQ = 1, MEMRA_TPL_QUANTIZE_Q8_1 = 2 };

typedef struct memra_kernel_spec {
    int tpl;   /* MEMRA_TPL_* */
    int sm;    /* 10 * major + minor, e.g. 90 */
    int b;     /* mmvq: tier rows 1..MEMRA_MMVQ_MAX_B; 0 for other templates */
    int n_qt;  /* mmvq: weights 1..MEMRA_MMVQ_MAX_OUT */
    int qt[MEMRA_MMVQ_MAX_OUT]; /* mmvq: memra_qtype of each weight */
} memra_kernel_spec;

/* Parses key; sm = 0 takes the architecture from the key's "sm=", otherwise the key's sm (if
 * any) must equal it. MEMRA_ERR_INVALID_ARG naming the bad field, or MEMRA_ERR_UNSUPPORTED
 * for a template or qtype this build cannot specialize. */
int memra_kernel_spec_parse(const char *key, int sm, memra_kernel_spec *spec, memra_err *err);
/* A plan's kernel key (plans carry no sm) as the key to compile for sm: the canonical key,
 * sm appended when the plan key has none ("mmvq:qt=q4_K:b=1", 90 -> "mmvq:qt=q4_K:b=1:sm=90").
 * MEMRA_ERR_NOT_FOUND (err untouched) when the key's template is not an NVRTC one
 * (attn_decode, mmvq_moe, ...: the geometry of a fixed nvcc kernel, nothing to compile);
 * memra_kernel_spec_parse's codes for a malformed NVRTC key. Backends loading a plan and
 * memra-plan --precompile both pick and name their compiles with this. */
int memra_nvrtc_compile_key(const char *plan_key, int sm, char *buf, size_t n, memra_err *err);
/* Canonical key of spec into buf; MEMRA_ERR_INVALID_ARG if it does not fit. */
int memra_kernel_spec_key(const memra_kernel_spec *spec, char *buf, size_t n, memra_err *err);
/* The extern "C" entry point of the specialization ("memra_mmvq", "memra_quantize_q8_1"). */
const char *memra_kernel_spec_entry(const memra_kernel_spec *spec);
/* Threads per CUDA block and dynamic shared memory bytes a launch must use. */
int memra_kernel_spec_threads(const memra_kernel_spec *spec);
size_t memra_kernel_spec_smem(const memra_kernel_spec *spec);

/* The CUDA C++ source NVRTC compiles for spec (the template instantiation and its entry). */
int memra_nvrtc_source(const memra_kernel_spec *spec, char *buf, size_t n, memra_err *err);

typedef struct memra_cubin {
    void *data;     /* owned; free with memra_cubin_free */
    size_t size;
    int from_cache; /* 1 when read from the disk cache */
} memra_cubin;

/* Compiles (or reads from the disk cache) the cubin of key for sm (0 = the key's sm). */
int memra_nvrtc_compile(const char *key, int sm, memra_cubin *out, memra_err *err);
void memra_cubin_free(memra_cubin *c);

/* The disk cache directory: dir = NULL restores the default ($XDG_CACHE_HOME/memra/kernels,
 * else $HOME/.cache/memra/kernels, else no disk cache); "" disables the disk cache. The
 * directory is created on first write. */
int memra_nvrtc_set_cache_dir(const char *dir, memra_err *err);
/* The directory in use ("" when disabled); valid until the next set call. */
const char *memra_nvrtc_cache_dir(void);

typedef struct memra_nvrtc_stats {
    long compiles;     /* NVRTC compilations run */
    long cache_hits;   /* cubins read from disk */
    long cache_writes; /* cubins written to disk */
    long cache_bad;    /* unreadable or mismatching cache files replaced */
} memra_nvrtc_stats;
void memra_nvrtc_stats_get(memra_nvrtc_stats *s);
/* NVRTC version; the major.minor part of every cache key. */
void memra_nvrtc_version(int *major, int *minor);

/* ---- loaded kernels (needs a current CUDA context: cuda_util.h memra_cu_device_open) ---- */

typedef struct memra_kernel_cache memra_kernel_cache;

/* Binds to the current context and its device's architecture. */
int memra_kernel_cache_open(memra_kernel_cache **out, memra_err *err);
void memra_kernel_cache_close(memra_kernel_cache *kc); /* NULL is a no-op; unloads modules */
/* The function of key (sm: the cache's device), compiling and loading it on first use and
 * raising its dynamic shared memory limit to memra_kernel_spec_smem. */
int memra_kernel_get(memra_kernel_cache *kc, const char *key, CUfunction *fn, memra_err *err);
int memra_kernel_cache_sm(const memra_kernel_cache *kc);

/* ---- mmvq launch geometry ---- */

typedef struct memra_mmvq_launch {
    char key[MEMRA_KERNEL_KEY_MAX]; /* canonical specialization key */
    unsigned grid, threads;         /* 1-D grid of CUDA blocks of `threads` threads */
    unsigned smem;                  /* dynamic shared memory bytes */
    int b;                          /* rows (the tier) */
    int q6k;                        /* a q6_K weight in a direct launch (its ring slot size) */
    memra_mmvq_params params;       /* the kernel's only parameter */
} memra_mmvq_launch;

/* Validates args (kernels/mmvq.h) and fills the launch: key for sm, grid, parameters.
 * ksplit = 0 picks memra_mmvq_parts(n_in) (kernels/mmvq.h: the canonical order, a function
 * of n_in only, so every output equals memra_mmvq_dot's; what the backend uses); 1, 2,
 * 4 or 8 forces another order (tests of the combine path only: not CPU-exact). n_sm: the
 * device's SM count (0: 132), which sizes the direct path's rows per warp (B <= 2, every weight
 * q4_K / q6_K, mmvq_params.h MEMRA_MMVQ_DIRECT; params.rpw > 0 when a launch takes it: at
 * B > 1 only up to MEMRA_MMVQ_DIRECT_MAX_IN(B), larger rows stage; B = 1 refuses larger
 * rows with MEMRA_ERR_UNSUPPORTED). Weights must be
 * 16-byte aligned and every row_bytes must equal the qtype's bytes for n_in elements. */
int memra_mmvq_prepare(const memra_mmvq_args *args, int sm, int n_sm, int ksplit,
                       memra_mmvq_launch *out, memra_err *err);
/* Tests and measurements of the direct path: replaces a prepared direct launch's rows
 * per warp (params.rpw, >= 1) and its grid. Not a numerical choice. */
int memra_mmvq_force_rpw(memra_mmvq_launch *L, int rpw, memra_err *err);

/* Folds silu_mul_q8 into a prepared direct launch of {gate, up} (mmvq_params.h swiglu_q):
 * the launch then writes y_q = q8_1(silu(g) * u) [b, N / 32], the bytes silu_mul_q8 would
 * write from its g and u, and no longer stores g and u. Needs a direct launch (params.rpw >
 * 0) of two weights of N rows each, N % 32 == 0, store mode and no scale; else
 * MEMRA_ERR_UNSUPPORTED and L is unchanged. Sets rows per warp, grid and shared memory. */
int memra_mmvq_fuse_swiglu(memra_mmvq_launch *L, void *y_q, memra_err *err);

/* Whether mmvq can specialize weight type qt (memra_qtype), and its dot block in elements. */
int memra_mmvq_supports(int qt);
int memra_mmvq_dot_elems(int qt);

/* ---- internal: the template sources, embedded at build time (cmake/nvrtc.cmake) ---- */
typedef struct memra_nvrtc_file {
    const char *name; /* as #included: "mmvq.cuh" */
    const char *text; /* NUL-terminated file contents */
} memra_nvrtc_file;
extern const memra_nvrtc_file memra_nvrtc_files[];
extern const int memra_nvrtc_n_files;

#endif
