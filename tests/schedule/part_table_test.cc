// PartTable (schedule/ir.h): one figure per part kind and F/I/W direction, read by name, with a
// full backward B read as I + W and never stored.
#include <gtest/gtest.h>

#include "schedule/ir.h"
#include "util/error.h"

namespace hp {
namespace {

TEST(PartTable, EntriesByKindAndDirectionAndBIsIPlusW) {
  PartTable t;
  double v = 1;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) t.at(k, d) = v++;  // 1..15, distinct
  v = 1;
  for (PartKind k : kPartKinds) {
    for (Dir d : kPartDirs) EXPECT_EQ(t.at(k, d), v++) << part_kind_str(k) << dir_str(d);
    const PartTable& c = t;
    EXPECT_EQ(c.at(k, Dir::kB), c.at(k, Dir::kI) + c.at(k, Dir::kW));
    EXPECT_EQ(c.total(k), c.at(k, Dir::kF) + c.at(k, Dir::kI) + c.at(k, Dir::kW));
  }
  EXPECT_EQ(t.at(PartKind::kAttn, Dir::kI), 8);  // the third kind's second direction
  t *= 2;
  EXPECT_EQ(t.at(PartKind::kHead, Dir::kW), 30);
  EXPECT_THROW(t.at(PartKind::kPre, Dir::kB) = 1, Error);  // set I and W instead
}

}  // namespace
}  // namespace hp
