#!/usr/bin/env bash
# bf16 against fp32 on the demo's text: the `small` preset trained from the same seed on the same
# batches in fp32, in bf16 and, as the yardstick, in fp32 again with each step's sequences grouped
# into half as many micro-batches of two (the same mean loss and gradient, summed in another
# order), single process; then every loss curve in one SVG and each run's gap to fp32 per step
# after warm-up (tools/loss_curves.py; docs/precision.md quotes the result).
# Environment: HP_CURVES_DIR (default runs/precision), HP_CURVES_STEPS (default 300),
# HP_CURVES_THREADS (default 2), HP_CURVES_BATCH (sequences of 256 tokens per step, even; default
# 8, the demo's), HP_CURVES_LR (default 1e-3; the demo trains at 3e-3, where fp32 itself has loss
# spikes, docs/precision.md). Needs a CPU with AVX512-BF16 for the bf16 run. Exit status:
# loss_curves.py's (1 when a run leaves the 2% band after warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
bin=$PWD/build/helixpipe
out=${HP_CURVES_DIR:-runs/precision}
steps=${HP_CURVES_STEPS:-300}
threads=${HP_CURVES_THREADS:-2}
batch=${HP_CURVES_BATCH:-8}
lr=${HP_CURVES_LR:-1e-3}
warmup=30
if ! [[ $batch =~ ^[0-9]+$ ]] || ((batch < 2 || batch % 2)); then
  echo "precision_curves.sh: HP_CURVES_BATCH=$batch must be an even number of sequences >= 2" >&2
  exit 2
fi
mkdir -p "$out"
text=$out/corpus.txt
scripts/corpus.sh "$text"
train() {  # name precision micro-batches micro-batch-size
  rm -f "$out/$1.jsonl"
  "$bin" train --model=small --data="$text" --seq-len=256 --microbatch-size="$4" \
    --microbatches="$3" --steps="$steps" --lr="$lr" --warmup="$warmup" --seed=1234 \
    --threads="$threads" --precision="$2" --log="$out/$1.jsonl"
}
train fp32 fp32 "$batch" 1
train fp32_reordered fp32 $((batch / 2)) 2
train bf16 bf16 "$batch" 1
tools/loss_curves.py --warmup="$warmup" --max-gap=0.02 --smooth=10 --svg="$out/curves.svg" \
  --title="small preset, S=256, $batch sequences/step, lr $lr: fp32, fp32 reordered, bf16" \
  fp32="$out/fp32.jsonl" "fp32 reordered=$out/fp32_reordered.jsonl" bf16="$out/bf16.jsonl"
