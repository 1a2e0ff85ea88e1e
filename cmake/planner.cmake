# planner: the op catalog (runtime/ops.def -> ops.c), the plan loader and validator
# (runtime/plan.c, library memra_plan: what backends link), the Lua 5.4 planner host
# (planner/*.c, library memra_planhost) and its CLI memra-plan, the test suite, and the
# libFuzzer target for the loader (MEMRA_FUZZ=ON with CC=clang).
memra_area(plan SOURCES runtime/ops.c runtime/plan.c
           DEPS memra_gguf memra_quant memra_base PkgConfig::JANSSON PkgConfig::XXHASH)
memra_area(planhost SOURCES planner/lua_host.c planner/lua_model.c planner/plan_write.c
           planner/planner.c planner/precompile.c
           DEPS memra_plan PkgConfig::LUA PkgConfig::JANSSON PkgConfig::XXHASH Threads::Threads)
target_include_directories(memra_planhost PUBLIC ${MEMRA_ROOT}/planner)
# memra-plan --precompile compiles through memra_nvrtc (cmake/nvrtc.cmake), which exists only
# with CUDA; without it memra_planner_precompile() reports MEMRA_ERR_UNSUPPORTED. The target
# is named before nvrtc.cmake defines it: CMake resolves link names at generate time.
if(MEMRA_HAVE_CUDA)
  target_link_libraries(memra_planhost PUBLIC memra_nvrtc)
  target_compile_definitions(memra_planhost PUBLIC MEMRA_HAVE_NVRTC=1) # tests read it too
endif()
# Where memra-plan finds plans/<arch>.lua by default (--plans DIR overrides).
target_compile_definitions(memra_planhost PRIVATE "MEMRA_PLANS_DIR=\"${MEMRA_ROOT}/plans\"")
memra_tool(memra-plan SOURCES planner/memra-plan.c DEPS memra_planhost)
memra_area(planner TESTS tests/test_plan.c TEST_DEPS memra_planhost memra_forge)

if(MEMRA_FUZZ)
  add_executable(fuzz_plan fuzz/fuzz_plan.c)
  target_link_libraries(fuzz_plan PRIVATE memra_plan memra_forge)
  target_include_directories(fuzz_plan PRIVATE ${MEMRA_ROOT}/tests)
  target_compile_definitions(fuzz_plan PRIVATE "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")
  target_link_options(fuzz_plan PRIVATE -fsanitize=fuzzer)
endif()
