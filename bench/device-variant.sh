#!/usr/bin/env bash
# device-variant.sh — THERE: one device call for a kernel variant built HERE into
# .carry/bench-alt (memra-bench and memra-gpu-ops-tests of the patched tree, see
# bench/device-hostab.sh for the build): the variant's op test case first (VARIANT_CASE, e.g.
# gdn_step: every shape and path against the CPU, memcmp), then bench/device-hostab.sh (the
# tree's .carry/bench against the variant, interleaved, HOSTAB_ROUNDS x HOSTAB_ARGS), then
# each of EXTRA_ARGS (a ';'-separated list of memra-bench option sets, run on the tree's build
# after the A/B, e.g. "--gdn-split 1;--gdn-split 2"). Everything goes to $OUT as at most 8
# files: summary.txt (the tables), probes.txt, ops-alt.log, hostab.txt, all.tgz (the rest).
#   HERE:  apply the patch, build memra-bench (build-bench) and memra-gpu-ops-tests
#          (build-cudabackend), copy .carry/bench to .carry/bench-alt and strip both binaries
#          into .carry/bench-alt/bin, revert, rebuild (bench/results/mmvq-notes.md, session 24)
#   THERE: VARIANT_CASE=gdn_step bench/device-variant.sh  (carry .carry/bench .carry/bench-alt
#          .carry/cudabackend, or no .carry/cudabackend when bench-alt/lib holds the test's libraries)
#   bench/variant-carry.sh PATCH [PATCH2] does HERE's part from clean worktrees of HEAD (base,
#   bench-alt, bench-alt2 and each one's gdn_probe); VARIANT_PROBES (e.g. "gdn-probe-base
#   gdn-probe-alt") runs those probes THERE first, into probes.txt and the summary.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
work=$out/work
mkdir -p "$work"
# the variant's libraries (bench-alt/lib, with the test's libsubunit copied in) where
# .carry/cudabackend is not carried: 26 MB of the 64 MiB a call carries
lib=$root/.carry/cudabackend/lib
[ -d "$lib" ] || lib=$root/.carry/bench-alt/lib
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/memra-cache
for p in ${VARIANT_PROBES:-}; do # gdn_probe builds (bench/variant-carry.sh), GDN_ARGS passed on
  {
    echo "== $p"
    # shellcheck disable=SC2086 # GDN_ARGS: flags or none
    timeout 60 "$root/.carry/probe/$p" ${GDN_ARGS:-} 2>&1
    echo "$p: rc=$?"
  } >>"$out/probes.txt"
done
if [ -n "${VARIANT_CASE:-}" ]; then # every variant build of HOSTAB_BUILDS that has the test
  : >"$out/ops-alt.log"
  for b in ${HOSTAB_BUILDS:-bench-alt}; do
    [ -x "$root/.carry/$b/bin/memra-gpu-ops-tests" ] || continue
    for c in $VARIANT_CASE; do # a case or a space-separated list
      CK_FORK=no CK_RUN_CASE=$c timeout "${OPS_LIMIT:-240}" \
        "$root/.carry/$b/bin/memra-gpu-ops-tests" >>"$out/ops-alt.log" 2>&1
      echo "memra-gpu-ops-tests ($b) $c: rc=$?" >>"$out/ops-alt.log"
    done
  done
fi
OUT=$work bench/device-hostab.sh >"$out/hostab.txt" 2>&1
echo "device-hostab: rc=$?" >>"$out/hostab.txt"
n=0
IFS=';' read -r -a extra <<<"${EXTRA_ARGS:-}"
for args in "${extra[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086 # an option list
  timeout 200 "$root/.carry/bench/bin/memra-bench" --backend cuda -m /tmp/memra-9b.gguf \
    --json "$work/extra-$n.jsonl" $args >"$work/extra-$n.txt" 2>"$work/extra-$n.err"
  echo "extra $n ($args): rc=$?" >>"$work/extra.txt"
done
{
  [ -f "$out/probes.txt" ] && grep -a -v -E "^(gdn-probe:|medians|columns|  cycles)" "$out/probes.txt"
  grep -a -E "Checks:|rc=" "$out/ops-alt.log" 2>/dev/null
  tail -n 70 "$out/hostab.txt" # the sorted table: up to 4 builds x 2 rounds x 5 tiers
  for i in $(seq 1 "$n"); do
    sed -n "${i}p" "$work/extra.txt"
    grep -E '^ +[0-9]+ +[0-9]+ (graph|eager)' "$work/extra-$i.txt"
  done
} >"$out/summary.txt"
tar -czf "$out/all.tgz" -C "$work" . && rm -rf "$work"
cat "$out/summary.txt"
