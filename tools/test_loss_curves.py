#!/usr/bin/env python3
"""Test of tools/loss_curves.py (run by ctest): the gap it reports, the warm-up it skips, its exit
status, and the SVG it writes."""
import json
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loss_curves.py")


def write(path, losses):
    with open(path, "w") as f:
        for i, v in enumerate(losses, 1):
            f.write(json.dumps({"step": i, "loss": v, "lr": 1e-3}) + "\n")


def run(*args):
    r = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    d = tempfile.mkdtemp()
    ref = [5.0 - 0.01 * i for i in range(100)]
    a, b, c = (os.path.join(d, n) for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    write(a, ref)
    # 1% above the reference everywhere, 10% in the warm-up.
    write(b, [v * (1.10 if i < 10 else 1.01) for i, v in enumerate(ref)])
    # One step after warm-up 3% below.
    write(c, [v * (0.97 if i == 60 else 1.0) for i, v in enumerate(ref)])
    svg = os.path.join(d, "x.svg")
    rc, out = run("--warmup", "10", "--max-gap", "0.02", "--svg", svg, f"fp32={a}", f"bf16={b}")
    assert rc == 0, out
    assert "largest gap 1.00%" in out, out
    assert "PASS" in out, out
    with open(svg) as f:
        text = f.read()
    assert text.count("<polyline") == 2 and ">bf16<" in text, text[:300]
    rc, out = run("--warmup", "5", f"fp32={a}", f"bf16={b}")
    assert rc == 1 and "largest gap 10.00%" in out and "FAIL" in out, out
    rc, out = run("--warmup", "10", "--smooth", "3", f"fp32={a}", f"late={c}")
    assert rc == 1 and "(step 61:" in out and "largest gap 3.00%" in out, out
    assert "1 steps over 2%" in out and "3-step running means 1.00%" in out, out
    rc, out = run(f"fp32={a}", "nolabel")
    assert rc != 0 and "LABEL=FILE" in out, out
    print("loss_curves.py: ok")


if __name__ == "__main__":
    main()
