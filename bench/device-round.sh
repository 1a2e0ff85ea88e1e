#!/usr/bin/env bash
# device-round.sh — THERE: the first of two calls on one warm machine for a round of variants
# built HERE by `PACK=1 bench/variant-carry.sh P1 [P2 [P3]]` (carry .carry/pack only): unpacks
# the builds, forges the 9b in the background, runs the probes (ROUND_PROBES, e.g.
# "attn-probe gdn-probe-base:--chains,--iters,50": NAME:ARGS passes ARGS, commas as spaces) and the op cases
# of each variant (ROUND_CASES, e.g. "bench-alt:attn_decode bench-alt3:exact_math,gdn_step":
# memra-gpu-ops-tests of that build, every shape against the CPU, memcmp), then waits for the
# forge. ROUND_SANITIZE=racecheck (or memcheck, ...) also runs each case under
# compute-sanitizer with that tool where the device has it, or from .carry/san
# (bench/sanitizer-carry.sh; SANITIZE_LIMIT s each, default 90).
# The second call, on the same machine (the forge and the unpacked builds stay):
# `VARIANT_CASE= HOSTAB_BUILDS="bench bench-alt ..." bench/device-variant.sh` (the A/B).
# What comes back in $OUT: round.txt (GPU, probes, cases' verdicts), probes.txt, ops.log.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out"
[ -d "$root/.carry/bench" ] || bench/variant-carry.sh unpack || exit 1
# shellcheck source=scripts/forge-9b-bg.sh
. "$root/scripts/forge-9b-bg.sh"
forge_9b_bg 300
export XDG_CACHE_HOME=/tmp/memra-cache
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >"$out/round.txt"
: >"$out/probes.txt"
for spec in ${ROUND_PROBES:-}; do
  p=${spec%%:*} args=
  [ "$p" != "$spec" ] && args=$(printf '%s' "${spec#*:}" | tr ',' ' ')
  {
    echo "== $p $args"
    # shellcheck disable=SC2086 # ARGS: flags or none
    timeout 60 "$root/.carry/probe/$p" $args 2>&1
    echo "$p: rc=$?"
  } >>"$out/probes.txt"
  tail -n 1 "$out/probes.txt" >>"$out/round.txt"
done
: >"$out/ops.log"
for spec in ${ROUND_CASES:-}; do
  b=${spec%%:*}
  for c in $(printf '%s' "${spec#*:}" | tr ',' ' '); do
    # each case's own log first: a case that dies before its summary must not show the last one's
    env LD_LIBRARY_PATH="$root/.carry/$b/lib:/usr/local/cuda/lib64" CK_FORK=no CK_RUN_CASE="$c" \
      timeout "${OPS_LIMIT:-120}" "$root/.carry/$b/bin/memra-gpu-ops-tests" >"$out/case.log" 2>&1
    echo "memra-gpu-ops-tests ($b) $c: rc=$? $(grep -a 'Checks:' "$out/case.log" | tail -1)" >>"$out/round.txt"
    cat "$out/case.log" >>"$out/ops.log" && rm -f "$out/case.log"
    [ -n "${ROUND_SANITIZE:-}" ] || continue
    cs=$(command -v compute-sanitizer) || cs=$root/.carry/san/compute-sanitizer
    [ -x "$cs" ] || cs=/usr/local/cuda/bin/compute-sanitizer
    if [ ! -x "$cs" ]; then
      echo "compute-sanitizer: not on this device" >>"$out/round.txt"
      continue
    fi
    env LD_LIBRARY_PATH="$root/.carry/$b/lib:/usr/local/cuda/lib64" CK_FORK=no CK_RUN_CASE="$c" \
      timeout "${SANITIZE_LIMIT:-90}" "$cs" --tool "$ROUND_SANITIZE" --print-limit 20 \
      "$root/.carry/$b/bin/memra-gpu-ops-tests" >"$out/case.log" 2>&1
    echo "$ROUND_SANITIZE ($b) $c: rc=$? $(grep -a 'ERROR SUMMARY' "$out/case.log" | tail -1)" >>"$out/round.txt"
    cat "$out/case.log" >>"$out/ops.log" && rm -f "$out/case.log"
  done
done
[ -n "$forge" ] && wait "$forge"
echo "forge: $(cat /tmp/memra-9b.gguf.done 2>/dev/null || echo failed)" >>"$out/round.txt"
cat "$out/round.txt"
