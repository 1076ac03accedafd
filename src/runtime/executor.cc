// The stage executor: the walker's transport over a Comm (compute through the backend, messages
// packed into recycled buffers) and the observers that measure a step (stats, timeline).
#include "runtime/executor.h"

#include <algorithm>
#include <array>

#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

// The executor's checks of its arguments, before anything is built from them.
const Schedule& checked(const Schedule& sch, int stage, const Comm& pipeline) {
  if (pipeline.size() != sch.num_stages)
    throw Error("executor: the pipeline group has " + std::to_string(pipeline.size()) +
                " ranks but the schedule has " + std::to_string(sch.num_stages) +
                " stages; start as many pipeline ranks as stages (--stages)");
  if (stage < 0 || stage >= sch.num_stages)
    throw Error("executor: stage " + std::to_string(stage) + " is outside the schedule's " +
                std::to_string(sch.num_stages) + " stages");
  if (sch.num_stages > 1 && !sch.is_lowered())
    throw Error("executor: the schedule is not lowered (no messages); call lower() first");
  if (static_cast<int>(sch.stages.size()) != sch.num_stages)
    throw Error("executor: the schedule lists " + std::to_string(sch.stages.size()) +
                " stages but declares " + std::to_string(sch.num_stages));
  return sch;
}

// StageStats from what the walker reports: compute and wait times, bytes and messages moved.
class StatsRecorder : public WalkObserver {
 public:
  StatsRecorder(StageStats& st, const std::vector<int64_t>& bytes) : st_(st), bytes_(bytes) {}
  void on_compute(int, int, const OpTimes& t) override { st_.busy_s += t.end - t.start; }
  void on_send_start(int, const Message& m, double) override {
    st_.bytes_sent += bytes(m);
    ++st_.messages_sent;
  }
  void on_send_wait(int, const Message&, double, const OpTimes& t) override {
    st_.comm_wait_s += t.end - t.start;
  }
  void on_recv_wait(int, const Message& m, double, const OpTimes& t) override {
    st_.comm_wait_s += t.end - t.start;
    st_.bytes_received += bytes(m);
    ++st_.messages_received;
  }

 private:
  int64_t bytes(const Message& m) const { return bytes_[static_cast<size_t>(m.id)]; }
  StageStats& st_;
  const std::vector<int64_t>& bytes_;
};

// The measured timeline: a compute event per op; per transfer a bar from posting to completion on
// the comm row, plus a wait bar for the time the stage was held by it (when there was any).
class TimelineRecorder : public WalkObserver {
 public:
  TimelineRecorder(const Schedule& s, Timeline* tl, double origin)
      : s_(s), tl_(tl), origin_(origin) {}
  void on_compute(int stage, int op, const OpTimes& t) override {
    tl_->events.push_back(
        compute_event(stage, s_.stages[stage].ops[op], t.start - origin_, t.end - origin_));
  }
  void on_send_wait(int stage, const Message& m, double posted, const OpTimes& t) override {
    record_transfer(stage, m, /*send=*/true, posted, t);
  }
  void on_recv_wait(int stage, const Message& m, double posted, const OpTimes& t) override {
    record_transfer(stage, m, /*send=*/false, posted, t);
  }

 private:
  void record_transfer(int stage, const Message& m, bool send, double posted, const OpTimes& t) {
    TimelineEvent ev;
    ev.stage = stage;
    ev.start = posted - origin_;
    ev.end = t.end - origin_;
    ev.name = send ? "send " + std::string(dir_str(m.dir)) + std::to_string(m.mb) + " " +
                         m.from.str() + " -> s" + std::to_string(m.dst)
                   : "recv " + std::string(dir_str(m.dir)) + std::to_string(m.mb) + " " +
                         m.to.str() + " <- s" + std::to_string(m.src);
    ev.category = send ? "send" : "recv";
    ev.mb = m.mb;
    ev.dir = m.dir;
    ev.peer = send ? m.dst : m.src;
    ev.bytes = m.bytes;
    tl_->events.push_back(ev);
    if (t.end - t.start > 1e-6) {
      ev.start = t.start - origin_;
      ev.category = "wait";
      ev.name = "wait " + ev.name;
      tl_->events.push_back(std::move(ev));
    }
  }
  const Schedule& s_;
  Timeline* tl_;
  double origin_;
};

// Calls `fn` right after the stage's last compute op.
class AfterLastCompute : public WalkObserver {
 public:
  AfterLastCompute(int last_op, const std::function<void()>& fn) : last_op_(last_op), fn_(fn) {}
  void on_compute(int, int op, const OpTimes&) override {
    if (op == last_op_) fn_();
  }

 private:
  int last_op_;
  const std::function<void()>& fn_;
};

}  // namespace

// The walker's transport: compute through the backend, messages through the comm. Its waits
// block until the transfer is complete (Matching::kByTransport).
class StageExecutor::Link : public WalkTransport {
 public:
  Link(StageExecutor& ex, ComputeBackend& backend, ValueStore& store)
      : ex_(ex), backend_(backend), store_(store) {}

  OpTimes compute(int stage, int op) override {
    const ComputeOp& c = ex_.sch_.stages[stage].ops[op];
    ex_.ctx_.clear();
    for (size_t k = 0; k < c.parts.size(); ++k)
      ex_.ctx_.push_back(ex_.index_.context(stage, op, static_cast<int>(k)));
    const double t0 = now_seconds();
    loss_share_ += backend_.compute(c, ex_.ctx_, store_);
    return {t0, now_seconds()};
  }
  double start_send(int, const Message& m) override {
    Pending& p = ex_.sends_[m.id];
    p.buf = ex_.take_buffer(store_.backend(), bytes(m));
    ex_.pack(m, store_, p.buf);
    store_.backend().synchronize();  // the packed bytes are in place before the transport reads
    p.req = ex_.comm_.isend(p.buf.data(), bytes(m), m.dst, m.tag);
    return now_seconds();
  }
  double start_recv(int, const Message& m) override {
    Pending& p = ex_.recvs_[m.id];
    p.buf = ex_.take_buffer(store_.backend(), bytes(m));
    p.req = ex_.comm_.irecv(p.buf.data(), bytes(m), m.src, m.tag);
    return now_seconds();
  }
  OpTimes wait_send(int, const Message& m) override {
    Pending& p = ex_.sends_[m.id];
    const double t0 = now_seconds();
    ex_.comm_.wait(p.req, ex_.send_what_[m.id]);
    const double t1 = now_seconds();
    ex_.give_buffer(std::move(p.buf));  // the send buffer is free once the send completed
    // The values leave this stage: drop their live mark (the stash keeps what backward needs).
    for (const Value& v : ex_.values_[m.id]) store_.release(v, m.mb);
    return {t0, t1};
  }
  OpTimes wait_recv(int, const Message& m) override {
    Pending& p = ex_.recvs_[m.id];
    const double t0 = now_seconds();
    ex_.comm_.wait(p.req, ex_.recv_what_[m.id]);
    const double t1 = now_seconds();
    ex_.unpack(m, p.buf, store_);
    ex_.give_buffer(std::move(p.buf));
    return {t0, t1};
  }
  // Lets in-flight transfers and collectives move between ops.
  void after_op(int) override { ex_.comm_.progress(); }

  double loss_share() const { return loss_share_; }

 private:
  int64_t bytes(const Message& m) const { return ex_.bytes_[m.id]; }
  StageExecutor& ex_;
  ComputeBackend& backend_;
  ValueStore& store_;
  double loss_share_ = 0;
};

StageExecutor::StageExecutor(const Schedule& sch, int stage, Comm& pipeline, const ModelConfig& cfg,
                             int64_t tokens_per_mb, int tensor_parallel)
    : sch_(checked(sch, stage, pipeline)),
      stage_(stage),
      comm_(pipeline),
      cfg_(cfg),
      tokens_(tokens_per_mb),
      index_(sch),
      walker_(sch, stage, "executor") {
  const size_t n = sch.messages.size();
  values_.resize(n);
  elems_.resize(n);
  total_elems_.assign(n, 0);
  send_what_.resize(n);
  recv_what_.resize(n);
  std::vector<char> seen(n, 0);
  for (const Message& m : sch.messages) {
    if (m.id < 0 || m.id >= static_cast<int>(n) || seen[m.id])
      throw Error("executor: message ids must be 0..N-1 and unique (bad id " +
                  std::to_string(m.id) + ")");
    seen[m.id] = 1;
    for (const std::string& name : m.values) {
      const Value v = Value::parse(name);
      values_[m.id].push_back(v);
      elems_[m.id].push_back(value_elems(v, cfg, tokens_per_mb, tensor_parallel));
      total_elems_[m.id] += elems_[m.id].back();
    }
    const int64_t total = total_elems_[m.id];
    // The lowering sizes whole messages at 4 bytes per element (f32), whatever precision runs
    // them; a tensor-parallel rank moves exactly 1/T of each (value_elems checks divisibility).
    const int64_t whole = total * static_cast<int64_t>(sizeof(float)) * tensor_parallel;
    if (m.bytes != 0 && m.bytes != whole)
      throw Error("executor: message " + std::to_string(m.id) + " is sized " +
                  std::to_string(m.bytes) + " bytes but its values take " + std::to_string(whole) +
                  " for this model and micro-batch; lower the schedule with the same model "
                  "config and micro-batch tokens");
    (void)message_tag(comm_, m.tag);  // throws when the tag does not fit the transport
    if (m.src == stage_) send_what_[m.id] = describe(m, /*send=*/true);
    if (m.dst == stage_) recv_what_[m.id] = describe(m, /*send=*/false);
  }
  sends_.resize(n);
  recvs_.resize(n);
}

std::string StageExecutor::describe(const Message& m, bool send) const {
  std::string vals;
  for (const std::string& v : m.values) vals += (vals.empty() ? "" : " ") + v;
  const int op = send ? m.producer : m.consumer;
  const ComputeOp& cop = sch_.stages[send ? m.src : m.dst].ops[op];
  return std::string(send ? "send" : "recv") + " of msg " + std::to_string(m.id) + " (" +
         dir_str(m.dir) + " mb " + std::to_string(m.mb) + " " + vals + ") " +
         (send ? "from op " : "for op ") + std::to_string(op) + " [" + op_str(cop) + "] of stage " +
         std::to_string(stage_) + (send ? " to stage " : " from stage ") +
         std::to_string(send ? m.dst : m.src);
}

void StageExecutor::pack(const Message& m, const ValueStore& store, RawBuffer& buf) const {
  Backend& be = store.backend();
  int64_t off = 0;
  for (size_t k = 0; k < values_[m.id].size(); ++k) {
    const Value v = values_[m.id][k];
    const int64_t n = elems_[m.id][k];
    if (store.elems(v, m.mb) != n)
      throw Error("executor: stage " + std::to_string(stage_) + " holds " + v.str() + "@" +
                  std::to_string(m.mb) + " with " + std::to_string(store.elems(v, m.mb)) +
                  " elements, message " + std::to_string(m.id) + " expects " + std::to_string(n));
    const ConstDataPtr src = store.get(v, m.mb);
    const int64_t bytes = n * dtype_bytes(src.dtype);
    be.copy(static_cast<char*>(buf.data()) + off, src.data, bytes);
    off += bytes;
  }
}

void StageExecutor::unpack(const Message& m, const RawBuffer& buf, ValueStore& store) const {
  Backend& be = store.backend();
  int64_t off = 0;
  for (size_t k = 0; k < values_[m.id].size(); ++k) {
    const DataPtr dst = store.create(values_[m.id][k], m.mb, elems_[m.id][k]);
    const int64_t bytes = elems_[m.id][k] * dtype_bytes(dst.dtype);
    be.copy(dst.data, static_cast<const char*>(buf.data()) + off, bytes);
    off += bytes;
  }
}

RawBuffer StageExecutor::take_buffer(Backend& be, int64_t bytes) {
  // The smallest spare buffer of this backend that holds `bytes`; else a new one (the backend's
  // allocator caches freed blocks, so this is no system allocation in steady state).
  size_t best = spare_.size();
  for (size_t i = 0; i < spare_.size(); ++i) {
    const int64_t cap = spare_[i].bytes();
    if (spare_[i].backend() == &be && cap >= bytes &&
        (best == spare_.size() || cap < spare_[best].bytes()))
      best = i;
  }
  if (best == spare_.size()) return RawBuffer(be, bytes);
  be.synchronize();  // copies still queued from its last message finish before it is rewritten
  RawBuffer buf = std::move(spare_[best]);
  spare_[best] = std::move(spare_.back());
  spare_.pop_back();
  return buf;
}

void StageExecutor::give_buffer(RawBuffer&& buf) { spare_.push_back(std::move(buf)); }

StageStats StageExecutor::run(ComputeBackend& backend, ValueStore& store,
                              const ExecutorOptions& opt,
                              const std::function<void()>& after_last_compute) {
  if (store.size() != 0)
    throw Error("executor: stage " + std::to_string(stage_) +
                " starts a step with values left in its store: " + store.describe());
  StageStats st;
  store.reset_peaks();
  const double t_start = now_seconds();
  bytes_.resize(values_.size());
  for (size_t id = 0; id < values_.size(); ++id) {
    bytes_[id] = 0;
    for (size_t k = 0; k < values_[id].size(); ++k)
      bytes_[id] += elems_[id][k] * dtype_bytes(value_dtype(values_[id][k].kind, store.precision()));
  }
  Link link(*this, backend, store);
  StatsRecorder stats(st, bytes_);
  TimelineRecorder timeline(sch_, opt.timeline, opt.time_origin);
  AfterLastCompute hook(static_cast<int>(sch_.stages[stage_].ops.size()) - 1, after_last_compute);
  std::array<WalkObserver*, 3> observers{};
  size_t n = 0;
  observers[n++] = &stats;
  if (opt.timeline) observers[n++] = &timeline;
  if (after_last_compute) observers[n++] = &hook;
  walker_.reset();
  walker_.run(link, std::span<WalkObserver* const>(observers.data(), n));
  st.total_s = now_seconds() - t_start;
  st.loss_share = link.loss_share();
  st.peak_stash_bytes = store.peak_stash_bytes();
  st.peak_bytes = store.peak_bytes();
  if (store.size() != 0)
    throw Error("executor: stage " + std::to_string(stage_) + " ended the step holding " +
                store.describe() + " (schedule and recompute policy disagree)");
  return st;
}

}  // namespace hp
