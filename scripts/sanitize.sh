#!/usr/bin/env bash
# Sanitizer runs of the test suite (docs/sanitizers.md), with GCC:
#   asan: AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover=undefined: the
#         first undefined behaviour ends the test) in build-asan/, over the test binaries listed
#         in asan_targets below and the tests ctest registers for them (MPI ones under mpirun);
#   tsan: ThreadSanitizer in build-tsan/, over the in-process pipeline tests: LocalWorld runs
#         the ranks of a pipeline as threads of one process (tsan_filter below).
# Both folders are configured with -DHP_SANITIZE=... (-O1 -g1, warnings still errors: the code
# compiles cleanly under the sanitizers' instrumentation, no warning is switched off).
# Usage: scripts/sanitize.sh [asan] [tsan]   (default: both)
# Environment: HP_SAN_JOBS (build and ctest jobs, default nproc); HP_SAN_NICE=1 builds and runs
# under nice. Exit code 0 = every selected test passed with no sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(asan tsan)
for k in "${kinds[@]}"; do
  case "$k" in
    asan | tsan) ;;
    *) echo "sanitize: unknown run '$k' (runs: asan tsan)" >&2; exit 2 ;;
  esac
done
jobs=${HP_SAN_JOBS:-$(nproc)}
nice=()
[ "${HP_SAN_NICE:-0}" = 1 ] && nice=(nice)

# Every test binary but test_cuda_emu (the CUDA kernels on a CPU emulation of a warp: a minute in
# a Release build, many times that instrumented, for code that is not host code; it is run in
# CI's ordinary pass) and the CUDA ones (no nvcc here). helixpipe is there for the CLI tests.
asan_targets=(test_util test_schedule test_sim test_kernels test_model test_data test_checkpoint
              test_comm test_comm_mpi_comm test_runtime test_runtime_mpi_executor test_cli
              helixpipe)
# The tests that run pipeline ranks as threads (LocalWorld) and the comm they talk through.
tsan_targets=(test_comm test_runtime)
tsan_filter='LocalComm.*:Executor.*:Grid/ExecutorRun.*:DistTrainerTest.*:TimelineGather.*'
tsan_filter+=':TensorParallelTest.*:PipelineBench.*'

configure() {  # folder, sanitizers
  [ -f "$1/build.ninja" ] && return
  local launcher=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc \
    -DCMAKE_CXX_COMPILER=g++ -DHP_CUDA=OFF -DHP_SANITIZE="$2" "${launcher[@]}" >/dev/null
}

scripts/install_deps.sh
start=$SECONDS
for k in "${kinds[@]}"; do
  if [ "$k" = asan ]; then
    configure build-asan address,undefined
    "${nice[@]}" cmake --build build-asan -j "$jobs" --target "${asan_targets[@]}"
    # halt_on_error: a report fails the test even where the program would go on. ASan's and
    # LeakSanitizer's reports go to files (one per process), so that one from a helixpipe that a
    # CLI test starts, expecting it to fail, cannot pass unseen: any file there fails the run.
    # (UBSan's still go to standard error, where the CLI tests' harnesses look for them.)
    reports=$PWD/build-asan/sanitizer-reports
    rm -rf "$reports" && mkdir -p "$reports"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$reports/report
    base=check_initialization_order=1:strict_init_order=1:halt_on_error=1:log_path=$reports/report
    failed=0
    (cd build-asan &&
      # In-process tests with leak checking. Unbuilt targets register *_NOT_BUILT placeholders.
      ASAN_OPTIONS=$base:detect_leaks=1 "${nice[@]}" ctest --output-on-failure -j "$jobs" \
        -LE mpi -E '_NOT_BUILT|^DistCli[A-Za-z]*Test\.') || failed=1
    (cd build-asan &&
      # Under mpirun, without leak checking: Open MPI keeps allocations until exit in components
      # it unloads first, so LeakSanitizer reports them with no stack it could name or suppress.
      ASAN_OPTIONS=$base:detect_leaks=0 "${nice[@]}" ctest --output-on-failure -j "$jobs" \
        -R '^DistCli[A-Za-z]*Test\.|^comm_mpi|^runtime_mpi' -E '_NOT_BUILT') || failed=1
    if [ -n "$(ls -A "$reports")" ]; then
      for f in "$reports"/*; do echo "== $f"; head -n 40 "$f"; done
      echo "sanitize: asan: sanitizer reports in $reports" >&2
      failed=1
    fi
    [ "$failed" = 0 ] || { echo "sanitize: asan: FAILED" >&2; exit 1; }
  else
    configure build-tsan thread
    "${nice[@]}" cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
    # One OpenMP and one OpenBLAS thread: libgomp is not built with ThreadSanitizer, so its
    # barriers are invisible to it and every parallel loop would be reported as a race. The ranks'
    # own threads (the subject here) are unaffected.
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    for t in "${tsan_targets[@]}"; do
      "${nice[@]}" "build-tsan/tests/$t" --gtest_filter="$tsan_filter" --gtest_brief=1
    done
  fi
done
echo "sanitize: ${kinds[*]}: clean ($((SECONDS - start)) s)"
