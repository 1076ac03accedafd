// Shared helpers for the model tests: tiny configs, random tokens, and a small driver that runs a
// micro-batch through a chosen split of the model into ops (what a schedule does on one stage).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "util/rng.h"

namespace hp::test {

inline ModelConfig tiny_config(bool tied = false) {
  ModelConfig c;
  c.name = "test";
  c.hidden = 8;
  c.intermediate = 12;
  c.heads = 2;
  c.kv_heads = 1;
  c.layers = 2;
  c.vocab = 11;
  c.tie_embeddings = tied;
  return c;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(r.next_u64() % static_cast<uint64_t>(vocab));
  return t;
}

// Parameters not at their init values (norm gains away from 1) so every gradient term matters.
// Drawn in double whatever the master type.
inline void randomize(Params& p, uint64_t seed, double scale = 0.3) {
  Rng r(seed);
  std::vector<double> host(static_cast<size_t>(p.size()));
  for (const ParamTensor& t : p.tensors()) {
    double* d = host.data() + t.offset;
    for (int64_t i = 0; i < t.numel; ++i)
      d[i] = t.shape.size() == 1 ? 1.0 + 0.2 * r.normal() : scale * r.normal();
  }
  p.set_values(host);  // converted to the master type
}

// Token ids in the backend's memory (checked against the vocabulary).
inline TokenBuffer on_backend(Backend& be, const std::vector<int32_t>& ids, int64_t vocab) {
  TokenBuffer b;
  b.upload(be, ids, vocab, "token");
  return b;
}

// The model split into ops at the given cut points: cuts are part indices (model order) where a
// new op starts, e.g. {1, 4} on L = 2 gives [embed] [pre:1 attn:1 post:1] [pre:2 ... head].
inline std::vector<std::vector<Part>> split_parts(int layers, const std::vector<int>& cuts) {
  std::vector<std::vector<Part>> ops(1);
  for (int i = 0; i <= 3 * layers + 1; ++i) {
    if (i > 0 && std::find(cuts.begin(), cuts.end(), i) != cuts.end()) ops.emplace_back();
    ops.back().push_back(Part::from_index(i, layers));
  }
  return ops;
}

struct SplitRun {
  Recompute policy = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
  bool split_backward = false;  // I then W instead of B
  bool remote_attn = false;     // mark attn:l and pre:l remote when they are in different ops
};

inline ComputeOp make_op(Dir dir, int mb, std::vector<Part> parts, Recompute policy) {
  ComputeOp op;
  op.dir = dir;
  op.mb = mb;
  if (dir != Dir::kF) std::reverse(parts.begin(), parts.end());
  op.parts = std::move(parts);
  op.recompute = recompute_parts(op, policy);
  return op;
}

inline std::vector<PartContext> contexts(const ComputeOp& op, const SplitRun& r) {
  auto ctx = local_contexts(op, r.policy, r.transfer);
  if (!r.remote_attn) return ctx;
  for (size_t i = 0; i < op.parts.size(); ++i) {
    const Part& p = op.parts[i];
    if (p.kind != PartKind::kAttn && p.kind != PartKind::kPre) continue;
    const Part other = p.kind == PartKind::kAttn ? Part::pre(p.layer) : Part::attn(p.layer);
    const bool together = std::find(op.parts.begin(), op.parts.end(), other) != op.parts.end();
    ctx[i].attn_remote = !together;
  }
  return ctx;
}

// Runs micro-batches j = 0..M-1 (F ops in order, then the backward ops in reverse), like
// loss_and_grads; tokens and targets are backend memory. Returns the summed loss.
// `after_forward` sees the store after each F pass.
template <typename Hook>
double run_split(Model& model, ValueStore& store, const std::vector<std::vector<Part>>& ops,
                 const SplitRun& r, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq, int M, Hook after_forward) {
  const double scale = 1.0 / static_cast<double>(batch * seq * M);
  model.take_loss();
  for (int j = 0; j < M; ++j) {
    Batch b{tokens + j * batch * seq, targets + j * batch * seq, batch, seq, scale};
    for (const auto& parts : ops) {
      ComputeOp op = make_op(Dir::kF, j, parts, r.policy);
      model.run(op, contexts(op, r), store, b);
    }
    after_forward(store);
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (!r.split_backward) {
        ComputeOp op = make_op(Dir::kB, j, *it, r.policy);
        model.run(op, contexts(op, r), store, b);
      } else {
        ComputeOp i_op = make_op(Dir::kI, j, *it, r.policy);
        model.run(i_op, contexts(i_op, r), store, b);
        ComputeOp w_op = make_op(Dir::kW, j, *it, r.policy);
        model.run(w_op, contexts(w_op, r), store, b);
      }
    }
  }
  return model.take_loss();
}

}  // namespace hp::test
