// gather_timeline over LocalWorld ranks: rank 0 ends with every stage's events, every field kept.
#include <gtest/gtest.h>

#include "comm/local_comm.h"
#include "runtime/timeline_gather.h"

namespace hp {
namespace {

CommOptions fast_timeout(double s) {
  CommOptions o;
  o.timeout_s = s;
  return o;
}

TEST(TimelineGather, CollectsEveryStageOnRankZero) {
  LocalWorld world(3, fast_timeout(30));
  Timeline root;
  world.run([&](Comm& c) {
    Timeline tl;
    tl.num_stages = 3;
    for (int i = 0; i <= c.rank(); ++i) {
      TimelineEvent e;
      e.stage = c.rank();
      e.start = 0.5 * i;
      e.end = 0.5 * i + 0.25;
      e.name = "F" + std::to_string(i);
      e.category = i % 2 ? "send" : "F";
      e.mb = i;
      e.dir = Dir::kB;
      e.first_kind = PartKind::kPost;
      e.fold = 1;
      e.peer = (c.rank() + 1) % 3;
      e.bytes = 1000 + i;
      tl.events.push_back(e);
    }
    gather_timeline(c, tl);
    if (c.rank() == 0) root = tl;
    else EXPECT_EQ(tl.events.size(), static_cast<size_t>(c.rank() + 1));  // left as it was
  });
  ASSERT_EQ(root.events.size(), 6u);  // 1 + 2 + 3
  int per_stage[3] = {0, 0, 0};
  for (const TimelineEvent& e : root.events) {
    ++per_stage[e.stage];
    EXPECT_DOUBLE_EQ(e.end - e.start, 0.25);
    EXPECT_EQ(e.dir, Dir::kB);
    EXPECT_EQ(e.first_kind, PartKind::kPost);
    EXPECT_EQ(e.fold, 1);
    EXPECT_EQ(e.peer, (e.stage + 1) % 3);
    EXPECT_EQ(e.bytes, 1000 + e.mb);
    EXPECT_EQ(e.category, e.mb % 2 ? "send" : "F");
  }
  EXPECT_EQ(per_stage[0], 1);
  EXPECT_EQ(per_stage[1], 2);
  EXPECT_EQ(per_stage[2], 3);
}

}  // namespace
}  // namespace hp
