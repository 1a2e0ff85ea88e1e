#!/usr/bin/env bash
# demo.sh — the main job on the built-in default model: set everything up, forge the default
# model if it is not there yet, and generate with the best backend available.
#   scripts/demo.sh [extra memra-run args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=models/default.gguf
mkdir -p models
if [ ! -f "$model" ]; then
  build/memra-forge --preset tiny --seed 1 -o "$model"
fi
exec build/memra-run --backend "$( (nvidia-smi -L && grep -q memra_cuda_backend_open build/memra-run) >/dev/null 2>&1 && echo cuda || echo ref)" -m "$model" --tokens 1,2,3 -n 32 "$@"
