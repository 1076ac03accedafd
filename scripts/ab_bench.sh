#!/usr/bin/env bash
# Compares two builds of helixpipe on the same machine in one run: bench_step (one fp32 training
# step, median of its timed steps) and bench_executor (tokens/s of every schedule on in-process
# ranks), old and new alternating round by round so that drift of the machine hits both alike.
# Prints every round, the paired new/old ratios and their medians.
#
#   scripts/ab_bench.sh OLD_BUILD NEW_BUILD [ROUNDS=9] [SEQ=2048] [EXEC_STEPS=20] [STEP_STEPS=5]
#
# Each build folder must hold bench/bench_step and bench/bench_executor (for example
# `ninja -C DIR bench_step bench_executor`). Run it on an otherwise idle machine. OpenBLAS is left
# to pick its kernel for this CPU: the OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE overrides are unset.
set -euo pipefail
old=${1:?usage: ab_bench.sh OLD_BUILD NEW_BUILD [ROUNDS] [SEQ] [EXEC_STEPS]}
new=${2:?usage: ab_bench.sh OLD_BUILD NEW_BUILD [ROUNDS] [SEQ] [EXEC_STEPS]}
rounds=${3:-9}
seq=${4:-2048}
exec_steps=${5:-20}
step_steps=${6:-5}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
for b in "$old" "$new"; do
  for t in bench_step bench_executor; do
    [ -x "$b/bench/$t" ] || { echo "ab_bench: $b/bench/$t is missing (build it first)" >&2; exit 2; }
  done
done

step_s() {  # median step seconds printed by bench_step
  "$1/bench/bench_step" --seq "$seq" --threads 2 --steps "$step_steps" --warmup 1 2>&1 |
    awk '/^fp32 step \(fwd\+bwd\+adamw\):/ {print $4}'
}
exec_tok() {  # sum of tokens/s over every schedule bench_executor runs
  "$1/bench/bench_executor" 2 "$exec_steps" 2>&1 |
    awk '$2 == "F1" || $2 == "F2" {s += $(NF-4)} END {print s}'
}

echo "round  step_old_s step_new_s new/old   exec_old_tok/s exec_new_tok/s new/old"
ratios_step=()
ratios_exec=()
for r in $(seq 1 "$rounds"); do
  # Alternate which build goes first, so neither always runs on a warmer machine.
  if [ $((r % 2)) -eq 1 ]; then
    so=$(step_s "$old"); sn=$(step_s "$new"); eo=$(exec_tok "$old"); en=$(exec_tok "$new")
  else
    sn=$(step_s "$new"); so=$(step_s "$old"); en=$(exec_tok "$new"); eo=$(exec_tok "$old")
  fi
  # A step time: lower is better, so new/old speed is old_time / new_time.
  rs=$(awk -v o="$so" -v n="$sn" 'BEGIN {printf "%.3f", o / n}')
  re=$(awk -v o="$eo" -v n="$en" 'BEGIN {printf "%.3f", n / o}')
  ratios_step+=("$rs")
  ratios_exec+=("$re")
  printf "%5d  %10s %10s %7s   %14s %14s %7s\n" "$r" "$so" "$sn" "$rs" "$eo" "$en" "$re"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "median speed new/old (1.000 = same; > 1 = new faster):" \
  "bench_step $(median "${ratios_step[@]}"), bench_executor $(median "${ratios_exec[@]}")"
