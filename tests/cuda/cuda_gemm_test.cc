// cuBLASLt GEMMs against the reference backend (double) over every transpose combination, odd
// shapes, padded leading dimensions, alpha/beta, and the type combinations the model uses:
// f32 x f32 -> f32, bf16 x bf16 -> bf16, bf16 x bf16 -> f32 (accumulating with beta = 1).
//
// Tolerance, per element of C: with S = |alpha| sum_p |a_ip b_pj| + |beta c_ij| (the reference
// GEMM over absolute values), a sum of K products in f32 is off by at most about K u S
// (u = 2^-24); we allow 2 (K + 4) u S, twice that, for tensor cores that truncate while
// accumulating. TF32 inputs are off by up to 2^-11 each, which leaves that bound for the small K
// here (K <= 72), so the f32 cases also show that no TF32 is used. A bf16 C adds one rounding:
// 2^-8 |c|.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/reference/reference_math.h"

namespace hp::cudatest {
namespace {

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
  double alpha, beta;
  DType ab, c;
  int64_t pad = 0;     // extra columns in every leading dimension
  int64_t offset = 0;  // elements between the allocation and A, B, C (misaligned views)
};

std::string describe(const GemmCase& g) {
  return "M=" + std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
         " ta=" + std::to_string(g.ta) + " tb=" + std::to_string(g.tb) +
         " alpha=" + std::to_string(g.alpha) + " beta=" + std::to_string(g.beta) + " " +
         dtype_name(g.ab) + "->" + dtype_name(g.c) + " pad=" + std::to_string(g.pad) +
         " offset=" + std::to_string(g.offset);
}

class CudaGemmTest : public CudaTest {
 protected:
  // Runs one case; returns C as downloaded (for determinism checks).
  FVec run(const GemmCase& g, bool check = true) {
    SCOPED_TRACE(describe(g));
    const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    const int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
    // Host data starts `offset` elements into each buffer, as a sub-view would.
    const FVec a = rounded(randn(static_cast<size_t>(g.offset + a_rows * lda)), g.ab);
    const FVec b = rounded(randn(static_cast<size_t>(g.offset + b_rows * ldb)), g.ab);
    const FVec c0 = g.beta == 0 ? FVec(static_cast<size_t>(g.offset + g.m * ldc), std::nanf(""))
                                : rounded(randn(static_cast<size_t>(g.offset + g.m * ldc)), g.c);
    Buffer da = to_dev(a, g.ab), db = to_dev(b, g.ab), dc = to_dev(c0, g.c);
    k_->gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, da.ptr().at(g.offset), lda, db.ptr().at(g.offset),
             ldb, g.beta, dc.ptr().at(g.offset), ldc);
    const FVec got_all = from_dev(dc);
    const FVec got(got_all.begin() + g.offset, got_all.end());
    if (!check) return got;

    // Reference: C = alpha A B + beta C in double, and the bound's S from |A| |B| and |C|.
    ReferenceMath<double> ref;
    const DVec ad(a.begin() + g.offset, a.end()), bd(b.begin() + g.offset, b.end());
    DVec cd(c0.begin() + g.offset, c0.end()), sd(cd.size(), 0.0);
    DVec aabs(ad), babs(bd);
    for (double& x : aabs) x = std::abs(x);
    for (double& x : babs) x = std::abs(x);
    ref.gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, ad.data(), lda, bd.data(), ldb, g.beta, cd.data(),
             ldc);
    ref.gemm(g.ta, g.tb, g.m, g.n, g.k, std::abs(g.alpha), aabs.data(), lda, babs.data(), ldb, 0.0,
             sd.data(), ldc);
    const double u = std::ldexp(1.0, -24);
    int64_t reported = 0;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        const size_t at = static_cast<size_t>(i * ldc + j);
        const double c_in = g.beta == 0 ? 0.0 : c0[static_cast<size_t>(g.offset) + at];
        const double s = sd[at] + std::abs(g.beta * c_in);
        double bound = 2.0 * static_cast<double>(g.k + 4) * u * s + 1e-30;
        if (g.c == DType::kBF16) bound += std::ldexp(std::abs(cd[at]) + bound, -8);
        const double e = std::abs(static_cast<double>(got[at]) - cd[at]);
        if (!(e <= bound) && reported++ < 5) {
          ADD_FAILURE() << "C[" << i << "," << j << "] = " << got[at] << ", reference " << cd[at]
                        << ", error " << e << " > bound " << bound << "; seed " << base_seed();
        }
      }
    }
    EXPECT_EQ(reported, 0) << reported << " elements outside the bound";
    const FVec c0_view(c0.begin() + g.offset, c0.end());
    EXPECT_TRUE(padding_kept(got, c0_view, g.m, g.n, ldc, "gemm"));
    return got;
  }
};

const std::vector<std::array<int64_t, 3>> kShapes = {{1, 1, 1},      {7, 5, 3},     {67, 200, 72},
                                                     {128, 256, 64}, {33, 17, 333}, {5, 1000, 16}};

TEST_F(CudaGemmTest, F32AllTransposesOddShapes) {
  for (const auto& [m, n, kk] : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run({ta, tb, m, n, kk, 1.0, 0.0, DType::kF32, DType::kF32, 0});
      run({ta, tb, m, n, kk, 0.75, -0.5, DType::kF32, DType::kF32, 3});
    }
  }
}

TEST_F(CudaGemmTest, Bf16IntoBf16AllTransposesOddShapes) {
  for (const auto& [m, n, kk] : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run({ta, tb, m, n, kk, 1.0, 0.0, DType::kBF16, DType::kBF16, 0});
      run({ta, tb, m, n, kk, 0.75, -0.5, DType::kBF16, DType::kBF16, 8});
    }
  }
}

// Weight gradients: bf16 activations into an f32 gradient, accumulated with beta = 1.
TEST_F(CudaGemmTest, Bf16IntoF32Accumulates) {
  for (const auto& [m, n, kk] : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run({ta, tb, m, n, kk, 1.0, 1.0, DType::kBF16, DType::kF32, 0});
      run({ta, tb, m, n, kk, 1.0, 0.0, DType::kBF16, DType::kF32, 5});
    }
  }
}

// Model-sized products (tensor-core paths for bf16).
TEST_F(CudaGemmTest, LargerShapes) {
  run({false, true, 512, 768, 256, 1.0, 0.0, DType::kF32, DType::kF32});
  run({false, false, 512, 768, 256, 1.0, 0.0, DType::kBF16, DType::kBF16});
  run({true, false, 256, 768, 512, 1.0, 1.0, DType::kBF16, DType::kF32});
}

// Sub-views that are not 16-byte aligned and odd leading dimensions still get an algorithm.
TEST_F(CudaGemmTest, MisalignedViewsAndOddStrides) {
  run({false, false, 9, 13, 11, 1.0, 0.0, DType::kF32, DType::kF32, 1, 1});
  run({true, true, 9, 13, 11, 1.0, 0.5, DType::kF32, DType::kF32, 3, 3});
  run({false, false, 9, 13, 11, 1.0, 0.0, DType::kBF16, DType::kBF16, 1, 1});
  run({false, true, 64, 64, 64, 1.0, 1.0, DType::kBF16, DType::kF32, 1, 3});
  auto* ck = dynamic_cast<cuda::CudaKernels*>(k_);
  ASSERT_NE(ck, nullptr);
  RecordProperty("cublas_fallback_plans", std::to_string(ck->gemm_fallback_plans()) + " of " +
                                              std::to_string(ck->gemm_plans()));
}

TEST_F(CudaGemmTest, EmptyProductScalesC) {
  for (DType c : {DType::kF32, DType::kBF16}) {
    const FVec c0 = rounded(randn(6 * 9), c);
    Buffer a = to_dev(randn(4), c), b = to_dev(randn(4), c), dc = to_dev(c0, c);
    k_->gemm(false, false, 6, 7, 0, 1.0, a.ptr(), 1, b.ptr(), 7, 0.5, dc.ptr(), 9);
    const FVec got = from_dev(dc);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 9; ++j) {
        const float want = j < 7 ? round_to(0.5f * c0[i * 9 + j], c) : c0[i * 9 + j];
        EXPECT_EQ(got[i * 9 + j], want) << i << "," << j;
      }
    }
    Buffer p = poisoned(c, 6 * 7);
    k_->gemm(false, false, 6, 7, 0, 1.0, a.ptr(), 1, b.ptr(), 7, 0.0, p.ptr(), 7);
    for (float x : from_dev(p)) EXPECT_EQ(x, 0.0f) << "beta = 0 must not read C";
  }
}

// The cublasGemmEx path (taken when cuBLASLt has no algorithm), forced for a fresh backend.
TEST_F(CudaGemmTest, CublasFallbackPath) {
  ASSERT_EQ(setenv("HP_CUDA_GEMM", "cublas", 1), 0);
  be_ = make_cuda_backend(0);
  k_ = &be_->kernels();
  unsetenv("HP_CUDA_GEMM");
  run({false, false, 67, 200, 72, 1.0, 0.0, DType::kF32, DType::kF32, 3});
  run({true, true, 33, 17, 333, 0.75, -0.5, DType::kF32, DType::kF32});
  run({false, true, 67, 200, 72, 1.0, 0.0, DType::kBF16, DType::kBF16, 8});
  run({true, false, 64, 48, 40, 1.0, 1.0, DType::kBF16, DType::kF32, 1, 1});
  auto* ck = dynamic_cast<cuda::CudaKernels*>(k_);
  ASSERT_NE(ck, nullptr);
  EXPECT_EQ(ck->gemm_fallback_plans(), ck->gemm_plans());
  EXPECT_EQ(ck->gemm_plans(), 4u);
}

// Same inputs, same bits; repeated shapes reuse their cached plan.
TEST_F(CudaGemmTest, DeterministicAndPlansCached) {
  auto* ck = dynamic_cast<cuda::CudaKernels*>(k_);
  ASSERT_NE(ck, nullptr);
  for (DType t : {DType::kF32, DType::kBF16}) {
    const GemmCase g{false, true, 96, 160, 200, 1.0, 0.0, t, t};
    const uint32_t seed = static_cast<uint32_t>(rng_());
    rng_.seed(seed);
    const FVec first = run(g, false);
    const size_t plans = ck->gemm_plans();
    rng_.seed(seed);
    const FVec second = run(g, false);
    EXPECT_TRUE(same_bits(first, second, std::string("gemm twice, ") + dtype_name(t)));
    EXPECT_EQ(ck->gemm_plans(), plans) << "an identical GEMM built a new plan";
  }
  RecordProperty("cublas_fallback_plans", std::to_string(ck->gemm_fallback_plans()));
}

}  // namespace
}  // namespace hp::cudatest
