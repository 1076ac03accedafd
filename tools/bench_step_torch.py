#!/usr/bin/python3
"""The training step of bench/bench_step.cc in PyTorch (plain torch, CPU): a LLaMA-style model
(RMSNorm, rotary, SwiGLU, causal attention written out as softmax(q k^T) v, as PyTorch 1.13 has no
fused attention), forward + backward + torch.optim.AdamW, on the same threads. --precision bf16
runs the forward under torch.autocast("cpu", dtype=torch.bfloat16) over fp32 weights (PyTorch's
mixed precision on the CPU: its matmuls go to oneDNN in bf16).

Run it the way an informed user would: bench_step starts it with a tuned allocator (jemalloc or
tcmalloc through LD_PRELOAD, or glibc's malloc tunables) and OMP_NUM_THREADS set, and once more
untuned for comparison. The rotary tables and the causal mask are built once per length, as a
model's buffers would be. `--warmup` steps are run first and not timed; the step time is the
median of `--steps` timed steps.

Prints one step time per line and finally a JSON line {"tokens_per_s", "step_s" (median),
"step_min_s", "peak_rss_mb", "sgemm_gflops", "bf16_gemm_gflops", "allocator", "threads",
"precision"}. Timed by process CPU time with one thread (as bench_step), by the wall clock
otherwise.

Usage: tools/bench_step_torch.py [--seq 4096] [--layers 4] [--hidden 256] [--heads 4]
       [--vocab 256] [--ffn 768] [--threads 1] [--steps 5] [--warmup 2] [--precision fp32|bf16]
"""
import argparse
import contextlib
import json
import math
import resource
import statistics
import time

import torch


class Model(torch.nn.Module):
    def __init__(self, L, h, heads, ffn, vocab):
        super().__init__()
        self.h, self.heads = h, heads
        self.embed = torch.nn.Parameter(0.02 * torch.randn(vocab, h))
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.g1 = torch.nn.Parameter(torch.ones(h))
            m.wqkv = torch.nn.Parameter(0.02 * torch.randn(3 * h, h))
            m.wo = torch.nn.Parameter(0.02 * torch.randn(h, h))
            m.g2 = torch.nn.Parameter(torch.ones(h))
            m.gate = torch.nn.Parameter(0.02 * torch.randn(ffn, h))
            m.up = torch.nn.Parameter(0.02 * torch.randn(ffn, h))
            m.down = torch.nn.Parameter(0.02 * torch.randn(h, ffn))
            self.layers.append(m)
        self.gf = torch.nn.Parameter(torch.ones(h))
        self.lm = torch.nn.Parameter(0.02 * torch.randn(vocab, h))
        self.tables = {}  # length -> (cos, sin, mask), built once

    @staticmethod
    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    def tables_for(self, S):
        if S not in self.tables:
            d = self.h // self.heads
            inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(S, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), -1)
            mask = torch.full((S, S), float("-inf")).triu(1)
            self.tables[S] = (ang.cos(), ang.sin(), mask)
        return self.tables[S]

    def forward(self, tokens, targets):
        S = tokens.shape[1]
        d = self.h // self.heads
        cos, sin, mask = self.tables_for(S)
        rot = lambda x: x * cos + torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1) * sin
        x = self.embed[tokens]
        for m in self.layers:
            a = self.norm(x, m.g1)
            q, k, v = (a @ m.wqkv.T).view(1, S, 3, self.heads, d).permute(2, 0, 3, 1, 4)
            s = rot(q) @ rot(k).transpose(-1, -2) / math.sqrt(d) + mask
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, S, self.h)
            y = o @ m.wo.T + x
            z = self.norm(y, m.g2)
            x = y + (torch.nn.functional.silu(z @ m.gate.T) * (z @ m.up.T)) @ m.down.T
        logits = self.norm(x, self.gf) @ self.lm.T
        return torch.nn.functional.cross_entropy(logits.view(S, -1).float(), targets.view(-1))


def allocator():
    """Which malloc this process runs on, read from its own memory map (not from what was asked)."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    for name in ("jemalloc", "tcmalloc"):
        if name in maps:
            return name
    import os
    return "glibc (tuned)" if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "") else "glibc"


def gemm_rate(clock, dtype):
    """This torch build's own 1024^3 GEMM rate on the same threads, in GFLOP/s."""
    x, y = torch.randn(1024, 1024).to(dtype), torch.randn(1024, 1024).to(dtype)
    x @ y
    t0 = clock()
    for _ in range(5):
        x @ y
    return 5 * 2 * 1024 ** 3 / (clock() - t0) * 1e-9


def main():
    ap = argparse.ArgumentParser()
    for k, dflt in [("seq", 4096), ("layers", 4), ("hidden", 256), ("heads", 4), ("vocab", 256),
                    ("ffn", 768), ("threads", 1), ("steps", 5), ("warmup", 2)]:
        ap.add_argument("--" + k, type=int, default=dflt)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    model = Model(a.layers, a.hidden, a.heads, a.ffn, a.vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tok = torch.randint(0, a.vocab, (1, a.seq + 1))
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.precision == "bf16" \
        else contextlib.nullcontext
    times = []
    for step in range(a.warmup + a.steps):
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        dt = clock() - t0
        timed = step >= a.warmup
        if timed:
            times.append(dt)
        print(f"  torch step {step}: {dt:.3f} s, loss {loss.item():.4f}"
              f"{'' if timed else ' (warm-up, not timed)'}", flush=True)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"tokens_per_s": a.seq / med, "step_s": med, "step_min_s": min(times),
                      "peak_rss_mb": rss, "sgemm_gflops": gemm_rate(clock, torch.float32),
                      "bf16_gemm_gflops": gemm_rate(clock, torch.bfloat16),
                      "allocator": allocator(), "threads": torch.get_num_threads(),
                      "precision": a.precision}), flush=True)


if __name__ == "__main__":
    main()
