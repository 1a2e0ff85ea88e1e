#!/usr/bin/env bash
# sanitizer-carry.sh — puts NVIDIA's compute-sanitizer (PyPI nvidia-cuda-sanitizer-api, pinned to
# the device machine's CUDA 13.0 runtime) into .carry/san, here, for the device machine, which has
# the CUDA runtime but no compute-sanitizer: carry .carry/san (28 MB) and bench/device-round.sh's
# ROUND_SANITIZE finds it there. It also writes .carry/sanz/san.txz (the same files, xz: 5.8 MB),
# which bench/device-pack-call.sh unpacks into .carry/san there: carry that one where the 64 MiB
# carry limit is tight (session 33: the pack, 32 MB, plus .carry/san no longer fit beside the
# tree). Needs no GPU. Env: SAN_VERSION (default 13.0.85).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.carry/san
packz() {
  mkdir -p .carry/sanz
  tar -cJf .carry/sanz/san.txz -C "$dest" .
}
if [ -x "$dest/compute-sanitizer" ]; then
  echo "sanitizer-carry.sh: $dest/compute-sanitizer already here" >&2
  [ -f .carry/sanz/san.txz ] || packz
  exit 0
fi
whl=$(mktemp -d)
trap 'rm -rf "$whl"' EXIT
python3 -m pip download -q --no-deps -d "$whl" "nvidia-cuda-sanitizer-api==${SAN_VERSION:-13.0.85}"
python3 -m zipfile -e "$whl"/*.whl "$whl/x"
mkdir -p "$dest"
# the toolkit's layout: the binary and every library it injects in one folder
cp -f "$whl"/x/nvidia/cu13/bin/compute-sanitizer "$whl"/x/nvidia/cu13/lib/*.so "$dest/"
chmod +x "$dest/compute-sanitizer"
"$dest/compute-sanitizer" --version | tail -1
packz
