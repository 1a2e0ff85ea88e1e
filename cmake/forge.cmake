# forge: the model forge (tests/forge.c + the synthetic vocabulary tests/forge_vocab.c), which
# writes real qwen35 / qwen35moe GGUF checkpoints with seeded random weights for tests,
# benches and tools; the CLI memra-forge; the test suite (which also runs the independent
# gguf-py check, tests/py/check_forge.py).
memra_area(forge SOURCES tests/forge.c tests/forge_vocab.c
           DEPS memra_gguf memra_quant memra_base Threads::Threads
           TESTS tests/test_forge.c)
# Consumers (tools, other areas' tests) include "forge.h".
target_include_directories(memra_forge PUBLIC ${MEMRA_ROOT}/tests)
memra_tool(memra-forge SOURCES tools/memra-forge.c DEPS memra_forge memra_vocab_hf)
