#!/usr/bin/env bash
# device-all.sh — one device call that runs everything: the gates (scripts/device-gates.sh),
# then the 9b bench (bench/device-bench.sh) and a 9b generation with memra-run, with the 9b
# forge running in the background from the start (it needs only the CPUs).
#
#   scripts/device-all.sh carry   HERE: both carry folders (.carry/cudabackend, .carry/bench)
#   scripts/device-all.sh         THERE, with both carried. Env: GATES_BUDGET (default 420 s;
#                                 330 cut the gates once in session 8), BENCH_BUDGET (default
#                                 260 s), BENCH_ARGS / BENCH_ARGS2 as device-bench.sh takes them.
# What comes back in $OUT: all.tgz = gates/ (gates.log gpu-ops.log run.log summary.txt),
# bench/ (bench.txt, bench.jsonl, bench.svg.gp, bench2.*, summary.txt), run-9b.txt. The
# bench report, the 9b generation and the gates' summary table print last.
set -u
cd "$(dirname "$0")/.."
root=$PWD
if [ "${1:-}" = carry ]; then
  set -e
  scripts/device-gates.sh carry
  bench/device-bench.sh carry
  exit 0
fi
dest=${OUT:-$root/out}
mkdir -p "$dest/gates" "$dest/bench"
m9=/tmp/memra-9b.gguf
# shellcheck source=scripts/forge-9b-bg.sh
. "$root/scripts/forge-9b-bg.sh"
forge_9b_bg 300
OUT=$dest/gates BUDGET=${GATES_BUDGET:-420} scripts/device-gates.sh >"$dest/gates/summary.txt" 2>&1
wait $forge
sync # the forge's dirty pages written back before anything is timed
OUT=$dest/bench BUDGET=${BENCH_BUDGET:-260} bench/device-bench.sh >"$dest/bench/summary.txt" 2>&1
rm -f "$dest/bench/kcache.tgz" "$dest/gates/kcache.tgz" # keep what comes back small
# 9b generates on the GPU: 64 greedy tokens after a short prompt, graph replay
export LD_LIBRARY_PATH=$root/.carry/cudabackend/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export XDG_CACHE_HOME=/tmp/memra-cache
timeout 120 "$root/.carry/cudabackend/bin/memra-run" --backend cuda -m "$m9" --tokens 1,2,3,4,5 \
  -n 64 --logits-hash >"$dest/run-9b.txt" 2>&1
echo "memra-run cuda 9b: rc=$?" >>"$dest/run-9b.txt"
# one archive comes back (the device tool returns a few files only)
tar -czf "$dest/all.tgz" -C "$dest" gates bench run-9b.txt && rm -rf "$dest/gates" "$dest/bench"
tar -xzOf "$dest/all.tgz" bench/summary.txt | tail -n 45
echo
tar -xzOf "$dest/all.tgz" run-9b.txt | tail -n 4
echo
tar -xzOf "$dest/all.tgz" gates/summary.txt | tail -n 14
