/*
 * mmvq_moe.cu — CUDA mmvq_moe (contract and exact arithmetic: kernels/mmvq_moe.h): for row b,
 * rank r and each weight s, y_s[b, r, :] = W_s[ids[b, r]] . a[b] (* scale_s[e]).
 *
 * Work split: one warp per (row b, rank r, weight s, tile of 16 outputs), 4 warps per CTA;
 * items are numbered ((b * n_used + r) * (tiles_0 + tiles_1) + tile) with weight 1's tiles
 * after weight 0's. A warp runs moe_tile::tile_dot (kernels/moe_tile.cuh: memra_vec_dot_q8_1
 * of its 16 rows, bit-identical) and lane 4g stores outputs g and g + 8.
 * Must not: let an item read another row's activations or ids; use float atomics.
 * Invariants: the launch geometry is a function of (b, n_used, n_out_s) only; an item's
 * arithmetic does not depend on b, its position, or the other items.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "moe_tile.cuh"

namespace {

constexpr int kWarps = 4;

__global__ void __launch_bounds__(kWarps * 32) mmvq_moe_kernel(memra_mmvq_moe_args a, int tiles0,
                                                                 int tiles1)
{
    const int lane = threadIdx.x & 31;
    const int per = tiles0 + tiles1;
    const long long item = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
    const long long total = (long long)a.b * a.n_used * per;
    pdl_wait_release();
    if (item < total) {
        const long long br = item / per; /* b * n_used + r */
        int tile = (int)(item - br * per);
        const int wi = tile >= tiles0;
        if (wi)
            tile -= tiles0;
        const void *wbase = wi ? a.out[1].w : a.out[0].w;
        const float *scale = wi ? a.out[1].scale : a.out[0].scale;
        float *y = wi ? a.out[1].y : a.out[0].y;
        const int qt = wi ? a.out[1].qtype : a.out[0].qtype;
        const int n_out = wi ? a.out[1].n_out : a.out[0].n_out;
        const u64 rb = wi ? a.out[1].row_bytes : a.out[0].row_bytes;
        const u64 eb = wi ? a.out[1].expert_bytes : a.out[0].expert_bytes;
        const int e = a.ids[br];
        const int row0 = tile * MEMRA_MMVQ_ROWS;
        y += br * n_out;
        if (e < 0 || e >= a.n_expert) {
            if (lane < MEMRA_MMVQ_ROWS && row0 + lane < n_out)
                y[row0 + lane] = 0.0f;
        } else {
            const u8 *we = (const u8 *)wbase + (u64)e * eb;
            const int g = lane >> 2;
            const int r0 = row0 + g < n_out ? row0 + g : row0; /* past the end: any valid row */
            const int r1 = row0 + g + 8 < n_out ? row0 + g + 8 : row0;
            const long long b = br / a.n_used;
            const u8 *ab = (const u8 *)a.a + b * (long long)(a.k / 32) * Q8_1_BYTES;
            float T[1][4];
            moe_tile::tile_dot(qt, we + (u64)r0 * rb, we + (u64)r1 * rb, ab, a.k, lane, T);
            if ((lane & 3) == 0) {
                const float sc = scale ? scale[e] : 1.0f;
                if (row0 + g < n_out)
                    y[row0 + g] = scale ? __fmul_rn(T[0][0], sc) : T[0][0];
                if (row0 + g + 8 < n_out)
                    y[row0 + g + 8] = scale ? __fmul_rn(T[0][2], sc) : T[0][2];
            }
        }
    }
}

} /* namespace */

extern "C" int memra_mmvq_moe_cuda(const memra_mmvq_moe_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("mmvq_moe: null args");
    const char *why = memra_mmvq_moe_check(a);
    if (why)
        return cuda_ops_invalid(why);
    int tiles[2] = {0, 0};
    for (int i = 0; i < a->n_w; i++) {
        why = moe_tile_row_check(a->out[i].qtype, a->k, a->out[i].row_bytes);
        if (why)
            return cuda_ops_invalid(why);
        tiles[i] = (int)cdiv_u((uint64_t)a->out[i].n_out, MEMRA_MMVQ_ROWS);
    }
    const uint64_t items = (uint64_t)a->b * (uint64_t)a->n_used * (uint64_t)(tiles[0] + tiles[1]);
    if (items / kWarps >= 0x7FFFFFFFull)
        return cuda_ops_invalid("mmvq_moe: too many outputs for one launch");
    return cuda_ops_result(cuda_ops_launch(mmvq_moe_kernel, dim3(cdiv_u(items, kWarps)),
                                           dim3(kWarps * 32), 0, s, 1, *a, tiles[0], tiles[1]));
}
