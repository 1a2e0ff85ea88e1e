# quant: GGUF block formats (dequantize, reference quantizers), the engine q8_1 activation
# quantizer and the weight-block × q8_1 dot products the GPU mat-vec kernels reproduce.
memra_area(quant SOURCES runtime/quant.c DEPS memra_base TESTS tests/test_quant.c)
# The CPU reference model runs these dot products over whole checkpoints. -O3 lets GCC
# vectorize the unpack and int8 dot loops (measured with callgrind, 4096×64 rows: Q4_K 11.0
# -> 5.0, Q5_K 19.3 -> 5.6, Q6_K 12.4 -> 6.2 instructions per weight). It changes no result:
# without -ffast-math the compiler may not reassociate float operations, integer sums are
# exact, and tests/test_quant.c checks every dot and dequantization bit for bit.
set_source_files_properties(runtime/quant.c PROPERTIES COMPILE_OPTIONS "$<$<NOT:$<CONFIG:Debug>>:-O3>")
