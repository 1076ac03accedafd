#!/usr/bin/env bash
# The main job on its built-in default. Until training lands it compares the pipeline schedules.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
./build/helixpipe compare --model=small --seq-len=16384 --stages=4 --microbatches=8 --device=h100
