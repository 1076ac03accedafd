// The walker (walker.h says what each op means and how transfers are matched).
#include "schedule/walker.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "util/error.h"

namespace hp {

std::string message_label(const Message& m) {
  return fmt::format("message {} ({}{} {} -> {}, stage {} -> {})", m.id, dir_str(m.dir), m.mb,
                     m.from.str(), m.to.str(), m.src, m.dst);
}

std::string compute_op_label(const Schedule& s, int stage, int op) {
  const bool exists = stage >= 0 && stage < static_cast<int>(s.stages.size()) && op >= 0 &&
                      op < static_cast<int>(s.stages[stage].ops.size());
  if (!exists) return fmt::format("stage {} op {}", stage, op);
  return fmt::format("stage {} op {} ({})", stage, op, op_str(s.stages[stage].ops[op]));
}

Walker::Walker(const Schedule& s, Matching matching, std::string who)
    : s_(s), matching_(matching), who_(std::move(who)) {
  for (int st = 0; st < s.num_stages; ++st) stages_.push_back(st);
  index_messages();
  check_programs();
  if (fifo()) build_links();
  reset();
}

Walker::Walker(const Schedule& s, int stage, std::string who)
    : s_(s), matching_(Matching::kByTransport), who_(std::move(who)) {
  HP_CHECK(stage >= 0 && stage < s.num_stages, "{}: stage {} is outside the schedule's {} stages",
           who_, stage, s.num_stages);
  stages_.push_back(stage);
  index_messages();
  check_programs();
  reset();
}

void Walker::index_messages() {
  HP_CHECK(static_cast<int>(s_.stages.size()) == s_.num_stages,
           "{}: schedule '{}' says {} stages but lists {}", who_, s_.name, s_.num_stages,
           s_.stages.size());
  const int n = static_cast<int>(s_.messages.size());
  int lo = 0, hi = -1;
  for (const Message& m : s_.messages) {
    lo = std::min(lo, m.id);
    hi = std::max(hi, m.id);
  }
  const bool dense = lo >= 0 && hi < 4 * n + 1024;
  if (dense) by_id_.assign(static_cast<size_t>(hi + 1), -1);
  for (int i = 0; i < n; ++i) {
    const Message& m = s_.messages[i];
    const bool fresh = dense ? by_id_[m.id] < 0 : by_id_sparse_.emplace(m.id, i).second;
    HP_CHECK(fresh, "{}: message id {} repeats", who_, m.id);
    if (dense) by_id_[m.id] = i;
    HP_CHECK(m.src >= 0 && m.src < s_.num_stages && m.dst >= 0 && m.dst < s_.num_stages &&
                 m.src != m.dst,
             "{}: message {} goes from stage {} to {} in a {}-stage schedule", who_, m.id, m.src,
             m.dst, s_.num_stages);
  }
}

int Walker::message_index(int id) const {
  if (!by_id_sparse_.empty() || by_id_.empty()) {
    auto it = by_id_sparse_.find(id);
    return it == by_id_sparse_.end() ? -1 : it->second;
  }
  return id >= 0 && id < static_cast<int>(by_id_.size()) ? by_id_[id] : -1;
}

size_t Walker::program_size(int stage) const {
  const Stage& st = s_.stages[static_cast<size_t>(stage)];
  return st.lowered.empty() ? st.ops.size() : st.lowered.size();
}

LoweredOp Walker::op_at(int stage, size_t pos) const {
  const Stage& st = s_.stages[static_cast<size_t>(stage)];
  if (st.lowered.empty()) return LoweredOp{OpKind::kCompute, static_cast<int>(pos)};
  return st.lowered[pos];
}

void Walker::check_programs() {
  for (int st : stages_) {
    const int ops = static_cast<int>(s_.stages[st].ops.size());
    for (size_t j = 0; j < program_size(st); ++j) {
      const LoweredOp op = op_at(st, j);
      if (op.kind == OpKind::kCompute) {
        HP_CHECK(op.index >= 0 && op.index < ops, "{}: stage {} runs compute op {} but has {} ops",
                 who_, st, op.index, ops);
        continue;
      }
      const int mi = message_index(op.index);
      HP_CHECK(mi >= 0, "{}: stage {} has a {} of message {}, which does not exist", who_, st,
               op_kind_str(op.kind), op.index);
      const Message& m = s_.messages[mi];
      const int owner = runs_on_sender(op.kind) ? m.src : m.dst;
      HP_CHECK(owner == st, "{}: stage {} has a {} of {}, which belongs to stage {}", who_, st,
               op_kind_str(op.kind), message_label(m), owner);
    }
  }
}

void Walker::build_links() {
  const size_t n = s_.messages.size();
  link_of_.assign(n, -1);
  std::map<std::pair<int, int>, int> link_id;
  std::vector<int> sends(n, 0);
  for (int st : stages_) {
    for (size_t j = 0; j < program_size(st); ++j) {
      const LoweredOp op = op_at(st, j);
      if (op.kind != OpKind::kSendStart) continue;
      const int mi = message_index(op.index);
      const Message& m = s_.messages[mi];
      HP_CHECK(++sends[mi] == 1, "{}: {} is sent twice (stage {})", who_, message_label(m), st);
      auto [it, fresh] = link_id.emplace(std::pair{m.src, m.dst}, static_cast<int>(links_.size()));
      if (fresh) links_.emplace_back();
      link_of_[mi] = it->second;
      links_[it->second].push_back(mi);
    }
  }
  for (size_t i = 0; i < n; ++i)
    HP_CHECK(sends[i] == 1, "{}: {} is never sent (stage {} has no send.start for it)", who_,
             message_label(s_.messages[i]), s_.messages[i].src);
}

void Walker::reset() {
  pc_.assign(static_cast<size_t>(s_.num_stages), 0);
  state_.assign(s_.messages.size(), 0);
  send_posted_.assign(s_.messages.size(), 0.0);
  recv_posted_.assign(s_.messages.size(), 0.0);
  link_head_.assign(links_.size(), 0);
}

bool Walker::run(WalkTransport& t, std::span<WalkObserver* const> obs) {
  if (!fifo()) {
    for (int st : stages_) {
      const size_t n = program_size(st);
      while (pc_[st] < n) {
        step(st, t, obs);
        ++pc_[st];
      }
    }
    check_finished();
    return true;
  }
  for (;;) {
    bool moved = false, done = true;
    for (int st : stages_) {
      const size_t n = program_size(st);
      while (pc_[st] < n && step(st, t, obs)) {
        ++pc_[st];
        moved = true;
      }
      done = done && pc_[st] == n;
    }
    if (done) {
      check_finished();
      return true;
    }
    if (!moved) return false;
  }
}

// The one switch over op kinds: what each op of a lowered program means.
bool Walker::step(int st, WalkTransport& t, std::span<WalkObserver* const> obs) {
  const LoweredOp op = op_at(st, pc_[st]);
  switch (op.kind) {
    case OpKind::kCompute: {
      const OpTimes tm = t.compute(st, op.index);
      for (WalkObserver* o : obs) o->on_compute(st, op.index, tm);
      break;
    }
    case OpKind::kSendStart:
      start_send(st, message_index(op.index), t, obs);
      break;
    case OpKind::kRecvStart:
      start_recv(st, message_index(op.index), t, obs);
      break;
    case OpKind::kSendWait:
      if (!wait_send(st, message_index(op.index), t, obs)) return false;
      break;
    case OpKind::kRecvWait:
      if (!wait_recv(st, message_index(op.index), t, obs)) return false;
      break;
  }
  t.after_op(st);
  return true;
}

void Walker::start_send(int st, int mi, WalkTransport& t, std::span<WalkObserver* const> obs) {
  uint8_t& f = state_[mi];
  if (f & kSent) broken(st, mi, "starts the send of {} a second time");
  f |= kSent;
  const Message& m = s_.messages[mi];
  send_posted_[mi] = t.start_send(st, m);
  for (WalkObserver* o : obs) o->on_send_start(st, m, send_posted_[mi]);
  if (fifo()) advance_link(link_of_[mi], t, obs);
}

void Walker::start_recv(int st, int mi, WalkTransport& t, std::span<WalkObserver* const> obs) {
  uint8_t& f = state_[mi];
  if (f & kPosted) broken(st, mi, "posts the receive of {} a second time");
  f |= kPosted;
  const Message& m = s_.messages[mi];
  recv_posted_[mi] = t.start_recv(st, m);
  for (WalkObserver* o : obs) o->on_recv_start(st, m, recv_posted_[mi]);
  if (fifo()) advance_link(link_of_[mi], t, obs);
}

bool Walker::wait_send(int st, int mi, WalkTransport& t, std::span<WalkObserver* const> obs) {
  const uint8_t f = state_[mi];
  if (!(f & kSent)) broken(st, mi, "waits for the send of {} before its send.start");
  if (f & kSendWaited) broken(st, mi, "waits for the send of {} a second time");
  if (fifo() && !(f & kMoved)) return false;
  const Message& m = s_.messages[mi];
  const OpTimes tm = t.wait_send(st, m);
  state_[mi] |= kSendWaited;
  for (WalkObserver* o : obs) o->on_send_wait(st, m, send_posted_[mi], tm);
  return true;
}

bool Walker::wait_recv(int st, int mi, WalkTransport& t, std::span<WalkObserver* const> obs) {
  if (state_[mi] & kRecvWaited) broken(st, mi, "waits for the receive of {} a second time");
  if (!(state_[mi] & kPosted)) start_recv(st, mi, t, obs);  // a blocking receive posts itself
  if (fifo() && !(state_[mi] & kMoved)) return false;
  const Message& m = s_.messages[mi];
  const OpTimes tm = t.wait_recv(st, m);
  state_[mi] |= kRecvWaited;
  for (WalkObserver* o : obs) o->on_recv_wait(st, m, recv_posted_[mi], tm);
  return true;
}

void Walker::advance_link(int link, WalkTransport& t, std::span<WalkObserver* const> obs) {
  const std::vector<int>& q = links_[link];
  size_t& head = link_head_[link];
  while (head < q.size()) {
    uint8_t& f = state_[q[head]];
    if (!(f & kSent) || (matching_ == Matching::kRendezvous && !(f & kPosted))) break;
    f |= kMoved;
    const Message& m = s_.messages[q[head]];
    const TransferTimes tt = t.transfer(m);
    for (WalkObserver* o : obs) o->on_transfer(m, tt);
    ++head;
  }
}

void Walker::check_finished() const {
  // Every stage is walked, or just one.
  auto walked = [&](int st) {
    return stages_.size() > 1 || (!stages_.empty() && stages_[0] == st);
  };
  for (size_t i = 0; i < s_.messages.size(); ++i) {
    const Message& m = s_.messages[i];
    const uint8_t f = state_[i];
    const int mi = static_cast<int>(i);
    if (walked(m.src) && (f & kSent) && !(f & kSendWaited))
      broken(m.src, mi, "never waits for the send of {} (no send.wait)");
    if (walked(m.dst) && (f & kPosted) && !(f & kRecvWaited))
      broken(m.dst, mi, "never waits for the receive of {} (no recv.wait)");
    if (fifo() && !(f & kPosted))
      broken(m.dst, mi, "never receives {} (no recv.start or recv.wait)");
  }
}

void Walker::broken(int stage, int mi, const std::string& what) const {
  const std::string where = pc_[stage] < program_size(stage)
                                ? fmt::format("at lowered op {}", pc_[stage])
                                : std::string("at the end of its program");
  fail("{}: stage {} {}, {} (a broken lowering; run 'helixpipe validate')", who_, stage,
       fmt::format(fmt::runtime(what), message_label(s_.messages[mi])), where);
}

std::vector<StuckWait> Walker::stuck() const {
  std::vector<StuckWait> out;
  for (int st : stages_) {
    if (pc_[st] >= program_size(st)) continue;
    StuckWait w;
    w.stage = st;
    w.pos = pc_[st];
    w.op = op_at(st, w.pos);
    w.msg = message_index(w.op.index);
    if (w.op.kind == OpKind::kCompute || w.msg < 0) continue;  // cannot happen after run()
    const uint8_t f = state_[w.msg];
    if (w.op.kind == OpKind::kRecvWait && !(f & kSent)) {
      w.why = StuckWait::Why::kNotSent;
    } else if (w.op.kind == OpKind::kSendWait && matching_ == Matching::kRendezvous &&
               !(f & kPosted)) {
      w.why = StuckWait::Why::kNotPosted;
    } else if (fifo()) {
      w.why = StuckWait::Why::kQueued;
      const int link = link_of_[w.msg];
      w.blocker = links_[link][link_head_[link]];
    }
    out.push_back(w);
  }
  return out;
}

std::string Walker::stage_state(int st) const {
  if (pc_[st] >= program_size(st)) return "has finished";
  return fmt::format("is itself stuck at lowered op {} ({})", pc_[st],
                     op_label(st, op_at(st, pc_[st])));
}

std::vector<std::string> Walker::deadlock_report() const {
  const std::vector<StuckWait> stuck_now = stuck();
  std::vector<std::string> out;
  out.push_back(
      fmt::format("deadlock under blocking in-order execution: {} of {} stages can "
                  "never finish",
                  stuck_now.size(), s_.num_stages));
  for (const StuckWait& w : stuck_now) {
    const Message& m = s_.messages[w.msg];
    std::string why;
    switch (w.why) {
      case StuckWait::Why::kNotSent:
        why = fmt::format(
            "stage {} has not started sending it (it would right after {}), and "
            "stage {} {}",
            m.src, compute_op_label(s_, m.src, m.producer), m.src, stage_state(m.src));
        break;
      case StuckWait::Why::kNotPosted:
        why =
            fmt::format("stage {} has not posted its receive (needed by {}), and stage {} {}",
                        m.dst, compute_op_label(s_, m.dst, m.consumer), m.dst, stage_state(m.dst));
        break;
      case StuckWait::Why::kQueued: {
        const Message& b = s_.messages[w.blocker];
        why = fmt::format("it is queued on link {} -> {} behind {}, whose {} is missing", m.src,
                          m.dst, message_label(b), sent(w.blocker) ? "receive" : "send");
        break;
      }
    }
    out.push_back(fmt::format("stage {} is stuck at lowered op {}: {} of {}, consumed by {}: {}",
                              w.stage, w.pos, op_kind_str(w.op.kind), message_label(m),
                              compute_op_label(s_, m.dst, m.consumer), why));
  }
  return out;
}

std::string Walker::op_label(int stage, const LoweredOp& op) const {
  if (op.kind == OpKind::kCompute) {
    const ComputeOp& c = s_.stages[stage].ops[op.index];
    std::string parts = c.parts.empty() ? "" : c.parts.front().str();
    if (c.parts.size() > 1) parts += ".." + c.parts.back().str();
    return fmt::format("{}{}[{}]", dir_str(c.dir), c.mb, parts);
  }
  const Message& m = s_.messages[message_index(op.index)];
  const bool send = runs_on_sender(op.kind);
  return fmt::format("{}#{}{}s{}", op_kind_str(op.kind), m.id, send ? ">" : "<",
                     send ? m.dst : m.src);
}

std::string Walker::deadlock_grid() const {
  std::string g = "ops around the deadlock ('>>' marks where each stage is stuck):\n";
  for (int st : stages_) {
    const size_t n = program_size(st);
    const size_t at = std::min(pc_[st], n);
    const size_t from = at >= 4 ? at - 4 : 0, to = std::min(n, at + 4);
    g += fmt::format("  stage {:>2} |", st);
    if (from > 0) g += " ...";
    for (size_t j = from; j < to; ++j) g += (j == at ? " >>" : " ") + op_label(st, op_at(st, j));
    if (at >= n)
      g += " >>(finished)";
    else if (to < n)
      g += " ...";
    g += "\n";
  }
  return g;
}

}  // namespace hp
