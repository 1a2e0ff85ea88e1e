/*
 * bench_backend.c — memra-bench's seam over the CPU and CUDA backends (see bench_backend.h
 * for what each timing means). Forwarding only: no policy lives here.
 */
#include "bench_backend.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int bench_be_available(memra_bench_backend kind)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    return kind == MEMRA_BENCH_CPU || kind == MEMRA_BENCH_CUDA;
#else
    return kind == MEMRA_BENCH_CPU;
#endif
}

const char *bench_be_name(memra_bench_backend kind)
{
    return kind == MEMRA_BENCH_CUDA ? "cuda" : "cpu";
}

const char *bench_be_host_method(memra_bench_backend kind)
{
    return kind == MEMRA_BENCH_CUDA
               ? "wall time of the step outside its wait for the device (checks, tick block, "
                 "graph launch, readout; memra_cuda_info.last_host_us)"
               : "thread CPU time of the step (the CPU backend's whole tick is host work)";
}

int bench_be_open(bench_be *b, memra_bench_backend kind, const char *plan_dir, const memra_gguf *g,
                  const bench_be_opts *o, memra_err *err)
{
    int rc;
    memset(b, 0, sizeof *b);
    b->kind = kind;
    if (kind == MEMRA_BENCH_CPU) {
        memra_cpu_opts co;
        memra_cpu_opts_init(&co);
        co.n_slots = o->n_slots;
        co.n_ctx = o->n_ctx;
        co.skip_ops = o->skip_ops;
        rc = memra_cpu_backend_open(plan_dir, g, &co, &b->cpu, err);
        if (rc == MEMRA_OK)
            b->n_vocab = memra_cpu_backend_n_vocab(b->cpu);
        return rc;
    }
#ifdef MEMRA_BENCH_WITH_CUDA
    memra_cuda_opts uo;
    memra_cuda_opts_init(&uo);
    uo.n_slots = o->n_slots;
    uo.n_ctx = o->n_ctx;
    uo.graphs = o->graphs;
    uo.skip_ops = o->skip_ops;
    uo.fuse = !o->no_fusion;
    if (o->norm_release >= 0)
        uo.norm_release_tiers = (uint32_t)o->norm_release;
    if (o->attn_split_ctas != MEMRA_BENCH_UNSET) { /* one grid for every tier, `max` too */
        uo.attn_split_ctas = o->attn_split_ctas;
        uo.attn_auto_tiers = 0;
    }
    if (o->attn_auto >= 0) /* after: --attn-split-ctas max --attn-auto 1,2 */
        uo.attn_auto_tiers = (uint32_t)o->attn_auto;
    if (o->attn_prefetch != MEMRA_BENCH_UNSET)
        uo.attn_prefetch = o->attn_prefetch;
    if (o->gdn_prefetch != MEMRA_BENCH_UNSET)
        uo.gdn_prefetch = o->gdn_prefetch;
    if (o->gdn_split != MEMRA_BENCH_UNSET)
        uo.gdn_split = o->gdn_split;
    if (o->l2_side != MEMRA_BENCH_UNSET)
        uo.l2_side_mib = (uint32_t)o->l2_side;
    uo.l2_side_spread = o->l2_side_spread;
    uo.device = o->device;
    b->sched = (memra_bench_sched){.known = 1,
                                   .fuse = uo.fuse,
                                   .attn_split_ctas = uo.attn_split_ctas,
                                   .attn_prefetch = uo.attn_prefetch,
                                   .gdn_prefetch = uo.gdn_prefetch,
                                   .gdn_split = uo.gdn_split,
                                   .norm_release_tiers = uo.norm_release_tiers,
                                   .attn_auto_tiers = uo.attn_auto_tiers,
                                   .l2_side_mib = uo.l2_side_mib,
                                   .l2_side_spread = uo.l2_side_spread};
    rc = memra_cuda_backend_open(plan_dir, g, &uo, &b->cuda, err);
    if (rc == MEMRA_OK) {
        b->n_vocab = memra_cuda_backend_n_vocab(b->cuda);
        b->graphs = memra_cuda_backend_info(b->cuda)->graphs;
    }
    return rc;
#else
    return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                      "backend cuda: this memra-bench was built "
                      "without CUDA (no nvcc or no CUDA backend at configure time)");
#endif
}

void bench_be_close(bench_be *b)
{
    memra_cpu_backend_close(b->cpu);
    b->cpu = NULL;
#ifdef MEMRA_BENCH_WITH_CUDA
    memra_cuda_backend_close(b->cuda);
    b->cuda = NULL;
#endif
}

int bench_be_admit(bench_be *b, uint32_t *session, memra_err *err)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return memra_cuda_session_admit(b->cuda, NULL, session, err);
#endif
    return memra_cpu_session_admit(b->cpu, NULL, session, err);
}

int bench_be_retire(bench_be *b, uint32_t session, memra_err *err)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return memra_cuda_session_retire(b->cuda, session, err);
#endif
    return memra_cpu_session_retire(b->cpu, session, err);
}

uint32_t bench_be_pos(const bench_be *b, uint32_t session)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return memra_cuda_session_pos(b->cuda, session);
#endif
    return memra_cpu_session_pos(b->cpu, session);
}

int bench_be_can_fill(const bench_be *b)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return 1;
#endif
    return b->cpu != NULL;
}

int bench_be_fill(bench_be *b, uint32_t session, uint32_t pos, uint64_t seed, memra_err *err)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return memra_cuda_session_fill_synthetic(b->cuda, session, pos, seed, err);
#endif
    return memra_cpu_session_fill_synthetic(b->cpu, session, pos, seed, err);
}

int bench_be_step(bench_be *b, uint32_t n_rows, const uint32_t *sessions, const int32_t *tokens,
                  uint32_t tier, int32_t *out, bench_tick *t, memra_err *err)
{
    int rc;
    double w0, c0, w1, c1;
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda) {
        const memra_cuda_step st = {.n_rows = n_rows,
                                    .sessions = sessions,
                                    .tokens = tokens,
                                    .tier = tier,
                                    .out_tokens = out};
        rc = memra_cuda_backend_step(b->cuda, &st, err);
        if (rc == MEMRA_OK && t) {
            const memra_cuda_info *in = memra_cuda_backend_info(b->cuda);
            t->lat_ms = in->last_tick_ms;
            t->host_us = in->last_host_us;
            t->launch_us = in->last_launch_us;
        }
        return rc;
    }
#endif
    const memra_cpu_step st = {
        .n_rows = n_rows, .sessions = sessions, .tokens = tokens, .tier = tier, .out_tokens = out};
    w0 = clock_ms(CLOCK_MONOTONIC);
    c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    rc = memra_cpu_backend_step(b->cpu, &st, err);
    c1 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    w1 = clock_ms(CLOCK_MONOTONIC);
    if (rc == MEMRA_OK && t) {
        t->lat_ms = w1 - w0;
        t->host_us = (c1 - c0) * 1e3;
    }
    return rc;
}

int bench_be_logits(bench_be *b, uint32_t row, uint32_t n_rows, float *dst, memra_err *err)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda)
        return memra_cuda_backend_logits(b->cuda, row, n_rows, dst, err);
#endif
    for (uint32_t r = 0; r < n_rows; r++) {
        const float *l = memra_cpu_backend_logits(b->cpu, row + r);
        if (!l)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                              "logits: row %u is not a row of the "
                              "last step",
                              row + r);
        memcpy(dst + (size_t)r * b->n_vocab, l, sizeof(float) * b->n_vocab);
    }
    return MEMRA_OK;
}

/* "model name : ..." of /proc/cpuinfo, and the online CPU count. */
static void cpu_name(char *buf, size_t n)
{
    char line[256], name[160] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(name, sizeof name, "%s", strchr(line, ':') + 2);
            name[strcspn(name, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
    snprintf(buf, n, "%s (CPU backend, 1 thread)", name);
}

void bench_be_device(const bench_be *b, char *buf, size_t n)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    if (b->cuda) {
        const memra_cuda_info *in = memra_cuda_backend_info(b->cuda);
        snprintf(buf, n, "%s (sm_%d, %d SMs)", in->device_name, in->sm, in->n_sm);
        return;
    }
#endif
    (void)b;
    cpu_name(buf, n);
}

#ifdef MEMRA_BENCH_WITH_CUDA
/* The CUDA engine's info and the index of tier in it, or -1 (no CUDA engine, an unknown tier). */
static int cuda_tier(const bench_be *b, uint32_t tier, const memra_cuda_info **info)
{
    if (!b->cuda)
        return -1;
    *info = memra_cuda_backend_info(b->cuda);
    for (uint32_t t = 0; t < (*info)->n_tiers; t++)
        if ((*info)->tiers[t] == tier)
            return (int)t;
    return -1;
}
#endif

/* One of memra_cuda_info's per-tier counts at tier, by its offset in the struct: `none` when
 * the backend is not CUDA or the tier is not one of its. */
#ifdef MEMRA_BENCH_WITH_CUDA
#define CUDA_TIER_U32(b, tier, field, none)                                                        \
    cuda_tier_u32(b, tier, offsetof(memra_cuda_info, field), none)
static uint32_t cuda_tier_u32(const bench_be *b, uint32_t tier, size_t off, uint32_t none)
{
    const memra_cuda_info *in = NULL;
    const int t = cuda_tier(b, tier, &in);
    return t >= 0 ? ((const uint32_t *)((const char *)in + off))[t] : none;
}
_Static_assert(MEMRA_BENCH_L2_SIDE_MAX == MEMRA_CUDA_L2_SIDE_MAX_MIB, "--l2-side's range");
#else
#define CUDA_TIER_U32(b, tier, field, none) ((void)(b), (void)(tier), (none))
#endif

uint32_t bench_be_graph_nodes(const bench_be *b, uint32_t tier)
{
    return b->graphs ? CUDA_TIER_U32(b, tier, graph_nodes, 0) : 0;
}

uint32_t bench_be_launches(const bench_be *b, uint32_t tier, uint32_t plan_launches)
{
    return CUDA_TIER_U32(b, tier, launches, plan_launches);
}

uint32_t bench_be_attn_split_ctas(const bench_be *b, uint32_t tier)
{
    return CUDA_TIER_U32(b, tier, attn_split_ctas, 0);
}

uint32_t bench_be_l2_side_forks(const bench_be *b, uint32_t tier)
{
    return CUDA_TIER_U32(b, tier, l2_side_forks, 0);
}

uint64_t bench_be_l2_side_bytes(const bench_be *b, uint32_t tier)
{
#ifdef MEMRA_BENCH_WITH_CUDA
    const memra_cuda_info *in = NULL;
    const int t = cuda_tier(b, tier, &in);
    return t >= 0 ? in->l2_side_bytes[t] : 0;
#else
    (void)b, (void)tier;
    return 0;
#endif
}

int bench_be_copy_bw(memra_bench_backend kind, int device, uint64_t bytes, uint32_t reps,
                     double *best_gbs, double *median_gbs, char *method, size_t method_n,
                     memra_err *err)
{
    if (kind == MEMRA_BENCH_CPU) {
        snprintf(method, method_n, "host memcpy, %.0f MiB, best of %u", (double)bytes / 1048576.0,
                 reps);
        return memra_bench_copy_bw_host(bytes, reps, best_gbs, median_gbs, err);
    }
#ifdef MEMRA_BENCH_WITH_CUDA
    char name[128];
    snprintf(method, method_n, "device copy, 16-byte loads, %.0f MiB, best of %u",
             (double)bytes / 1048576.0, reps);
    return memra_bench_copy_bw_cuda(device, bytes, reps, best_gbs, median_gbs, name, sizeof name,
                                    err);
#else
    (void)device;
    return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "backend cuda: not in this build");
#endif
}
