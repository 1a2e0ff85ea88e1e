#!/usr/bin/env bash
# device-probe.sh — the standalone probes on the lent GPU:
#   pattern  bench/pattern_probe.cu (bench/results/mmvq-notes.md, "Access pattern"): how fast
#            the direct mmvq's loads go with no arithmetic, against a flat read of the same
#            bytes and the copy rate;
#   launch   bench/launch_probe.cu (issue 6's host-time target): the host cost of each call of
#            a tick's submission (event records, cudaGraphLaunch of chains of 1..512 kernels
#            with and without PDL edges, memcpy nodes, timing events inside or around the
#            graph); bench/results/launch-probe-2026-12-04.txt.
#   hmma     bench/hmma_probe.cu (mmvq-notes, "A tensor-core mat-vec, probed"): f16-dequant
#            + mma.sync mat-vec on the 9b's shapes at B = 1..16 (speed, batch invariance by
#            memcmp, accuracy), then the engine's mmvq on the same shapes in the same call
#            (memra-gpu-tests' bandwidth table, MEMRA_GPU_BENCH_ONLY=1; .carry/cudabackend
#            carried too). HMMA_ARGS=--quick leaves out the LM head.
#   gdn      bench/gdn_probe.cu (mmvq-notes, session 25): where one gdn_step launch's time
#            goes, by timestamps at ten marks of the kernel (9b shapes, b = 1..16, after a
#            previous kernel that releases it early as the tick's mmvq does). GDN_ARGS passed on.
#   attn     bench/attn_probe.cu (mmvq-notes, session 27): the same for attn_decode's split and
#            combine kernels (9b shapes, depth 1024 at b = 1..16, b = 1 at 8192 and 32768).
#            ATTN_ARGS passed on.
#   norm     bench/norm_probe.cu (mmvq-notes, session 32): the same for rms_norm_q8 (n 4096,
#            b = 1..16 as the tick launches it). NORM_ARGS passed on.
#
#   bench/device-probe.sh carry            HERE: nvcc the six into .carry/probe/ (CUDA
#                                          runtime linked statically: nothing else to carry)
#   bench/device-probe.sh gdn-build OUT    HERE: gdn_probe alone, into OUT
#   bench/device-probe.sh attn-build OUT   HERE: attn_probe alone, into OUT
#   bench/device-probe.sh norm-build OUT   HERE: norm_probe alone, into OUT
#   bench/device-probe.sh [pattern|launch|hmma|gdn|attn|norm]
#                                          THERE, .carry/probe carried: prints the table
#                                          (default pattern; TICKS=N ticks per launch variant)
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = carry ]; then
  mkdir -p .carry/probe
  nvcc -O3 -arch=sm_90 -std=c++17 -o .carry/probe/pattern-probe bench/pattern_probe.cu
  nvcc -O3 -arch=sm_90 -std=c++17 -o .carry/probe/launch-probe bench/launch_probe.cu
  nvcc -O3 -arch=sm_90 -std=c++17 -I. -o .carry/probe/hmma-probe bench/hmma_probe.cu runtime/quant.c runtime/qtype.c
  bench/device-probe.sh attn-build .carry/probe/attn-probe
  bench/device-probe.sh norm-build .carry/probe/norm-probe
  exec bench/device-probe.sh gdn-build .carry/probe/gdn-probe
fi
if [ "${1:-}" = attn-build ]; then # HERE: attn_probe alone into $2 (carry, test.sh)
  [ $# -eq 2 ] || { echo "usage: bench/device-probe.sh attn-build OUT" >&2; exit 2; }
  exec nvcc -O3 -arch=sm_90 -std=c++17 --fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
    -I. -Iinclude -Iruntime -Ikernels -o "$2" bench/attn_probe.cu kernels/cuda_common.cu
fi
if [ "${1:-}" = norm-build ]; then # HERE: norm_probe alone into $2 (carry, test.sh)
  [ $# -eq 2 ] || { echo "usage: bench/device-probe.sh norm-build OUT" >&2; exit 2; }
  exec nvcc -O3 -arch=sm_90 -std=c++17 --fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
    -I. -Iinclude -Iruntime -Ikernels -o "$2" bench/norm_probe.cu kernels/cuda_common.cu
fi
if [ "${1:-}" = gdn-build ]; then # HERE: gdn_probe alone into $2 (variant-carry.sh, test.sh)
  [ $# -eq 2 ] || { echo "usage: bench/device-probe.sh gdn-build OUT" >&2; exit 2; }
  # the kernels' exact-arithmetic flags (cmake/cudakernels.cmake): the probe times their code
  exec nvcc -O3 -arch=sm_90 -std=c++17 --fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
    -I. -Iinclude -Iruntime -Ikernels -o "$2" bench/gdn_probe.cu kernels/cuda_common.cu
fi
case "${1:-pattern}" in
  pattern) timeout 120 .carry/probe/pattern-probe ;;
  launch) timeout 120 .carry/probe/launch-probe "${TICKS:-400}" ;;
  hmma)
    rc=0
    # shellcheck disable=SC2086 # HMMA_ARGS: a flag or none
    timeout "${HMMA_LIMIT:-240}" .carry/probe/hmma-probe ${HMMA_ARGS:-} || rc=$?
    echo "hmma-probe rc=$rc"
    if [ -x .carry/cudabackend/bin/memra-gpu-tests ]; then
      echo "== the engine's mmvq (q8_1 activations), same shapes, same machine"
      LD_LIBRARY_PATH=$PWD/.carry/cudabackend/lib:/usr/local/cuda/lib64 \
        XDG_CACHE_HOME=/tmp/memra-cache MEMRA_GPU_BENCH_ONLY=1 CK_RUN_CASE=gpu CK_FORK=no \
        timeout "${BASE_LIMIT:-150}" .carry/cudabackend/bin/memra-gpu-tests 2>&1 | tail -n 60
    fi
    exit "$rc"
    ;;
  gdn)
    # shellcheck disable=SC2086 # GDN_ARGS: flags or none
    timeout "${GDN_LIMIT:-120}" .carry/probe/gdn-probe ${GDN_ARGS:-}
    ;;
  attn)
    # shellcheck disable=SC2086 # ATTN_ARGS: flags or none
    timeout "${ATTN_LIMIT:-120}" .carry/probe/attn-probe ${ATTN_ARGS:-}
    ;;
  norm)
    # shellcheck disable=SC2086 # NORM_ARGS: flags or none
    timeout "${NORM_LIMIT:-60}" .carry/probe/norm-probe ${NORM_ARGS:-}
    ;;
  *) echo "usage: bench/device-probe.sh [carry|gdn-build OUT|attn-build OUT|norm-build OUT|pattern|launch|hmma|gdn|attn|norm]" >&2; exit 2 ;;
esac
