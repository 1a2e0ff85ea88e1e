/*
 * cuda_common.cuh — what the nvcc-compiled op kernels (kernels/<op>.cu) share: the engine
 * q8_1 warp quantizer (nvrtc_templates/quantize_q8_1.cuh, so every producer emits the bytes
 * of memra_quantize_q8_1), the scalar functions of kernels/ref/ref_common.h written with the
 * same operations, fixed-order block reductions, and the host-side launch and error helpers.
 *
 * Must not: use fast-math intrinsics (__expf, __fdividef, rsqrtf) or FMA contraction where
 * the comment of a function names the CPU operation sequence it reproduces. The files are
 * compiled with --fmad=false -prec-div=true -prec-sqrt=true -ftz=false (cudakernels.cmake);
 * a kernel that wants a fused multiply-add writes fmaf() explicitly, which is just as
 * reproducible (same code, same bits) and documented where used.
 * Invariants: every reduction here has an order fixed by blockDim only; the butterfly
 * (xor) reductions leave the same bits in every lane because a + b == b + a exactly.
 */
#ifndef MEMRA_KERNEL_CUDA_COMMON_CUH
#define MEMRA_KERNEL_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "memra.h"
#include "nvrtc_templates/quantize_q8_1.cuh"

#define FULL_MASK 0xffffffffu

/* ------------------------------- scalar functions ------------------------------------ */
/* Transcendentals: kernels/exact_math.h only (memra_x_sigmoidf, ...), never CUDA's expf. */

/* fp16 -> fp32 exactly as runtime/quant.c (NaN payloads kept): the magnitude bits read as
 * 2^-112 times the value, and the multiply by 2^112 is exact. */
static __device__ __forceinline__ float dev_fp16_to_f32(u32 h)
{
    const u32 mag = (h & 0x7FFFu) << 13, sign = (h & 0x8000u) << 16;
    if ((h & 0x7C00u) == 0x7C00u)
        return __uint_as_float(sign | mag | 0x7F800000u);
    return __uint_as_float(sign | __float_as_uint(__fmul_rn(__uint_as_float(mag), 0x1p112f)));
}

/* fp32 -> fp16 RN-even without flush (memra_f32_to_fp16): NaN becomes sign | 0x7E00. */
static __device__ __forceinline__ u16 dev_f32_to_fp16(float f)
{
    if (f != f)
        return (u16)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7E00u);
    return f32_to_f16_rn(f);
}

/* A hint that pulls [p, p + bytes) into L2 (cp.async.bulk.prefetch.L2, sm_90): p 16-byte
 * aligned, bytes a non-zero multiple of 16. Fire and forget: nothing waits for it, and like
 * prefetch_l2 it is safe anywhere. */
static __device__ __forceinline__ void prefetch_l2_bulk(const void *p, unsigned bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)),
                 "r"(bytes)
                 : "memory");
}

/* A hint that pulls the global line holding p into L2. Safe anywhere, before the PDL wait
 * too: L2 is the point of coherence, so a later load can never see stale data through it. */
static __device__ __forceinline__ void prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

/* ------------------------------- fixed-order reductions ------------------------------ */

static __device__ __forceinline__ double warp_sum_f64(double v)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_sum_f32(float v)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

static __device__ __forceinline__ float warp_max_f32(float v)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

static __device__ __forceinline__ double warp_sum(double v)
{
    return warp_sum_f64(v);
}
static __device__ __forceinline__ float warp_sum(float v)
{
    return warp_sum_f32(v);
}

/* Sum over the block: warp butterflies, then a butterfly over the per-warp values in warp
 * order. Every warp forms that last butterfly itself from the same values, so every thread
 * returns the same bits (a + b == b + a exactly) without a second barrier and broadcast.
 * red: >= 32 values of shared memory. Called by all threads of the block. This form leaves
 * red busy (one barrier in all): for a red that is never written again in the kernel. */
template <typename T> static __device__ T block_sum_last(T v, T *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : (T)0);
}

/* The same sum, red free again when it returns (two barriers). */
template <typename T> static __device__ T block_sum(T v, T *red)
{
    const T r = block_sum_last(v, red);
    __syncthreads(); /* red may be written again */
    return r;
}

static __device__ double block_sum_f64_last(double v, double *red)
{
    return block_sum_last(v, red);
}
static __device__ double block_sum_f64(double v, double *red)
{
    return block_sum(v, red);
}
static __device__ float block_sum_f32(float v, float *red)
{
    return block_sum(v, red);
}

/* fmaxf over the block (order-free: fmaxf is commutative and associative on non-NaN). */
static __device__ float block_max_f32(float v, float *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max_f32(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? red[lane] : -INFINITY;
        w = warp_max_f32(w);
        if (lane == 0)
            red[32] = w;
    }
    __syncthreads();
    const float r = red[32];
    __syncthreads();
    return r;
}

/* -------------------------------------- host ----------------------------------------- */

/* Records the reason of an entry's failure (thread-local; memra_cuda_ops_error()). */
void memra_cuda_ops_set_error(const char *why);

/* Multiprocessors of the current device (cached per ordinal; 132 if the query fails): for
 * grid sizes, never for an order. */
int memra_cuda_sm_count();

/* MEMRA_ERR_INVALID_ARG with the check's reason. */
static inline int cuda_ops_invalid(const char *why)
{
    memra_cuda_ops_set_error(why);
    return MEMRA_ERR_INVALID_ARG;
}

/* MEMRA_OK, or MEMRA_ERR_CUDA with the CUDA error string. */
static inline int cuda_ops_result(cudaError_t e)
{
    if (e == cudaSuccess)
        return MEMRA_OK;
    memra_cuda_ops_set_error(cudaGetErrorString(e));
    return MEMRA_ERR_CUDA;
}

/* Launches kernel k with programmatic stream serialisation (the kernels wait with
 * griddepcontrol.wait before reading their inputs) and, when cluster_x > 1, clusters of
 * cluster_x CTAs along x. Capturable into a graph. */
template <typename... KArgs, typename... Args>
static cudaError_t cuda_ops_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t s, unsigned cluster_x, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    n++;
    if (cluster_x > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster_x;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        n++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    return cudaLaunchKernelEx(&cfg, k, args...);
}

static inline unsigned cdiv_u(uint64_t a, uint64_t b) { return (unsigned)((a + b - 1) / b); }

#endif
