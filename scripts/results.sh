#!/usr/bin/env bash
# Regenerates docs/results.md (and docs/results/*) in one run on this machine:
#   1. `mpirun -np 2 helixpipe profile` at each sequence length: part costs (F, I, W per part, one
#      thread, both ranks busy as in the pipeline), the link from an MPI ping-pong, and a whole
#      single-process step (P = 1) against the part-cost prediction;
#   2. helixpipe simulate on P = 1 and helixpipe compare on P = 2 with those costs;
#   3. `mpirun -np 2 helixpipe bench` at each sequence length: measured steps of every schedule
#      with their natural recomputation and again with the same policy (no-attn) for the
#      baselines, beside the simulator's prediction, with Chrome traces and a side-by-side timeline;
#   4. helixpipe sweep and plan on the paper's 7B model (simulator only);
# then scripts/results_report.py writes the Markdown and the SVG plots.
# Usage: scripts/results.sh [build-dir]
#   env SEQS="1024 2048"      sequence lengths (default 1024 ... 16384; about 40 minutes here)
#       BENCH_SEQS="..."      the lengths benchmarked on 2 ranks (default: SEQS)
#       PRECISION=bf16        profile and bench in bf16 (default fp32; docs/precision.md), into
#                             docs/results_bf16/ and docs/results_bf16.md instead
# Keep the machine otherwise idle while it runs: every figure is a time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
HP="$BUILD/helixpipe"
[[ -x "$HP" ]] || { echo "results.sh: $HP not found; build it first (cmake --build $BUILD --target helixpipe)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "results.sh: mpirun not found; apt-get install openmpi-bin" >&2; exit 1; }
SEQS=${SEQS:-"1024 2048 4096 8192 16384"}
BENCH_SEQS=${BENCH_SEQS:-$SEQS}
STEP_MAX=${STEP_MAX:-8192}   # the P = 1 whole-step check is skipped above this (minutes each)
PRECISION=${PRECISION:-fp32}
case $PRECISION in
  fp32) OUT=docs/results; REPORT=docs/results.md ;;
  bf16) OUT=docs/results_bf16; REPORT=docs/results_bf16.md ;;
  *) echo "results.sh: PRECISION=$PRECISION is not fp32 or bf16" >&2; exit 1 ;;
esac
mkdir -p "$OUT"
rm -f "$OUT"/bench_s*.json "$OUT"/bench_s*.txt "$OUT"/timeline_side_by_side_*.svg
rm -rf "$OUT"/traces_s*
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The benchmark model: attention dominates at long sequences.
cat > "$OUT/model.json" <<'JSON'
{"hidden_size":256,"intermediate_size":768,"num_attention_heads":4,"num_key_value_heads":4,
 "num_hidden_layers":8,"vocab_size":256}
JSON
MODEL="$OUT/model.json"
# Full-speed OpenBLAS kernels (the shell's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE halve them).
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
# Two ranks, each bound to its own core (mpirun's default for two ranks, made explicit).
mpi2() { run mpirun "${root[@]}" -np 2 --bind-to core "$@"; }

{
  echo "{\"cpu\": $(python3 -c 'import json,sys;print(json.dumps(sys.argv[1]))' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"),"
  echo " \"cores\": $(nproc), \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"mpirun\": \"$(mpirun --version 2>/dev/null | head -1)\","
  echo " \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"commit\": \"$(git rev-parse --short HEAD)\"}"
} > "$OUT/machine.json"
start=$(date +%s)

for s in $SEQS; do
  step=()
  if (( s <= STEP_MAX )); then step=(--step-microbatches=2); fi
  echo "== profile s=$s ($(( $(date +%s) - start )) s)" >&2
  mpi2 "$HP" profile --model="$MODEL" --seq-len="$s" --threads=1 --repeats=3 --warmup=1 \
      --precision="$PRECISION" \
      "${step[@]}" --out="$OUT/costs_s$s.json" --format=json > "$OUT/profile_s$s.json"
  run "$HP" simulate --schedule=1f1b --stages=1 --microbatches=2 --model="$MODEL" \
      --seq-len="$s" --part-costs="$OUT/costs_s$s.json" --format=json > "$OUT/sim_p1_s$s.json"
  for rc in natural none no-attn; do
    extra=()
    [[ $rc != natural ]] && extra=(--recompute=$rc)
    run "$HP" compare --stages=2 --microbatches=4 --model="$MODEL" --seq-len="$s" \
        --part-costs="$OUT/costs_s$s.json" "${extra[@]}" --format=json > "$OUT/compare_s${s}_$rc.json"
  done
done

# Measured pipeline steps on 2 MPI ranks. Timed steps after one warm-up: 3 up to 4k, then fewer
# (a 16k step of one schedule takes over a minute here). The same-policy runs (baselines with
# no-attn, like HelixPipe) leave out GPipe at 16k for time.
for s in $BENCH_SEQS; do
  steps=3
  (( s >= 8192 )) && steps=2
  (( s >= 16384 )) && steps=1
  same="1f1b,zb1p,gpipe"
  (( s >= 16384 )) && same="1f1b,zb1p"
  echo "== bench s=$s natural ($(( $(date +%s) - start )) s)" >&2
  mkdir -p "$OUT/traces_s$s"
  mpi2 "$HP" bench --model="$MODEL" --seq-len="$s" --microbatches=4 --threads=1 --steps=$steps \
      --precision="$PRECISION" --schedules=1f1b,gpipe,zb1p,helix1,helix2 --part-costs="$OUT/costs_s$s.json" \
      --timeline="$OUT/timeline_side_by_side_helix_F2_s$s.svg" --trace-dir="$OUT/traces_s$s" \
      --out="$OUT/bench_s$s.json" > "$OUT/bench_s$s.txt"
  echo "== bench s=$s same policy ($(( $(date +%s) - start )) s)" >&2
  mpi2 "$HP" bench --model="$MODEL" --seq-len="$s" --microbatches=4 --threads=1 --steps=$steps \
      --precision="$PRECISION" --schedules=$same --recompute=no-attn --part-costs="$OUT/costs_s$s.json" \
      --trace-dir="$OUT/traces_s$s" --out="$OUT/bench_s${s}_noattn.json" > "$OUT/bench_s${s}_noattn.txt"
done

last=${SEQS##* }
run "$HP" simulate --schedule=helix --folds=2 --stages=2 --microbatches=4 --model="$MODEL" \
    --seq-len="$last" --part-costs="$OUT/costs_s$last.json" --timeline="$OUT/timeline_helix_F2_s$last.svg" > /dev/null
run "$HP" simulate --schedule=1f1b --stages=2 --microbatches=4 --model="$MODEL" \
    --seq-len="$last" --part-costs="$OUT/costs_s$last.json" --timeline="$OUT/timeline_1f1b_s$last.svg" > /dev/null
"$HP" sweep --model=7b --device=h20 --seq-lens=32k,64k,128k --gpus=32,64 > "$OUT/sweep_7b_h20.txt"
"$HP" plan --model=7b --seq-len=131072 --gpus=64 --device=h20 --memory=96 > "$OUT/plan_7b_128k_h20.txt"
echo "{\"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"seconds\": $(( $(date +%s) - start ))}" > "$OUT/machine_after.json"
python3 scripts/results_report.py "$OUT" "$REPORT" "$SEQS" "$BENCH_SEQS"
echo "wrote $REPORT and $OUT/ in $(( $(date +%s) - start )) s" >&2
