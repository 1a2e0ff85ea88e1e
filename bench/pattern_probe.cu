/*
 * pattern_probe.cu — how fast can the B = 1 direct mmvq's LOADS go, with no arithmetic?
 * (bench/results/mmvq-notes.md, "Access pattern"). A measurement tool, not part of the engine:
 * it answers whether the direct path's 42-60 % of the copy rate comes from its access pattern
 * (16 rows x 144-byte pieces per warp step, bytes 2304 apart) or from latency / arithmetic.
 *
 * Every kernel reads the same weight region of a q4_K matrix, n_rows x 2304 bytes (K = 4096),
 * with 256-thread CUDA blocks of 8 warps holding 4 tiles of 16 rows, and folds what it loads
 * into an XOR that it stores (so no load is dead code):
 *   tile  D  the direct path's pattern (nvrtc_templates/mmvq.cuh q4k_direct_main at wpt 2,
 *            P = 8): lane 2r + h loads row r's header and half h of its codes, 5 x 16 bytes
 *            per block, D blocks in flight per lane;
 *   flat  D  the same CUDA block reads the same 4 tiles (147 KB, contiguous) as consecutive
 *            16-byte units, lane-contiguous per warp instruction, D units in flight per lane;
 *   copy     a grid-stride 16-byte read of the region (the copy kernel's read side).
 * Launches run back to back, each on the next of many copies of the region (2 GiB rotated,
 * so no launch finds its bytes in L2), timed with CUDA events.
 *
 *   nvcc -O3 -arch=sm_90 -o pattern-probe bench/pattern_probe.cu   (bench/device-probe.sh)
 *   pattern-probe            prints a table: variant, MB per launch, us per launch, GB/s, %
 *                            of the device-to-device copy rate measured in the same run
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

#include "probe_check.cuh"

struct u4 {
    uint32_t x, y, z, w;
};

__device__ __forceinline__ u4 ldg16(const uint8_t *p)
{
    u4 v; /* the load ldg_stream16 (nvrtc_templates/mmvq.cuh) issues */
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* acc ^= the four words; volatile, so that it stays where the code puts it relative to the
 * (volatile) loads: a use of a buffer before the next loads are issued, as in the kernel */
__device__ __forceinline__ uint32_t fold(const u4 &v)
{
    uint32_t r;
    asm volatile("{.reg .b32 t;\n\txor.b32 t, %1, %2;\n\txor.b32 t, t, %3;\n\txor.b32 %0, t, %4;}"
                 : "=r"(r)
                 : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
    return r;
}

constexpr int ROW_BYTES = 2304, NBLK = 16, P = 8, W = 2;

/* one lane's share of a block: header + 4 code units (h = 0: 16..79, h = 1: 80..143) */
struct lane_blk {
    u4 v[5];
};

__device__ __forceinline__ void load_blk(lane_blk &b, const uint8_t *blk, int h)
{
    b.v[0] = ldg16(blk);
#pragma unroll
    for (int i = 0; i < 4; i++)
        b.v[1 + i] = ldg16(blk + 16 + 64 * h + 16 * i);
}

/* registers as the kernel has them: 80 (3 CUDA blocks per SM) up to 2 buffers */
template <int D> struct minb {
    static constexpr int v = D <= 2 ? 3 : D <= 4 ? 2 : 1;
};

template <int D>
__global__ void __launch_bounds__(256, minb<D>::v)
    k_tile(const uint8_t *w, int n_rows, uint32_t *out)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tile = blockIdx.x * 4 + warp / W, gp = warp % W, r = lane >> 1, h = lane & 1;
    const int row = tile * 16 + r;
    uint32_t acc = 0;
    if (row < n_rows) {
        const uint8_t *wr = w + (size_t)row * ROW_BYTES;
        /* the warp's sequence: parts gp, gp + W, ..., blocks p, p + P of each */
        constexpr int BPP = NBLK / P; /* blocks per part */
        auto seq = [&](int i) { return gp + W * (i / BPP) + P * (i % BPP); };
        lane_blk ring[D];
#pragma unroll
        for (int i = 0; i < D; i++)
            load_blk(ring[i], wr + 144 * seq(i), h);
#pragma unroll
        for (int i = 0; i < NBLK / W; i++) {
            lane_blk &b = ring[i % D];
#pragma unroll
            for (int k = 0; k < 5; k++)
                acc ^= fold(b.v[k]);
            if (i + D < NBLK / W)
                load_blk(b, wr + 144 * seq(i + D), h);
        }
    }
    out[blockIdx.x * 256 + threadIdx.x] = acc;
}

template <int D>
__global__ void __launch_bounds__(256, minb<D>::v)
    k_flat(const uint8_t *w, int n_rows, uint32_t *out)
{
    const size_t base = (size_t)blockIdx.x * 4 * 16 * ROW_BYTES;
    const size_t lim = (size_t)n_rows * ROW_BYTES,
                 end = lim < base + 4 * 16 * ROW_BYTES ? lim : base + 4 * 16 * ROW_BYTES;
    const int units = (int)((end - base) / 16); /* 9216 for 4 whole tiles */
    uint32_t acc = 0;
    u4 ring[D];
    const int per = (units + 255) / 256;
#pragma unroll
    for (int i = 0; i < D; i++) {
        const int u = threadIdx.x + 256 * i;
        ring[i] = u < units ? ldg16(w + base + 16 * (size_t)u) : u4{0, 0, 0, 0};
    }
    for (int i = 0; i < per; i += D) {
#pragma unroll
        for (int k = 0; k < D; k++) {
            acc ^= fold(ring[k]);
            const int u = threadIdx.x + 256 * (i + k + D);
            ring[k] = u < units ? ldg16(w + base + 16 * (size_t)u) : u4{0, 0, 0, 0};
        }
    }
    out[blockIdx.x * 256 + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(256) k_copyread(const uint8_t *w, size_t bytes, uint32_t *out)
{
    uint32_t acc = 0;
    const size_t n = bytes / 16, stride = (size_t)gridDim.x * 256;
    size_t i = (size_t)blockIdx.x * 256 + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const u4 a = ldg16(w + 16 * i), b = ldg16(w + 16 * (i + stride));
        const u4 c = ldg16(w + 16 * (i + 2 * stride)), d = ldg16(w + 16 * (i + 3 * stride));
        acc ^= fold(a) ^ fold(b) ^ fold(c) ^ fold(d);
    }
    for (; i < n; i += stride)
        acc ^= fold(ldg16(w + 16 * i));
    out[(blockIdx.x * 256 + threadIdx.x) % (1 << 20)] = acc;
}

typedef void (*launch_fn)(const uint8_t *w, int n_rows, uint32_t *out, cudaStream_t st);

template <int D> void run_tile(const uint8_t *w, int n_rows, uint32_t *out, cudaStream_t st)
{
    k_tile<D><<<(n_rows / 16 + 3) / 4, 256, 0, st>>>(w, n_rows, out);
}

template <int D> void run_flat(const uint8_t *w, int n_rows, uint32_t *out, cudaStream_t st)
{
    k_flat<D><<<(n_rows / 16 + 3) / 4, 256, 0, st>>>(w, n_rows, out);
}

void run_copy(const uint8_t *w, int n_rows, uint32_t *out, cudaStream_t st)
{
    k_copyread<<<132 * 8, 256, 0, st>>>(w, (size_t)n_rows * ROW_BYTES, out);
}

int main()
{
    const size_t cap = (size_t)2 << 30;
    uint8_t *buf, *dst;
    uint32_t *out;
    CK(cudaMalloc(&buf, cap));
    CK(cudaMalloc(&dst, (size_t)1 << 30));
    CK(cudaMalloc(&out, (size_t)64 << 20));
    CK(cudaMemset(buf, 0x5A, cap));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms;
    /* the copy rate, as memra-bench measures it: (read + write) / time, best of 10 */
    double copy_gbs = 0;
    for (int it = 0; it < 10; it++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaMemcpyAsync(dst, buf, (size_t)1 << 30, cudaMemcpyDeviceToDevice, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        copy_gbs = std::max(copy_gbs, 2.0 * (1 << 30) / (ms * 1e-3) / 1e9);
    }
    printf("device-to-device copy of 1 GiB: %.0f GB/s (read + write, best of 10)\n", copy_gbs);
    struct variant {
        const char *name;
        launch_fn fn;
    } vars[] = {{"tile D=1", run_tile<1>}, {"tile D=2", run_tile<2>}, {"tile D=4", run_tile<4>},
                {"tile D=8", run_tile<8>}, {"flat D=2", run_flat<2>}, {"flat D=4", run_flat<4>},
                {"flat D=8", run_flat<8>}, {"copy", run_copy}};
    const int shapes[] = {1536 * 16, 256 * 16, 24 * 1536 * 16}; /* gate+up, out_proj, big */
    const char *shape_names[] = {"ffn_gate_up (24576 rows)", "out_proj (4096 rows)",
                                 "big (589824 rows)"};
    printf("%-26s %-10s %8s %10s %9s %7s\n", "shape", "variant", "MB", "us/launch", "GB/s",
           "%copy");
    for (int s = 0; s < 3; s++) {
        const int n_rows = shapes[s];
        const size_t bytes = (size_t)n_rows * ROW_BYTES, span = (bytes + 4095) / 4096 * 4096;
        const int copies = (int)(cap / span);
        const int R = std::max(2, std::min(200, (int)(((size_t)3 << 30) / bytes)));
        for (auto &v : vars) {
            std::vector<float> t;
            for (int rep = 0; rep < 7; rep++) {
                CK(cudaEventRecord(e0, st));
                for (int r = 0; r < R; r++)
                    v.fn(buf + (size_t)((rep * R + r) % copies) * span, n_rows, out, st);
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep > 0)
                    t.push_back(1e3f * ms / R);
            }
            std::sort(t.begin(), t.end());
            const double us = t[t.size() / 2], gbs = bytes / (us * 1e-6) / 1e9;
            printf("%-26s %-10s %8.1f %10.2f %9.0f %6.1f%%\n", shape_names[s], v.name, bytes / 1e6,
                   us, gbs, 100.0 * gbs / copy_gbs);
        }
    }
    return 0;
}
