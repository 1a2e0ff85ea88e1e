#!/usr/bin/env bash
# device-timeline.sh — where one decode tick's device time goes, kernel by kernel: each kernel
# of an eager 9b tick under Nsight Compute (serialized, so no PDL overlap: each kernel's own
# duration), summed per op class and set against the tick's graph-replay median from the same
# machine. What the sum does not cover is what launch boundaries cost in the real tick.
#
#   bench/device-timeline.sh   THERE, with .carry/bench carried (bench/device-bench.sh carry);
#                              the 9b forge must exist (/tmp/memra-9b.gguf, e.g. after
#                              bench/device-bench.sh in the same call) or it forges one.
# Env: TIERS (default "1 16"), DEPTH (default 1024), NCU_LIMIT seconds per tier (default 150).
# What comes back in $OUT: timeline.txt (per tier: per-class sums over the last profiled tick
# and the kernel list of that tick) and timeline.tgz (the raw ncu tables, one row per kernel).
set -u
cd "$(dirname "$0")/.."
root=$PWD
carry=$root/.carry/bench
out=${OUT:-$root/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export XDG_CACHE_HOME=/tmp/memra-cache
src=$(cat "$carry/srcdir" 2>/dev/null)
if [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
fi
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$ncu" ] || { echo "device-timeline: no ncu on this machine"; exit 1; }
model=/tmp/memra-9b.gguf
if [ ! -s "$model" ]; then
  timeout 240 "$carry/bin/memra-forge" --preset 9b --seed 1 -o "$model" >"$out/timeline-forge.log" 2>&1 ||
    { echo "device-timeline: forge failed"; exit 1; }
fi
m="gpu__time_duration.sum,launch__grid_size,launch__block_size,dram__bytes_read.sum"
for b in ${TIERS:-1 16}; do
  # two eager ticks after one warmup; the copy probe kept tiny (its kernels are filtered out)
  timeout "${NCU_LIMIT:-150}" "$ncu" --clock-control none --csv --page raw --metrics "$m" \
    "$carry/bin/memra-bench" -m "$model" --backend cuda --tiers "$b" --depths "${DEPTH:-1024}" \
    --ticks 2 --warmup 1 --no-graph --no-isolation --prefill synthetic --copy-mib 64 --copy-reps 1 \
    >"$out/timeline-B$b.csv" 2>"$out/timeline-B$b.log"
  echo "ncu B=$b rc=$?"
done
python3 - "$out" ${TIERS:-1 16} <<'PY' | tee "$out/timeline.txt"
import csv, re, sys, collections
out, tiers = sys.argv[1], sys.argv[2:]
def cls(name, grid):
    for k in ("memra_mmvq", "rms_norm_q8", "silu_mul_q8", "gdn_step", "attn_split", "attn_combine",
              "attn_prep", "embed", "sample", "mmvq_moe", "moe_"):
        if k in name:
            return k.replace("memra_", "")
    return None
for b in tiers:
    rows = [r for r in csv.reader(open("%s/timeline-B%s.csv" % (out, b))) if r]
    hdr = next((r for r in rows if "Kernel Name" in r), None)
    if not hdr:
        print("B=%s: no ncu table" % b); continue
    c = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[rows.index(hdr) + 2:] if len(r) == len(hdr)]
    f = lambda r, h: float(r[c[h]].replace(",", "") or 0)
    ks = [(r[c["Kernel Name"]], int(f(r, "launch__grid_size")), int(f(r, "launch__block_size")),
           f(r, "gpu__time_duration.sum") / 1e3, f(r, "dram__bytes_read.sum") / 1e6) for r in data]
    ks = [k for k in ks if cls(k[0], k[1])]
    ends = [i for i, k in enumerate(ks) if "sample" in k[0]]
    if len(ends) < 2:
        print("B=%s: fewer than two ticks profiled" % b); continue
    tick = ks[ends[-2] + 1: ends[-1] + 1]  # the last whole tick (embed .. sample)
    agg = collections.OrderedDict()
    for k in tick:
        a = agg.setdefault(cls(k[0], k[1]), [0, 0.0, 0.0]); a[0] += 1; a[1] += k[3]; a[2] += k[4]
    tot = sum(a[1] for a in agg.values())
    print("B=%s depth tick: %d kernels, sum of isolated durations %.3f ms, DRAM read %.1f MB" % (
        b, len(tick), tot / 1e3, sum(a[2] for a in agg.values())))
    print("  %-14s %5s %9s %7s %8s %9s %7s" % ("class", "n", "sum_us", "share", "mean_us", "MB", "GB/s"))
    for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print("  %-14s %5d %9.1f %6.1f%% %8.2f %9.1f %7.0f" % (k, a[0], a[1], 100 * a[1] / tot, a[1] / a[0], a[2], a[2] / a[1] * 1e3 if a[1] else 0))
    print("  kernels of the tick (name, grid, block, us, MB):")
    for k in tick[:40]:
        print("    %-22s %6d %5d %8.2f %8.2f" % (cls(k[0], k[1]), k[1], k[2], k[3], k[4]))
    print("    ... (%d more in timeline-B%s.csv)" % (max(0, len(tick) - 40), b))
PY
(cd "$out" && tar -czf timeline.tgz timeline-B*.csv timeline-B*.log && rm -f timeline-B*.csv timeline-B*.log)
