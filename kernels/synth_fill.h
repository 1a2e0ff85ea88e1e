/*
 * synth_fill.h — synthetic session history for benchmarks (memra-bench --prefill synthetic):
 * the value of element i of slot-layout region r under a seed, shared by the CPU backend
 * (runtime/backend_cpu.c) and the CUDA fill kernel (kernels/synth_fill.cu), so both put a
 * session into the same state bytes.
 *
 *   h = splitmix64_mix(seed + (r + 1) * 0x9E3779B97F4A7C15 + i * 0xD1B54A32D192ED03)
 *   v = (h >> 40) * 2^-24 * 2 - 1                      (uniform in [-1, 1), exact in f32)
 *   f32 regions: amp * v (amp = 1/4 for the delta-rule state, 1 otherwise);
 *   f16: fp16_RN(v);  q8_0 block j (elements 32j..32j+31): d = MEMRA_SYNTH_Q8_D,
 *   qs[k] = (int8) round-half-even(127 v).
 * Must not: depend on the slot, the backend or the device (same seed, same bytes).
 */
#ifndef MEMRA_KERNEL_SYNTH_FILL_H
#define MEMRA_KERNEL_SYNTH_FILL_H

#include <stdint.h>

#ifdef __CUDACC__
#define MEMRA_SF static __host__ __device__ __forceinline__
#else
#define MEMRA_SF static inline
#endif

MEMRA_SF uint64_t memra_synth_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Element i of region r, in [-1, 1). */
MEMRA_SF float memra_synth_value(uint64_t seed, uint32_t r, uint64_t i)
{
    const uint64_t h = memra_synth_mix(seed + (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull +
                                       i * 0xD1B54A32D192ED03ull);
    return (float)(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

#undef MEMRA_SF

/* The q8_0 scale of every synthetic block: fp16_RN(1/127) = 0x2008, as bits. A unit test
 * checks it against memra_f32_to_fp16(1.0f / 127.0f). The device does not convert the
 * constant itself: on the H200 (CUDA 13.0) the fill kernel's cvt.rn.f16.f32 of the folded
 * constant 1/127 stored 0x2000, while the same instruction on run-time values matches the CPU
 * (tests/gpu/test_ops_gpu.c synth_fill, 2026-12-03). */
#define MEMRA_SYNTH_Q8_D 0x2008u

/* One region fill: the first `bytes` of dst (bytes: a multiple of the element or block size). */
typedef struct memra_synth_fill_args {
    void *dst;      /* device address (CUDA) or host address (CPU) */
    uint64_t bytes; /* f32: 4 per element, f16: 2, q8_0: 34 per block of 32 */
    uint64_t seed;
    uint32_t region; /* slot-layout region index r */
    int32_t dtype;   /* MEMRA_DT_F32 | MEMRA_DT_F16 | MEMRA_DT_Q8_0 (runtime/ops.h: 0, 1, 4) */
    float amp;       /* f32 regions: the multiplier of v */
    int32_t pad_;
} memra_synth_fill_args;

#ifdef __cplusplus
extern "C" {
#endif
/* CPU fill (kernels/ref/synth_fill.c; the CUDA one is memra_synth_fill_cuda, cuda_ops.h):
 * MEMRA_OK, or MEMRA_ERR_INVALID_ARG for a null dst, another dtype, or bytes that are not
 * whole elements (q8_0: whole 34-byte blocks). */
int memra_synth_fill_ref(const memra_synth_fill_args *a);
#ifdef __cplusplus
}
#endif

#endif
