/*
 * gdn_probe.cu — where one gdn_step launch's time goes (`bench/device-probe.sh gdn`;
 * bench/results/mmvq-notes.md, session 25). In the 9b's B = 1 tick gdn_step costs 9.2 us per
 * launch (memra-bench --removal) for 4 MB of state, ~1.4 us at the copy rate: the rest is
 * the chain of dependent steps after the kernel's PDL wait. This probe times that chain.
 *
 * It compiles kernels/gdn_step.cu itself with MEMRA_GDN_PROBE, so thread 0 of every fast CTA
 * stamps %globaltimer and clock64 at ten marks (kernels/gdn_step.cu GDN_MARK):
 *   0 entry, 1 first state rows issued (before the PDL wait), 2 after the wait,
 *   3 thread 0's conv items done, 4 q_a, k_a whole in the CTA (st.async push, mbarrier),
 *   5 L2 norms done, 6 delta rule done (warp 0's tasks), 7 o_h whole (mbarrier; LQK: cluster
 * barrier), 8 the gated norm's scale, 9 gate, q8_1 output and conv shifts done. Each launch follows
 * a "previous kernel" as in the tick: a grid of one CTA per SM that waits, releases its dependents
 * (griddepcontrol.launch_dependents, as the mmvq before gdn_step does) and spins for --spin us,
 * then records its end; so gdn_step's CTAs are resident and load their first rows while it runs,
 * and "resume" below is the time from the previous grid's last CTA ending to a gdn_step CTA passing
 * its wait. Shapes: the 9b preset's (Hk 16, Hv 32, dk = dv = 128, conv 4) at b = 1, 2, 4, 8, 16,
 * and b = 1 with the split forced to 2 and 1 (memra_gdn_step_cuda_tune). Inputs are pseudo-random:
 * the arithmetic's speed does not depend on the values.
 * Output: one line per configuration, medians over launches x CTAs (ns by %globaltimer;
 * the effective SM clock and the timer's step are printed first).
 *
 * With --chains, first the latency of the scalar functions on those paths (memra_x_siluf,
 * the f64 divisions and square roots of the norms' scales, ...), one dependent call after
 * another on one thread.
 *
 *   gdn-probe [--iters N] [--spin US] [--chains]
 */
#define MEMRA_GDN_PROBE 1
#include "kernels/gdn_step.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_timeline.cuh"

/* --chains: the latency of the scalar functions on gdn_step's and the norms' critical paths,
 * one thread, each call's input the previous call's output (cycles per call, clock64). */
/* 16 dependent double fmas (their latency, with one f32 -> f64 -> f32 round trip) */
__device__ __forceinline__ double dfma16(double v)
{
#pragma unroll
    for (int i = 0; i < 16; i++)
        v = fma(v, 0.999999, 1e-9);
    return v;
}

#define CHAIN_FN(name, expr)                                                                       \
    struct name {                                                                                  \
        __device__ __forceinline__ float operator()(float y, int n) const                          \
        {                                                                                          \
            return expr;                                                                           \
        }                                                                                          \
    };
CHAIN_FN(ch_fadd, __fadd_rn(y, 1e-7f))
CHAIN_FN(ch_expf, memra_x_expf(-fabsf(y)))
CHAIN_FN(ch_siluf, memra_x_siluf(y))
CHAIN_FN(ch_beta, memra_gdn_beta(y))
CHAIN_FN(ch_decay, memra_gdn_decay(-1.0f, y, 0.1f))
CHAIN_FN(ch_ddiv, (float)((double)y / (double)n))
CHAIN_FN(ch_dsqrt, (float)sqrt((double)fabsf(y) + 1.0))
CHAIN_FN(ch_rsqrtf, 1.0f / sqrtf(fabsf(y) + 1.0f))
CHAIN_FN(ch_fdiv, __fdiv_rn(y, 127.0f + (float)n))
CHAIN_FN(ch_l2, memra_gdn_l2_scale((double)fabsf(y) + 1.0, 1e-6f))
CHAIN_FN(ch_rms, memra_gdn_rms_scale((double)fabsf(y) + 1.0, n, 1e-6f))
CHAIN_FN(ch_bfly64, (float)bfly_f64((double)y))
CHAIN_FN(ch_bfly32, bfly_f32(y))
/* the double operations those functions are made of */
CHAIN_FN(ch_dfma16, (float)dfma16((double)y))
CHAIN_FN(ch_f2f, (float)((double)y * 1.0000001))
CHAIN_FN(ch_drint, (float)rint((double)y * 1.5))
CHAIN_FN(ch_d2i, (float)(int)((double)y * 1.5))
CHAIN_FN(ch_softplus, memra_x_softplusf(-fabsf(y)))
#undef CHAIN_FN

__device__ float g_chain_sink;
__device__ long long g_chain_cycles;

template <typename F> __global__ void chain_kernel(float y0, int n, int iters)
{
    F f;
    float y = y0;
    const long long t0 = clock64();
    for (int i = 0; i < iters; i++)
        y = f(y, n);
    const long long t1 = clock64();
    if (threadIdx.x == 0) {
        g_chain_sink = y;
        g_chain_cycles = t1 - t0;
    }
}

namespace
{

template <typename F> double chain_cycles(int warp_wide)
{
    const int iters = 256;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        chain_kernel<F><<<1, warp_wide ? 32 : 1>>>(0.37f, 128, iters);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        long long c = 0;
        CK(cudaMemcpyFromSymbol(&c, g_chain_cycles, sizeof c));
        best = std::min(best, (double)c / iters);
    }
    return best;
}

void run_chains()
{
    struct row {
        const char *name;
        double (*fn)(int);
        int warp;
    } rows[] = {
        {"f32 add (loop floor)", chain_cycles<ch_fadd>, 0},
        {"memra_x_expf", chain_cycles<ch_expf>, 0},
        {"memra_x_siluf (conv, gate)", chain_cycles<ch_siluf>, 0},
        {"memra_gdn_beta (sigmoid)", chain_cycles<ch_beta>, 0},
        {"memra_gdn_decay (lambda)", chain_cycles<ch_decay>, 0},
        {"f64 divide by a runtime n", chain_cycles<ch_ddiv>, 0},
        {"f64 sqrt", chain_cycles<ch_dsqrt>, 0},
        {"1.0f / sqrtf (IEEE)", chain_cycles<ch_rsqrtf>, 0},
        {"f32 divide (IEEE)", chain_cycles<ch_fdiv>, 0},
        {"memra_gdn_l2_scale", chain_cycles<ch_l2>, 0},
        {"memra_gdn_rms_scale", chain_cycles<ch_rms>, 0},
        {"f64 butterfly (warp)", chain_cycles<ch_bfly64>, 1},
        {"f32 butterfly (warp)", chain_cycles<ch_bfly32>, 1},
        {"memra_x_softplusf", chain_cycles<ch_softplus>, 0},
        {"16 f64 fma + f2f pair", chain_cycles<ch_dfma16>, 0},
        {"f2f pair + f64 mul", chain_cycles<ch_f2f>, 0},
        {"f64 rint (+f2f, mul)", chain_cycles<ch_drint>, 0},
        {"f64 -> int -> f32", chain_cycles<ch_d2i>, 0},
    };
    printf("scalar chains: cycles per dependent call, one thread (butterflies: one warp); best "
           "of 5 x 256 calls\n");
    for (const row &r : rows)
        printf("  %-30s %7.1f\n", r.name, r.fn(r.warp));
}

struct probe_cfg {
    int b, split; /* split 0: the launcher's choice */
};

constexpr int NPH = MEMRA_GDN_PROBE_MARKS - 1, LAST = MEMRA_GDN_PROBE_MARKS - 1;

struct probe_out {
    int grid, cluster;
    std::vector<double> entry, resume, span, first_entry, last_entry, last_resume, ph[NPH],
        cyc[NPH];
    double timer_step = 1e30, cycles = 0.0, ns = 0.0;
};

void run_cfg(const probe_cfg &c, int iters, double spin_us, cudaStream_t s, int sms, probe_out &out)
{
    const int Hk = 16, Hv = 32, dk = 128, dv = 128, K = 4, b = c.b;
    const int ck = Hk * dk, cv = Hv * dv, cc = 2 * ck + cv;
    dev_buf m;
    unsigned seed = 12345u + (unsigned)b;
    float *qkv = m.get<float>((size_t)b * cc), *z = m.get<float>((size_t)b * cv);
    float *beta = m.get<float>((size_t)b * Hv), *alpha = m.get<float>((size_t)b * Hv);
    float *conv_w = m.get<float>((size_t)cc * K), *dt_bias = m.get<float>(Hv);
    float *ssm_a = m.get<float>(Hv), *norm_w = m.get<float>(dv);
    m.fill(qkv, (size_t)b * cc, -1.0f, 1.0f, seed);
    m.fill(z, (size_t)b * cv, -1.0f, 1.0f, seed);
    m.fill(beta, (size_t)b * Hv, -1.0f, 1.0f, seed);
    m.fill(alpha, (size_t)b * Hv, -1.0f, 1.0f, seed);
    m.fill(conv_w, (size_t)cc * K, -0.5f, 0.5f, seed);
    m.fill(dt_bias, Hv, -0.1f, 0.1f, seed);
    m.fill(ssm_a, Hv, -2.0f, -0.5f, seed);
    m.fill(norm_w, dv, 0.5f, 1.5f, seed);
    std::vector<uint64_t> cs(b), ss(b);
    for (int r = 0; r < b; r++) {
        float *cst = m.get<float>((size_t)cc * (K - 1)), *sst = m.get<float>((size_t)Hv * dv * dk);
        m.fill(cst, (size_t)cc * (K - 1), -1.0f, 1.0f, seed);
        m.fill(sst, (size_t)Hv * dv * dk, -0.05f, 0.05f, seed);
        cs[r] = (uint64_t)(uintptr_t)cst;
        ss[r] = (uint64_t)(uintptr_t)sst;
    }
    uint64_t *d_cs = m.get<uint64_t>(b), *d_ss = m.get<uint64_t>(b);
    CK(cudaMemcpy(d_cs, cs.data(), b * sizeof(uint64_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ss, ss.data(), b * sizeof(uint64_t), cudaMemcpyHostToDevice));
    void *y_q = m.get<unsigned char>((size_t)b * (cv / 32) * 36);
    memra_gdn_step_args a = {};
    a.qkv = qkv;
    a.z = z;
    a.beta = beta;
    a.alpha = alpha;
    a.conv_w = conv_w;
    a.dt_bias = dt_bias;
    a.ssm_a = ssm_a;
    a.norm_w = norm_w;
    a.conv_state = d_cs;
    a.ssm_state = d_ss;
    a.y_q = y_q;
    a.n_k_head = Hk;
    a.n_v_head = Hv;
    a.head_k_dim = dk;
    a.head_v_dim = dv;
    a.conv_k = K;
    a.head_map = MEMRA_GDN_HEADS_GROUPED;
    a.b = b;
    a.eps = 1e-6f;
    a.split = c.split;
    int ncta = 0;
    std::vector<unsigned long long> st;
    for (int it = -3; it < iters; it++) {
        launch_prev(s, sms, spin_us);
        if (memra_gdn_step_cuda(&a, s) != MEMRA_OK) {
            fprintf(stderr, "gdn-probe: gdn_step: %s\n", memra_cuda_ops_error());
            exit(1);
        }
        CK(cudaStreamSynchronize(s));
        if (it == -3) { /* the grid the launcher chose, as the kernel saw it */
            unsigned shape[2];
            CK(cudaMemcpyFromSymbol(shape, g_gdn_probe_shape, sizeof shape));
            ncta = (int)shape[0];
            out.grid = ncta;
            out.cluster = (int)shape[1];
            if (ncta > MEMRA_GDN_PROBE_CTAS) {
                fprintf(stderr, "gdn-probe: %d CTAs exceed the probe's %d\n", ncta,
                        MEMRA_GDN_PROBE_CTAS);
                exit(1);
            }
            st.resize((size_t)ncta * MEMRA_GDN_PROBE_MARKS * 2);
        }
        if (it < 0)
            continue; /* warm-up: code, TLB, L2 */
        unsigned long long pend = 0;
        CK(cudaMemcpyFromSymbol(&pend, g_prev_end, sizeof pend));
        CK(cudaMemcpyFromSymbol(st.data(), g_gdn_probe, st.size() * sizeof(unsigned long long)));
        auto T = [&](int cta, int mk) {
            return (double)st[((size_t)cta * MEMRA_GDN_PROBE_MARKS + mk) * 2];
        };
        auto C = [&](int cta, int mk) {
            return (double)st[((size_t)cta * MEMRA_GDN_PROBE_MARKS + mk) * 2 + 1];
        };
        double last = 0.0, first = 1e300, lent = -1e300, lres = -1e300;
        for (int x = 0; x < ncta; x++) {
            out.entry.push_back(T(x, 0) - (double)pend);
            out.resume.push_back(T(x, 2) - (double)pend);
            lent = std::max(lent, T(x, 0) - (double)pend);
            lres = std::max(lres, T(x, 2) - (double)pend);
            for (int k = 0; k < NPH; k++) {
                const double dt = T(x, k + 1) - T(x, k);
                out.ph[k].push_back(dt);
                out.cyc[k].push_back(C(x, k + 1) - C(x, k));
                if (dt > 0.0)
                    out.timer_step = std::min(out.timer_step, dt);
            }
            out.cycles += C(x, LAST) - C(x, 0);
            out.ns += T(x, LAST) - T(x, 0);
            last = std::max(last, T(x, LAST));
            first = std::min(first, T(x, 0));
        }
        out.span.push_back(last - (double)pend);
        out.first_entry.push_back(first - (double)pend);
        out.last_entry.push_back(lent);
        out.last_resume.push_back(lres);
    }
    memra_gdn_step_cuda_tune(0, -1);
}

} /* namespace */

int main(int argc, char **argv)
{
    int iters = 50, chains = 0, sms = 0;
    double spin_us = 20.0;
    cudaDeviceProp p;
    cudaStream_t s;
    if (probe_start(argc, argv, "gdn-probe", &iters, &spin_us, "--chains", &chains, &p, &s, &sms))
        return 2;
    printf("gdn-probe: %s, %d SMs; 9b gdn_step (Hk 16, Hv 32, dk = dv = 128, conv 4), previous "
           "kernel spins %.1f us, %d launches per line\n",
           p.name, sms, spin_us, iters);
    if (chains)
        run_chains();
    const probe_cfg cfgs[] = {{1, 0}, {1, 2}, {1, 1}, {2, 0}, {4, 0}, {8, 0}, {16, 0}};
    printf("medians over launches x CTAs, ns (%%globaltimer); entry / resume / span from the "
           "previous grid's end\n");
    printf("%-10s %5s %3s | %7s %7s %7s | %6s %6s %6s %6s %6s %6s %6s %6s %6s | %7s %7s | %7s "
           "%7s\n",
           "config", "grid", "cl", "1stent", "entry", "resume", "issue", "wait", "conv", "qk", "l2",
           "delta", "o", "gnorm", "out", "span", "p90", "lastent", "lastres");
    for (const probe_cfg &c : cfgs) {
        memra_gdn_step_cuda_tune(c.split, -1);
        probe_out o;
        run_cfg(c, iters, spin_us, s, sms, o);
        char name[32];
        snprintf(name, sizeof name, "b%d %s", c.b,
                 c.split ? (c.split == 1 ? "split1" : "split2") : "auto");
        printf("%-10s %5d %3d | %7.0f %7.0f %7.0f |", name, o.grid, o.cluster,
               median(o.first_entry), median(o.entry), median(o.resume));
        for (int k = 0; k < NPH; k++)
            printf(" %6.0f", median(o.ph[k]));
        printf(" | %7.0f %7.0f | %7.0f %7.0f\n", median(o.span), pct(o.span, 0.9),
               median(o.last_entry), median(o.last_resume));
        printf("%-10s %5s %3s | %7s %7s %7s |", "  cycles", "", "", "", "", "");
        for (int k = 0; k < NPH; k++)
            printf(" %6.0f", median(o.cyc[k]));
        printf(" | clock %.2f GHz, timer step %.0f ns\n", o.ns > 0 ? o.cycles / o.ns : 0.0,
               o.timer_step);
    }
    printf("columns: issue = entry -> first rows issued; wait = -> past the PDL wait; conv = "
           "thread 0's conv items; qk = -> q/k whole (st.async push, mbarrier wait); l2 = L2 "
           "norms; delta = "
           "delta rule (warp 0); o = o_h exchange; gnorm = the gated norm's scale; out = gate, "
           "q8_1, shifts; lastent / lastres = the launch's latest CTA entry / resume\n");
    CK(cudaStreamDestroy(s));
    return 0;
}
