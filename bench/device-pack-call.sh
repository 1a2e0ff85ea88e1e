#!/usr/bin/env bash
# device-pack-call.sh — THERE: the one call a session makes when it may get any GPU, with
# .carry/pack (bench/variant-carry.sh PACK=1, or packed by hand with the probes) and
# .carry/sanz (bench/sanitizer-carry.sh: .carry/san xz-packed, unpacked here; .carry/san itself
# no longer fits beside a two-variant pack) carried. One start serves whichever GPU comes:
#   - an H200: the README run on the pack's main build (scripts/device-quick.sh: the 9b at
#     tiers 1..16, depth 1024, then 8192 and 32768 when PACK_BENCH_BUDGET allows), nothing else;
#   - any other GPU: the variant round: the norm probe (when packed), bench/device-round.sh
#     (the attention / gdn probes named in PACK_PROBES, the op cases named in PACK_CASES),
#     bench/device-variant.sh (the builds interleaved: PACK_ROUNDS x PACK_ARGS), then
#     racecheck on PACK_RACE (a probe binary, default attn-probe, one launch per line) with a
#     fresh TMPDIR, last because a sanitizer that timeout kills can leave the next one unable
#     to start (session 32).
# Each part writes into $OUT as it ends, so a call cut short still returns what finished.
# Defaults are session 36's next call (its pack: main after norm-ctas, prep-early and
# attn-combine-m landed as bench, the engine before them as bench-alt; no probes): the landed
# kernels' op cases on bench, the two builds interleaved, then norm_release_tiers re-measured
# on bench (PACK_EXTRA); every part is bounded (timeouts below).
#
#   PACK_PROBES   default "norm-probe-alt norm-probe-alt2 attn-probe attn-probe-alt4" (those
#                 present; main's norm-probe runs first on its own, into norm-probe.txt)
#   PACK_CASES    default "bench:rms_norm_q8,attn_prep,attn_decode" (those present)
#   PACK_ROUNDS   default 2 (0: no A/B, the probes and op cases alone)
#   PACK_ARGS     default "--tiers 1,2,4,16 --depths 1024,8192 --ticks 40 --prefill synthetic
#                 --no-eager"
#   PACK_EXTRA    ';'-separated memra-bench option sets run on bench after the A/B
#                 (device-variant.sh's EXTRA_ARGS); default: --norm-release none and
#                 1,2,4,8,16 alternated, two rounds, tiers 1..16 at depth 1024 (every tier's
#                 norm with and without release-first; "" runs none)
#   PACK_VARIANT_LIMIT  the bound on the A/B and the extras, default 400 s
#   PACK_RACE     a probe to run under racecheck, default none ("attn-probe": session 32's)
#   PACK_BENCH_BUDGET  the H200 README run's budget (its forge included), default 330 s;
#   PACK_BENCH_ARGS, PACK_BENCH_ARGS2  its two memra-bench runs (defaults: the README's)
#   PACK_MODE     "auto" (default: the README run on an H200, the variant round elsewhere),
#                 "readme" or "variants" (either on any GPU: a second H200 call of a session
#                 runs the variant round with PACK_MODE=variants)
# What comes back: summary.txt (printed last), norm-probe.txt, r/ (round), v.tgz (A/B),
# race.txt; on an H200 quick.txt and q.tgz.
set -u
case ${PACK_MODE:-auto} in
  auto | readme | variants) ;;
  *) echo "device-pack-call: PACK_MODE must be auto, readme or variants, not '$PACK_MODE'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out"
if [ ! -x .carry/san/compute-sanitizer ] && [ -f .carry/sanz/san.txz ]; then
  mkdir -p .carry/san && tar -xJf .carry/sanz/san.txz -C .carry/san
fi
bench/variant-carry.sh unpack || { echo "device-pack-call: no .carry/pack/builds.tgz" >&2; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "device-pack-call: ${gpu:-no GPU}" >"$out/summary.txt"
mode=${PACK_MODE:-auto}
if [ "$mode" = auto ]; then
  mode=variants
  printf '%s' "$gpu" | grep -q H200 && mode=readme
fi
echo "device-pack-call: mode $mode" >>"$out/summary.txt"
if [ "$mode" = readme ]; then
  OUT=$out/q OPS=0 BENCH_BUDGET=${PACK_BENCH_BUDGET:-330} \
    BENCH_ARGS=${PACK_BENCH_ARGS:-"--tiers 1,2,4,8,16 --depths 1024 --ticks 50 --prefill synthetic"} \
    BENCH_ARGS2=${PACK_BENCH_ARGS2:-"--tiers 1,2,4,8,16 --depths 8192,32768 --ticks 30 --prefill synthetic --no-isolation"} \
    scripts/device-quick.sh >"$out/quick.txt" 2>&1
  tail -n 50 "$out/quick.txt" >>"$out/summary.txt"
  (cd "$out" && tar -czf q.tgz q && rm -rf q)
  cat "$out/summary.txt"
  exit 0
fi
if [ -x .carry/probe/norm-probe ]; then
  timeout 30 .carry/probe/norm-probe >"$out/norm-probe.txt" 2>&1
  echo "norm-probe: rc=$?" >>"$out/norm-probe.txt"
fi
present() { # the words of $1 whose build (NAME:...) or probe (NAME) is in .carry
  local w
  for w in $1; do
    case $w in
      *:*) [ -d ".carry/${w%%:*}" ] && printf '%s ' "$w" ;;
      *) [ -x ".carry/probe/$w" ] && printf '%s ' "$w" ;;
    esac
  done
}
nr_args="--tiers 1,2,4,8,16 --depths 1024 --ticks 40 --prefill synthetic --no-eager --norm-release"
nr_default="$nr_args none;$nr_args 1,2,4,8,16;$nr_args none;$nr_args 1,2,4,8,16"
probes=$(present "${PACK_PROBES:-norm-probe-alt norm-probe-alt2 attn-probe attn-probe-alt4}")
cases=$(present "${PACK_CASES:-bench:rms_norm_q8,attn_prep,attn_decode}")
ROUND_PROBES=$probes ROUND_CASES=$cases OPS_LIMIT=${OPS_LIMIT:-180} OUT=$out/r \
  bench/device-round.sh >/dev/null 2>&1
cat "$out/r/round.txt" >>"$out/summary.txt"
if [ "${PACK_ROUNDS:-2}" != 0 ]; then # PACK_ROUNDS=0: the probes and op cases alone (a short budget)
  builds=bench
  for b in .carry/bench-alt*; do [ -d "$b" ] && builds="$builds ${b#.carry/}"; done
  OUT=$out/v VARIANT_CASE='' HOSTAB_BUILDS=$builds HOSTAB_ROUNDS=${PACK_ROUNDS:-2} \
    HOSTAB_ARGS=${PACK_ARGS:-"--tiers 1,2,4,16 --depths 1024,8192 --ticks 40 --prefill synthetic --no-eager"} \
    EXTRA_ARGS=${PACK_EXTRA-$nr_default} \
    BENCH_ARGS="--tiers 1 --depths 1024 --ticks 10 --prefill synthetic --no-eager" \
    timeout "${PACK_VARIANT_LIMIT:-400}" bench/device-variant.sh >/dev/null 2>&1
  sed -n '/build      round/,$p' "$out/v/hostab.txt" >>"$out/summary.txt"
  sed -n '/^extra /,$p' "$out/v/summary.txt" >>"$out/summary.txt"
  (cd "$out" && tar -czf v.tgz v && rm -rf v)
fi
race=${PACK_RACE:-}
if [ -n "$race" ] && [ -x ".carry/probe/$race" ] && [ -x .carry/san/compute-sanitizer ]; then
  # session 33: with a fresh TMPDIR under /var/tmp (session 32's guard against a killed
  # sanitizer's leftovers) it failed at once on a fresh machine ("Target application
  # terminated before first instrumented API call"), where session 30 ran it without one:
  # first as session 30 did, then with the fresh TMPDIR if that fails the same way
  tmp=${TMPDIR:-/tmp}
  for try in "as is" fresh; do
    [ "$try" = fresh ] && tmp=$(mktemp -d -p /var/tmp)
    TMPDIR=$tmp timeout 100 .carry/san/compute-sanitizer --tool racecheck \
      --print-limit 20 ".carry/probe/$race" --iters 1 >"$out/race.txt" 2>&1
    rc=$?
    echo "racecheck $race (TMPDIR $try): rc=$rc $(grep -a 'RACECHECK SUMMARY' "$out/race.txt" | tail -n 1)" >>"$out/summary.txt"
    grep -q "terminated before first instrumented" "$out/race.txt" || break
  done
fi
[ -f "$out/norm-probe.txt" ] && grep -a -v "^  cycles\|^columns" "$out/norm-probe.txt" >>"$out/summary.txt"
cat "$out/summary.txt"
