#!/usr/bin/env bash
# ops-regs.sh — registers, spill bytes and shared memory of every kernel in nvcc-compiled op
# files (kernels/<op>.cu), compiled here (no GPU) with the build's flags (cmake/cudakernels.cmake:
# exact float semantics, sm_90), for A/B of kernel changes: run it before and after, diff.
#
#   bench/ops-regs.sh [kernels/attn_decode.cu ...]     default: every kernels/*.cu
# Output: one line per kernel, "file kernel registers spill_bytes shared_bytes" (the kernel
# name demangled and shortened to its template arguments).
set -eu
cd "$(dirname "$0")/.."
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(kernels/*.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "${files[@]}"; do
  nvcc -std=c++17 -O2 -DNDEBUG -arch=sm_90 -cubin --fmad=false -prec-div=true -prec-sqrt=true -ftz=false \
    -Iinclude -Iruntime -Ikernels -I. -Xptxas -v -o "$tmp/k.cubin" -x cu "$f" 2>&1 |
    python3 -c '
import re, subprocess, sys
f = sys.argv[1]
cur = spill = None
for line in sys.stdin:
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        cur, spill = m.group(1), None
        continue
    m = re.search(r"(\d+) bytes spill stores", line)
    if m and cur:
        spill = m.group(1)
        continue
    m = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", line) or re.search(r"Used (\d+) registers()", line)
    if m and cur:
        name = subprocess.run(["c++filt", cur], capture_output=True, text=True).stdout.strip()
        name = re.sub(r"\(anonymous namespace\)::", "", name).split("(")[0]
        print(f"{f} {name} {m.group(1)} {spill or 0} {m.group(2) or 0}")
        cur = None
' "$f"
done
