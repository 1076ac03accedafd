// The CPU bf16 GEMM (bf16_gemm.h, oneDNN) against the reference kernels run in double. Inputs are
// drawn in f32 and rounded to bf16 first, and the reference reads those same rounded values, so
// what is measured is the GEMM's own error. Products of bf16 values are exact in f32; K <= 300
// f32 additions: 2e-5 into an f32 C, plus u = 2^-8 (one rounding) into a bf16 C, as
// max|got - ref| / max|ref|. Skipped on a build without oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/dtype.h"
#include "kernels/reference/reference_kernels.h"
#include "util/error.h"

namespace hp {
namespace {

using FVec = std::vector<float>;
using DVec = std::vector<double>;
using BVec = std::vector<bf16>;
constexpr double kU = 1.0 / 256;  // bf16 unit roundoff (8-bit significand)

// n values ~ N(0, scale^2) rounded to bf16, with the same values as doubles.
struct Data {
  BVec b;
  DVec d;
};
Data randb(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Data out{BVec(n), DVec(n)};
  for (size_t i = 0; i < n; ++i) {
    out.b[i] = to_bf16(dist(gen));
    out.d[i] = to_float(out.b[i]);
  }
  return out;
}
template <typename T>
double val(const T& x) {
  if constexpr (std::is_same_v<T, bf16>) return to_float(x);
  else return static_cast<double>(x);
}

// max|got - ref| / max(max|ref|, floor) over n elements in rows of `width` values `stride` apart.
template <typename T>
double rel_err(const T* got, const double* ref, size_t n, size_t stride = 0, size_t width = 0,
               double floor = 1e-30) {
  if (width == 0) width = stride = n;
  double worst = 0, mag = floor;
  for (size_t i = 0; i < n; ++i) {
    const size_t at = (i / width) * stride + i % width;
    worst = std::max(worst, std::abs(val(got[at]) - ref[at]));
    mag = std::max(mag, std::abs(ref[at]));
  }
  return worst / mag;
}
template <typename T>
double rel_err(const std::vector<T>& got, const DVec& ref) {
  return rel_err(got.data(), ref.data(), got.size());
}
// The largest per-element error in units of that element's own magnitude plus abs_floor.
template <typename T>
double elem_err(const std::vector<T>& got, const DVec& ref, double abs_floor) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(val(got[i]) - ref[i]) / (std::abs(ref[i]) + abs_floor));
  return worst;
}
bool same_bits(const BVec& a, const BVec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 2 * a.size()) == 0;
}

// ------------------------------------------------------------------------------------------------
// GEMM (oneDNN)

class Bf16GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::Bf16Gemm::available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  }
};

// One GEMM into C of type TC, against the double reference on the same bf16 inputs.
template <typename TC>
void check_gemm(cpu::Bf16Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                float beta, int64_t pad, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                    << " K=" << K << " alpha=" << alpha << " beta=" << beta
                                    << " C=" << (std::is_same_v<TC, float> ? "f32" : "bf16"));
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const Data A = randb((ta ? K : M) * lda, seed), B = randb((tb ? N : K) * ldb, seed + 1);
  const Data C0 = randb(M * ldc, seed + 2);
  std::vector<TC> C(M * ldc);
  for (int64_t i = 0; i < M * ldc; ++i) {
    if constexpr (std::is_same_v<TC, float>) C[i] = static_cast<float>(C0.d[i]);
    else C[i] = C0.b[i];
  }
  if (beta == 0.0f)  // beta == 0: C is not read, so NaN there must not leak into the result
    for (int64_t i = 0; i < M * ldc; ++i) {
      if constexpr (std::is_same_v<TC, float>) C[i] = std::numeric_limits<float>::quiet_NaN();
      else C[i] = to_bf16(std::numeric_limits<float>::quiet_NaN());
    }
  const std::vector<TC> C_in = C;
  g.run(ta, tb, M, N, K, alpha, A.b.data(), lda, B.b.data(), ldb, beta, C.data(), ldc);
  DVec R = C0.d;
  ReferenceKernels<double>().gemm(ta, tb, M, N, K, alpha, A.d.data(), lda, B.d.data(), ldb, beta,
                                  R.data(), ldc);
  const double tol = std::is_same_v<TC, float> ? 2e-5 : kU + 2e-5;
  EXPECT_LT(rel_err(C.data(), R.data(), M * N, ldc, N), tol);
  for (int64_t i = 0; i < M; ++i)  // padding columns are left alone
    for (int64_t j = N; j < ldc; ++j)
      ASSERT_EQ(std::memcmp(&C[i * ldc + j], &C_in[i * ldc + j], sizeof(TC)), 0);
}

TEST_F(Bf16GemmTest, AllTransposesTypesAlphasBetasOddSizes) {
  cpu::Bf16Gemm g(1);
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (float alpha : {1.0f, -0.75f}) {
          check_gemm<bf16>(g, ta, tb, 37, 29, 13, alpha, beta, 3, seed++);
          check_gemm<float>(g, ta, tb, 37, 29, 13, alpha, beta, 0, seed++);
          check_gemm<float>(g, ta, tb, 67, 130, 257, alpha, beta, 5, seed++);
          if (HasFailure()) return;
        }
}

// The model's shapes (dense strides, alpha 1, beta 0 or 1): weight GEMMs into bf16 activations
// and weight gradients accumulating into f32, on 1 and 2 threads.
TEST_F(Bf16GemmTest, ModelShapesOnOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    cpu::Bf16Gemm g(threads);
    check_gemm<bf16>(g, false, true, 300, 768, 256, 1.0f, 0.0f, 0, 11);   // x W^T
    check_gemm<bf16>(g, false, false, 300, 256, 768, 1.0f, 1.0f, 0, 12);  // dy W, += residual
    check_gemm<float>(g, true, false, 768, 256, 300, 1.0f, 1.0f, 0, 13);  // dW += dy^T x
  }
}

TEST_F(Bf16GemmTest, RepeatedShapesReusePrimitives) {
  cpu::Bf16Gemm g(1);
  const Data A = randb(64 * 48, 1), B = randb(48 * 32, 2);
  BVec C(64 * 32);
  FVec Cf(64 * 32, 0.0f);
  g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 0.0f, C.data(), 32);
  g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 1.0f, Cf.data(), 32);
  EXPECT_EQ(g.primitives_built(), 2);
  const BVec first = C;
  for (int i = 0; i < 5; ++i) {
    g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 0.0f, C.data(), 32);
    g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 1.0f, Cf.data(), 32);
  }
  EXPECT_EQ(g.primitives_built(), 2) << "a repeated shape built a new primitive";
  EXPECT_TRUE(same_bits(C, first));
  // Accumulating 6 times into Cf gives 6 x the product.
  DVec R(64 * 32, 0.0);
  ReferenceKernels<double>().gemm(false, false, 64, 32, 48, 6.0, A.d.data(), 48, B.d.data(), 32,
                                  0.0, R.data(), 32);
  EXPECT_LT(rel_err(Cf, R), 2e-5);
}

TEST_F(Bf16GemmTest, EmptyAndZeroDepth) {
  cpu::Bf16Gemm g(1);
  BVec C(6, to_bf16(2.0f));
  const BVec A(6), B(6);
  g.run(false, false, 0, 3, 2, 1.0f, A.data(), 2, B.data(), 3, 0.0f, C.data(), 3);  // M = 0
  EXPECT_EQ(to_float(C[0]), 2.0f);
  g.run(false, false, 2, 3, 0, 1.0f, A.data(), 1, B.data(), 3, 0.5f, C.data(), 3);  // K = 0
  for (const bf16& c : C) EXPECT_EQ(to_float(c), 1.0f);
  g.run(false, false, 2, 3, 0, 1.0f, A.data(), 1, B.data(), 3, 0.0f, C.data(), 3);
  for (const bf16& c : C) EXPECT_EQ(to_float(c), 0.0f);
}

TEST_F(Bf16GemmTest, RejectsSmallLeadingDimension) {
  cpu::Bf16Gemm g(1);
  BVec A(64), B(64), C(64);
  EXPECT_THROW(g.run(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
               Error);
  EXPECT_THROW(g.run(false, true, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 2),
               Error);
}

}  // namespace
}  // namespace hp
