/*
 * cuda_common.cu — the thread-local failure reason of the CUDA op entries
 * (memra_cuda_ops_error, kernels/cuda_ops.h). Host code only.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"

static thread_local const char *g_cuda_ops_error = "";

void memra_cuda_ops_set_error(const char *why) { g_cuda_ops_error = why ? why : ""; }

extern "C" const char *memra_cuda_ops_error(void) { return g_cuda_ops_error; }
