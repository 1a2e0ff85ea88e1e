/*
 * ceiling.h — the device copy-bandwidth probe (bench/ceiling.cu, compiled with nvcc when the
 * build has CUDA); C and C++ see the same prototype.
 */
#ifndef MEMRA_BENCH_CEILING_H
#define MEMRA_BENCH_CEILING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "err.h"

/* Device-to-device copy with 16-byte loads and stores (the probe of
 * shared/tools/tick-ceiling.cu): bytes/2 read and bytes/2 written per launch, 3 untimed
 * launches, then `reps` launches each timed with its own events. *best_gbs / *median_gbs:
 * bytes read + written per second (GB/s, 1e9). Allocates and frees its buffers. Codes:
 * UNSUPPORTED (no such device), CUDA, INVALID_ARG. */
int memra_bench_copy_bw_cuda(int device, uint64_t bytes, uint32_t reps, double *best_gbs,
                             double *median_gbs, char *device_name, size_t name_n, memra_err *err);

#ifdef __cplusplus
}
#endif

#endif
