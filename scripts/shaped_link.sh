#!/usr/bin/env bash
# The overlap condition, measured (docs/trends.md): 2 MPI ranks talk over TCP on the loopback
# device, whose bandwidth a token-bucket qdisc (`tc ... tbf`) limits to each rate in turn. At each
# rate: `profile` measures the shaped link (MPI ping-pong), then `bench` runs 1F1B and HelixPipe F=2
# (P=2) and predicts both on that link. tools/shaped_link_report.py then draws the measured
# HelixPipe / 1F1B ratio against the link bandwidth beside the simulator's curve
# (OUT/shaped_link.svg, OUT/report.json) and reports where each crosses 1 and where one layer's
# attention equals its transfer.
# Usage: scripts/shaped_link.sh [OUT_DIR]
#   env: SEQ=4096 M=4 STEPS=3 RATES="8gbit 4gbit 3gbit 2gbit 1500mbit 1gbit 500mbit"
#        PROGRESS=1 (HP_COMM_PROGRESS_THREAD for the TCP runs: over TCP a transfer moves only while a
#        rank is inside MPI, so without the thread nothing overlaps compute) HP=build/helixpipe
# Needs root (tc on lo) and an otherwise idle machine; the qdisc is removed on exit, and the script
# refuses to start if lo already has one (it would not restore it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-shaped_link_out}
SEQ=${SEQ:-4096}
M=${M:-4}
STEPS=${STEPS:-3}
RATES=${RATES:-"8gbit 4gbit 3gbit 2gbit 1500mbit 1gbit 500mbit"}
PROGRESS=${PROGRESS:-1}
HP=${HP:-build/helixpipe}
[[ -x $HP ]] || { echo "shaped_link.sh: $HP not built; run scripts/build.sh first" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "shaped_link.sh: needs root to shape lo with tc" >&2; exit 1; }
command -v tc >/dev/null || { echo "shaped_link.sh: needs tc (apt-get install iproute2)" >&2; exit 1; }
if tc qdisc show dev lo | grep -qv 'noqueue'; then
  echo "shaped_link.sh: lo already has a qdisc ($(tc qdisc show dev lo | head -1)); remove it first" >&2
  exit 1
fi
mkdir -p "$OUT"
trap 'tc qdisc del dev lo root 2>/dev/null || true' EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
# The model of scripts/results.sh (docs/results.md): 8 layers, h=256, 4 heads, MLP 768.
cat > "$OUT/model.json" <<'JSON'
{"hidden_size":256,"intermediate_size":768,"num_attention_heads":4,"num_key_value_heads":4,
 "num_hidden_layers":8,"vocab_size":256}
JSON
mpi2() { mpirun --allow-run-as-root -np 2 --bind-to core "$@"; }
tcp=(--mca btl tcp,self --mca btl_tcp_if_include lo -x HP_COMM_PROGRESS_THREAD="$PROGRESS")
printf '{"model": "%s", "seq_len": %d, "microbatches": %d, "stages": 2, "layers": 8, "steps": %d, "progress_thread": %d, "rates": [%s], "date": "%s", "commit": "%s"}\n' \
  "$OUT/model.json" "$SEQ" "$M" "$STEPS" "$PROGRESS" "$(printf '"%s",' $RATES | sed 's/,$//')" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(git rev-parse --short HEAD)" > "$OUT/run.json"
echo "== profile (shared memory, unshaped): part costs" >&2
mpi2 "$HP" profile --model="$OUT/model.json" --seq-len="$SEQ" --threads=1 --repeats=3 --warmup=1 \
    --out="$OUT/costs.json" > "$OUT/profile.txt"
for r in $RATES; do
  # burst: 1 ms of the rate, at least 256 KiB. lo's MTU is 64 KiB, and a token bucket drops every
  # packet larger than its burst: with a burst of one MTU the TCP connection stalls for good.
  bits=$(numfmt --from=si "$(tr a-z A-Z <<< "${r%bit}")")
  burst=$(( bits / 8 / 1000 > 262144 ? bits / 8 / 1000 : 262144 ))
  tc qdisc replace dev lo root tbf rate "$r" burst "$burst" latency 200ms
  echo "== $r: link" >&2
  mpi2 "${tcp[@]}" "$HP" profile --model="$OUT/model.json" --seq-len="$SEQ" --threads=1 \
      --repeats=1 --warmup=0 --format=json > "$OUT/link_$r.json"
  python3 - "$OUT/costs.json" "$OUT/link_$r.json" "$OUT/costs_$r.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["link"] = json.load(open(sys.argv[2]))["part_costs"]["link"]
json.dump(c, open(sys.argv[3], "w"), indent=1)
PY
  echo "== $r: bench 1f1b, helix F=2" >&2
  mpi2 "${tcp[@]}" "$HP" bench --model="$OUT/model.json" --seq-len="$SEQ" --microbatches="$M" \
      --threads=1 --steps="$STEPS" --schedules=1f1b,helix2 --part-costs="$OUT/costs_$r.json" \
      --out="$OUT/bench_$r.json" > "$OUT/bench_$r.txt"
done
tc qdisc del dev lo root
python3 tools/shaped_link_report.py "$OUT" "$HP" | tee "$OUT/report.txt"
