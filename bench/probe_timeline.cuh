/*
 * probe_timeline.cuh — what the kernel-timeline probes (bench/gdn_probe.cu, bench/attn_probe.cu)
 * share: the "previous kernel" each measured launch follows as in the tick (it waits for its
 * predecessor, releases its dependents with griddepcontrol.launch_dependents as the tick's
 * mmvq does, spins, then stamps its end into g_prev_end, the origin of the probes' times),
 * their options (--iters, --spin), the device and its stream, device buffers freed at scope
 * end, and the median / percentile of the stamps.
 */
#ifndef MEMRA_BENCH_PROBE_TIMELINE_CUH
#define MEMRA_BENCH_PROBE_TIMELINE_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_check.cuh"

__device__ unsigned long long g_prev_end;

/* The previous kernel: wait for its predecessor, release the dependents, spin, stamp. */
__global__ void __launch_bounds__(128) prev_kernel(unsigned long long ns)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        atomicMax(&g_prev_end, t);
    }
}

/* g_prev_end reset, then the previous kernel on s: one CTA per SM spinning spin_us, launched
 * with programmatic stream serialization so the measured kernel after it starts early. Its
 * shared-memory carveout preference is 100 %, as the tick's B <= 2 mat-vecs set theirs
 * (runtime/nvrtc.c). Why (a hypothesis, session 27): an SM configured for a smaller carveout
 * than a new CTA needs must drain before it takes it; with the previous kernel at no
 * preference, attention's split CTAs (16.6 KB of static shared memory) entered only after the
 * previous grid had ended, while gdn_step's (13.3 KB) entered ~16 us before it. */
static inline void launch_prev(cudaStream_t s, int sms, double spin_us)
{
    static bool carveout = false;
    if (!carveout) {
        CK(cudaFuncSetAttribute(prev_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        carveout = true;
    }
    cudaLaunchConfig_t pc = {};
    cudaLaunchAttribute pa[1];
    pa[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pa[0].val.programmaticStreamSerializationAllowed = 1;
    pc.gridDim = dim3((unsigned)sms);
    pc.blockDim = dim3(128);
    pc.stream = s;
    pc.attrs = pa;
    pc.numAttrs = 1;
    const unsigned long long zero = 0, spin_ns = (unsigned long long)(spin_us * 1000.0);
    CK(cudaMemcpyToSymbolAsync(g_prev_end, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, s));
    CK(cudaLaunchKernelEx(&pc, prev_kernel, spin_ns));
}

/* The timeline probes' options: --iters N (launches per line, >= 1), --spin US (the previous
 * kernel's spin, >= 0) and, when flag is non-NULL, that flag (*flag_set = 1). 0, or 2 after the
 * usage line. */
static inline int probe_options(int argc, char **argv, const char *name, int *iters,
                                double *spin_us, const char *flag, int *flag_set)
{
    for (int i = 1; i < argc; i++) {
        if (flag && !strcmp(argv[i], flag))
            *flag_set = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            *iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spin") && i + 1 < argc)
            *spin_us = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--iters N] [--spin US]%s%s%s\n", name, flag ? " [" : "",
                    flag ? flag : "", flag ? "]" : "");
            return 2;
        }
    }
    if (*iters < 1 || *spin_us < 0.0) {
        fprintf(stderr, "%s: --iters >= 1, --spin >= 0\n", name);
        return 2;
    }
    return 0;
}

/* Device 0's properties and a non-blocking stream for the probe's launches. */
static inline void probe_device(cudaDeviceProp *p, cudaStream_t *s)
{
    CK(cudaGetDeviceProperties(p, 0));
    CK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
}

/* A timeline probe's start: its options (probe_options; *iters and *spin_us hold the
 * defaults), device 0 (probe_device) and its SM count. 0, or 2 after the usage line. */
static inline int probe_start(int argc, char **argv, const char *name, int *iters, double *spin_us,
                              const char *flag, int *flag_set, cudaDeviceProp *p, cudaStream_t *s,
                              int *sms)
{
    if (probe_options(argc, argv, name, iters, spin_us, flag, flag_set))
        return 2;
    probe_device(p, s);
    *sms = p->multiProcessorCount;
    return 0;
}

/* Device buffers, freed together; fill: floats uniform in [lo, hi) from an LCG. */
struct dev_buf {
    std::vector<void *> all;
    template <typename T> T *get(size_t n)
    {
        void *p = nullptr;
        CK(cudaMalloc(&p, n * sizeof(T)));
        all.push_back(p);
        return (T *)p;
    }
    void fill(float *d, size_t n, float lo, float hi, unsigned &seed)
    {
        std::vector<float> h(n);
        for (auto &x : h) {
            seed = seed * 1664525u + 1013904223u;
            x = lo + (hi - lo) * (float)(seed >> 8) * (1.0f / 16777216.0f);
        }
        CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    ~dev_buf()
    {
        for (void *p : all)
            cudaFree(p);
    }
};

static inline double median(std::vector<double> v)
{
    if (v.empty())
        return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static inline double pct(std::vector<double> v, double p)
{
    if (v.empty())
        return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(p * (double)v.size()))];
}

#endif
