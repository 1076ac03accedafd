// Simulator on hand-built schedules: timing of compute and messages, link serialization, latency,
// rendezvous, deadlock reports, and the timeline renderings; on the walker's edge cases
// (tests/schedule/walker_cases.h) it agrees with a plain walk.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include "../schedule/walker_cases.h"
#include "schedule/walker.h"
#include "sim_test_util.h"
#include "util/error.h"

namespace hp {
namespace {

using test::add_compute;
using test::add_message;
using test::add_op;
using test::make_schedule;

CostModel costs(double pre_f, double post_f, double latency, double bw) {
  CostModel c;
  c.set_part_time(PartKind::kPre, Dir::kF, pre_f);
  c.set_part_time(PartKind::kPost, Dir::kF, post_f);
  c.set_part_time(PartKind::kPost, Dir::kI, 2 * post_f);
  c.set_part_time(PartKind::kPost, Dir::kW, 3 * post_f);
  c.set_links({latency, bw}, {latency, bw}, 1 << 20);
  return c;
}

TEST(Simulator, OneStageRunsOpsBackToBack) {
  Schedule s = make_schedule(1, 2);
  for (int mb = 0; mb < 2; ++mb) {
    ComputeOp op;
    op.mb = mb;
    op.parts = {Part::post(1)};
    s.stages[0].ops.push_back(op);  // not lowered: allowed for one stage
    op.dir = Dir::kB;
    s.stages[0].ops.push_back(op);
  }
  SimResult r = simulate(s, costs(0, 1.0, 0, 0));
  EXPECT_DOUBLE_EQ(r.makespan, 2 * (1 + 5));
  EXPECT_DOUBLE_EQ(r.bubble, 0);
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 12);
  ASSERT_EQ(r.timeline.events.size(), 4u);
  EXPECT_EQ(r.timeline.events[1].name, "B0 post:1");
  EXPECT_DOUBLE_EQ(r.timeline.events[1].start, 1);
  EXPECT_DOUBLE_EQ(r.timeline.events[1].end, 6);
}

TEST(Simulator, MessageDelaysTheConsumerByLatencyPlusBytesOverBandwidth) {
  Schedule s = make_schedule(2);
  int m = add_message(s, 0, 1, 0, 4000);
  add_op(s, 1, OpKind::kRecvStart, m);  // posted early
  add_compute(s, 0, Dir::kF, 0, {Part::pre(1)});
  add_op(s, 0, OpKind::kSendStart, m);
  add_op(s, 0, OpKind::kSendWait, m);
  add_op(s, 1, OpKind::kRecvWait, m);
  add_compute(s, 1, Dir::kF, 0, {Part::post(1)});
  SimResult r = simulate(s, costs(2.0, 3.0, 0.5, 1000.0));
  EXPECT_DOUBLE_EQ(r.stages[0].end, 2 + 4);          // the sender waits for its bytes to go out
  EXPECT_DOUBLE_EQ(r.stages[1].wait, 2 + 4 + 0.5);   // blocked until arrival
  EXPECT_DOUBLE_EQ(r.makespan, 2 + 4 + 0.5 + 3);
  EXPECT_DOUBLE_EQ(r.bubble, r.makespan - 3);
  EXPECT_EQ((r.pair_bytes[{0, 1}]), 4000);
  EXPECT_EQ(r.stages[0].sent_bytes, 4000);
  EXPECT_EQ(r.stages[1].recv_bytes, 4000);
  // Free links: the consumer starts as soon as the producer ends.
  SimResult f = simulate(s, costs(2.0, 3.0, 0, 0));
  EXPECT_DOUBLE_EQ(f.makespan, 5);
  // bf16 transfers: half the bytes.
  SimOptions half;
  half.message_bytes_scale = 0.5;
  EXPECT_DOUBLE_EQ(simulate(s, costs(2.0, 3.0, 0.5, 1000.0), half).makespan, 2 + 2 + 0.5 + 3);
}

// Overlap erosion: a transfer of d seconds takes comm_compute_share * d from the compute of both
// ends. By hand, 4000 B at 1000 B/s (d = 4 s, latency 0.5 s), share 0.25 (1 s on each end), the
// message posted by both stages at t = 0 and overlapped with their compute:
//   sender:   1 s lost + pre 5 s = ends at 6 (its bytes went out at 4);
//   receiver: 1 s lost + post 3 s = 4, then waits for the arrival at 4.5.
// Without the share they end at 5 and 4.5; a stage that only waits loses nothing.
TEST(Simulator, CommunicationTakesAShareOfOverlappedCompute) {
  Schedule s = make_schedule(2);
  int m = add_message(s, 0, 1, 0, 4000);
  add_op(s, 0, OpKind::kSendStart, m);
  add_op(s, 1, OpKind::kRecvStart, m);
  add_compute(s, 0, Dir::kF, 0, {Part::pre(1)});
  add_op(s, 0, OpKind::kSendWait, m);
  add_compute(s, 1, Dir::kF, 0, {Part::post(1)});
  add_op(s, 1, OpKind::kRecvWait, m);
  SimOptions opt;
  opt.comm_compute_share = 0.25;
  SimResult r = simulate(s, costs(5.0, 3.0, 0.5, 1000.0), opt);
  EXPECT_DOUBLE_EQ(r.stages[0].end, 6);
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 6);
  EXPECT_DOUBLE_EQ(r.stages[1].end, 4.5);
  EXPECT_DOUBLE_EQ(r.stages[1].busy, 4);
  EXPECT_DOUBLE_EQ(r.stages[1].wait, 0.5);
  SimResult free_overlap = simulate(s, costs(5.0, 3.0, 0.5, 1000.0));
  EXPECT_DOUBLE_EQ(free_overlap.stages[0].end, 5);
  EXPECT_DOUBLE_EQ(free_overlap.stages[1].end, 4.5);
  // The first test's shape (the receiver only waits): the same makespan with the share.
  Schedule w = make_schedule(2);
  int m2 = add_message(w, 0, 1, 0, 4000);
  add_op(w, 1, OpKind::kRecvStart, m2);
  add_compute(w, 0, Dir::kF, 0, {Part::pre(1)});
  add_op(w, 0, OpKind::kSendStart, m2);
  add_op(w, 0, OpKind::kSendWait, m2);
  add_op(w, 1, OpKind::kRecvWait, m2);
  EXPECT_DOUBLE_EQ(simulate(w, costs(2.0, 3.0, 0.5, 1000.0), opt).stages[1].end, 2 + 4 + 0.5);
  opt.comm_compute_share = 1.0;
  EXPECT_THROW(simulate(s, costs(5.0, 3.0, 0.5, 1000.0), opt), Error);
}

// Two messages posted together on one link go out one after the other; the latency of the second
// overlaps the first's transfer. On two different links they travel at the same time.
TEST(Simulator, TransfersSerializePerLinkAndOverlapAcrossLinks) {
  for (bool same_link : {true, false}) {
    Schedule s = make_schedule(3);
    int dst2 = same_link ? 1 : 2;
    int a = add_message(s, 0, 1, 0, 1000);
    int b = add_message(s, 0, dst2, 1, 1000);
    add_op(s, 0, OpKind::kSendStart, a);
    add_op(s, 0, OpKind::kSendStart, b);
    add_op(s, 0, OpKind::kSendWait, a);
    add_op(s, 0, OpKind::kSendWait, b);
    add_op(s, 1, OpKind::kRecvStart, a);
    if (same_link) add_op(s, 1, OpKind::kRecvStart, b);
    else add_op(s, 2, OpKind::kRecvStart, b);
    add_op(s, 1, OpKind::kRecvWait, a);
    add_op(s, dst2, OpKind::kRecvWait, b);
    add_compute(s, dst2, Dir::kF, 1, {Part::post(1)});
    SimResult r = simulate(s, costs(0, 1.0, 0.25, 1000.0));
    double arrival_b = same_link ? 2 + 0.25 : 1 + 0.25;
    EXPECT_DOUBLE_EQ(r.makespan, arrival_b + 1) << same_link;
    EXPECT_DOUBLE_EQ(r.stages[0].end, same_link ? 2 : 1) << same_link;
  }
}

TEST(Simulator, RendezvousWaitsForTheReceiverEagerDoesNot) {
  Schedule s = make_schedule(2);
  int m = add_message(s, 0, 1, 0, 1000);
  add_op(s, 0, OpKind::kSendStart, m);
  add_compute(s, 0, Dir::kF, 0, {Part::post(1)});  // 1 s of work overlapping the send
  add_op(s, 0, OpKind::kSendWait, m);
  add_compute(s, 1, Dir::kF, 0, {Part::pre(1)});  // the receiver is busy for 4 s first
  add_op(s, 1, OpKind::kRecvStart, m);
  add_op(s, 1, OpKind::kRecvWait, m);
  CostModel c = costs(4.0, 1.0, 0.5, 1000.0);
  SimResult rv = simulate(s, c);
  EXPECT_DOUBLE_EQ(rv.stages[1].end, 4 + 1 + 0.5);
  EXPECT_DOUBLE_EQ(rv.stages[0].end, 5);  // the sender blocks until the transfer went out
  SimOptions eager;
  eager.rendezvous = false;
  SimResult re = simulate(s, c, eager);
  EXPECT_DOUBLE_EQ(re.stages[0].end, 1);   // transfer overlapped the compute
  EXPECT_DOUBLE_EQ(re.stages[1].end, 4);   // data already there
}

TEST(Simulator, InterNodeLinksAreSlower) {
  Schedule s = make_schedule(4);
  int a = add_message(s, 0, 1, 0, 1000);
  int b = add_message(s, 1, 2, 0, 1000);
  add_op(s, 0, OpKind::kSendStart, a);
  add_op(s, 0, OpKind::kSendWait, a);
  add_op(s, 1, OpKind::kRecvWait, a);
  add_op(s, 1, OpKind::kSendStart, b);
  add_op(s, 1, OpKind::kSendWait, b);
  add_op(s, 2, OpKind::kRecvWait, b);
  CostModel c;
  c.set_links({0.001, 1e6}, {0.01, 1e5}, 2);  // stages 0,1 on node 0; 2,3 on node 1
  SimResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.stages[0].end, 0.001);                 // intra: 1000 B at 1 MB/s
  EXPECT_DOUBLE_EQ(r.stages[1].end, 0.002 + 0.01);          // a arrives, b goes out inter-node
  EXPECT_DOUBLE_EQ(r.stages[2].end, 0.002 + 0.01 + 0.01);
}

TEST(Simulator, DeadlockIsReportedWithEachBlockedStage) {
  Schedule s = make_schedule(2);
  int a = add_message(s, 0, 1, 0, 10);
  int b = add_message(s, 1, 0, 0, 10);
  add_op(s, 0, OpKind::kRecvWait, b);
  add_op(s, 0, OpKind::kSendStart, a);
  add_op(s, 1, OpKind::kRecvWait, a);
  add_op(s, 1, OpKind::kSendStart, b);
  try {
    simulate(s, costs(1, 1, 0, 0));
    FAIL() << "no deadlock reported";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("deadlocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 0 is stuck at lowered op 0: recv.wait of message 101"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("stage 1 is stuck at lowered op 0: recv.wait of message 100"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("stage 1 has not started sending it"), std::string::npos) << msg;
  }
}

TEST(Simulator, RejectsMalformedSchedules) {
  Schedule s = make_schedule(2);
  add_compute(s, 0, Dir::kF, 0, {Part::pre(1)});
  add_compute(s, 1, Dir::kF, 0, {Part::post(1)});
  s.stages[0].lowered.clear();
  s.stages[1].lowered.clear();
  std::string msg;
  try { simulate(s, costs(1, 1, 0, 0)); } catch (const Error& e) { msg = e.what(); }
  EXPECT_NE(msg.find("lower() it first"), std::string::npos) << msg;
  Schedule t = make_schedule(2);
  int m = add_message(t, 0, 1, 0, 10);
  add_op(t, 1, OpKind::kSendStart, m);  // the receiver sends it
  msg.clear();
  try { simulate(t, costs(1, 1, 0, 0)); } catch (const Error& e) { msg = e.what(); }
  EXPECT_NE(msg.find("belongs to stage 0"), std::string::npos) << msg;
}

TEST(Timeline, SvgAndTraceAreWellFormed) {
  Schedule s = make_schedule(2, 2);
  for (int mb = 0; mb < 2; ++mb) {
    int m = add_message(s, 0, 1, mb, 500);
    add_compute(s, 0, Dir::kF, mb, {Part::embed(), Part::pre(1)});
    add_op(s, 0, OpKind::kSendStart, m);
    add_op(s, 1, OpKind::kRecvStart, m);
    add_op(s, 1, OpKind::kRecvWait, m);
    add_compute(s, 1, Dir::kF, mb, {Part::attn(1), Part::post(1), Part::head()});
    add_op(s, 0, OpKind::kSendWait, m);
  }
  SimOptions opt;
  opt.title = "two <stages> & a message";
  SimResult r = simulate(s, costs(1, 1, 0.1, 1000), opt);
  std::string svg = render_svg(r.timeline);
  std::string why;
  EXPECT_TRUE(test::xml_well_formed(svg, &why)) << why;
  EXPECT_NE(svg.find("two &lt;stages&gt; &amp; a message"), std::string::npos);
  EXPECT_NE(svg.find("F1 embed..pre:1"), std::string::npos);
  EXPECT_NE(svg.find(">stage 1</text>"), std::string::npos);
  std::string side = render_side_by_side(r.timeline, r.timeline);
  EXPECT_TRUE(test::xml_well_formed(side, &why)) << why;

  auto j = nlohmann::json::parse(render_chrome_trace(r.timeline));
  int compute = 0, transfers = 0, waits = 0;
  std::map<std::pair<int, int>, double> track_end;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X");
    double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(dur, 0);
    int pid = e["pid"], tid = e["tid"];
    EXPECT_TRUE(pid == 0 || pid == 1);
    auto& last = track_end[{pid, tid}];
    EXPECT_GE(ts + 1e-9, last) << "overlapping slices on one track: " << e.dump();
    last = ts + dur;
    std::string cat = e["cat"];
    if (cat == "F") ++compute;
    else if (cat == "send" || cat == "recv") ++transfers;
    else if (cat == "wait") ++waits;
  }
  EXPECT_EQ(compute, 4);
  EXPECT_EQ(transfers, 4);
  EXPECT_EQ(waits + compute + transfers, static_cast<int>(r.timeline.events.size()));
  EXPECT_GE(waits, 1);  // stage 1 waits for the first message
  EXPECT_EQ(j["otherData"]["version"], 1);
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// 1 s per forward post part, link latency 0.5 s, and bandwidth so that one X message takes 1 s.
CostModel walker_costs(int64_t x_bytes) {
  CostModel c;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost})
    for (Dir d : {Dir::kF, Dir::kI, Dir::kW}) c.set_part_time(k, d, k == PartKind::kPost ? 1.0 : 0.5);
  c.set_links({0.5, static_cast<double>(x_bytes)}, {0.5, static_cast<double>(x_bytes)}, 1 << 20);
  return c;
}

class SimWalkerCases : public ::testing::TestWithParam<test::WalkerCase> {};

// Rendezvous and eager simulations finish exactly when a plain walk under rendezvous / buffered
// matching does, and a deadlock names the same stages, ops and messages.
TEST_P(SimWalkerCases, FinishesWhenTheWalkDoesAndNamesTheSameDeadlock) {
  const ModelConfig cfg;
  const Schedule s = GetParam().make(&cfg);
  const CostModel cost = walker_costs(s.messages[0].bytes);
  for (bool rendezvous : {true, false}) {
    Walker walker(s, rendezvous ? Matching::kRendezvous : Matching::kBuffered, "test");
    NullTransport none;
    const bool finished = walker.run(none);
    EXPECT_EQ(finished, rendezvous ? GetParam().rendezvous_finishes : GetParam().buffered_finishes);
    SimOptions opt;
    opt.rendezvous = rendezvous;
    if (finished) {
      const SimResult r = simulate(s, cost, opt);
      int computes = 0;
      for (const TimelineEvent& e : r.timeline.events) computes += e.is_compute();
      EXPECT_EQ(computes, static_cast<int>(s.stages[0].ops.size() + s.stages[1].ops.size()));
      continue;
    }
    std::string want = "simulate: schedule '" + s.name +
                       "' deadlocks (run 'helixpipe validate' for the full report):";
    const std::vector<std::string> report = walker.deadlock_report();
    for (size_t i = 1; i < report.size(); ++i) want += "\n  " + report[i];
    try {
      simulate(s, cost, opt);
      FAIL() << "no deadlock reported";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, SimWalkerCases, ::testing::ValuesIn(test::walker_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// A send.wait before the next compute op holds the stage until the bytes are out: the compute
// starts one transfer later than where lower() puts the wait (after that compute).
TEST(Simulator, SendWaitBeforeTheNextComputeHoldsTheStage) {
  const ModelConfig cfg;
  for (bool rendezvous : {true, false}) {
    SimOptions opt;
    opt.rendezvous = rendezvous;
    const Schedule lowered = test::gpipe_two_stages(&cfg), early =
                                                             test::send_wait_before_compute(&cfg);
    const CostModel cost = walker_costs(lowered.messages[0].bytes);
    auto second_compute_start = [&](const Schedule& s) {
      const SimResult r = simulate(s, cost, opt);
      int seen = 0;
      for (const TimelineEvent& e : r.timeline.events)
        if (e.stage == 0 && e.is_compute() && ++seen == 2) return e.start;
      return -1.0;
    };
    // F0 on stage 0 takes 2 s (pre 0.5, attn 0.5, post 1), its message 1 s to go out.
    EXPECT_DOUBLE_EQ(second_compute_start(lowered), 2.0) << rendezvous;
    EXPECT_DOUBLE_EQ(second_compute_start(early), 3.0) << rendezvous;
  }
}

// A blocking receive (recv.wait without recv.start) posts where it stands: under rendezvous its
// transfer waits for it, so a helix schedule whose receives lower() posts one step ahead gets
// slower; eager transfers do not wait for the receive, so nothing changes, to the bit.
TEST(Simulator, BlockingReceivesDelayRendezvousTransfersOnly) {
  ModelConfig cfg;
  cfg.layers = 4;
  Schedule posted = test::gen("helix", 2, 4, 4, 2);
  lower(posted, &cfg, 16);
  Schedule blocking = posted;
  for (Stage& st : blocking.stages)
    std::erase_if(st.lowered, [](const LoweredOp& op) { return op.kind == OpKind::kRecvStart; });
  const CostModel cost = walker_costs(posted.messages[0].bytes);
  const SimResult a = simulate(posted, cost), b = simulate(blocking, cost);
  EXPECT_GT(b.makespan, a.makespan);
  SimOptions eager;
  eager.rendezvous = false;
  const SimResult c = simulate(posted, cost, eager), d = simulate(blocking, cost, eager);
  EXPECT_EQ(c.makespan, d.makespan);
  for (int st = 0; st < 2; ++st) {
    EXPECT_EQ(c.stages[st].busy, d.stages[st].busy);
    EXPECT_EQ(c.stages[st].wait, d.stages[st].wait);
  }
}

}  // namespace
}  // namespace hp
