// recompute_run (schedule/ir.h): which recomputed post keeps its gate and up values and which
// parts' outputs are read later, the rule Model::run follows and the simulator charges.
#include <gtest/gtest.h>

#include <vector>

#include "schedule/ir.h"

namespace hp {
namespace {

ComputeOp backward_op(std::vector<Part> model_order, Recompute rc) {
  ComputeOp o;
  o.dir = Dir::kB;
  o.parts.assign(model_order.rbegin(), model_order.rend());  // a backward runs in reverse
  o.recompute = recompute_parts(o, rc);
  return o;
}

TEST(RecomputeRun, TheLastPostInModelOrderKeepsGateAndUpAndStopsEarlyWithoutTheHead) {
  // Two layers, no head; under no-attn op.recompute is post:2 pre:2 post:1 pre:1.
  const ComputeOp o = backward_op(
      {Part::pre(1), Part::attn(1), Part::post(1), Part::pre(2), Part::attn(2), Part::post(2)},
      Recompute::kNoAttn);
  ASSERT_EQ(o.recompute.size(), 4u);
  ASSERT_EQ(o.recompute[0], Part::post(2));
  ASSERT_EQ(o.recompute[2], Part::post(1));
  const RecomputeRun first = recompute_run(o, 0);
  EXPECT_TRUE(first.keep_gu);
  EXPECT_FALSE(first.read_later);  // nothing in the op reads post:2's output
  for (size_t i = 1; i < o.recompute.size(); ++i) {
    const RecomputeRun r = recompute_run(o, i);
    EXPECT_FALSE(r.keep_gu) << o.recompute[i].str();
    EXPECT_TRUE(r.read_later) << o.recompute[i].str();
  }
}

TEST(RecomputeRun, WithTheHeadTheLastPostsOutputIsReadByTheHeadsBackward) {
  const ComputeOp o =
      backward_op({Part::pre(3), Part::attn(3), Part::post(3), Part::head()}, Recompute::kNoAttn);
  ASSERT_EQ(o.recompute.front(), Part::post(3));
  const RecomputeRun r = recompute_run(o, 0);
  EXPECT_TRUE(r.keep_gu);
  EXPECT_TRUE(r.read_later);
}

TEST(RecomputeRun, NonPostPartsNeverKeepGateAndUp) {
  const ComputeOp o = backward_op({Part::embed(), Part::pre(1), Part::attn(1)}, Recompute::kFull);
  ASSERT_EQ(o.recompute.size(), 3u);  // attn:1 pre:1 embed
  EXPECT_FALSE(recompute_run(o, 0).keep_gu);
  EXPECT_FALSE(recompute_run(o, 0).read_later);
  EXPECT_TRUE(recompute_run(o, 2).read_later);
  EXPECT_ANY_THROW(recompute_run(o, 3));
}

}  // namespace
}  // namespace hp
