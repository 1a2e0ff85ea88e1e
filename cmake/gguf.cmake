# gguf: the GGUF v2/v3 reader/writer (runtime/gguf.c), memra-inspect, and the libFuzzer target.
memra_area(gguf SOURCES runtime/gguf.c DEPS memra_base PkgConfig::XXHASH
           TESTS tests/test_gguf.c)
memra_tool(memra-inspect SOURCES tools/memra-inspect.c DEPS memra_gguf memra_quant
           memra_tokenizer)

# libFuzzer target (clang only): CC=clang cmake -S . -B build-fuzz -DMEMRA_FUZZ=ON
# The top-level MEMRA_FUZZ option already compiles everything with fuzzer-no-link + ASan/UBSan.
if(MEMRA_FUZZ)
  add_executable(fuzz_gguf ${MEMRA_ROOT}/fuzz/fuzz_gguf.c)
  target_link_libraries(fuzz_gguf PRIVATE memra_gguf)
  target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer)
endif()
