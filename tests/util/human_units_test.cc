// human_bytes / human_seconds: the unit each magnitude picks and the digits it keeps.
#include "util/human_units.h"

#include <gtest/gtest.h>

namespace hp {
namespace {

TEST(HumanUnits, BytesPickTheLargestBinaryUnitBelow1024) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1.00 KiB");
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
  // TiB is the largest unit: 2048 TiB stays in TiB.
  EXPECT_EQ(human_bytes(2048.0 * 1024 * 1024 * 1024 * 1024), "2048.00 TiB");
  EXPECT_EQ(human_bytes(-2048), "-2.00 KiB");
}

TEST(HumanUnits, SecondsPickSecondsMillisecondsOrMicroseconds) {
  EXPECT_EQ(human_seconds(1.5), "1.500 s");
  EXPECT_EQ(human_seconds(1), "1.000 s");
  EXPECT_EQ(human_seconds(0.0456), "45.600 ms");
  EXPECT_EQ(human_seconds(0.001), "1.000 ms");
  EXPECT_EQ(human_seconds(0.000789), "789.0 us");
  EXPECT_EQ(human_seconds(0), "0.0 us");
}

}  // namespace
}  // namespace hp
