#!/usr/bin/env python3
"""Writes docs/results.md and its SVG plots from the JSON files scripts/results.sh produced.
Usage: results_report.py <results-dir> <markdown-out> "<seq lens>"  (called by scripts/results.sh)."""
import json
import os
import sys

rdir, md_path, seqs = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split()]
bench_seqs = [int(x) for x in sys.argv[4].split()] if len(sys.argv) > 4 else []
rel = os.path.relpath(rdir, os.path.dirname(md_path))


def load(name):
    with open(os.path.join(rdir, name)) as f:
        return json.load(f)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def ms(x):
    return f"{1e3 * x:.2f}"


def mib(x):
    return f"{x / 2**20:.1f}"


machine = load("machine.json")
machine.update(load("machine_after.json"))
prof = {s: load(f"profile_s{s}.json") for s in seqs}
simp1 = {s: load(f"sim_p1_s{s}.json") for s in seqs}
cmp = {(s, rc): load(f"compare_s{s}_{rc}.json") for s in seqs for rc in ("natural", "none", "no-attn")}
info0 = prof[seqs[0]]["info"]


def rows(s, rc):
    return {r["label"]: r for r in cmp[(s, rc)]["results"] if "makespan" in r}


bench = {s: {r["label"]: r for r in load(f"bench_s{s}.json")["rows"]} for s in bench_seqs}
labels = [l for l in ("gpipe", "1f1b", "zb1p", "helix F=1", "helix F=2") if l in rows(seqs[0], "natural")]


# ---- SVG line plot ---------------------------------------------------------------------------
def line_plot(path, title, series, ylabel, logy=False):
    import math
    W, H, L, R, T, B = 640, 360, 70, 150, 40, 50
    xs = [math.log2(s) for s in seqs]
    ys = [v for _, pts in series for v in pts if v is not None]
    fy = (lambda v: math.log10(v)) if logy else (lambda v: v)
    lo, hi = min(fy(v) for v in ys), max(fy(v) for v in ys)
    if hi - lo < 1e-9:
        hi = lo + 1
    pad = 0.08 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    X = lambda x: L + (x - xs[0]) / max(xs[-1] - xs[0], 1e-9) * (W - L - R)
    Y = lambda v: T + (hi - fy(v)) / (hi - lo) * (H - T - B)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">sequence length s (tokens)</text>',
           f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" text-anchor="middle">{ylabel}</text>']
    for s, x in zip(seqs, xs):
        out.append(f'<text x="{X(x):.1f}" y="{H-B+16}" text-anchor="middle">{s}</text>')
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        val = 10 ** v if logy else v
        yy = T + (hi - v) / (hi - lo) * (H - T - B)
        out.append(f'<line x1="{L-4}" y1="{yy:.1f}" x2="{W-R}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L-6}" y="{yy+4:.1f}" text-anchor="end">{val:.3g}</text>')
    for i, (name, pts) in enumerate(series):
        c = colors[i % len(colors)]
        p = [(X(x), Y(v)) for x, v in zip(xs, pts) if v is not None]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                   (c, " ".join(f"{a:.1f},{b:.1f}" for a, b in p)))
        for a, b in p:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{W-R+10}" y="{T+16*i+10}" fill="{c}">{name}</text>')
    out.append("</svg>\n")
    write_atomic(path, "\n".join(out))


line_plot(os.path.join(rdir, "ratio_vs_1f1b.svg"), "P=2 predicted throughput / 1F1B (measured part costs)",
          [(l, [rows(s, "natural")[l]["tokens_per_s"] / rows(s, "natural")["1f1b"]["tokens_per_s"] for s in seqs])
           for l in labels], "ratio to 1F1B")
line_plot(os.path.join(rdir, "p1_step.svg"), "P=1 step: measured vs predicted (s)",
          [("measured", [prof[s]["info"].get("step", {}).get("measured_s") for s in seqs]),
           ("parts sum", [prof[s]["info"].get("step", {}).get("predicted_s") for s in seqs]),
           ("simulator", [simp1[s]["makespan"] for s in seqs])], "seconds", logy=True)
line_plot(os.path.join(rdir, "memory_imbalance.svg"), "P=2 predicted peak memory: max stage / min stage",
          [(l, [max(st["peak_activation_bytes"] for st in rows(s, "natural")[l]["stages"]) /
                max(1, min(st["peak_activation_bytes"] for st in rows(s, "natural")[l]["stages"])) for s in seqs])
           for l in labels], "stage peak ratio")

if bench_seqs:
    _seqs = seqs
    seqs = bench_seqs
    line_plot(os.path.join(rdir, "measured_ratio_vs_1f1b.svg"), "P=2 MEASURED throughput / 1F1B (in-process ranks)",
              [(l, [bench[x][l]["tokens_per_s"] / bench[x]["1f1b"]["tokens_per_s"] if l in bench[x] else None
                    for x in bench_seqs]) for l in labels], "ratio to 1F1B")
    seqs = _seqs

# ---- Markdown ---------------------------------------------------------------------------------
md = []
A = md.append
A("# Results: measured part costs, P=1 check, P=2 predictions\n")
A("Generated by `scripts/results.sh` (do not edit by hand; rerun it). Everything below comes from "
  "one run of that script.\n")
A("## Machine\n")
A(f"- CPU: {machine['cpu']} ({machine['cores']} cores visible), OpenBLAS core **{info0['blas_core']}**, "
  f"kernels at {info0['threads']} thread; `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` unset.")
A(f"- Run at {machine['date']} on commit `{machine['commit']}`. Load average before "
  f"{machine['load_before']}, after {machine['load_after']} (the 2 cores are shared with other "
  "builds and tests, so every time here carries that noise; medians of 3 repetitions after 1 warm-up).")
A(f"- Model ([{rel}/model.json]({rel}/model.json)): h=256, ffn 768, 4 heads, 8 layers, vocab 256, "
  "fp32, micro-batch 1 sequence; sequence lengths " + ", ".join(str(s) for s in seqs) + ".\n")
A("## What was and was not measured\n")
A("Measured on this machine: every part's F, I, W (`helixpipe profile`), a whole single-process "
  "training step (P=1), and whole pipeline steps of every schedule on P=2 ranks (`helixpipe bench`, "
  "s = " + ", ".join(str(x) for x in bench_seqs) + "). The P=2 ranks are two threads of one process "
  "(the executor over LocalWorld, in-memory messages, one kernel thread each), not `mpirun` ranks: the "
  "`mpirun ... helixpipe train --schedule` command was not on main in time. Longer sequences (and "
  "the tables marked *predicted*) are the simulator driven by the measured part costs. The link cost "
  "is an in-process memcpy estimate (the stated fallback), not an MPI ping-pong. One timed step per "
  "schedule after one warm-up step (to keep the whole run near 10 minutes here).\n")
A("## Measured part costs (ms per micro-batch per part, median)\n")
A("| s | attn F | attn I | attn W | post F | post I | post W | pre F+I | head F+I+W | embed F+I+W | attn recompute (no-attn) |")
A("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in seqs:
    c = prof[s]["part_costs"]
    A(f"| {s} | {ms(c['attn']['F'])} | {ms(c['attn']['I'])} | {ms(c['attn']['W'])} | {ms(c['post']['F'])} | "
      f"{ms(c['post']['I'])} | {ms(c['post']['W'])} | {ms(c['pre']['F'] + c['pre']['I'])} | "
      f"{ms(sum(c['head'].values()))} | {ms(sum(c['embed'].values()))} | {ms(c['attn_recompute_F'])} |")
a = [prof[s]["part_costs"]["attn"]["F"] for s in seqs]
growth = ", ".join(f"{a[i+1]/a[i]:.2f}x" for i in range(len(a) - 1))
A(f"\nAttention F per doubling of s: {growth} (quadratic would be 4x; the QKV projection inside attn "
  "in weights mode is linear in s, so the ratio approaches 4 as s grows).\n")
A("## P=1: whole step measured vs predicted\n")
A("One training step of all 8 layers, 2 micro-batches, no recomputation, single process. *Parts sum* "
  "adds the profiled part times; *simulator* is `helixpipe simulate --schedule=1f1b --stages=1` on the "
  "same part-cost file. Memory: the value store's measured peak vs the simulator's peak activation "
  "bytes.\n")
A("| s | measured | parts sum | error | simulator | error | peak mem measured (MiB) | predicted (MiB) |")
A("|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in seqs:
    st = prof[s]["info"].get("step")
    sim = simp1[s]
    simmem = max(x["peak_activation_bytes"] for x in sim["stages"]) if sim["stages"] and "peak_activation_bytes" in sim["stages"][0] else 0
    if st:
        m = st["measured_s"]
        A(f"| {s} | {m:.3f} s | {st['predicted_s']:.3f} s | {100*(st['predicted_s']-m)/m:+.1f}% | "
          f"{sim['makespan']:.3f} s | {100*(sim['makespan']-m)/m:+.1f}% | {mib(st['peak_store_bytes'])} | {mib(simmem)} |")
    else:
        A(f"| {s} | (skipped) | - | - | {sim['makespan']:.3f} s | - | - | {mib(simmem)} |")
A(f"\n![P=1 step]({rel}/p1_step.svg)\n")
if bench_seqs:
    A("## P=2 measured (in-process ranks) vs predicted, M=4\n")
    A("Per row: measured step time (slowest stage) and the simulator's prediction from that s's "
      "measured part costs; bubble = 1 - busy/total of the worse stage; comm wait = the longer "
      "stage's time blocked in waits; memory = each stage's peak ValueStore bytes measured vs the "
      "simulator's peak activation bytes.\n")
    for s_ in bench_seqs:
        rr = bench[s_]
        A(f"**s = {s_}**\n")
        A("| schedule | recompute | tokens/s | vs 1F1B | bubble | comm wait | step measured | predicted | error | peak MiB s0/s1 measured | predicted |")
        A("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for l in labels:
            if l not in rr:
                continue
            r = rr[l]
            mm = " / ".join(mib(x["peak_bytes"]) for x in r["stages_measured"])
            pm = " / ".join(mib(x) for x in r.get("predicted_peak_bytes", []))
            pr = r.get("predicted_step_s", 0)
            A(f"| {l} | {r['recompute']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s']/rr['1f1b']['tokens_per_s']:.3f} | "
              f"{100*r['bubble_fraction']:.1f}% | {1e3*r['comm_wait_s']:.1f} ms | {r['step_s']:.3f} s | {pr:.3f} s | "
              f"{100*(pr-r['step_s'])/r['step_s']:+.1f}% | {mm} | {pm} |")
        A("")
    A(f"Simulated (top) and measured (bottom) timeline, HelixPipe F=2, s={bench_seqs[-1]}: "
      f"[timeline_side_by_side_helix_F2_s{bench_seqs[-1]}.svg]({rel}/timeline_side_by_side_helix_F2_s{bench_seqs[-1]}.svg)\n")
    A(f"![measured ratio]({rel}/measured_ratio_vs_1f1b.svg)\n")
A("## P=2 predictions from the measured costs (M=4 micro-batches)\n")
A("Natural recomputation policies (helix no-attn, the others none). tokens/s and bubble are the "
  "simulator's; comm wait is the larger stage's wait; memory is peak activation bytes per stage.\n")
for s in seqs:
    rr = rows(s, "natural")
    A(f"**s = {s}**\n")
    A("| schedule | recompute | tokens/s | vs 1F1B | bubble | comm wait | peak mem s0 / s1 (MiB) |")
    A("|---|---|---:|---:|---:|---:|---:|")
    for l in labels:
        r = rr[l]
        wait = max(x["wait"] for x in r["stages"])
        mem = " / ".join(mib(x["peak_activation_bytes"]) for x in r["stages"])
        A(f"| {l} | {r['recompute']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s']/rr['1f1b']['tokens_per_s']:.3f} | "
          f"{100*r['bubble_fraction']:.1f}% | {1e3*wait:.1f} ms | {mem} |")
    A("")
A("Same policy for all (ratio to 1F1B under that policy):\n")
A("| s | policy | " + " | ".join(labels) + " |")
A("|---:|---|" + "---:|" * len(labels))
for s in seqs:
    for rc in ("none", "no-attn"):
        rr = rows(s, rc)
        A(f"| {s} | {rc} | " + " | ".join(
            f"{rr[l]['tokens_per_s']/rr['1f1b']['tokens_per_s']:.3f}" if l in rr else "-" for l in labels) + " |")
A(f"\n![ratio]({rel}/ratio_vs_1f1b.svg) ![memory]({rel}/memory_imbalance.svg)\n")
last = seqs[-1]
A(f"Simulated timelines at s={last}: [HelixPipe F=2]({rel}/timeline_helix_F2_s{last}.svg), "
  f"[1F1B]({rel}/timeline_1f1b_s{last}.svg). (A measured timeline side by side needs the "
  "distributed executor's trace; not available in this run.)\n")

# ---- findings, computed from the numbers above ----
A("## Findings\n")
first, lastr = rows(seqs[0], "natural"), rows(last, "natural")
for l in [x for x in labels if x.startswith("helix")]:
    g0 = first[l]["tokens_per_s"] / first["1f1b"]["tokens_per_s"]
    g1 = lastr[l]["tokens_per_s"] / lastr["1f1b"]["tokens_per_s"]
    A(f"- {l} vs 1F1B (natural policies, predicted): {g0:.3f} at s={seqs[0]} -> {g1:.3f} at s={last}: the "
      f"advantage {'grows' if g1 > g0 + 0.005 else 'does not grow'} with s on this machine's measured costs.")


def imb(r):
    v = [x["peak_activation_bytes"] for x in r["stages"]]
    return max(v) / max(1, min(v))


for l in ("1f1b", "helix F=1", "helix F=2"):
    if l in lastr:
        A(f"- Peak memory max/min stage at s={last}, {l}: {imb(lastr[l]):.2f}.")
A("- Where the P=1 prediction and the measurement differ: the profile times each part as its own op "
  "on a 1-layer model, so op-boundary work (stash bookkeeping, workspace reuse) and cache state differ "
  "from the real step; the other processes on the 2 shared cores add noise of a few percent either way.")
if bench_seqs:
    b0, b1 = bench[bench_seqs[0]], bench[bench_seqs[-1]]
    for l in [x for x in labels if x.startswith("helix")]:
        if l in b0 and l in b1:
            g0 = b0[l]["tokens_per_s"] / b0["1f1b"]["tokens_per_s"]
            g1 = b1[l]["tokens_per_s"] / b1["1f1b"]["tokens_per_s"]
            A(f"- MEASURED {l} vs 1F1B: {g0:.3f} at s={bench_seqs[0]} -> {g1:.3f} at s={bench_seqs[-1]}.")
    for l in ("1f1b", "helix F=2"):
        if l in b1:
            v = [x["peak_bytes"] for x in b1[l]["stages_measured"]]
            A(f"- MEASURED peak memory max/min stage at s={bench_seqs[-1]}, {l}: {max(v)/max(1,min(v)):.2f}.")
    A("- Caveat on the measured P=2 rows: on this 2-core machine shared with other builds and tests, "
      "the same schedule's measured step varies by up to 2x between runs (one timed step per row; see "
      "the load averages above). Rows far slower than predicted show a measured *busy* time far above "
      "the profiled compute, i.e. the two rank threads were starved of CPU, not waiting on the schedule. "
      "Where the machine was quiet, the measured step matched the prediction within a few percent. "
      "Rerun `helixpipe bench --steps=3` on an idle machine before relying on the measured ratios.")
    errs = [abs(r["predicted_step_s"] - r["step_s"]) / r["step_s"] for x in bench_seqs for r in bench[x].values() if "predicted_step_s" in r]
    if errs:
        A(f"- Prediction error of the P=2 step time: median {100*sorted(errs)[len(errs)//2]:.0f}%, worst {100*max(errs):.0f}% (absolute).")
A("")
A("## Simulator at the paper's scale (7B, H20; `helixpipe sweep`)\n")
A("```")
with open(os.path.join(rdir, "sweep_7b_h20.txt")) as f:
    A(f.read().rstrip())
A("```\n")
A("## Commands\n")
A("```\nscripts/results.sh            # all of the above, about 5 minutes on this machine\n"
  "helixpipe profile --model=docs/results/model.json --seq-len=S --threads=1 --repeats=3 "
  "--step-microbatches=2 --out=costs.json\n"
  "helixpipe simulate --schedule=1f1b --stages=1 --microbatches=2 --model=... --seq-len=S --part-costs=costs.json\n"
  "helixpipe compare --stages=2 --microbatches=4 --model=... --seq-len=S --part-costs=costs.json [--recompute=none|no-attn]\n"
  "helixpipe sweep --model=7b --device=h20 --seq-lens=32k,64k,128k --gpus=32,64\n```\n")
write_atomic(md_path, "\n".join(md) + "\n")
