#!/usr/bin/env bash
# device-quick.sh — the short device call for a kernel change when device time is scarce:
# the nvcc op tests (memra-gpu-ops-tests: every op against its CPU reference, memcmp) while
# the 9b preset forges in the background, then the 9b bench (BENCH_ARGS, BENCH_ARGS2 as
# bench/device-bench.sh takes them) and, when SASS_KEYS is set, bench/device-sass.sh on them.
# MMVQ_TESTS=1 adds memra-gpu-tests (the NVRTC mmvq template: exactness of every qtype at
# B 1..16 and the per-shape bandwidth table) next to the op tests.
# No backend gates (scripts/device-gates.sh / device-all.sh run those). BENCH=0 skips the
# bench (and the forge), OPS=0 the op tests, NCU=1 adds bench/device-ncu.sh (Nsight Compute on
# the mmvq shapes). MEMRA_GPU_TYPES=q4_K limits memra-gpu-tests' exactness sweep to one type.
# OPS_CASE=attn_decode runs that case of the op tests alone (CK_RUN_CASE). AB="base v1 v2" runs
# bench/device-ab.sh on those variants (prepared here, .carry/ab carried) after the op tests
# and before the bench, with AB_ARGS and AB_BUDGET (default 240 s): one call, one machine start.
# PROBE=hmma runs bench/device-probe.sh hmma (.carry/probe carried) while the 9b forges.
# TIMELINE="16" (tiers) runs bench/device-timeline.sh after the bench: each kernel of an eager
# tick under ncu, summed per op class (where B = 16's time goes, kernel by kernel).
#
#   scripts/device-all.sh carry   HERE (both carry folders)
#   scripts/device-quick.sh       THERE, with .carry/cudabackend and .carry/bench carried
# What comes back in $OUT: ops.log, mmvq.log, bench/ (as device-bench.sh writes it), sass.tgz.
set -u
cd "$(dirname "$0")/.." || exit
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out/bench"
export XDG_CACHE_HOME=/tmp/memra-cache
# shellcheck source=scripts/forge-9b-bg.sh
. "$root/scripts/forge-9b-bg.sh"
if [ "${BENCH:-1}" != 0 ]; then forge_9b_bg 240; else forge=; fi
(
  export LD_LIBRARY_PATH=$root/.carry/cudabackend/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ "${OPS:-1}" != 0 ]; then
    [ -n "${OPS_CASE:-}" ] && export CK_RUN_CASE=$OPS_CASE
    CK_FORK=no timeout "${OPS_LIMIT:-180}" "$root/.carry/cudabackend/bin/memra-gpu-ops-tests" >"$out/ops.log" 2>&1
    echo "memra-gpu-ops-tests rc=$?" >>"$out/ops.log"
  fi
  if [ -n "${MMVQ_TESTS:-}" ]; then # the mmvq template: 15 qtypes x B 1..16 memcmp, bandwidth table
    CK_FORK=no timeout "${MMVQ_LIMIT:-120}" "$root/.carry/cudabackend/bin/memra-gpu-tests" >"$out/mmvq.log" 2>&1
    echo "memra-gpu-tests rc=$?" >>"$out/mmvq.log"
  fi
)
if [ -n "${PROBE:-}" ]; then # a standalone probe while the forge runs on the CPUs
  bench/device-probe.sh "$PROBE" >"$out/probe.txt" 2>&1
  echo "device-probe $PROBE rc=$?" >>"$out/probe.txt"
fi
[ -n "$forge" ] && wait "$forge"
if [ -n "${AB:-}" ]; then # the variants' A/B on the forged 9b (device-ab.sh forges when it is missing)
  mkdir -p "$out/ab"
  # shellcheck disable=SC2086 # a list of variants
  OUT=$out/ab BUDGET=${AB_BUDGET:-240} bench/device-ab.sh $AB >"$out/ab/run.txt" 2>&1
fi
if [ "${BENCH:-1}" != 0 ]; then
  OUT=$out/bench BUDGET=${BENCH_BUDGET:-150} bench/device-bench.sh >"$out/bench/summary.txt" 2>&1
  rm -f "$out/bench/kcache.tgz"
fi
if [ -n "${TIMELINE:-}" ]; then # ncu over one eager tick per tier (the 9b forged above)
  mkdir -p "$out/timeline"
  TIERS=$TIMELINE OUT=$out/timeline bench/device-timeline.sh >"$out/timeline/run.log" 2>&1
  echo "device-timeline rc=$?" >>"$out/timeline/run.log"
fi
if [ -n "${NCU:-}" ]; then # Nsight Compute on the mmvq bench shapes (kernels cached by now)
  OUT=$out bench/device-ncu.sh >"$out/ncu-digest.txt" 2>&1
fi
if [ -n "${SASS_KEYS:-}" ]; then
  # shellcheck disable=SC2086 # a list of keys
  OUT=$out bench/device-sass.sh $SASS_KEYS
fi
[ -f "$out/probe.txt" ] && grep -E "^TABLE\||invariance|FAIL|PASS|rc=|^hmma-probe|^host|^  S=|ACCURACY|INVARIANCE" "$out/probe.txt" | cut -c1-240
[ -f "$out/ab/ab.txt" ] && cat "$out/ab/ab.txt"
[ -f "$out/bench/summary.txt" ] && tail -n 30 "$out/bench/summary.txt"
[ -f "$out/timeline/timeline.txt" ] && grep -E "^B=|^  [a-z_0-9]+ +[0-9]" "$out/timeline/timeline.txt" | head -n 30
[ -f "$out/ncu-digest.txt" ] && tail -n 40 "$out/ncu-digest.txt" | cut -c1-200
[ -f "$out/mmvq.log" ] && grep -E "^TABLE\||Checks|:F:|:E:|rc=|killed" "$out/mmvq.log" | cut -c1-160
[ -f "$out/ops.log" ] && grep -E "Checks|:F:|:E:|rc=" "$out/ops.log"
# the device tool fetches at most 8 files: the files at the top of $OUT (the caller's own too)
# and the bench's reports stay as they are; the rest (logs, the plot script, raw ncu tables,
# A/B folders) goes into one extra.tgz
(
  cd "$out" || exit
  [ -f timeline/timeline.txt ] && cp timeline/timeline.txt timeline.txt
  keep=" bench/bench.txt bench/bench.jsonl bench/summary.txt bench/bench2.txt bench/bench2.jsonl "
  extra=$(find . -mindepth 2 -type f | sed 's|^\./||' | while read -r f; do
    case "$keep" in *" $f "*) ;; *) echo "$f" ;; esac
  done)
  if [ -n "$extra" ]; then
    # shellcheck disable=SC2086 # a list of paths without spaces
    tar -czf extra.tgz $extra && rm -f $extra && find . -mindepth 1 -type d -empty -delete
  fi
)
