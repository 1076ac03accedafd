// The named tensors ("values") that flow between parts and that parts keep for their backward.
// This table is the single contract between the validator's memory prediction, the lowering's
// message contents and sizes, and the runtime's activation stash (docs/memory.md explains it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schedule/ir.h"
#include "util/model_config.h"

namespace hp {

// Shapes use T = b*s tokens of one micro-batch, h hidden, kv = h_kv, q = h + 2*kv, f = ffn.
enum class ValueKind : uint8_t {
  // activations
  kX,       // X:l   (T, h)  input of layer l (l = 1..L+1; X:L+1 feeds the head). R is X.
  kRstd1,   // rstd1:l (T)   1/rms of X:l
  kA,       // A:l   (T, h)  RMSNorm1(X:l)
  kW,       // W:l   (q, h)  a received copy of W_qkv (weights mode, attention away from pre(l))
  kQKV,     // QKV:l (T, q)  A W_qkv^T before rotary
  kQKVr,    // QKVr:l (T, q) after rotary on q and k
  kO,       // O:l   (T, h)  attention output, before W_o
  kLse,     // lse:l (heads, T) softmax log-sum-exp
  kY,       // Y:l   (T, h)  O W_o^T + X
  kRstd2,   // rstd2:l (T)
  kZ,       // Z:l   (T, h)  RMSNorm2(Y)
  kG,       // G:l   (T, f)  Z W_gate^T
  kU,       // U:l   (T, f)  Z W_up^T
  kH,       // H:l   (T, f)  silu(G) * U
  kRstdF,   // rstdf (T)     final norm
  kZf,      // Zf    (T, h)  final RMSNorm(X:L+1)
  kLseCE,   // lsece (T)     log-sum-exp of the logits per token
  // gradients
  kdX,      // dX:l  (T, h)  d loss / d X:l
  kdR,      // dR:l  (T, h)  gradient along the residual path of layer l (= dY:l)
  kdA,      // dA:l  (T, h)
  kdW,      // dW:l  (q, h)  d W_qkv of one micro-batch, shipped back to pre(l)'s stage
  kdQKV,    // dQKV:l (T, q) gradient of QKV before rotary
  kdO,      // dO:l  (T, h)
  kdG,      // dG:l  (T, f)
  kdU,      // dU:l  (T, f)
  kdLogits, // dlogits (T, vocab)
};

struct Value {
  ValueKind kind = ValueKind::kX;
  int layer = 0;  // 0 for the head's values

  std::string str() const;                     // "A:3", "dX:5", "rstdf"
  static Value parse(std::string_view text);   // throws hp::Error
  friend bool operator==(const Value& a, const Value& b) { return a.kind == b.kind && a.layer == b.layer; }
  friend bool operator<(const Value& a, const Value& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.layer < b.layer;
  }
};

// Elements of one value for a micro-batch of `tokens` = b*s tokens, on one rank of a
// tensor-parallel group of `tp` ranks (docs/tensor-parallel.md): the values between RMSNorms and
// residuals (X, A, Y, Z, Zf, their gradients, the per-row statistics, dlogits) hold tokens/tp rows;
// the attention's (W, QKV, QKVr, O, lse and gradients) heads/tp of the heads, and the MLP's (G, U,
// H, dG, dU) intermediate/tp columns. tp must divide heads, kv_heads, intermediate and tokens.
// GPT-kind models (docs/simulator.md "Model kinds"): G is the GeLU input (fc1's output), H =
// gelu(G), U and dU are empty, the norm statistics hold mean and 1/std (2 per row), W and dW carry
// the q-element bias of W_qkv, QKVr equals QKV (no rotary).
int64_t value_elems(const Value& v, const ModelConfig& cfg, int64_t tokens, int tp = 1);

// Where a part runs relative to its neighbours; decides what it keeps and ships.
struct PartContext {
  Recompute policy = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
  bool first_in_op = true;   // the part starts its op (full/no-attn keep only op inputs)
  bool attn_remote = false;  // attn:l runs on another stage than pre:l (weights mode ships W:l)
  // The next part of the same op (in the op's execution order) consumes this part's output
  // locally; false for the op's last part, whose output (if any) goes to another op, maybe on
  // another stage. Built by part_context() in lower.h.
  bool feeds_next_in_op = false;
};

// Values a part receives from the previous part in model order (forward), and hands to the next.
// embed has no inputs (tokens come from the data loader); head has no outputs (the loss is a scalar).
std::vector<Value> forward_inputs(Part part, const PartContext& ctx, int layers);
std::vector<Value> forward_outputs(Part part, const PartContext& ctx, int layers);
// Gradients a part receives from the next part (backward), and hands to the previous one.
std::vector<Value> backward_inputs(Part part, const PartContext& ctx, int layers);
std::vector<Value> backward_outputs(Part part, const PartContext& ctx, int layers);

// What a part keeps from its forward until its backward (B or I) runs.
std::vector<Value> forward_stash(Part part, const PartContext& ctx, int layers);
// What a part keeps from its I until its W runs (only when the backward is split).
std::vector<Value> weight_stash(Part part, const PartContext& ctx, int layers);

// Bytes of one element of each kind of value under a precision policy (docs/precision.md):
// `compute` for activations, their gradients and the shipped weight copy W:l; `master` for the
// shipped weight gradient dW:l; `stats` for the per-row statistics (rstd1, rstd2, rstdf, lse,
// lsece). One number converts to the same size for every kind (the fp32 default, or a device
// profile's activation type). The model's own mapping is value_dtype (model/value_store.h).
struct ElemBytes {
  int compute = 4, master = 4, stats = 4;
  constexpr ElemBytes() = default;
  constexpr ElemBytes(int all) : compute(all), master(all), stats(all) {}  // NOLINT: implicit
  constexpr ElemBytes(int compute_bytes, int master_bytes, int stats_bytes)
      : compute(compute_bytes), master(master_bytes), stats(stats_bytes) {}
  int of(ValueKind k) const;
  bool operator==(const ElemBytes&) const = default;
};

// Sum over a list of value_elems times each value's element bytes.
int64_t values_bytes(const std::vector<Value>& vs, const ModelConfig& cfg, int64_t tokens,
                     ElemBytes eb = {}, int tp = 1);

}  // namespace hp
