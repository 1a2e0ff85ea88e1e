# bench: memra-bench, the decode-tick benchmark (bench/memra-bench.c over library memra_bench:
# runner bench/bench.c, backend seam bench/bench_backend.c, the --phases plan rewriter
# bench/plan_variant.c, report + JSON + gnuplot script bench/report.c), and its CPU-mode
# machinery test tests/test_bench.c (part of memra-tests).
#
# With the CUDA backend in the build, memra_bench also gets the CUDA row of the backend seam
# (MEMRA_BENCH_WITH_CUDA) and the device copy-bandwidth probe bench/ceiling.cu (nvcc); without it
# the same tool measures the CPU backend only.
if(NOT TARGET memra_cpu OR NOT TARGET memra_planhost)
  message(STATUS "bench: needs memra_cpu and memra_planhost; skipped")
  return()
endif()

set(memra_bench_sources bench/bench.c bench/bench_backend.c bench/plan_variant.c bench/report.c)
set(memra_bench_deps memra_cpu memra_planhost memra_plan memra_gguf memra_base PkgConfig::JANSSON
    PkgConfig::XXHASH)
if(TARGET memra_cudabackend)
  list(APPEND memra_bench_sources bench/ceiling.cu)
  list(APPEND memra_bench_deps memra_cudabackend)
endif()

set(memra_bench_tests "")
if(EXISTS ${MEMRA_ROOT}/tests/test_bench.c)
  set(memra_bench_tests TESTS tests/test_bench.c TEST_DEPS memra_forge)
endif()
memra_area(bench SOURCES ${memra_bench_sources} DEPS ${memra_bench_deps} ${memra_bench_tests})
target_include_directories(memra_bench PUBLIC ${MEMRA_ROOT}/bench)
if(TARGET memra_cudabackend)
  target_compile_definitions(memra_bench PUBLIC MEMRA_BENCH_WITH_CUDA=1)
endif()
memra_tool(memra-bench SOURCES bench/memra-bench.c DEPS memra_bench)
