#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

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

std::vector<float> StageExecutor::take_buffer(int64_t elems) {
  // The smallest spare buffer that holds `elems` floats without growing; else the largest one
  // (it grows once and stays big enough from then on).
  const size_t n = static_cast<size_t>(elems);
  size_t best = spare_.size();
  for (size_t i = 0; i < spare_.size(); ++i) {
    const size_t cap = spare_[i].capacity();
    if (cap >= n && (best == spare_.size() || cap < spare_[best].capacity())) best = i;
  }
  if (best == spare_.size()) {
    for (size_t i = 0; i < spare_.size(); ++i)
      if (best == spare_.size() || spare_[i].capacity() > spare_[best].capacity()) best = i;
  }
  std::vector<float> buf;
  if (best < spare_.size()) {
    buf = std::move(spare_[best]);
    spare_[best] = std::move(spare_.back());
    spare_.pop_back();
  }
  buf.resize(n);
  return buf;
}

void StageExecutor::give_buffer(std::vector<float>&& buf) {
  spare_.push_back(std::move(buf));
  buf = {};
}

StageStats StageExecutor::run(ComputeBackend& backend, ValueStore& store,
                              const ExecutorOptions& opt,
                              const std::function<void()>& after_last_compute) {
  if (store.size() != 0)
    throw Error("executor: stage " + std::to_string(stage_) +
                " starts a step with values left in its store: " + store.describe());
  StageStats st;
  store.reset_peaks();
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
        int64_t total = 0;
        for (int64_t e : elems_[m.id]) total += e;
        p.buf = take_buffer(total);
        int64_t off = 0;
        for (size_t k = 0; k < values_[m.id].size(); ++k) {
          const Value v = values_[m.id][k];
          if (store.elems(v, m.mb) != elems_[m.id][k])
            throw Error("executor: stage " + std::to_string(stage_) + " holds " + v.str() + "@" +
                        std::to_string(m.mb) + " with " + std::to_string(store.elems(v, m.mb)) +
                        " elements, message " + std::to_string(m.id) + " expects " +
                        std::to_string(elems_[m.id][k]));
          std::memcpy(p.buf.data() + off, store.get(v, m.mb),
                      static_cast<size_t>(elems_[m.id][k]) * sizeof(float));
          off += elems_[m.id][k];
        }
        p.req = comm_.isend(p.buf.data(), total * static_cast<int64_t>(sizeof(float)), m.dst, m.tag);
        p.active = true;
        p.posted = now_s();
        st.bytes_sent += total * static_cast<int64_t>(sizeof(float));
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
        int64_t total = 0;
        for (int64_t e : elems_[m.id]) total += e;
        p.buf = take_buffer(total);
        p.req = comm_.irecv(p.buf.data(), total * static_cast<int64_t>(sizeof(float)), m.src, m.tag);
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
          float* dst = store.create(values_[m.id][k], m.mb, elems_[m.id][k]);
          std::memcpy(dst, p.buf.data() + off, static_cast<size_t>(elems_[m.id][k]) * sizeof(float));
          off += elems_[m.id][k];
        }
        give_buffer(std::move(p.buf));
        st.bytes_received += off * static_cast<int64_t>(sizeof(float));
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
