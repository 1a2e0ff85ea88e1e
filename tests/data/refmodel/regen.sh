#!/usr/bin/env bash
# regen.sh — regenerate the committed greedy runs of the CPU reference on the forged tiny
# models (tiny.txt, tiny-moe.txt), which tests/test_refmodel.c replays and compares bit for bit
# (ids and the xxHash64 of the last step's logits).
#
# Run it only after an INTENDED numeric change of the reference, the quant formats or the
# forge, and say in the commit why the numbers moved. Needs memra-forge and memra-run built:
#   tests/data/refmodel/regen.sh [BUILD_DIR]          (default: build)
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for preset in tiny tiny-moe; do
  "$b/memra-forge" --preset "$preset" --seed 1 -o "$tmp/$preset.gguf" >/dev/null 2>&1
  {
    echo "# Greedy ids of the CPU reference (memra-run --backend ref) on"
    echo "# memra-forge --preset $preset --seed 1 (default q4_k_m mix, synthetic vocabulary),"
    echo "# and the xxHash64 of the f32 logits of the last step. Written by"
    echo "# tests/data/refmodel/regen.sh; replayed by tests/test_refmodel.c."
    echo "seed: 1"
    "$b/memra-run" --backend ref -m "$tmp/$preset.gguf" --tokens 17,300,5,42 -n 48 \
      --logits-hash 2>/dev/null
  } > "tests/data/refmodel/$preset.txt"
  echo "regen: wrote tests/data/refmodel/$preset.txt"
done
