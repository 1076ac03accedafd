#!/usr/bin/env python3
"""Runs bench/bench_attention_cuda (ours) and tools/sdpa_bench.py (PyTorch SDPA, flash backend)
with the same arguments and prints the table of ours / SDPA (time ratio as SDPA ms / our ms, so
above 1 means we are faster), one row per (seq, kv_heads, pass).

  python3 tools/attn_bench_compare.py [--bench build/bench/bench_attention_cuda] [ARGS...]
  python3 tools/attn_bench_compare.py --ours ours.jsonl --sdpa sdpa.jsonl   (saved outputs)

ARGS (--quick, --seqs=..., --tokens=..., --heads=..., --kv-heads=..., --head-dim=..., --reps=...)
go to both benchmarks unchanged. Both runs together take about two minutes on an H200 at the
default shapes (s = 8k..64k, 64k tokens, 16 heads, kv 16 and 4, head_dim 128).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def key(r):
    return (r["seq"], r["kv_heads"], r["pass"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/bench/bench_attention_cuda")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--ours", help="read our JSON lines from this file instead of running")
    ap.add_argument("--sdpa", help="read SDPA's JSON lines from this file instead of running")
    args, passthrough = ap.parse_known_args()
    ours = load(args.ours) if args.ours else run([args.bench] + passthrough)
    sdpa = (load(args.sdpa) if args.sdpa else
            run([args.python, os.path.join(HERE, "sdpa_bench.py")] + passthrough))
    theirs = {key(r): r for r in sdpa}
    print(f"{'seq':>6} {'batch':>5} {'heads':>5} {'kv':>3} {'pass':>4} {'ours ms':>9} "
          f"{'sdpa ms':>9} {'ours TF/s':>9} {'sdpa TF/s':>9} {'ours/sdpa':>9}")
    for r in ours:
        t = theirs.get(key(r))
        if t is None:
            continue
        print(f"{r['seq']:>6} {r['batch']:>5} {r['heads']:>5} {r['kv_heads']:>3} {r['pass']:>4} "
              f"{r['ms']:>9.3f} {t['ms']:>9.3f} {r['tflops']:>9.1f} {t['tflops']:>9.1f} "
              f"{t['ms'] / r['ms']:>9.2f}")
    if any(t.get("gqa") == "expanded" for t in sdpa):
        print("note: SDPA's flash backend refused enable_gqa; its GQA rows ran on expanded k, v")


if __name__ == "__main__":
    main()
