# memra_area(NAME SOURCES ... DEPS ... TESTS ... TEST_DEPS ...)
#   Declares library memra_<NAME> (static) from SOURCES, linked PUBLIC to DEPS.
#   TESTS: Check test files; each tests/test_<x>.c exports Suite *make_<x>_suite(void).
#   The area gets its own runner test_<NAME> (handy while working on one area) and its
#   suites join the combined runner memra-tests, which is what CI runs.
function(memra_area name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;TESTS;TEST_DEPS" ${ARGN})
  if(A_SOURCES)
    add_library(memra_${name} STATIC ${A_SOURCES})
    target_include_directories(memra_${name} PUBLIC ${MEMRA_ROOT}/include ${MEMRA_ROOT}/runtime
                               ${MEMRA_ROOT}/kernels ${MEMRA_ROOT})
    target_link_libraries(memra_${name} PUBLIC ${A_DEPS} m)
    set_property(GLOBAL APPEND PROPERTY MEMRA_LIBS memra_${name})
  endif()
  if(A_TESTS)
    set(suites "")
    foreach(t ${A_TESTS})
      get_filename_component(base ${t} NAME_WE)
      string(REGEX REPLACE "^test_" "" s ${base})
      string(APPEND suites "X(${s})")
      set_property(GLOBAL APPEND PROPERTY MEMRA_TEST_SOURCES ${MEMRA_ROOT}/${t})
      set_property(GLOBAL APPEND PROPERTY MEMRA_TEST_SUITES "X(${s})")
    endforeach()
    set(deps ${A_TEST_DEPS})
    if(A_SOURCES)
      list(APPEND deps memra_${name})
    endif()
    set_property(GLOBAL APPEND PROPERTY MEMRA_TEST_DEPS ${deps})
    # Per-area runners are built on request (--target test_<area>); `all` builds only the
    # combined memra-tests, so CI compiles each suite once.
    add_executable(test_${name} EXCLUDE_FROM_ALL ${MEMRA_ROOT}/tests/runner.c
                   ${MEMRA_ROOT}/tests/test_util.c ${A_TESTS})
    target_compile_definitions(test_${name} PRIVATE "MEMRA_SUITES=${suites}"
                               "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")
    target_include_directories(test_${name} PRIVATE ${MEMRA_ROOT}/tests)
    target_link_libraries(test_${name} PRIVATE ${deps} PkgConfig::CHECK Threads::Threads)
  endif()
endfunction()

# A tool (host program) linked to area libraries.
function(memra_tool name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
endfunction()

function(memra_finish_tests)
  get_property(srcs GLOBAL PROPERTY MEMRA_TEST_SOURCES)
  get_property(suites GLOBAL PROPERTY MEMRA_TEST_SUITES)
  get_property(deps GLOBAL PROPERTY MEMRA_TEST_DEPS)
  if(NOT srcs)
    return()
  endif()
  list(REMOVE_DUPLICATES deps)
  string(REPLACE ";" "" suites "${suites}")
  add_executable(memra-tests ${MEMRA_ROOT}/tests/runner.c ${MEMRA_ROOT}/tests/test_util.c ${srcs})
  target_compile_definitions(memra-tests PRIVATE "MEMRA_SUITES=${suites}"
                             "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")
  target_include_directories(memra-tests PRIVATE ${MEMRA_ROOT}/tests)
  target_link_libraries(memra-tests PRIVATE ${deps} PkgConfig::CHECK Threads::Threads)
  add_test(NAME memra-tests COMMAND memra-tests WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
endfunction()
