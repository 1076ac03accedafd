// The validator (validate.h lists the checks in order).
#include "schedule/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "schedule/lower.h"
#include "schedule/walker.h"
#include "util/error.h"

namespace hp {

namespace {

constexpr size_t kMaxErrors = 25;

std::string where(const Schedule& s, int st, int op) {
  return fmt::format("stage {} op {} ({})", st, op, op_str(s.stages[st].ops[op]));
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string parts_str(const std::vector<Part>& ps) {
  std::vector<std::string> v;
  for (const Part& p : ps) v.push_back(p.str());
  return "[" + join(v) + "]";
}

struct Errors {
  std::vector<std::string>* out;
  size_t dropped = 0;
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    if (out->size() < kMaxErrors) out->push_back(fmt::format(f, std::forward<Args>(args)...));
    else ++dropped;
  }
  void finish() {
    if (dropped) out->push_back(fmt::format("... and {} more errors of this kind", dropped));
    dropped = 0;
  }
  bool any() const { return !out->empty(); }
};

bool part_in_range(const Part& p, int L) {
  return p.kind == PartKind::kEmbed || p.kind == PartKind::kHead || (p.layer >= 1 && p.layer <= L);
}

// 1. Shape.
void check_shape(const Schedule& s, Errors& err) {
  const int p = s.num_stages, m = s.microbatches, L = s.layers;
  if (p < 1) err.add("the schedule has {} stages; it needs at least 1", p);
  if (m < 1) err.add("the schedule has {} micro-batches; it needs at least 1", m);
  if (L < 1) err.add("the schedule has {} layers; it needs at least 1", L);
  if (static_cast<int>(s.stages.size()) != p)
    err.add("the header says {} stages but the schedule lists {}", p, s.stages.size());
  if (!s.stage_recompute.empty() && static_cast<int>(s.stage_recompute.size()) != p)
    err.add("the schedule has {} per-stage recompute policies for {} stages", s.stage_recompute.size(), p);
  if (err.any()) return;
  const int64_t pairs = static_cast<int64_t>(m) * (3 * static_cast<int64_t>(L) + 2);
  if (pairs > 4'000'000) {
    err.add("the schedule has {} micro-batches x {} parts = {} (part, micro-batch) pairs; the "
            "validator handles up to 4000000 (fewer micro-batches or layers)",
            m, 3 * static_cast<int64_t>(L) + 2, pairs);
    return;
  }
  for (int st = 0; st < p; ++st) {
    const auto& ops = s.stages[st].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const ComputeOp& op = ops[i];
      if (op.mb < 0 || op.mb >= m)
        err.add("{}: micro-batch {} is out of range (the schedule has {}: 0..{})", where(s, st, i),
                op.mb, m, m - 1);
      if (op.parts.empty()) err.add("{}: the op runs no parts", where(s, st, i));
      bool parts_ok = true;
      for (const Part& pt : op.parts) {
        if (!part_in_range(pt, L)) {
          err.add("{}: part {} is beyond the schedule's {} layers", where(s, st, i), pt.str(), L);
          parts_ok = false;
        }
      }
      if (!parts_ok) continue;
      const int step = op.dir == Dir::kF ? 1 : -1;
      for (size_t k = 1; k < op.parts.size(); ++k) {
        if (op.parts[k].index(L) != op.parts[k - 1].index(L) + step) {
          err.add("{}: the parts of an op must be a contiguous run of the model order ({}), but "
                  "{} is followed by {}",
                  where(s, st, i),
                  op.dir == Dir::kF ? "ascending for F" : "descending for B, I and W",
                  op.parts[k - 1].str(), op.parts[k].str());
          break;
        }
      }
      const std::vector<Part> want = recompute_parts(op, s.policy_of(st));
      if (op.recompute != want)
        err.add("{}: the op recomputes {} but recompute policy '{}' means {}", where(s, st, i),
                parts_str(op.recompute), recompute_str(s.policy_of(st)), parts_str(want));
    }
  }
  err.finish();
}

// Every occurrence of (part, mb) per phase.
struct Occ {
  int stage, op;
};
struct Occurrences {
  int parts = 0;
  // [phase][mb * parts + part index]; phases F, B, I, W
  std::vector<std::vector<Occ>> at[4];
  std::vector<Occ>& get(Dir d, int mb, int part) { return at[static_cast<int>(d)][mb * parts + part]; }
};

std::string occ_list(const Schedule& s, const std::vector<Occ>& v) {
  std::vector<std::string> out;
  for (const Occ& o : v) out.push_back(where(s, o.stage, o.op));
  return join(out, ", ");
}

// 2. Exactly once; 3. ownership; 4. order on a stage.
void check_placement(const Schedule& s, const ScheduleIndex& index, Errors& err) {
  const int m = s.microbatches, L = s.layers, np = 3 * L + 2;
  Occurrences occ;
  occ.parts = np;
  for (auto& v : occ.at) v.assign(static_cast<size_t>(m) * np, {});
  for (int st = 0; st < s.num_stages; ++st)
    for (int i = 0; i < static_cast<int>(s.stages[st].ops.size()); ++i) {
      const ComputeOp& op = s.stages[st].ops[i];
      for (const Part& pt : op.parts) occ.get(op.dir, op.mb, pt.index(L)).push_back({st, i});
    }
  for (int mb = 0; mb < m; ++mb)
    for (int k = 0; k < np; ++k) {
      const std::string name = Part::from_index(k, L).str();
      auto& f = occ.get(Dir::kF, mb, k);
      if (f.empty()) err.add("the forward of {} for micro-batch {} never runs", name, mb);
      if (f.size() > 1)
        err.add("the forward of {} for micro-batch {} runs {} times: {}", name, mb, f.size(),
                occ_list(s, f));
      auto &b = occ.get(Dir::kB, mb, k), &in = occ.get(Dir::kI, mb, k), &w = occ.get(Dir::kW, mb, k);
      const bool full = b.size() == 1 && in.empty() && w.empty();
      const bool split = b.empty() && in.size() == 1 && w.size() == 1;
      if (full || split) continue;
      if (b.empty() && in.empty() && w.empty()) {
        err.add("the backward of {} for micro-batch {} never runs (it needs one B, or one I and "
                "one W)",
                name, mb);
        continue;
      }
      std::vector<Occ> all = b;
      all.insert(all.end(), in.begin(), in.end());
      all.insert(all.end(), w.begin(), w.end());
      err.add("the backward of {} for micro-batch {} runs as {} B, {} I and {} W ({}); it needs "
              "one B, or one I and one W",
              name, mb, b.size(), in.size(), w.size(), occ_list(s, all));
    }
  err.finish();
  if (err.any()) return;

  // Ownership.
  for (int k = 0; k < np; ++k) {
    const Part part = Part::from_index(k, L);
    const PartLocation& home = index.forward(part, 0);
    bool reported = false;
    for (int mb = 0; mb < m && !reported; ++mb) {
      const PartLocation* locs[3] = {&index.forward(part, mb), &index.backward(part, mb),
                                     &index.weight(part, mb)};
      for (const PartLocation* loc : locs) {
        if (part.has_params() && loc->stage != home.stage) {
          err.add("{} holds parameters on stage {} (its forward of micro-batch 0 runs there), but "
                  "{} runs it for micro-batch {}; a part's parameters live on one stage",
                  part.str(), home.stage, where(s, loc->stage, loc->op), mb);
          reported = true;
          break;
        }
      }
      if (reported) break;
      const PartLocation& f = index.forward(part, mb);
      for (const PartLocation* loc : {locs[1], locs[2]}) {
        if (loc->stage != f.stage) {
          err.add("{} runs a backward of {} for micro-batch {}, but its forward ran on stage {}: "
                  "the backward must run where the forward's stash is",
                  where(s, loc->stage, loc->op), part.str(), mb, f.stage);
          reported = true;
          break;
        }
      }
    }
  }
  err.finish();
  if (err.any()) return;

  // Order on a stage.
  for (int mb = 0; mb < m; ++mb)
    for (int k = 0; k < np; ++k) {
      const Part part = Part::from_index(k, L);
      const PartLocation &f = index.forward(part, mb), &b = index.backward(part, mb),
                         &w = index.weight(part, mb);
      if (b.op < f.op)
        err.add("{} runs the backward of {} for micro-batch {} before its forward ({})",
                where(s, b.stage, b.op), part.str(), mb, where(s, f.stage, f.op));
      const ComputeOp& bop = s.stages[b.stage].ops[b.op];
      if (bop.dir == Dir::kI && w.op < b.op)
        err.add("{} runs the W of {} for micro-batch {} before its I ({})",
                where(s, w.stage, w.op), part.str(), mb, where(s, b.stage, b.op));
      if (k + 1 < np) {  // forward output of part k feeds part k+1
        const PartLocation& c = index.forward(Part::from_index(k + 1, L), mb);
        if (c.stage == f.stage && c.op < f.op)
          err.add("{} needs the forward output of {} for micro-batch {}, which {} produces later",
                  where(s, c.stage, c.op), part.str(), mb, where(s, f.stage, f.op));
      }
      if (k > 0) {  // gradient of part k feeds the backward of part k-1
        const PartLocation& c = index.backward(Part::from_index(k - 1, L), mb);
        if (c.stage == b.stage && c.op < b.op)
          err.add("{} needs the gradient from {} for micro-batch {}, which {} produces later",
                  where(s, c.stage, c.op), part.str(), mb, where(s, b.stage, b.op));
      }
    }
  err.finish();
}

std::vector<std::string> value_names(const std::vector<Value>& vs) {
  std::vector<std::string> out;
  for (const Value& v : vs) out.push_back(v.str());
  return out;
}

// 5. The lowered program's structure and message contents.
void check_lowered(const Schedule& s, const ScheduleIndex& index, const ValidateOptions& opt,
                   int64_t* per_rank_bytes, Errors& err) {
  const int p = s.num_stages, L = s.layers;
  std::map<int, int> by_id;
  for (size_t i = 0; i < s.messages.size(); ++i) {
    const Message& m = s.messages[i];
    if (!by_id.emplace(m.id, static_cast<int>(i)).second) err.add("message id {} repeats", m.id);
    if (m.src < 0 || m.src >= p || m.dst < 0 || m.dst >= p || m.src == m.dst)
      err.add("message {} goes from stage {} to stage {} in a {}-stage schedule", m.id, m.src,
              m.dst, p);
  }
  err.finish();
  if (err.any()) return;
  // Position of every lowered op: [kind][message index] -> (stage, position)
  std::vector<std::vector<std::pair<int, int>>> pos(5, std::vector<std::pair<int, int>>(s.messages.size(), {-1, -1}));
  std::vector<std::vector<int>> compute_pos(p);
  for (int st = 0; st < p; ++st) {
    const auto& prog = s.stages[st].lowered;
    compute_pos[st].assign(s.stages[st].ops.size(), -1);
    int expect = 0;
    for (int j = 0; j < static_cast<int>(prog.size()); ++j) {
      const LoweredOp& op = prog[j];
      if (op.kind == OpKind::kCompute) {
        if (op.index != expect) {
          err.add("stage {}: lowered op {} runs compute op {}, but the next compute op in order is "
                  "{}",
                  st, j, op.index, expect);
          return;
        }
        compute_pos[st][expect++] = j;
        continue;
      }
      auto it = by_id.find(op.index);
      if (it == by_id.end()) {
        err.add("stage {}: lowered op {} is a {} of message {}, which does not exist", st, j,
                op_kind_str(op.kind), op.index);
        continue;
      }
      const Message& m = s.messages[it->second];
      const bool send = runs_on_sender(op.kind);
      if ((send ? m.src : m.dst) != st) {
        err.add("stage {}: lowered op {} is a {} of {}, which belongs to stage {}", st, j,
                op_kind_str(op.kind), message_label(m), send ? m.src : m.dst);
        continue;
      }
      auto& slot = pos[static_cast<int>(op.kind)][it->second];
      if (slot.first >= 0)
        err.add("stage {}: {} of {} appears twice", st, op_kind_str(op.kind), message_label(m));
      slot = {st, j};
    }
    if (expect != static_cast<int>(s.stages[st].ops.size()))
      err.add("stage {}: the lowered program never runs compute op {} ({})", st, expect,
              op_str(s.stages[st].ops[expect]));
  }
  err.finish();
  if (err.any()) return;
  for (size_t i = 0; i < s.messages.size(); ++i) {
    const Message& m = s.messages[i];
    const int ss = pos[static_cast<int>(OpKind::kSendStart)][i].second,
              sw = pos[static_cast<int>(OpKind::kSendWait)][i].second,
              rs = pos[static_cast<int>(OpKind::kRecvStart)][i].second,
              rw = pos[static_cast<int>(OpKind::kRecvWait)][i].second;
    if (ss < 0 || sw < 0 || rw < 0) {
      const bool recv = ss >= 0 && sw >= 0;
      err.add("{} lacks its {} on stage {}", message_label(m),
              ss < 0   ? "send.start"
              : sw < 0 ? "send.wait"
                       : "recv.wait",
              recv ? m.dst : m.src);
      continue;
    }
    if (sw < ss)
      err.add("stage {}: the send.wait of {} comes before its send.start", m.src, message_label(m));
    if (rs >= 0 && rw < rs)
      err.add("stage {}: the recv.wait of {} comes before its recv.start", m.dst, message_label(m));
    const auto& sops = s.stages[m.src].ops;
    const auto& dops = s.stages[m.dst].ops;
    if (m.producer < 0 || m.producer >= static_cast<int>(sops.size()) || m.consumer < 0 ||
        m.consumer >= static_cast<int>(dops.size())) {
      err.add("{} names producer op {} / consumer op {}, which do not exist", message_label(m),
              m.producer, m.consumer);
      continue;
    }
    if (ss < compute_pos[m.src][m.producer])
      err.add("stage {}: {} starts sending before its producer {} runs", m.src, message_label(m),
              where(s, m.src, m.producer));
    if (rw > compute_pos[m.dst][m.consumer])
      err.add("stage {}: {} is waited for after its consumer {} runs", m.dst, message_label(m),
              where(s, m.dst, m.consumer));
    // Contents: the producing part's outputs for this micro-batch.
    const ComputeOp& prod = sops[m.producer];
    auto k = std::find(prod.parts.begin(), prod.parts.end(), m.from);
    if (k == prod.parts.end() || prod.mb != m.mb) {
      err.add("{} says it comes from {} but {} does not run it for micro-batch {}",
              message_label(m), m.from.str(), where(s, m.src, m.producer), m.mb);
      continue;
    }
    const PartContext ctx =
        index.context(m.src, m.producer, static_cast<int>(k - prod.parts.begin()));
    const std::vector<Value> want = prod.dir == Dir::kF ? forward_outputs(m.from, ctx, L)
                                                        : backward_outputs(m.from, ctx, L);
    if (m.values != value_names(want))
      err.add("{} carries [{}] but {} hands on [{}]", message_label(m), join(m.values),
              m.from.str(), join(value_names(want)));
    if (opt.model && opt.tokens_per_mb > 0) {
      const int64_t bytes = values_bytes(want, *opt.model, opt.tokens_per_mb, opt.elem_bytes);
      if (m.bytes != bytes)
        err.add("{} says {} bytes but its values take {} bytes for this model", message_label(m),
                m.bytes, bytes);
      *per_rank_bytes +=
          values_bytes(want, *opt.model, opt.tokens_per_mb, opt.elem_bytes, opt.tensor_parallel);
    }
  }
  err.finish();
}

// The order in which every link's sends start and its receives are posted: each stage's program
// walked on its own (a recv.wait that posts its own receive counts where it stands).
class PostingOrder : public WalkObserver {
 public:
  std::map<std::pair<int, int>, std::vector<int>> sends, recvs;  // (src, dst) -> message ids
  void on_send_start(int, const Message& m, double) override {
    sends[{m.src, m.dst}].push_back(m.id);
  }
  void on_recv_start(int, const Message& m, double) override {
    recvs[{m.src, m.dst}].push_back(m.id);
  }
};

// 6. Per ordered pair: receives posted in send order.
void check_matching(const Schedule& s, Errors& err) {
  PostingOrder order;
  {
    Walker each_stage(s, Matching::kByTransport, "validate");
    NullTransport none;
    WalkObserver* obs[] = {&order};
    each_stage.run(none, obs);
  }
  std::map<int, const Message*> by_id;
  for (const Message& m : s.messages) by_id[m.id] = &m;
  std::set<std::pair<int, int>> links;
  for (auto& [k, v] : order.sends) links.insert(k);
  for (auto& [k, v] : order.recvs) links.insert(k);
  for (const auto& link : links) {
    const auto& a = order.sends[link];
    const auto& b = order.recvs[link];
    if (a.size() != b.size()) {
      err.add("link stage {} -> {}: {} sends but {} receives", link.first, link.second, a.size(),
              b.size());
      continue;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i]) continue;
      const Message &x = *by_id.at(a[i]), &y = *by_id.at(b[i]);
      err.add(
          "link stage {} -> {}: send number {} is {} ({} bytes) but receive number {} posted "
          "is {} ({} bytes); receives must be posted in send order",
          link.first, link.second, i + 1, message_label(x), x.bytes, i + 1, message_label(y),
          y.bytes);
      break;
    }
  }
  err.finish();
}

// Dataflow over values.h: every input a part reads must have been produced earlier on its stage
// or received there.
class DataflowCheck : public WalkObserver {
 public:
  DataflowCheck(const Schedule& s, const ScheduleIndex& index, Errors& err)
      : s_(s), index_(index), err_(err), have_(static_cast<size_t>(s.num_stages)) {}

  void on_compute(int st, int i, const OpTimes&) override {
    const ComputeOp& op = s_.stages[st].ops[i];
    for (int k = 0; k < static_cast<int>(op.parts.size()); ++k) {
      const Part& part = op.parts[k];
      const PartContext ctx = index_.context(st, i, k);
      std::vector<Value> in, out;
      if (op.dir == Dir::kF) {
        in = forward_inputs(part, ctx, s_.layers);
        out = forward_outputs(part, ctx, s_.layers);
      } else if (op.dir != Dir::kW) {
        in = backward_inputs(part, ctx, s_.layers);
        out = backward_outputs(part, ctx, s_.layers);
      }
      for (const Value& v : in) {
        if (have_[st].count(key(v, op.mb))) continue;
        if (missing_++ < kShown)
          err_.add(
              "{}: {} needs {} of micro-batch {}, which is neither produced earlier on stage "
              "{} nor received there",
              where(s_, st, i), part.str(), v.str(), op.mb, st);
      }
      for (const Value& v : out) have_[st].insert(key(v, op.mb));
    }
  }
  void on_recv_wait(int st, const Message& m, double, const OpTimes&) override {
    for (const std::string& v : m.values) have_[st].insert(key(Value::parse(v), m.mb));
  }
  void finish() {
    if (missing_ > kShown) err_.add("... and {} more missing inputs", missing_ - kShown);
  }

 private:
  using Key = std::tuple<int, int, int>;  // value kind, layer, mb
  static Key key(const Value& v, int mb) { return Key{static_cast<int>(v.kind), v.layer, mb}; }
  static constexpr size_t kShown = 10;
  const Schedule& s_;
  const ScheduleIndex& index_;
  Errors& err_;
  std::vector<std::set<Key>> have_;
  size_t missing_ = 0;
};

// 7. A walk under rendezvous FIFO matching (walker.h) with the dataflow check.
void check_execution(const Schedule& s, const ScheduleIndex& index, Errors& err,
                     std::string* grid) {
  Walker walker(s, Matching::kRendezvous, "validate");
  NullTransport none;
  DataflowCheck dataflow(s, index, err);
  WalkObserver* obs[] = {&dataflow};
  const bool finished = walker.run(none, obs);
  dataflow.finish();
  if (finished) return;
  for (const std::string& line : walker.deadlock_report()) err.add("{}", line);
  *grid = walker.deadlock_grid();
  err.finish();
}

}  // namespace

int64_t stash_bytes(const std::vector<StashItem>& items, const ModelConfig& cfg,
                    int64_t tokens_per_mb, ElemBytes eb, int tp) {
  int64_t n = 0;
  for (const StashItem& it : items)
    n += value_elems(it.value, cfg, tokens_per_mb, tp) * eb.of(it.value.kind);
  return n;
}

namespace {

// Stash accounting: after every compute op, the set of (value, micro-batch) its stage keeps.
class StashTracker : public WalkObserver {
 public:
  explicit StashTracker(const Schedule& s) : s_(s), index_(s) {}
  std::vector<std::vector<StashItem>> trace;  // entry i: after the stage's i-th compute op

  void on_compute(int stage, int i, const OpTimes&) override {
    const ComputeOp& op = s_.stages[stage].ops[i];
    const int L = s_.layers;
    for (int k = 0; k < static_cast<int>(op.parts.size()); ++k) {
      const Part& part = op.parts[k];
      // The forward's context decides what was kept (first_in_op differs between F and B ops).
      const PartContext fctx = index_.forward_context(part, op.mb);
      const PartContext ctx = index_.context(stage, i, k);
      switch (op.dir) {
        case Dir::kF: add(forward_stash(part, ctx, L), op.mb); break;
        case Dir::kB: drop(forward_stash(part, fctx, L), op.mb); break;
        case Dir::kI:
          add(weight_stash(part, ctx, L), op.mb);
          drop(forward_stash(part, fctx, L), op.mb);
          break;
        case Dir::kW: drop(weight_stash(part, ctx, L), op.mb); break;
      }
    }
    std::vector<StashItem> now;
    for (const auto& [item, count] : held_) now.push_back(item);
    trace.push_back(std::move(now));
  }

 private:
  void add(const std::vector<Value>& vs, int mb) {
    for (const Value& v : vs) held_[StashItem{v, mb}]++;
  }
  void drop(const std::vector<Value>& vs, int mb) {
    for (const Value& v : vs) {
      auto it = held_.find(StashItem{v, mb});
      if (it != held_.end() && --it->second == 0) held_.erase(it);
    }
  }
  const Schedule& s_;
  const ScheduleIndex index_;
  std::map<StashItem, int> held_;  // refcount per (value, mb)
};

}  // namespace

std::vector<std::vector<StashItem>> stash_trace(const Schedule& s, int stage) {
  Walker walker(s, stage, "stash_trace");
  NullTransport none;
  StashTracker tracker(s);
  WalkObserver* obs[] = {&tracker};
  walker.run(none, obs);
  return std::move(tracker.trace);
}

ValidationReport validate(const Schedule& s, const ValidateOptions& opt) {
  ValidationReport r;
  Errors err{&r.errors};
  check_shape(s, err);
  if (err.any()) return r;
  const ScheduleIndex index(s);
  check_placement(s, index, err);
  if (err.any()) return r;

  Schedule low = s;
  if (!s.is_lowered()) {
    try {
      lower(low, opt.model, opt.tokens_per_mb, opt.elem_bytes);
    } catch (const Error& e) {
      err.add("{}", e.what());
      return r;
    }
  }
  const ScheduleIndex low_index(low);
  if (opt.model && opt.tensor_parallel > 1) {
    try {
      check_tensor_parallel(*opt.model, opt.tensor_parallel, opt.tokens_per_mb);
    } catch (const Error& e) {
      err.add("{}", e.what());
      return r;
    }
  }
  check_lowered(low, low_index, opt, &r.message_bytes_per_rank, err);
  if (err.any()) return r;
  check_matching(low, err);
  if (err.any()) return r;
  check_execution(low, low_index, err, &r.deadlock_grid);

  for (int st = 0; st < s.num_stages; ++st) r.compute_ops += static_cast<int>(s.stages[st].ops.size());
  r.messages = static_cast<int>(low.messages.size());
  for (const Message& m : low.messages) r.message_bytes += m.bytes;
  r.peak_stash_bytes.assign(s.num_stages, 0);
  r.peak_stash_items.assign(s.num_stages, 0);
  r.peak_after_op.assign(s.num_stages, -1);
  r.peak_stash_bytes_per_rank.assign(s.num_stages, 0);
  const bool sized = opt.model && opt.tokens_per_mb > 0;
  for (int st = 0; st < s.num_stages; ++st) {
    const auto trace = stash_trace(s, st);
    for (int i = 0; i < static_cast<int>(trace.size()); ++i) {
      const int64_t bytes =
          sized ? stash_bytes(trace[i], *opt.model, opt.tokens_per_mb, opt.elem_bytes) : 0;
      if (sized)
        r.peak_stash_bytes_per_rank[st] =
            std::max(r.peak_stash_bytes_per_rank[st],
                     opt.tensor_parallel == 1
                         ? bytes
                         : stash_bytes(trace[i], *opt.model, opt.tokens_per_mb, opt.elem_bytes,
                                       opt.tensor_parallel));
      const bool higher = opt.model ? bytes > r.peak_stash_bytes[st]
                                    : static_cast<int>(trace[i].size()) > r.peak_stash_items[st];
      if (higher) {
        r.peak_stash_bytes[st] = bytes;
        r.peak_stash_items[st] = static_cast<int>(trace[i].size());
        r.peak_after_op[st] = i;
      }
    }
  }
  return r;
}

std::string ValidationReport::text(const Schedule& s) const {
  std::string out;
  std::string title = fmt::format("schedule '{}' (stages {}, micro-batches {}, layers {}", s.name,
                                  s.num_stages, s.microbatches, s.layers);
  if (s.folds > 1) title += fmt::format(", folds {}", s.folds);
  if (s.virtual_stages > 1) title += fmt::format(", virtual {}", s.virtual_stages);
  title += fmt::format(", recompute {}, transfer {})", recompute_str(s.recompute),
                       transfer_str(s.transfer));
  if (!ok()) {
    out += fmt::format("INVALID: {}: {} error{}\n", title, errors.size(),
                       errors.size() == 1 ? "" : "s");
    for (const std::string& e : errors) out += "  - " + e + "\n";
    out += deadlock_grid;
    return out;
  }
  out += fmt::format("ok: {}\n", title);
  out += fmt::format("  {} compute ops, {} messages", compute_ops, messages);
  if (message_bytes > 0) out += fmt::format(" ({:.3f} MiB)", static_cast<double>(message_bytes) / (1 << 20));
  if (message_bytes_per_rank > 0 && message_bytes_per_rank != message_bytes)
    out += fmt::format(" ({:.3f} MiB per tensor-parallel rank and link)",
                       static_cast<double>(message_bytes_per_rank) / (1 << 20));
  out += "; every part runs once where it belongs, inputs arrive before use, sends and receives "
         "match, no deadlock\n";
  out += "  peak stash per stage:\n";
  for (size_t st = 0; st < peak_stash_items.size(); ++st) {
    out += fmt::format("    stage {:>2}: {:>5} values", st, peak_stash_items[st]);
    if (peak_stash_bytes[st] > 0)
      out += fmt::format(", {:>12} bytes ({:.2f} MiB)", peak_stash_bytes[st],
                         static_cast<double>(peak_stash_bytes[st]) / (1 << 20));
    if (st < peak_stash_bytes_per_rank.size() && peak_stash_bytes_per_rank[st] > 0 &&
        peak_stash_bytes_per_rank[st] != peak_stash_bytes[st])
      out += fmt::format("; per tensor-parallel rank {} bytes ({:.2f} MiB)",
                         peak_stash_bytes_per_rank[st],
                         static_cast<double>(peak_stash_bytes_per_rank[st]) / (1 << 20));
    out += "\n";
  }
  return out;
}

}  // namespace hp
