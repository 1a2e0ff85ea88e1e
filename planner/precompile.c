/*
 * precompile.c — memra-plan --precompile: compile every NVRTC specialization a plan
 * directory's manifest lists, for one architecture, into the NVRTC disk cache, so that a
 * serving start reads cubins and runs no compiler (see planner.h).
 *
 * Keys go through memra_nvrtc_compile_key() (the canonical key, sm appended): the name
 * memra_kernel_get gives the same plan key when the CUDA backend's start looks it up, so each
 * compile lands under the cache name the start reads.
 * Keys of fixed nvcc kernels (attn_decode, ...) are counted and skipped.
 *
 * Must not: touch a GPU (NVRTC needs none: this runs on build machines); print (progress goes
 * through the caller's callback, serialized under one mutex).
 * Invariants: one key per worker at a time, claimed from one atomic counter, so every key is
 * compiled exactly once; after the first failure no worker claims another key.
 */
#include "planner.h"

#include <string.h>

#ifdef MEMRA_HAVE_NVRTC

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/nvrtc.h" /* ours: it shadows the toolkit's <nvrtc.h> */

#define MAX_THREADS 64

typedef struct job {
    const memra_precompile_opts *o;
    char (*keys)[MEMRA_KERNEL_KEY_MAX]; /* [n] canonical compile keys (with sm) */
    uint32_t n;
    atomic_uint next;    /* next key to claim */
    atomic_int failed;   /* set on the first failure: stop claiming */
    pthread_mutex_t mu;  /* guards the fields below and the progress callback */
    uint32_t done, compiled, cached;
    int rc;              /* first failure */
    memra_err err;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void key_done(job *j, uint32_t i, int rc, const memra_cubin *c, double s,
                     const memra_err *e)
{
    pthread_mutex_lock(&j->mu);
    if (rc == MEMRA_OK) {
        j->done++;
        if (c->from_cache)
            j->cached++;
        else
            j->compiled++;
        if (j->o->progress) {
            char line[MEMRA_KERNEL_KEY_MAX + 64];
            snprintf(line, sizeof line, "%u/%u %s %.2f s%s", j->done, j->n, j->keys[i], s,
                     c->from_cache ? " (cached)" : "");
            j->o->progress(line, j->o->progress_user);
        }
    } else if (j->rc == MEMRA_OK) {
        j->rc = rc;
        j->err = *e;
        atomic_store(&j->failed, 1);
    }
    pthread_mutex_unlock(&j->mu);
}

static void *worker(void *arg)
{
    job *j = arg;
    for (uint32_t i; !atomic_load(&j->failed) && (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        memra_cubin c;
        memra_err e;
        memra_err_clear(&e);
        const double t0 = now_s();
        const int rc = memra_nvrtc_compile(j->keys[i], j->o->sm, &c, &e);
        key_done(j, i, rc, &c, now_s() - t0, &e);
        if (rc == MEMRA_OK)
            memra_cubin_free(&c);
    }
    return NULL;
}

/* Runs the workers over j->keys: this thread plus up to n_threads - 1 more. */
static void run_workers(job *j)
{
    long cpus = j->o->n_threads ? (long)j->o->n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t nt = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (uint32_t)cpus;
    if (nt > j->n)
        nt = j->n ? j->n : 1;
    pthread_t th[MAX_THREADS];
    uint32_t started = 0;
    while (started + 1 < nt && pthread_create(&th[started], NULL, worker, j) == 0)
        started++;
    worker(j); /* this thread works too (alone if no thread started) */
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

/* The manifest's NVRTC keys as compile keys for sm; fixed-kernel keys are counted. */
static int collect_keys(const memra_plan_manifest *m, const memra_precompile_opts *o, job *j,
                        memra_precompile_stats *st, memra_err *err)
{
    j->keys = calloc(m->n_kernels ? m->n_kernels : 1, sizeof *j->keys);
    if (!j->keys)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "precompile: %u keys: out of memory",
                          m->n_kernels);
    for (uint32_t i = 0; i < m->n_kernels; i++) {
        const int rc = memra_nvrtc_compile_key(m->kernels[i], o->sm, j->keys[j->n],
                                               MEMRA_KERNEL_KEY_MAX, err);
        if (rc == MEMRA_ERR_NOT_FOUND)
            st->n_fixed++;
        else if (rc != MEMRA_OK)
            return rc;
        else if (!o->max_keys || j->n < o->max_keys)
            j->n++;
    }
    st->n_keys = j->n;
    return MEMRA_OK;
}

/* Points the NVRTC cache at o->cache_dir (prev keeps the old one) and checks it is on. */
static int use_cache_dir(const memra_precompile_opts *o, char *prev, size_t n, int *set,
                         memra_err *err)
{
    snprintf(prev, n, "%s", memra_nvrtc_cache_dir());
    if (o->cache_dir) {
        const int rc = memra_nvrtc_set_cache_dir(o->cache_dir, err);
        if (rc != MEMRA_OK)
            return rc;
        *set = 1;
    }
    if (!memra_nvrtc_cache_dir()[0])
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "precompile: the NVRTC disk cache is disabled (no cache dir, no "
                          "$XDG_CACHE_HOME or $HOME): nothing would be kept");
    return MEMRA_OK;
}

int memra_planner_precompile(const memra_precompile_opts *o, memra_precompile_stats *st,
                             memra_err *err)
{
    memra_plan_manifest *m = NULL;
    job j = {.o = o, .rc = MEMRA_OK};
    char prev[1024];
    int rc = MEMRA_OK, dir_set = 0;
    const double t0 = now_s();
    if (st)
        memset(st, 0, sizeof *st);
    if (!o || !o->plan_dir || !st)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "precompile: null argument");
    if (o->sm < 10 || o->sm > 999)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "precompile: bad architecture sm_%d",
                          o->sm);
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    MEMRA_TRY(memra_plan_manifest_load(o->plan_dir, &m, err));
    MEMRA_TRY(collect_keys(m, o, &j, st, err));
    MEMRA_TRY(use_cache_dir(o, prev, sizeof prev, &dir_set, err));
    run_workers(&j);
    st->compiled = j.compiled;
    st->cached = j.cached;
    if ((rc = j.rc) != MEMRA_OK && err && err->code == MEMRA_OK)
        *err = j.err; /* the first failure recorded wins (err.h) */
fail:
    if (dir_set)
        memra_nvrtc_set_cache_dir(prev, NULL);
    st->seconds = now_s() - t0;
    pthread_mutex_destroy(&j.mu);
    free(j.keys);
    memra_plan_manifest_free(m);
    return rc;
}

#else /* built without CUDA: no memra_nvrtc */

int memra_planner_precompile(const memra_precompile_opts *o, memra_precompile_stats *st,
                             memra_err *err)
{
    (void)o;
    if (st)
        memset(st, 0, sizeof *st);
    return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                      "kernel precompilation needs NVRTC, and this build has no CUDA "
                      "(configure on a machine with the CUDA toolkit)");
}

#endif
