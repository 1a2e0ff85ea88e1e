#!/usr/bin/env bash
# device-hostab.sh — THERE: A/B of a host-side change, which template variants cannot carry:
# two memra-bench builds, .carry/bench (the tree) and .carry/bench-alt (the tree with a patch
# applied, built HERE; e.g. bench/variants/host-wave2.diff), run interleaved on the 9b
# (HOSTAB_ROUNDS rounds each, HOSTAB_ARGS), after memra-gpu-tests' chain case (the tick's
# kernel chains, .carry/cudabackend) and one bench of the tree (BENCH_ARGS), while the 9b forge
# runs in the background. Prints the bench report, then a table: build round tier median p99
# rows_differ. HOSTAB_BUILDS: the carry folders to interleave (default "bench bench-alt"; a
# third build, e.g. "bench bench-alt bench-alt2", fits the 64 MiB a call carries).
#   HERE: git apply PATCH && cmake -S . -B build-alt && cmake --build build-alt --target
#         memra-bench && git checkout -- the patched files; cp -r .carry/bench .carry/bench-alt;
#         strip --strip-debug -o .carry/bench-alt/bin/memra-bench build-alt/memra-bench
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out"
# shellcheck source=scripts/forge-9b-bg.sh
. scripts/forge-9b-bg.sh
forge_9b_bg 300
cb=$root/.carry/cudabackend
mkdir -p /tmp/memra-cache
if [ -x "$cb/bin/memra-gpu-tests" ]; then
  env LD_LIBRARY_PATH="$cb/lib:/usr/local/cuda/lib64" XDG_CACHE_HOME=/tmp/memra-cache CK_FORK=no \
    CK_RUN_CASE=chain timeout 200 "$cb/bin/memra-gpu-tests" >"$out/chain.log" 2>&1
  echo "memra-gpu-tests chain: rc=$? $(grep -a 'Checks:' "$out/chain.log" | tail -1)"
  grep -a -E "TABLE\|mmvq (PDL|FFN)|:[FE]:" "$out/chain.log"
fi
wait $forge
sync # the forge's 5.6 GB of dirty pages: written back before anything is timed
export XDG_CACHE_HOME=/tmp/memra-cache
builds=${HOSTAB_BUILDS:-bench bench-alt} # carry folders under .carry, each a memra-bench build
for b in $builds; do # the source-tree path baked into each build (plans/*.lua): this tree's
  src=$(cat "$root/.carry/$b/srcdir" 2>/dev/null)
  if [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
  fi
done
[ -f "$root/.carry/bench/kcache.tgz" ] && tar -xzf "$root/.carry/bench/kcache.tgz" -C "$XDG_CACHE_HOME"
run() { # carry-folder json-file args...
  local c=$1 j=$2
  shift 2
  env LD_LIBRARY_PATH="$c/lib:/usr/local/cuda/lib64" timeout 200 "$c/bin/memra-bench" --backend cuda \
    -m /tmp/memra-9b.gguf --json "$j" "$@"
}
# shellcheck disable=SC2086 # word lists
run "$root/.carry/bench" "$out/bench.jsonl" ${BENCH_ARGS:---tiers 1,2,4,8,16 --depths 1024 --ticks 50 --prefill synthetic} \
  >"$out/bench.txt" 2>"$out/bench.err"
echo "memra-bench (tree): rc=$?"
field() { printf '%s' "$1" | sed -nE "s/.*\"$2\":([^,}]*).*/\1/p"; }
: >"$out/hostab.txt"
for r in $(seq 1 "${HOSTAB_ROUNDS:-2}"); do
  for b in $builds; do
    # shellcheck disable=SC2086
    run "$root/.carry/$b" "$out/$b-$r.jsonl" ${HOSTAB_ARGS:---tiers 1,2 --depths 1024 --ticks 50 --prefill synthetic} \
      >"$out/$b-$r.txt" 2>"$out/$b-$r.err"
    grep '"mode":"graph"' "$out/$b-$r.jsonl" | while read -r l; do
      printf '%-10s %5s %4s %10s %10s %6s\n' "$b" "$r" "$(field "$l" tier)" "$(field "$l" median_ms)" \
        "$(field "$l" p99_ms)" "$(field "$l" rows_differ)"
    done >>"$out/hostab.txt"
  done
done
tail -n 22 "$out/bench.txt"
printf '%-10s %5s %4s %10s %10s %6s\n' build round B median_ms p99_ms rows_differ
sort -k3,3n -k1,1 -s "$out/hostab.txt"
