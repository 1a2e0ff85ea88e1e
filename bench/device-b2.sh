#!/usr/bin/env bash
# device-b2.sh — THERE (bench + cudabackend carries, .carry/ab prepared with the variants
# named below): localizes session 8's open question, why tier-2 rows differ from tier 1 when
# B = 2 mmvq kernels run at 2 CUDA blocks per SM (minblocks2); answered in
# bench/results/mmvq-notes.md run 19 (the fused SwiGLU wrote over its own input), kept as the
# pattern for the next row that differs. Steps, one output folder each
# under $OUT: chain (memra-gpu-tests' chain case: the tick's kernel chains at 9b shapes,
# under the embedded templates and under each B2_CHAIN variant, while the 9b forge runs),
# ab (B2_VARIANTS at tiers 1, 2; B2_ROUNDS rounds), then B2_EXTRA steps: nofuse
# (--no-fusion), eager (--no-graph), racecheck / initcheck (compute-sanitizer over one
# tier-2 step) of minblocks2. A short table prints last.
#   env: B2_CHAIN (default mb2-w2), B2_VARIANTS (default mb2-w2 mb2-w2-coh mb2-w2-norelease),
#        B2_ROUNDS (2), B2_TIERS (1,2), B2_TICKS (5), B2_EXTRA (default none)
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out/chain"
export PATH=$PATH:/usr/local/cuda/bin
# shellcheck source=scripts/forge-9b-bg.sh
. scripts/forge-9b-bg.sh
forge_9b_bg 300
cb=$root/.carry/cudabackend
for v in base ${B2_CHAIN-mb2-w2}; do
  tpl=
  [ "$v" != base ] && tpl=$root/.carry/ab/$v
  env LD_LIBRARY_PATH="$cb/lib:/usr/local/cuda/lib64" XDG_CACHE_HOME=/tmp/memra-cache-ab CK_FORK=no \
    CK_RUN_CASE=chain MEMRA_NVRTC_TEMPLATES="$tpl" timeout 200 "$cb/bin/memra-gpu-tests" \
    >"$out/chain/$v.log" 2>&1
  echo "chain $v: rc=$? $(grep -a 'Checks:' "$out/chain/$v.log" | tail -1)" >>"$out/chain.log"
  grep -a -E "TABLE\|mmvq (PDL|FFN)|FAIL|:[FE]:" "$out/chain/$v.log" | head -8 >>"$out/chain.log"
done
wait $forge
a="--tiers ${B2_TIERS:-1,2} --depths 1024 --prefill synthetic"
# shellcheck disable=SC2086 # variant lists
OUT=$out/ab AB_ROUNDS=${B2_ROUNDS:-2} BUDGET=300 AB_ARGS="$a --ticks ${B2_TICKS:-5}" \
  bench/device-ab.sh ${B2_VARIANTS:-mb2-w2 mb2-w2-coh mb2-w2-norelease} >"$out/ab.log" 2>&1
steps="ab"
for x in ${B2_EXTRA:-}; do
  case $x in
  nofuse) args="$a --ticks 5 --no-fusion" wrap= ;;
  eager) args="$a --ticks 5 --no-graph" wrap= ;;
  *) args="$a --ticks 1 --warmup 0" wrap="compute-sanitizer --tool $x --print-limit 20" ;;
  esac
  OUT=$out/$x AB_ROUNDS=1 BUDGET=120 AB_WRAP="$wrap" AB_ARGS="$args" bench/device-ab.sh minblocks2 \
    >"$out/$x.log" 2>&1
  steps="$steps $x"
done
cat "$out/chain.log"
for s in $steps; do
  echo "== $s"
  tail -n +2 "$out/$s.log"
  grep -h -a -m3 "differ from tier 1" "$out/$s"/*.err 2>/dev/null
done
