/*
 * launch_probe.cu — what the host pays to submit one decode tick as a CUDA graph
 * (`bench/device-probe.sh launch`; issue 6's "host time per tick" target).
 *
 * The engine's tick on the host is: two cudaEventRecord around one cudaGraphLaunch of a
 * straight chain of ~270 kernel nodes (each with programmatic dependent launch: PDL) between
 * an H2D copy of the pinned tick block and a D2H copy of the sampled tokens, then
 * cudaEventSynchronize. This probe builds graphs of that shape from empty kernels and times
 * each host call separately (median of many ticks, the GPU idle at submission as in decode),
 * so the choice of what to cut rests on numbers:
 *   - cudaEventRecord on a stream, alone;
 *   - cudaGraphLaunch of a chain of N kernels, N = 1 .. 512, plain or with PDL edges;
 *   - the same with the copies at both ends (the engine's shape);
 *   - the engine's shape with the two timing events recorded INSIDE the graph (event-record
 *     nodes, cudaEventRecordExternal) instead of around it.
 * Output: one line per variant, host microseconds (median, p90) per call.
 */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "probe_check.cuh"

__global__ void empty_kernel(int *p)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (p && threadIdx.x == 0 && blockIdx.x == 0)
        p[0] += 1;
    asm volatile("griddepcontrol.launch_dependents;");
}

static double now_us()
{
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct stats {
    double med, p90;
};

static stats summarize(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

struct shape {
    int n;      /* kernel nodes */
    bool pdl;   /* programmatic stream serialization on every kernel but the first */
    bool copies; /* H2D copy of a pinned block first, D2H copy of 64 bytes last */
    bool events_inside; /* the timing events as event-record nodes of the graph */
};

static int *g_dev, *g_pinned;
static cudaEvent_t g_ev0, g_ev1;

static void enqueue(const shape &s, cudaStream_t st)
{
    if (s.copies)
        CK(cudaMemcpyAsync(g_dev, g_pinned, 4096, cudaMemcpyHostToDevice, st));
    if (s.events_inside)
        CK(cudaEventRecordWithFlags(g_ev0, st, cudaEventRecordExternal));
    for (int i = 0; i < s.n; i++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(132);
        cfg.blockDim = dim3(256);
        cfg.stream = st;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = s.pdl && i > 0 ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, empty_kernel, g_dev + 1024));
    }
    if (s.events_inside)
        CK(cudaEventRecordWithFlags(g_ev1, st, cudaEventRecordExternal));
    if (s.copies)
        CK(cudaMemcpyAsync(g_pinned + 2048, g_dev + 2048, 64, cudaMemcpyDeviceToHost, st));
}

/* Host cost of one tick's submission: [record] launch [record], then the wait. */
static void run_shape(const shape &s, cudaStream_t st, int ticks)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    enqueue(s, st);
    CK(cudaStreamEndCapture(st, &g));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(g, NULL, &nodes));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphUpload(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<double> launch, submit, wait_after, gpu;
    for (int i = 0; i < ticks + 20; i++) {
        const double t0 = now_us();
        if (!s.events_inside)
            CK(cudaEventRecord(g_ev0, st));
        const double t1 = now_us();
        CK(cudaGraphLaunch(ge, st));
        const double t2 = now_us();
        if (!s.events_inside)
            CK(cudaEventRecord(g_ev1, st));
        const double t3 = now_us();
        CK(cudaEventSynchronize(g_ev1));
        const double t4 = now_us();
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, g_ev0, g_ev1));
        const double t5 = now_us();
        if (i >= 20) {
            launch.push_back(t2 - t1);
            submit.push_back(t3 - t0);
            wait_after.push_back(t5 - t4);
            gpu.push_back(ms * 1e3);
        }
        (void)t4;
    }
    CK(cudaStreamSynchronize(st));
    const stats l = summarize(launch), sb = summarize(submit), w = summarize(wait_after),
                gp = summarize(gpu);
    printf("%5d %5zu %-4s %-6s %-7s %9.2f %9.2f %9.2f %9.2f %9.2f\n", s.n, nodes, s.pdl ? "pdl" : "-",
           s.copies ? "copies" : "-", s.events_inside ? "inside" : "around", l.med, l.p90, sb.med,
           w.med, gp.med);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
}

int main(int argc, char **argv)
{
    const int ticks = argc > 1 ? atoi(argv[1]) : 400;
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    printf("device %s, driver %d, runtime %d, %d ticks per variant\n", pr.name, drv, rt, ticks);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_dev, 1 << 20));
    CK(cudaMemset(g_dev, 0, 1 << 20));
    CK(cudaMallocHost(&g_pinned, 1 << 16));
    memset(g_pinned, 0, 1 << 16);
    CK(cudaEventCreate(&g_ev0));
    CK(cudaEventCreate(&g_ev1));

    /* cudaEventRecord alone (the stream idle) */
    std::vector<double> rec;
    for (int i = 0; i < 2000; i++) {
        const double t0 = now_us();
        CK(cudaEventRecord(g_ev0, st));
        rec.push_back(now_us() - t0);
        if (i % 64 == 63)
            CK(cudaStreamSynchronize(st));
    }
    CK(cudaStreamSynchronize(st));
    const stats r = summarize(rec);
    printf("cudaEventRecord alone: median %.2f us, p90 %.2f us\n\n", r.med, r.p90);

    printf("%5s %5s %-4s %-6s %-7s %9s %9s %9s %9s %9s\n", "N", "nodes", "pdl", "copies", "events",
           "launch_us", "p90", "submit_us", "after_us", "gpu_us");
    const int ns[] = {1, 16, 64, 128, 270, 512};
    for (int n : ns)
        run_shape({n, false, false, false}, st, ticks);
    for (int n : ns)
        run_shape({n, true, false, false}, st, ticks);
    run_shape({270, true, true, false}, st, ticks);
    run_shape({270, true, true, true}, st, ticks);
    run_shape({270, false, true, true}, st, ticks);
    return 0;
}
