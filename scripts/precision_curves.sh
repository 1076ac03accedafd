#!/usr/bin/env bash
# bf16 against fp32 on the demo's text: the `small` preset trained twice from the same seed on the
# same batches, once per precision, single process; then both loss curves in one SVG and the
# largest per-step gap after warm-up (tools/loss_curves.py; docs/precision.md quotes the result).
# Environment: HP_CURVES_DIR (default runs/precision), HP_CURVES_STEPS (default 300),
# HP_CURVES_THREADS (default 2). Needs a CPU with AVX512-BF16 for the bf16 run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
bin=$PWD/build/helixpipe
out=${HP_CURVES_DIR:-runs/precision}
steps=${HP_CURVES_STEPS:-300}
threads=${HP_CURVES_THREADS:-2}
warmup=30
mkdir -p "$out"
text=$out/corpus.txt
scripts/corpus.sh "$text"
for p in fp32 bf16; do
  rm -f "$out/$p.jsonl"
  "$bin" train --model=small --data="$text" --seq-len=256 --microbatch-size=1 --microbatches=8 \
    --steps="$steps" --lr=3e-3 --warmup="$warmup" --seed=1234 --threads="$threads" \
    --precision="$p" --log="$out/$p.jsonl"
done
tools/loss_curves.py --warmup="$warmup" --max-gap=0.02 --smooth=10 --svg="$out/curves.svg" \
  --title="small preset, S=256, 8 sequences/step: fp32 and bf16" \
  fp32="$out/fp32.jsonl" bf16="$out/bf16.jsonl"
