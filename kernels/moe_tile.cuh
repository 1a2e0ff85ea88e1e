/*
 * moe_tile.cuh — the one device primitive of the MoE ops (kernels/mmvq_moe.cu,
 * kernels/moe_down.cu): a warp computes the 16 dot products of a 16-row weight tile with ONE
 * q8_1 activation row, T = 0; T = T + r_j for the dot blocks j = 0, 1, ... in increasing order,
 * r_j bit-identical to runtime/quant.c memra_vec_dot_block. That is exactly
 * memra_vec_dot_q8_1, so every output is bit-identical to the CPU reference.
 *
 * The per-block r_j are the NVRTC mmvq template's block functions (nvrtc_templates/mmvq.cuh
 * block_any<QT, B>, int8 mma, proven bit-exact against quant.c by memra-gpu-tests) used with
 * B = 1: the activation row is mma column 0; columns 1..7 are zero and never read back.
 * Only block_any, make_q8_ptrs and geom<QT> are used from that file (its streaming kernel is not).
 * Accumulator layout (mmvq.cuh): lane 4g (t = 0) holds output g of the tile in T[0][0] and
 * output g + 8 in T[0][2]; the other lanes hold padding columns.
 *
 * Must not: diverge inside a warp around tile_dot (mma.sync needs all 32 lanes), or read a
 * weight row that does not exist (callers pass valid row pointers for rows past the end).
 * Invariants: the weight rows keep their global alignment (the block functions assume each
 * type's natural alignment: the weight base 16-byte aligned, rows at multiples of the block
 * size); a is 4-byte aligned.
 */
#ifndef MEMRA_KERNEL_MOE_TILE_CUH
#define MEMRA_KERNEL_MOE_TILE_CUH

#include "nvrtc_templates/mmvq.cuh"

namespace moe_tile {

template <int QT>
__device__ __forceinline__ void tile_dot_qt(const u8 *w0, const u8 *w1, const u8 *a, int k, int lane,
                                            float (&T)[1][4])
{
    typedef geom<QT> G;
    const int g = lane >> 2, t = lane & 3;
    const int nblk = k / G::qk;
    const q8_ptrs<1> P = make_q8_ptrs<1>(a, 0, g, t); /* one row: (a, rs = 0) */
#pragma unroll 1
    for (int j = 0; j < nblk; j++)
        block_any<QT, 1>(w0 + (i64)j * G::bytes, w1 + (i64)j * G::bytes, P, (i64)j * (G::qk / 32),
                         g, t, T);
}

/* T[0][*] = 0, then the row dots of rows w0 (output g) and w1 (output g + 8) with the q8_1
 * row a (k elements) for weight type qt. Returns false for a type without a block function
 * (the host entries refuse those before launching). */
__device__ __forceinline__ bool tile_dot(int qt, const u8 *w0, const u8 *w1, const u8 *a, int k,
                                         int lane, float (&T)[1][4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        T[0][i] = 0.0f;
    switch (qt) {
#define MOE_TILE_CASE(id, name, de, db, sb)                                                        \
    case id:                                                                                       \
        tile_dot_qt<id>(w0, w1, a, k, lane, T);                                                    \
        return true;
        MEMRA_MMVQ_TYPES(MOE_TILE_CASE)
#undef MOE_TILE_CASE
    default:
        return false;
    }
}

} /* namespace moe_tile */

/* Host: the dot geometry of a weight type (mmvq_params.h MEMRA_MMVQ_TYPES): elements and bytes
 * of one dot block; false when the type has no GPU block function. */
static inline bool moe_tile_geom(int qt, int *elems, int *bytes)
{
    switch (qt) {
#define MOE_TILE_GEOM(id, name, de, db, sb)                                                        \
    case id:                                                                                       \
        *elems = de;                                                                               \
        *bytes = db;                                                                               \
        return true;
        MEMRA_MMVQ_TYPES(MOE_TILE_GEOM)
#undef MOE_TILE_GEOM
    default:
        return false;
    }
}

/* Host: null when a weight of type qt, k elements per row of row_bytes, can be dotted here;
 * else the reason. */
static inline const char *moe_tile_row_check(int qt, int k, uint64_t row_bytes)
{
    int de = 0, db = 0;
    if (!moe_tile_geom(qt, &de, &db))
        return "weight type has no CUDA dot block function";
    if (k % de != 0 || row_bytes != (uint64_t)(k / de) * (uint64_t)db)
        return "row_bytes is not the weight type's row size for k";
    return 0;
}

#endif
