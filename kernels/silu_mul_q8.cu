/*
 * silu_mul_q8.cu — CUDA silu_mul_q8 (contract: kernels/silu_mul_q8.h):
 * y_s = q8_1(memra_x_siluf(g) * u) for every slot in use, bit-identical to the reference.
 *
 * One warp per 32-value q8_1 block; the grid covers slot 0's blocks, then slot 1's, so one
 * launch serves the routed experts and the shared expert. Each value is the reference's
 * sequence (kernels/exact_math.h silu, one f32 product), each block the shared warp quantizer.
 * Must not: let a block depend on anything but its own 32 g and u values; use CUDA's expf.
 *
 * Also the test entry memra_exact_math_eval_cuda (every exact_math.h function, elementwise),
 * which tests/gpu/test_ops_gpu.c compares with memcmp to the same functions on the CPU.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "exact_math.h"

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
    pdl_wait_release();
    if (k < g.nblk) {
        const int si = k < g.nblk0 ? 0 : 1;
        const memra_silu_mul_q8_slot &sl = a.slot[si];
        const long long kb = si == 0 ? k : k - g.nblk0; /* block within the slot */
        const size_t j = (size_t)kb * 32 + (size_t)lane; /* rows are n wide, n % 32 == 0 */
        const float gv = sl.g[j], uv = sl.u[j];
        q8_1_quantize_warp(__fmul_rn(memra_x_siluf(gv), uv), lane,
                           (u8 *)sl.y_q + (size_t)kb * Q8_1_BYTES);
    }
}

/* out[i] = f(x[i]) for the exact_math.h function fn (memra_exact_math_eval_cuda). */
__global__ void exact_math_eval_kernel(int fn, const double *x, const double *y, double *out,
                                       long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const double v = x[i];
    double r = 0.0, sn, cs;
    switch (fn) {
    case MEMRA_XM_EXP: r = memra_x_exp(v); break;
    case MEMRA_XM_LOG: r = memra_x_log(v); break;
    case MEMRA_XM_LOG1P: r = memra_x_log1p(v); break;
    case MEMRA_XM_POW: r = memra_x_pow(v, y[i]); break;
    case MEMRA_XM_SIN: memra_x_sincos(v, &sn, &cs); r = sn; break;
    case MEMRA_XM_COS: memra_x_sincos(v, &sn, &cs); r = cs; break;
    case MEMRA_XM_DIV_N:
        r = memra_x_div_n(v, (int)y[i]);
        break;
    case MEMRA_XM_EXPF: r = (double)memra_x_expf((float)v); break;
    case MEMRA_XM_SIGMOIDF: r = (double)memra_x_sigmoidf((float)v); break;
    case MEMRA_XM_SILUF: r = (double)memra_x_siluf((float)v); break;
    case MEMRA_XM_SOFTPLUSF:
        r = (double)memra_x_softplusf((float)v);
        break;
    default:
        r = (double)memra_x_expf_seq((float)v);
        break;
    }
    out[i] = r;
}

} /* namespace */

extern "C" int memra_exact_math_eval_cuda(int32_t fn, const double *x, const double *y, double *out,
                                          int64_t n)
{
    if (fn < 0 || fn >= MEMRA_XM_COUNT || n < 0 || n > (1ll << 30) || !x || !out ||
        (fn == MEMRA_XM_POW && !y))
        return cuda_ops_invalid("exact_math_eval: bad function, size or pointer");
    if (n == 0)
        return MEMRA_OK;
    exact_math_eval_kernel<<<cdiv_u((uint64_t)n, 256), 256>>>(fn, x, y, out, (long long)n);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    return cuda_ops_result(e);
}

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
