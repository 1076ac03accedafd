// The value table of values.h. docs/memory.md is the prose version of this file; keep them in step.
#include "schedule/values.h"

#include <algorithm>
#include <charconv>

#include "util/error.h"

namespace hp {

namespace {

struct KindName {
  ValueKind kind;
  const char* name;
  bool layered;  // has a ":l" suffix
};

constexpr KindName kNames[] = {
    {ValueKind::kX, "X", true},          {ValueKind::kRstd1, "rstd1", true},
    {ValueKind::kA, "A", true},          {ValueKind::kW, "W", true},
    {ValueKind::kQKV, "QKV", true},      {ValueKind::kQKVr, "QKVr", true},
    {ValueKind::kO, "O", true},          {ValueKind::kLse, "lse", true},
    {ValueKind::kY, "Y", true},          {ValueKind::kRstd2, "rstd2", true},
    {ValueKind::kZ, "Z", true},          {ValueKind::kG, "G", true},
    {ValueKind::kU, "U", true},          {ValueKind::kH, "H", true},
    {ValueKind::kRstdF, "rstdf", false}, {ValueKind::kZf, "Zf", false},
    {ValueKind::kLseCE, "lsece", false}, {ValueKind::kdX, "dX", true},
    {ValueKind::kdR, "dR", true},        {ValueKind::kdA, "dA", true},
    {ValueKind::kdW, "dW", true},        {ValueKind::kdQKV, "dQKV", true},
    {ValueKind::kdO, "dO", true},        {ValueKind::kdG, "dG", true},
    {ValueKind::kdU, "dU", true},        {ValueKind::kdLogits, "dlogits", false},
};

const KindName& entry(ValueKind k) {
  for (const auto& e : kNames)
    if (e.kind == k) return e;
  fail("internal: unnamed value kind {}", static_cast<int>(k));
}

Value v(ValueKind k, int l = 0) { return Value{k, l}; }

void add_unique(std::vector<Value>& out, const std::vector<Value>& more) {
  for (const Value& x : more)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
}

bool weights_remote(const PartContext& ctx) {
  return ctx.transfer == TransferMode::kWeights && ctx.attn_remote;
}

// What a part needs to rerun its forward when it starts an op under full/no-attn recomputation:
// its forward inputs, except that attention ending its op never needs the residual X it only
// passes through (when post:l follows it in the same op, post's recomputation needs X:l).
std::vector<Value> boundary(Part part, const PartContext& ctx, int layers) {
  std::vector<Value> in = forward_inputs(part, ctx, layers);
  if (part.kind == PartKind::kAttn && !ctx.feeds_next_in_op) {
    std::erase_if(in, [](const Value& x) { return x.kind == ValueKind::kX; });
  }
  return in;
}

}  // namespace

std::string Value::str() const {
  const KindName& e = entry(kind);
  return e.layered ? std::string(e.name) + ":" + std::to_string(layer) : std::string(e.name);
}

Value Value::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  for (const auto& e : kNames) {
    if (name != e.name) continue;
    if (!e.layered) {
      HP_CHECK(colon == std::string_view::npos, "bad value '{}': '{}' takes no layer", text, name);
      return Value{e.kind, 0};
    }
    HP_CHECK(colon != std::string_view::npos, "bad value '{}': '{}' needs a layer, as in {}:3",
             text, name, name);
    std::string_view num = text.substr(colon + 1);
    int l = 0;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), l);
    HP_CHECK(ec == std::errc() && ptr == num.data() + num.size() && l >= 1,
             "bad value '{}': layer must be a whole number >= 1", text);
    return Value{e.kind, l};
  }
  fail("bad value '{}': unknown name '{}' (see docs/memory.md for the value names)", text, name);
}

int64_t value_elems(const Value& x, const ModelConfig& cfg, int64_t tokens, int tp) {
  check_tensor_parallel(cfg, tp, tokens);
  // Sequence-parallel values hold 1/tp of the token rows; head-, ffn- and vocabulary-parallel ones
  // all rows of 1/tp of the heads, of the MLP's or of the vocabulary's columns; the loss's lse is
  // whole on every rank (docs/tensor-parallel.md).
  const int64_t T = tokens, Ts = tokens / tp, h = cfg.hidden, f = cfg.intermediate / tp;
  const int64_t q = (cfg.hidden + 2 * cfg.kv_dim()) / tp, ha = cfg.hidden / tp;
  switch (x.kind) {
    case ValueKind::kX: case ValueKind::kA: case ValueKind::kY: case ValueKind::kZ:
    case ValueKind::kZf: case ValueKind::kdX: case ValueKind::kdR: case ValueKind::kdA:
      return Ts * h;
    case ValueKind::kO: case ValueKind::kdO:
      return T * ha;
    case ValueKind::kRstd1: case ValueKind::kRstd2: case ValueKind::kRstdF:
      return cfg.is_gpt() ? 2 * Ts : Ts;  // LayerNorm keeps the mean beside 1/std
    case ValueKind::kLseCE:
      return T;
    case ValueKind::kW: case ValueKind::kdW:
      return q * h + (cfg.has_bias() ? q : 0);  // W_qkv and, for GPT, its bias
    case ValueKind::kU: case ValueKind::kdU:
      if (cfg.is_gpt()) return 0;  // GeLU's MLP has no up projection: G and H only
      return T * f;
    case ValueKind::kQKV: case ValueKind::kQKVr: case ValueKind::kdQKV:
      return T * q;
    case ValueKind::kLse:
      return cfg.heads / tp * T;
    case ValueKind::kG: case ValueKind::kH: case ValueKind::kdG:
      return T * f;
    case ValueKind::kdLogits:
      return T * (cfg.vocab / tp);
  }
  return 0;
}

int ElemBytes::of(ValueKind k) const {
  switch (k) {
    case ValueKind::kRstd1: case ValueKind::kRstd2: case ValueKind::kRstdF: case ValueKind::kLse:
    case ValueKind::kLseCE:
      return stats;
    case ValueKind::kdW:
      return master;
    default:
      return compute;
  }
}

int64_t values_bytes(const std::vector<Value>& vs, const ModelConfig& cfg, int64_t tokens,
                     ElemBytes eb, int tp) {
  int64_t n = 0;
  for (const Value& x : vs) n += value_elems(x, cfg, tokens, tp) * eb.of(x.kind);
  return n;
}

std::vector<Value> forward_inputs(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  switch (part.kind) {
    case PartKind::kEmbed: return {};
    case PartKind::kPre: return {v(ValueKind::kX, l)};
    case PartKind::kAttn:
      if (ctx.transfer == TransferMode::kActivations) return {v(ValueKind::kQKV, l), v(ValueKind::kX, l)};
      if (ctx.attn_remote) return {v(ValueKind::kA, l), v(ValueKind::kX, l), v(ValueKind::kW, l)};
      return {v(ValueKind::kA, l), v(ValueKind::kX, l)};
    case PartKind::kPost: return {v(ValueKind::kX, l), v(ValueKind::kO, l)};
    case PartKind::kHead: return {v(ValueKind::kX, layers + 1)};
  }
  return {};
}

std::vector<Value> forward_outputs(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  switch (part.kind) {
    case PartKind::kEmbed: return {v(ValueKind::kX, 1)};
    case PartKind::kPre: return forward_inputs(Part::attn(l), ctx, layers);
    case PartKind::kAttn: return {v(ValueKind::kX, l), v(ValueKind::kO, l)};
    case PartKind::kPost: return {v(ValueKind::kX, l + 1)};
    case PartKind::kHead: return {};
  }
  return {};
}

std::vector<Value> backward_inputs(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  switch (part.kind) {
    case PartKind::kEmbed: return {v(ValueKind::kdX, 1)};
    case PartKind::kPre:
      if (ctx.transfer == TransferMode::kActivations) return {v(ValueKind::kdQKV, l), v(ValueKind::kdR, l)};
      if (ctx.attn_remote) return {v(ValueKind::kdA, l), v(ValueKind::kdR, l), v(ValueKind::kdW, l)};
      return {v(ValueKind::kdA, l), v(ValueKind::kdR, l)};
    case PartKind::kAttn: return {v(ValueKind::kdR, l), v(ValueKind::kdO, l)};
    case PartKind::kPost: return {v(ValueKind::kdX, l + 1)};
    case PartKind::kHead: return {};
  }
  return {};
}

std::vector<Value> backward_outputs(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  switch (part.kind) {
    case PartKind::kEmbed: return {};
    case PartKind::kPre: return {v(ValueKind::kdX, l)};
    case PartKind::kAttn: return backward_inputs(Part::pre(l), ctx, layers);
    case PartKind::kPost: return {v(ValueKind::kdR, l), v(ValueKind::kdO, l)};
    case PartKind::kHead: return {v(ValueKind::kdX, layers + 1)};
  }
  return {};
}

std::vector<Value> forward_stash(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  const bool act = ctx.transfer == TransferMode::kActivations;
  if (ctx.policy == Recompute::kNone ||
      (ctx.policy == Recompute::kSelective && part.kind != PartKind::kAttn)) {
    // none, and selective's parts other than attention: everything their backward reads
    switch (part.kind) {
      case PartKind::kEmbed: return {};
      case PartKind::kPre:
        if (act) return {v(ValueKind::kX, l), v(ValueKind::kRstd1, l), v(ValueKind::kA, l)};
        return {v(ValueKind::kX, l), v(ValueKind::kRstd1, l)};
      case PartKind::kAttn: {
        std::vector<Value> s;
        if (!act) s.push_back(v(ValueKind::kA, l));
        s.insert(s.end(), {v(ValueKind::kQKVr, l), v(ValueKind::kO, l), v(ValueKind::kLse, l)});
        if (weights_remote(ctx)) s.push_back(v(ValueKind::kW, l));
        return s;
      }
      case PartKind::kPost:
        return {v(ValueKind::kO, l), v(ValueKind::kY, l), v(ValueKind::kRstd2, l),
                v(ValueKind::kZ, l), v(ValueKind::kG, l), v(ValueKind::kU, l)};
      case PartKind::kHead:
        return {v(ValueKind::kX, layers + 1), v(ValueKind::kRstdF), v(ValueKind::kLseCE)};
    }
  }
  // What attention needs to rebuild its QKVr: A (or QKV in activations mode), and W:l if remote.
  std::vector<Value> attn_inputs{act ? v(ValueKind::kQKV, l) : v(ValueKind::kA, l)};
  if (weights_remote(ctx)) attn_inputs.push_back(v(ValueKind::kW, l));
  if (ctx.policy == Recompute::kSelective) return attn_inputs;  // attention; O and lse rebuilt
  std::vector<Value> s;
  if (ctx.first_in_op) s = boundary(part, ctx, layers);
  // full and no-attn do not rerun the head (ir.h recomputes): it keeps its statistics, and X:L+1
  // comes back from post:L's recomputation when post:L shares its op.
  if (part.kind == PartKind::kHead) add_unique(s, {v(ValueKind::kRstdF), v(ValueKind::kLseCE)});
  if (ctx.policy == Recompute::kNoAttn && part.kind == PartKind::kAttn) {
    attn_inputs.push_back(v(ValueKind::kO, l));
    attn_inputs.push_back(v(ValueKind::kLse, l));
    add_unique(s, attn_inputs);
  }
  return s;
}

std::vector<Value> weight_stash(Part part, const PartContext& ctx, int layers) {
  const int l = part.layer;
  const bool act = ctx.transfer == TransferMode::kActivations;
  switch (part.kind) {
    case PartKind::kEmbed: return {v(ValueKind::kdX, 1)};
    case PartKind::kPre:
      if (act) return {v(ValueKind::kA, l), v(ValueKind::kdQKV, l)};
      return {};
    case PartKind::kAttn:
      if (act) return {};
      return {v(ValueKind::kA, l), v(ValueKind::kdQKV, l)};
    case PartKind::kPost:
      return {v(ValueKind::kO, l),  v(ValueKind::kdR, l), v(ValueKind::kZ, l),
              v(ValueKind::kdG, l), v(ValueKind::kdU, l), v(ValueKind::kH, l),
              v(ValueKind::kdX, l + 1)};
    case PartKind::kHead: return {v(ValueKind::kZf), v(ValueKind::kdLogits)};
  }
  return {};
}

}  // namespace hp
