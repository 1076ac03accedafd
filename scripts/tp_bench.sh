#!/usr/bin/env bash
# Tensor parallelism against pipeline and data parallelism on this machine's 2 ranks (issue 13's
# measurement; docs/tensor-parallel.md "Measured"): for each sequence length, a part-cost profile
# (its MPI ping-pong gives the link the simulator charges), then `bench` of one model as
#   tp2: T=2 x P=1 (1f1b) on the whole-stage profile (split by bench, calibrated),
#   tp2r: T=2 x P=1 (1f1b) on a profile of one rank's shards (profile --tensor-parallel=2,
#         measured just before it; used as measured, --no-calibrate),
#   pp2: P=2 x T=1 (1f1b and helix F=1), dp2: D=2 x P=1 (1f1b),
# each M micro-batches per replica, the median of STEPS timed steps after one warm-up, with the
# simulator's step prediction from the profile (calibrated per step; for D=2 one replica's pipeline
# and its gradient all-reduce).
# Usage: scripts/tp_bench.sh [OUT_DIR]   (env: MODEL=small SEQS="4096 16384" M=4 STEPS=3
#        LAYOUTS="tp2 tp2r pp2 dp2" HP=build/helixpipe)
# Run on an otherwise idle machine. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset here (they
# halve sgemm on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tp_bench_out}
MODEL=${MODEL:-small}
SEQS=${SEQS:-"4096 16384"}
M=${M:-4}
STEPS=${STEPS:-3}
LAYOUTS=${LAYOUTS:-"tp2 tp2r pp2 dp2"}
HP=${HP:-build/helixpipe}
[[ -x $HP ]] || { echo "tp_bench.sh: $HP not built; run scripts/build.sh first" >&2; exit 1; }
mkdir -p "$OUT"
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
mpi2() { mpirun "${root[@]}" -np 2 --bind-to core "$@"; }
want() { [[ " $LAYOUTS " == *" $1 "* ]]; }
for s in $SEQS; do
  echo "== profile s=$s" >&2
  mpi2 "$HP" profile --model="$MODEL" --seq-len="$s" --threads=1 --repeats=2 --warmup=1 \
      --out="$OUT/costs_s$s.json" > "$OUT/profile_s$s.txt"
  common=(--model="$MODEL" --seq-len="$s" --microbatches="$M" --threads=1 --steps="$STEPS")
  whole=(--part-costs="$OUT/costs_s$s.json")
  if want tp2; then
    echo "== bench s=$s T=2 x P=1" >&2
    mpi2 "$HP" bench "${common[@]}" "${whole[@]}" --stages=1 --tensor-parallel=2 \
        --schedules=1f1b --out="$OUT/tp2_s$s.json" | tee "$OUT/tp2_s$s.txt"
  fi
  if want tp2r; then
    echo "== profile s=$s --tensor-parallel=2, bench s=$s T=2 x P=1 on it" >&2
    mpi2 "$HP" profile --model="$MODEL" --seq-len="$s" --threads=1 --repeats=2 --warmup=1 \
        --tensor-parallel=2 --out="$OUT/costs_tp2_s$s.json" > "$OUT/profile_tp2_s$s.txt"
    mpi2 "$HP" bench "${common[@]}" --part-costs="$OUT/costs_tp2_s$s.json" --no-calibrate \
        --stages=1 --tensor-parallel=2 --schedules=1f1b --out="$OUT/tp2r_s$s.json" \
        | tee "$OUT/tp2r_s$s.txt"
  fi
  if want pp2; then
    echo "== bench s=$s P=2" >&2
    mpi2 "$HP" bench "${common[@]}" "${whole[@]}" --stages=2 --schedules=1f1b,helix1 \
        --out="$OUT/pp2_s$s.json" | tee "$OUT/pp2_s$s.txt"
  fi
  if want dp2; then
    echo "== bench s=$s D=2 x P=1" >&2
    mpi2 "$HP" bench "${common[@]}" "${whole[@]}" --stages=1 --data-parallel=2 \
        --schedules=1f1b --out="$OUT/dp2_s$s.json" | tee "$OUT/dp2_s$s.txt"
  fi
done
python3 - "$OUT" $SEQS <<'PY'
import json, os, sys
out, seqs = sys.argv[1], sys.argv[2:]
print(f"{'s':>6} {'layout':<22} {'tokens/s':>9} {'vs P=2 1f1b':>11} {'MiB/rank':>9} "
      f"{'step':>8} {'predicted':>9} {'error':>7} "
      f"{'TP comm':>9} {'transfer':>9} {'link model':>10} {'error':>7} {'profile coll':>12} "
      f"{'error':>7}")
for s in seqs:
    rows = []
    for f, lay in (("tp2", "T=2 x P=1"), ("tp2r", "T=2 x P=1 rank-prof"), ("pp2", "P=2"),
                   ("dp2", "D=2 x P=1")):
        path = f"{out}/{f}_s{s}.json"
        if not os.path.exists(path):
            continue
        for r in json.load(open(path))["rows"]:
            rows.append((f"{lay} {r['label']}", r))
    base = next((r["tokens_per_s"] for l, r in rows if l == "P=2 1f1b"), None)
    for l, r in rows:
        tp, tr, pred = r.get("tp_comm_s"), r.get("tp_transfer_s"), r.get("tp_comm_pred_s")
        err = f"{100 * (pred - tr) / tr:+.1f}%" if tr else "-"
        pc = r.get("tp_comm_pred_profile_s")
        perr = f"{100 * (pc - tr) / tr:+.1f}%" if pc and tr else "-"
        step, ps = r["step_s"], r.get("predicted_step_s")
        serr = f"{100 * (ps - step) / step:+.1f}%" if ps else "-"
        vs = f"{r['tokens_per_s'] / base:.3f}" if base else "-"
        print(f"{s:>6} {l:<22} {r['tokens_per_s']:>9.0f} {vs:>11} "
              f"{r['peak_rank_bytes'] / 2**20:>9.1f} "
              f"{step:>7.3f}s {(f'{ps:.3f}s' if ps else '-'):>9} {serr:>7} "
              f"{(f'{tp:.3f} s' if tp else '-'):>9} {(f'{tr:.3f} s' if tr else '-'):>9} "
              f"{(f'{pred:.3f} s' if pred else '-'):>10} {err:>7} "
              f"{(f'{pc:.3f} s' if pc else '-'):>12} {perr:>7}")
PY
