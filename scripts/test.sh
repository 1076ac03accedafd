#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (ctest). Exit code 0 = all passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
