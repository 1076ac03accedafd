#!/usr/bin/env python3
"""Checks that helixpipe's checkpoint files mean what Hugging Face transformers would read in them.

transformers is not packaged in Debian, so this script re-states the LlamaForCausalLM forward pass
in plain PyTorch (python3-torch), in float64, with the conventions transformers uses: nn.Linear
weights stored [out, in]; q_proj/k_proj/v_proj separate; rotary with rotate_half on
cat(freqs, freqs) and inv_freq = theta^(-2i/d); grouped-query heads where query head j uses
key/value head j // (heads / kv_heads) (repeat_kv); RMSNorm x * rsqrt(mean(x^2) + eps) * w;
SwiGLU down(silu(gate(x)) * up(x)); lm_head or the tied embedding; mean cross-entropy.

Both directions, and the interoperation forms:
  1. `helixpipe init` writes a model; this script loads it, computes the loss and every gradient
     on the sequences `helixpipe grad` is specified to use, and compares with `helixpipe grad`.
  2. This script writes a model folder as transformers' save_pretrained would (config.json with
     its extra keys, safetensors with format=pt, tied embeddings without lm_head.weight) and checks
     that `helixpipe grad` reads the same model (same loss and gradients).
  3. The same in bfloat16 and sharded, as save_pretrained(max_shard_size=...) of a bf16 model
     writes it: BF16 tensors rounded by torch, two shards and model.safetensors.index.json.
  4. `helixpipe train --save-dtype=bf16` and the same run saved in f32: the BF16 file holds
     exactly torch's own rounding (to nearest even) of the f32 weights.

usage: tools/hf_layout_check.py HELIXPIPE_BINARY WORK_DIR   (exit 0 when everything matches)
"""
import array
import json
import math
import os
import struct
import subprocess
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def write_safetensors(path, tensors, metadata, dtype="F32"):
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        if dtype == "BF16":  # torch rounds to nearest even; the bits are written as int16
            bits = t.detach().to(torch.bfloat16).flatten().view(torch.int16).tolist()
            raw = array.array("h", bits).tobytes()
        else:
            raw = array.array("f", t.detach().to(torch.float32).flatten().tolist()).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_loss(cfg, w, tokens, targets):
    """Mean cross-entropy of LlamaForCausalLM (float64). tokens, targets: (rows, S) long."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    d = h // heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    rows, s = tokens.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (a @ w[p + "self_attn.q_proj.weight"].T).view(rows, s, heads, d).transpose(1, 2)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).view(rows, s, kv, d).transpose(1, 2)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).view(rows, s, kv, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(rows, s, h)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        z = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = z @ w[p + "mlp.gate_proj.weight"].T
        u = z @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = x @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def grad_batch(data_path, s, b, m):
    """Sequence k = j*B + r: inputs tokens[k*S .. k*S+S-1], targets tokens[k*S+1 .. k*S+S]."""
    with open(data_path, "rb") as f:
        raw = f.read()
    seqs = [list(raw[k * s:k * s + s + 1]) for k in range(b * m)]
    t = torch.tensor(seqs, dtype=torch.long)
    return t[:, :-1], t[:, 1:]


def torch_loss_and_grads(cfg, weights, tokens, targets):
    w = {n: t.clone().requires_grad_(True) for n, t in weights.items()}
    loss = llama_loss(cfg, w, tokens, targets)
    loss.backward()
    return loss.item(), {n: t.grad for n, t in w.items()}


def run_grad(binary, ckpt, data, s, b, m, out):
    r = subprocess.run([binary, "grad", f"--checkpoint={ckpt}", f"--data={data}", f"--seq-len={s}",
                        f"--microbatch-size={b}", f"--microbatches={m}", f"--out={out}", "--threads=1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"helixpipe grad failed:\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["loss"]


def compare(label, cfg, weights, binary, ckpt, data, work, s=20, b=2, m=2):
    tokens, targets = grad_batch(data, s, b, m)
    want_loss, want_grads = torch_loss_and_grads(cfg, weights, tokens, targets)
    gpath = os.path.join(work, "grads.safetensors")
    got_loss = run_grad(binary, ckpt, data, s, b, m, gpath)
    got = read_safetensors(gpath)
    ok = True
    loss_err = abs(got_loss - want_loss) / abs(want_loss)
    print(f"{label}: loss helixpipe {got_loss:.9f} torch(float64) {want_loss:.9f} rel err {loss_err:.2e}")
    ok &= loss_err < 1e-5
    expected_names = set(want_grads)
    if cfg.get("tie_word_embeddings", False):
        expected_names.discard("lm_head.weight")
    if set(got) != expected_names:
        print(f"  gradient names differ: only helixpipe {sorted(set(got) - expected_names)}, "
              f"only torch {sorted(expected_names - set(got))}")
        ok = False
    worst = 0.0
    for name in sorted(expected_names & set(got)):
        g, t = got[name], want_grads[name]
        if list(g.shape) != list(t.shape):
            print(f"  {name}: shape {list(g.shape)} vs torch {list(t.shape)}")
            ok = False
            continue
        err = ((g - t).norm() / max(t.norm().item(), 1e-30)).item()
        worst = max(worst, err)
        if err >= 1e-5:
            print(f"  {name}: gradient rel err {err:.2e}")
            ok = False
    print(f"  {len(expected_names)} gradients, worst relative error (norm-wise) {worst:.2e}")
    return ok


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    data = os.path.join(work, "data.txt")
    with open(data, "w") as f:
        f.write("In the beginning was the word, and the word was with the model.\n" * 20)
    ok = True

    # 1. helixpipe init -> read here as transformers would.
    cfg_path = os.path.join(work, "gqa.json")
    with open(cfg_path, "w") as f:
        json.dump({"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
                   "rope_theta": 5000.0, "rms_norm_eps": 1e-5}, f)
    ckpt = os.path.join(work, "init")
    subprocess.run([binary, "init", f"--model={cfg_path}", "--seed=3", f"--out={ckpt}"], check=True,
                   capture_output=True)
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    weights = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    ok &= compare("helixpipe init -> torch", cfg, weights, binary, ckpt, data, work)

    # 2. A folder as transformers' save_pretrained writes it (tied, GQA 4:1) -> helixpipe.
    hf = os.path.join(work, "hf")
    os.makedirs(hf, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 1,
           "num_hidden_layers": 2, "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "max_position_embeddings": 128, "tie_word_embeddings": True, "hidden_act": "silu",
           "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
           "initializer_range": 0.02, "pretraining_tp": 1, "rope_scaling": None,
           "torch_dtype": "float32", "transformers_version": "4.40.0", "use_cache": True}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f)
    h, f_, kvd = 32, 40, 8
    w = {"model.embed_tokens.weight": torch.randn(256, h) * 0.1}
    for l in range(2):
        p = f"model.layers.{l}."
        w[p + "self_attn.q_proj.weight"] = torch.randn(h, h) * 0.1
        w[p + "self_attn.k_proj.weight"] = torch.randn(kvd, h) * 0.1
        w[p + "self_attn.v_proj.weight"] = torch.randn(kvd, h) * 0.1
        w[p + "self_attn.o_proj.weight"] = torch.randn(h, h) * 0.1
        w[p + "mlp.gate_proj.weight"] = torch.randn(f_, h) * 0.1
        w[p + "mlp.up_proj.weight"] = torch.randn(f_, h) * 0.1
        w[p + "mlp.down_proj.weight"] = torch.randn(h, f_) * 0.1
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(h)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(h)
    w["model.norm.weight"] = 1 + 0.1 * torch.randn(h)
    # transformers orders tensors by name in the file; do the same.
    write_safetensors(os.path.join(hf, "model.safetensors"), dict(sorted(w.items())), {"format": "pt"})
    weights = {n: t.to(torch.float32).to(torch.float64) for n, t in w.items()}
    ok &= compare("transformers-style folder -> helixpipe", cfg, weights, binary, hf, data, work)

    # 3. The same model as a sharded bf16 folder -> helixpipe reads the bf16 values.
    sharded = os.path.join(work, "hf_bf16_sharded")
    os.makedirs(sharded, exist_ok=True)
    with open(os.path.join(sharded, "config.json"), "w") as f:
        json.dump(dict(cfg, torch_dtype="bfloat16"), f)
    names = sorted(w)
    parts = [names[:len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts):
        shard = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        write_safetensors(os.path.join(sharded, shard), {n: w[n] for n in part}, {"format": "pt"},
                          dtype="BF16")
        weight_map.update({n: shard for n in part})
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 2 * sum(t.numel() for t in w.values())},
                   "weight_map": weight_map}, f)
    weights = {n: t.to(torch.bfloat16).to(torch.float64) for n, t in w.items()}
    ok &= compare("sharded bf16 folder -> helixpipe", cfg, weights, binary, sharded, data, work)

    # 4. train --save-dtype=bf16 against torch's rounding of the same run saved in f32.
    run = [binary, "train", f"--model={cfg_path}", f"--data={data}", "--seq-len=16", "--steps=2",
           "--threads=1", "--seed=5"]
    saved = {}
    for dtype in ("fp32", "bf16"):
        out = os.path.join(work, f"trained_{dtype}")
        r = subprocess.run(run + [f"--save={out}", f"--save-dtype={dtype}"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"helixpipe train failed:\n{r.stdout}{r.stderr}")
        saved[dtype] = read_safetensors(os.path.join(out, "model.safetensors"))
    mismatched = [n for n, t in saved["fp32"].items()
                  if not torch.equal(t.to(torch.float32).to(torch.bfloat16).to(torch.float64),
                                     saved["bf16"][n])]
    print(f"train --save-dtype=bf16: {len(saved['bf16'])} tensors, "
          f"{len(mismatched)} differ from torch's bf16 rounding of the f32 save")
    ok &= not mismatched and set(saved["fp32"]) == set(saved["bf16"])

    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
