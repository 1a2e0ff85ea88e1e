# cudabackend: the CUDA backend (runtime/backend_cuda.c: weights upload, device arenas and slot
# pool, launch binding, ticks; runtime/graph.c: graph capture/replay), its GPU gate binary
# memra-gpu-backend-tests (tests/gpu/test_backend_gpu.c, run with CK_FORK=no; SKIPs without a
# GPU), and `--backend cuda` in memra-run.
#
# Links the CUDA runtime statically (as the nvcc-compiled kernels do: one runtime per
# process); libcuda.so.1 is only ever dlopened (runtime/cuda_util.c, and by the static
# runtime itself), so every binary still starts, and the gates SKIP, on machines without a GPU.
if(NOT MEMRA_HAVE_CUDA OR NOT TARGET memra_nvrtc OR NOT TARGET memra_cpu)
  return()
endif()
if(NOT TARGET memra_cudakernels)
  message(STATUS "cudabackend: no memra_cudakernels target (kernels/*.cu) yet; skipped")
  return()
endif()

memra_area(cudabackend
  SOURCES runtime/backend_cuda.c runtime/graph.c
  DEPS memra_cudakernels memra_nvrtc memra_cpu memra_plan memra_quant memra_base
       CUDA::cudart_static Threads::Threads ${CMAKE_DL_LIBS})

add_executable(memra-gpu-backend-tests ${MEMRA_ROOT}/tests/runner.c ${MEMRA_ROOT}/tests/test_util.c
               ${MEMRA_ROOT}/tests/gpu/test_backend_gpu.c)
target_compile_definitions(memra-gpu-backend-tests PRIVATE "MEMRA_SUITES=X(backend_gpu)"
                           "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")
target_include_directories(memra-gpu-backend-tests PRIVATE ${MEMRA_ROOT}/tests)
target_link_libraries(memra-gpu-backend-tests PRIVATE memra_cudabackend memra_planhost memra_forge
                      memra_refmodel PkgConfig::XXHASH PkgConfig::CHECK Threads::Threads)
add_test(NAME memra-gpu-backend-tests COMMAND memra-gpu-backend-tests
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(memra-gpu-backend-tests PROPERTIES ENVIRONMENT "CK_FORK=no")

# memra-run --backend cuda (tools/memra-run.c compiles the backend row under MEMRA_RUN_CUDA).
if(TARGET memra-run)
  target_link_libraries(memra-run PRIVATE memra_cudabackend)
  target_compile_definitions(memra-run PRIVATE MEMRA_RUN_CUDA=1)
endif()
