#!/usr/bin/env python3
"""The paper's experiment grid (docs/trends.md "The grid"): runs `helixpipe compare` once per
model, sequence length, device and pipeline size, in the paper's layout (TP8 inside a node,
the pipeline across nodes, DP1, m = 2p micro-batches of one sequence), and writes one markdown
table of tokens/s and of every schedule's ratio to 1F1B.

  tools/trends_table.py HELIXPIPE_BINARY [--out FILE] [--update DOC] [--models ...] [--seqs ...]
                        [--devices ...] [--stages ...]

--update DOC replaces the text between the lines `<!-- trends-grid:begin -->` and
`<!-- trends-grid:end -->` of DOC (docs/trends.md) with the table; --out writes the raw rows as
JSON. Rows that do not fit in the device's memory are marked, not counted as runs."""
import argparse
import json
import subprocess
import sys

BASELINES = ["1f1b", "1f1b no-attn", "1f1b selective", "zb1p", "adapipe", "weipipe"]
BEGIN, END = "<!-- trends-grid:begin -->", "<!-- trends-grid:end -->"


def compare(hp, model, seq, device, stages, tp):
    cmd = [hp, "compare", f"--model={model}", f"--seq-len={seq}", f"--device={device}",
           f"--tp={tp}", f"--stages={stages}", f"--microbatches={2 * stages}", "--format=json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"trends_table: {' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    rows = {r["label"]: r for r in json.loads(out.stdout)["results"]}
    return " ".join(cmd[1:]), rows


def cell(r, base):
    if r is None or "error" in r:
        return "n/a"
    mark = "" if r.get("fits", True) else " (does not fit)"
    return f"{r['tokens_per_s'] / base:.3f}{mark}" if base else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hp")
    ap.add_argument("--out")
    ap.add_argument("--update")
    ap.add_argument("--models", nargs="+", default=["1.3b", "3b", "7b", "gpt-1.3b", "gpt-3b", "gpt-7b"])
    ap.add_argument("--seqs", nargs="+", type=int, default=[32768, 65536, 131072])
    ap.add_argument("--devices", nargs="+", default=["h20", "a800"])
    ap.add_argument("--stages", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--tp", type=int, default=8)
    a = ap.parse_args()
    lines = [f"| model | device | p (GPUs) | s | helix F=2 tok/s | helix F=2 / 1F1B | "
             + " | ".join(f"{b} / 1F1B" for b in BASELINES[1:]) + " | helix F=2 / best baseline |",
             "|---|---|---|---|---|---|" + "---|" * (len(BASELINES) - 1) + "---|"]
    raw = []
    for model in a.models:
        for device in a.devices:
            for p in a.stages:
                for s in a.seqs:
                    cmd, rows = compare(a.hp, model, s, device, p, a.tp)
                    raw.append({"command": cmd, "results": list(rows.values())})
                    one = rows.get("1f1b")
                    base = one["tokens_per_s"] if one and "error" not in one and one.get("fits", True) else 0
                    helix = rows.get("helix F=2")
                    fits = [rows[b]["tokens_per_s"] for b in BASELINES
                            if b in rows and "error" not in rows[b] and rows[b].get("fits", True)]
                    best = max(fits) if fits else 0
                    hx = helix["tokens_per_s"] if helix and "error" not in helix else 0
                    hx_fits = helix is not None and "error" not in helix and helix.get("fits", True)
                    vs_best = f"{hx / best:.3f}" if best and hx_fits else "n/a"
                    hx_text = f"{hx:,.0f}" + ("" if hx_fits else " (does not fit)")
                    lines.append(f"| {model} | {device.upper()} | {p} ({p * a.tp}) | {s // 1024}k | "
                                 f"{hx_text} | {cell(helix, base)} | "
                                 + " | ".join(cell(rows.get(b), base) for b in BASELINES[1:])
                                 + f" | {vs_best} |")
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if a.out:
        json.dump(raw, open(a.out, "w"), indent=1)
    if a.update:
        doc = open(a.update).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"trends_table: {a.update} has no {BEGIN} ... {END} lines to replace")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        open(a.update, "w").write(head + BEGIN + "\n" + table + END + tail)


if __name__ == "__main__":
    main()
