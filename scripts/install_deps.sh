#!/usr/bin/env bash
# Installs helixpipe's build and test dependencies from Debian's apt. Idempotent: silent and fast
# when everything is already present. Extra package names given as arguments are installed too.
set -euo pipefail

# libdnnl-dev: the bf16 GEMMs of the CPU backend; libjemalloc2: the tuned allocator bench_step
# gives the PyTorch baseline (bench_step --torch also needs python3-torch: pass it as an argument).
pkgs=(build-essential cmake ninja-build pkg-config googletest libgtest-dev libbenchmark-dev
      libopenblas-dev libdnnl-dev libjemalloc2 libopenmpi-dev openmpi-bin libcli11-dev
      nlohmann-json3-dev libfmt-dev "$@")

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
