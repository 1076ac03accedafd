#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention (causal, bf16, flash backend only) timed the way
bench/bench_attention_cuda times ours, printing the same JSON lines.

  python3 tools/sdpa_bench.py [--quick] [--seqs=8192,16384,32768,65536] [--tokens=65536]
      [--heads=16] [--kv-heads=16,4] [--head-dim=128] [--reps=10]

Inputs are stored token-major like ours ([batch, seq, heads, head_dim], viewed as
[batch, heads, seq, head_dim]); GQA uses enable_gqa=True (if the flash backend refuses it, k and v
are expanded with repeat_interleave outside the timed forward and "gqa" says "expanded"). The
forward is timed with autograd on (it keeps the log-sum-exp, as ours does); the backward is
torch.autograd.grad of one forward's output. One untimed warm-up call, then the median of --reps
calls, each between its own pair of CUDA events. FLOPs: forward 4 * b * s^2 * heads * d / 2,
backward 2.5x forward.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def leaf(batch, seq, heads, head_dim):
    """A token-major bf16 leaf tensor, uniform in [-1, 1), and its [b, h, s, d] view."""
    base = torch.empty(batch, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        base.uniform_(-1.0, 1.0)
    base.requires_grad_()
    return base, base.transpose(1, 2)


def run_shape(args, seq, kv_heads):
    batch = max(1, args.tokens // seq)
    heads, d = args.heads, args.head_dim
    q_base, q = leaf(batch, seq, heads, d)
    k_base, k = leaf(batch, seq, kv_heads, d)
    v_base, v = leaf(batch, seq, kv_heads, d)
    gqa = kv_heads != heads
    mode = "native" if gqa else "none"

    def attend(kk, vv, enable_gqa):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True,
                                                  enable_gqa=enable_gqa)

    try:
        out = attend(k, v, gqa)
        kk, vv, use_gqa = k, v, gqa
    except RuntimeError:
        if not gqa:
            raise
        mode = "expanded"
        kk = k.repeat_interleave(heads // kv_heads, dim=1)
        vv = v.repeat_interleave(heads // kv_heads, dim=1)
        use_gqa = False
        out = attend(kk, vv, use_gqa)

    fwd_ms = median_ms(lambda: attend(kk, vv, use_gqa), args.reps)
    dout = torch.empty_like(out).uniform_(-1.0, 1.0)
    bwd_ms = median_ms(
        lambda: torch.autograd.grad(out, (q_base, k_base, v_base), dout, retain_graph=True),
        args.reps)
    fwd_flops = 4.0 * batch * seq * seq * heads * d / 2
    for name, ms, flops in (("fwd", fwd_ms, fwd_flops), ("bwd", bwd_ms, 2.5 * fwd_flops)):
        print(json.dumps({
            "impl": "sdpa_flash", "dtype": "bf16", "pass": name, "batch": batch, "seq": seq,
            "heads": heads, "kv_heads": kv_heads, "head_dim": d, "ms": round(ms, 4),
            "tflops": round(flops / (ms * 1e-3) / 1e12, 2), "gqa": mode,
            "torch": torch.__version__}), flush=True)
    del out, dout, q_base, k_base, v_base, q, k, v, kk, vv
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shapes, to check it runs")
    ap.add_argument("--seqs", type=int_list, default=[8192, 16384, 32768, 65536])
    ap.add_argument("--kv-heads", type=int_list, default=[16, 4])
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if args.quick:
        args.seqs, args.tokens, args.heads, args.kv_heads, args.reps = [512, 1000], 2048, 4, [4, 2], 3
    if not torch.cuda.is_available():
        sys.exit("sdpa_bench.py: no CUDA device")
    for seq in args.seqs:
        for kv in args.kv_heads:
            run_shape(args, seq, kv)


if __name__ == "__main__":
    main()
