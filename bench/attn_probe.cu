/*
 * attn_probe.cu — where one attn_decode (split kernel + combine kernel) goes in time
 * (`bench/device-probe.sh attn`; bench/results/mmvq-notes.md, session 27). In the 9b's B = 1
 * tick attention costs 11.5 us per layer (memra-bench --removal, session 24) for ~4.2 MB of
 * K and V at depth 1024, ~1.5 us at the copy rate: the rest is latency. This probe times it.
 *
 * It compiles kernels/attn_decode.cu itself with MEMRA_ATTN_PROBE, so thread 0 of every CTA
 * stamps %globaltimer and clock64 at the marks (kernels/attn_decode.cu ATTN_MARK / ATTN_CMARK):
 *   split:   0 entry, 1 the pre-wait L2 prefetch issued, 2 past the PDL wait, 3 q loaded,
 *            4 thread 0's warp done with its key batches, 5 the warps' partials in shared
 *            memory (CTA barrier), 6 the warp weights (barrier), 7 the partial written (end);
 *   combine: 0 entry, 1 past the PDL wait, 2 the splits' max, 3 the merge chain,
 *            4 sigmoid(gate) and the output, 5 q8_1 block written (end).
 * Each launch follows a "previous kernel" as in the tick (a grid of one CTA per SM that waits,
 * releases its dependents and spins for --spin us, then records its end), so the split CTAs
 * are resident and prefetch while it runs. Times are from the previous grid's end, except the
 * combine's resume, from the split grid's last CTA end. Shapes: the 9b preset's attention
 * (16 q heads, 4 kv heads, head_dim 256, f16 cache, max_split 128) at depth 1024 for b = 1..16
 * with the engine's defaults (tier 1: split CTAs AUTO; others one CTA per split; prefetch 2),
 * b = 1 with one CTA per split and without the prefetch, and b = 1 at depths 8192 and 32768.
 * Inputs are pseudo-random: the arithmetic's speed does not depend on the values.
 *
 *   attn-probe [--iters N] [--spin US]
 */
#define MEMRA_ATTN_PROBE 1
#include "kernels/attn_decode.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_timeline.cuh"

/* f16 values in [-1, 1) from a hash of the index */
__global__ void fill_f16(__half *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2half_rn((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

namespace
{

struct probe_cfg {
    const char *name;
    int b, depth, split_ctas, prefetch;
};

constexpr int SPH = 7, CPH = 4; /* split phases (marks 0..7), combine phases (marks 1..5) */

struct probe_out {
    int grid = 0, work = 0, cgrid = 0;
    std::vector<double> s_entry, s_resume, s_last, s_ph[SPH], s_cyc[SPH];
    std::vector<double> c_entry, c_resume, c_ph[CPH], c_cyc[CPH], span;
    double cycles = 0.0, ns = 0.0;
};

void run_cfg(const probe_cfg &c, int iters, double spin_us, cudaStream_t s, int sms, probe_out &out)
{
    const int H = 16, Hkv = 4, dh = 256, b = c.b, max_split = MEMRA_ATTN_MAX_SPLIT;
    const int n_ctx = c.depth + 64;
    const size_t hb = memra_kv_head_bytes(MEMRA_QT_F16, dh), row_bytes = (size_t)n_ctx * Hkv * hb;
    dev_buf m;
    unsigned seed = 777u + (unsigned)b;
    float *q = m.get<float>((size_t)b * H * dh), *qg = m.get<float>((size_t)b * H * 2 * dh);
    m.fill(q, (size_t)b * H * dh, -0.5f, 0.5f, seed);
    m.fill(qg, (size_t)b * H * 2 * dh, -2.0f, 2.0f, seed);
    std::vector<int32_t> pos(b, c.depth);
    std::vector<uint64_t> kc(b), vc(b);
    for (int r = 0; r < b; r++) {
        __half *k = m.get<__half>(row_bytes / 2), *v = m.get<__half>(row_bytes / 2);
        fill_f16<<<512, 256, 0, s>>>(k, row_bytes / 2, 11u + (unsigned)r);
        fill_f16<<<512, 256, 0, s>>>(v, row_bytes / 2, 99u + (unsigned)r);
        CK(cudaGetLastError());
        kc[r] = (uint64_t)(uintptr_t)k;
        vc[r] = (uint64_t)(uintptr_t)v;
    }
    int32_t *d_pos = m.get<int32_t>(b);
    uint64_t *d_kc = m.get<uint64_t>(b), *d_vc = m.get<uint64_t>(b);
    CK(cudaMemcpy(d_pos, pos.data(), b * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_kc, kc.data(), b * sizeof(uint64_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_vc, vc.data(), b * sizeof(uint64_t), cudaMemcpyHostToDevice));
    memra_attn_decode_args a = {};
    a.q = q;
    a.qg = qg;
    a.positions = d_pos;
    a.k_cache = d_kc;
    a.v_cache = d_vc;
    a.scratch = m.get<float>((size_t)b * H * max_split * (dh + 2));
    a.y_q = m.get<unsigned char>((size_t)b * (H * dh / 32) * 36);
    a.n_head = H;
    a.n_head_kv = Hkv;
    a.head_dim = dh;
    a.kv_type = MEMRA_QT_F16;
    a.n_ctx = n_ctx;
    a.max_split = max_split;
    a.b = b;
    a.scale = 1.0f / 16.0f;
    a.split_ctas = c.split_ctas;
    a.prefetch_batches = c.prefetch;
    int32_t gx = 0;
    if (memra_attn_decode_cuda_split_ctas(&a, &gx) != MEMRA_OK) {
        fprintf(stderr, "attn-probe: %s\n", memra_cuda_ops_error());
        exit(1);
    }
    const int nsplit = memra_attn_nsplit(c.depth + 1, max_split);
    const int ncta = gx * Hkv * b,
              ccta = cdiv_u(H * dh / 32, kCombineWarps) * b; /* as the launcher */
    if (ncta > MEMRA_ATTN_PROBE_CTAS || ccta > MEMRA_ATTN_PROBE_CTAS) {
        fprintf(stderr, "attn-probe: %d CTAs exceed the probe's %d\n", ncta, MEMRA_ATTN_PROBE_CTAS);
        exit(1);
    }
    out.grid = ncta;
    out.work = std::min(nsplit, gx) * Hkv * b;
    out.cgrid = ccta;
    const size_t per = (size_t)MEMRA_ATTN_PROBE_MARKS * 2;
    std::vector<unsigned long long> st((size_t)ncta * per), ct((size_t)ccta * per);
    for (int it = -3; it < iters; it++) {
        launch_prev(s, sms, spin_us);
        if (memra_attn_decode_cuda(&a, s) != MEMRA_OK) {
            fprintf(stderr, "attn-probe: attn_decode: %s\n", memra_cuda_ops_error());
            exit(1);
        }
        CK(cudaStreamSynchronize(s));
        if (it < 0)
            continue; /* warm-up: code, TLB, L2 */
        unsigned long long pend = 0;
        CK(cudaMemcpyFromSymbol(&pend, g_prev_end, sizeof pend));
        CK(cudaMemcpyFromSymbol(st.data(), g_attn_probe, st.size() * sizeof(unsigned long long)));
        CK(cudaMemcpyFromSymbol(ct.data(), g_attn_probe, ct.size() * sizeof(unsigned long long),
                                sizeof(unsigned long long) * MEMRA_ATTN_PROBE_CTAS * per));
        const double P = (double)pend;
        auto T = [&](const std::vector<unsigned long long> &v, int x, int mk) {
            return (double)v[(size_t)x * per + (size_t)mk * 2];
        };
        auto C = [&](const std::vector<unsigned long long> &v, int x, int mk) {
            return (double)v[(size_t)x * per + (size_t)mk * 2 + 1];
        };
        double slast = 0.0, clast = 0.0;
        for (int x = 0; x < ncta; x++) {
            slast = std::max(slast, T(st, x, 7));
            if (x % gx >= nsplit) /* a CTA without a split: entry, wait, exit */
                continue;
            out.s_entry.push_back(T(st, x, 0) - P);
            out.s_resume.push_back(T(st, x, 2) - P);
            for (int k = 0; k < SPH; k++) {
                out.s_ph[k].push_back(T(st, x, k + 1) - T(st, x, k));
                out.s_cyc[k].push_back(C(st, x, k + 1) - C(st, x, k));
            }
            out.cycles += C(st, x, 7) - C(st, x, 0);
            out.ns += T(st, x, 7) - T(st, x, 0);
        }
        out.s_last.push_back(slast - P);
        for (int x = 0; x < ccta; x++) {
            out.c_entry.push_back(T(ct, x, 0) - P);
            out.c_resume.push_back(T(ct, x, 1) - slast);
            for (int k = 0; k < CPH; k++) {
                out.c_ph[k].push_back(T(ct, x, k + 2) - T(ct, x, k + 1));
                out.c_cyc[k].push_back(C(ct, x, k + 2) - C(ct, x, k + 1));
            }
            clast = std::max(clast, T(ct, x, 5));
        }
        out.span.push_back(clast - P);
    }
}

} /* namespace */

int main(int argc, char **argv)
{
    int iters = 50, sms = 0;
    double spin_us = 20.0;
    cudaDeviceProp p;
    cudaStream_t s;
    if (probe_start(argc, argv, "attn-probe", &iters, &spin_us, nullptr, nullptr, &p, &s, &sms))
        return 2;
    printf("attn-probe: %s, %d SMs; 9b attention (16 q heads, 4 kv heads, head_dim 256, f16 "
           "cache, max_split %d), previous kernel spins %.1f us, %d launches per line\n",
           p.name, sms, MEMRA_ATTN_MAX_SPLIT, spin_us, iters);
    const int AUTO = MEMRA_ATTN_SPLIT_CTAS_AUTO;
    const probe_cfg cfgs[] = {
        {"b1", 1, 1024, AUTO, 2}, {"b1 max", 1, 1024, 0, 2},      {"b1 nopf", 1, 1024, AUTO, 0},
        {"b2", 2, 1024, 0, 2},    {"b4", 4, 1024, 0, 2},          {"b8", 8, 1024, 0, 2},
        {"b16", 16, 1024, 0, 2},  {"b1 d8192", 1, 8192, AUTO, 2}, {"b1 d32768", 1, 32768, AUTO, 2},
    };
    printf("medians over launches x CTAs (split: those with a split), ns (%%globaltimer); split "
           "entry / resume / end and span from the previous grid's end, the combine's resume "
           "from the split grid's end\n");
    printf("%-10s %5s %4s | %6s %6s | %5s %5s %5s %6s %5s %5s %5s | %6s | %6s %6s | %5s %5s %5s "
           "%5s | %6s %6s\n",
           "config", "grid", "work", "entry", "resume", "pf", "wait", "q", "scan", "wmrg", "wts",
           "part", "s.end", "c.ent", "c.res", "M", "chain", "gate", "q8", "span", "p90");
    for (const probe_cfg &c : cfgs) {
        probe_out o;
        run_cfg(c, iters, spin_us, s, sms, o);
        printf("%-10s %5d %4d | %6.0f %6.0f |", c.name, o.grid, o.work, median(o.s_entry),
               median(o.s_resume));
        for (int k = 0; k < SPH; k++)
            printf(k == 3 ? " %6.0f" : " %5.0f", median(o.s_ph[k]));
        printf(" | %6.0f | %6.0f %6.0f |", median(o.s_last), median(o.c_entry), median(o.c_resume));
        for (int k = 0; k < CPH; k++)
            printf(" %5.0f", median(o.c_ph[k]));
        printf(" | %6.0f %6.0f\n", median(o.span), pct(o.span, 0.9));
        printf("%-10s %5s %4s | %6s %6s |", "  cycles", "", "", "", "");
        for (int k = 0; k < SPH; k++)
            printf(k == 3 ? " %6.0f" : " %5.0f", median(o.s_cyc[k]));
        printf(" | %6s | %6s %6s |", "", "", "");
        for (int k = 0; k < CPH; k++)
            printf(" %5.0f", median(o.c_cyc[k]));
        printf(" | clock %.2f GHz\n", o.ns > 0 ? o.cycles / o.ns : 0.0);
    }
    printf("columns: pf = entry -> pre-wait prefetch issued; wait = -> past the PDL wait; q = q "
           "loaded; scan = thread 0's warp over its key batches; wmrg = the warps' partials in "
           "shared memory; wts = warp weights; part = partial written; s.end = the split grid's "
           "last CTA end; c.ent / c.res = combine entry / resume after s.end; M = max over splits; "
           "chain = the merge; gate = sigmoid(gate) and output; q8 = q8_1 block written\n");
    CK(cudaStreamDestroy(s));
    return 0;
}
