/*
 * silu_mul_q8.cu — CUDA silu_mul_q8 (contract: kernels/silu_mul_q8.h):
 * y_s = q8_1((g * (1 / (1 + expf(-g)))) * u) for every slot in use.
 *
 * One warp per 32-value q8_1 block; the grid covers slot 0's blocks, then slot 1's, so one
 * launch serves the routed experts and the shared expert. Each value is the reference's f32
 * sequence (expf is CUDA's accurate one, within 2 ulp of glibc's), each block the shared warp
 * quantizer. Must not: let a block depend on anything but its own 32 g and u values.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace {

constexpr int kWarps = 8;

struct silu_geom {
    long long nblk0; /* q8_1 blocks of slot 0: b * m0 * n0 / 32 */
    long long nblk;  /* blocks of all slots in use */
};

__global__ void __launch_bounds__(kWarps * 32) silu_mul_q8_kernel(memra_silu_mul_q8_args a, silu_geom g)
{
    const int lane = threadIdx.x & 31;
    const long long k = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
    pdl_wait();
    if (k < g.nblk) {
        const int si = k < g.nblk0 ? 0 : 1;
        const memra_silu_mul_q8_slot &sl = a.slot[si];
        const long long kb = si == 0 ? k : k - g.nblk0; /* block within the slot */
        const size_t j = (size_t)kb * 32 + (size_t)lane; /* rows are n wide, n % 32 == 0 */
        const float gv = sl.g[j], uv = sl.u[j];
        q8_1_quantize_warp(__fmul_rn(dev_silu(gv), uv), lane, (u8 *)sl.y_q + (size_t)kb * Q8_1_BYTES);
    }
    pdl_launch_dependents();
}

} /* namespace */

extern "C" int memra_silu_mul_q8_cuda(const memra_silu_mul_q8_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("silu_mul_q8: null args");
    const char *why = memra_silu_mul_q8_check(a);
    if (why)
        return cuda_ops_invalid(why);
    silu_geom g;
    g.nblk0 = (long long)a->b * a->slot[0].m * (a->slot[0].n / 32);
    g.nblk = g.nblk0;
    if (a->n_slots > 1)
        g.nblk += (long long)a->b * a->slot[1].m * (a->slot[1].n / 32);
    return cuda_ops_result(cuda_ops_launch(silu_mul_q8_kernel, dim3(cdiv_u(g.nblk, kWarps)),
                                           dim3(kWarps * 32), 0, s, 1, *a, g));
}
