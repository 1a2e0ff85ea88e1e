#!/usr/bin/env bash
# device-ab.sh — A/B of NVRTC template variants on the lent GPU, with one memra-bench binary.
#
#   bench/device-ab.sh prepare NAME... HERE: .carry/ab/NAME/ = nvrtc_templates/ with
#                                 bench/variants/NAME.patch applied (diff -u a/FILE b/FILE);
#                                 a patch of .lua files is a planner variant: plans/*.lua
#                                 patched, run as memra-bench --planner-scripts (the plans it
#                                 makes in-process), no template change; bench/variants/
#                                 NAME.args (no patch) is an option variant: memra-bench
#                                 options (scheduling A/Bs such as --attn-split-ctas auto)
#                                 added to the run, embedded templates;
#                                 then carry .carry/ab and the bench carry (device-bench.sh carry)
#   bench/device-ab.sh VARIANT...   THERE (repository root, the bench carry carried)
# A variant is a folder of AB_DIR (default .carry/ab) holding template files named like the
# embedded ones (mmvq.cuh, ...); memra-bench compiles them instead (MEMRA_NVRTC_TEMPLATES,
# runtime/nvrtc.c). The name `base` means the embedded templates. Every variant runs
# AB_ROUNDS times (default 2), interleaved (base a b base a b ...), so machine drift shows.
# Env: AB_CARRY (default .carry/bench: bench/device-bench.sh carry), AB_ARGS (memra-bench
# options, default tiers 4,8,16 at depth 1024), AB_WRAP (a command memra-bench runs under,
# e.g. "compute-sanitizer --tool racecheck"), PRESET (9b), BUDGET (s, default 420),
# AB_BACKEND (cuda; cpu runs the machinery here on a small preset).
# AB_TESTS=1 (with .carry/cudabackend carried too: scripts/device-gates.sh carry): after the
# rounds, memra-gpu-tests and memra-gpu-backend-tests (the gates; with PRESET=0.8b that model
# is their MEMRA_GPU_TEST_MODEL) under every variant but base, PASS / FAIL / CUT (the budget
# ran out: no verdict) lines in the table.
# What comes back in $OUT: VARIANT-ROUND.txt / .jsonl per run, forge.log, ab.txt (the table),
# VARIANT-TEST.log with AB_TESTS. Table columns: rows_differ / max|d| are memra-bench's isolation
# check inside the run (B-wide rows against tier 1); logits compares the case's logits_xxh64
# (the first B-wide tick's logits, all rows) with base's in the same round: `=base` means the
# variant computed the same bits on the whole model (list base first, so it runs first);
# launches: kernel launches per tick (what a planner variant changes). One line per case
# (tier, depth): with several depths, each case is compared with base's of the same depth.
set -u
cd "$(dirname "$0")/.."
root=$PWD
if [ "${1:-}" = prepare ]; then
  set -e
  shift
  for v in "$@"; do
    rm -rf ".carry/ab/$v" && mkdir -p ".carry/ab/$v"
    if [ -f "bench/variants/$v.args" ]; then # an option variant
      [ -f "bench/variants/$v.patch" ] && { echo "bench/variants/$v: both .args and .patch" >&2; exit 2; }
      printf '%s\n' "$(tr -d '\r' <"bench/variants/$v.args" | tr '\n' ' ')" >".carry/ab/$v/ARGS" # one line
      echo args >".carry/ab/$v/KIND"
      echo ".carry/ab/$v: memra-bench $(cat ".carry/ab/$v/ARGS")"
      continue
    fi
    if grep -q '^+++ b/[^ ]*\.lua' "bench/variants/$v.patch"; then # a planner variant
      cp plans/*.lua ".carry/ab/$v/" && echo plans >".carry/ab/$v/KIND"
    else
      cp nvrtc_templates/* ".carry/ab/$v/"
    fi
    patch -s -p1 -d ".carry/ab/$v" <"bench/variants/$v.patch"
    echo ".carry/ab/$v: $(cd ".carry/ab/$v" && ls | tr '\n' ' ')"
  done
  cp bench/device-ab.sh .carry/ab/run.sh # this script, for a tree that does not have it yet
  exit 0
fi
carry=${AB_CARRY:-$root/.carry/bench}
abdir=${AB_DIR:-$root/.carry/ab}
out=${OUT:-$root/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
src=$(cat "$carry/srcdir" 2>/dev/null)
if [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
fi
export XDG_CACHE_HOME=/tmp/memra-cache-ab
# a JSON line's number: the first "KEY": (index: literal, leftmost), up to the next , or }
field() { printf '%s' "$1" | awk -v k="\"$2\":" 'i = index($0, k) { s = substr($0, i + length(k)); sub(/[,}].*/, "", s); print s }'; }
planner_variant() { [ "$1" != base ] && [ "$(cat "$abdir/$1/KIND" 2>/dev/null)" = plans ]; } # prepare's mark
option_variant() { [ "$1" != base ] && [ "$(cat "$abdir/$1/KIND" 2>/dev/null)" = args ]; }
deadline=$(($(date +%s) + ${BUDGET:-420}))
preset=${PRESET:-9b}
model=/tmp/memra-$preset.gguf
t0=$(date +%s)
[ -s "$model" ] || timeout 300 "$carry/bin/memra-forge" --preset "$preset" --seed 1 -o "$model" >"$out/forge.log" 2>&1
echo "forge $preset: rc=$? in $(($(date +%s) - t0)) s" | tee -a "$out/forge.log"
: >"$out/ab.txt"
rm -f "$out"/*.hash
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
  for v in "$@"; do
    left=$((deadline - $(date +%s)))
    [ $left -lt 20 ] && { echo "$v-$round: out of time" >>"$out/ab.txt"; continue; }
    tpl= scripts=()
    if planner_variant "$v"; then
      scripts=(--planner-scripts "$abdir/$v") # plans made by the variant's Lua planner
    elif option_variant "$v"; then
      read -r -a scripts <"$abdir/$v/ARGS" # its memra-bench options, embedded templates
    elif [ "$v" != base ]; then
      tpl=$abdir/$v
    fi
    # shellcheck disable=SC2086 # AB_WRAP and AB_ARGS are word lists
    MEMRA_NVRTC_TEMPLATES=$tpl timeout "$left" ${AB_WRAP:-} "$carry/bin/memra-bench" --backend "${AB_BACKEND:-cuda}" -m "$model" \
      "${scripts[@]}" --json "$out/$v-$round.jsonl" ${AB_ARGS:---tiers 4,8,16 --depths 1024 --ticks 50 --prefill synthetic} \
      >"$out/$v-$round.txt" 2>"$out/$v-$round.err"
    rc=$?
    # one line per case: variant round tier median p99 rows_differ max|d| logits: the
    # case's logits_xxh64 against base's in the same round (=base: the same bits; DIFF: not;
    # - for base itself, ? when base has none)
    mode=graph # the primary mode: graph replay, eager where there is none (AB_BACKEND=cpu)
    grep -q '"mode":"graph"' "$out/$v-$round.jsonl" 2>/dev/null || mode=eager
    grep "\"mode\":\"$mode\"" "$out/$v-$round.jsonl" 2>/dev/null | while read -r line; do
      tier=$(field "$line" tier) depth=$(field "$line" depth)
      hash=$(printf '%s' "$line" | sed -nE 's/.*"logits_xxh64":"([0-9a-f]+)".*/\1/p')
      echo "$tier $depth ${hash:-none}" >>"$out/$v-$round.hash"
      # base's case of the same tier and depth (one line per case: several depths per tier;
      # the first, should AB_ARGS repeat a depth)
      ref=$(awk -v t="$tier" -v d="$depth" '$1 == t && $2 == d { print $3; exit }' "$out/base-$round.hash" 2>/dev/null)
      if [ "$v" = base ]; then same=-
      elif [ -z "$hash" ] || [ -z "$ref" ] || [ "$ref" = none ]; then same=?
      elif [ "$hash" = "$ref" ]; then same==base
      else same=DIFF; fi
      printf '%-10s %5s %4s %6s %10s %10s %6s %9s %7s %8s\n' "$v" "$round" "$tier" "$depth" \
        "$(field "$line" median_ms)" "$(field "$line" p99_ms)" "$(field "$line" rows_differ)" \
        "$(field "$line" max_abs_diff)" "$same" "$(field "$line" launches)"
    done >>"$out/ab.txt"
    [ $rc != 0 ] && { echo "$v-$round: memra-bench rc=$rc"; tail -3 "$out/$v-$round.err"; } >>"$out/ab.txt"
  done
done
if [ -n "${AB_TESTS:-}" ]; then
  cb=$root/.carry/cudabackend
  tmodel=
  [ "$preset" = 0.8b ] && tmodel=$model
  for v in "$@"; do
    [ "$v" = base ] && continue
    if planner_variant "$v"; then # the tests plan with plans/
      echo "$v tests: n/a (a planner variant: its logits column is the check)" >>"$out/ab.txt"
      continue
    fi
    if option_variant "$v"; then # the embedded templates: the logits column is the check
      echo "$v tests: n/a (an option variant: its logits column is the check)" >>"$out/ab.txt"
      continue
    fi
    for t in memra-gpu-tests memra-gpu-backend-tests; do
      left=$((deadline - $(date +%s)))
      [ $left -lt 20 ] && { echo "$v $t: out of time" >>"$out/ab.txt"; continue; }
      # the gates' second model is the 0.8b (its CPU agreement runs the CPU reference)
      env LD_LIBRARY_PATH="$cb/lib:$LD_LIBRARY_PATH" CK_FORK=no MEMRA_NVRTC_TEMPLATES="$abdir/$v" \
        ${tmodel:+MEMRA_GPU_TEST_MODEL="$tmodel"} timeout "$left" "$cb/bin/$t" >"$out/$v-$t.log" 2>&1
      rc=$?
      # the only limit here is what BUDGET leaves: killed by it is no verdict (CUT), not FAIL
      case $rc in 0) res=PASS ;; 124 | 137) res="CUT rc=$rc (BUDGET ran out)" ;; *) res="FAIL rc=$rc" ;; esac
      echo "$v $t: $res $(grep -a 'Checks:' "$out/$v-$t.log" | tail -1)" >>"$out/ab.txt"
      grep -a -E ":[FE]:" "$out/$v-$t.log" | head -5 >>"$out/ab.txt" # Check's failure lines
    done
  done
fi
grep -h -m1 "copy BW" "$out"/*-1.txt | head -1
printf '%-10s %5s %4s %6s %10s %10s %6s %9s %7s %8s\n' variant round B depth median_ms p99_ms rows_differ 'max|d|' logits launches
sort -k3,3n -k4,4n -k1,1 -s "$out/ab.txt"
