#include "runtime/executor.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace hp {

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

StageExecutor::StageExecutor(const Schedule& sch, int stage, Comm& pipeline,
                             const ModelConfig& cfg, int64_t tokens_per_mb)
    : sch_(sch), stage_(stage), comm_(pipeline), cfg_(cfg), tokens_(tokens_per_mb), index_(sch) {
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
  by_id_.assign(sch.messages.size(), nullptr);
  elems_.resize(sch.messages.size());
  values_.resize(sch.messages.size());
  for (const Message& m : sch.messages) {
    if (m.id < 0 || m.id >= static_cast<int>(sch.messages.size()) || by_id_[m.id])
      throw Error("executor: message ids must be 0..N-1 and unique (bad id " +
                  std::to_string(m.id) + ")");
    by_id_[m.id] = &m;
    int64_t total = 0;
    for (const std::string& name : m.values) {
      const Value v = Value::parse(name);
      values_[m.id].push_back(v);
      elems_[m.id].push_back(value_elems(v, cfg, tokens_per_mb));
      total += elems_[m.id].back();
    }
    // The lowering sizes messages at 4 bytes per element (f32), whatever precision runs them.
    if (m.bytes != 0 && m.bytes != total * static_cast<int64_t>(sizeof(float)))
      throw Error("executor: message " + std::to_string(m.id) + " is sized " +
                  std::to_string(m.bytes) + " bytes but its values take " +
                  std::to_string(total * 4) +
                  " for this model and micro-batch; lower the schedule with the same model "
                  "config and micro-batch tokens");
    (void)message_tag(comm_, m.tag);  // throws when the tag does not fit the transport
  }
  sends_.resize(sch.messages.size());
  recvs_.resize(sch.messages.size());
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

int64_t StageExecutor::message_bytes(int id, const ValueStore& store) const {
  int64_t total = 0;
  for (size_t k = 0; k < values_[id].size(); ++k)
    total += elems_[id][k] * dtype_bytes(value_dtype(values_[id][k].kind, store.precision()));
  return total;
}

RawBuffer StageExecutor::take_buffer(Backend& be, int64_t bytes) {
  // The smallest spare buffer of this backend that holds `bytes`; else a new one.
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
  Backend& mem = store.backend();  // where values and message buffers live
  const Stage& stage = sch_.stages[stage_];
  const double t_start = now_s();
  auto rel = [&](double t) { return t - opt.time_origin; };
  auto record = [&](TimelineEvent ev) {
    if (opt.timeline) opt.timeline->events.push_back(std::move(ev));
  };
  // A transfer as the timeline shows it: from posting to completion on the comm row, plus a wait
  // bar for the time this stage was blocked on it (when there was any).
  auto record_transfer = [&](const Message& m, bool send, double posted, double t0, double t1) {
    if (!opt.timeline) return;
    TimelineEvent ev;
    ev.stage = stage_;
    ev.start = rel(posted);
    ev.end = rel(t1);
    ev.name = send ? "send " + std::string(dir_str(m.dir)) + std::to_string(m.mb) + " " +
                         m.from.str() + " -> s" + std::to_string(m.dst)
                   : "recv " + std::string(dir_str(m.dir)) + std::to_string(m.mb) + " " +
                         m.to.str() + " <- s" + std::to_string(m.src);
    ev.category = send ? "send" : "recv";
    ev.mb = m.mb;
    ev.dir = m.dir;
    ev.peer = send ? m.dst : m.src;
    ev.bytes = m.bytes;
    record(ev);
    if (t1 - t0 > 1e-6) {
      ev.start = rel(t0);
      ev.category = "wait";
      ev.name = "wait " + ev.name;
      record(std::move(ev));
    }
  };
  int last_compute = -1;
  for (size_t i = 0; i < stage.lowered.size(); ++i)
    if (stage.lowered[i].kind == OpKind::kCompute) last_compute = static_cast<int>(i);
  std::vector<PartContext> ctx;
  std::vector<LoweredOp> fallback;
  const std::vector<LoweredOp>* ops = &stage.lowered;
  if (ops->empty()) {  // a one-stage schedule that was never lowered: compute ops only
    for (size_t i = 0; i < stage.ops.size(); ++i)
      fallback.push_back(LoweredOp{OpKind::kCompute, static_cast<int>(i)});
    ops = &fallback;
    last_compute = static_cast<int>(fallback.size()) - 1;
  }
  for (size_t i = 0; i < ops->size(); ++i) {
    const LoweredOp& lo = (*ops)[i];
    switch (lo.kind) {
      case OpKind::kCompute: {
        const ComputeOp& op = stage.ops.at(static_cast<size_t>(lo.index));
        ctx.clear();
        for (size_t k = 0; k < op.parts.size(); ++k)
          ctx.push_back(index_.context(stage_, lo.index, static_cast<int>(k)));
        const double t0 = now_s();
        st.loss_share += backend.compute(op, ctx, store);
        const double t1 = now_s();
        st.busy_s += t1 - t0;
        if (opt.timeline) {
          TimelineEvent ev;
          ev.stage = stage_;
          ev.start = rel(t0);
          ev.end = rel(t1);
          ev.name = compute_event_name(op);
          ev.category = dir_str(op.dir);
          ev.mb = op.mb;
          ev.dir = op.dir;
          ev.first_kind = op.parts.empty() ? PartKind::kEmbed : op.parts.front().kind;
          ev.fold = op.fold;
          record(std::move(ev));
        }
        if (static_cast<int>(i) == last_compute && after_last_compute) after_last_compute();
        break;
      }
      case OpKind::kSendStart: {
        const Message& m = *by_id_.at(static_cast<size_t>(lo.index));
        Pending& p = sends_[m.id];
        const int64_t total = message_bytes(m.id, store);
        p.buf = take_buffer(mem, total);
        int64_t off = 0;
        for (size_t k = 0; k < values_[m.id].size(); ++k) {
          const Value v = values_[m.id][k];
          if (store.elems(v, m.mb) != elems_[m.id][k])
            throw Error("executor: stage " + std::to_string(stage_) + " holds " + v.str() + "@" +
                        std::to_string(m.mb) + " with " + std::to_string(store.elems(v, m.mb)) +
                        " elements, message " + std::to_string(m.id) + " expects " +
                        std::to_string(elems_[m.id][k]));
          const DataPtr src = store.get(v, m.mb);
          const int64_t bytes = elems_[m.id][k] * dtype_bytes(src.dtype);
          mem.copy(static_cast<char*>(p.buf.data()) + off, src.data, bytes);
          off += bytes;
        }
        mem.synchronize();  // the packed bytes are in place before the transport reads them
        p.req = comm_.isend(p.buf.data(), total, m.dst, m.tag);
        p.active = true;
        p.posted = now_s();
        st.bytes_sent += total;
        ++st.messages_sent;
        break;
      }
      case OpKind::kSendWait: {
        const Message& m = *by_id_.at(static_cast<size_t>(lo.index));
        Pending& p = sends_[m.id];
        if (!p.active)
          throw Error("executor: stage " + std::to_string(stage_) + " waits for " +
                      describe(m, true) + " which was never started (broken lowering)");
        const double t0 = now_s();
        comm_.wait(p.req, describe(m, true));
        const double t1 = now_s();
        st.comm_wait_s += t1 - t0;
        p.active = false;
        give_buffer(std::move(p.buf));  // the send buffer is free once the send completed
        // The values leave this stage: drop their live mark (the stash keeps what backward needs).
        for (const Value& v : values_[m.id]) store.release(v, m.mb);
        record_transfer(m, /*send=*/true, p.posted, t0, t1);
        break;
      }
      case OpKind::kRecvStart: {
        const Message& m = *by_id_.at(static_cast<size_t>(lo.index));
        Pending& p = recvs_[m.id];
        const int64_t total = message_bytes(m.id, store);
        p.buf = take_buffer(mem, total);
        p.req = comm_.irecv(p.buf.data(), total, m.src, m.tag);
        p.active = true;
        p.posted = now_s();
        break;
      }
      case OpKind::kRecvWait: {
        const Message& m = *by_id_.at(static_cast<size_t>(lo.index));
        Pending& p = recvs_[m.id];
        if (!p.active)
          throw Error("executor: stage " + std::to_string(stage_) + " waits for " +
                      describe(m, false) + " which was never posted (broken lowering)");
        const double t0 = now_s();
        comm_.wait(p.req, describe(m, false));
        const double t1 = now_s();
        st.comm_wait_s += t1 - t0;
        p.active = false;
        int64_t off = 0;
        for (size_t k = 0; k < values_[m.id].size(); ++k) {
          const DataPtr dst = store.create(values_[m.id][k], m.mb, elems_[m.id][k]);
          const int64_t bytes = elems_[m.id][k] * dtype_bytes(dst.dtype);
          mem.copy(dst.data, static_cast<const char*>(p.buf.data()) + off, bytes);
          off += bytes;
        }
        give_buffer(std::move(p.buf));
        st.bytes_received += off;
        ++st.messages_received;
        record_transfer(m, /*send=*/false, p.posted, t0, t1);
        break;
      }
    }
    comm_.progress();  // let in-flight transfers and collectives move between ops
  }
  st.total_s = now_s() - t_start;
  st.peak_stash_bytes = store.peak_stash_bytes();
  st.peak_bytes = store.peak_bytes();
  for (const Message* m : by_id_) {
    if (!m) continue;
    if (sends_[m->id].active || recvs_[m->id].active)
      throw Error("executor: stage " + std::to_string(stage_) + " ended the step with " +
                  describe(*m, sends_[m->id].active) +
                  " still in flight (the lowering lacks its wait)");
  }
  if (store.size() != 0)
    throw Error("executor: stage " + std::to_string(stage_) + " ended the step holding " +
                store.describe() + " (schedule and recompute policy disagree)");
  return st;
}

}  // namespace hp
