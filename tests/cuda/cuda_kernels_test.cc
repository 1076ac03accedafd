// The CUDA kernels against the reference backend (its typed methods on host copies), in fp32 and
// bf16, over odd sizes (rows that are no multiple of a block, dims like 37, 72, 200, 1001) and
// misaligned views, with outputs poisoned with NaN first so an unwritten element fails.
//
// Tolerances are max|got - ref| / max|ref| over an output. fp32: elementwise kernels (an exp, a
// division, a few products) stay within a few ulps, 4e-6; row reductions over <= 4104 values and
// sums over <= 130 rows, 5e-5 (errors grow like sqrt(n) * 6e-8). bf16 outputs add one rounding
// (2^-8 relative, CudaTypedTest::tol); bf16 inputs are rounded on the host first, so the
// reference sees the same values. Kernels whose arithmetic is the reference's exact sequence of
// f32 operations are compared bit for bit: rope (same angle formula, same rounding steps),
// embedding forward (a copy) and backward (the same additions in the same order), convert.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/reference/reference_math.h"

namespace hp::cudatest {
namespace {

class CudaKernelsTest : public CudaTypedTest {
 protected:
  ReferenceMath<double> ref_;
  ReferenceMath<float> ref_f_;
};

INSTANTIATE_TEST_SUITE_P(Types, CudaKernelsTest, ::testing::Values(DType::kF32, DType::kBF16),
                         type_param_name);

const std::vector<std::pair<int64_t, int64_t>> kRowShapes = {{1, 72},   {7, 200},  {67, 256},
                                                             {130, 37}, {3, 4104}, {5, 1001}};

TEST_P(CudaKernelsTest, RmsNormForward) {
  for (const auto& [rows, dim] : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim);
    const FVec x = rounded(randn(rows * dim), t());
    const FVec g = rounded(uniform(dim, 0.5f, 1.5f), t());
    Buffer dx = to_dev(x, t()), dg = to_dev(g, t());
    Buffer y = poisoned(t(), rows * dim), rstd = poisoned(DType::kF32, rows);
    k_->rmsnorm_forward(y.ptr(), rstd.ptr(), dx.ptr(), dg.ptr(), rows, dim, 1e-5);
    DVec ry(rows * dim), rr(rows);
    ref_.rmsnorm_forward(ry.data(), rr.data(), to_d(x).data(), to_d(g).data(), rows, dim, 1e-5);
    EXPECT_TRUE(near(from_dev(y), ry, tol(5e-5), "y"));
    EXPECT_TRUE(near(from_dev(rstd), rr, 5e-5, "rstd"));
  }
}

// dx overwritten and accumulated; dg accumulated into its old value; twice for determinism.
TEST_P(CudaKernelsTest, RmsNormBackward) {
  for (const auto& [rows, dim] : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim);
    const FVec x = rounded(randn(rows * dim), t()), dy = rounded(randn(rows * dim), t());
    const FVec g = rounded(uniform(dim, 0.5f, 1.5f), t());
    FVec rstd(rows);
    for (int64_t r = 0; r < rows; ++r) rstd[r] = uniform(1, 0.5f, 2.0f)[0];
    const FVec dg0 = randn(dim), dx0 = rounded(randn(rows * dim), t());
    Buffer bx = to_dev(x, t()), bdy = to_dev(dy, t()), bg = to_dev(g, t());
    Buffer brstd = to_dev(rstd, DType::kF32);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      FVec first_dx, first_dg;
      for (int run = 0; run < 2; ++run) {
        Buffer bdx = accumulate ? to_dev(dx0, t()) : poisoned(t(), rows * dim);
        Buffer bdg = to_dev(dg0, DType::kF32);
        k_->rmsnorm_backward(bdx.ptr(), bdg.ptr(), bdy.ptr(), bx.ptr(), bg.ptr(), brstd.ptr(), rows,
                             dim, accumulate);
        const FVec got_dx = from_dev(bdx), got_dg = from_dev(bdg);
        if (run == 0) {
          DVec rdx = accumulate ? to_d(dx0) : DVec(rows * dim, 0.0), rdg = to_d(dg0);
          ref_.rmsnorm_backward(rdx.data(), rdg.data(), to_d(dy).data(), to_d(x).data(),
                                to_d(g).data(), to_d(rstd).data(), rows, dim, accumulate);
          EXPECT_TRUE(near(got_dx, rdx, tol(5e-5), "dx"));
          EXPECT_TRUE(near(got_dg, rdg, 5e-5, "dg"));
          first_dx = got_dx;
          first_dg = got_dg;
        } else {
          EXPECT_TRUE(same_bits(got_dx, first_dx, "dx of a second run"));
          EXPECT_TRUE(same_bits(got_dg, first_dg, "dg of a second run"));
        }
      }
    }
  }
}

struct RopeCase {
  int64_t batch, seq, heads, head_dim, pad;
  double theta;
};

// fp32 must equal the reference bit for bit (same angles, same rounding steps); the second and
// fourth cases grow the device's angle tables; padding columns stay untouched.
TEST_P(CudaKernelsTest, RopeForwardAndInverse) {
  const std::vector<RopeCase> cases = {{2, 37, 3, 72, 5, 1e4},
                                       {1, 4099, 2, 128, 0, 5e5},
                                       {3, 5, 1, 2, 1, 1e4},
                                       {1, 300, 3, 72, 5, 1e4}};
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "batch=" << c.batch << " seq=" << c.seq
                                      << " heads=" << c.heads << " head_dim=" << c.head_dim);
    const int64_t rows = c.batch * c.seq, width = c.heads * c.head_dim, ld = width + c.pad;
    const FVec x = rounded(randn(rows * ld), t());
    Buffer bx = to_dev(x, t());
    FVec input = x;
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(inverse ? "inverse" : "forward");
      k_->rope(bx.ptr(), rows, ld, c.seq, c.heads, c.head_dim, c.theta, inverse);
      const FVec got = from_dev(bx);
      FVec want = input;
      ref_f_.rope(want.data(), rows, ld, c.seq, c.heads, c.head_dim, c.theta, inverse);
      if (t() == DType::kF32) {
        EXPECT_TRUE(same_bits(got, want, "rope (fp32, bitwise)"));
      } else {
        EXPECT_TRUE(near(got, to_d(want), tol(1e-6), "rope", rows, width, ld));
      }
      EXPECT_TRUE(padding_kept(got, input, rows, width, ld, "rope"));
      input = got;  // the inverse starts from what the device holds
    }
  }
}

TEST_P(CudaKernelsTest, SwiGluForwardBackward) {
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{4099}, int64_t{65536}}) {
    for (int64_t off : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << off);
      const FVec g = rounded(randn(n + off, 2.0f), t()), u = rounded(randn(n + off), t());
      const FVec dh = rounded(randn(n + off), t());
      Buffer bg = to_dev(g, t()), bu = to_dev(u, t()), bdh = to_dev(dh, t());
      Buffer h = poisoned(t(), n + off), dg = poisoned(t(), n + off), du = poisoned(t(), n + off);
      k_->swiglu_forward(h.ptr().at(off), bg.ptr().at(off), bu.ptr().at(off), n);
      k_->swiglu_backward(dg.ptr().at(off), du.ptr().at(off), bdh.ptr().at(off), bg.ptr().at(off),
                          bu.ptr().at(off), n);
      const DVec gd(g.begin() + off, g.end()), ud(u.begin() + off, u.end());
      const DVec dhd(dh.begin() + off, dh.end());
      DVec rh(n), rdg(n), rdu(n);
      ref_.swiglu_forward(rh.data(), gd.data(), ud.data(), n);
      ref_.swiglu_backward(rdg.data(), rdu.data(), dhd.data(), gd.data(), ud.data(), n);
      auto view = [&](const Buffer& b) {
        const FVec all = from_dev(b);
        if (off > 0) {
          EXPECT_TRUE(std::isnan(all[0])) << "wrote before its start";
        }
        return FVec(all.begin() + off, all.end());
      };
      EXPECT_TRUE(near(view(h), rh, tol(4e-6), "h"));
      EXPECT_TRUE(near(view(dg), rdg, tol(4e-6), "dg"));
      EXPECT_TRUE(near(view(du), rdu, tol(4e-6), "du"));
    }
  }
}

struct CeCase {
  int64_t rows, vocab, pad;
};

// Logits in the compute type and, for bf16, also f32 (an f32 head); forward twice (bitwise
// equal: fixed-order sums); backward into fresh and into the logits themselves (in place).
TEST_P(CudaKernelsTest, CrossEntropy) {
  const std::vector<CeCase> cases = {
      {1, 1, 0}, {5, 200, 0}, {67, 1000, 3}, {3, 50257, 0}, {2, 256, 8}};
  std::vector<DType> logit_types = {t()};
  if (t() == DType::kBF16) logit_types.push_back(DType::kF32);
  for (DType lt : logit_types) {
    for (const CeCase& c : cases) {
      SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " vocab=" << c.vocab
                                        << " pad=" << c.pad << " logits " << dtype_name(lt));
      const int64_t ld = c.vocab + c.pad;
      const FVec logits = rounded(randn(c.rows * ld, 3.0f), lt);
      const std::vector<int32_t> targets = tokens(c.rows, static_cast<int32_t>(c.vocab));
      Buffer bl = to_dev(logits, lt), bt = to_dev(targets);
      DVec lse_ref(c.rows);
      const double total = ref_.cross_entropy_forward(to_d(logits).data(), ld, targets.data(),
                                                      c.rows, c.vocab, lse_ref.data());
      Buffer lse = poisoned(DType::kF32, c.rows);
      FVec first_lse;
      double first_loss = 0;
      for (int run = 0; run < 2; ++run) {
        Buffer blse = poisoned(DType::kF32, c.rows), loss = to_dev(FVec{1.5f}, DType::kF64);
        k_->cross_entropy_forward(bl.ptr(), ld, ints(bt), c.rows, c.vocab, blse.ptr(), loss.ptr());
        const FVec got_lse = from_dev(blse);
        const double got_loss = f64_from_dev(loss);
        if (run == 0) {
          EXPECT_TRUE(near(got_lse, lse_ref, 1e-5, "lse"));
          EXPECT_NEAR(got_loss, 1.5 + total, 1e-5 * (1.5 + std::abs(total))) << "loss_sum";
          first_lse = got_lse;
          first_loss = got_loss;
          lse = std::move(blse);
        } else {
          EXPECT_TRUE(same_bits(got_lse, first_lse, "lse of a second run"));
          EXPECT_EQ(got_loss, first_loss) << "loss_sum of a second run";
        }
      }
      const double scale = 0.37;
      DVec rdl(c.rows * ld, 0.0);
      ref_.cross_entropy_backward(rdl.data(), to_d(logits).data(), ld, lse_ref.data(),
                                  targets.data(), c.rows, c.vocab, scale);
      const FVec poison(c.rows * ld, std::nanf(""));
      Buffer dl = poisoned(t(), c.rows * ld);
      k_->cross_entropy_backward(dl.ptr(), bl.ptr(), ld, lse.ptr(), ints(bt), c.rows, c.vocab,
                                 scale);
      const FVec got = from_dev(dl);
      EXPECT_TRUE(near(got, rdl, tol(1e-5), "dlogits", c.rows, c.vocab, ld));
      EXPECT_TRUE(padding_kept(got, poison, c.rows, c.vocab, ld, "dlogits"));
      if (lt == t()) {
        k_->cross_entropy_backward(bl.ptr(), bl.ptr(), ld, lse.ptr(), ints(bt), c.rows, c.vocab,
                                   scale);
        EXPECT_TRUE(same_bits(from_dev(bl), got, "in-place dlogits"));
      }
    }
  }
}

TEST_P(CudaKernelsTest, Embedding) {
  const std::vector<std::array<int64_t, 3>> cases = {
      {1, 5, 72}, {67, 13, 200}, {1000, 50, 37}, {4096, 300, 256}, {3000, 7, 1001}};
  for (const auto& [n, vocab, dim] : cases) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " vocab=" << vocab << " dim=" << dim);
    const FVec table = rounded(randn(vocab * dim), t());
    const std::vector<int32_t> toks = tokens(n, static_cast<int32_t>(vocab));
    Buffer btab = to_dev(table, t()), btok = to_dev(toks);
    Buffer x = poisoned(t(), n * dim);
    k_->embedding_forward(x.ptr(), ints(btok), btab.ptr(), n, dim);
    FVec want(n * dim);
    ref_f_.embedding_forward(want.data(), toks.data(), table.data(), n, dim);
    EXPECT_TRUE(same_bits(from_dev(x), want, "embedding_forward"));

    // Backward: the reference's additions in the reference's order, so bitwise equal (f32).
    const FVec dx = rounded(randn(n * dim), t()), dtable0 = randn(vocab * dim);
    Buffer bdx = to_dev(dx, t()), bdt = to_dev(dtable0, DType::kF32);
    k_->embedding_backward(bdt.ptr(), ints(btok), bdx.ptr(), n, dim);
    FVec want_dt = dtable0;
    ref_f_.embedding_backward(want_dt.data(), toks.data(), dx.data(), n, dim);
    EXPECT_TRUE(same_bits(from_dev(bdt), want_dt, "embedding_backward"));
  }
}

TEST_P(CudaKernelsTest, Axpy) {
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{65541}}) {
    for (int64_t off : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << off);
      const FVec x = rounded(randn(n + off), t()), y = rounded(randn(n + off), t());
      Buffer bx = to_dev(x, t()), by = to_dev(y, t());
      k_->axpy(by.ptr().at(off), bx.ptr().at(off), -0.3, n);
      DVec ry(y.begin() + off, y.end());
      const DVec xd(x.begin() + off, x.end());
      ref_.axpy(ry.data(), xd.data(), -0.3, n);
      const FVec got = from_dev(by);
      if (off > 0) {
        EXPECT_EQ(bits(got[0]), bits(y[0])) << "wrote before its start";
      }
      EXPECT_TRUE(near(FVec(got.begin() + off, got.end()), ry, tol(4e-6), "y"));
    }
  }
}

TEST_P(CudaKernelsTest, SumSquares) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
    for (int64_t off : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << off);
      const FVec x = rounded(randn(n + off), t());
      Buffer bx = to_dev(x, t());
      const double got = k_->sum_squares(bx.ptr().at(off), n);
      long double want = 0;
      for (int64_t i = off; i < n + off; ++i) want += static_cast<long double>(x[i]) * x[i];
      EXPECT_NEAR(got, static_cast<double>(want), 1e-12 * static_cast<double>(want));
      EXPECT_EQ(k_->sum_squares(bx.ptr().at(off), n), got) << "a second run differs";
    }
  }
  EXPECT_EQ(k_->sum_squares(poisoned(t(), 4).ptr(), 0), 0.0);
}

}  // namespace
}  // namespace hp::cudatest
