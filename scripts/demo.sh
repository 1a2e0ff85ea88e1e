#!/usr/bin/env bash
# demo.sh — the main job on the built-in default model: set everything up, forge the default
# model (the `tiny` qwen35 shapes with the real Qwen3.5 vocabulary, 248k tokens) if it is not
# there yet, plan it, and generate text through the planner and the best backend available:
# cuda when a GPU is present, the CPU plan backend otherwise.
#   scripts/demo.sh [extra memra-run args]     e.g. scripts/demo.sh -p "Hello" -n 64
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=models/default.gguf
mkdir -p models
if [ ! -f "$model" ]; then
  build/memra-forge --preset tiny --vocab qwen35 --seed 1 -o "$model"
fi
backend=cpu
if nvidia-smi -L >/dev/null 2>&1 && grep -q memra_cuda_backend_open build/memra-run; then
  backend=cuda
fi
# Random weights: the text is gibberish by construction; the point is the machinery and speed.
exec build/memra-run --backend "$backend" -m "$model" -p "The quick brown fox" -n 32 "$@"
