#!/usr/bin/python3
"""Writes the model test fixtures: a tiny LLaMA-style model (GQA, rotary, SwiGLU), fixed tokens,
its mean token cross-entropy and the gradient of every parameter, computed with PyTorch in float64.

The model is written out here in plain torch (no transformers), following the Hugging Face Llama
conventions our C++ model promises: rotate_half rotary with fp32 angles, q|k|v projections,
query head j reading key/value head j // (heads // kv_heads), RMSNorm as x * rsqrt(mean(x^2)+eps) * g.

File format (little-endian), read by tests/model/fixture_test.cc:
  8 bytes magic "HPFIX001", u64 header length n, n bytes of JSON header
  {"config": {...}, "batch": B, "seq": S, "microbatches": M, "loss": L, "tokens": [...],
   "targets": [...], "tensors": [{"name", "shape", "offset"}]}, then float32 data (offsets count
  float32 elements from the start of the data). Tensor names: "param.<HF name>", "grad.<HF name>".

Usage: tools/make_fixture.py [OUT_DIR]   (default tests/model/data). Needs python3-torch.
"""
import json
import math
import os
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)


def rope_cos_sin(seq, head_dim, theta):
    # Hugging Face: inv_freq and the angles in float32, then cos/sin.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t = torch.arange(seq, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().double(), emb.sin().double()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rmsnorm(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def model_loss(cfg, p, tokens, targets):
    h, H, KV, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    d = h // H
    eps = cfg["rms_norm_eps"]
    N, S = tokens.shape
    cos, sin = rope_cos_sin(S, d, cfg["rope_theta"])
    x = p["model.embed_tokens.weight"][tokens]  # (N, S, h)
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    for l in range(L):
        pre = f"model.layers.{l}."
        a = rmsnorm(x, p[pre + "input_layernorm.weight"], eps)
        q = (a @ p[pre + "self_attn.q_proj.weight"].T).view(N, S, H, d).transpose(1, 2)
        k = (a @ p[pre + "self_attn.k_proj.weight"].T).view(N, S, KV, d).transpose(1, 2)
        v = (a @ p[pre + "self_attn.v_proj.weight"].T).view(N, S, KV, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        s = s.masked_fill(~mask, float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(N, S, h)
        y = o @ p[pre + "self_attn.o_proj.weight"].T + x
        z = rmsnorm(y, p[pre + "post_attention_layernorm.weight"], eps)
        gate = z @ p[pre + "mlp.gate_proj.weight"].T
        up = z @ p[pre + "mlp.up_proj.weight"].T
        x = y + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    zf = rmsnorm(x, p["model.norm.weight"], eps)
    lm = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    logits = zf @ lm.T
    return torch.nn.functional.cross_entropy(logits.reshape(N * S, -1), targets.reshape(-1))


def param_shapes(cfg):
    h, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    shapes = {"model.embed_tokens.weight": (V, h)}
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        shapes[pre + "input_layernorm.weight"] = (h,)
        shapes[pre + "self_attn.q_proj.weight"] = (h, h)
        shapes[pre + "self_attn.k_proj.weight"] = (kv, h)
        shapes[pre + "self_attn.v_proj.weight"] = (kv, h)
        shapes[pre + "self_attn.o_proj.weight"] = (h, h)
        shapes[pre + "post_attention_layernorm.weight"] = (h,)
        shapes[pre + "mlp.gate_proj.weight"] = (f, h)
        shapes[pre + "mlp.up_proj.weight"] = (f, h)
        shapes[pre + "mlp.down_proj.weight"] = (h, f)
    shapes["model.norm.weight"] = (h,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, h)
    return shapes


def make(name, cfg, batch, seq, microbatches, seed, out_dir):
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for pname, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            t = 0.08 * torch.randn(shape, generator=gen)
        # Round to float32 first: the C++ model holds float32 parameters.
        params[pname] = t.float().double().requires_grad_(True)
    n = batch * microbatches
    tokens = torch.randint(0, cfg["vocab_size"], (n, seq + 1), generator=gen)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    loss = model_loss(cfg, params, inputs, targets)
    loss.backward()

    tensors, blobs, offset = [], [], 0
    for kind in ("param", "grad"):
        for pname, t in params.items():
            data = (t.detach() if kind == "param" else t.grad).float().contiguous().reshape(-1)
            tensors.append({"name": f"{kind}.{pname}", "shape": list(t.shape), "offset": offset})
            blobs.append(struct.pack(f"<{data.numel()}f", *data.tolist()))
            offset += data.numel()
    header = {"config": cfg, "batch": batch, "seq": seq, "microbatches": microbatches,
              "loss": loss.item(), "tokens": inputs.reshape(-1).tolist(),
              "targets": targets.reshape(-1).tolist(), "tensors": tensors,
              "made_by": "tools/make_fixture.py, torch " + torch.__version__ + ", float64"}
    hj = json.dumps(header).encode()
    path = os.path.join(out_dir, name + ".hpfix")
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(b"HPFIX001")
        fh.write(struct.pack("<Q", len(hj)))
        fh.write(hj)
        for b in blobs:
            fh.write(b)
    os.replace(tmp, path)
    print(f"{path}: loss {loss.item():.10f}, {offset} floats")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "model", "data")
    os.makedirs(out_dir, exist_ok=True)
    base = {"rms_norm_eps": 1e-5, "max_position_embeddings": 4096}
    make("gqa_untied", dict(base, hidden_size=32, intermediate_size=80, num_attention_heads=4,
                            num_key_value_heads=2, num_hidden_layers=2, vocab_size=300,
                            rope_theta=10000.0, tie_word_embeddings=False),
         batch=2, seq=16, microbatches=2, seed=1, out_dir=out_dir)
    make("gqa_tied", dict(base, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                          num_key_value_heads=1, num_hidden_layers=3, vocab_size=256,
                          rope_theta=500000.0, tie_word_embeddings=True),
         batch=1, seq=24, microbatches=3, seed=2, out_dir=out_dir)


if __name__ == "__main__":
    main()
