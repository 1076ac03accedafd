#!/usr/bin/env python3
"""Two (or more) training runs' loss curves side by side: one SVG with every curve, and the
largest relative gap to the first run at each step after a warm-up.

  tools/loss_curves.py --warmup 30 --max-gap 0.02 --svg curves.svg fp32=a.jsonl bf16=b.jsonl

Each input is LABEL=FILE, FILE a JSONL metrics log of `helixpipe train --log` (one object per
step with "step" and "loss"). The first run is the reference: for every later run and every step
after --warmup, gap = |loss - loss_ref| / loss_ref. Prints the largest gap of each run (and the
step where it is), the mean gap, how many steps exceed --max-gap, and PASS or FAIL against
--max-gap; exit status 1 on FAIL. With --smooth N it also prints the largest gap between the two
runs' N-step running means (information only: the verdict is per step)."""
import argparse
import json
import os
import sys


def read_log(path):
    losses = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
                losses[int(j["step"])] = float(j["loss"])
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{n}: not a helixpipe metrics line ({e})")
    if not losses:
        sys.exit(f"{path}: no steps")
    return losses


def nice_step(span, ticks=5):
    raw = span / ticks
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def svg(runs, title):
    w, h, left, right, top, bottom = 760, 420, 64, 150, 40, 48
    steps = sorted(set().union(*(r.keys() for _, r in runs)))
    xs0, xs1 = steps[0], steps[-1]
    ys = [v for _, r in runs for v in r.values()]
    y0, y1 = min(ys), max(ys)
    ystep = nice_step(y1 - y0) if y1 > y0 else 1
    y0 = ystep * int(y0 / ystep)
    y1 = ystep * (int(y1 / ystep) + 1)
    pw, ph = w - left - right, h - top - bottom

    def X(s):
        return left + pw * (s - xs0) / max(1, xs1 - xs0)

    def Y(v):
        return top + ph * (1 - (v - y0) / (y1 - y0))

    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{title}</text>']
    v = y0
    while v <= y1 + 1e-9:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{Y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:g}</text>')
        v += ystep
    xstep = nice_step(xs1 - xs0)
    s = xstep * int(xs0 / xstep)
    while s <= xs1:
        if s >= xs0:
            out.append(f'<line x1="{X(s):.1f}" x2="{X(s):.1f}" y1="{top + ph}" y2="{top + ph + 4}" '
                       f'stroke="black"/><text x="{X(s):.1f}" y="{top + ph + 18}" '
                       f'text-anchor="middle">{int(s)}</text>')
        s += xstep
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" '
               f'text-anchor="middle">loss</text>')
    for i, (label, r) in enumerate(runs):
        c = colors[i % len(colors)]
        pts = " ".join(f"{X(k):.1f},{Y(r[k]):.1f}" for k in sorted(r))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.2" '
                   f'opacity="0.85"/>')
        ly = top + 16 + 20 * i
        out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 36}" y1="{ly - 4}" y2="{ly - 4}" '
                   f'stroke="{c}" stroke-width="2"/><text x="{left + pw + 42}" y="{ly}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=metrics.jsonl (the first is the reference)")
    ap.add_argument("--warmup", type=int, default=0, help="steps not compared (default 0)")
    ap.add_argument("--max-gap", type=float, default=0.02, help="relative gap allowed (0.02 = 2%%)")
    ap.add_argument("--smooth", type=int, default=0,
                    help="also report the gap of N-step running means (default 0: off)")
    ap.add_argument("--svg", help="write the curves here")
    ap.add_argument("--title", default="loss per step")
    a = ap.parse_args()
    runs = []
    for spec in a.runs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            sys.exit(f"'{spec}': give each run as LABEL=FILE")
        runs.append((label, read_log(path)))
    if len(runs) < 2:
        sys.exit("give at least two runs")
    ref_label, ref = runs[0]
    ok = True
    for label, r in runs[1:]:
        common = sorted(k for k in r if k in ref and k > a.warmup)
        if not common:
            sys.exit(f"{label}: no steps after --warmup {a.warmup} in common with {ref_label}")
        gaps = [(abs(r[k] - ref[k]) / ref[k], k) for k in common]
        worst, at = max(gaps)
        mean = sum(g for g, _ in gaps) / len(gaps)
        verdict = "PASS" if worst <= a.max_gap else "FAIL"
        ok &= worst <= a.max_gap
        over = sum(1 for g, _ in gaps if g > a.max_gap)
        print(f"{label} vs {ref_label}: {len(common)} steps after step {a.warmup}; largest gap "
              f"{100 * worst:.2f}% (step {at}: {r[at]:.4f} vs {ref[at]:.4f}), mean "
              f"{100 * mean:.2f}%, {over} steps over {100 * a.max_gap:g}%; final "
              f"{r[common[-1]]:.4f} vs {ref[common[-1]]:.4f}; {verdict}")
        n = a.smooth
        if n > 1 and len(common) >= n:
            smooth = max(abs(sum(r[k] for k in common[i:i + n]) - sum(ref[k] for k in common[i:i + n]))
                         / sum(ref[k] for k in common[i:i + n]) for i in range(len(common) - n + 1))
            print(f"{label} vs {ref_label}: largest gap of {n}-step running means "
                  f"{100 * smooth:.2f}%")
    if a.svg:
        with open(a.svg + ".tmp", "w") as f:
            f.write(svg(runs, a.title))
        os.replace(a.svg + ".tmp", a.svg)
        print(f"wrote {a.svg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
