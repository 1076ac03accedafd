// Part naming and parsing, enum names, derived recompute sets.
#include "schedule/ir.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <iterator>

#include "util/error.h"

namespace hp {

const char* part_kind_str(PartKind k) {
  switch (k) {
    case PartKind::kEmbed: return "embed";
    case PartKind::kPre: return "pre";
    case PartKind::kAttn: return "attn";
    case PartKind::kPost: return "post";
    case PartKind::kHead: return "head";
  }
  return "?";
}

int Part::order_key() const {
  switch (kind) {
    case PartKind::kEmbed: return 0;
    case PartKind::kPre: return 3 * layer - 2;
    case PartKind::kAttn: return 3 * layer - 1;
    case PartKind::kPost: return 3 * layer;
    case PartKind::kHead: return INT_MAX;
  }
  return 0;
}

Part Part::from_index(int index, int layers) {
  HP_CHECK(index >= 0 && index <= 3 * layers + 1, "part index {} out of range for {} layers", index,
           layers);
  if (index == 0) return embed();
  if (index == 3 * layers + 1) return head();
  int l = (index + 2) / 3;
  switch (index - (3 * l - 2)) {
    case 0: return pre(l);
    case 1: return attn(l);
    default: return post(l);
  }
}

std::string Part::str() const {
  switch (kind) {
    case PartKind::kEmbed: return "embed";
    case PartKind::kPre: return "pre:" + std::to_string(layer);
    case PartKind::kAttn: return "attn:" + std::to_string(layer);
    case PartKind::kPost: return "post:" + std::to_string(layer);
    case PartKind::kHead: return "head";
  }
  return "?";
}

Part Part::parse(std::string_view text, int layers) {
  if (text == "embed") return embed();
  if (text == "head") return head();
  auto colon = text.find(':');
  HP_CHECK(colon != std::string_view::npos,
           "bad part '{}': expected embed, head, or pre:L / attn:L / post:L with a layer number",
           text);
  std::string_view kind = text.substr(0, colon), num = text.substr(colon + 1);
  int l = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), l);
  HP_CHECK(ec == std::errc() && ptr == num.data() + num.size() && l >= 1,
           "bad part '{}': the layer after ':' must be a whole number >= 1", text);
  HP_CHECK(layers <= 0 || l <= layers, "bad part '{}': layer {} is beyond the model's {} layers",
           text, l, layers);
  if (kind == "pre") return pre(l);
  if (kind == "attn") return attn(l);
  if (kind == "post") return post(l);
  fail("bad part '{}': unknown kind '{}' (expected embed, pre, attn, post or head)", text, kind);
}

size_t PartTable::slot(Dir d) {
  switch (d) {
    case Dir::kF: return 0;
    case Dir::kI: return 1;
    case Dir::kW: return 2;
    case Dir::kB: break;
  }
  fail("PartTable: B is not stored (a full backward is I + W); set I and W");
}

const char* dir_str(Dir d) {
  switch (d) {
    case Dir::kF: return "F";
    case Dir::kB: return "B";
    case Dir::kI: return "I";
    case Dir::kW: return "W";
  }
  return "?";
}

Dir parse_dir(std::string_view t) {
  if (t == "F") return Dir::kF;
  if (t == "B") return Dir::kB;
  if (t == "I") return Dir::kI;
  if (t == "W") return Dir::kW;
  fail("bad direction '{}': expected F (forward), B (backward), I (input grads) or W (weight grads)",
       t);
}

const char* recompute_str(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kFull: return "full";
    case Recompute::kNoAttn: return "no-attn";
    case Recompute::kSelective: return "selective";
  }
  return "?";
}

Recompute parse_recompute(std::string_view t) {
  if (t == "none") return Recompute::kNone;
  if (t == "full") return Recompute::kFull;
  if (t == "no-attn") return Recompute::kNoAttn;
  if (t == "selective") return Recompute::kSelective;
  fail("bad recomputation policy '{}': expected none, full, no-attn or selective", t);
}

const char* transfer_str(TransferMode t) {
  return t == TransferMode::kWeights ? "weights" : "activations";
}

TransferMode parse_transfer(std::string_view t) {
  if (t == "weights") return TransferMode::kWeights;
  if (t == "activations") return TransferMode::kActivations;
  fail("bad transfer mode '{}': expected weights or activations", t);
}

const char* op_kind_str(OpKind k) {
  // In enum order (a name table; what the kinds mean lives in schedule/walker.h).
  static const char* const kNames[] = {"compute", "send.start", "send.wait", "recv.start",
                                       "recv.wait"};
  const auto i = static_cast<size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::vector<Part> recompute_parts(const ComputeOp& op, Recompute policy) {
  std::vector<Part> out;
  if (op.dir == Dir::kF || op.dir == Dir::kW) return out;
  for (const Part& p : op.parts)
    if (recomputes(policy, p.kind)) out.push_back(p);
  return out;
}

RecomputeRun recompute_run(const ComputeOp& op, size_t i) {
  const Part& p = op.recompute.at(i);
  const auto first_post = std::find_if(op.recompute.begin(), op.recompute.end(),
                                       [](const Part& q) { return q.kind == PartKind::kPost; });
  const bool head_in_op =
      std::find(op.parts.begin(), op.parts.end(), Part::head()) != op.parts.end();
  RecomputeRun r;
  r.keep_gu = p.kind == PartKind::kPost &&
              first_post == op.recompute.begin() + static_cast<std::ptrdiff_t>(i);
  r.read_later = i != 0 || (head_in_op && p.kind == PartKind::kPost);
  return r;
}

std::vector<std::string> recompute_policy_names() {
  std::vector<std::string> names;
  for (Recompute r : kAllRecompute) names.emplace_back(recompute_str(r));
  return names;
}

bool recomputes(Recompute policy, PartKind kind) {
  // The head is never rerun: its forward leaves two floats per token (rstdf, lsece) for its
  // backward, which recomputes the logits block by block anyway; rerunning it would only redo the
  // T x vocab logits GEMM.
  switch (policy) {
    case Recompute::kNone: return false;
    case Recompute::kFull: return kind != PartKind::kHead;
    case Recompute::kNoAttn: return kind != PartKind::kAttn && kind != PartKind::kHead;
    case Recompute::kSelective: return kind == PartKind::kAttn;
  }
  return false;
}

std::string recompute_label(const Schedule& s) {
  for (Recompute r : s.stage_recompute)
    if (r != s.stage_recompute.front()) return "mixed";
  return recompute_str(s.stage_recompute.empty() ? s.recompute : s.stage_recompute.front());
}

std::string op_str(const ComputeOp& op) {
  std::string s = std::string(dir_str(op.dir)) + " " + std::to_string(op.mb);
  for (const Part& p : op.parts) s += " " + p.str();
  return s;
}

}  // namespace hp
