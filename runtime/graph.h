/*
 * graph.h — CUDA graph capture and replay for the CUDA backend, and the one way a CUDA
 * runtime-API error becomes a memra_err record.
 *
 * A memra_graph is one launch sequence (the eager enqueue function of a tier) recorded once
 * by stream capture and instantiated; replaying it runs exactly the recorded nodes with
 * exactly the recorded parameters. Per-tick inputs therefore live at fixed addresses the
 * nodes already point at (the pinned and device tick blocks), and nothing is patched.
 *
 * Must not: print; leave a stream in capture mode when the enqueue function fails (the
 * capture is ended and the partial graph destroyed).
 * Invariants: after memra_graph_capture succeeds, exec is instantiated and uploaded and
 * n_nodes counts the nodes the capture produced (kernels, copies).
 */
#ifndef MEMRA_GRAPH_H
#define MEMRA_GRAPH_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "err.h"

/* Records a failed runtime call ("cudaMalloc(&p, n): cudaErrorMemoryAllocation (out of
 * memory)") and returns MEMRA_ERR_CUDA; MEMRA_OK for cudaSuccess. */
int memra_cudart_fail(memra_err *err, cudaError_t e, const char *call, const char *file, int line);

/* rc = the call's memra code; on failure jump to fail. Needs `int rc` and a `fail:` label. */
#define MEMRA_RT_TRY(err, call)                                                                    \
    do {                                                                                           \
        cudaError_t memra_rt_e_ = (call);                                                          \
        if (memra_rt_e_ != cudaSuccess) {                                                          \
            rc = memra_cudart_fail((err), memra_rt_e_, #call, __FILE__, __LINE__);                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Enqueues the sequence to record on stream s; returns a memra code. */
typedef int (*memra_graph_enqueue_fn)(void *user, cudaStream_t s, memra_err *err);

typedef struct memra_graph {
    cudaGraphExec_t exec; /* NULL until captured */
    size_t n_nodes;
} memra_graph;

/* Capture fn(user, s) on s (thread-local capture mode) into g, instantiate and upload it.
 * On failure g is left empty and s is no longer capturing. */
int memra_graph_capture(memra_graph *g, cudaStream_t s, memra_graph_enqueue_fn fn, void *user,
                        memra_err *err);
/* One replay on s (asynchronous). */
int memra_graph_launch(const memra_graph *g, cudaStream_t s, memra_err *err);
void memra_graph_free(memra_graph *g); /* NULL or empty is a no-op */

#endif
