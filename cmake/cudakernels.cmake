# cudakernels: the nvcc-compiled CUDA ops (kernels/<op>.cu; entry points in
# kernels/cuda_ops.h) and their GPU test binary memra-gpu-ops-tests (tests/gpu/test_ops_gpu.c:
# every op against its CPU reference; every test SKIPs with the reason without a GPU).
#
# The kernels use the CUDA runtime, linked statically (CUDA::cudart_static): it loads
# libcuda.so.1 only when first called, so the binaries start and the tests SKIP on machines
# without a driver, like the rest of memra.
if(NOT MEMRA_HAVE_CUDA)
  return()
endif()

memra_area(cudakernels
  SOURCES kernels/cuda_common.cu kernels/embed.cu kernels/rms_norm_q8.cu kernels/attn_prep.cu
          kernels/attn_decode.cu kernels/gdn_step.cu kernels/silu_mul_q8.cu kernels/moe_route.cu
          kernels/sample.cu kernels/synth_fill.cu kernels/mmvq_moe.cu kernels/moe_down.cu
  DEPS memra_base CUDA::cudart_static)

# Exact float semantics for the kernels: no FMA contraction (a kernel that wants an FMA writes
# fmaf), IEEE division and square root, no flush of subnormals, no fast math. These are what
# make the q8_1 bytes equal to memra_quantize_q8_1 of the same floats. -lineinfo keeps
# source lines for profilers without changing the code.
target_compile_options(memra_cudakernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false -prec-div=true -prec-sqrt=true -ftz=false -lineinfo
  -Xptxas=-warn-spills --Werror=all-warnings -Xcompiler=-Wall,-Wextra>)
# Directory-wide options without a language guard (the sanitizer flags of MEMRA_SANITIZE /
# MEMRA_FUZZ) are host-compiler flags nvcc does not take: keep them for the other languages.
get_target_property(memra_ck_opts memra_cudakernels COMPILE_OPTIONS)
set(memra_ck_fixed "")
foreach(opt ${memra_ck_opts})
  if(opt MATCHES "^-f(sanitize|no-sanitize|no-omit)")
    list(APPEND memra_ck_fixed "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
  else()
    list(APPEND memra_ck_fixed "${opt}")
  endif()
endforeach()
set_property(TARGET memra_cudakernels PROPERTY COMPILE_OPTIONS "${memra_ck_fixed}")

# GPU tests: their own binary (the NVRTC binary memra-gpu-tests uses the driver API only),
# run with CK_FORK=no (CUDA does not survive fork).
if(TARGET memra_ops)
  add_executable(memra-gpu-ops-tests ${MEMRA_ROOT}/tests/runner.c ${MEMRA_ROOT}/tests/test_util.c
                 ${MEMRA_ROOT}/tests/gpu/test_ops_gpu.c ${MEMRA_ROOT}/tests/gpu/test_moe_gpu.c
                 ${MEMRA_ROOT}/tests/gpu/gpu_ops_util.c)
  target_compile_definitions(memra-gpu-ops-tests PRIVATE "MEMRA_SUITES=X(ops_gpu)X(moe_gpu)"
                             "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")
  target_include_directories(memra-gpu-ops-tests PRIVATE ${MEMRA_ROOT}/tests)
  target_link_libraries(memra-gpu-ops-tests PRIVATE memra_cudakernels memra_ops memra_quant
                        memra_base PkgConfig::CHECK Threads::Threads)
  add_test(NAME memra-gpu-ops-tests COMMAND memra-gpu-ops-tests WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(memra-gpu-ops-tests PROPERTIES ENVIRONMENT "CK_FORK=no")
endif()
