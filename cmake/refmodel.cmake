# refmodel: the Qwen3.5 model description shared by every backend (memra_qwen35: hparams +
# checked tensor binding) and the CPU reference forward pass (memra_refmodel), the oracle the
# CPU and CUDA backends are compared against. Tool: memra-run.
memra_area(qwen35 SOURCES runtime/qwen35.c DEPS memra_gguf memra_quant memra_base)
memra_area(refmodel SOURCES runtime/refmodel.c DEPS memra_qwen35 memra_ops Threads::Threads
           TESTS tests/test_refmodel.c TEST_DEPS memra_forge PkgConfig::XXHASH)
memra_tool(memra-run SOURCES tools/memra-run.c DEPS memra_refmodel PkgConfig::XXHASH)
# bench/act_eval.c: the accuracy of activation formats on a whole model (refmodel act_sim)
memra_tool(memra-act-eval SOURCES bench/act_eval.c DEPS memra_refmodel m)
