/*
 * backend_cuda.c — the CUDA backend (see backend_cuda.h for the concept and the contract).
 *
 * Invariants after memra_cuda_backend_open:
 *   - plans[t * n_stages + s] is the validated plan of manifest tier t, stage s, with its own
 *     pinned tick block, the device copy of it, and one bound launch per plan launch whose
 *     args hold device pointers only (arena, weights region, device tick block);
 *   - arena[s] fits every tier's plan of stage s (plans run one at a time on one stream);
 *   - every weight a plan references has one device copy (wdev), uploaded before any launch;
 *   - with opts.graphs, tiers[t].graph replays enqueue_tier(t) exactly;
 *   - sessions[i] describes slot i (session id == slot index), as in the CPU backend;
 *   - after a step returns, no device work is in flight (the pinned blocks may be rewritten).
 * Sections: helpers -> op table -> weights -> open/close -> enqueue + capture -> sessions ->
 * step -> readout.
 */
#include "backend_cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bind.h"
#include "cuda_ops.h"
#include "cuda_util.h"
#include "graph.h"
#include "l2_side.h"
#include "mmvq.h"
#include "nvrtc.h"
#include "slots.h"
#include "tick.h"

/* ====================================== helpers ====================================== */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t align256(uint64_t x)
{
    return (x + 255) / 256 * 256;
}

/* ====================================== op table ====================================== */
/* Binding is runtime/bind.c's, the same field mapping as the CPU backend's; here it points
 * at the device arena, each weight's device copy (cuda_plan.wdev) and the device copy of the
 * tick block (cuda_plan.dev). What is CUDA's own is how a bound launch runs. */

/* nvcc-compiled kernels (kernels/cuda_ops.h); NULL for mmvq (NVRTC: bind_mmvq_launch,
 * launch_mmvq) and for ops without a CUDA kernel yet. */
typedef int (*run_fn)(const memra_op_args *a, cudaStream_t s);

#define OP_CUDA(op)                                                                                \
    static int run_##op(const memra_op_args *a, cudaStream_t s)                                    \
    {                                                                                              \
        return memra_##op##_cuda(&a->op, s);                                                       \
    }
OP_CUDA(embed)
OP_CUDA(rms_norm_q8)
OP_CUDA(attn_prep)
OP_CUDA(attn_decode)
OP_CUDA(gdn_step)
OP_CUDA(silu_mul_q8)
OP_CUDA(moe_route)
OP_CUDA(mmvq_moe)
OP_CUDA(moe_down)
OP_CUDA(sample)
#undef OP_CUDA

static const run_fn k_run[MEMRA_OP_COUNT] = {
    [MEMRA_OP_EMBED] = run_embed,
    [MEMRA_OP_RMS_NORM_Q8] = run_rms_norm_q8,
    [MEMRA_OP_MMVQ] = NULL,
    [MEMRA_OP_ATTN_PREP] = run_attn_prep,
    [MEMRA_OP_ATTN_DECODE] = run_attn_decode,
    [MEMRA_OP_GDN_STEP] = run_gdn_step,
    [MEMRA_OP_SILU_MUL_Q8] = run_silu_mul_q8,
    [MEMRA_OP_MOE_ROUTE] = run_moe_route,
    [MEMRA_OP_MMVQ_MOE] = run_mmvq_moe,
    [MEMRA_OP_MOE_DOWN] = run_moe_down,
    [MEMRA_OP_SAMPLE] = run_sample,
};

/* ====================================== state ======================================== */

typedef struct cuda_launch {
    uint32_t op;
    int folded;           /* its work is done by the launch before it (fold_pairs): skipped */
    int skipped;          /* left out of the tick (opts.skip_ops, a timing experiment) */
    memra_op_args a;      /* bound args: device pointers */
    CUfunction fn;        /* mmvq: the NVRTC specialization */
    memra_mmvq_launch ml; /* mmvq: geometry and the kernel's parameter block */
} cuda_launch;

typedef struct cuda_plan {
    memra_plan *plan;
    cudaEvent_t *prof;    /* opts.profile: [n_launches + 1] timing events (owned) */
    uint32_t *region_map; /* [n_states] plan region -> slot layout region */
    memra_tick_layout tl;
    void *tick_pinned;     /* tl.bytes of pinned host memory (owned) */
    void *tick_mapped;     /* its device address (mapped): the tick's copy kernels' side */
    memra_tick host;       /* views of tick_pinned */
    uint32_t *row_slot;    /* [tier b] slot whose region addresses row r of host holds
                              (UINT32_MAX: none yet): fill_tick rewrites a row's
                              n_states addresses only when its slot changes */
    void *tick_dev;        /* tl.bytes of device memory (owned) */
    memra_tick dev;        /* views of tick_dev: device addresses, for binding only */
    const void **wdev;     /* [n_weights] device address of each plan weight */
    cuda_launch *launches; /* [n_launches] */
    memra_l2_fork *forks;  /* opts.l2_side_mib: [n_forks] (owned), in launch order */
    memra_l2_prefetch_args *fork_args; /* [n_forks]: each fork's ranges (device addresses) */
    uint32_t n_forks;
} cuda_plan;

/* One distinct uploaded tensor. */
typedef struct dev_weight {
    const memra_gguf_tensor *t; /* borrowed from g */
    uint64_t off;               /* in the weights region */
} dev_weight;

typedef struct cuda_session {
    int live;
    int failed; /* was in a tick that failed on the device */
    uint32_t pos;
    memra_sample_params params;
} cuda_session;

typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);

typedef struct fault {
    int kind;      /* MEMRA_CUDA_FAULT_* */
    uint32_t tier; /* manifest tier index */
    uint32_t launch;
} fault;

struct memra_cuda_backend {
    const memra_gguf *g;
    memra_cuda_opts opts;
    memra_plan_manifest *m;
    uint32_t n_tiers, n_stages;
    cuda_plan *plans; /* [n_tiers * n_stages] */
    memra_graph graphs[MEMRA_PLAN_MAX_TIERS];
    int dev_open; /* memra_cu_device_open succeeded */
    cudaStream_t stream;
    cudaStream_t side;            /* opts.l2_side_mib: the prefetch branch's stream */
    cudaEvent_t ev_fork, ev_join; /* opts.l2_side_mib: the branch's fork and join */
    cudaEvent_t ev_start, ev_done;
    memra_kernel_cache *kc;
    launch_ex_fn launch_ex;          /* cuLaunchKernelEx (PDL); NULL: cuLaunchKernel */
    CUresult (*ctx_reset)(CUdevice); /* cuDevicePrimaryCtxReset, resolved while healthy */
    dev_weight *w;                   /* [n_w] sorted by host address (file order) */
    uint32_t n_w;
    uint8_t *weights;                      /* device region of info.weight_bytes */
    uint8_t *arena[MEMRA_PLAN_MAX_STAGES]; /* device */
    uint8_t *slot_mem[MEMRA_PLAN_MAX_STAGES];
    memra_slot_layout layout;
    memra_slot_pool pool;
    cuda_session *sessions; /* [n_slots], index = slot */
    uint32_t last_tier;     /* manifest tier index + 1; 0 = none */
    uint32_t last_rows;
    uint64_t n_ticks;
    double wait_ms[2]; /* the last tick's wait for the device: began, ended (now_ms) */
    int poisoned;
    char poison_msg[sizeof(((memra_err *)0)->msg)];
    fault fault;
    memra_cuda_info info;
};

void memra_cuda_opts_init(memra_cuda_opts *o)
{
    *o = (memra_cuda_opts){.n_slots = 16,
                           .n_ctx = 4096,
                           .device = 0,
                           .graphs = 1,
                           .pdl = 1,
                           .fuse = 1,
                           .norm_release_tiers = MEMRA_CUDA_NORM_RELEASE_TIERS,
                           .attn_prefetch = MEMRA_CUDA_ATTN_PREFETCH,
                           .attn_auto_tiers = MEMRA_CUDA_ATTN_AUTO_TIERS,
                           .sync_launches = 0,
                           .staging_mib = 64};
}

/* The scheduling options' ranges (they never change a byte, but a value out of range is a
 * caller's mistake): NULL, or what is wrong. */
static const char *sched_opts_check(const memra_cuda_opts *o)
{
    if (o->attn_split_ctas < MEMRA_ATTN_SPLIT_CTAS_AUTO)
        return "attn_split_ctas must be 0, a CTA count or MEMRA_ATTN_SPLIT_CTAS_AUTO (-1)";
    if (o->attn_prefetch < 0 || o->attn_prefetch > MEMRA_ATTN_MAX_PREFETCH)
        return "attn_prefetch out of range 0..8";
    if (o->gdn_prefetch < 0 || o->gdn_prefetch > MEMRA_GDN_MAX_PREFETCH)
        return "gdn_prefetch out of range 0..4";
    if (o->gdn_split != 0 && o->gdn_split != 1 && o->gdn_split != 2 && o->gdn_split != 4)
        return "gdn_split must be 0 (the launcher's choice), 1, 2 or 4";
    if (o->l2_side_mib > MEMRA_CUDA_L2_SIDE_MAX_MIB)
        return "l2_side_mib out of range 0..32";
    if (o->l2_side_spread != 0 && o->l2_side_spread != 1)
        return "l2_side_spread must be 0 or 1";
    if (o->l2_side_spread && !o->l2_side_mib)
        return "l2_side_spread needs l2_side_mib > 0 (it shapes that prefetch)";
    return NULL;
}

static cuda_plan *plan_at(const memra_cuda_backend *be, uint32_t t, uint32_t s)
{
    return &be->plans[t * be->n_stages + s];
}

/* The engine may move between host threads (one at a time): make its device current. */
static int bind_thread(const memra_cuda_backend *be, memra_err *err)
{
    const cudaError_t e = cudaSetDevice(be->opts.device);
    return e == cudaSuccess ? MEMRA_OK
                            : memra_cudart_fail(err, e, "cudaSetDevice", __FILE__, __LINE__);
}

static int poisoned_fail(const memra_cuda_backend *be, memra_err *err)
{
    return MEMRA_FAIL(err, MEMRA_ERR_CUDA,
                      "the CUDA context is poisoned by an earlier sticky "
                      "error (%s); close the engine",
                      be->poison_msg);
}

/* ====================================== weights ====================================== */

static int cmp_weight(const void *pa, const void *pb)
{
    const dev_weight *a = pa, *b = pb;
    const uintptr_t x = (uintptr_t)a->t->data, y = (uintptr_t)b->t->data;
    if (x != y)
        return x < y ? -1 : 1;
    return (uintptr_t)a->t < (uintptr_t)b->t ? -1 : (uintptr_t)a->t > (uintptr_t)b->t;
}

/* The distinct tensors of every plan, in file order, each at a 256-byte aligned offset of
 * one device region (mmvq needs 16-byte aligned weights; 256 keeps every row start of the
 * common block sizes on its own sector boundary). */
static int weights_layout(memra_cuda_backend *be, memra_err *err)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < be->n_tiers * be->n_stages; i++)
        n += be->plans[i].plan->n_weights;
    be->w = calloc(n ? n : 1, sizeof *be->w);
    if (!be->w)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "weight table: out of memory");
    uint64_t k = 0;
    for (uint32_t i = 0; i < be->n_tiers * be->n_stages; i++)
        for (uint32_t j = 0; j < be->plans[i].plan->n_weights; j++)
            be->w[k++].t = be->plans[i].plan->weights[j].tensor;
    qsort(be->w, k, sizeof *be->w, cmp_weight);
    uint64_t u = 0, off = 0;
    for (uint64_t i = 0; i < k; i++) {
        if (u > 0 && be->w[u - 1].t == be->w[i].t)
            continue;
        be->w[u] = (dev_weight){.t = be->w[i].t, .off = off};
        off = align256(off + be->w[i].t->nbytes);
        u++;
    }
    be->n_w = (uint32_t)u;
    be->info.weight_bytes = off;
    return MEMRA_OK;
}

static const dev_weight *weight_find(const memra_cuda_backend *be, const memra_gguf_tensor *t)
{
    const dev_weight key = {.t = t};
    return bsearch(&key, be->w, be->n_w, sizeof *be->w, cmp_weight);
}

/* Fills staging with bytes [w0, w1) of the device region image: tensor bytes where tensors
 * are, zeros in the alignment gaps. *next is the first tensor not yet wholly copied. */
static void staging_fill(const memra_cuda_backend *be, uint8_t *staging, uint64_t w0, uint64_t w1,
                         uint32_t *next)
{
    uint64_t pos = w0;
    for (uint32_t i = *next; i < be->n_w && be->w[i].off < w1; i++) {
        const uint64_t t0 = be->w[i].off, t1 = t0 + be->w[i].t->nbytes;
        const uint64_t s = t0 > w0 ? t0 : w0, e = t1 < w1 ? t1 : w1;
        if (s >= e)
            continue;
        if (s > pos)
            memset(staging + (pos - w0), 0, s - pos);
        memcpy(staging + (s - w0), (const uint8_t *)be->w[i].t->data + (s - t0), e - s);
        pos = e;
    }
    if (w1 > pos)
        memset(staging + (pos - w0), 0, w1 - pos);
    while (*next < be->n_w && be->w[*next].off + be->w[*next].t->nbytes <= w1)
        (*next)++;
}

static void upload_progress(uint64_t done, uint64_t total, double t0)
{
    char bar[21];
    const int fill = total ? (int)(20 * done / total) : 20;
    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
    const double s = (now_ms() - t0) / 1e3;
    memra_log(MEMRA_LOG_INFO, "weights [%s] %3d%%  %.2f / %.2f GB  %.2f GB/s", bar,
              total ? (int)(100 * done / total) : 100, (double)done / 1e9, (double)total / 1e9,
              s > 0 ? (double)done / 1e9 / s : 0.0);
}

/* mmap -> pinned staging (two chunks, so reading the file overlaps the DMA) -> device. */
static int weights_upload(memra_cuda_backend *be, memra_err *err)
{
    int rc = MEMRA_OK;
    const uint64_t total = be->info.weight_bytes;
    uint64_t chunk = (uint64_t)be->opts.staging_mib << 20;
    void *staging[2] = {NULL, NULL};
    cudaEvent_t ev[2] = {NULL, NULL};
    const double t0 = now_ms();
    if (chunk > total)
        chunk = align256(total);
    MEMRA_RT_TRY(err, cudaMalloc((void **)&be->weights, total ? total : 256));
    for (int k = 0; k < 2; k++) {
        MEMRA_RT_TRY(err, cudaHostAlloc(&staging[k], chunk, cudaHostAllocDefault));
        MEMRA_RT_TRY(err, cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    }
    uint32_t next = 0;
    int used[2] = {0, 0}, last_decile = -1;
    for (uint64_t w0 = 0, k = 0; w0 < total; w0 += chunk, k ^= 1) {
        const uint64_t w1 = w0 + chunk < total ? w0 + chunk : total;
        if (used[k])
            MEMRA_RT_TRY(err, cudaEventSynchronize(ev[k])); /* the chunk's last DMA is done */
        staging_fill(be, staging[k], w0, w1, &next);
        MEMRA_RT_TRY(err, cudaMemcpyAsync(be->weights + w0, staging[k], w1 - w0,
                                          cudaMemcpyHostToDevice, be->stream));
        MEMRA_RT_TRY(err, cudaEventRecord(ev[k], be->stream));
        used[k] = 1;
        const int decile = (int)(10 * w1 / total);
        if (decile != last_decile)
            upload_progress(w1, total, t0);
        last_decile = decile;
    }
    MEMRA_RT_TRY(err, cudaStreamSynchronize(be->stream));
    be->info.upload_ms = now_ms() - t0;
fail:
    for (int k = 0; k < 2; k++) {
        if (staging[k])
            cudaFreeHost(staging[k]);
        if (ev[k])
            cudaEventDestroy(ev[k]);
    }
    return rc;
}

/* ==================================== open / close =================================== */

/* Stage boundaries and the logits buffer are where the runtime expects them. */
static int check_entry_points(const memra_cuda_backend *be, uint32_t t, memra_err *err)
{
    for (uint32_t s = 0; s < be->n_stages; s++) {
        const memra_plan *p = plan_at(be, t, s)->plan;
        const int last = s + 1 == be->n_stages;
        if ((s > 0) != (p->input >= 0) || !last != (p->output >= 0) || last != (p->logits >= 0))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                              "plan b%u s%u: stage entry points (input %d, "
                              "output %d, logits %d) do not fit stage %u of %u",
                              p->tier, s, p->input, p->output, p->logits, s, be->n_stages);
        if (s > 0) {
            const memra_plan *q = plan_at(be, t, s - 1)->plan;
            if (q->buffers[q->output].bytes != p->buffers[p->input].bytes)
                return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                                  "plan b%u: stage %u output (%llu bytes) "
                                  "and stage %u input (%llu bytes) differ",
                                  p->tier, s - 1, (unsigned long long)q->buffers[q->output].bytes,
                                  s, (unsigned long long)p->buffers[p->input].bytes);
        }
        if (last &&
            p->buffers[p->logits].bytes < (uint64_t)p->tier * be->m->n_vocab * sizeof(float))
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                              "plan b%u: logits buffer smaller than "
                              "[b, n_vocab] f32",
                              p->tier);
    }
    return MEMRA_OK;
}

static int load_plans(memra_cuda_backend *be, const char *dir, memra_err *err)
{
    int rc;
    MEMRA_TRY(memra_plan_manifest_load(dir, &be->m, err));
    be->n_tiers = be->m->n_tiers;
    be->n_stages = be->m->n_stages;
    if (be->n_tiers == 0 || be->n_stages == 0 || be->m->n_vocab == 0)
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "%s: manifest lists no tier, stage or vocabulary",
                          dir);
    be->plans = calloc((size_t)be->n_tiers * be->n_stages, sizeof *be->plans);
    if (!be->plans)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plans: out of memory");
    for (uint32_t t = 0; t < be->n_tiers; t++)
        for (uint32_t s = 0; s < be->n_stages; s++)
            MEMRA_TRY(
                memra_plan_load(dir, be->m->tiers[t], s, be->g, &plan_at(be, t, s)->plan, err));
    for (uint32_t t = 0; t < be->n_tiers; t++)
        MEMRA_TRY(check_entry_points(be, t, err));
    return MEMRA_OK;
fail:
    return rc;
}

/* The device, its stream and events, the NVRTC kernel cache, cuLaunchKernelEx for PDL. */
static int open_device(memra_cuda_backend *be, memra_err *err)
{
    int rc, sm = 0;
    MEMRA_TRY(memra_cu_device_open(be->opts.device, &sm, err)); /* UNSUPPORTED: no GPU */
    be->dev_open = 1;
    MEMRA_RT_TRY(err, cudaSetDevice(be->opts.device)); /* the same primary context */
    MEMRA_RT_TRY(err, cudaFree(NULL));                 /* initialize the runtime now */
    struct cudaDeviceProp prop;
    MEMRA_RT_TRY(err, cudaGetDeviceProperties(&prop, be->opts.device));
    snprintf(be->info.device_name, sizeof be->info.device_name, "%.127s", prop.name);
    be->info.sm = sm;
    be->info.n_sm = prop.multiProcessorCount;
    MEMRA_RT_TRY(err, cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    MEMRA_RT_TRY(err, cudaEventCreate(&be->ev_start));
    MEMRA_RT_TRY(err, cudaEventCreate(&be->ev_done));
    if (be->opts.l2_side_mib) {
        MEMRA_RT_TRY(err, cudaStreamCreateWithFlags(&be->side, cudaStreamNonBlocking));
        MEMRA_RT_TRY(err, cudaEventCreateWithFlags(&be->ev_fork, cudaEventDisableTiming));
        MEMRA_RT_TRY(err, cudaEventCreateWithFlags(&be->ev_join, cudaEventDisableTiming));
    }
    MEMRA_TRY(memra_kernel_cache_open(&be->kc, err));
    void *fp = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (be->opts.pdl &&
        cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &fp, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess && fp)
        memcpy(&be->launch_ex, &fp, sizeof fp);
    fp = NULL;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxReset", &fp, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && fp)
        memcpy(&be->ctx_reset, &fp, sizeof fp);
    (void)cudaGetLastError();
    be->info.pdl = be->launch_ex != NULL;
    return MEMRA_OK;
fail:
    return rc;
}

/* Slot layout from tier 0's stage plans; per stage a zeroed device pool; region maps. */
static int setup_slots(memra_cuda_backend *be, memra_err *err)
{
    int rc;
    const memra_plan *stage_plans[MEMRA_PLAN_MAX_STAGES];
    for (uint32_t s = 0; s < be->n_stages; s++)
        stage_plans[s] = plan_at(be, 0, s)->plan;
    MEMRA_TRY(memra_slot_layout_build(stage_plans, be->n_stages, be->opts.n_ctx, &be->layout, err));
    uint64_t base[MEMRA_PLAN_MAX_STAGES] = {0};
    for (uint32_t s = 0; s < be->n_stages; s++) {
        const uint64_t bytes = memra_slot_pool_bytes(&be->layout, be->opts.n_slots, s);
        if (bytes == 0)
            return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY,
                              "stage %u: the state of %u slots of %u "
                              "tokens overflows",
                              s, be->opts.n_slots, be->opts.n_ctx);
        cudaError_t e = cudaMalloc((void **)&be->slot_mem[s], bytes);
        if (e != cudaSuccess)
            return MEMRA_FAIL(err, MEMRA_ERR_CUDA,
                              "stage %u: cannot allocate %llu bytes of device "
                              "state for %u slots of %u tokens: %s",
                              s, (unsigned long long)bytes, be->opts.n_slots, be->opts.n_ctx,
                              cudaGetErrorString(e));
        MEMRA_RT_TRY(err, cudaMemsetAsync(be->slot_mem[s], 0, bytes, be->stream));
        base[s] = (uint64_t)(uintptr_t)be->slot_mem[s];
        be->info.slot_bytes += bytes;
    }
    MEMRA_TRY(memra_slot_pool_init(&be->pool, &be->layout, be->opts.n_slots, base, err));
    for (uint32_t i = 0; i < be->n_tiers * be->n_stages; i++) {
        cuda_plan *cp = &be->plans[i];
        cp->region_map =
            calloc(cp->plan->n_states ? cp->plan->n_states : 1, sizeof *cp->region_map);
        if (!cp->region_map)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "region map: out of memory");
        MEMRA_TRY(memra_slot_layout_bind(&be->layout, cp->plan, cp->region_map, err));
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* Per stage the device arena (largest tier), per plan the pinned + device tick blocks and
 * the device address of each weight. */
static int setup_buffers(memra_cuda_backend *be, memra_err *err)
{
    int rc;
    for (uint32_t s = 0; s < be->n_stages; s++) {
        uint64_t bytes = 256;
        for (uint32_t t = 0; t < be->n_tiers; t++)
            if (plan_at(be, t, s)->plan->arena_bytes > bytes)
                bytes = plan_at(be, t, s)->plan->arena_bytes;
        MEMRA_RT_TRY(err, cudaMalloc((void **)&be->arena[s], bytes));
        /* zeroed once, so even padded rows read defined values */
        MEMRA_RT_TRY(err, cudaMemsetAsync(be->arena[s], 0, bytes, be->stream));
        be->info.arena_bytes += bytes;
    }
    for (uint32_t i = 0; i < be->n_tiers * be->n_stages; i++) {
        cuda_plan *cp = &be->plans[i];
        const memra_plan *p = cp->plan;
        MEMRA_TRY(memra_tick_layout_init(&cp->tl, p->tier, p->n_states, err));
        MEMRA_RT_TRY(err, cudaHostAlloc(&cp->tick_pinned, cp->tl.bytes, cudaHostAllocMapped));
        memset(cp->tick_pinned, 0, cp->tl.bytes);
        MEMRA_RT_TRY(err, cudaHostGetDevicePointer(&cp->tick_mapped, cp->tick_pinned, 0));
        MEMRA_RT_TRY(err, cudaMalloc(&cp->tick_dev, cp->tl.bytes));
        MEMRA_RT_TRY(err, cudaMemsetAsync(cp->tick_dev, 0, cp->tl.bytes, be->stream));
        memra_tick_bind(&cp->host, &cp->tl, cp->tick_pinned);
        if (!(cp->row_slot = malloc(sizeof *cp->row_slot * p->tier)))
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "tick rows: out of memory");
        memset(cp->row_slot, 0xFF, sizeof *cp->row_slot * p->tier);
        memra_tick_bind(&cp->dev, &cp->tl, cp->tick_dev);
        cp->wdev = calloc(p->n_weights ? p->n_weights : 1, sizeof *cp->wdev);
        if (!cp->wdev)
            return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "weight pointers: out of memory");
        for (uint32_t j = 0; j < p->n_weights; j++)
            cp->wdev[j] = be->weights + weight_find(be, p->weights[j].tensor)->off;
        if (be->opts.profile) {
            cp->prof = calloc(p->n_launches + 1, sizeof *cp->prof);
            if (!cp->prof)
                return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "profile events: out of memory");
            for (uint32_t j = 0; j <= p->n_launches; j++)
                MEMRA_RT_TRY(err, cudaEventCreate(&cp->prof[j]));
        }
    }
    MEMRA_RT_TRY(err, cudaStreamSynchronize(be->stream));
    return MEMRA_OK;
fail:
    return rc;
}

/* ---- parallel precompile: NVRTC needs no GPU and compiles one key per thread; a cold
 * cache of a plan set (dozens of keys, seconds to tens of seconds each) fills in the time of
 * the slowest few instead of their sum. ---- */

typedef struct precompile_job {
    const memra_cuda_backend *be;
    const char *const *keys; /* [n] NVRTC keys */
    uint32_t n;
    atomic_uint next;
    pthread_mutex_t mu;
    int rc; /* first failure */
    memra_err err;
} precompile_job;

static void *precompile_worker(void *arg)
{
    precompile_job *j = arg;
    for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        memra_cubin c;
        memra_err e;
        memra_err_clear(&e);
        const int rc = memra_nvrtc_compile(j->keys[i], j->be->info.sm, &c, &e);
        if (rc == MEMRA_OK) {
            memra_cubin_free(&c);
            continue;
        }
        pthread_mutex_lock(&j->mu);
        if (j->rc == MEMRA_OK)
            j->rc = rc, j->err = e;
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

/* Fills the disk cache with every key (no-op when the disk cache is disabled: the cubins
 * would be compiled twice). Returns the first compile error. */
static int precompile(const memra_cuda_backend *be, const char *const *keys, uint32_t n,
                      memra_err *err)
{
    if (n < 2 || !memra_nvrtc_cache_dir()[0])
        return MEMRA_OK;
    precompile_job j = {.be = be, .keys = keys, .n = n, .rc = MEMRA_OK};
    atomic_init(&j.next, 0);
    pthread_mutex_init(&j.mu, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t nt = cpus < 1 ? 1 : cpus > 32 ? 32 : (uint32_t)cpus;
    if (nt > n)
        nt = n;
    pthread_t th[32];
    uint32_t started = 0;
    while (started < nt && pthread_create(&th[started], NULL, precompile_worker, &j) == 0)
        started++;
    precompile_worker(&j); /* this thread works too (and alone if no thread started) */
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.rc != MEMRA_OK && err && err->code == MEMRA_OK)
        *err = j.err;
    return j.rc;
}

/* Every NVRTC specialization of the manifest: from the disk cache, compiled when missing
 * (in parallel). Keys of templates NVRTC does not have (attn_decode, mmvq_moe, moe_down)
 * name the geometry of a fixed nvcc kernel that covers every geometry; they load nothing. */
static int load_kernels(memra_cuda_backend *be, memra_err *err)
{
    const double t0 = now_ms();
    memra_nvrtc_stats s0, s1;
    memra_nvrtc_stats_get(&s0);
    const char **keys = calloc(be->m->n_kernels ? be->m->n_kernels : 1, sizeof *keys);
    if (!keys)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "kernel keys: out of memory");
    uint32_t n = 0;
    for (uint32_t i = 0; i < be->m->n_kernels; i++) {
        memra_kernel_spec spec;
        if (memra_kernel_spec_parse(be->m->kernels[i], be->info.sm, &spec, NULL) == MEMRA_OK)
            keys[n++] = be->m->kernels[i];
        else
            memra_log(MEMRA_LOG_DEBUG, "kernel %s: fixed nvcc kernel", be->m->kernels[i]);
    }
    int rc = precompile(be, keys, n, err);
    for (uint32_t i = 0; rc == MEMRA_OK && i < n; i++) {
        CUfunction fn;
        rc = memra_kernel_get(be->kc, keys[i], &fn, err);
    }
    free(keys);
    if (rc != MEMRA_OK)
        return rc;
    be->info.n_kernels = n;
    memra_nvrtc_stats_get(&s1);
    be->info.kernels_ms = now_ms() - t0;
    const long compiled = s1.compiles - s0.compiles;
    memra_log(MEMRA_LOG_INFO,
              "kernels: %u NVRTC specializations in %.0f ms (%ld compiled, the "
              "rest from the disk cache '%s')",
              n, be->info.kernels_ms, compiled, memra_nvrtc_cache_dir());
    return MEMRA_OK;
}

/* The NVRTC launch of an mmvq: geometry from the bound args, and the plan's kernel key must
 * be the specialization those args need. */
static int bind_mmvq_launch(memra_cuda_backend *be, const memra_plan *p, uint32_t i, cuda_launch *L,
                            memra_err *err)
{
    int rc;
    memra_kernel_spec spec;
    char want[MEMRA_KERNEL_KEY_MAX];
    MEMRA_TRY(memra_mmvq_prepare(&L->a.mmvq, be->info.sm, be->info.n_sm, 0, &L->ml, err));
    const int32_t k = p->launches[i].kernel;
    if (k < 0 || (uint32_t)k >= p->n_kernels ||
        memra_kernel_spec_parse(p->kernels[k], be->info.sm, &spec, NULL) != MEMRA_OK ||
        memra_kernel_spec_key(&spec, want, sizeof want, NULL) != MEMRA_OK ||
        strcmp(want, L->ml.key))
        return MEMRA_FAIL(err, MEMRA_ERR_PLAN,
                          "plan b%u s%u launch %u (mmvq): kernel '%s' is "
                          "not the specialization its weights need (%s)",
                          p->tier, p->stage, i,
                          k >= 0 && (uint32_t)k < p->n_kernels ? p->kernels[k] : "?", L->ml.key);
    MEMRA_TRY(memra_kernel_get(be->kc, L->ml.key, &L->fn, err));
    return MEMRA_OK;
fail:
    return rc;
}

/* opts.fuse: an mmvq {gate, up} on the direct path (tiers 1-2) and the silu_mul_q8 that reads
 * its two outputs, which no other launch names, become one launch (fuse 1: when its n_ff / 32
 * CUDA blocks are at least the SMs; 2: always): the mmvq writes silu_mul_q8's q8_1 output
 * itself (memra_mmvq_fuse_swiglu: the same bytes) and the silu_mul_q8 launch is skipped. Any
 * condition unmet (staged tiers, other shapes, a plan variant that reads g or u elsewhere, a
 * plan that placed the SwiGLU output over the mmvq's input: the fused kernel's finished CUDA
 * blocks would overwrite the input of blocks not yet started, memra_plan_bufs_overlap)
 * leaves both launches as planned. Counts the folds into info.folded[t]. */
static void fold_pairs(memra_cuda_backend *be, cuda_plan *cp, uint32_t t)
{
    const memra_plan *p = cp->plan;
    for (uint32_t i = 0; be->opts.fuse && i + 1 < p->n_launches; i++) {
        cuda_launch *L = &cp->launches[i], *S = &cp->launches[i + 1];
        if (L->op != MEMRA_OP_MMVQ || S->op != MEMRA_OP_SILU_MUL_Q8)
            continue;
        const memra_mmvq_params *mp = &L->ml.params;
        const memra_silu_mul_q8_args *sm = &S->a.silu_mul_q8;
        const memra_plan_arg *g = &p->launches[i + 1].args[MEMRA_SILU_MUL_Q8_G0];
        const memra_plan_arg *u = &p->launches[i + 1].args[MEMRA_SILU_MUL_Q8_U0];
        const memra_plan_arg *y = &p->launches[i + 1].args[MEMRA_SILU_MUL_Q8_Y0];
        const memra_plan_arg *a = &p->launches[i].args[MEMRA_MMVQ_A];
        if (sm->n_slots != 1 || sm->slot[0].m != 1 || sm->b != L->ml.b || mp->n_w != 2 ||
            sm->slot[0].g != mp->out[0].y || sm->slot[0].u != mp->out[1].y ||
            sm->slot[0].n != mp->out[0].n_out ||
            (be->opts.fuse == 1 && sm->slot[0].n / 32 < be->info.n_sm))
            continue;
        memra_mmvq_launch fused = L->ml;
        if (g->kind != MEMRA_ARG_BUF || u->kind != MEMRA_ARG_BUF || y->kind != MEMRA_ARG_BUF ||
            a->kind != MEMRA_ARG_BUF || memra_plan_bufs_overlap(p, a->index, y->index) ||
            memra_plan_buf_named_outside(p, i, g->index) ||
            memra_plan_buf_named_outside(p, i, u->index) ||
            memra_mmvq_fuse_swiglu(&fused, sm->slot[0].y_q, NULL) != MEMRA_OK)
            continue;
        L->ml = fused;
        S->folded = 1;
        be->info.folded[t]++;
    }
}

_Static_assert(MEMRA_MMVQ_MAX_OUT <= MEMRA_L2_PREFETCH_MAX_RANGES &&
                   MEMRA_MMVQ_MAX_OUT <= MEMRA_L2_SIDE_MAX_W,
               "a fork prefetches every weight of its mat-vec");

/* opts.l2_side_mib: the plan's forks (runtime/l2_side.h, after the folds) and each one's
 * ranges (memra_l2_side_ranges: end to end, or spread over the target's warps), a fork that
 * would prefetch nothing dropped. Counts them into info.l2_side_forks[t] and their bytes into
 * info.l2_side_bytes[t]. */
static int plan_forks(memra_cuda_backend *be, cuda_plan *cp, uint32_t t, memra_err *err)
{
    const memra_plan *p = cp->plan;
    if (!be->opts.l2_side_mib || !p->n_launches)
        return MEMRA_OK;
    uint8_t *kind = malloc(p->n_launches);
    if (!kind)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plan b%u s%u: out of memory", p->tier, p->stage);
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const uint32_t op = cp->launches[i].op;
        kind[i] = cp->launches[i].folded || cp->launches[i].skipped    ? MEMRA_L2_SKIP
                  : op == MEMRA_OP_MMVQ                                ? MEMRA_L2_MATVEC
                  : op == MEMRA_OP_MMVQ_MOE || op == MEMRA_OP_MOE_DOWN ? MEMRA_L2_HEAVY
                                                                       : MEMRA_L2_SMALL;
    }
    const uint32_t n = memra_l2_side_forks(kind, p->n_launches, NULL, 0);
    cp->forks = calloc(n ? n : 1, sizeof *cp->forks);
    cp->fork_args = calloc(n ? n : 1, sizeof *cp->fork_args);
    if (!cp->forks || !cp->fork_args) {
        free(kind);
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plan b%u s%u: out of memory", p->tier, p->stage);
    }
    memra_l2_side_forks(kind, p->n_launches, cp->forks, n);
    free(kind);
    const uint64_t budget = (uint64_t)be->opts.l2_side_mib << 20;
    uint32_t kept = 0;
    for (uint32_t f = 0; f < n; f++) {
        const memra_mmvq_params *mp = &cp->launches[cp->forks[f].target].ml.params;
        memra_l2_target tg = {.n_w = (uint32_t)mp->n_w,
                              .rpw = mp->rpw > 0 ? (uint32_t)mp->rpw : 0,
                              .paired = mp->swiglu_q != NULL};
        for (uint32_t w = 0; w < tg.n_w; w++) {
            tg.row_bytes[w] = mp->out[w].row_bytes;
            tg.n_out[w] = (uint32_t)mp->out[w].n_out;
        }
        memra_l2_range r[MEMRA_L2_SIDE_MAX_W];
        const uint64_t sum = memra_l2_side_ranges(&tg, budget, be->opts.l2_side_spread, r);
        if (!sum)
            continue; /* nothing to prefetch: no fork, no graph node */
        memra_l2_prefetch_args *a = &cp->fork_args[kept];
        a->n = tg.n_w;
        for (uint32_t w = 0; w < tg.n_w; w++) {
            a->p[w] = (const char *)mp->out[w].w + r[w].off;
            a->bytes[w] = r[w].bytes;
            a->stride[w] = r[w].stride;
            a->count[w] = r[w].count;
        }
        cp->forks[kept++] = cp->forks[f];
        be->info.l2_side_bytes[t] += sum;
    }
    cp->n_forks = kept;
    be->info.l2_side_forks[t] += kept;
    return MEMRA_OK;
}

/* Bind and check every launch of plan (t, s). */
static int bind_plan(memra_cuda_backend *be, uint32_t t, uint32_t s, memra_err *err)
{
    int rc = MEMRA_OK;
    cuda_plan *cp = plan_at(be, t, s);
    const memra_plan *p = cp->plan;
    cp->launches = calloc(p->n_launches ? p->n_launches : 1, sizeof *cp->launches);
    if (!cp->launches)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "plan b%u s%u: out of memory", p->tier, p->stage);
    /* device addresses only: arena, weight copies, the device tick block's views */
    const memra_bind_ctx c = {.p = p,
                              .arena = be->arena[s],
                              .tick = &cp->dev,
                              .weights = cp->wdev,
                              .n_ctx = be->opts.n_ctx};
    for (uint32_t i = 0; i < p->n_launches; i++) {
        const memra_plan_launch *l = &p->launches[i];
        cuda_launch *L = &cp->launches[i];
        if (l->op >= MEMRA_OP_COUNT || (!k_run[l->op] && l->op != MEMRA_OP_MMVQ) ||
            memra_bind_launch(&c, l, &L->a) != MEMRA_OK)
            return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED,
                              "plan b%u s%u launch %u: op %s has no "
                              "CUDA kernel in this build",
                              p->tier, p->stage, i,
                              l->op < MEMRA_OP_COUNT ? memra_op_get(l->op)->name : "?");
        L->op = l->op;
        const char *why = memra_bind_check(l->op, &L->a);
        if (why)
            return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u launch %u (%s): %s", p->tier,
                              p->stage, i, memra_op_get(l->op)->name, why);
        if (l->op == MEMRA_OP_MMVQ)
            MEMRA_TRY(bind_mmvq_launch(be, p, i, L, err));
        if (l->op == MEMRA_OP_RMS_NORM_Q8 && p->tier < 32) /* scheduling, never the bytes */
            L->a.rms_norm_q8.release_first =
                (int32_t)((be->opts.norm_release_tiers >> p->tier) & 1);
        if (l->op == MEMRA_OP_ATTN_DECODE) { /* scheduling, never the bytes */
            memra_attn_decode_args *ad = &L->a.attn_decode;
            ad->split_ctas = be->opts.attn_split_ctas;
            if (ad->split_ctas == 0 && p->tier < 32 && ((be->opts.attn_auto_tiers >> p->tier) & 1))
                ad->split_ctas = MEMRA_ATTN_SPLIT_CTAS_AUTO;
            ad->prefetch_batches = be->opts.attn_prefetch;
            /* the grid the launch will run (AUTO resolved here, on the host, not by queries
             * inside the graph capture; the scalar kernel's one CTA per split included) */
            int32_t x = ad->max_split;
            if (ad->split_ctas != 0 && memra_attn_decode_cuda_split_ctas(ad, &x) != MEMRA_OK)
                return MEMRA_FAIL(err, MEMRA_ERR_PLAN, "plan b%u s%u launch %u (attn_decode): %s",
                                  p->tier, p->stage, i, memra_cuda_ops_error());
            if (ad->split_ctas == MEMRA_ATTN_SPLIT_CTAS_AUTO) {
                ad->split_ctas = x;
                be->info.attn_split_auto[t] = 1;
            }
            if ((uint32_t)x > be->info.attn_split_ctas[t]) /* the tier's (one value in the plans) */
                be->info.attn_split_ctas[t] = (uint32_t)x;
        }
        if (l->op == MEMRA_OP_GDN_STEP) { /* scheduling, never the bytes */
            L->a.gdn_step.prefetch_tasks = be->opts.gdn_prefetch;
            L->a.gdn_step.split = be->opts.gdn_split;
        }
    }
    fold_pairs(be, cp, t);
    for (uint32_t i = 0; i < p->n_launches; i++) { /* after the folds: a fold needs both */
        cuda_launch *L = &cp->launches[i];
        if (!L->folded && (be->opts.skip_ops >> L->op & 1)) {
            L->skipped = 1;
            be->info.skipped[t]++;
        }
    }
    return plan_forks(be, cp, t, err);
fail:
    return rc;
}

/* ================================ enqueue and capture ================================ */

/* Names the failed launch: "tier b8 stage 0 launch 17 (mmvq): <what>". */
static int launch_fail(memra_err *err, const cuda_plan *cp, uint32_t i, const char *what)
{
    const memra_plan *p = cp->plan;
    return MEMRA_FAIL(err, MEMRA_ERR_CUDA, "tier b%u stage %u launch %u (%s): %s", p->tier,
                      p->stage, i, memra_op_get(p->launches[i].op)->name, what);
}

static int launch_fail_rt(memra_err *err, const cuda_plan *cp, uint32_t i, cudaError_t e)
{
    char what[256];
    snprintf(what, sizeof what, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return launch_fail(err, cp, i, what);
}

/* The NVRTC mmvq: one parameter block, PDL when available (the kernel prefetches its weights
 * before griddepcontrol.wait, so it may start under the previous kernel's tail). */
static CUresult launch_mmvq(const memra_cuda_backend *be, const cuda_launch *L, cudaStream_t s,
                            const fault *f)
{
    memra_mmvq_params prm = L->ml.params;
    unsigned threads = L->ml.threads;
    if (f && f->kind == MEMRA_CUDA_FAULT_LAUNCH)
        threads = 4096; /* above every device's 1024-thread block limit */
    if (f && f->kind == MEMRA_CUDA_FAULT_STICKY)
        prm.a = (const void *)(uintptr_t)0x100; /* in the never-mapped first page */
    void *args[] = {&prm};
    if (!be->launch_ex)
        return memra_cu()->cuLaunchKernel(L->fn, L->ml.grid, 1, 1, threads, 1, 1, L->ml.smem,
                                          (CUstream)s, args, NULL);
    CUlaunchAttribute attr;
    CUlaunchConfig cfg;
    memra_cu_pdl_config(&cfg, &attr, L->ml.grid, threads, L->ml.smem, (CUstream)s);
    return be->launch_ex(&cfg, L->fn, args, NULL);
}

static int launch_one(const memra_cuda_backend *be, const cuda_plan *cp, uint32_t i, cudaStream_t s,
                      const fault *f, memra_err *err)
{
    const cuda_launch *L = &cp->launches[i];
    if (L->op == MEMRA_OP_MMVQ) {
        const CUresult r = launch_mmvq(be, L, s, f);
        if (r != CUDA_SUCCESS) {
            const char *name = NULL, *text = NULL;
            memra_cu()->cuGetErrorName(r, &name);
            memra_cu()->cuGetErrorString(r, &text);
            char what[256];
            snprintf(what, sizeof what, "%s (%s)", name ? name : "?", text ? text : "?");
            return launch_fail(err, cp, i, what);
        }
        return MEMRA_OK;
    }
    const int r = k_run[L->op](&L->a, s);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return launch_fail_rt(err, cp, i, e);
    if (r != MEMRA_OK)
        return launch_fail(err, cp, i, memra_cuda_ops_error());
    return MEMRA_OK;
}

/* One stage of tier t: its tick block to the device (a copy kernel reading the mapped pinned
 * block: a graph of kernel nodes only launches faster than one with memcpy nodes), the
 * boundary copy, its launches. */
static int enqueue_stage(memra_cuda_backend *be, uint32_t t, uint32_t s, cudaStream_t st, int eager,
                         memra_err *err)
{
    int rc = MEMRA_OK;
    const cuda_plan *cp = plan_at(be, t, s);
    const memra_plan *p = cp->plan;
    if (memra_copy_words_cuda(cp->tick_dev, cp->tick_mapped, cp->tl.bytes, st) != MEMRA_OK)
        return MEMRA_FAIL(err, MEMRA_ERR_CUDA, "tier b%u stage %u: tick block copy: %s",
                          p->tier, p->stage, memra_cuda_ops_error());
    if (s > 0) { /* [b, n_embd] f32 boundary: a straight copy, no conversion */
        const memra_plan *q = plan_at(be, t, s - 1)->plan;
        MEMRA_RT_TRY(err,
                     cudaMemcpyAsync(be->arena[s] + p->buffers[p->input].offset,
                                     be->arena[s - 1] + q->buffers[q->output].offset,
                                     p->buffers[p->input].bytes, cudaMemcpyDeviceToDevice, st));
    }
    const int prof = eager && cp->prof;
    if (prof)
        MEMRA_RT_TRY(err, cudaEventRecord(cp->prof[0], st));
    uint32_t next_fork = 0;
    for (uint32_t i = 0; i < p->n_launches; i++) {
        if (next_fork < cp->n_forks && cp->forks[next_fork].at == i) {
            /* the branch: after everything enqueued so far, beside what follows */
            MEMRA_RT_TRY(err, cudaEventRecord(be->ev_fork, st));
            MEMRA_RT_TRY(err, cudaStreamWaitEvent(be->side, be->ev_fork, 0));
            if (memra_l2_prefetch_cuda(&cp->fork_args[next_fork], be->side) != MEMRA_OK) {
                char what[256];
                snprintf(what, sizeof what, "the side-branch L2 prefetch before it: %s",
                         memra_cuda_ops_error());
                return launch_fail(err, cp, i, what);
            }
            next_fork++;
        }
        const fault *f =
            eager && be->fault.kind && be->fault.tier == t && s == 0 && be->fault.launch == i
                ? &be->fault
                : NULL;
        if (!cp->launches[i].folded && !cp->launches[i].skipped)
            MEMRA_TRY(launch_one(be, cp, i, st, f, err));
        if (prof)
            MEMRA_RT_TRY(err, cudaEventRecord(cp->prof[i + 1], st));
        if (eager && be->opts.sync_launches) {
            const cudaError_t e = cudaStreamSynchronize(st);
            if (e != cudaSuccess)
                return launch_fail_rt(err, cp, i, e);
        }
    }
    if (cp->n_forks) { /* the branch joins the chain at the stage's end */
        MEMRA_RT_TRY(err, cudaEventRecord(be->ev_join, be->side));
        MEMRA_RT_TRY(err, cudaStreamWaitEvent(st, be->ev_join, 0));
    }
    return MEMRA_OK;
fail:
    return rc;
}

/* Every stage of tier t in order, then the sampled tokens back to pinned memory (a copy
 * kernel writing its mapped address). This is the eager tick and, recorded once, the tier's
 * graph. */
static int enqueue_tier(memra_cuda_backend *be, uint32_t t, cudaStream_t st, int eager,
                        memra_err *err)
{
    int rc = MEMRA_OK;
    for (uint32_t s = 0; s < be->n_stages; s++)
        MEMRA_TRY(enqueue_stage(be, t, s, st, eager, err));
    const cuda_plan *last = plan_at(be, t, be->n_stages - 1);
    uint8_t *out = (uint8_t *)last->tick_mapped +
                   ((const uint8_t *)last->host.out_tokens - (const uint8_t *)last->tick_pinned);
    if (memra_copy_words_cuda(out, last->dev.out_tokens, sizeof(int32_t) * last->tl.b, st) !=
        MEMRA_OK)
        return MEMRA_FAIL(err, MEMRA_ERR_CUDA, "tier b%u: sampled tokens copy: %s",
                          be->m->tiers[t], memra_cuda_ops_error());
    return MEMRA_OK;
fail:
    return rc;
}

typedef struct capture_ctx {
    memra_cuda_backend *be;
    uint32_t t;
} capture_ctx;

static int capture_enqueue(void *user, cudaStream_t s, memra_err *err)
{
    const capture_ctx *c = user;
    return enqueue_tier(c->be, c->t, s, 0, err);
}

static int capture_graphs(memra_cuda_backend *be, memra_err *err)
{
    const double t0 = now_ms();
    for (uint32_t t = 0; t < be->n_tiers; t++) {
        capture_ctx c = {.be = be, .t = t};
        int rc = memra_graph_capture(&be->graphs[t], be->stream, capture_enqueue, &c, err);
        if (rc != MEMRA_OK)
            return rc;
        be->info.graph_nodes[t] = (uint32_t)be->graphs[t].n_nodes;
    }
    be->info.capture_ms = now_ms() - t0;
    memra_log(MEMRA_LOG_INFO, "graphs: %u tiers captured in %.0f ms (%u nodes at tier %u)",
              be->n_tiers, be->info.capture_ms, be->info.graph_nodes[be->n_tiers - 1],
              be->m->tiers[be->n_tiers - 1]);
    return MEMRA_OK;
}

static void fill_info(memra_cuda_backend *be)
{
    be->info.n_tiers = be->n_tiers;
    be->info.graphs = be->opts.graphs;
    for (uint32_t t = 0; t < be->n_tiers; t++) {
        be->info.tiers[t] = be->m->tiers[t];
        for (uint32_t s = 0; s < be->n_stages; s++) {
            be->info.launches[t] += plan_at(be, t, s)->plan->n_launches;
            be->info.tick_bytes[t] += plan_at(be, t, s)->plan->stats.weight_bytes_streamed;
        }
        be->info.launches[t] -= be->info.folded[t] + be->info.skipped[t];
    }
}

int memra_cuda_backend_open(const char *plan_dir, const memra_gguf *g, const memra_cuda_opts *o,
                            memra_cuda_backend **out, memra_err *err)
{
    int rc;
    *out = NULL;
    memra_cuda_backend *be = calloc(1, sizeof *be);
    if (!be)
        return MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "cuda backend: out of memory");
    be->g = g;
    memra_cuda_opts_init(&be->opts);
    if (o)
        be->opts = *o;
    if (be->opts.n_slots == 0 || be->opts.n_slots > MEMRA_SLOT_MAX_SLOTS || be->opts.n_ctx == 0 ||
        be->opts.n_ctx > MEMRA_SLOT_MAX_CTX || be->opts.staging_mib == 0 ||
        be->opts.staging_mib > 4096 || be->opts.device < 0 || be->opts.fuse < 0 ||
        be->opts.fuse > 2) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                        "n_slots = %u (1..%d), n_ctx = %u (1..%u), "
                        "staging_mib = %u (1..4096), device %d or fuse %d out of range",
                        be->opts.n_slots, MEMRA_SLOT_MAX_SLOTS, be->opts.n_ctx, MEMRA_SLOT_MAX_CTX,
                        be->opts.staging_mib, be->opts.device, be->opts.fuse);
        goto fail;
    }
    const char *bad = sched_opts_check(&be->opts);
    if (bad) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "%s", bad);
        goto fail;
    }
    MEMRA_TRY(memra_op_skip_check(be->opts.skip_ops, err));
    MEMRA_TRY(open_device(be, err)); /* first: without a GPU nothing else matters */
    MEMRA_TRY(load_plans(be, plan_dir, err));
    MEMRA_TRY(weights_layout(be, err));
    MEMRA_TRY(weights_upload(be, err));
    MEMRA_TRY(setup_slots(be, err));
    MEMRA_TRY(setup_buffers(be, err));
    MEMRA_TRY(load_kernels(be, err));
    for (uint32_t t = 0; t < be->n_tiers; t++)
        for (uint32_t s = 0; s < be->n_stages; s++)
            MEMRA_TRY(bind_plan(be, t, s, err));
    if (be->opts.graphs)
        MEMRA_TRY(capture_graphs(be, err));
    be->sessions = calloc(be->opts.n_slots, sizeof *be->sessions);
    if (!be->sessions) {
        rc = MEMRA_FAIL(err, MEMRA_ERR_NOMEM, "sessions: out of memory");
        goto fail;
    }
    fill_info(be);
    *out = be;
    return MEMRA_OK;
fail:
    memra_cuda_backend_close(be);
    return rc;
}

/* After a sticky error only a new context works. cudaDeviceReset alone is not enough: it
 * gives up with the sticky error before resetting. So the driver resets the primary context
 * first (destroying it whoever retains it), then the runtime drops its state for the device. */
static void reset_device(const memra_cuda_backend *be)
{
    CUdevice dev;
    if (be->ctx_reset && memra_cu()->cuDeviceGet(&dev, be->opts.device) == CUDA_SUCCESS) {
        const CUresult r = be->ctx_reset(dev);
        memra_log(MEMRA_LOG_WARN,
                  "cuda backend: primary context of device %d reset after a "
                  "sticky error (result %d)",
                  be->opts.device, (int)r);
    }
    (void)cudaDeviceReset();
}

static void free_plan(cuda_plan *cp)
{
    for (uint32_t i = 0; cp->prof && i <= cp->plan->n_launches; i++)
        if (cp->prof[i])
            cudaEventDestroy(cp->prof[i]);
    free(cp->prof);
    if (cp->tick_pinned)
        cudaFreeHost(cp->tick_pinned);
    if (cp->tick_dev)
        cudaFree(cp->tick_dev);
    free((void *)cp->wdev);
    free(cp->launches);
    free(cp->forks);
    free(cp->fork_args);
    free(cp->region_map);
    free(cp->row_slot);
    memra_plan_free(cp->plan);
}

void memra_cuda_backend_close(memra_cuda_backend *be)
{
    if (!be)
        return;
    if (be->stream)
        cudaStreamSynchronize(be->stream); /* nothing may still read what is freed below */
    for (uint32_t t = 0; t < MEMRA_PLAN_MAX_TIERS; t++)
        memra_graph_free(&be->graphs[t]);
    for (uint32_t i = 0; be->plans && i < be->n_tiers * be->n_stages; i++)
        free_plan(&be->plans[i]);
    free(be->plans);
    for (uint32_t s = 0; s < MEMRA_PLAN_MAX_STAGES; s++) {
        if (be->arena[s])
            cudaFree(be->arena[s]);
        if (be->slot_mem[s])
            cudaFree(be->slot_mem[s]);
    }
    if (be->weights)
        cudaFree(be->weights);
    memra_kernel_cache_close(be->kc);
    if (be->ev_start)
        cudaEventDestroy(be->ev_start);
    if (be->ev_done)
        cudaEventDestroy(be->ev_done);
    if (be->ev_fork)
        cudaEventDestroy(be->ev_fork);
    if (be->ev_join)
        cudaEventDestroy(be->ev_join);
    if (be->side)
        cudaStreamDestroy(be->side);
    if (be->stream)
        cudaStreamDestroy(be->stream);
    if (be->dev_open) {
        memra_cu_device_close(be->opts.device);
        if (be->poisoned)
            reset_device(be);
        (void)cudaGetLastError();
    }
    memra_slot_pool_free(&be->pool);
    memra_slot_layout_free(&be->layout);
    memra_plan_manifest_free(be->m);
    free(be->sessions);
    free(be->w);
    free(be);
}

const memra_plan_manifest *memra_cuda_backend_manifest(const memra_cuda_backend *be)
{
    return be->m;
}
uint32_t memra_cuda_backend_n_vocab(const memra_cuda_backend *be)
{
    return be->m->n_vocab;
}
const memra_cuda_info *memra_cuda_backend_info(const memra_cuda_backend *be)
{
    return &be->info;
}
int memra_cuda_backend_poisoned(const memra_cuda_backend *be)
{
    return be->poisoned;
}

uint32_t memra_cuda_backend_last_tier(const memra_cuda_backend *be)
{
    return be->last_tier ? be->m->tiers[be->last_tier - 1] : 0;
}

/* ====================================== sessions ====================================== */

static const memra_sample_params k_greedy = {.temperature = 0.0f};

int memra_cuda_session_admit(memra_cuda_backend *be, const memra_sample_params *params,
                             uint32_t *session, memra_err *err)
{
    if (be->poisoned)
        return poisoned_fail(be, err);
    uint32_t slot;
    int rc = bind_thread(be, err);
    if (rc == MEMRA_OK)
        rc = memra_slot_pool_acquire(&be->pool, &slot, err);
    if (rc != MEMRA_OK)
        return rc;
    for (uint32_t r = 0; r < be->layout.n_regions; r++) {
        const memra_slot_region *reg = &be->layout.regions[r];
        if (!reg->zero_on_admit) /* KV is written before it is read: positions [0, pos] */
            continue;
        /* a new sequence's conv window and delta state are zero; stream-ordered before the
         * next tick, which runs on the same stream */
        const cudaError_t e =
            cudaMemsetAsync((void *)(uintptr_t)memra_slot_region_addr(&be->pool, slot, r), 0,
                            reg->bytes, be->stream);
        if (e != cudaSuccess) {
            memra_slot_pool_release(&be->pool, slot, NULL);
            return memra_cudart_fail(err, e, "cudaMemsetAsync(slot state)", __FILE__, __LINE__);
        }
    }
    be->sessions[slot] = (cuda_session){.live = 1, .pos = 0, .params = params ? *params : k_greedy};
    *session = slot;
    return MEMRA_OK;
}

static int session_ok(const memra_cuda_backend *be, uint32_t s)
{
    return s < be->opts.n_slots && be->sessions[s].live;
}

int memra_cuda_session_retire(memra_cuda_backend *be, uint32_t session, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    be->sessions[session].live = 0;
    be->sessions[session].failed = 0;
    return memra_slot_pool_release(&be->pool, session, err);
}

int memra_cuda_session_set_params(memra_cuda_backend *be, uint32_t session,
                                  const memra_sample_params *params, memra_err *err)
{
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    be->sessions[session].params = params ? *params : k_greedy;
    return MEMRA_OK;
}

uint32_t memra_cuda_session_pos(const memra_cuda_backend *be, uint32_t session)
{
    return session_ok(be, session) ? be->sessions[session].pos : 0;
}

int memra_cuda_session_failed(const memra_cuda_backend *be, uint32_t session)
{
    return session_ok(be, session) && be->sessions[session].failed;
}

/* The CPU backend's contract (backend_cpu.h, kernels/synth_fill.h), on the device: the same
 * seed gives the same state bytes as memra_cpu_session_fill_synthetic. Synchronous. */
int memra_cuda_session_fill_synthetic(memra_cuda_backend *be, uint32_t session, uint32_t pos,
                                      uint64_t seed, memra_err *err)
{
    if (be->poisoned)
        return poisoned_fail(be, err);
    if (!session_ok(be, session))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "session %u is not admitted", session);
    if (pos >= be->opts.n_ctx)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "synthetic position %u: a session holds n_ctx = %u tokens", pos,
                          be->opts.n_ctx);
    const int brc = bind_thread(be, err);
    if (brc != MEMRA_OK)
        return brc;
    for (uint32_t r = 0; r < be->layout.n_regions; r++) {
        const memra_slot_region *reg = &be->layout.regions[r];
        void *base = (void *)(uintptr_t)memra_slot_region_addr(&be->pool, session, r);
        memra_synth_fill_args a;
        if (!memra_slot_synth_fill(&be->layout, r, pos, seed, base, &a)) {
            const cudaError_t e = cudaMemsetAsync(base, 0, reg->bytes, be->stream);
            if (e != cudaSuccess)
                return memra_cudart_fail(err, e, "cudaMemsetAsync(synthetic state)", __FILE__,
                                         __LINE__);
            continue;
        }
        const int rc = memra_synth_fill_cuda(&a, be->stream);
        if (rc != MEMRA_OK)
            return MEMRA_FAIL(err, rc, "synthetic history, region %s: %s", reg->name,
                              memra_cuda_ops_error());
    }
    const cudaError_t e = cudaStreamSynchronize(be->stream);
    if (e != cudaSuccess)
        return memra_cudart_fail(err, e, "cudaStreamSynchronize(synthetic history)", __FILE__,
                                 __LINE__);
    be->sessions[session].pos = pos;
    return MEMRA_OK;
}

/* ======================================== step ======================================== */

/* Every input of a step, checked before anything runs; *tier_idx gets the manifest index. */
static int step_check(const memra_cuda_backend *be, const memra_cuda_step *st, uint32_t *tier_idx,
                      memra_err *err)
{
    const uint32_t max_b = be->m->tiers[be->n_tiers - 1];
    if (st->n_rows == 0 || st->n_rows > max_b || !st->sessions || !st->tokens)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: %u rows (1..%u) or missing arrays",
                          st->n_rows, max_b);
    const uint32_t tier = st->tier ? st->tier : memra_plan_tier_for(be->m, st->n_rows);
    uint32_t t = 0;
    while (t < be->n_tiers && be->m->tiers[t] != tier)
        t++;
    if (t == be->n_tiers || tier < st->n_rows)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: no plan tier %u for %u rows", tier,
                          st->n_rows);
    for (uint32_t r = 0; r < st->n_rows; r++) {
        const uint32_t s = st->sessions[r];
        if (!session_ok(be, s))
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step row %u: session %u is not admitted",
                              r, s);
        if (be->sessions[s].failed)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                              "step row %u: session %u failed in an "
                              "earlier tick (its state is undefined); retire it",
                              r, s);
        for (uint32_t q = 0; q < r; q++)
            if (st->sessions[q] == s)
                return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "step: session %u in rows %u and %u",
                                  s, q, r);
        if (st->tokens[r] < 0 || (uint32_t)st->tokens[r] >= be->m->n_vocab)
            return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                              "step row %u: token %d outside the "
                              "vocabulary (0..%u)",
                              r, st->tokens[r], be->m->n_vocab - 1);
        if (be->sessions[s].pos >= be->opts.n_ctx)
            return MEMRA_FAIL(err, MEMRA_ERR_CAPACITY, "session %u is full (n_ctx = %u)", s,
                              be->opts.n_ctx);
    }
    *tier_idx = t;
    return MEMRA_OK;
}

/* Pinned tick block of plan cp for this step: live rows from their sessions, padded rows
 * inert (token 0, position 0, greedy, every state pointer at the scratch slot). */
static void fill_tick(const memra_cuda_backend *be, cuda_plan *cp, const memra_cuda_step *st)
{
    memra_tick *tk = &cp->host;
    const uint32_t b = tk->layout.b;
    for (uint32_t r = 0; r < b; r++) {
        const int live = r < st->n_rows;
        const cuda_session *se = live ? &be->sessions[st->sessions[r]] : NULL;
        const uint32_t slot = live ? st->sessions[r] : memra_slot_scratch(&be->pool);
        tk->tokens[r] = live ? st->tokens[r] : 0;
        tk->positions[r] = live ? (int32_t)se->pos : 0;
        tk->params[r] = live ? se->params : k_greedy;
        tk->params[r].step = live ? se->pos : 0;
        tk->out_tokens[r] = -1;
        if (cp->row_slot[r] == slot) /* a slot's region addresses never change */
            continue;
        for (uint32_t i = 0; i < cp->plan->n_states; i++)
            memra_tick_region_row(tk, i)[r] =
                memra_slot_region_addr(&be->pool, slot, cp->region_map[i]);
        cp->row_slot[r] = slot;
    }
}

/* A device error during a tick: the tick's sessions are marked failed (they may have been
 * partly advanced), and the context is probed: an error that survives clearing the last
 * error and draining the device is sticky and poisons the engine. */
static int tick_failed(memra_cuda_backend *be, const memra_cuda_step *st, uint32_t t, int rc,
                       memra_err *err)
{
    for (uint32_t r = 0; r < st->n_rows; r++)
        be->sessions[st->sessions[r]].failed = 1;
    (void)cudaGetLastError();
    const cudaError_t probe = cudaDeviceSynchronize();
    if (probe != cudaSuccess) {
        be->poisoned = 1;
        snprintf(be->poison_msg, sizeof be->poison_msg, "%s at tick %llu, tier b%u",
                 cudaGetErrorName(probe), (unsigned long long)be->n_ticks, be->m->tiers[t]);
    }
    if (err && err->code == MEMRA_ERR_CUDA) {
        const size_t len = strlen(err->msg);
        if (len + 1 < sizeof err->msg)
            snprintf(err->msg + len, sizeof err->msg - len, "; %s",
                     be->poisoned
                         ? "the error is sticky: the CUDA context is poisoned, close the engine"
                         : "the tick's sessions are marked failed, the engine serves the others");
    }
    return rc;
}

/* opts.profile: the launch times of the tick that just finished, summed per op. */
static void profile_add(memra_cuda_backend *be, uint32_t t)
{
    for (uint32_t s = 0; s < be->n_stages; s++) {
        const cuda_plan *cp = plan_at(be, t, s);
        for (uint32_t i = 0; i < cp->plan->n_launches; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, cp->prof[i], cp->prof[i + 1]) != cudaSuccess)
                continue;
            be->info.op_ms[cp->launches[i].op] += ms;
            be->info.op_calls[cp->launches[i].op]++;
        }
    }
    be->info.profiled_ticks++;
}

/* Launch tier t (graph, or eager when asked or when a fault is armed) and wait for it. */
static int run_tick(memra_cuda_backend *be, uint32_t t, memra_err *err)
{
    int rc = MEMRA_OK;
    const int eager = !be->opts.graphs || be->fault.kind != MEMRA_CUDA_FAULT_NONE;
    const double t_submit = now_ms();
    MEMRA_RT_TRY(err, cudaEventRecord(be->ev_start, be->stream));
    if (eager)
        MEMRA_TRY(enqueue_tier(be, t, be->stream, 1, err));
    else
        MEMRA_TRY(memra_graph_launch(&be->graphs[t], be->stream, err));
    MEMRA_RT_TRY(err, cudaEventRecord(be->ev_done, be->stream));
    be->wait_ms[0] = now_ms();
    be->info.last_launch_us = (float)((be->wait_ms[0] - t_submit) * 1e3);
    const cudaError_t e = cudaEventSynchronize(be->ev_done);
    be->wait_ms[1] = now_ms();
    if (e != cudaSuccess)
        return MEMRA_FAIL(
            err, MEMRA_ERR_CUDA, "tier b%u: %s (%s) during the %s", be->m->tiers[t],
            cudaGetErrorName(e), cudaGetErrorString(e),
            eager ? "eager tick (launch unknown: set sync_launches to locate it)"
                  : "graph replay (launch unknown: run eagerly with sync_launches to locate it)");
    float ms = 0;
    if (cudaEventElapsedTime(&ms, be->ev_start, be->ev_done) == cudaSuccess)
        be->info.last_tick_ms = ms;
    if (eager && be->opts.profile)
        profile_add(be, t);
    return MEMRA_OK;
fail:
    return rc;
}

int memra_cuda_backend_step(memra_cuda_backend *be, const memra_cuda_step *st, memra_err *err)
{
    const double t_enter = now_ms();
    uint32_t t = 0;
    if (be->poisoned)
        return poisoned_fail(be, err);
    int rc = step_check(be, st, &t, err);
    if (rc == MEMRA_OK)
        rc = bind_thread(be, err);
    if (rc != MEMRA_OK)
        return rc;
    be->last_tier = 0;
    for (uint32_t s = 0; s < be->n_stages; s++)
        fill_tick(be, plan_at(be, t, s), st);
    rc = run_tick(be, t, err);
    be->fault.kind = MEMRA_CUDA_FAULT_NONE; /* an armed fault fires once */
    be->n_ticks++;
    if (rc != MEMRA_OK)
        return tick_failed(be, st, t, rc, err);
    const memra_tick *last = &plan_at(be, t, be->n_stages - 1)->host;
    for (uint32_t r = 0; r < st->n_rows; r++) {
        be->sessions[st->sessions[r]].pos++;
        if (st->out_tokens)
            st->out_tokens[r] = last->out_tokens[r];
    }
    be->last_tier = t + 1;
    be->last_rows = st->n_rows;
    be->info.last_host_us =
        (float)(((be->wait_ms[0] - t_enter) + (now_ms() - be->wait_ms[1])) * 1e3);
    return MEMRA_OK;
}

/* ====================================== readout ====================================== */

int memra_cuda_backend_logits(memra_cuda_backend *be, uint32_t row, uint32_t n_rows, float *dst,
                              memra_err *err)
{
    int rc = MEMRA_OK;
    if (be->poisoned)
        return poisoned_fail(be, err);
    if (!be->last_tier || n_rows == 0 || row >= be->last_rows || n_rows > be->last_rows - row ||
        !dst)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "logits: rows [%u, %u) are not rows of the "
                          "last successful step (%u rows)",
                          row, row + n_rows, be->last_rows);
    MEMRA_TRY(bind_thread(be, err));
    const memra_plan *p = plan_at(be, be->last_tier - 1, be->n_stages - 1)->plan;
    const size_t row_bytes = (size_t)be->m->n_vocab * sizeof(float);
    const uint8_t *src =
        be->arena[be->n_stages - 1] + p->buffers[p->logits].offset + row * row_bytes;
    MEMRA_RT_TRY(err,
                 cudaMemcpyAsync(dst, src, n_rows * row_bytes, cudaMemcpyDeviceToHost, be->stream));
    MEMRA_RT_TRY(err, cudaStreamSynchronize(be->stream));
    return MEMRA_OK;
fail:
    return rc;
}

int memra_cuda_backend_inject_fault(memra_cuda_backend *be, uint32_t tier, uint32_t launch,
                                    int kind, memra_err *err)
{
    uint32_t t = 0;
    while (t < be->n_tiers && be->m->tiers[t] != tier)
        t++;
    if (t == be->n_tiers || (kind != MEMRA_CUDA_FAULT_LAUNCH && kind != MEMRA_CUDA_FAULT_STICKY))
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG, "fault: no tier %u or unknown kind %d", tier,
                          kind);
    const memra_plan *p = plan_at(be, t, 0)->plan;
    if (launch >= p->n_launches || p->launches[launch].op != MEMRA_OP_MMVQ)
        return MEMRA_FAIL(err, MEMRA_ERR_INVALID_ARG,
                          "fault: launch %u of tier %u stage 0 is "
                          "not an mmvq launch",
                          launch, tier);
    be->fault = (fault){.kind = kind, .tier = t, .launch = launch};
    return MEMRA_OK;
}
