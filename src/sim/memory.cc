// Activation stash per stage (from the value table) and, for the planner, per-GPU memory.
#include "sim/memory.h"

#include <algorithm>
#include <map>

#include "schedule/values.h"

namespace hp {

std::vector<int64_t> stash_peaks(const Schedule& s, const ModelConfig& cfg, int64_t tokens,
                                 int bytes_per_elem) {
  const int p = s.num_stages, L = s.layers;
  // Stage of each part's forward per micro-batch, to know whether attention is remote.
  std::map<std::pair<int, int>, int> fwd_stage;  // (part index, mb) -> stage
  for (int r = 0; r < p; ++r)
    for (const ComputeOp& op : s.stages[r].ops)
      if (op.dir == Dir::kF)
        for (const Part& part : op.parts) fwd_stage.emplace(std::pair{part.index(L), op.mb}, r);
  auto attn_remote = [&](int layer, int mb) {
    auto a = fwd_stage.find({Part::attn(layer).index(L), mb});
    auto b = fwd_stage.find({Part::pre(layer).index(L), mb});
    return a != fwd_stage.end() && b != fwd_stage.end() && a->second != b->second;
  };
  std::vector<int64_t> peaks(p, 0);
  for (int r = 0; r < p; ++r) {
    std::map<std::pair<Value, int>, int> held;  // (value, mb) -> how many parts hold it
    int64_t bytes = 0;
    auto add = [&](const std::vector<Value>& vs, int mb) {
      for (const Value& v : vs)
        if (held[{v, mb}]++ == 0) bytes += value_elems(v, cfg, tokens) * bytes_per_elem;
    };
    auto drop = [&](const std::vector<Value>& vs, int mb) {
      for (const Value& v : vs) {
        auto it = held.find({v, mb});
        if (it == held.end()) continue;
        if (--it->second == 0) {
          bytes -= value_elems(v, cfg, tokens) * bytes_per_elem;
          held.erase(it);
        }
      }
    };
    std::map<std::pair<int, int>, std::vector<Value>> fwd_kept, w_kept;  // (part index, mb)
    for (const ComputeOp& op : s.stages[r].ops) {
      for (size_t k = 0; k < op.parts.size(); ++k) {
        const Part& part = op.parts[k];
        PartContext ctx;
        ctx.policy = s.recompute;
        ctx.transfer = s.transfer;
        ctx.attn_remote = part.layer > 0 && attn_remote(part.layer, op.mb);
        const auto key = std::pair{part.index(L), op.mb};
        if (op.dir == Dir::kF) {
          ctx.first_in_op = k == 0;
          auto vs = forward_stash(part, ctx, L);
          add(vs, op.mb);
          fwd_kept[key] = std::move(vs);
        } else if (op.dir == Dir::kB || op.dir == Dir::kI) {
          if (op.dir == Dir::kI) {
            auto ws = weight_stash(part, ctx, L);
            add(ws, op.mb);
            w_kept[key] = std::move(ws);
          }
          auto it = fwd_kept.find(key);
          if (it != fwd_kept.end()) {
            drop(it->second, op.mb);
            fwd_kept.erase(it);
          }
        } else {  // W
          auto it = w_kept.find(key);
          if (it != w_kept.end()) {
            drop(it->second, op.mb);
            w_kept.erase(it);
          }
        }
      }
      peaks[r] = std::max(peaks[r], bytes);
    }
  }
  return peaks;
}

}  // namespace hp
