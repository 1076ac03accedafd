#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) into build-fuzz/ and runs each for
# SECONDS seconds (default 30), starting from its seed corpus tests/fuzz_corpus/<target>/
# (docs/formats/fuzzing.md).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   TARGET: token_files schedule model_config safetensors checkpoint shard_index train_state
#           sim_inputs
# Environment: HP_FUZZ_JOBS (build jobs, default nproc); HP_FUZZ_NICE=1 runs build and fuzzing
# under nice. Exit code 0 = no crash, leak or timeout; otherwise the inputs that failed are under
# build-fuzz/crashes/<target>/ (reproduce one with build-fuzz/fuzz/fuzz_<target> FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
all=(token_files schedule model_config safetensors checkpoint shard_index train_state sim_inputs)
secs=${1:-30}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  if [[ ! " ${all[*]} " == *" $t "* ]]; then
    echo "fuzz: unknown target '$t' (targets: ${all[*]})" >&2
    exit 2
  fi
done
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "fuzz: SECONDS must be a whole number >= 1, got '$secs'" >&2
  exit 2
fi
nice=()
[ "${HP_FUZZ_NICE:-0}" = 1 ] && nice=(nice)

scripts/install_deps.sh clang libclang-rt-dev libomp-dev
if [ ! -f build-fuzz/build.ninja ]; then
  launcher=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DHP_FUZZ=ON -DHP_CUDA=OFF -DHP_WERROR=OFF "${launcher[@]}" >/dev/null
fi
"${nice[@]}" cmake --build build-fuzz -j "${HP_FUZZ_JOBS:-$(nproc)}" \
  --target "${targets[@]/#/fuzz_}"

failed=()
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  crashes=build-fuzz/crashes/$t
  mkdir -p "$work" "$crashes"
  echo "fuzz: $t for ${secs}s (seeds: tests/fuzz_corpus/$t)"
  # New inputs go to the first folder (build-fuzz/corpus/<t>); the checked-in seeds stay as they are.
  if ! "${nice[@]}" build-fuzz/fuzz/fuzz_"$t" "$work" "tests/fuzz_corpus/$t" \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$crashes/" > "build-fuzz/fuzz_$t.log" 2>&1; then
    failed+=("$t")
    tail -n 40 "build-fuzz/fuzz_$t.log"
  fi
  grep -E "^stat::number_of_executed_units|^Done" "build-fuzz/fuzz_$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs under build-fuzz/crashes/)" >&2
  exit 1
fi
echo "fuzz: ${targets[*]}: no crash in ${secs}s each"
