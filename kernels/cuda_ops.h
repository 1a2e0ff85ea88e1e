/*
 * cuda_ops.h — the CUDA entry points of the nvcc-compiled ops (kernels/<op>.cu): embed,
 * rms_norm_q8, attn_prep, attn_decode, gdn_step, silu_mul_q8, moe_route, mmvq_moe,
 * moe_down, sample.
 *
 * Each entry takes the op's args struct (kernels/<op>.h, the same struct the CPU reference
 * takes) with every pointer, pointer-table entry included, a DEVICE address, and enqueues the
 * op on stream s (capturable into a CUDA graph: no host synchronisation, no allocation, no
 * launch geometry that depends on device data). It returns MEMRA_OK,
 * MEMRA_ERR_INVALID_ARG (the op's memra_<op>_check() rejected the args; call it for the
 * reason) or MEMRA_ERR_CUDA (a launch failed; memra_cuda_ops_error() names the CUDA error).
 *
 * Must not: read device memory on the host, synchronise, or keep state between calls.
 * Invariants (the exactness contract, notes/ops-design.md): row b's result depends only on
 * row b's inputs, with a per-row reduction order fixed by the op's shape arguments and never
 * by b or by other rows; no float atomics; every q8_1 output is produced by the shared warp
 * quantizer of nvrtc_templates/quantize_q8_1.cuh, so its bytes equal memra_quantize_q8_1 of
 * the same floats. Every kernel starts with griddepcontrol.wait followed at once by
 * griddepcontrol.launch_dependents (pdl_wait_release, nvrtc_templates/common.cuh) and is
 * launched with programmatic stream serialisation (PDL): it may be scheduled while its
 * predecessor runs, reads nothing the predecessor writes before that one has finished, and
 * lets its own successor (an mmvq streaming weights) start as early as possible.
 *
 * Device pointers and pointer-table bases must be 16-byte aligned (cudaMalloc and the slot
 * pool give 256). A misaligned KV-cache row base makes attn_decode produce a zero row for
 * that row instead of faulting.
 */
#ifndef MEMRA_KERNEL_CUDA_OPS_H
#define MEMRA_KERNEL_CUDA_OPS_H

#include <cuda_runtime_api.h>

#include "attn_decode.h"
#include "attn_prep.h"
#include "embed.h"
#include "gdn_step.h"
#include "mmvq_moe.h"
#include "moe_down.h"
#include "moe_route.h"
#include "rms_norm_q8.h"
#include "sample.h"
#include "silu_mul_q8.h"
#include "synth_fill.h"

/* attn_decode's split geometry (MEMRA_ATTN_SPLIT_KEYS, memra_attn_nsplit): attn_decode.h. */

#ifdef __cplusplus
extern "C" {
#endif

int memra_embed_cuda(const memra_embed_args *a, cudaStream_t s);
int memra_rms_norm_q8_cuda(const memra_rms_norm_q8_args *a, cudaStream_t s);
/* Reads positions, q_norm and k_norm BEFORE its PDL wait (the rope's cos / sin and the norm
 * weights, under the predecessor's tail): the kernel launched just before it must not write
 * them and must release its dependents only after its own wait (the q/k/v mmvq does), so that
 * the tick-block copy that writes positions has completed. */
int memra_attn_prep_cuda(const memra_attn_prep_args *a, cudaStream_t s);
/* Two kernels: per-split partials into a->scratch, then the fixed-order combine (+ gate,
 * + q8_1). a->scratch is required here (the CPU reference ignores it). With
 * a->prefetch_batches > 0 the split kernel reads positions, k_cache and v_cache (the tables,
 * and the cache lines they point at as L2 prefetches) BEFORE its PDL wait: the kernel launched
 * just before it on the stream must not write those tables. */
int memra_attn_decode_cuda(const memra_attn_decode_args *a, cudaStream_t s);
/* The split kernel's CTAs per (kv head, row) for a (its split_ctas resolved: AUTO by the
 * kernel's occupancy on the current device), into *ctas; nothing launched. The CUDA backend
 * resolves AUTO with it when it binds a plan, outside any graph capture. MEMRA_OK, or the
 * entry's refusal. */
int memra_attn_decode_cuda_split_ctas(const memra_attn_decode_args *a, int32_t *ctas);
/* Reads ssm_state / conv_state (the tables and its first state rows) BEFORE its PDL wait:
 * the kernel launched just before it must not write them. */
int memra_gdn_step_cuda(const memra_gdn_step_args *a, cudaStream_t s);
/* Tests and measurements only (tests/gpu/test_ops_gpu.c): forces the fast kernel's split of
 * a value head over `split` CTAs (1, 2 or 4) where that shape allows it (0: the launcher's
 * choice) and the bulk L2 prefetch of the rows past each CTA's first tasks on (1) or off
 * (0; -1: the launcher's choice). Process-wide, not thread-safe; changes no bit of the
 * results (the tests run every forced variant against the CPU). */
void memra_gdn_step_cuda_tune(int split, int bulk);
int memra_silu_mul_q8_cuda(const memra_silu_mul_q8_args *a, cudaStream_t s);
int memra_moe_route_cuda(const memra_moe_route_args *a, cudaStream_t s);
/* Bit-identical to memra_mmvq_moe_ref / memra_moe_down_ref (every dot-capable weight type);
 * weights 16-byte aligned like mmvq's. */
int memra_mmvq_moe_cuda(const memra_mmvq_moe_args *a, cudaStream_t s);
int memra_moe_down_cuda(const memra_moe_down_args *a, cudaStream_t s);
/* a->scratch is required when n_vocab > MEMRA_SAMPLE_SMEM_VOCAB (the p values of rows too
 * large for shared memory live there); otherwise it may be NULL. */
int memra_sample_cuda(const memra_sample_args *a, cudaStream_t s);
/* Not a plan op: the benchmarks' synthetic history (kernels/synth_fill.h), one region. */
int memra_synth_fill_cuda(const memra_synth_fill_args *a, cudaStream_t s);
/* Not a plan op: copies `bytes` (a multiple of 4; both addresses 4-byte aligned) from src to
 * dst as one kernel of 32-bit loads and stores, after the previous kernel has finished
 * (griddepcontrol.wait). Either side may be mapped pinned host memory (its device address):
 * the CUDA backend moves each tick block in and the sampled tokens out this way, so a tick's
 * graph holds kernel nodes only (a memcpy node costs ~1 us of cudaGraphLaunch each,
 * bench/results/launch-probe-2026-12-04.txt). */
int memra_copy_words_cuda(void *dst, const void *src, size_t bytes, cudaStream_t s);

/* Not a plan op: the CUDA backend's side-branch L2 prefetch (memra_cuda_opts.l2_side_mib).
 * Pulls n ranges of device memory into L2 with cp.async.bulk.prefetch.L2 from a grid of up to
 * one warp per SM and exits: nothing waits for the lines, and no byte anywhere changes (a
 * hint; a later load is never stale, L2 being the point of coherence). Range i is count[i]
 * chunks (0 counts as 1) of bytes[i] bytes at p[i], p[i] + stride[i], ..., each started at the
 * 16-byte boundary at or below it (a q6_K row starts 2-byte aligned): bytes[i] a multiple of
 * 16 (0: the range is skipped), with several chunks stride[i] at least bytes[i], and the
 * boundary below each chunk inside the same allocation as the chunk. Launched WITHOUT
 * programmatic serialisation: the backend puts it on a branch of its own beside the tick's
 * chain of kernels, after the mat-vec that precedes the small kernels it runs beside. */
#define MEMRA_L2_PREFETCH_MAX_RANGES 4
typedef struct memra_l2_prefetch_args {
    uint32_t n; /* ranges, 0..MEMRA_L2_PREFETCH_MAX_RANGES */
    const void *p[MEMRA_L2_PREFETCH_MAX_RANGES];
    uint64_t bytes[MEMRA_L2_PREFETCH_MAX_RANGES];  /* of each chunk */
    uint64_t stride[MEMRA_L2_PREFETCH_MAX_RANGES]; /* from one chunk to the next */
    uint32_t count[MEMRA_L2_PREFETCH_MAX_RANGES];  /* chunks (0: 1) */
} memra_l2_prefetch_args;
int memra_l2_prefetch_cuda(const memra_l2_prefetch_args *a, cudaStream_t s);

/* Rows of at most this many logits are sampled entirely in shared memory (8 CTAs of one
 * cluster hold 1/8 each). */
#define MEMRA_SAMPLE_SMEM_VOCAB (8 * 48 * 1024)

/* Reason of this thread's last MEMRA_ERR_CUDA / MEMRA_ERR_INVALID_ARG from an entry above
 * (static text or the CUDA error string); "" when none. */
const char *memra_cuda_ops_error(void);

#ifdef __cplusplus
}
#endif

#endif
