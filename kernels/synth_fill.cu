/*
 * synth_fill.cu — the CUDA side of the benchmarks' synthetic session history (contract and
 * formula: kernels/synth_fill.h): fills one slot-layout region on the device with the values
 * the CPU backend writes, so a 32K-token context is ready in milliseconds instead of 32K ticks.
 * Not a plan op: memra_cuda_session_fill_synthetic (runtime/backend_cuda.c) calls it outside
 * any graph. Must not: read anything (it only writes dst).
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "synth_fill.h"

namespace {

__global__ void __launch_bounds__(256) synth_fill_kernel(memra_synth_fill_args a, uint64_t n)
{
    /* n items: elements (f32, f16) or whole 34-byte blocks (q8_0, one thread per block, as
     * the CPU loop writes them: d, then qs[0..31]) */
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        if (a.dtype == 0) { /* f32 */
            ((float *)a.dst)[i] = a.amp * memra_synth_value(a.seed, a.region, i);
        } else if (a.dtype == 1) { /* f16 */
            ((u16 *)a.dst)[i] = dev_f32_to_fp16(memra_synth_value(a.seed, a.region, i));
        } else { /* q8_0 block i: elements 32i..32i+31 */
            u8 *blk = (u8 *)a.dst + i * 34;
            blk[0] = (u8)(MEMRA_SYNTH_Q8_D & 0xFF);
            blk[1] = (u8)(MEMRA_SYNTH_Q8_D >> 8);
            for (int k = 0; k < 32; k++) {
                const float v = 127.0f * memra_synth_value(a.seed, a.region, i * 32 + (uint64_t)k);
                blk[2 + k] = (u8)(signed char)__float2int_rn(v);
            }
        }
    }
}

} /* namespace */

extern "C" int memra_synth_fill_cuda(const memra_synth_fill_args *a, cudaStream_t s)
{
    if (!a || !a->dst)
        return cuda_ops_invalid("synth_fill: null args");
    uint64_t n;
    if (a->dtype == 0 && a->bytes % 4 == 0)
        n = a->bytes / 4;
    else if (a->dtype == 1 && a->bytes % 2 == 0)
        n = a->bytes / 2;
    else if (a->dtype == 4 && a->bytes % 34 == 0)
        n = a->bytes / 34; /* blocks */
    else
        return cuda_ops_invalid("synth_fill: dtype is not f32/f16/q8_0 or bytes is not whole elements");
    if (n == 0)
        return MEMRA_OK;
    const uint64_t blocks = (n + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    synth_fill_kernel<<<grid, 256, 0, s>>>(*a, n);
    return cuda_ops_result(cudaGetLastError());
}
