#!/usr/bin/env bash
# test.sh — the whole CPU test suite, as CI runs it (GPU tests live in separate binaries that
# SKIP without a GPU; scripts/device-gates.sh runs them on the H200):
#   1. every suite built with ASan+UBSan (build-asan/memra-tests), and memra-act-eval,
#      memra-example-generate (the public API's worked example) and memra-serve (against the
#      official openai client, tests/py/check_serve_openai.py) run end to end on forged tiny
#      models;
#   2. the plain build's NVRTC suite, which compiles every mmvq specialization (qtype x
#      B = 1..16) for sm_90 — under ASan NVRTC is ~5x slower, so step 1 compiles B = 1, 16.
set -euo pipefail
cd "$(dirname "$0")/.."
MEMRA_SANITIZE=1 scripts/setup.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ./memra-tests)
# memra-act-eval end to end on a forged tiny model (the ASan build): every format reported
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build-asan/memra-forge --preset tiny --seed 1 -o "$tmp/tiny.gguf" >/dev/null
build-asan/memra-act-eval -m "$tmp/tiny.gguf" --tokens 2 --groups 32,256 >"$tmp/act.txt"
for f in engine G=32 G=256; do
  grep -q "^act_eval format=$f tokens=2 rel_median=" "$tmp/act.txt" ||
    { echo "memra-act-eval: no $f line" >&2; cat "$tmp/act.txt" >&2; exit 1; }
done
echo "memra-act-eval on tiny: $(grep -c '^act_eval format=' "$tmp/act.txt") formats"
# examples/generate.c (include/memra.h's worked example, the public API alone) against
# memra-run on the same prompt: the same text, and ASan sees the API's whole life cycle
build-asan/memra-example-generate "$tmp/tiny.gguf" "The quick brown fox" 12 cpu >"$tmp/ex.txt" 2>/dev/null
build-asan/memra-run --backend cpu -m "$tmp/tiny.gguf" -p "The quick brown fox" -n 12 >"$tmp/run.txt" 2>/dev/null
python3 - "$tmp/ex.txt" "$tmp/run.txt" <<'PY'
import json, sys
ex = open(sys.argv[1], 'rb').read().decode('utf-8')
run = [l for l in open(sys.argv[2], encoding='utf-8') if l.startswith('text: ')][0]
want = json.loads(run[len('text: '):]) + '\n'
sys.exit(0 if ex == want and len(want) > 1 else f'memra-example-generate {ex!r} != memra-run {want!r}')
PY
echo "memra-example-generate on tiny: the same text as memra-run"
# memra-serve (ASan) against the official openai client, on a tiny model with the real
# Qwen3.5 vocabulary and chat template: completions, chat, streaming, seeds, errors
build-asan/memra-forge --preset tiny --vocab qwen35 --seed 1 -o "$tmp/tiny-qwen.gguf" >/dev/null
python3 tests/py/check_serve_openai.py build-asan/memra-serve "$tmp/tiny-qwen.gguf"
python3 bench/analysis/sass_loops.py --self-test # bench/sass.sh's SASS parser
python3 bench/analysis/ncu_source.py --self-test # device-ncu.sh NCU_SOURCE=1's digest
if [ -f cmake/nvrtc.cmake ] && command -v nvcc >/dev/null 2>&1; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target test_nvrtc
  (cd build && ./test_nvrtc)
  # bench/hmma_probe.cu (the tensor-core mat-vec probe): compiles, and its bit work replayed
  # on the host matches the reference dequantization (the device part runs on the GPU only)
  nvcc -O3 -arch=sm_90 -std=c++17 -I. -o "$tmp/hmma-probe" bench/hmma_probe.cu runtime/quant.c runtime/qtype.c
  "$tmp/hmma-probe" --host-check
  # bench/gdn_probe.cu (gdn_step's chain timed mark by mark; runs on the GPU only): it compiles
  # kernels/gdn_step.cu with MEMRA_GDN_PROBE, so the marks cannot rot unbuilt
  bench/device-probe.sh gdn-build "$tmp/gdn-probe"
  echo "gdn-probe: compiles"
  # bench/attn_probe.cu likewise (kernels/attn_decode.cu with MEMRA_ATTN_PROBE)
  bench/device-probe.sh attn-build "$tmp/attn-probe"
  echo "attn-probe: compiles"
  # bench/norm_probe.cu likewise (kernels/rms_norm_q8.cu with MEMRA_NORM_PROBE)
  bench/device-probe.sh norm-build "$tmp/norm-probe"
  echo "norm-probe: compiles"
fi
