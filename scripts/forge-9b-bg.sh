# forge-9b-bg.sh — sourced by the device scripts (scripts/device-all.sh, device-quick.sh):
# forge_9b_bg LIMIT starts memra-forge --preset 9b on the device's cores in the background
# into /tmp/memra-9b.gguf and sets $forge to its pid; /tmp/memra-9b.gguf.done appears when it
# succeeded (bench/device-bench.sh then skips its own forge). Needs $root (repository root,
# .carry/bench carried). Where an earlier call on the same warm machine forged it, $forge is
# empty and nothing runs.
forge_9b_bg() {
  local m9=/tmp/memra-9b.gguf
  forge=
  [ -f "$m9.done" ] && [ -f "$m9" ] && return 0
  (
    t0=$(date +%s)
    nice -n 10 timeout "$1" "$root/.carry/bench/bin/memra-forge" --preset 9b --seed 1 -o "$m9" \
      >/tmp/forge-9b.log 2>&1 && echo "$(($(date +%s) - t0)) s in the background" >"$m9.done"
  ) &
  forge=$!
}
