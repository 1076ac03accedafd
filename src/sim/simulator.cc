// The list simulation: the walker (schedule/walker.h) steps every stage's lowered program over FIFO
// links; a simulated clock gives each op and transfer its time, an observer records the timeline
// and the bytes moved.
#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "schedule/walker.h"
#include "util/error.h"

namespace hp {

namespace {

// "F3 post:1->pre:2 s0->s1": how transfers and waits are named in timelines.
std::string transfer_label(const Message& m) {
  return fmt::format("{}{} {}->{} s{}->s{}", dir_str(m.dir), m.mb, m.from.str(), m.to.str(), m.src,
                     m.dst);
}

// Simulated time: a clock per stage, compute ops priced by the cost model, transfers placed on
// their link (and, with a shared NIC, on the stages' ports) in the order the walk moves them.
class SimClock : public WalkTransport {
 public:
  SimClock(const Schedule& s, const CostModel& cost, const SimOptions& opt, SimResult& res)
      : s_(s),
        cost_(cost),
        opt_(opt),
        res_(res),
        now_(static_cast<size_t>(s.num_stages), 0.0),
        nic_out_(now_.size(), 0.0),
        nic_in_(now_.size(), 0.0),
        tr_(s.messages.size()) {}

  OpTimes compute(int stage, int op) override {
    const ComputeOp& c = s_.stages[stage].ops[op];
    const auto q = static_cast<size_t>(stage);
    double d = cost_.op_time(c, s_.policy_of(stage),
                             opt_.stage_part_scale.empty() ? nullptr : &opt_.stage_part_scale[q]);
    if (!opt_.stage_time_scale.empty()) d *= opt_.stage_time_scale[q];
    total_flops_ += cost_.op_flops(c);
    const OpTimes t{now_[stage], now_[stage] + d};
    now_[stage] += d;
    res_.stages[stage].busy += d;
    return t;
  }
  double start_send(int stage, const Message& m) override {
    return tr_[index(m)].send_post = now_[stage];
  }
  double start_recv(int stage, const Message& m) override {
    return tr_[index(m)].recv_post = now_[stage];
  }
  TransferTimes transfer(const Message& m) override {
    Transfer& t = tr_[index(m)];
    double& free_at = link_free_[{m.src, m.dst}];
    t.times.bytes =
        static_cast<int64_t>(static_cast<double>(m.bytes) * opt_.message_bytes_scale + 0.5);
    t.times.start = std::max({t.send_post, opt_.rendezvous ? t.recv_post : 0.0, free_at});
    const bool via_nic = opt_.shared_nic && &cost_.link(m.src, m.dst) != &cost_.link(m.src, m.src);
    if (via_nic) t.times.start = std::max({t.times.start, nic_out_[m.src], nic_in_[m.dst]});
    const double wire = cost_.transfer_time(m.src, m.dst, t.times.bytes);
    t.times.sent = t.times.start + wire;
    if (opt_.comm_compute_share > 0 && m.src != m.dst) {
      for (int st : {m.src, m.dst}) {
        now_[st] += opt_.comm_compute_share * wire;
        res_.stages[st].busy += opt_.comm_compute_share * wire;
      }
    }
    if (via_nic) nic_out_[m.src] = nic_in_[m.dst] = t.times.sent;
    t.times.arrival = t.times.sent + cost_.latency(m.src, m.dst);
    free_at = t.times.sent;  // the wire is busy while bytes go out; latency overlaps the next
    return t.times;
  }
  OpTimes wait_send(int stage, const Message& m) override {
    return hold(stage, tr_[index(m)].times.sent);
  }
  OpTimes wait_recv(int stage, const Message& m) override {
    return hold(stage, tr_[index(m)].times.arrival);
  }

  double now(int stage) const { return now_[stage]; }
  double total_flops() const { return total_flops_; }
  double last_arrival() const {
    double t = 0;
    for (const Transfer& x : tr_) t = std::max(t, x.times.arrival);
    return t;
  }

 private:
  struct Transfer {
    double send_post = 0, recv_post = 0;
    TransferTimes times;
  };
  size_t index(const Message& m) const { return static_cast<size_t>(&m - s_.messages.data()); }
  // The stage is held until `until` (when that is later than now).
  OpTimes hold(int stage, double until) {
    OpTimes t{now_[stage], now_[stage]};
    if (until > now_[stage]) {
      res_.stages[stage].wait += until - now_[stage];
      now_[stage] = until;
    }
    t.end = now_[stage];
    return t;
  }

  const Schedule& s_;
  const CostModel& cost_;
  const SimOptions& opt_;
  SimResult& res_;
  std::vector<double> now_, nic_out_, nic_in_;  // shared_nic: when each port is free
  std::vector<Transfer> tr_;                    // per message
  std::map<std::pair<int, int>, double> link_free_;
  double total_flops_ = 0;
};

// Bytes per stage and pair, and (optionally) the timeline: compute ops, transfers, waits.
class SimRecorder : public WalkObserver {
 public:
  SimRecorder(const Schedule& s, const CostModel& cost, bool timeline, SimResult& res)
      : s_(s), cost_(cost), timeline_(timeline), res_(res) {}

  void on_compute(int stage, int op, const OpTimes& t) override {
    if (timeline_)
      res_.timeline.events.push_back(
          compute_event(stage, s_.stages[stage].ops[op], t.start, t.end));
  }
  void on_transfer(const Message& m, const TransferTimes& t) override {
    res_.pair_bytes[{m.src, m.dst}] += t.bytes;
    res_.stages[m.src].sent_bytes += t.bytes;
    res_.stages[m.src].messages_sent += 1;
    res_.stages[m.dst].recv_bytes += t.bytes;
    if (!timeline_) return;
    TimelineEvent e = message_event(m, m.src, m.dst, "send");
    e.bytes = t.bytes;
    e.start = t.start;
    e.end = t.sent;
    e.name = "send " + transfer_label(m);
    res_.timeline.events.push_back(e);
    e.category = "recv";
    e.stage = m.dst;
    e.peer = m.src;
    e.start = t.start + cost_.latency(m.src, m.dst);
    e.end = t.arrival;
    e.name = "recv " + transfer_label(m);
    res_.timeline.events.push_back(std::move(e));
  }
  void on_send_wait(int stage, const Message& m, double, const OpTimes& t) override {
    record_wait(stage, m, m.dst, "send", t);
  }
  void on_recv_wait(int stage, const Message& m, double, const OpTimes& t) override {
    record_wait(stage, m, m.src, "recv", t);
  }

 private:
  static TimelineEvent message_event(const Message& m, int stage, int peer, const char* category) {
    TimelineEvent e;
    e.stage = stage;
    e.peer = peer;
    e.category = category;
    e.mb = m.mb;
    e.dir = m.dir;
    e.first_kind = m.from.kind;
    return e;
  }
  void record_wait(int stage, const Message& m, int peer, const char* what, const OpTimes& t) {
    if (!timeline_ || t.end <= t.start) return;
    TimelineEvent e = message_event(m, stage, peer, "wait");
    e.start = t.start;
    e.end = t.end;
    e.name = fmt::format("wait {} {}", what, transfer_label(m));
    res_.timeline.events.push_back(std::move(e));
  }

  const Schedule& s_;
  const CostModel& cost_;
  bool timeline_;
  SimResult& res_;
};

void check_options(const Schedule& sched, const SimOptions& opt) {
  const int p = sched.num_stages;
  HP_CHECK(p >= 1 && static_cast<int>(sched.stages.size()) == p,
           "simulate: schedule '{}' says {} stages but has {}", sched.name, p, sched.stages.size());
  HP_CHECK(opt.message_bytes_scale >= 0, "simulate: message_bytes_scale must be >= 0");
  HP_CHECK(opt.comm_compute_share >= 0 && opt.comm_compute_share < 1,
           "simulate: comm_compute_share must be in [0, 1), got {}", opt.comm_compute_share);
  HP_CHECK(opt.stage_time_scale.empty() || static_cast<int>(opt.stage_time_scale.size()) == p,
           "simulate: stage_time_scale has {} entries for {} stages", opt.stage_time_scale.size(), p);
  for (double x : opt.stage_time_scale)
    HP_CHECK(x > 0, "simulate: stage_time_scale entries must be > 0 (got {})", x);
  HP_CHECK(opt.stage_part_scale.empty() || static_cast<int>(opt.stage_part_scale.size()) == p,
           "simulate: stage_part_scale has {} entries for {} stages", opt.stage_part_scale.size(),
           p);
  for (const PartTable& t : opt.stage_part_scale)
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs)
        HP_CHECK(t.at(k, d) > 0, "simulate: stage_part_scale of {} {} must be > 0 (got {})",
                 part_kind_str(k), dir_str(d), t.at(k, d));
  HP_CHECK(sched.is_lowered() || p == 1,
           "simulate: schedule '{}' has {} stages but no communication ops; lower() it first",
           sched.name, p);
}

std::string default_title(const Schedule& s) {
  return fmt::format("{} p={} m={} L={}{}{}", s.name, s.num_stages, s.microbatches, s.layers,
                     s.folds > 1 ? fmt::format(" F={}", s.folds) : "",
                     s.virtual_stages > 1 ? fmt::format(" V={}", s.virtual_stages) : "");
}

}  // namespace

SimResult simulate(const Schedule& sched, const CostModel& cost, const SimOptions& opt) {
  check_options(sched, opt);
  const int p = sched.num_stages;
  Walker walker(sched, opt.rendezvous ? Matching::kRendezvous : Matching::kBuffered, "simulate");
  SimResult res;
  res.timeline.num_stages = p;
  res.timeline.title = !opt.title.empty() ? opt.title : default_title(sched);
  res.stages.resize(p);
  for (int s = 0; s < p; ++s) res.stages[s].stage = s;
  SimClock clock(sched, cost, opt, res);
  SimRecorder recorder(sched, cost, opt.record_timeline, res);
  WalkObserver* observers[] = {&recorder};
  if (!walker.run(clock, observers)) {
    const std::vector<std::string> report = walker.deadlock_report();
    std::string blocked;
    for (size_t i = 1; i < report.size(); ++i) blocked += "\n  " + report[i];
    fail("simulate: schedule '{}' deadlocks (run 'helixpipe validate' for the full report):{}",
         sched.name, blocked);
  }

  double makespan = clock.last_arrival(), max_busy = 0;
  for (int s = 0; s < p; ++s) {
    res.stages[s].end = clock.now(s);
    makespan = std::max(makespan, clock.now(s));
    max_busy = std::max(max_busy, res.stages[s].busy);
  }
  res.makespan = makespan;
  res.bubble = makespan - max_busy;
  res.bubble_fraction = makespan > 0 ? res.bubble / makespan : 0;
  for (auto& st : res.stages) st.idle = makespan - st.busy;
  int64_t tokens = opt.tokens_per_microbatch > 0 ? opt.tokens_per_microbatch
                                                 : cost.tokens_per_microbatch();
  if (tokens > 0 && makespan > 0)
    res.tokens_per_s = static_cast<double>(tokens) * sched.microbatches / makespan;
  if (cost.peak_flops() > 0 && makespan > 0)
    res.mfu = clock.total_flops() / (makespan * p * cost.peak_flops());
  auto& events = res.timeline.events;
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
          {"recompute", recompute_label(s)},
          {"makespan", r.makespan},
          {"bubble", r.bubble},
          {"bubble_fraction", r.bubble_fraction},
          {"stages", std::move(stages)},
          {"pair_bytes", std::move(pairs)},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu}};
}

}  // namespace hp
