#!/usr/bin/env bash
# Regenerates docs/results.md (and docs/results/*.json, *.svg) in one run:
#   1. helixpipe profile at each sequence length (measured part costs on this machine, 1 thread)
#      plus a whole single-process step (P = 1) measured against the part-cost prediction;
#   2. helixpipe simulate on P = 1 with those costs (the simulator's own prediction of that step);
#   3. helixpipe compare on P = 2 with the measured costs (every schedule, natural and common
#      recompute policies), and one simulated HelixPipe timeline;
#   4. helixpipe sweep on the 7B / H20 model of the paper (simulator only);
# then scripts/results_report.py writes the Markdown and the SVG plots.
# Usage: scripts/results.sh [build-dir]    (env SEQS="1024 2048" to shorten; about 5 min here)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
HP="$BUILD/helixpipe"
[[ -x "$HP" ]] || { echo "results.sh: $HP not found; build it first (cmake --build $BUILD --target helixpipe)" >&2; exit 1; }
SEQS=${SEQS:-"1024 2048 4096 8192 16384"}
STEP_MAX=${STEP_MAX:-8192}   # the whole-step check is skipped above this (it takes minutes)
OUT=docs/results
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
# The benchmark model: attention dominates at long sequences.
cat > "$TMP/model.json" <<'JSON'
{"hidden_size":256,"intermediate_size":768,"num_attention_heads":4,"num_key_value_heads":4,
 "num_hidden_layers":8,"vocab_size":256}
JSON
cp "$TMP/model.json" "$OUT/model.json"
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }

{
  echo "{\"cpu\": $(python3 -c 'import json,sys;print(json.dumps(sys.argv[1]))' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"),"
  echo " \"cores\": $(nproc), \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"commit\": \"$(git rev-parse --short HEAD)\"}"
} > "$OUT/machine.json"

for s in $SEQS; do
  step=()
  if (( s <= STEP_MAX )); then step=(--step-microbatches=2); fi
  echo "== profile s=$s" >&2
  run "$HP" profile --model="$TMP/model.json" --seq-len="$s" --threads=1 --repeats=3 --warmup=1 \
      "${step[@]}" --out="$OUT/costs_s$s.json" --format=json > "$OUT/profile_s$s.json"
  run "$HP" simulate --schedule=1f1b --stages=1 --microbatches=2 --model="$TMP/model.json" \
      --seq-len="$s" --part-costs="$OUT/costs_s$s.json" --format=json > "$OUT/sim_p1_s$s.json"
  for rc in natural none no-attn; do
    extra=()
    [[ $rc != natural ]] && extra=(--recompute=$rc)
    run "$HP" compare --stages=2 --microbatches=4 --model="$TMP/model.json" --seq-len="$s" \
        --part-costs="$OUT/costs_s$s.json" "${extra[@]}" --format=json > "$OUT/compare_s${s}_$rc.json"
  done
done
# Measured pipeline steps (P=2 in-process ranks, 1 thread each) for the shorter lengths only:
# a 16k step of all five schedules would take tens of minutes on this 2-core machine.
BENCH_SEQS=${BENCH_SEQS:-"1024 2048 4096"}
for s in $BENCH_SEQS; do
  echo "== bench s=$s" >&2
  tl=()
  [[ $s == "${BENCH_SEQS##* }" ]] && tl=(--timeline="$OUT/timeline_side_by_side_helix_F2_s$s.svg")
  run "$HP" bench --model="$TMP/model.json" --seq-len="$s" --stages=2 --microbatches=4 --threads=1 \
      --steps=1 --part-costs="$OUT/costs_s$s.json" "${tl[@]}" --out="$OUT/bench_s$s.json" > "$OUT/bench_s$s.txt"
done
last=${SEQS##* }
run "$HP" simulate --schedule=helix --folds=2 --stages=2 --microbatches=4 --model="$TMP/model.json" \
    --seq-len="$last" --part-costs="$OUT/costs_s$last.json" --timeline="$OUT/timeline_helix_F2_s$last.svg" > /dev/null
run "$HP" simulate --schedule=1f1b --stages=2 --microbatches=4 --model="$TMP/model.json" \
    --seq-len="$last" --part-costs="$OUT/costs_s$last.json" --timeline="$OUT/timeline_1f1b_s$last.svg" > /dev/null
"$HP" sweep --model=7b --device=h20 --seq-lens=32k,64k,128k --gpus=32,64 > "$OUT/sweep_7b_h20.txt"
echo "{\"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" > "$OUT/machine_after.json"
python3 scripts/results_report.py "$OUT" docs/results.md "$SEQS" "$BENCH_SEQS"
echo "wrote docs/results.md and $OUT/" >&2
