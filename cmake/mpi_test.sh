#!/usr/bin/env bash
# Runs one multi-rank test command with a hard time limit.
# Usage: mpi_test.sh TIMEOUT_S EXPECT_FAIL_REGEX -- command args...
# EXPECT_FAIL_REGEX empty: pass iff the command exits 0 within TIMEOUT_S.
# Otherwise: pass iff it exits non-zero within TIMEOUT_S and its output matches the regex (grep -E);
# that is how a deliberately killed or hung rank is asserted to end the job with a clear message.
set -u
timeout_s=$1
expect=$2
shift 2
[[ ${1:-} == "--" ]] && shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
timeout --kill-after=5 "$timeout_s" "$@" >"$log" 2>&1
rc=$?
cat "$log"
# 124/137 are also what a job whose rank died of SIGKILL returns, so look at the clock too.
if [[ ($rc -eq 124 || $rc -eq 137) && $((SECONDS - start)) -ge $timeout_s ]]; then
  echo "mpi_test.sh: FAIL: '$*' still running after ${timeout_s} s (killed; exit $rc)"
  exit 1
fi
if [[ -z $expect ]]; then
  [[ $rc -eq 0 ]] || echo "mpi_test.sh: FAIL: exit status $rc"
  exit $rc
fi
if [[ $rc -eq 0 ]]; then
  echo "mpi_test.sh: FAIL: expected the run to fail (with output matching '$expect') but it exited 0"
  exit 1
fi
if ! grep -Eq -- "$expect" "$log"; then
  echo "mpi_test.sh: FAIL: the run failed (exit $rc) but no output line matches '$expect'"
  exit 1
fi
echo "mpi_test.sh: ok: failed as expected (exit $rc) with a message matching '$expect'"
exit 0
