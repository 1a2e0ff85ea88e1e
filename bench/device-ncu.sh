#!/usr/bin/env bash
# device-ncu.sh — Nsight Compute counters of the mmvq kernels on the bench shapes, on the lent
# GPU machine (its image has ncu; it reads counters on the Firecracker runtime only).
#
#   bench/device-ncu.sh     THERE, with .carry/cudabackend carried (scripts/device-gates.sh
#                           carry). Runs memra-gpu-tests with MEMRA_GPU_PROFILE=1: each bench
#                           shape launched once at B = 1, 4, 16 between cuProfilerStart / Stop
#                           (tests/gpu/test_mmvq_gpu.c bench_profile), under
#                           ncu --profile-from-start off --clock-control none.
# What comes back in $OUT: ncu.csv (one row per kernel, the metrics below), ncu.log. A digest
# (time, DRAM %, issue-active %, occupancy, the top stall reasons) prints last.
# NCU_SOURCE=1 instead profiles the shapes of NCU_SHAPES (name prefixes, default
# "lm_head,ffn_gate_up") at B = NCU_B (default 16) with the SourceCounters and WarpStateStats
# sections (PC sampling per SASS instruction) into src.ncu-rep, exports the source page as
# source.csv and prints bench/analysis/ncu_source.py's digest: stall samples by instruction
# class, opcode and stall reason, and the instructions with the most.
set -u
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out"
carry=$root/.carry/cudabackend
export LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/memra-cache}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$ncu" ] || { echo "device-ncu: no ncu on this machine"; exit 1; }
if [ "${NCU_SOURCE:-0}" = 1 ]; then
  MEMRA_GPU_PROFILE=1 MEMRA_GPU_PROFILE_B=${NCU_B:-16} \
    MEMRA_GPU_PROFILE_SHAPES=${NCU_SHAPES:-lm_head,ffn_gate_up} MEMRA_GPU_TYPES=q4_0 \
    MEMRA_GPU_QUICK=1 CK_FORK=no timeout "${NCU_LIMIT:-300}" "$ncu" --profile-from-start off \
    --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
    -f -o "$out/src" "$carry/bin/memra-gpu-tests" >"$out/ncu.log" 2>&1
  echo "ncu rc=$? (source counters)"
  grep -hE "==PROF==|==ERROR==|==WARNING==|profiled:" "$out/ncu.log" | head -n 8
  "$ncu" -i "$out/src.ncu-rep" --page source --csv --print-source sass >"$out/source.csv" 2>>"$out/ncu.log"
  echo "source page rc=$? ($(wc -l <"$out/source.csv") lines)"
  python3 bench/analysis/ncu_source.py "$out/source.csv" --top "${NCU_TOP:-30}"
  exit 0
fi
stalls="long_scoreboard short_scoreboard barrier wait math_pipe_throttle lg_throttle mio_throttle not_selected selected no_instruction dispatch_stall drain membar sleeping branch_resolving tex_throttle imc_miss"
m="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum"
m="$m,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active"
m="$m,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size"
m="$m,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,lts__t_sectors_op_read.sum"
m="$m,smsp__inst_executed.sum"
for s in $stalls; do m="$m,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"; done
MEMRA_GPU_PROFILE=1 MEMRA_GPU_TYPES=q4_0 MEMRA_GPU_QUICK=1 CK_FORK=no \
  timeout "${NCU_LIMIT:-300}" "$ncu" --profile-from-start off --clock-control none --csv \
  --page raw --metrics "$m" "$carry/bin/memra-gpu-tests" >"$out/ncu.csv" 2>"$out/ncu.log"
echo "ncu rc=$? ($(grep -c memra_mmvq "$out/ncu.csv") kernels)"
grep -hE "==PROF==|==ERROR==|==WARNING==" "$out/ncu.log" "$out/ncu.csv" | head -n 6
python3 - "$out/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next((r for r in rows if "Kernel Name" in r), None)
if not hdr:
    sys.exit("no ncu table")
data = [r for r in rows[rows.index(hdr) + 2:] if len(r) == len(hdr)]
col = {h: i for i, h in enumerate(hdr)}
names = [l[len("profiled: "):].rsplit(" B=", 1)[0] for l in open(sys.argv[1]) if l.startswith("profiled:")]
pre = "smsp__average_warps_issue_stalled_"
sc = [h for h in hdr if h.startswith(pre)]
print("%-30s %3s %8s %6s %6s %6s %5s %4s %6s  %s" % ("shape", "B", "us", "dram%", "issue%", "occ%", "regs", "grid", "inst/M", "top stalls (warps per issue)"))
for k, r in enumerate(data):
    f = lambda h: float(r[col[h]].replace(",", "")) if r[col[h]] not in ("", "n/a") else 0.0
    top = sorted(((f(h), h[len(pre):-len("_per_issue_active.ratio")]) for h in sc), reverse=True)[:4]
    nm = names[k] if k < len(names) else "?"
    print("%-30s %3s %8.1f %6.1f %6.1f %6.1f %5d %4d %6.2f  %s" % (
        nm[:30], ["1", "4", "16"][k % 3], f("gpu__time_duration.sum") / 1e3,
        f("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        f("smsp__issue_active.avg.pct_of_peak_sustained_active"),
        f("sm__warps_active.avg.pct_of_peak_sustained_active"), f("launch__registers_per_thread"),
        f("launch__grid_size"), f("smsp__inst_executed.sum") / 1e6,
        " ".join("%s %.1f" % (n, v) for v, n in top)))
PY
