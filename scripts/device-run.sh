#!/usr/bin/env bash
# device-run.sh — the one script for the GPU machine: runs memra-gpu-tests (mmvq and
# quantize_q8_1 checks, then the bandwidth table of the real decode shapes), optionally a
# baseline build's bandwidth table and a compute-sanitizer pass, and prints a short summary
# table last.
#
#   scripts/device-run.sh pack [BASE_BIN]   (here) build memra-gpu-tests in $MEMRA_BUILD
#                                      (default build-nvrtc/) and copy it, with the shared
#                                      libraries the GPU machine lacks, to .carry/nvrtc/
#                                      (ignored by git; pass carry: [".carry"]); BASE_BIN, a
#                                      memra-gpu-tests built from older sources, goes along as
#                                      .carry/nvrtc/base/memra-gpu-tests
#   scripts/device-run.sh run [sanitize]   (on the GPU machine, from the repo root) run them;
#                                      full logs go to $OUT (or out/ when OUT is unset)
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
carry=.carry/nvrtc
build=${MEMRA_BUILD:-build-nvrtc}

if [ "$mode" = pack ]; then
  set -e
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2 --target memra-gpu-tests
  rm -rf "$carry" && mkdir -p "$carry/lib"
  cp "$build/memra-gpu-tests" "$carry/"
  /work/shared/tools/device-libs.sh "$carry/lib" "$carry/memra-gpu-tests" >/dev/null
  if [ -n "${2:-}" ]; then
    mkdir -p "$carry/base" && cp "$2" "$carry/base/memra-gpu-tests"
  fi
  du -sh "$carry"
  exit 0
fi

out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$carry/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export CK_FORK=no XDG_CACHE_HOME=/tmp/memra-kcache
bin=$carry/memra-gpu-tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw \
  --format=csv >"$out/gpu.txt" 2>&1

# 1. correctness (every qtype, B = 1..16, merged launches), no timing
start=$(date +%s)
MEMRA_GPU_NO_BENCH=1 timeout 170 "$bin" >"$out/gpu-tests.log" 2>&1
rc=$?
echo "memra-gpu-tests rc=$rc in $(( $(date +%s) - start )) s" >>"$out/gpu-tests.log"

# 2. bandwidth: the baseline build first (when carried), then this build
if [ -x "$carry/base/memra-gpu-tests" ]; then
  XDG_CACHE_HOME=/tmp/memra-kcache-base MEMRA_GPU_BENCH_ONLY=1 timeout 60 \
    "$carry/base/memra-gpu-tests" >"$out/bench-base.log" 2>&1
  echo "base bench rc=$?" >>"$out/bench-base.log"
fi
MEMRA_GPU_BENCH_ONLY=1 timeout 60 "$bin" >"$out/bench.log" 2>&1
echo "bench rc=$?" >>"$out/bench.log"

if [ "${2:-}" = sanitize ] && command -v compute-sanitizer >/dev/null; then
  # every qtype on the smaller shapes, weights in exact-size allocations: any read past a
  # weight or out of shared memory is reported; then shared-memory races on two types
  export MEMRA_GPU_QUICK=1 MEMRA_GPU_NO_BENCH=1
  timeout 150 compute-sanitizer --tool memcheck --print-limit 20 "$bin" >"$out/sanitizer.log" 2>&1
  echo "memcheck rc=$?" >>"$out/sanitizer.log"
  MEMRA_GPU_TYPES=q4_K,q6_K timeout 60 compute-sanitizer --tool racecheck --print-limit 20 \
    "$bin" >"$out/racecheck.log" 2>&1
  echo "racecheck rc=$?" >>"$out/racecheck.log"
  unset MEMRA_GPU_QUICK MEMRA_GPU_NO_BENCH
fi

echo "=== GPU ==="
cat "$out/gpu.txt"
grep -E "^  FAIL|^SKIP|signal" "$out/gpu-tests.log" | head -30
for f in sanitizer racecheck; do
  [ -f "$out/$f.log" ] || continue
  echo "=== compute-sanitizer $f (smaller shapes) ==="
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|rc=|Checks:" "$out/$f.log" | head -8
done
echo "=== correctness ==="
grep '^TABLE|' "$out/gpu-tests.log" | cut -d'|' -f2-
grep -E "^[0-9]+%: Checks|rc=" "$out/gpu-tests.log"
if [ -f "$out/bench-base.log" ]; then
  echo "=== bandwidth, BASELINE build ==="
  grep '^TABLE|' "$out/bench-base.log" | cut -d'|' -f2-
  grep -E "rc=|FAIL|rror" "$out/bench-base.log" | head -5
fi
echo "=== bandwidth, this build ==="
grep '^TABLE|' "$out/bench.log" | cut -d'|' -f2-
grep -E "rc=|FAIL|rror" "$out/bench.log" | head -5
exit $rc
