// The list simulation: per-stage program counters advanced until every stage has finished, with
// transfers resolved in FIFO order on each directed link.
#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "util/error.h"

namespace hp {

namespace {

struct Transfer {
  double send_post = -1, recv_post = -1;
  bool resolved = false;
  double start = 0, inject_end = 0, arrival = 0;
};

std::string message_label(const Message& m) {
  return fmt::format("{}{} {}->{} s{}->s{}", dir_str(m.dir), m.mb, m.from.str(), m.to.str(), m.src,
                     m.dst);
}

}  // namespace

SimResult simulate(const Schedule& sched, const CostModel& cost, const SimOptions& opt) {
  const int p = sched.num_stages;
  HP_CHECK(p >= 1 && static_cast<int>(sched.stages.size()) == p,
           "simulate: schedule '{}' says {} stages but has {}", sched.name, p, sched.stages.size());
  HP_CHECK(opt.message_bytes_scale >= 0, "simulate: message_bytes_scale must be >= 0");
  HP_CHECK(opt.stage_time_scale.empty() || static_cast<int>(opt.stage_time_scale.size()) == p,
           "simulate: stage_time_scale has {} entries for {} stages", opt.stage_time_scale.size(), p);
  for (double x : opt.stage_time_scale)
    HP_CHECK(x > 0, "simulate: stage_time_scale entries must be > 0 (got {})", x);
  bool lowered = sched.is_lowered();
  HP_CHECK(lowered || p == 1,
           "simulate: schedule '{}' has {} stages but no communication ops; lower() it first",
           sched.name, p);

  // Messages by id, and the FIFO order of each directed link (the sender's program order).
  std::unordered_map<int, int> by_id;
  for (size_t i = 0; i < sched.messages.size(); ++i) {
    const Message& m = sched.messages[i];
    HP_CHECK(by_id.emplace(m.id, static_cast<int>(i)).second, "simulate: message id {} repeats",
             m.id);
    HP_CHECK(m.src >= 0 && m.src < p && m.dst >= 0 && m.dst < p && m.src != m.dst,
             "simulate: message {} goes from stage {} to {} in a {}-stage schedule", m.id, m.src,
             m.dst, p);
  }
  auto msg_index = [&](int stage, const LoweredOp& op) {
    auto it = by_id.find(op.index);
    HP_CHECK(it != by_id.end(), "simulate: stage {} has a {} of message {}, which does not exist",
             stage, op_kind_str(op.kind), op.index);
    const Message& m = sched.messages[it->second];
    bool sending = op.kind == OpKind::kSendStart || op.kind == OpKind::kSendWait;
    HP_CHECK((sending ? m.src : m.dst) == stage,
             "simulate: stage {} has a {} of message {} ({}), which belongs to stage {}", stage,
             op_kind_str(op.kind), m.id, message_label(m), sending ? m.src : m.dst);
    return it->second;
  };
  // Per stage, the op sequence to run: the lowered list, or the compute ops when not lowered.
  std::vector<std::vector<LoweredOp>> program(p);
  for (int s = 0; s < p; ++s) {
    const Stage& st = sched.stages[s];
    if (!st.lowered.empty()) {
      program[s] = st.lowered;
    } else {
      for (size_t i = 0; i < st.ops.size(); ++i)
        program[s].push_back({OpKind::kCompute, static_cast<int>(i)});
    }
  }
  std::map<std::pair<int, int>, std::vector<int>> link_queue;  // messages in send order
  std::vector<int> link_pos(sched.messages.size(), -1);
  for (int s = 0; s < p; ++s) {
    for (const LoweredOp& op : program[s]) {
      if (op.kind == OpKind::kCompute) {
        HP_CHECK(op.index >= 0 && op.index < static_cast<int>(sched.stages[s].ops.size()),
                 "simulate: stage {} runs compute op {} but has {} ops", s, op.index,
                 sched.stages[s].ops.size());
      } else if (op.kind == OpKind::kSendStart) {
        int mi = msg_index(s, op);
        HP_CHECK(link_pos[mi] < 0, "simulate: message {} is sent twice", sched.messages[mi].id);
        auto& q = link_queue[{s, sched.messages[mi].dst}];
        link_pos[mi] = static_cast<int>(q.size());
        q.push_back(mi);
      } else {
        msg_index(s, op);
      }
    }
  }
  for (size_t i = 0; i < sched.messages.size(); ++i)
    HP_CHECK(link_pos[i] >= 0, "simulate: message {} ({}) is never sent", sched.messages[i].id,
             message_label(sched.messages[i]));

  std::vector<Transfer> tr(sched.messages.size());
  std::map<std::pair<int, int>, std::pair<size_t, double>> link_state;  // next index, free at
  std::vector<double> nic_out(p, 0.0), nic_in(p, 0.0);  // shared_nic: when each port is free
  SimResult res;
  res.timeline.num_stages = p;
  res.timeline.title =
      !opt.title.empty() ? opt.title
                         : fmt::format("{} p={} m={} L={}{}{}", sched.name, p, sched.microbatches,
                                       sched.layers,
                                       sched.folds > 1 ? fmt::format(" F={}", sched.folds) : "",
                                       sched.virtual_stages > 1
                                           ? fmt::format(" V={}", sched.virtual_stages)
                                           : "");
  auto& events = res.timeline.events;
  res.stages.resize(p);
  for (int s = 0; s < p; ++s) res.stages[s].stage = s;

  auto bytes_of = [&](const Message& m) {
    return static_cast<int64_t>(static_cast<double>(m.bytes) * opt.message_bytes_scale + 0.5);
  };
  // Starts every transfer at the head of link (src, dst) whose posts are known.
  auto resolve_link = [&](int src, int dst) {
    auto& q = link_queue[{src, dst}];
    auto& [next, free_at] = link_state[{src, dst}];
    while (next < q.size()) {
      int mi = q[next];
      Transfer& t = tr[mi];
      if (t.send_post < 0 || (opt.rendezvous && t.recv_post < 0)) break;
      const Message& m = sched.messages[mi];
      int64_t bytes = bytes_of(m);
      t.start = std::max({t.send_post, opt.rendezvous ? t.recv_post : 0.0, free_at});
      const bool via_nic = opt.shared_nic && &cost.link(src, dst) != &cost.link(src, src);
      if (via_nic) t.start = std::max({t.start, nic_out[src], nic_in[dst]});
      t.inject_end = t.start + cost.transfer_time(src, dst, bytes);
      if (via_nic) nic_out[src] = nic_in[dst] = t.inject_end;
      t.arrival = t.inject_end + cost.latency(src, dst);
      t.resolved = true;
      free_at = t.inject_end;  // the wire is busy while bytes go out; latency overlaps the next
      ++next;
      res.pair_bytes[{src, dst}] += bytes;
      res.stages[src].sent_bytes += bytes;
      res.stages[src].messages_sent += 1;
      res.stages[dst].recv_bytes += bytes;
      if (opt.record_timeline) {
        TimelineEvent e;
        e.mb = m.mb;
        e.dir = m.dir;
        e.first_kind = m.from.kind;
        e.bytes = bytes;
        e.category = "send";
        e.stage = src;
        e.peer = dst;
        e.start = t.start;
        e.end = t.inject_end;
        e.name = "send " + message_label(m);
        events.push_back(e);
        e.category = "recv";
        e.stage = dst;
        e.peer = src;
        e.start = t.start + cost.latency(src, dst);
        e.end = t.arrival;
        e.name = "recv " + message_label(m);
        events.push_back(e);
      }
    }
  };

  std::vector<size_t> pc(p, 0);
  std::vector<double> now(p, 0.0);
  double total_flops = 0;
  auto wait_until = [&](int s, double t, const Message& m, const char* what) {
    if (t <= now[s]) return;
    res.stages[s].wait += t - now[s];
    if (opt.record_timeline) {
      TimelineEvent e;
      e.stage = s;
      e.start = now[s];
      e.end = t;
      e.category = "wait";
      e.name = fmt::format("wait {} {}", what, message_label(m));
      e.mb = m.mb;
      e.dir = m.dir;
      e.first_kind = m.from.kind;
      e.peer = what[0] == 's' ? m.dst : m.src;
      events.push_back(std::move(e));
    }
    now[s] = t;
  };
  for (;;) {
    bool progress = false, done = true;
    for (int s = 0; s < p; ++s) {
      const Stage& st = sched.stages[s];
      while (pc[s] < program[s].size()) {
        const LoweredOp& op = program[s][pc[s]];
        if (op.kind == OpKind::kCompute) {
          const ComputeOp& c = st.ops[op.index];
          double d = cost.op_time(c, sched.recompute);
          if (!opt.stage_time_scale.empty()) d *= opt.stage_time_scale[static_cast<size_t>(s)];
          total_flops += cost.op_flops(c);
          if (opt.record_timeline) {
            TimelineEvent e;
            e.stage = s;
            e.start = now[s];
            e.end = now[s] + d;
            e.name = compute_event_name(c);
            e.category = dir_str(c.dir);
            e.mb = c.mb;
            e.dir = c.dir;
            e.first_kind = c.parts.empty() ? PartKind::kEmbed : c.parts.front().kind;
            e.fold = c.fold;
            events.push_back(std::move(e));
          }
          now[s] += d;
          res.stages[s].busy += d;
        } else {
          int mi = by_id.at(op.index);
          const Message& m = sched.messages[mi];
          Transfer& t = tr[mi];
          if (op.kind == OpKind::kSendStart) {
            t.send_post = now[s];
            resolve_link(m.src, m.dst);
          } else if (op.kind == OpKind::kRecvStart) {
            HP_CHECK(t.recv_post < 0, "simulate: stage {} posts the receive of message {} twice",
                     s, m.id);
            t.recv_post = now[s];
            resolve_link(m.src, m.dst);
          } else {
            if (op.kind == OpKind::kRecvWait && t.recv_post < 0) {  // a blocking receive
              t.recv_post = now[s];
              resolve_link(m.src, m.dst);
            }
            if (!t.resolved) break;  // blocked: the transfer has not started
            if (op.kind == OpKind::kSendWait) wait_until(s, t.inject_end, m, "send");
            else wait_until(s, t.arrival, m, "recv");
          }
        }
        ++pc[s];
        progress = true;
      }
      if (pc[s] < program[s].size()) done = false;
    }
    if (done) break;
    if (!progress) {
      std::string blocked;
      for (int s = 0; s < p; ++s) {
        if (pc[s] >= program[s].size()) continue;
        const LoweredOp& op = program[s][pc[s]];
        const Message& m = sched.messages[by_id.at(op.index)];
        blocked += fmt::format("\n  stage {} at op {}: {} of message {} ({}) never completes", s,
                               pc[s], op_kind_str(op.kind), m.id, message_label(m));
      }
      fail("simulate: schedule '{}' deadlocks (run 'helixpipe validate' for the full report):{}",
           sched.name, blocked);
    }
  }

  double makespan = 0, max_busy = 0;
  for (int s = 0; s < p; ++s) {
    res.stages[s].end = now[s];
    makespan = std::max(makespan, now[s]);
    max_busy = std::max(max_busy, res.stages[s].busy);
  }
  for (const Transfer& t : tr) makespan = std::max(makespan, t.arrival);
  res.makespan = makespan;
  res.bubble = makespan - max_busy;
  res.bubble_fraction = makespan > 0 ? res.bubble / makespan : 0;
  for (auto& st : res.stages) st.idle = makespan - st.busy;
  int64_t tokens = opt.tokens_per_microbatch > 0 ? opt.tokens_per_microbatch
                                                 : cost.tokens_per_microbatch();
  if (tokens > 0 && makespan > 0)
    res.tokens_per_s = static_cast<double>(tokens) * sched.microbatches / makespan;
  if (cost.peak_flops() > 0 && makespan > 0)
    res.mfu = total_flops / (makespan * p * cost.peak_flops());
  std::stable_sort(events.begin(), events.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return a.stage != b.stage ? a.stage < b.stage : a.start < b.start;
  });
  return res;
}

nlohmann::json sim_result_json(const SimResult& r, const Schedule& s) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageResult& st : r.stages) {
    stages.push_back({{"stage", st.stage},
                      {"busy", st.busy},
                      {"idle", st.idle},
                      {"wait", st.wait},
                      {"peak_activation_bytes", st.peak_activation_bytes},
                      {"sent_bytes", st.sent_bytes},
                      {"recv_bytes", st.recv_bytes}});
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [k, v] : r.pair_bytes) pairs.push_back({{"src", k.first}, {"dst", k.second}, {"bytes", v}});
  return {{"version", 1},
          {"schedule", s.name},
          {"num_stages", s.num_stages},
          {"microbatches", s.microbatches},
          {"layers", s.layers},
          {"folds", s.folds},
          {"virtual", s.virtual_stages},
          {"recompute", recompute_str(s.recompute)},
          {"makespan", r.makespan},
          {"bubble", r.bubble},
          {"bubble_fraction", r.bubble_fraction},
          {"stages", std::move(stages)},
          {"pair_bytes", std::move(pairs)},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu}};
}

}  // namespace hp
