#!/usr/bin/env python3
"""The GPU baseline for helixpipe's training step: the same LLaMA-style model in PyTorch eager, run
the way an informed user runs it on one GPU -- fp32 master weights under bf16 autocast, attention
through torch.nn.functional.scaled_dot_product_attention (is_causal, GQA), fused AdamW, the caching
allocator with expandable segments, warm-up steps excluded, the median of the timed steps.

The model (RMSNorm, rotary with rotate_half, SwiGLU, untied head, mean cross-entropy) is built from
a helixpipe preset's sizes given on the command line or from a config.json (Hugging Face names).
Prints one line per step and a final JSON line:
{"impl": "pytorch-eager-bf16-autocast-sdpa", "tokens_per_s", "step_s_median", "step_s_all",
 "peak_allocated_gib", "peak_reserved_gib", "mfu", "params", "flops_per_step", ...}

usage: tools/torch_step_gpu.py [--config config.json | --hidden 2048 --ffn 5504 --heads 16
       --kv-heads 16 --layers 24 --vocab 32000] --seq 8192 [--batch 1] [--steps 6] [--warmup 2]
       [--peak-tflops 989]
"""
import argparse
import json
import math
import os
import statistics
import time

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Layer(torch.nn.Module):
    def __init__(self, h, ffn, heads, kv_heads, eps):
        super().__init__()
        self.heads, self.kv_heads, self.d, self.eps = heads, kv_heads, h // heads, eps
        self.input_layernorm = torch.nn.Parameter(torch.ones(h))
        self.q_proj = torch.nn.Linear(h, h, bias=False)
        self.k_proj = torch.nn.Linear(h, kv_heads * self.d, bias=False)
        self.v_proj = torch.nn.Linear(h, kv_heads * self.d, bias=False)
        self.o_proj = torch.nn.Linear(h, h, bias=False)
        self.post_attention_layernorm = torch.nn.Parameter(torch.ones(h))
        self.gate_proj = torch.nn.Linear(h, ffn, bias=False)
        self.up_proj = torch.nn.Linear(h, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, h, bias=False)

    def norm(self, x, g):
        # As transformers' LlamaRMSNorm: statistics in fp32, back to the input type.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * g

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        a = self.norm(x, self.input_layernorm)
        q = self.q_proj(a).view(B, S, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(a).view(B, S, self.kv_heads, self.d).transpose(1, 2)
        v = self.v_proj(a).view(B, S, self.kv_heads, self.d).transpose(1, 2)
        half = self.d // 2
        rot = lambda t: t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin
        q, k = rot(q), rot(k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        y = x + self.o_proj(o.transpose(1, 2).reshape(B, S, -1))
        z = self.norm(y, self.post_attention_layernorm)
        return y + self.down_proj(F.silu(self.gate_proj(z)) * self.up_proj(z))


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h = c["hidden_size"]
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], h)
        self.layers = torch.nn.ModuleList(
            Layer(h, c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"],
                  c["rms_norm_eps"]) for _ in range(c["num_hidden_layers"]))
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.lm_head = torch.nn.Linear(h, c["vocab_size"], bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        S = tokens.shape[1]
        d = self.c["hidden_size"] // self.c["num_attention_heads"]
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, d, 2, device=tokens.device,
                                                           dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(S, device=tokens.device, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), -1)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.layers[0].norm(x, self.norm)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def model_flops(c, batch, seq):
    """Training FLOPs of one step (forward + backward = 3x forward), causal attention counted
    at half the square, no recomputation: the convention MFU figures use."""
    h, f, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    T = batch * seq
    dense = 2 * T * (h * (h + 2 * kv) + h * h + 3 * h * f) * L + 2 * T * h * V
    attn = 2 * 2 * batch * seq * seq * h / 2 * L
    return 3 * (dense + attn)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config")
    for k, dflt in [("hidden", 2048), ("ffn", 5504), ("heads", 16), ("kv-heads", 16),
                    ("layers", 24), ("vocab", 32000)]:
        ap.add_argument("--" + k, type=int, default=dflt)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="dense bf16 peak for MFU (H100/H200 SXM datasheet: 989)")
    a = ap.parse_args()
    if a.config:
        with open(a.config) as fh:
            c = json.load(fh)
    else:
        c = {"hidden_size": a.hidden, "intermediate_size": a.ffn, "num_attention_heads": a.heads,
             "num_key_value_heads": a.kv_heads, "num_hidden_layers": a.layers,
             "vocab_size": a.vocab}
    c.setdefault("rms_norm_eps", 1e-5)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Llama(c).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    tok = torch.randint(0, c["vocab_size"], (a.batch, a.seq + 1), device=dev)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
        print(f"  torch step {step}{' (warm-up)' if step < a.warmup else ''}: {dt * 1e3:.1f} ms, "
              f"loss {loss.item():.4f}", flush=True)
    med = statistics.median(times)
    flops = model_flops(c, a.batch, a.seq)
    print(json.dumps({
        "impl": "pytorch-eager-bf16-autocast-sdpa", "torch": torch.__version__,
        "device": torch.cuda.get_device_name(), "seq": a.seq, "batch": a.batch,
        "params": params, "tokens_per_s": a.batch * a.seq / med, "step_s_median": med,
        "step_s_all": times, "flops_per_step": flops,
        "mfu": flops / med / (a.peak_tflops * 1e12),
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
        "sdpa_backends": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                          "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
                          "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled()},
    }), flush=True)


if __name__ == "__main__":
    main()
