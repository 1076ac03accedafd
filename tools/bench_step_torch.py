#!/usr/bin/python3
"""The training step of bench/bench_step.cc in PyTorch (plain torch, float32, CPU): a LLaMA-style
model (RMSNorm, rotary, SwiGLU, causal attention written out as softmax(q k^T) v the way a plain
PyTorch 1.13 model does it), forward + backward + torch.optim.AdamW, on the same threads.

Prints one step time per line and finally a JSON line
{"tokens_per_s": ..., "step_s": ..., "peak_rss_mb": ...}. Timed by process CPU time with one
thread (as bench_step), by the wall clock otherwise.

Usage: tools/bench_step_torch.py [--seq 4096] [--layers 4] [--hidden 256] [--heads 4]
       [--vocab 256] [--ffn 768] [--threads 1] [--steps 3]
"""
import argparse
import json
import math
import resource
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

    @staticmethod
    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    def forward(self, tokens, targets):
        S = tokens.shape[1]
        d = self.h // self.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(S, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), -1)
        cos, sin = ang.cos(), ang.sin()
        rot = lambda x: x * cos + torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1) * sin
        mask = torch.full((S, S), float("-inf")).triu(1)
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
        return torch.nn.functional.cross_entropy(logits.view(S, -1), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, dflt in [("seq", 4096), ("layers", 4), ("hidden", 256), ("heads", 4), ("vocab", 256),
                    ("ffn", 768), ("threads", 1), ("steps", 3)]:
        ap.add_argument("--" + k, type=int, default=dflt)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    model = Model(a.layers, a.hidden, a.heads, a.ffn, a.vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tok = torch.randint(0, a.vocab, (1, a.seq + 1))
    best = float("inf")
    for step in range(a.steps + 1):
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        dt = clock() - t0
        if step > 0:
            best = min(best, dt)
        print(f"  torch step {step}: {dt:.3f} s, loss {loss.item():.4f}", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    # This torch build's own sgemm rate on the same threads, to tell BLAS speed from the rest.
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
    x @ y
    t0 = clock()
    for _ in range(5):
        x @ y
    sgemm = 5 * 2 * 1024 ** 3 / (clock() - t0) * 1e-9
    print(json.dumps({"tokens_per_s": a.seq / best, "step_s": best, "peak_rss_mb": rss,
                      "sgemm_gflops": sgemm}), flush=True)


if __name__ == "__main__":
    main()
