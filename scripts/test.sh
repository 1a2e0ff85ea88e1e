#!/usr/bin/env bash
# test.sh — the whole CPU test suite, as CI runs it (GPU tests live in separate binaries that
# SKIP without a GPU; scripts/device-gates.sh runs them on the H200):
#   1. every suite built with ASan+UBSan (build-asan/memra-tests);
#   2. the plain build's NVRTC suite, which compiles every mmvq specialization (qtype x
#      B = 1..16) for sm_90 — under ASan NVRTC is ~5x slower, so step 1 compiles B = 1, 16.
set -euo pipefail
cd "$(dirname "$0")/.."
MEMRA_SANITIZE=1 scripts/setup.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ./memra-tests)
if [ -f cmake/nvrtc.cmake ] && command -v nvcc >/dev/null 2>&1; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target test_nvrtc
  (cd build && ./test_nvrtc)
fi
