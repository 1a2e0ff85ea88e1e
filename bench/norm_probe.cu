/*
 * norm_probe.cu — where one rms_norm_q8 goes in time (`bench/device-probe.sh norm`). In the
 * 9b's B = 1 tick the 65 norms cost 0.227 ms marginal (session 23, `memra-bench --phases`):
 * ~3.5 us each for 16 KB of input, i.e. latency. This probe says which part of the norm's own
 * path that latency is.
 *
 * It compiles kernels/rms_norm_q8.cu itself with MEMRA_NORM_PROBE, so thread 0 of every CTA
 * stamps %globaltimer and clock64 at the marks (kernels/rms_norm_q8.cu NORM_MARK): 0 entry,
 * 1 its norm weights loaded, 2 past the PDL wait, 3 its x loaded and squared, 4 the block sum
 * (f64: warp butterfly, one barrier, the butterfly over the warp sums), 5 the scale (the
 * exact mean and 1 / sqrtf), 6 its q8_1 blocks (and f32 values) stored.
 * Each launch follows a "previous kernel" as in the tick (bench/probe_timeline.cuh: one CTA
 * per SM that waits, releases its dependents and spins --spin us, then records its end), so
 * the norm's CTAs are resident and have loaded their weights before it ends. Times are from
 * the previous grid's end. Shapes: the 9b's n_embd (4096) at b = 1, 2, 4, 8, 16 as the tick
 * launches them (release_first at b = 2: backend_cuda.h's norm_release_tiers), and b = 1 with
 * the f32 output too. Inputs are pseudo-random: the speed does not depend on the values.
 *
 *   norm-probe [--iters N] [--spin US]
 */
#define MEMRA_NORM_PROBE 1
#include "kernels/rms_norm_q8.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_timeline.cuh"

namespace
{

struct probe_cfg {
    const char *name;
    int b, n, release_first, f32;
};

constexpr int PH = MEMRA_NORM_PROBE_MARKS - 1; /* phases between the marks 0..6 */

struct probe_out {
    std::vector<double> entry, resume, ph[PH], cyc[PH], end;
    double cycles = 0.0, ns = 0.0;
    int ctas = 0; /* CTAs per row: the grid over b */
};

void run_cfg(const probe_cfg &c, int iters, double spin_us, cudaStream_t s, int sms, probe_out &out)
{
    dev_buf m;
    unsigned seed = 4242u + (unsigned)c.b;
    const size_t nx = (size_t)c.b * (size_t)c.n;
    float *x = m.get<float>(nx), *w = m.get<float>((size_t)c.n);
    m.fill(x, nx, -2.0f, 2.0f, seed);
    m.fill(w, (size_t)c.n, 0.5f, 1.5f, seed);
    memra_rms_norm_q8_args a = {};
    a.x = x;
    a.w = w;
    a.y_q = m.get<unsigned char>((size_t)c.b * (size_t)(c.n / 32) * Q8_1_BYTES);
    a.y_f32 = c.f32 ? m.get<float>(nx) : nullptr;
    a.n = c.n;
    a.b = c.b;
    a.eps = 1e-6f;
    a.release_first = c.release_first;
    const size_t per = (size_t)MEMRA_NORM_PROBE_MARKS * 2;
    std::vector<unsigned long long> st((size_t)MEMRA_NORM_PROBE_CTAS * per);
    for (int it = -3; it < iters; it++) {
        launch_prev(s, sms, spin_us);
        if (memra_rms_norm_q8_cuda(&a, s) != MEMRA_OK) {
            fprintf(stderr, "norm-probe: rms_norm_q8: %s\n", memra_cuda_ops_error());
            exit(1);
        }
        CK(cudaStreamSynchronize(s));
        if (it < 0)
            continue; /* warm-up: code, TLB, L2 */
        unsigned long long pend = 0;
        unsigned grid = 0;
        CK(cudaMemcpyFromSymbol(&pend, g_prev_end, sizeof pend));
        CK(cudaMemcpyFromSymbol(&grid, g_norm_probe_grid, sizeof grid));
        if (grid == 0 || grid > MEMRA_NORM_PROBE_CTAS || grid % (unsigned)c.b != 0) {
            fprintf(stderr, "norm-probe: a grid of %u CTAs for b = %d (the probe records %d)\n",
                    grid, c.b, MEMRA_NORM_PROBE_CTAS);
            exit(1);
        }
        out.ctas = (int)grid / c.b;
        CK(cudaMemcpyFromSymbol(st.data(), g_norm_probe, st.size() * sizeof(unsigned long long)));
        const double P = (double)pend;
        auto T = [&](int x, int mk) { return (double)st[(size_t)x * per + (size_t)mk * 2]; };
        auto C = [&](int x, int mk) { return (double)st[(size_t)x * per + (size_t)mk * 2 + 1]; };
        double last = 0.0;
        for (int x = 0; x < (int)grid; x++) {
            out.entry.push_back(T(x, 0) - P);
            out.resume.push_back(T(x, 2) - P);
            for (int k = 0; k < PH; k++) {
                out.ph[k].push_back(T(x, k + 1) - T(x, k));
                out.cyc[k].push_back(C(x, k + 1) - C(x, k));
            }
            out.cycles += C(x, PH) - C(x, 0);
            out.ns += T(x, PH) - T(x, 0);
            last = std::max(last, T(x, PH));
        }
        out.end.push_back(last - P);
    }
}

} /* namespace */

int main(int argc, char **argv)
{
    int iters = 50, sms = 0;
    double spin_us = 20.0;
    cudaDeviceProp p;
    cudaStream_t s;
    if (probe_start(argc, argv, "norm-probe", &iters, &spin_us, nullptr, nullptr, &p, &s, &sms))
        return 2;
    printf("norm-probe: %s, %d SMs; rms_norm_q8 (CTAs of %d threads), previous kernel spins "
           "%.1f us, %d launches per line\n",
           p.name, sms, kThreads, spin_us, iters);
    const probe_cfg cfgs[] = {
        {"b1", 1, 4096, 0, 0},   {"b1 f32", 1, 4096, 0, 1}, {"b2 rel", 2, 4096, 1, 0},
        {"b2", 2, 4096, 0, 0},   {"b4", 4, 4096, 0, 0},     {"b8", 8, 4096, 0, 0},
        {"b16", 16, 4096, 0, 0},
    };
    printf("medians over launches x every CTA of the grid, ns (%%globaltimer) and cycles "
           "(clock64) of thread 0; entry, resume and end from the previous grid's end\n");
    printf("%-8s %5s %4s | %6s %6s | %5s %6s %5s %5s %5s %5s | %6s %6s\n", "config", "n", "ctas",
           "entry", "resume", "w", "wait", "x", "bsum", "scale", "quant", "end", "p90");
    for (const probe_cfg &c : cfgs) {
        probe_out o;
        run_cfg(c, iters, spin_us, s, sms, o);
        printf("%-8s %5d %4d | %6.0f %6.0f |", c.name, c.n, o.ctas, median(o.entry),
               median(o.resume));
        for (int k = 0; k < PH; k++)
            printf(k == 1 ? " %6.0f" : " %5.0f", median(o.ph[k]));
        printf(" | %6.0f %6.0f\n", median(o.end), pct(o.end, 0.9));
        printf("%-8s %5s %4s | %6s %6s |", "  cycles", "", "", "", "");
        for (int k = 0; k < PH; k++)
            printf(k == 1 ? " %6.0f" : " %5.0f", median(o.cyc[k]));
        printf(" | clock %.2f GHz\n", o.ns > 0 ? o.cycles / o.ns : 0.0);
    }
    printf("columns: ctas = CTAs per row; w = entry -> its norm weights loaded; wait = -> past "
           "the PDL wait; x = its x loaded and squared; bsum = the f64 block sum; scale = the "
           "mean and 1 / sqrtf; quant = its q8_1 blocks stored; end = the grid's last CTA end. "
           "w and quant are warp 0's: where a CTA quantizes with other warps only, they are "
           "~0 there, and end is the column to compare\n");
    CK(cudaStreamDestroy(s));
    return 0;
}
