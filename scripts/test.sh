#!/usr/bin/env bash
# test.sh — build with ASan+UBSan and run the whole CPU test suite (GPU tests SKIP without
# a GPU). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
MEMRA_SANITIZE=1 scripts/setup.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd build-asan
./memra-tests
