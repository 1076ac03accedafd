// The two vector exponentials of kernels/cpu/simd.h (AVX-512 copy) against double std::exp on
// dense grids: vexp (the elementwise kernels') within 1.3 ulp over [-87, 88]
// and exactly 0 below -87.34; vexp_softmax (the attention kernels') within 3.5e-7 + 1e-7 |x|
// relative (the polynomial's error plus the rounding of x log2(e), which grows with |x|) for
// normal results, the same plus one subnormal step below them, and exactly 0 at -inf and below
// -104 (past f32's smallest subnormal).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace hp::test {
void simd_exp_avx512(const float* x, float* y, int64_t n, bool softmax);
}

namespace {

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// lo, lo + step, ... up to hi (f32 values), padded to a multiple of 16 with hi.
std::vector<float> grid(double lo, double hi, int64_t n) {
  std::vector<float> x;
  for (int64_t i = 0; i < n; ++i) x.push_back(static_cast<float>(lo + (hi - lo) * i / (n - 1)));
  while (x.size() % 16) x.push_back(static_cast<float>(hi));
  return x;
}

std::vector<float> run(const std::vector<float>& x, bool softmax) {
  std::vector<float> y(x.size());
  hp::test::simd_exp_avx512(x.data(), y.data(), static_cast<int64_t>(x.size()), softmax);
  return y;
}

TEST(SimdExp, VexpWithinOneAndAThirdUlp) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512: the AVX2 copy runs instead";
  const std::vector<float> x = grid(-87.0, 88.0, 1 << 21);
  const std::vector<float> y = run(x, false);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(static_cast<double>(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
    worst = std::max(worst, std::abs(y[i] - e) / ulp);
  }
  EXPECT_LT(worst, 1.3) << "worst error in ulp";
  const std::vector<float> below{-87.34f, -90.0f, -1e4f, -std::numeric_limits<float>::infinity()};
  std::vector<float> b = below;
  b.resize(16, -100.0f);
  for (float v : run(b, false)) EXPECT_EQ(v, 0.0f);
}

TEST(SimdExp, VexpSoftmaxRelativeErrorAndUnderflow) {
  if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512: the AVX2 copy uses vexp";
  const std::vector<float> x = grid(-110.0, 88.0, 1 << 22);
  const std::vector<float> y = run(x, true);
  const double smallest_normal = std::numeric_limits<float>::min();
  const double subnormal_step = std::numeric_limits<float>::denorm_min();
  double worst_rel = 0, worst_sub = 0;  // as fractions of the allowed error
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(static_cast<double>(x[i]));
    const double rel = 3.5e-7 + 1e-7 * std::abs(x[i]);
    if (e >= smallest_normal) {
      worst_rel = std::max(worst_rel, std::abs(y[i] - e) / (rel * e));
    } else {
      worst_sub = std::max(worst_sub, std::abs(y[i] - e) / (rel * e + subnormal_step));
      if (x[i] < -104.0f) {
        ASSERT_EQ(y[i], 0.0f) << "x = " << x[i];
      }
    }
  }
  EXPECT_LE(worst_rel, 1.0) << "worst error of normal results, as a fraction of the bound";
  EXPECT_LE(worst_sub, 1.0) << "worst error of subnormal results, as a fraction of the bound";
  std::vector<float> edge(16, -std::numeric_limits<float>::infinity());
  edge[1] = 0.0f;
  edge[2] = -1e30f;
  const std::vector<float> r = run(edge, true);
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_EQ(r[1], 1.0f);
  EXPECT_EQ(r[2], 0.0f);
}

}  // namespace
