#!/usr/bin/env bash
# The main job on its built-in default: a small LLaMA-style model (the `small` preset: 4 layers,
# hidden 256) trained with HelixPipe (two folds, recomputation without attention) on 2 MPI ranks,
# on real English text (the Vim user manual, usr_*.txt; the King James Bible where it is absent),
# for a few minutes. It ends with sample text, the loss curve (SVG), the measured timeline (SVG)
# and the checkpoint folder. Environment overrides: HP_DEMO_DIR (output folder, default
# runs/demo), HP_DEMO_STEPS (default 400).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
bin=$PWD/build/helixpipe
out=${HP_DEMO_DIR:-runs/demo}
steps=${HP_DEMO_STEPS:-400}
mkdir -p "$out"

# 1. Text -> token file (bytes are tokens).
text=$out/corpus.txt
scripts/corpus.sh "$text"
"$bin" tokenize --input="$text" --out="$out/corpus.tok"

# 2. Train on 2 ranks with HelixPipe. One rank per core, one compute thread each.
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
rm -rf "$out/checkpoint"
mpirun "${mpi_flags[@]}" -np 2 -x OMP_NUM_THREADS=1 \
  "$bin" train --schedule=helix --folds=2 --stages=2 --model=small \
  --data="$out/corpus.tok" --seq-len=256 --microbatch-size=1 --microbatches=8 \
  --steps="$steps" --lr=3e-3 --warmup=30 --threads=1 \
  --save="$out/checkpoint" --save-every=100 \
  --log="$out/train.jsonl" --loss-svg="$out/loss.svg" --timeline="$out/timeline.svg"

# 3. What did it learn?
echo
echo "== sample text (helixpipe generate --checkpoint=$out/checkpoint) =="
"$bin" generate --checkpoint="$out/checkpoint" --prompt="The " --tokens=300 --temperature=0.8 \
  --top-k=20 --threads=1
echo
echo "== results =="
echo "checkpoint:        $out/checkpoint  (Hugging Face Llama layout: config.json + model.safetensors)"
echo "loss curve:        $out/loss.svg"
echo "measured timeline: $out/timeline.svg  (last step, both ranks)"
echo "metrics (JSONL):   $out/train.jsonl"
