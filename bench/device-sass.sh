#!/usr/bin/env bash
# device-sass.sh — the SASS of NVRTC specializations, on the lent GPU machine (its image has
# cuobjdump; bench/sass.sh does the same here from a local compile). Reads the engine's cubin
# cache (runtime/nvrtc.c: magic[8] | u64 src_hash | u64 size | u64 xxh64 | u32 key_len | key |
# cubin; bench/analysis/sass_loops.py read_cache), so run it after something compiled the keys
# (scripts/device-gates.sh, bench/device-bench.sh).
#
#   bench/device-sass.sh KEY...    e.g. "mmvq:qt=q4_K:b=1:sm=90"
# What comes back in $OUT: sass.tgz with one KEY.sass per key found (':' and '=' become '_'),
# and a count of instructions per key printed.
set -u
out=${OUT:-$PWD/out}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/memra/kernels
mkdir -p "$out/sass"
for key in "$@"; do
  name=$(echo "$key" | tr ':=+' '___')
  python3 - "$dir" "$key" "$out/sass/$name.cubin" "$(dirname "$0")/analysis" <<'PY' || { echo "$key: not in $dir"; continue; }
import glob, sys
sys.path.insert(0, sys.argv[4])
from sass_loops import read_cache
d, key, dst = sys.argv[1], sys.argv[2], sys.argv[3]
for f in glob.glob(d + "/*.cubin"):
    kc = read_cache(f)
    if kc and kc[0] == key:
        open(dst, "wb").write(kc[1])
        sys.exit(0)
sys.exit(1)
PY
  cuobjdump -sass "$out/sass/$name.cubin" >"$out/sass/$name.sass" 2>&1
  rm -f "$out/sass/$name.cubin"
  echo "$key: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$out/sass/$name.sass") SASS instructions"
done
tar -czf "$out/sass.tgz" -C "$out" sass && rm -rf "$out/sass"
