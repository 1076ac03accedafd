// The shared network port option: inter-node transfers of one stage go out one after another
// across all its peers; intra-node transfers keep their own wires.
#include <gtest/gtest.h>

#include "sim/simulator.h"
#include "sim_test_util.h"

namespace hp {
namespace {

using test::add_compute;
using test::add_message;
using test::add_op;
using test::make_schedule;

// Stage 0 sends 1000 bytes to stage 1 and to stage 2 at t=0; each receiver then computes 1 s.
Schedule fan_out() {
  Schedule s = make_schedule(3);
  int a = add_message(s, 0, 1, 0, 1000);
  int b = add_message(s, 0, 2, 0, 1000);
  add_op(s, 1, OpKind::kRecvStart, a);
  add_op(s, 2, OpKind::kRecvStart, b);
  add_op(s, 0, OpKind::kSendStart, a);
  add_op(s, 0, OpKind::kSendStart, b);
  add_op(s, 0, OpKind::kSendWait, a);
  add_op(s, 0, OpKind::kSendWait, b);
  add_op(s, 1, OpKind::kRecvWait, a);
  add_compute(s, 1, Dir::kF, 0, {Part::post(1)});
  add_op(s, 2, OpKind::kRecvWait, b);
  add_compute(s, 2, Dir::kF, 0, {Part::post(1)});
  return s;
}

CostModel costs(int stages_per_node) {
  CostModel c;
  c.set_part_time(PartKind::kPost, Dir::kF, 1.0);
  c.set_links({0.0, 1e9}, {0.5, 1000.0}, stages_per_node);  // inter: 1 s per 1000 bytes + 0.5 s
  return c;
}

TEST(SharedNic, InterNodeSendsOfOneStageSerialize) {
  SimOptions own, shared;
  shared.shared_nic = true;
  // Every stage on its own node.
  SimResult a = simulate(fan_out(), costs(1), own);
  EXPECT_DOUBLE_EQ(a.makespan, 1 + 0.5 + 1);  // both transfers at once
  SimResult b = simulate(fan_out(), costs(1), shared);
  EXPECT_DOUBLE_EQ(b.stages[1].end, 1 + 0.5 + 1);
  EXPECT_DOUBLE_EQ(b.stages[2].end, 2 + 0.5 + 1);  // waits for the port
  EXPECT_DOUBLE_EQ(b.makespan, 3.5);
  // One node: the NVLink pairs keep their own wires either way.
  SimResult c = simulate(fan_out(), costs(8), shared);
  EXPECT_NEAR(c.makespan, 1e-6 + 1, 1e-12);  // 1000 B at 1 GB/s, no latency
}

}  // namespace
}  // namespace hp
