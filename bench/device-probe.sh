#!/usr/bin/env bash
# device-probe.sh — the standalone probes on the lent GPU:
#   pattern  bench/pattern_probe.cu (bench/results/mmvq-notes.md, "Access pattern"): how fast
#            the direct mmvq's loads go with no arithmetic, against a flat read of the same
#            bytes and the copy rate;
#   launch   bench/launch_probe.cu (issue 6's host-time target): the host cost of each call of
#            a tick's submission (event records, cudaGraphLaunch of chains of 1..512 kernels
#            with and without PDL edges, memcpy nodes, timing events inside or around the
#            graph); bench/results/launch-probe-2026-12-04.txt.
#
#   bench/device-probe.sh carry            HERE: nvcc both into .carry/probe/ (CUDA runtime
#                                          linked statically: nothing else to carry)
#   bench/device-probe.sh [pattern|launch] THERE, .carry/probe carried: prints the table
#                                          (default pattern; TICKS=N ticks per launch variant)
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = carry ]; then
  mkdir -p .carry/probe
  nvcc -O3 -arch=sm_90 -std=c++17 -o .carry/probe/pattern-probe bench/pattern_probe.cu
  nvcc -O3 -arch=sm_90 -std=c++17 -o .carry/probe/launch-probe bench/launch_probe.cu
  exit 0
fi
case "${1:-pattern}" in
  pattern) timeout 120 .carry/probe/pattern-probe ;;
  launch) timeout 120 .carry/probe/launch-probe "${TICKS:-400}" ;;
  *) echo "usage: bench/device-probe.sh [carry|pattern|launch]" >&2; exit 2 ;;
esac
