# api: the public C API of include/memra.h (runtime/api.c) — engine, sessions, batched ticks,
# text — over the CPU backend and, where the build has it, the CUDA backend; its CPU test
# suite, and examples/generate.c, the header's worked example as a program (the suite runs it).
set(_api_deps memra_cpu memra_planhost memra_tokenizer memra_gguf memra_base)
if(TARGET memra_cudabackend)
  list(APPEND _api_deps memra_cudabackend)
endif()
memra_area(api SOURCES runtime/api.c DEPS ${_api_deps}
           TESTS tests/test_api.c TEST_DEPS memra_forge memra_vocab_hf memra_refmodel)
target_compile_definitions(memra_api PRIVATE "MEMRA_VERSION_STRING=\"${PROJECT_VERSION}\"")
if(TARGET memra_cudabackend)
  target_compile_definitions(memra_api PRIVATE MEMRA_API_CUDA=1)
endif()
memra_tool(memra-example-generate SOURCES examples/generate.c DEPS memra_api)
# the API on the GPU (test_api_cuda_matches_cpu in the backend's GPU gate binary)
if(TARGET memra-gpu-backend-tests)
  target_link_libraries(memra-gpu-backend-tests PRIVATE memra_api)
endif()
# serve: memra-serve's OpenAI-compatible server (tools/serve.c, library memra_serve: the CLI and
# the tests start it in-process) over the public API; libmicrohttpd and jansson.
memra_area(serve SOURCES tools/serve.c
           DEPS memra_api PkgConfig::JANSSON PkgConfig::MHD Threads::Threads
           TESTS tests/test_serve.c TEST_DEPS memra_forge)
target_include_directories(memra_serve PUBLIC ${MEMRA_ROOT}/tools)
memra_tool(memra-serve SOURCES tools/memra-serve.c DEPS memra_serve)
