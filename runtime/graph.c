/*
 * graph.c — CUDA graph capture and replay (see graph.h).
 *
 * Capture mode is cudaStreamCaptureModeThreadLocal: only this thread's potentially unsafe
 * calls (synchronous copies, allocations) are refused while it records, other threads of
 * the host are unaffected. The instantiated graph is uploaded once so the first replay
 * costs what every other does.
 */
#include "graph.h"

#include <string.h>

int memra_cudart_fail(memra_err *err, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return MEMRA_OK;
    return memra_err_set(err, MEMRA_ERR_CUDA, file, line, "%s: %s (%s)", call, cudaGetErrorName(e),
                         cudaGetErrorString(e));
}

int memra_graph_capture(memra_graph *g, cudaStream_t s, memra_graph_enqueue_fn fn, void *user,
                        memra_err *err)
{
    int rc = MEMRA_OK;
    cudaGraph_t graph = NULL;
    memset(g, 0, sizeof *g);
    MEMRA_RT_TRY(err, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    rc = fn(user, s, err);
    /* End the capture whatever fn returned: the stream must leave capture mode. */
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (rc != MEMRA_OK)
        goto fail;
    MEMRA_RT_TRY(err, end);
    MEMRA_RT_TRY(err, cudaGraphGetNodes(graph, NULL, &g->n_nodes));
    MEMRA_RT_TRY(err, cudaGraphInstantiate(&g->exec, graph, 0));
    MEMRA_RT_TRY(err, cudaGraphUpload(g->exec, s));
    MEMRA_RT_TRY(err, cudaStreamSynchronize(s));
    cudaGraphDestroy(graph); /* the executable graph keeps its own copy */
    return MEMRA_OK;
fail:
    (void)cudaGetLastError(); /* a failed capture leaves a non-sticky error behind */
    if (graph)
        cudaGraphDestroy(graph);
    memra_graph_free(g);
    return rc;
}

int memra_graph_launch(const memra_graph *g, cudaStream_t s, memra_err *err)
{
    int rc = MEMRA_OK;
    if (!g->exec)
        return MEMRA_FAIL(err, MEMRA_ERR_INTERNAL, "graph launch: graph was not captured");
    MEMRA_RT_TRY(err, cudaGraphLaunch(g->exec, s));
    return MEMRA_OK;
fail:
    return rc;
}

void memra_graph_free(memra_graph *g)
{
    if (!g)
        return;
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof *g);
}
