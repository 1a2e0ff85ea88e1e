/*
 * moe_down.cu — CUDA moe_down (contract and exact arithmetic: kernels/moe_down.h): the routed
 * experts' down projections, weighted and summed in rank order, plus the gated shared expert,
 * added into the residual row x[b].
 *
 * Work split: one CTA (4 warps) per (row b, tile of 16 outputs). The CTA's items are the
 * ranks r = 0..n_used-1 and, when present, the shared expert (item n_used); warp w computes
 * items w, w + 4, ...: d = memra_vec_dot_q8_1 of its 16 rows (moe_tile::tile_dot, bit-identical)
 * times the scale when given, into shared memory. Then thread o < 16 combines its output
 * exactly as the reference: f = 0; f = f + w_r * d_r in rank order (invalid ids skipped);
 * f = f + memra_x_sigmoidf(sh_gate[b]) * d_sh; x = x + f.
 * Must not: let a CTA read another row; use float atomics.
 * Invariants: grid = b * ceil(n / 16) CTAs; the arithmetic of output (b, o) depends only on
 * row b's inputs.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "exact_math.h"
#include "moe_tile.cuh"

namespace {

constexpr int kWarps = 4;

__global__ void __launch_bounds__(kWarps * 32) moe_down_kernel(memra_moe_down_args a, int tiles)
{
    extern __shared__ float dsm[]; /* [n_used + 1][16]: each item's 16 dots */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / tiles, tile = blockIdx.x - b * tiles;
    const int row0 = tile * MEMRA_MMVQ_ROWS, g = lane >> 2;
    const int n_items = a.n_used + (a.sh_a ? 1 : 0);
    const int *ids = a.ids + (long long)b * a.n_used;
    pdl_wait_release();
    for (int it = warp; it < n_items; it += kWarps) {
        const u8 *base, *act;
        const float *scale;
        u64 rb;
        int qt, k;
        if (it < a.n_used) {
            const int e = ids[it];
            if (e < 0 || e >= a.n_expert)
                continue; /* contributes nothing; its slot is never read */
            base = (const u8 *)a.w + (u64)e * a.expert_bytes;
            rb = a.row_bytes;
            qt = a.qtype;
            k = a.k;
            act = (const u8 *)a.a + ((long long)b * a.n_used + it) * (long long)(k / 32) * Q8_1_BYTES;
            scale = a.scale ? a.scale + e : nullptr;
        } else {
            base = (const u8 *)a.sh_w;
            rb = a.sh_row_bytes;
            qt = a.sh_qtype;
            k = a.k_sh;
            act = (const u8 *)a.sh_a + (long long)b * (long long)(k / 32) * Q8_1_BYTES;
            scale = a.sh_scale;
        }
        const int r0 = row0 + g < a.n ? row0 + g : row0; /* past the end: any valid row */
        const int r1 = row0 + g + 8 < a.n ? row0 + g + 8 : row0;
        float T[1][4];
        moe_tile::tile_dot(qt, base + (u64)r0 * rb, base + (u64)r1 * rb, act, k, lane, T);
        if ((lane & 3) == 0) {
            const float sc = scale ? scale[0] : 1.0f;
            dsm[it * MEMRA_MMVQ_ROWS + g] = scale ? __fmul_rn(T[0][0], sc) : T[0][0];
            dsm[it * MEMRA_MMVQ_ROWS + g + 8] = scale ? __fmul_rn(T[0][2], sc) : T[0][2];
        }
    }
    __syncthreads();
    const int o = row0 + (int)threadIdx.x;
    if (threadIdx.x < MEMRA_MMVQ_ROWS && o < a.n) {
        const float *wts = a.wts + (long long)b * a.n_used;
        float f = 0.0f;
        for (int r = 0; r < a.n_used; r++) {
            const int e = ids[r];
            if (e >= 0 && e < a.n_expert)
                f = __fadd_rn(f, __fmul_rn(wts[r], dsm[r * MEMRA_MMVQ_ROWS + threadIdx.x]));
        }
        if (a.sh_a) {
            const float gamma = memra_x_sigmoidf(a.sh_gate[b]);
            f = __fadd_rn(f, __fmul_rn(gamma, dsm[a.n_used * MEMRA_MMVQ_ROWS + threadIdx.x]));
        }
        float *x = a.x + (long long)b * a.n + o;
        *x = __fadd_rn(*x, f);
    }
}

} /* namespace */

extern "C" int memra_moe_down_cuda(const memra_moe_down_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("moe_down: null args");
    const char *why = memra_moe_down_check(a);
    if (why)
        return cuda_ops_invalid(why);
    why = moe_tile_row_check(a->qtype, a->k, a->row_bytes);
    if (!why && a->sh_a)
        why = moe_tile_row_check(a->sh_qtype, a->k_sh, a->sh_row_bytes);
    if (why)
        return cuda_ops_invalid(why);
    const uint64_t tiles = cdiv_u((uint64_t)a->n, MEMRA_MMVQ_ROWS);
    if ((uint64_t)a->b * tiles >= 0x7FFFFFFFull)
        return cuda_ops_invalid("moe_down: too many outputs for one launch");
    const size_t smem = sizeof(float) * MEMRA_MMVQ_ROWS * (size_t)(a->n_used + 1);
    return cuda_ops_result(cuda_ops_launch(moe_down_kernel, dim3((unsigned)(a->b * tiles)),
                                           dim3(kWarps * 32), smem, s, 1, *a, (int)tiles));
}
