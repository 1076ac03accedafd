// nice_ticks / tick_label: steps of 1, 2 or 5 x 10^k, ticks that are exact multiples inside the
// range, about the count asked for, and labels without binary noise.
#include "util/nice_ticks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "util/error.h"

namespace hp {
namespace {

std::vector<std::string> labels(const NiceTicks& t) {
  std::vector<std::string> out;
  for (double v : t.values) out.push_back(t.label(v));
  return out;
}

// Everything nice_ticks promises, for one call.
void check_ticks(double lo, double hi, int target) {
  SCOPED_TRACE(testing::Message() << "[" << lo << ", " << hi << "] target " << target);
  const NiceTicks t = nice_ticks(lo, hi, target);
  const double a = std::min(lo, hi), b = std::max(lo, hi);
  ASSERT_TRUE(t.mantissa == 1 || t.mantissa == 2 || t.mantissa == 5) << t.mantissa;
  EXPECT_NEAR(t.step, t.mantissa * std::pow(10.0, t.exponent), t.step * 1e-12);
  ASSERT_GE(static_cast<int>(t.values.size()), std::min(std::max(target, 1), 2));
  // The rounding keeps the step at least raw / 1.5, so there are at most 1.5 (target - 1) + 1
  // ticks, plus what a smaller step adds when fewer than two fit.
  EXPECT_LE(static_cast<double>(t.values.size()), std::max(1.5 * (target - 1) + 1, 6.0) + 1e-9);
  const double tol = t.step * 1e-9;
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double v = t.values[i];
    EXPECT_GE(v, a - tol);
    EXPECT_LE(v, b + tol);
    const double k = v / t.step;
    EXPECT_NEAR(k, std::round(k), 1e-9) << v << " is no multiple of " << t.step;
    if (i > 0) {
      EXPECT_NEAR(v - t.values[i - 1], t.step, tol * 10);
    }
    // The label reads back as the value and is short (no 0.30000000000000004).
    const std::string s = t.label(v);
    EXPECT_NEAR(std::stod(s), v, t.step * 1e-9) << s;
    EXPECT_LE(s.size(), 20u) << s;
    if (std::abs(v) < 1e12 && t.step >= 1e-6) {
      EXPECT_EQ(s.find('e'), std::string::npos) << s;
    }
  }
  // The rounded-out ends hold the range, are multiples, and stay within a step of it.
  EXPECT_LE(t.lo, a + tol);
  EXPECT_GE(t.hi, b - tol);
  EXPECT_GT(t.lo, a - t.step - tol);
  EXPECT_LT(t.hi, b + t.step + tol);
  EXPECT_NEAR(t.lo / t.step, std::round(t.lo / t.step), 1e-9);
  EXPECT_NEAR(t.hi / t.step, std::round(t.hi / t.step), 1e-9);
}

TEST(NiceTicks, StepsOfOneTwoOrFive) {
  NiceTicks t = nice_ticks(0, 10, 6);
  EXPECT_EQ(t.step, 2);
  EXPECT_EQ(t.values, (std::vector<double>{0, 2, 4, 6, 8, 10}));
  t = nice_ticks(0, 100, 3);
  EXPECT_EQ(t.step, 50);
  EXPECT_EQ(t.values, (std::vector<double>{0, 50, 100}));
  t = nice_ticks(3, 97, 5);  // raw step 23.5 rounds to 20
  EXPECT_EQ(t.step, 20);
  EXPECT_EQ(t.values, (std::vector<double>{20, 40, 60, 80}));
  EXPECT_EQ(t.lo, 0);
  EXPECT_EQ(t.hi, 100);
}

TEST(NiceTicks, TenthsAreTheDecimalsNotTheirBinaryNeighbours) {
  const NiceTicks t = nice_ticks(0, 1, 11);
  EXPECT_EQ(t.step, 0.1);
  ASSERT_EQ(t.values.size(), 11u);
  for (int i = 0; i <= 10; ++i) EXPECT_EQ(t.values[i], i / 10.0) << i;  // 3 * 0.1 != 0.3
  EXPECT_EQ(t.label(t.values[3]), "0.3");
  EXPECT_EQ(t.label(t.values[10]), "1.0");
  EXPECT_EQ(t.label(t.values[0]), "0");
  // Far from zero the small digits still print exactly.
  const NiceTicks f = nice_ticks(1000, 1000.003, 4);
  EXPECT_EQ(f.step, 0.001);
  EXPECT_EQ(labels(f), (std::vector<std::string>{"1000.000", "1000.001", "1000.002", "1000.003"}));
}

TEST(NiceTicks, RangesCrossingZero) {
  const NiceTicks t = nice_ticks(-1, 1, 5);
  EXPECT_EQ(labels(t), (std::vector<std::string>{"-1.0", "-0.5", "0", "0.5", "1.0"}));
  const NiceTicks u = nice_ticks(-3.7, 12.2, 8);
  EXPECT_EQ(u.step, 2);
  EXPECT_EQ(u.values.front(), -2);
  EXPECT_EQ(u.values.back(), 12);
  EXPECT_EQ(u.lo, -4);
  for (double v : u.values) EXPECT_FALSE(std::signbit(v) && v == 0) << "a negative zero tick";
  check_ticks(-0.003, 0.0071, 6);
  check_ticks(-5e9, 2e9, 4);
}

TEST(NiceTicks, TinyAndHugeSpans) {
  // Plain decimals down to a step of 1e-6: no "1e-05".
  const NiceTicks t = nice_ticks(0.000012, 0.000057, 5);
  EXPECT_EQ(t.step, 1e-5);
  EXPECT_EQ(labels(t), (std::vector<std::string>{"0.00002", "0.00003", "0.00004", "0.00005"}));
  // Below that, scientific notation with only the digits the step needs.
  const NiceTicks n = nice_ticks(1e-9, 5e-9, 5);
  EXPECT_EQ(labels(n), (std::vector<std::string>{"1e-09", "2e-09", "3e-09", "4e-09", "5e-09"}));
  const NiceTicks h = nice_ticks(0, 3e15, 4);
  EXPECT_EQ(labels(h), (std::vector<std::string>{"0", "1e+15", "2e+15", "3e+15"}));
  for (double scale : {1e-12, 1e-7, 1e-3, 1.0, 1e4, 1e9, 1e200}) {
    check_ticks(0, 7.3 * scale, 10);
    check_ticks(1.1 * scale, 1.7 * scale, 5);
    check_ticks(-2.2 * scale, 9.9 * scale, 3);
  }
}

TEST(NiceTicks, AZeroWidthRangeIsWidenedAroundItsValue) {
  for (double v : {2.5, 0.0, -7.0, 1234.5678, 3e-8}) {
    for (int target : {1, 2, 5}) {
      SCOPED_TRACE(testing::Message() << v << " target " << target);
      const NiceTicks t = nice_ticks(v, v, target);
      ASSERT_FALSE(t.values.empty());
      EXPECT_GE(static_cast<int>(t.values.size()), std::min(target, 2));
      EXPECT_LE(t.lo, v);
      EXPECT_GE(t.hi, v);
      EXPECT_LT(t.lo, t.hi);
      const double width = v == 0 ? 1 : std::abs(v);
      for (double x : t.values) EXPECT_LE(std::abs(x - v), width / 2 + t.step * 1e-9);
    }
  }
  const NiceTicks z = nice_ticks(0, 0, 5);  // widened to [-0.5, 0.5]
  EXPECT_EQ(labels(z), (std::vector<std::string>{"-0.4", "-0.2", "0", "0.2", "0.4"}));
}

TEST(NiceTicks, CountOneStillGivesATickInside) {
  // [0.11, 0.14]: the step the rule rounds to (0.05) has no multiple inside; a smaller one does.
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0.11, 0.14}, {0.13, 0.87}, {7, 9},
                                                              {-0.004, -0.001}}) {
    SCOPED_TRACE(testing::Message() << lo << " " << hi);
    const NiceTicks t = nice_ticks(lo, hi, 1);
    ASSERT_GE(t.values.size(), 1u);
    EXPECT_LE(t.values.size(), 3u);
    for (double v : t.values) {
      EXPECT_GE(v, lo - 1e-12);
      EXPECT_LE(v, hi + 1e-12);
    }
  }
  EXPECT_EQ(nice_ticks(0, 10, 0).values, nice_ticks(0, 10, 1).values);  // below 1 counts as 1
}

TEST(NiceTicks, ManyRangesKeepEveryPromise) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(-10, 10);
  std::uniform_int_distribution<int> exp10(-10, 12), count(1, 15);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, exp10(rng));
    const double lo = mant(rng) * scale, hi = mant(rng) * scale;
    check_ticks(lo, hi, count(rng));
    if (HasFatalFailure()) return;
  }
}

TEST(NiceTicks, MinStepKeepsIntegerAxesWhole) {
  EXPECT_EQ(nice_ticks(1, 4, 10, 1.0).values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(nice_ticks(1, 2, 6, 1.0).values, (std::vector<double>{1, 2}));
  EXPECT_EQ(nice_ticks(1, 1.5, 5, 1.0).values, (std::vector<double>{1}));
  const NiceTicks t = nice_ticks(1, 200, 6, 1.0);
  EXPECT_EQ(t.step, 50);
  EXPECT_EQ(t.values, (std::vector<double>{50, 100, 150, 200}));
  EXPECT_EQ(nice_ticks(0, 7, 10, 3.0).step, 5);  // the smallest nice step at or above 3
}

TEST(NiceTicks, SwappedEndsAndBadInput) {
  EXPECT_EQ(nice_ticks(10, 0, 6).values, nice_ticks(0, 10, 6).values);
  EXPECT_THROW(nice_ticks(0, NAN, 5), Error);
  EXPECT_THROW(nice_ticks(-INFINITY, 1, 5), Error);
  EXPECT_THROW(nice_ticks(-1e308, 1e308, 5), Error);  // the width overflows
  EXPECT_THROW(nice_ticks(0, 1, 5, -1), Error);
}

TEST(NiceTicks, LabelsPrintTheDecimalTheStepImplies) {
  EXPECT_EQ(tick_label(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(tick_label(-0.0, 1), "0");
  EXPECT_EQ(tick_label(1500, 500), "1500");
  EXPECT_EQ(tick_label(2.5, 0.5), "2.5");
  EXPECT_EQ(tick_label(0.00002, 0.00001), "0.00002");
  EXPECT_EQ(tick_label(-0.25, 0.05), "-0.25");
  EXPECT_EQ(tick_label(2.5e-7, 5e-8), "2.5e-07");
  EXPECT_EQ(tick_label(3e-7, 1e-7), "3e-07");
  EXPECT_EQ(tick_label(4e13, 1e13), "4e+13");
}

}  // namespace
}  // namespace hp
