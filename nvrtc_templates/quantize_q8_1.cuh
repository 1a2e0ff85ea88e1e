/*
 * quantize_q8_1.cuh — the engine q8_1 activation quantizer on the GPU: one warp per 32-value
 * block, bytes identical to runtime/quant.c memra_quantize_q8_1 (spec §4.2 [engine]).
 *
 * Template parameters: none (specialization key "quantize_q8_1:sm=<arch>"); the device
 * function q8_1_quantize_warp() is what fused producers (norms, SwiGLU) call in their
 * epilogue so that every producer emits the same bytes.
 * Must not: use an f32 reciprocal multiply, fast division, FTZ or FMA (compiled with
 * -prec-div=true -ftz=false -fmad=false), or depend on the number of rows.
 * Invariants (per block, as quant.c): amax = fmaxf-reduction of |x| (order-free);
 * d = amax / 127 (IEEE RN; formed as (float)((double)amax * (1.0 / 127)), the same float for
 * every amax: the exact quotient is never within 2^-32 (relative) of a float rounding
 * boundary while the double product is within 2^-52 of it; tests/test_quant.c checks every
 * amax >= 0, all 2^31 of them; it takes the f32 division's latency off every producer's tail);
 * q = 0 if d == 0, else roundf(x / d) with NaN -> 0 and a clamp to
 * [-127, 127]; stored d = fp16_RN(d); stored s = fp16_RN(v) where v is lane 0's value of the
 * butterfly v += v(lane ^ o), o = 16, 8, 4, 2, 1 (every lane holds the same bits because
 * a + b == b + a exactly). Values past the end of a row are 0.
 */
#ifndef MEMRA_NVRTC_QUANTIZE_Q8_1_CUH
#define MEMRA_NVRTC_QUANTIZE_Q8_1_CUH

#include "common.cuh"

/* fp16 of v as quant.c writes it: RN-even, and NaN as sign | 0x7E00 (PTX would give 0x7FFF).
 * A NaN's sign can still differ from the CPU's (x86 and the GPU create NaNs with different
 * signs), which only matters for rows that already hold NaN or both infinities. */
MEMRA_DEV u16 f16_of(float v)
{
    return v != v ? (u16)(0x7E00u | ((__float_as_uint(v) >> 16) & 0x8000u)) : f32_to_f16_rn(v);
}

/* Quantizes the 32 values v (one per lane) into the 36-byte q8_1 block at out. */
MEMRA_DEV void q8_1_quantize_warp(float v, int lane, u8 *out)
{
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float s = v;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    const float d = (float)((double)amax * (1.0 / 127.0)); /* == __fdiv_rn(amax, 127.0f) */
    float r = d == 0.0f ? 0.0f : roundf(__fdiv_rn(v, d));
    r = r != r ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f);
    out[4 + lane] = (u8)(i8)(i32)r;
    if (lane == 0) {
        const u32 ds = (u32)f16_of(d) | ((u32)f16_of(s) << 16);
        out[0] = (u8)ds;
        out[1] = (u8)(ds >> 8);
        out[2] = (u8)(ds >> 16);
        out[3] = (u8)(ds >> 24);
    }
}

/* x [b, n] f32 -> y [b, ceil(n/32)] q8_1 blocks. One warp per block; grid-stride over the
 * b * ceil(n/32) blocks, so any grid size is correct. */
template <int WARPS> MEMRA_DEV void quantize_q8_1_run(const float *x, u8 *y, int n, int b)
{
    const int lane = threadIdx.x & 31;
    const i64 nblk = (n + 31) / 32, total = nblk * b;
    pdl_wait_release();
    for (i64 i = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5); i < total;
         i += (i64)gridDim.x * WARPS) {
        const i64 row = i / nblk, col = (i % nblk) * 32 + lane;
        const float v = col < n ? x[row * n + col] : 0.0f;
        q8_1_quantize_warp(v, lane, y + i * Q8_1_BYTES);
    }
}

#endif
