// The lowering pass (see lower.h for where each communication op goes and why).
#include "schedule/lower.h"

#include <algorithm>
#include <map>
#include <utility>

#include "schedule/walker.h"
#include "util/error.h"

namespace hp {

namespace {

const PartLocation kNowhere{};

// The part whose forward consumes `p`'s forward output (next in model order); false for head.
bool next_part(Part p, int layers, Part* out) {
  if (p.kind == PartKind::kHead) return false;
  *out = Part::from_index(p.index(layers) + 1, layers);
  return true;
}

// The part whose backward consumes `p`'s backward output (previous in model order); false for embed.
bool prev_part(Part p, int layers, Part* out) {
  if (p.kind == PartKind::kEmbed) return false;
  *out = Part::from_index(p.index(layers) - 1, layers);
  return true;
}

std::string where(const Schedule& s, int stage, int op) {
  return "stage " + std::to_string(stage) + " op " + std::to_string(op) + " (" +
         op_str(s.stages[stage].ops[op]) + ")";
}

// What lower() learns in step 1: per (stage, op) the messages it produces and consumes (ids), and
// per ordered pair of stages its messages in send order.
struct Traffic {
  std::vector<std::vector<std::vector<int>>> produced, consumed;
  std::map<std::pair<int, int>, std::vector<int>> link;
};

// Step 1: the messages, in (stage, op, part) order, with their tags.
void add_messages(Schedule& s, const ScheduleIndex& index, const ModelConfig* cfg,
                  int64_t tokens_per_mb, ElemBytes eb, Traffic& t) {
  const int p = s.num_stages, L = s.layers;
  auto& produced = t.produced;
  auto& consumed = t.consumed;
  produced.assign(p, {});
  consumed.assign(p, {});
  for (int st = 0; st < p; ++st) {
    produced[st].resize(s.stages[st].ops.size());
    consumed[st].resize(s.stages[st].ops.size());
  }
  for (int st = 0; st < p; ++st) {
    const auto& ops = s.stages[st].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const ComputeOp& op = ops[i];
      if (op.dir == Dir::kW) continue;
      const bool fwd = op.dir == Dir::kF;
      for (int k = 0; k < static_cast<int>(op.parts.size()); ++k) {
        const Part& part = op.parts[k];
        const PartContext ctx = index.context(st, i, k);
        if (op.dir == Dir::kI && part.kind == PartKind::kAttn && ctx.attn_remote &&
            s.transfer == TransferMode::kWeights) {
          fail("lower: {} splits the backward of {} (micro-batch {}) into I and W while attention "
               "runs away from pre:{} in weights transfer mode: dW:{} would have no op to travel "
               "with. Use a full backward (B) for it, or --transfer=activations",
               where(s, st, i), part.str(), op.mb, part.layer, part.layer);
        }
        Part peer;
        if (!(fwd ? next_part(part, L, &peer) : prev_part(part, L, &peer))) continue;
        if (k + 1 < static_cast<int>(op.parts.size()) && op.parts[k + 1] == peer) continue;
        const PartLocation& to = fwd ? index.forward(peer, op.mb) : index.backward(peer, op.mb);
        HP_CHECK(to.found(),
                 "lower: {} hands {} of {} (micro-batch {}) to {}, whose {} runs on no stage "
                 "(run 'helixpipe validate' for a full report)",
                 where(s, st, i), fwd ? "the forward output" : "the gradient", part.str(), op.mb,
                 peer.str(), fwd ? "forward" : "backward");
        if (to.stage == st) continue;  // stays on this stage
        Message m;
        m.id = static_cast<int>(s.messages.size());
        m.src = st;
        m.dst = to.stage;
        m.mb = op.mb;
        m.dir = fwd ? Dir::kF : Dir::kB;
        m.from = part;
        m.to = peer;
        const std::vector<Value> vals =
            fwd ? forward_outputs(part, ctx, L) : backward_outputs(part, ctx, L);
        for (const Value& v : vals) m.values.push_back(v.str());
        m.bytes = cfg ? values_bytes(vals, *cfg, tokens_per_mb, eb) : 0;
        m.producer = i;
        m.consumer = to.op;
        produced[st][i].push_back(m.id);
        consumed[to.stage][to.op].push_back(m.id);
        s.messages.push_back(std::move(m));
      }
    }
  }
  // Tags: position on the link in send order (= id order, as sends follow op order).
  for (Message& m : s.messages) {
    auto& q = t.link[{m.src, m.dst}];
    m.tag = static_cast<int>(q.size());
    q.push_back(m.id);
  }
  for (int st = 0; st < p; ++st)
    for (auto& c : consumed[st]) std::sort(c.begin(), c.end());
}

// Step 2: per stage, same-fold neighbours, receive anchors, then the lowered program.
void place_ops(Schedule& s, const Traffic& t) {
  const int p = s.num_stages;
  const auto& produced = t.produced;
  const auto& consumed = t.consumed;
  std::vector<std::vector<int>> prev_same(p), next_same(p);
  for (int st = 0; st < p; ++st) {
    const auto& ops = s.stages[st].ops;
    const int n = static_cast<int>(ops.size());
    prev_same[st].assign(n, -1);
    next_same[st].assign(n, -1);
    std::map<int, int> last;  // fold -> last op index
    for (int i = 0; i < n; ++i) {
      auto it = last.find(ops[i].fold);
      if (it != last.end()) {
        prev_same[st][i] = it->second;
        next_same[st][it->second] = i;
      }
      last[ops[i].fold] = i;
    }
  }
  // anchor[msg]: the receiver posts it right after this compute op (-1: at program start).
  std::vector<int> anchor(s.messages.size());
  for (const Message& m : s.messages) anchor[m.id] = prev_same[m.dst][m.consumer];
  for (const auto& [key, q] : t.link)
    for (int k = static_cast<int>(q.size()) - 2; k >= 0; --k)
      anchor[q[k]] = std::min(anchor[q[k]], anchor[q[k + 1]]);
  for (int st = 0; st < p; ++st) {
    const int n = static_cast<int>(s.stages[st].ops.size());
    std::vector<std::vector<int>> posts(n + 1);  // posts[a + 1]: recvs anchored after op a
    std::vector<std::vector<int>> send_waits_after(n), final_waits;
    for (const Message& m : s.messages)
      if (m.dst == st) posts[anchor[m.id] + 1].push_back(m.id);
    for (auto& group : posts) {
      std::sort(group.begin(), group.end(), [&](int a, int b) {
        const Message &x = s.messages[a], &y = s.messages[b];
        return x.src != y.src ? x.src < y.src : x.tag < y.tag;
      });
    }
    auto& out = s.stages[st].lowered;
    for (int id : posts[0]) out.push_back({OpKind::kRecvStart, id});
    for (int i = 0; i < n; ++i) {
      for (int id : consumed[st][i]) out.push_back({OpKind::kRecvWait, id});
      out.push_back({OpKind::kCompute, i});
      if (prev_same[st][i] >= 0)
        for (int id : produced[st][prev_same[st][i]]) out.push_back({OpKind::kSendWait, id});
      for (int id : produced[st][i]) out.push_back({OpKind::kSendStart, id});
      for (int id : posts[i + 1]) out.push_back({OpKind::kRecvStart, id});
    }
    for (int i = 0; i < n; ++i)
      if (next_same[st][i] < 0)
        for (int id : produced[st][i]) out.push_back({OpKind::kSendWait, id});
  }
}

}  // namespace

ScheduleIndex::ScheduleIndex(const Schedule& s) : s_(&s), parts_(3 * s.layers + 2) {
  const size_t n = static_cast<size_t>(parts_) * static_cast<size_t>(std::max(s.microbatches, 0));
  fwd_.assign(n, PartLocation{});
  bwd_.assign(n, PartLocation{});
  wgt_.assign(n, PartLocation{});
  for (int st = 0; st < static_cast<int>(s.stages.size()); ++st) {
    const auto& ops = s.stages[st].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const ComputeOp& op = ops[i];
      if (op.mb < 0 || op.mb >= s.microbatches) continue;
      for (int k = 0; k < static_cast<int>(op.parts.size()); ++k) {
        const Part& p = op.parts[k];
        if (p.kind != PartKind::kEmbed && p.kind != PartKind::kHead &&
            (p.layer < 1 || p.layer > s.layers))
          continue;
        const size_t slot = static_cast<size_t>(op.mb) * parts_ + p.index(s.layers);
        const PartLocation here{st, i, k};
        auto put = [&](std::vector<PartLocation>& v) {
          if (!v[slot].found()) v[slot] = here;
        };
        switch (op.dir) {
          case Dir::kF: put(fwd_); break;
          case Dir::kB: put(bwd_); put(wgt_); break;
          case Dir::kI: put(bwd_); break;
          case Dir::kW: put(wgt_); break;
        }
      }
    }
  }
}

const PartLocation& ScheduleIndex::at(const std::vector<PartLocation>& v, Part part,
                                      int mb) const {
  if (mb < 0 || mb >= s_->microbatches) return kNowhere;
  if (part.kind != PartKind::kEmbed && part.kind != PartKind::kHead &&
      (part.layer < 1 || part.layer > s_->layers))
    return kNowhere;
  return v[static_cast<size_t>(mb) * parts_ + part.index(s_->layers)];
}

bool ScheduleIndex::attn_remote(int layer, int mb) const {
  const PartLocation& pre = forward(Part::pre(layer), mb);
  const PartLocation& attn = forward(Part::attn(layer), mb);
  return pre.found() && attn.found() && pre.stage != attn.stage;
}

PartContext ScheduleIndex::context(int stage, int op, int k) const {
  const ComputeOp& c = s_->stages[stage].ops[op];
  PartContext ctx;
  ctx.policy = s_->policy_of(stage);
  ctx.transfer = s_->transfer;
  ctx.first_in_op = k == 0;
  ctx.feeds_next_in_op = k + 1 < static_cast<int>(c.parts.size());
  const Part& p = c.parts[k];
  if (p.kind == PartKind::kPre || p.kind == PartKind::kAttn) ctx.attn_remote = attn_remote(p.layer, c.mb);
  return ctx;
}

PartContext ScheduleIndex::forward_context(Part part, int mb) const {
  const PartLocation& f = forward(part, mb);
  if (f.found()) return context(f.stage, f.op, f.pos);
  PartContext ctx;
  ctx.policy = s_->recompute;
  ctx.transfer = s_->transfer;
  return ctx;
}

PartContext part_context(const Schedule& s, int stage, int op, int k) {
  return ScheduleIndex(s).context(stage, op, k);
}

// A walk of the lowered programs under rendezvous FIFO matching. Whenever every stage is held, each
// stage held at a send.wait moves that wait past its next start or compute op.
void defer_blocking_send_waits(Schedule& s) {
  if (s.messages.empty()) return;
  Walker walker(s, Matching::kRendezvous, "lower");
  NullTransport order_only;
  while (!walker.run(order_only)) {
    bool moved = false;
    for (const StuckWait& w : walker.stuck()) {
      if (w.op.kind != OpKind::kSendWait) continue;
      auto& prog = s.stages[w.stage].lowered;
      size_t j = w.pos + 1;
      while (j < prog.size() &&
             (prog[j].kind == OpKind::kSendWait || prog[j].kind == OpKind::kRecvWait))
        ++j;
      if (j >= prog.size()) continue;
      const LoweredOp wait = prog[w.pos];
      prog.erase(prog.begin() + static_cast<std::ptrdiff_t>(w.pos));
      prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(j), wait);  // right after op j
      moved = true;
    }
    if (!moved) return;
  }
}


void lower(Schedule& s, const ModelConfig* cfg, int64_t tokens_per_mb, ElemBytes eb) {
  HP_CHECK(static_cast<int>(s.stages.size()) == s.num_stages,
           "lower: schedule '{}' says {} stages but lists {}", s.name, s.num_stages,
           s.stages.size());
  s.messages.clear();
  for (Stage& st : s.stages) st.lowered.clear();
  const ScheduleIndex index(s);
  Traffic traffic;
  add_messages(s, index, cfg, tokens_per_mb, eb, traffic);
  place_ops(s, traffic);
  defer_blocking_send_waits(s);
}

}  // namespace hp
