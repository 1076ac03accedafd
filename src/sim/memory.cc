// Activation stash per stage (from the value table) and, for the planner, per-GPU memory.
#include "sim/memory.h"

#include <algorithm>
#include <map>
#include <set>

#include "schedule/lower.h"
#include "schedule/values.h"
#include "util/error.h"

namespace hp {

std::vector<int64_t> stash_peaks(const Schedule& s, const ModelConfig& cfg, int64_t tokens,
                                 ElemBytes eb, int tp) {
  const int p = s.num_stages, L = s.layers;
  const ScheduleIndex index(s);  // the same PartContext the lowering and the runtime use
  std::vector<int64_t> peaks(p, 0);
  for (int r = 0; r < p; ++r) {
    std::map<std::pair<Value, int>, int> held;  // (value, mb) -> how many parts hold it
    int64_t bytes = 0;
    auto add = [&](const std::vector<Value>& vs, int mb) {
      for (const Value& v : vs)
        if (held[{v, mb}]++ == 0) bytes += value_elems(v, cfg, tokens, tp) * eb.of(v.kind);
    };
    auto drop = [&](const std::vector<Value>& vs, int mb) {
      for (const Value& v : vs) {
        auto it = held.find({v, mb});
        if (it == held.end()) continue;
        if (--it->second == 0) {
          bytes -= value_elems(v, cfg, tokens, tp) * eb.of(v.kind);
          held.erase(it);
        }
      }
    };
    std::map<std::pair<int, int>, std::vector<Value>> fwd_kept, w_kept;  // (part index, mb)
    for (const ComputeOp& op : s.stages[r].ops) {
      for (size_t k = 0; k < op.parts.size(); ++k) {
        const Part& part = op.parts[k];
        const PartContext ctx = index.context(r, static_cast<int>(&op - s.stages[r].ops.data()),
                                              static_cast<int>(k));
        const auto key = std::pair{part.index(L), op.mb};
        if (op.dir == Dir::kF) {
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

std::vector<int64_t> rank_stash_peaks(const Schedule& s, const ModelConfig& cfg, int64_t tokens,
                                      ElemBytes eb, int tp) {
  HP_CHECK(tp >= 1, "rank_stash_peaks: tp must be >= 1 (got {})", tp);
  if (tensor_parallel_divides(cfg, tp, tokens)) return stash_peaks(s, cfg, tokens, eb, tp);
  std::vector<int64_t> peaks = stash_peaks(s, cfg, tokens, eb);
  for (int64_t& p : peaks) p /= tp;
  return peaks;
}

int64_t op_stash_bytes(const std::vector<Part>& parts, Recompute policy, TransferMode transfer,
                       const ModelConfig& cfg, int layers, int64_t tokens, ElemBytes eb) {
  std::set<Value> kept;
  for (size_t k = 0; k < parts.size(); ++k) {
    PartContext ctx;
    ctx.policy = policy;
    ctx.transfer = transfer;
    ctx.first_in_op = k == 0;
    ctx.feeds_next_in_op = k + 1 < parts.size();
    for (const Value& v : forward_stash(parts[k], ctx, layers)) kept.insert(v);
  }
  int64_t bytes = 0;
  for (const Value& v : kept) bytes += value_elems(v, cfg, tokens) * eb.of(v.kind);
  return bytes;
}

}  // namespace hp
