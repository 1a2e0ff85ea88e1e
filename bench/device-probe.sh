#!/usr/bin/env bash
# device-probe.sh — bench/pattern_probe.cu on the lent GPU (bench/results/mmvq-notes.md,
# "Access pattern"): how fast the direct mmvq's loads go with no arithmetic, against a flat
# read of the same bytes and the copy rate.
#
#   bench/device-probe.sh carry   HERE: nvcc it into .carry/probe/ (CUDA runtime linked
#                                 statically: nothing else to carry)
#   bench/device-probe.sh         THERE, .carry/probe carried: prints the table
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = carry ]; then
  mkdir -p .carry/probe
  nvcc -O3 -arch=sm_90 -std=c++17 -o .carry/probe/pattern-probe bench/pattern_probe.cu
  exit 0
fi
timeout 120 .carry/probe/pattern-probe
