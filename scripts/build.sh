#!/usr/bin/env bash
# Configures and builds helixpipe into build/ (Release, Ninja). Usage: scripts/build.sh [targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install_deps.sh"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j "$(nproc)" -- "$@"
