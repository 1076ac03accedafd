// The walker on hand-edited lowered programs (walker_cases.h): blocking receives, send.waits before
// or after the next compute op, rendezvous against buffered sends; every configuration (a plain
// walk, an in-memory run that moves payloads, validate(), defer_blocking_send_waits()) agrees on
// each program; broken programs give errors naming the stage, the op and the message.
#include "schedule/walker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "schedule/validate.h"
#include "util/error.h"
#include "walker_cases.h"

namespace hp {
namespace {

using test::find_op;

// Every event the walker reports, one short string each, in order.
class EventLog : public WalkObserver {
 public:
  std::vector<std::string> events;
  void on_compute(int st, int op, const OpTimes&) override { add(st, "C", op); }
  void on_send_start(int st, const Message& m, double) override { add(st, "ss#", m.id); }
  void on_recv_start(int st, const Message& m, double) override { add(st, "rs#", m.id); }
  void on_send_wait(int st, const Message& m, double, const OpTimes&) override {
    add(st, "sw#", m.id);
  }
  void on_recv_wait(int st, const Message& m, double, const OpTimes&) override {
    add(st, "rw#", m.id);
  }
  void on_transfer(const Message& m, const TransferTimes&) override {
    events.push_back("t#" + std::to_string(m.id));
  }
 private:
  void add(int st, const char* what, int n) {
    events.push_back("s" + std::to_string(st) + " " + what + std::to_string(n));
  }
};

// The in-memory configuration: a send.start puts a token naming the message and its sender in the
// message's slot; a recv.wait takes it out and checks it. Times are a step counter per stage.
class PayloadRun : public WalkTransport {
 public:
  explicit PayloadRun(const Schedule& s)
      : s_(s), slot_(s.messages.size(), -1), clock_(static_cast<size_t>(s.num_stages), 0) {}
  int delivered = 0;
  std::vector<std::string> wrong;

  OpTimes compute(int st, int) override { return tick(st); }
  double start_send(int st, const Message& m) override {
    slot_[index(m)] = token(m);
    return tick(st).end;
  }
  double start_recv(int st, const Message&) override { return tick(st).end; }
  OpTimes wait_send(int st, const Message&) override { return tick(st); }
  OpTimes wait_recv(int st, const Message& m) override {
    if (slot_[index(m)] != token(m)) wrong.push_back(message_label(m));
    slot_[index(m)] = -1;
    ++delivered;
    return tick(st);
  }

 private:
  static int token(const Message& m) { return 1000 * m.src + m.id; }
  size_t index(const Message& m) const { return static_cast<size_t>(&m - s_.messages.data()); }
  OpTimes tick(int st) {
    const double t = static_cast<double>(clock_[st]++);
    return {t, t + 1};
  }
  const Schedule& s_;
  std::vector<int> slot_;
  std::vector<int64_t> clock_;
};

// The events of one stage, in order.
std::vector<std::string> of_stage(const std::vector<std::string>& events, int st) {
  std::vector<std::string> out;
  const std::string prefix = "s" + std::to_string(st) + " ";
  for (const std::string& e : events)
    if (e.rfind(prefix, 0) == 0) out.push_back(e.substr(prefix.size()));
  return out;
}

struct Outcome {
  bool finished = false;
  std::vector<std::string> events, report;
  std::string stuck;  // "stage:pos:why" per stuck stage
};

Outcome walk(const Schedule& s, Matching matching, WalkTransport& t) {
  Walker w(s, matching, "test");
  EventLog log;
  WalkObserver* obs[] = {&log};
  Outcome o;
  o.finished = w.run(t, obs);
  o.events = log.events;
  if (!o.finished) {
    o.report = w.deadlock_report();
    for (const StuckWait& k : w.stuck())
      o.stuck += std::to_string(k.stage) + ":" + std::to_string(k.pos) + ":" +
                 std::to_string(static_cast<int>(k.why)) + " ";
  }
  return o;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

class WalkerCases : public ::testing::TestWithParam<test::WalkerCase> {};

TEST_P(WalkerCases, EveryConfigurationAgrees) {
  const test::WalkerCase& c = GetParam();
  const Schedule s = c.make(nullptr);
  for (Matching matching : {Matching::kRendezvous, Matching::kBuffered}) {
    const bool rendezvous = matching == Matching::kRendezvous;
    SCOPED_TRACE(rendezvous ? "rendezvous" : "buffered");
    NullTransport none;
    const Outcome plain = walk(s, matching, none);
    PayloadRun payloads(s);
    const Outcome moved = walk(s, matching, payloads);
    EXPECT_EQ(plain.finished, rendezvous ? c.rendezvous_finishes : c.buffered_finishes)
        << joined(plain.report);
    // The transport never changes what the walk does.
    EXPECT_EQ(moved.finished, plain.finished);
    EXPECT_EQ(moved.events, plain.events);
    EXPECT_EQ(moved.stuck, plain.stuck);
    EXPECT_EQ(moved.report, plain.report);
    EXPECT_TRUE(payloads.wrong.empty()) << joined(payloads.wrong);
    if (plain.finished) {
      EXPECT_EQ(payloads.delivered, static_cast<int>(s.messages.size()));
    }
  }
  // The validator walks under rendezvous: a program it accepts finishes there.
  const ValidationReport r = validate(s);
  EXPECT_EQ(r.ok(), c.valid) << joined(r.errors);
  if (c.valid) {
    EXPECT_TRUE(c.rendezvous_finishes);
  }
  // Deferral leaves a program that finishes alone and repairs one held by early send.waits.
  Schedule deferred = s;
  defer_blocking_send_waits(deferred);
  NullTransport none;
  const Outcome after = walk(deferred, Matching::kRendezvous, none);
  if (c.rendezvous_finishes) {
    for (int st = 0; st < s.num_stages; ++st) {
      EXPECT_EQ(deferred.stages[st].lowered.size(), s.stages[st].lowered.size());
      for (size_t j = 0; j < s.stages[st].lowered.size(); ++j) {
        EXPECT_EQ(deferred.stages[st].lowered[j].kind, s.stages[st].lowered[j].kind);
        EXPECT_EQ(deferred.stages[st].lowered[j].index, s.stages[st].lowered[j].index);
      }
    }
  }
  EXPECT_EQ(after.finished, c.rendezvous_finishes || c.name == "early_send_waits");
}

INSTANTIATE_TEST_SUITE_P(Programs, WalkerCases, ::testing::ValuesIn(test::walker_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(Walker, BlockingReceivePostsWhereItStands) {
  const Schedule s = test::blocking_receives();
  NullTransport none;
  const Outcome o = walk(s, Matching::kRendezvous, none);
  ASSERT_TRUE(o.finished);
  // Stage 1 has no recv.start: each recv.wait posts its receive, observers see it right there.
  EXPECT_EQ(Walker(s, Matching::kRendezvous, "test").program_size(1), 10u);
  const std::vector<std::string> want = {"rs#0", "rw#0", "C0", "rs#1", "rw#1", "C1",
                                         "C2",   "ss#2", "C3", "sw#2", "ss#3", "sw#3"};
  EXPECT_EQ(of_stage(o.events, 1), want);
  // Under rendezvous the transfer of message 1 moves when stage 1 posts it, not at the send.
  auto at = [&](const std::string& e) {
    return std::find(o.events.begin(), o.events.end(), e) - o.events.begin();
  };
  EXPECT_GT(at("t#1"), at("s1 rs#1"));
  EXPECT_GT(at("t#1"), at("s0 ss#1"));
  // Buffered sends move at the send.
  const Outcome b = walk(s, Matching::kBuffered, none);
  ASSERT_TRUE(b.finished);
  EXPECT_EQ(std::find(b.events.begin(), b.events.end(), "t#0") - b.events.begin(),
            std::find(b.events.begin(), b.events.end(), "s0 ss#0") - b.events.begin() + 1);
}

TEST(Walker, EarlySendWaitsDeadlockUnderRendezvousAndDeferMovesThem) {
  Schedule s = test::early_send_waits();
  const int w0 = find_op(s, 0, OpKind::kSendWait, 1), w1 = find_op(s, 1, OpKind::kSendWait, 3);
  NullTransport none;
  const Outcome o = walk(s, Matching::kRendezvous, none);
  ASSERT_FALSE(o.finished);
  ASSERT_EQ(o.report.size(), 3u);
  EXPECT_EQ(o.report[0], "deadlock under blocking in-order execution: 2 of 2 stages can never "
                         "finish");
  EXPECT_EQ(o.report[1],
            "stage 0 is stuck at lowered op " + std::to_string(w0) +
                ": send.wait of message 1 (F1 post:1 -> pre:2, stage 0 -> 1), consumed by stage "
                "1 op 2 (F 1 pre:2 attn:2 post:2 head): stage 1 has not posted its receive "
                "(needed by stage 1 op 2 (F 1 pre:2 attn:2 post:2 head)), and stage 1 is itself "
                "stuck at lowered op " +
                std::to_string(w1) + " (send.wait#3>s0)");
  EXPECT_NE(o.report[2].find("stage 1 is stuck at lowered op " + std::to_string(w1) +
                             ": send.wait of message 3 (B0 pre:2 -> post:1, stage 1 -> 0)"),
            std::string::npos)
      << o.report[2];
  // The validator reports the same deadlock.
  const ValidationReport r = validate(s);
  ASSERT_EQ(r.errors.size(), 3u) << joined(r.errors);
  EXPECT_EQ(r.errors, o.report);
  EXPECT_NE(r.deadlock_grid.find(">>send.wait#1>s1"), std::string::npos) << r.deadlock_grid;
  // Deferral moves each wait past the next start (the receive its peer waits for).
  defer_blocking_send_waits(s);
  EXPECT_EQ(find_op(s, 0, OpKind::kSendWait, 1), find_op(s, 0, OpKind::kRecvStart, 3) + 1);
  EXPECT_EQ(find_op(s, 1, OpKind::kSendWait, 3), find_op(s, 1, OpKind::kRecvStart, 1) + 1);
  EXPECT_TRUE(validate(s).ok()) << joined(validate(s).errors);
}

TEST(Walker, MissingReceiveIsNamed) {
  const Schedule s = test::missing_receive();
  NullTransport none;
  const Outcome o = walk(s, Matching::kRendezvous, none);
  ASSERT_FALSE(o.finished);
  const std::string all = joined(o.report);
  EXPECT_NE(all.find("stage 0 is stuck at lowered op " +
                     std::to_string(find_op(s, 0, OpKind::kSendWait, 1)) +
                     ": send.wait of message 1 (F1 post:1 -> pre:2, stage 0 -> 1), consumed by "
                     "stage 1 op 2 (F 1 pre:2 attn:2 post:2 head): stage 1 has not posted its "
                     "receive"),
            std::string::npos)
      << all;
  // Buffered sends let every stage finish; the message is never received.
  try {
    walk(s, Matching::kBuffered, none);
    FAIL() << "no error for a message never received";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find(
                  "test: stage 1 never receives message 1 (F1 post:1 -> pre:2, stage 0 -> 1) (no "
                  "recv.start or recv.wait), at the end of its program"),
              0u)
        << e.what();
  }
  const ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0], "message 1 (F1 post:1 -> pre:2, stage 0 -> 1) lacks its recv.wait on "
                         "stage 1");
}

TEST(Walker, SwappedSendsAreNamed) {
  const Schedule s = test::swapped_sends();
  NullTransport none;
  const Outcome o = walk(s, Matching::kRendezvous, none);
  ASSERT_FALSE(o.finished);
  ASSERT_EQ(o.report.size(), 3u);
  EXPECT_EQ(o.report[2],
            "stage 1 is stuck at lowered op 1: recv.wait of message 0 (F0 post:1 -> pre:2, stage "
            "0 -> 1), consumed by stage 1 op 0 (F 0 pre:2 attn:2 post:2 head): it is queued on "
            "link 0 -> 1 behind message 1 (F1 post:1 -> pre:2, stage 0 -> 1), whose receive is "
            "missing");
  EXPECT_NE(o.report[1].find("stage 0 is stuck at lowered op 4: send.wait of message 1"),
            std::string::npos)
      << o.report[1];
  const ValidationReport r = validate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(joined(r.errors).find("stage 0: message 1 (F1 post:1 -> pre:2, stage 0 -> 1) starts "
                                  "sending before its producer stage 0 op 1"),
            std::string::npos)
      << joined(r.errors);
}

// Runs `s` under rendezvous and returns the error text (empty when none).
std::string walk_error(const Schedule& s) {
  try {
    NullTransport none;
    walk(s, Matching::kRendezvous, none);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Walker, BrokenProgramsAreErrorsNamingStageOpAndMessage) {
  const std::string m0 = "message 0 (F0 post:1 -> pre:2, stage 0 -> 1)";
  {
    Schedule s = test::gpipe_two_stages();
    auto& prog = s.stages[1].lowered;
    prog.insert(prog.begin() + 1, LoweredOp{OpKind::kRecvStart, 0});
    EXPECT_EQ(walk_error(s), "test: stage 1 posts the receive of " + m0 +
                                 " a second time, at lowered op 1 (a broken lowering; run "
                                 "'helixpipe validate')");
  }
  {
    Schedule s = test::gpipe_two_stages();
    test::move_after(s, 0, OpKind::kSendWait, 0, OpKind::kCompute, 0);
    EXPECT_EQ(walk_error(s), "test: stage 0 waits for the send of " + m0 +
                                 " before its send.start, at lowered op 1 (a broken lowering; "
                                 "run 'helixpipe validate')");
  }
  {
    Schedule s = test::gpipe_two_stages();
    auto& prog = s.stages[1].lowered;
    prog.insert(prog.begin() + 2, LoweredOp{OpKind::kRecvWait, 0});
    EXPECT_NE(walk_error(s).find("stage 1 waits for the receive of " + m0 +
                                 " a second time, at lowered op 2"),
              std::string::npos);
  }
  {
    Schedule s = test::gpipe_two_stages();
    test::erase_op(s, 1, OpKind::kSendWait, 3);
    EXPECT_EQ(walk_error(s), "test: stage 1 never waits for the send of message 3 (B1 pre:2 -> "
                             "post:1, stage 1 -> 0) (no send.wait), at the end of its program (a "
                             "broken lowering; run 'helixpipe validate')");
  }
  {
    Schedule s = test::gpipe_two_stages();
    s.stages[1].lowered.push_back(LoweredOp{OpKind::kSendStart, 0});
    EXPECT_EQ(walk_error(s), "test: stage 1 has a send.start of " + m0 +
                                 ", which belongs to stage 0");
  }
  {
    Schedule s = test::gpipe_two_stages();
    auto& prog = s.stages[0].lowered;
    prog.insert(prog.begin() + 2, LoweredOp{OpKind::kSendStart, 0});
    EXPECT_EQ(walk_error(s), "test: " + m0 + " is sent twice (stage 0)");
  }
  {
    Schedule s = test::gpipe_two_stages();
    test::erase_op(s, 0, OpKind::kSendStart, 0);
    test::erase_op(s, 0, OpKind::kSendWait, 0);
    EXPECT_EQ(walk_error(s), "test: " + m0 + " is never sent (stage 0 has no send.start for it)");
  }
  {
    Schedule s = test::gpipe_two_stages();
    s.stages[0].lowered.push_back(LoweredOp{OpKind::kCompute, 9});
    EXPECT_EQ(walk_error(s), "test: stage 0 runs compute op 9 but has 4 ops");
  }
}

TEST(Walker, OneStageWalkRunsOnlyItsStageAndPostsBlockingReceives) {
  const Schedule s = test::blocking_receives();
  Walker w(s, 1, "test");
  EXPECT_EQ(w.matching(), Matching::kByTransport);
  PayloadRun t(s);
  EventLog log;
  WalkObserver* obs[] = {&log};
  ASSERT_TRUE(w.run(t, obs));
  EXPECT_EQ(of_stage(log.events, 0).size(), 0u);
  const std::vector<std::string> want = {"rs#0", "rw#0", "C0", "rs#1", "rw#1", "C1",
                                         "C2",   "ss#2", "C3", "sw#2", "ss#3", "sw#3"};
  EXPECT_EQ(of_stage(log.events, 1), want);
  // The transport matches: nothing was sent to stage 1 here, so the payloads are wrong; and no
  // transfer events (the walker does not match under kByTransport).
  EXPECT_EQ(t.wrong.size(), 2u);
  EXPECT_EQ(std::count(log.events.begin(), log.events.end(), "t#0"), 0);
  // reset() starts over.
  w.reset();
  EXPECT_EQ(w.pc(1), 0u);
  EXPECT_TRUE(w.run(t));
}

TEST(Walker, StagesWithoutAProgramRunTheirComputeOps) {
  const Schedule s = test::gen("1f1b", 1, 2, 1);
  ASSERT_FALSE(s.is_lowered());
  NullTransport none;
  const Outcome o = walk(s, Matching::kRendezvous, none);
  ASSERT_TRUE(o.finished);
  EXPECT_EQ(o.events, (std::vector<std::string>{"s0 C0", "s0 C1", "s0 C2", "s0 C3"}));
}

TEST(Walker, MessageIdsNeedNotBeIndices) {
  Schedule s = test::gpipe_two_stages();
  for (Message& m : s.messages) m.id += 100;
  for (Stage& st : s.stages)
    for (LoweredOp& op : st.lowered)
      if (op.kind != OpKind::kCompute) op.index += 100;
  Walker w(s, Matching::kRendezvous, "test");
  EXPECT_EQ(w.message_index(102), 2);
  EXPECT_EQ(w.message_index(2), -1);
  PayloadRun t(s);
  EXPECT_TRUE(w.run(t));
  EXPECT_EQ(t.delivered, 4);
  // Ids far from 0..N-1 take the map.
  for (Message& m : s.messages) m.id = m.id * 1000000 - 7;
  for (Stage& st : s.stages)
    for (LoweredOp& op : st.lowered)
      if (op.kind != OpKind::kCompute) op.index = op.index * 1000000 - 7;
  Walker far(s, Matching::kRendezvous, "test");
  EXPECT_EQ(far.message_index(101 * 1000000 - 7), 1);
  NullTransport none;
  EXPECT_TRUE(far.run(none));
}

}  // namespace
}  // namespace hp
