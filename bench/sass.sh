#!/usr/bin/env bash
# sass.sh — the SASS of the kernels the engine would run, here, without a GPU: plans a model
# (memra-plan), compiles every NVRTC specialization of those plans the way the runtime does
# (--precompile sm_90: same sources, options and cache format as on the device), then prints
# per kernel its registers, stack and spill instructions and the instruction mix of every loop
# (bench/analysis/sass_loops.py). Static counts: for A/B of template changes (TPL=DIR compiles
# another templates folder, e.g. .carry/ab/NAME after `bench/device-ab.sh prepare NAME`), not
# a substitute for the device's executed counts (bench/device-ncu.sh).
#
#   bench/sass.sh [-m MODEL] [--tiers 1,2,16] [KEY_GLOB...]
#     e.g. bench/sass.sh -m /tmp/memra-9b.gguf --tiers 1,16 'mmvq:qt=q4_K:*'
# MODEL defaults to models/default.gguf (scripts/demo.sh forges it); KEY_GLOB (fnmatch over
# the cache keys, e.g. 'mmvq:*b=16*', 'attn_decode:*') selects kernels, default all.
# The disassembler comes from PyPI (nvidia-cuda-cuobjdump and -nvdisasm, CUDA 13) into .tools/
# the first time, unless cuobjdump is on PATH. Env: SASS_KEEP=DIR keeps the cache (cubins) in DIR;
# SASS_MIN (default 40) hides loops shorter than that. AGAINST=DIR compiles the same plans
# with DIR's templates too and prints, per kernel, whether its SASS is the same (exit status 1
# when any differs): whether a template change touched kernels it should leave alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
model=models/default.gguf
tiers=1,2,4,8,16
globs=()
while [ $# -gt 0 ]; do
  case "$1" in
  -m) model=$2 && shift 2 ;;
  --tiers) tiers=$2 && shift 2 ;;
  -h | --help) sed -n '2,17p' "$0" && exit 0 ;;
  *) globs+=("$1") && shift ;;
  esac
done
[ -f "$model" ] || { echo "sass.sh: no model $model (scripts/demo.sh forges the default)" >&2; exit 1; }
plan=build/memra-plan
[ -x "$plan" ] || { echo "sass.sh: $plan not built (scripts/setup.sh)" >&2; exit 1; }

cuobjdump=$(command -v cuobjdump || true)
if [ -z "$cuobjdump" ]; then
  cuobjdump=$root/.tools/cuda-sass/nvidia/cu13/bin/cuobjdump
  if [ ! -x "$cuobjdump" ]; then
    echo "sass.sh: fetching cuobjdump and nvdisasm (PyPI, CUDA 13) into .tools/" >&2
    whl=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$whl" 'nvidia-cuda-cuobjdump>=13,<14' \
      'nvidia-cuda-nvdisasm>=13,<14'
    mkdir -p .tools/cuda-sass
    for w in "$whl"/*.whl; do python3 -m zipfile -e "$w" .tools/cuda-sass; done
    chmod +x .tools/cuda-sass/nvidia/cu13/bin/*
    rm -rf "$whl"
  fi
  export PATH=$(dirname "$cuobjdump"):$PATH # cuobjdump -sass runs nvdisasm
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=${SASS_KEEP:-$work/cache}
[ -n "${TPL:-}" ] && export MEMRA_NVRTC_TEMPLATES=$(cd "$TPL" && pwd)
"$plan" -m "$model" -o "$work/plans" --tiers "$tiers" -q --precompile sm_90 --cache-dir "$cache" \
  --jobs "$(nproc)" >"$work/plan.log" 2>&1 || { cat "$work/plan.log" >&2; exit 1; }
echo "# $(basename "$model"), tiers $tiers, templates ${TPL:-embedded}; cuobjdump $("$cuobjdump" --version | tail -1)"
against=()
if [ -n "${AGAINST:-}" ]; then
  MEMRA_NVRTC_TEMPLATES=$(cd "$AGAINST" && pwd) "$plan" -m "$model" -o "$work/plans2" --tiers "$tiers" \
    -q --precompile sm_90 --cache-dir "$work/cache2" --jobs "$(nproc)" >"$work/plan2.log" 2>&1 ||
    { cat "$work/plan2.log" >&2; exit 1; }
  against=(--against "$work/cache2")
  echo "# against the templates of $AGAINST"
fi
python3 bench/analysis/sass_loops.py --cuobjdump "$cuobjdump" --min "${SASS_MIN:-40}" \
  ${against[@]+"${against[@]}"} "$cache" ${globs[@]+"${globs[@]}"}
