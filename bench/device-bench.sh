#!/usr/bin/env bash
# device-bench.sh — memra-bench on the lent GPU machine, in one call.
#
#   bench/device-bench.sh carry   HERE (build machine): build memra-bench and memra-forge with
#                                 CUDA, copy them and the non-system libraries they need into
#                                 .carry/bench/ (ignored by git; name it in `carry`)
#   bench/device-bench.sh         THERE (repository root, .carry/bench carried):
#     1. forge the model on the device's cores (PRESET, default 9b: ~5.6 GB, too big to carry),
#        timed;
#     2. memra-bench --backend cuda on it (plans made in-process), with BENCH_ARGS;
#     3. pack the NVRTC cubin cache into kcache.tgz (carried back in, later runs skip NVRTC).
# What comes back in $OUT: bench.txt (header, table, targets), bench.jsonl, bench.svg.gp,
# bench.err (progress), forge.log, kcache.tgz; with BENCH_ARGS2 a second run's bench2.*. The table and the targets print last.
# Limits: BUDGET seconds in all (default 340), the forge at most FORGE_LIMIT (default 240).
set -u
cd "$(dirname "$0")/.."
root=$PWD
carry=$root/.carry/bench

if [ "${1:-}" = carry ]; then
  set -e
  build=${BUILD:-build-bench}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2 --target memra-bench memra-forge
  mkdir -p "$carry/bin" "$carry/lib"
  for t in memra-bench memra-forge; do strip --strip-debug -o "$carry/bin/$t" "$build/$t"; done
  /work/shared/tools/device-libs.sh "$carry/lib" "$carry"/bin/* >/dev/null
  echo "$root" >"$carry/srcdir" # the source-tree path baked into memra-bench (plans/*.lua)
  du -sh "$carry"
  exit 0
fi

out=${OUT:-$root/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do # libnvrtc
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
src=$(cat "$carry/srcdir" 2>/dev/null)
if [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
fi
export XDG_CACHE_HOME=/tmp/memra-cache
mkdir -p "$XDG_CACHE_HOME"
[ -f "$carry/kcache.tgz" ] && tar -xzf "$carry/kcache.tgz" -C "$XDG_CACHE_HOME"

deadline=$(($(date +%s) + ${BUDGET:-340})) # seconds this script may take in all
preset=${PRESET:-9b}
model=/tmp/memra-$preset.gguf
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
  --format=csv,noheader | tee "$out/device.txt"
t0=$(date +%s)
if [ -s "$model.done" ]; then # forged already (scripts/device-all.sh forges it in the background)
  frc=0
  echo "forge $preset: done earlier ($(cat "$model.done"))" >"$out/forge.log"
else
  timeout "${FORGE_LIMIT:-240}" "$carry/bin/memra-forge" --preset "$preset" --seed 1 -o "$model" \
    >"$out/forge.log" 2>&1
  frc=$?
fi
t1=$(date +%s)
echo "forge $preset: rc=$frc in $((t1 - t0)) s on $(nproc) CPUs ($(stat -c %s "$model" 2>/dev/null) bytes)" \
  | tee -a "$out/device.txt"
tail -c 300 "$out/forge.log" | tr '\r' '\n' | tail -2

# shellcheck disable=SC2086 # BENCH_ARGS is a word list
left=$((deadline - $(date +%s) - 10))
[ $left -lt 1 ] && left=1
timeout "$left" "$carry/bin/memra-bench" --backend cuda -m "$model" \
  --json "$out/bench.jsonl" --plot "$out/bench.svg" ${BENCH_ARGS:-} \
  >"$out/bench.txt" 2>"$out/bench.err"
brc=$?
echo "memra-bench: rc=$brc in $(($(date +%s) - t1)) s" | tee -a "$out/device.txt"
# An optional second run (e.g. --phases on a few cases) into bench2.*, in what time is left.
if [ -n "${BENCH_ARGS2:-}" ]; then
  left=$((deadline - $(date +%s) - 10))
  if [ $left -gt 30 ]; then
    t2=$(date +%s)
    # shellcheck disable=SC2086
    timeout "$left" "$carry/bin/memra-bench" --backend cuda -m "$model" \
      --json "$out/bench2.jsonl" $BENCH_ARGS2 >"$out/bench2.txt" 2>"$out/bench2.err"
    echo "memra-bench (2): rc=$? in $(($(date +%s) - t2)) s" | tee -a "$out/device.txt"
  fi
fi
(cd "$XDG_CACHE_HOME" && tar -czf "$out/kcache.tgz" .)
tail -n 25 "$out/bench.err"
echo "=== report ==="
grep -v '^{' "$out/bench.txt"
[ -f "$out/bench2.txt" ] && { echo "=== report (2) ==="; grep -v '^{' "$out/bench2.txt"; }
exit $brc
