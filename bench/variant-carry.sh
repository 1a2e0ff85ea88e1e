#!/usr/bin/env bash
# variant-carry.sh — HERE: every build an in-tick A/B of kernel variants carries, from clean
# worktrees, in one command (bench/device-variant.sh runs them THERE):
#
#   bench/variant-carry.sh PATCH [PATCH2 [PATCH3]]
#
#   .carry/bench       HEAD (committed state only: this tree's uncommitted changes are in no
#                      build) — memra-bench, memra-forge, memra-gpu-ops-tests (HEAD's op cases
#                      run there against the CPU) and their libraries, libsubunit included
#   .carry/bench-alt   HEAD + PATCH, the same
#   .carry/bench-alt2  HEAD + PATCH2, likewise (only with PATCH2); .carry/bench-alt3 HEAD + PATCH3
#   .carry/probe/gdn-probe-{base,alt,alt2,alt3}
#                      bench/gdn_probe.cu of each (gdn_step.cu with the probe's marks)
#
# PACK=1 also packs every .carry/bench* and .carry/probe into .carry/pack/builds.tgz (about
# half their bytes: 39 MB for four builds and the probes, session 28), which a call carries
# instead of the folders when they exceed the 64 MiB a call carries; THERE
# `bench/variant-carry.sh unpack` restores them.
#
# PATCH: anything `git apply` takes (bench/variants/*.diff: their description before the
# diff is skipped). The worktrees live under VARIANT_WT (default /tmp/memra-variant) and stay
# there (the paths baked into each memra-bench; device-hostab.sh links them to the carried
# tree THERE). Then, THERE, with the four folders carried (64 MiB in all; ~55 with two
# variants):
#   VARIANT_PROBES="gdn-probe-base gdn-probe-alt gdn-probe-alt2" VARIANT_CASE=gdn_step \
#   HOSTAB_BUILDS="bench bench-alt bench-alt2" HOSTAB_ARGS="--tiers 1,2,4,8,16 --depths 1024 \
#   --ticks 50 --prefill synthetic --no-eager" bench/device-variant.sh
set -eu
cd "$(dirname "$0")/.."
root=$PWD
if [ "${1:-}" = unpack ]; then # THERE: the packed builds back into .carry/
  tar -xzf "$root/.carry/pack/builds.tgz" -C "$root/.carry"
  exit
fi
if [ $# -lt 1 ] || [ $# -gt 3 ]; then
  echo "usage: bench/variant-carry.sh PATCH [PATCH2 [PATCH3]] | unpack" >&2
  exit 2
fi
for p in "$@"; do
  [ -f "$p" ] || { echo "variant-carry: no patch $p" >&2; exit 2; }
done
wt=${VARIANT_WT:-/tmp/memra-variant}
mkdir -p "$wt" "$root/.carry/probe"

# build NAME CARRY [PATCH]: a worktree of HEAD (+ PATCH) built into .carry/CARRY
build() {
  local name=$1 carry=$2 patch=${3:-} dir=$wt/$1
  git -C "$root" worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
  git -C "$root" worktree add --detach "$dir" HEAD >/dev/null
  if [ -n "$patch" ]; then
    git -C "$dir" apply "$(realpath "$patch")"
  fi
  (cd "$dir" && bench/device-bench.sh carry >/dev/null)
  rm -rf "$root/.carry/$carry"
  mv "$dir/.carry/bench" "$root/.carry/$carry"
  # every build, the base too: a landing's op cases run on HEAD as well
  cmake --build "$dir/build-bench" -j2 --target memra-gpu-ops-tests >/dev/null
  strip --strip-debug -o "$root/.carry/$carry/bin/memra-gpu-ops-tests" \
    "$dir/build-bench/memra-gpu-ops-tests"
  /work/shared/tools/device-libs.sh "$root/.carry/$carry/lib" \
    "$root/.carry/$carry/bin/memra-gpu-ops-tests" >/dev/null
  (cd "$dir" && bench/device-probe.sh gdn-build "$root/.carry/probe/gdn-probe-$name")
  echo "variant-carry: $name ($(git -C "$dir" rev-parse --short HEAD)${patch:+ + $patch}) -> .carry/$carry, .carry/probe/gdn-probe-$name"
}

build base bench
build alt bench-alt "$1"
for i in 2 3; do
  if [ $# -ge $i ]; then
    build alt$i bench-alt$i "${!i}"
  else
    rm -rf "$root/.carry/bench-alt$i" "$root/.carry/probe/gdn-probe-alt$i"
  fi
done
du -sh "$root"/.carry/bench* "$root/.carry/probe"
if [ -n "${PACK:-}" ]; then
  mkdir -p "$root/.carry/pack"
  (cd "$root/.carry" && tar -czf pack/builds.tgz bench bench-alt* probe)
  du -sh "$root/.carry/pack"
fi
