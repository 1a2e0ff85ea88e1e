#!/usr/bin/env bash
# device-hostnoise.sh — THERE (.carry/bench carried): where the host time per tick's spread
# comes from (session 9 measured 6.5 and 22 us with the same binaries minutes apart,
# bench/results/mmvq-notes.md run 20). After the 9b forge and a sync, HOSTNOISE_RUNS runs
# (default 3) of memra-bench (tiers 1, 16 at depth 1024, HOSTNOISE_TICKS ticks, no isolation)
# in each mode: free (as the scheduler places it), pinned to one core of the GPU's NUMA node
# (taskset), and pinned to a core of the other node when there is one. Before every run: the
# load average and the pinned core's clock. Table last: mode run B median_ms host_us submit
# host_p99_us.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/out}
mkdir -p "$out"
carry=$root/.carry/bench
export LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64
export XDG_CACHE_HOME=/tmp/memra-cache
mkdir -p "$XDG_CACHE_HOME"
# shellcheck source=scripts/forge-9b-bg.sh
. scripts/forge-9b-bg.sh
forge_9b_bg 300
{
  nvidia-smi topo -m 2>&1 | head -12
  lscpu | grep -E "^(Model name|CPU\(s\)|NUMA node|Thread|Core|Socket)"
} >"$out/host.txt"
wait $forge
sync
# the GPU's NUMA node: its PCI device's local_cpulist
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -1 | tr 'A-F' 'a-f')
near=$(cat "/sys/bus/pci/devices/${bus#0000}/local_cpulist" 2>/dev/null ||
  cat "/sys/bus/pci/devices/${bus}/local_cpulist" 2>/dev/null || echo 0)
near_cpu=$(printf '%s' "$near" | sed -E 's/^([0-9]+).*/\1/')
all=$(seq 0 $(($(nproc) - 1)))
far_cpu=
for c in $all; do
  grep -q "^$c$" <(for r in ${near//,/ }; do seq "${r%-*}" "${r#*-}"; done) || { far_cpu=$c; break; }
done
echo "GPU ${bus:-?}: local cpus ${near}; near core $near_cpu, far core ${far_cpu:-none}" >>"$out/host.txt"
field() { printf '%s' "$1" | sed -nE "s/.*\"$2\":([^,}]*).*/\1/p"; }
: >"$out/table.txt"
modes="free near"
[ -n "$far_cpu" ] && modes="$modes far"
for r in $(seq 1 "${HOSTNOISE_RUNS:-3}"); do
  for m in $modes; do
    case $m in
    free) pin= ;;
    near) pin="taskset -c $near_cpu" ;;
    far) pin="taskset -c $far_cpu" ;;
    esac
    echo "$m-$r: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/host.txt"
    # shellcheck disable=SC2086 # pin is a word list
    timeout 200 $pin "$carry/bin/memra-bench" --backend cuda -m /tmp/memra-9b.gguf --tiers 1,16 \
      --depths 1024 --ticks "${HOSTNOISE_TICKS:-200}" --no-isolation --prefill synthetic \
      --json "$out/$m-$r.jsonl" >"$out/$m-$r.txt" 2>"$out/$m-$r.err"
    grep '"mode":"graph"' "$out/$m-$r.jsonl" | while read -r l; do
      printf '%-5s %3s %4s %10s %8s %8s %10s\n' "$m" "$r" "$(field "$l" tier)" \
        "$(field "$l" median_ms)" "$(field "$l" host_us)" "$(field "$l" host_launch_us)" \
        "$(field "$l" host_p99_us)"
    done >>"$out/table.txt"
  done
done
cat "$out/host.txt"
printf '%-5s %3s %4s %10s %8s %8s %10s\n' mode run B median_ms host_us submit host_p99
sort -k3,3n -k1,1 -s "$out/table.txt"
