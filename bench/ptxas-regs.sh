#!/usr/bin/env bash
# ptxas-regs.sh — registers, spills and shared memory of mmvq specializations, compiled here
# (no GPU) by nvcc with the NVRTC options of runtime/nvrtc.c, for A/B of template changes.
#
#   bench/ptxas-regs.sh [B:QT0[,QT1..]] ...     e.g. bench/ptxas-regs.sh 16:12 16:12,14 8:12
# QT numbers are GGUF type ids (q4_K 12, q5_K 13, q6_K 14). Default: the 9b tick's mixes.
set -eu
cd "$(dirname "$0")/.."
tpl=${TPL:-nvrtc_templates} # TPL: another templates folder (e.g. .carry/ab/NAME)
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(1:12 1:12,14 2:12 2:12,14 4:12 4:12,14 8:12 8:12,14 16:12 16:12,14 16:14)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sp in "${specs[@]}"; do
  b=${sp%%:*}
  IFS=, read -r -a q <<<"${sp#*:}"
  n=${#q[@]}
  while [ ${#q[@]} -lt 4 ]; do q+=(-1); done
  cat >"$tmp/k.cu" <<CU
#include "mmvq.cuh"
extern "C" __global__ void __launch_bounds__(32 * MEMRA_MMVQ_WARPS, MEMRA_MMVQ_MIN_BLOCKS($b, $n))
memra_mmvq(const __grid_constant__ memra_mmvq_params p) { mmvq_main<$b, ${q[0]}, ${q[1]}, ${q[2]}, ${q[3]}>(p); }
CU
  info=$(nvcc -std=c++17 -arch=sm_90 -cubin -fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
    -I"$tpl" -Ikernels -Xptxas -v -o "$tmp/k.cubin" "$tmp/k.cu" 2>&1 |
    grep -E "Used|spill" | tr '\n' ' ' | sed 's/ptxas info *: //g; s/  */ /g')
  printf '%-12s %s\n' "$sp" "$info"
done
