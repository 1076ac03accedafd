#!/usr/bin/env python3
"""The overlap condition measured (docs/trends.md "The overlap condition, measured"): reads what
scripts/shaped_link.sh wrote and reports HelixPipe / 1F1B against the link's bandwidth, measured
and simulated, and where each crosses 1.

  tools/shaped_link_report.py OUT_DIR HELIXPIPE_BINARY

OUT_DIR holds run.json (the settings: model file, s, M, P, layers, the rates tried), costs.json
(the unshaped part-cost profile) and, per rate R, link_R.json (`profile --format=json` over the
shaped TCP link: its ping-pong bandwidth) and bench_R.json (`bench --out`: measured tokens/s of
1f1b and helix F=2 and the simulator's prediction on that link). The simulated curve is
`helixpipe simulate` on costs.json with the link set to each bandwidth of a log grid. Writes
OUT_DIR/shaped_link.svg and OUT_DIR/report.json and prints a table; exit 0."""
import json
import math
import os
import subprocess
import sys


def crossing(points):
    """The bandwidth where ratio(bandwidth) crosses 1, interpolated in log(bandwidth) between the
    two neighbouring points of the first change of side (points sorted by bandwidth); None when
    the ratios stay on one side."""
    pts = sorted(points)
    for (b0, r0), (b1, r1) in zip(pts, pts[1:]):
        if (r0 - 1) * (r1 - 1) <= 0 and r0 != r1:
            f = (1 - r0) / (r1 - r0)
            return math.exp(math.log(b0) + f * (math.log(b1) - math.log(b0)))
    return None


def simulate(hp, costs, schedule, folds, recompute, run):
    out = subprocess.run(
        [hp, "simulate", f"--schedule={schedule}", f"--folds={folds}", f"--recompute={recompute}",
         f"--stages={run['stages']}", f"--microbatches={run['microbatches']}",
         f"--layers={run['layers']}", f"--part-costs={costs}", f"--model={run['model']}",
         f"--seq-len={run['seq_len']}", "--format=json"],  # the model gives the message bytes
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["makespan"]


def layer_bytes(cfg, s, p):
    """Bytes HelixPipe F=2 (weights mode) moves per layer and micro-batch, fp32, as the
    simulator's overlap check counts them (src/sim/parallel.h, overlap_check): (p-1)/p of the
    qkvr bundle (2 s h + h q) and of the ro bundle (2 s h)."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    q = (heads + 2 * kv) * (h // heads)
    return (p - 1) / p * (2 * s * h + h * q + 2 * s * h) * 4


def svg(curve, meas, cross_sim, cross_meas, b_star):
    W, H, L, R, T, B = 640, 400, 70, 20, 40, 55
    xs = [b for b, _ in curve] + [b for b, _, _ in meas]
    ys = [r for _, r in curve] + [r for _, r, _ in meas] + [1.0]
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    y0, y1 = math.floor(min(ys) * 20) / 20, math.ceil(max(ys) * 20) / 20
    px = lambda b: L + (math.log10(b) - x0) / (x1 - x0) * (W - L - R)
    py = lambda r: T + (y1 - r) / (y1 - y0) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">HelixPipe F=2 / 1F1B against the link (2 ranks, TCP, tc token bucket)</text>']
    for e in range(math.ceil(x0), math.floor(x1) + 1):
        for m in (1, 2, 5):
            b = m * 10 ** e
            if x0 <= math.log10(b) <= x1:
                o.append(f'<line x1="{px(b):.1f}" y1="{T}" x2="{px(b):.1f}" y2="{H - B}" stroke="#eee"/>')
                o.append(f'<text x="{px(b):.1f}" y="{H - B + 16}" text-anchor="middle">{b / 1e9:g}</text>')
    y = y0
    while y <= y1 + 1e-9:
        o.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
        y += 0.05
    o.append(f'<line x1="{L}" y1="{py(1):.1f}" x2="{W - R}" y2="{py(1):.1f}" stroke="#888"/>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 14}" text-anchor="middle">link bandwidth, GB/s one way (log scale)</text>')
    o.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">tokens/s ratio</text>')
    pts = " ".join(f"{px(b):.1f},{py(r):.1f}" for b, r in curve)
    o.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for b, r, _ in meas:
        o.append(f'<circle cx="{px(b):.1f}" cy="{py(r):.1f}" r="4" fill="#d62728"/>')
    if x0 <= math.log10(b_star) <= x1:
        o.append(f'<line x1="{px(b_star):.1f}" y1="{T}" x2="{px(b_star):.1f}" y2="{H - B}" stroke="#2ca02c" stroke-dasharray="4 3"/>')
        o.append(f'<text x="{px(b_star) + 4:.1f}" y="{T + 12}" fill="#2ca02c">t_attn = t_comm</text>')
    for c, col in ((cross_sim, "#1f77b4"), (cross_meas, "#d62728")):
        if c:
            o.append(f'<line x1="{px(c):.1f}" y1="{py(1) - 8:.1f}" x2="{px(c):.1f}" y2="{py(1) + 8:.1f}" stroke="{col}" stroke-width="2"/>')
    ly = H - B - 40
    o.append(f'<line x1="{W - 230}" y1="{ly}" x2="{W - 205}" y2="{ly}" stroke="#1f77b4" stroke-width="2"/><text x="{W - 200}" y="{ly + 4}">simulated (profile + link)</text>')
    o.append(f'<circle cx="{W - 217}" cy="{ly + 18}" r="4" fill="#d62728"/><text x="{W - 200}" y="{ly + 22}">measured (median of steps)</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, hp = sys.argv[1], sys.argv[2]
    run = json.load(open(os.path.join(out, "run.json")))
    cfg = json.load(open(run["model"]))
    base = json.load(open(os.path.join(out, "costs.json")))
    meas = []
    print(f"{'rate':>9} {'link GB/s':>9} {'1f1b tok/s':>10} {'helix tok/s':>11} {'measured':>8} {'simulated':>9}")
    for rate in run["rates"]:
        link = json.load(open(os.path.join(out, f"link_{rate}.json")))["part_costs"]["link"]
        rows = {r["label"]: r for r in json.load(open(os.path.join(out, f"bench_{rate}.json")))["rows"]}
        one, hx = rows["1f1b"], rows["helix F=2"]
        m = hx["tokens_per_s"] / one["tokens_per_s"]
        p = one["predicted_step_s"] / hx["predicted_step_s"]
        meas.append((link["bandwidth_Bps"], m, p))
        print(f"{rate:>9} {link['bandwidth_Bps'] / 1e9:>9.3f} {one['tokens_per_s']:>10.0f} "
              f"{hx['tokens_per_s']:>11.0f} {m:>8.3f} {p:>9.3f}")
    lat = sum(json.load(open(os.path.join(out, f"link_{r}.json")))["part_costs"]["link"]["latency_s"]
              for r in run["rates"]) / len(run["rates"])
    lo, hi = min(b for b, _, _ in meas) / 2, max(b for b, _, _ in meas) * 2
    curve = []
    tmp = os.path.join(out, "costs_grid.json")
    for i in range(33):
        b = lo * (hi / lo) ** (i / 32)
        c = dict(base)
        c["link"] = {"latency_s": lat, "bandwidth_Bps": b}
        json.dump(c, open(tmp, "w"))
        t1 = simulate(hp, tmp, "1f1b", 1, "none", run)
        t2 = simulate(hp, tmp, "helix", 2, "no-attn", run)
        curve.append((b, t1 / t2))
    os.remove(tmp)
    cross_sim = crossing(curve)
    cross_meas = crossing([(b, m) for b, m, _ in meas])
    t_attn = base["attn"]["F"]
    nbytes = layer_bytes(cfg, run["seq_len"], run["stages"])
    b_star = nbytes / t_attn
    fmt = lambda b: f"{b / 1e9:.3f} GB/s" if b else "none in the range"
    print(f"t_attn {t_attn * 1e3:.1f} ms per layer; HelixPipe moves {nbytes / 2**20:.1f} MiB per layer"
          f" -> t_attn = t_comm at {fmt(b_star)}")
    print(f"ratio = 1: simulated at {fmt(cross_sim)}, measured at {fmt(cross_meas)}")
    if cross_sim and cross_meas:
        print(f"measured crossover / simulated: {cross_meas / cross_sim:.3f}")
    rep = {"settings": run, "measured": [{"bandwidth_Bps": b, "ratio": m, "simulated_ratio": p}
                                         for b, m, p in meas],
           "simulated_curve": [{"bandwidth_Bps": b, "ratio": r} for b, r in curve],
           "crossover_simulated_Bps": cross_sim, "crossover_measured_Bps": cross_meas,
           "t_attn_s": t_attn, "layer_bytes": nbytes, "t_attn_eq_t_comm_Bps": b_star}
    json.dump(rep, open(os.path.join(out, "report.json"), "w"), indent=1)
    open(os.path.join(out, "shaped_link.svg"), "w").write(svg(curve, meas, cross_sim, cross_meas, b_star))


if __name__ == "__main__":
    main()
