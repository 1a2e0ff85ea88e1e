# cuda.cmake — the ops and the backends that execute plans.
#   ops: the device-agnostic args structs of every op (kernels/<op>.h) and their CPU
#        references (kernels/ref/<op>.c, the oracle; library memra_ops).
#   cpu: the CPU backend (runtime/backend_cpu.c) with the pieces it shares with the CUDA
#        backend: the slot pool (runtime/slots.c), the tick block (runtime/tick.c) and
#        launch binding (runtime/bind.c).
# The CUDA kernels and backend join this file later.
memra_area(ops SOURCES kernels/ref/ref_common.c kernels/ref/embed.c kernels/ref/rms_norm_q8.c
           kernels/ref/mmvq.c kernels/ref/attn_prep.c kernels/ref/attn_decode.c
           kernels/ref/gdn_step.c kernels/ref/silu_mul_q8.c kernels/ref/moe_route.c
           kernels/ref/mmvq_moe.c kernels/ref/moe_down.c kernels/ref/sample.c
           kernels/ref/synth_fill.c
           DEPS memra_quant memra_base
           TESTS tests/test_ops.c)
memra_area(cpu SOURCES runtime/slots.c runtime/tick.c runtime/bind.c runtime/backend_cpu.c
           runtime/l2_side.c
           DEPS memra_ops memra_plan memra_quant memra_base
           TESTS tests/test_backend_cpu.c
           TEST_DEPS memra_planhost memra_forge memra_refmodel)
# memra-run (declared by refmodel.cmake) gets the CPU backend (--backend cpu) and the planner
# library, to generate plans in-process when no --plans DIR is given.
if(TARGET memra-run)
  target_link_libraries(memra-run PRIVATE memra_cpu memra_planhost)
endif()
