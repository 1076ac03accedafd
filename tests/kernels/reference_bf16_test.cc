// The reference kernels in bf16 (float math, one rounding to bf16 per stored element) against
// ReferenceMath<double> on the same bf16-rounded inputs, kernel by kernel; the bf16 conversion; and
// the type checks of the roles (compute / master / stats).
//
// Tolerances, as max|bf16 - f64| / max|f64| over an output: a bf16 output is rounded once to
// nearest, an error of at most 2^-9 (half an ulp, 0.2%) of each element, plus the float math before
// it (~1e-6): we allow 2^-8 = 3.9e-3 (one ulp). f32 outputs of the same kernels (statistics, the
// weight gradients of the master type, GEMMs into f32) carry only float rounding: 1e-5, as the CPU
// kernels' tests allow for row reductions. RMSNorm's dx cancels (r g dy - x r^3/dim sum(...)), so
// its error is measured against the size of the terms, as in cpu_kernels_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference_math.h"
#include "util/error.h"

namespace hp {
namespace {

using BVec = std::vector<bf16>;
using FVec = std::vector<float>;
using DVec = std::vector<double>;

constexpr double kBf16Tol = 1.0 / 256;  // one bf16 ulp, relative
constexpr double kF32Tol = 1e-5;

// Random bf16 values and the same values in double.
struct Data {
  BVec b;
  DVec d;
};
Data randb(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Data out;
  for (size_t i = 0; i < n; ++i) {
    const bf16 x = to_bf16(dist(gen));
    out.b.push_back(x);
    out.d.push_back(to_float(x));
  }
  return out;
}
DVec to_d(const BVec& v) {
  DVec d;
  for (bf16 x : v) d.push_back(to_float(x));
  return d;
}
DVec to_d(const FVec& v) { return DVec(v.begin(), v.end()); }

// max|got - ref| / max|ref| over a rows x cols block with row stride ld.
double rel_err(const DVec& got, const DVec& ref, int64_t rows, int64_t cols, int64_t ld) {
  double worst = 0, mag = 1e-30;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      worst = std::max(worst, std::abs(got[r * ld + c] - ref[r * ld + c]));
      mag = std::max(mag, std::abs(ref[r * ld + c]));
    }
  return worst / mag;
}
double rel_err(const DVec& got, const DVec& ref) {
  return rel_err(got, ref, 1, static_cast<int64_t>(ref.size()), 0);
}

class ReferenceBf16 : public ::testing::Test {
 protected:
  std::unique_ptr<Kernels> k_ = make_reference_kernels();
  ReferenceMath<double> ref_;
};

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(1.0f + 0x1p-8f)), 1.0f);                       // tie: down to even
  EXPECT_EQ(to_float(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);         // tie: up to even
  EXPECT_EQ(to_float(to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // above the tie
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_float(to_bf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(to_bf16(std::numeric_limits<float>::max())),  // past the largest bf16
            std::numeric_limits<float>::infinity());
  // Every bf16 value survives a trip through float.
  for (uint32_t bits = 0; bits < 0x7f80; bits += 7) {
    const bf16 b{static_cast<uint16_t>(bits)};
    EXPECT_EQ(to_bf16(to_float(b)).bits, b.bits);
  }
}

TEST_F(ReferenceBf16, GemmIntoBf16AndF32) {
  const int64_t M = 13, N = 17, K = 70;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
      const Data a = randb((ta ? K : M) * lda, 1), b = randb((tb ? N : K) * ldb, 2);
      const Data c0 = randb(M * ldc, 3);
      for (double beta : {0.0, 1.0}) {
        DVec want = c0.d;
        ref_.gemm(ta, tb, M, N, K, 0.5, a.d.data(), lda, b.d.data(), ldb, beta, want.data(), ldc);
        BVec cb = c0.b;
        k_->gemm(ta, tb, M, N, K, 0.5, a.b.data(), lda, b.b.data(), ldb, beta, cb.data(), ldc);
        EXPECT_LT(rel_err(to_d(cb), want, M, N, ldc), kBf16Tol) << "bf16 C, beta " << beta;
        FVec cf(c0.d.begin(), c0.d.end());  // bf16 inputs into f32 C: weight gradients
        k_->gemm(ta, tb, M, N, K, 0.5, a.b.data(), lda, b.b.data(), ldb, beta, cf.data(), ldc);
        EXPECT_LT(rel_err(to_d(cf), want, M, N, ldc), kF32Tol) << "f32 C, beta " << beta;
        for (int64_t r = 0; r < M; ++r)  // the padding column is not written
          ASSERT_EQ(cb[r * ldc + N].bits, c0.b[r * ldc + N].bits);
      }
    }
}

TEST_F(ReferenceBf16, RmsNormForwardBackward) {
  const int64_t rows = 9, dim = 48;
  const Data x = randb(rows * dim, 4), g = randb(dim, 5), dy = randb(rows * dim, 6);
  const Data dx0 = randb(rows * dim, 7);
  DVec y(rows * dim), rs(rows);
  ref_.rmsnorm_forward(y.data(), rs.data(), x.d.data(), g.d.data(), rows, dim, 1e-5);
  BVec yb(rows * dim);
  FVec rsf(rows);
  k_->rmsnorm_forward(yb.data(), rsf.data(), x.b.data(), g.b.data(), rows, dim, 1e-5);
  EXPECT_LT(rel_err(to_d(yb), y), kBf16Tol);
  EXPECT_LT(rel_err(to_d(rsf), rs), kF32Tol);
  for (bool acc : {false, true}) {
    DVec dx = dx0.d, dg(dim, 0.25);
    ref_.rmsnorm_backward(dx.data(), dg.data(), dy.d.data(), x.d.data(), g.d.data(), rs.data(),
                          rows, dim, acc);
    BVec dxb = dx0.b;
    FVec dgf(dim, 0.25f);
    k_->rmsnorm_backward(dxb.data(), dgf.data(), dy.b.data(), x.b.data(), g.b.data(), rsf.data(),
                         rows, dim, acc);
    double worst = 0, terms = 1e-30;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t i = r * dim + c;
        worst = std::max(worst, std::abs(to_float(dxb[i]) - dx[i]));
        terms = std::max(terms, std::abs(rs[r] * g.d[c] * dy.d[i]) + std::abs(dx[i]));
      }
    EXPECT_LT(worst / terms, kBf16Tol) << "dx, accumulate " << acc;
    EXPECT_LT(rel_err(to_d(dgf), dg), kF32Tol) << "dg (f32 master), accumulate " << acc;
  }
}

TEST_F(ReferenceBf16, RopeLeavesPaddingAlone) {
  const int64_t seq = 11, rows = 2 * seq, heads = 3, hd = 16, ld = heads * hd + 5;
  const Data x = randb(rows * ld, 8);
  for (bool inverse : {false, true}) {
    DVec want = x.d;
    ref_.rope(want.data(), rows, ld, seq, heads, hd, 10000.0, inverse);
    BVec got = x.b;
    k_->rope(got.data(), rows, ld, seq, heads, hd, 10000.0, inverse);
    EXPECT_LT(rel_err(to_d(got), want, rows, heads * hd, ld), kBf16Tol);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = heads * hd; c < ld; ++c)
        ASSERT_EQ(got[r * ld + c].bits, x.b[r * ld + c].bits);
  }
}

TEST_F(ReferenceBf16, AttentionForwardBackward) {
  AttnShape s{2, 19, 4, 2, 16, 0, 0};
  const int64_t qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim, T = s.batch * s.seq;
  s.ld_qkv = qw + 2 * kw + 3;
  s.ld_o = qw + 1;
  const Data qkv = randb(T * s.ld_qkv, 9), dout = randb(T * s.ld_o, 10);
  DVec o(T * s.ld_o, 0.0), lse(s.batch * s.heads * s.seq);
  ref_.attention_forward(s, qkv.d.data(), qkv.d.data() + qw, qkv.d.data() + qw + kw, o.data(),
                         lse.data());
  BVec ob(T * s.ld_o);
  FVec lsef(lse.size());
  k_->attention_forward(s, qkv.b.data(), qkv.b.data() + qw, qkv.b.data() + qw + kw, ob.data(),
                        lsef.data());
  EXPECT_LT(rel_err(to_d(ob), o, T, qw, s.ld_o), kBf16Tol) << "o";
  EXPECT_LT(rel_err(to_d(lsef), lse), kF32Tol) << "lse";
  // The backward from the same bf16 o (the reference recomputes its softmax).
  const DVec od = to_d(ob);
  DVec g(T * s.ld_qkv, 7.0);
  ref_.attention_backward(s, qkv.d.data(), qkv.d.data() + qw, qkv.d.data() + qw + kw, od.data(),
                          dout.d.data(), lse.data(), g.data(), g.data() + qw, g.data() + qw + kw);
  BVec gb(T * s.ld_qkv, to_bf16(7.0f));
  k_->attention_backward(s, qkv.b.data(), qkv.b.data() + qw, qkv.b.data() + qw + kw, ob.data(),
                         dout.b.data(), lsef.data(), gb.data(), gb.data() + qw,
                         gb.data() + qw + kw);
  const DVec gd = to_d(gb);
  EXPECT_LT(rel_err(gd, g, T, qw, s.ld_qkv), kBf16Tol) << "dq";
  EXPECT_LT(
      rel_err(DVec(gd.begin() + qw, gd.end()), DVec(g.begin() + qw, g.end()), T, kw, s.ld_qkv),
      kBf16Tol)
      << "dk";
  EXPECT_LT(rel_err(DVec(gd.begin() + qw + kw, gd.end()), DVec(g.begin() + qw + kw, g.end()), T, kw,
                    s.ld_qkv),
            kBf16Tol)
      << "dv";
  for (int64_t t = 0; t < T; ++t)  // the padding of the QKV gradient rows is left alone
    for (int64_t c = qw + 2 * kw; c < s.ld_qkv; ++c) ASSERT_EQ(gd[t * s.ld_qkv + c], 7.0);
}

TEST_F(ReferenceBf16, SwigluAxpyConvertSumSquares) {
  const int64_t n = 300;
  const Data g = randb(n, 11, 3.0f), u = randb(n, 12), dh = randb(n, 13);
  DVec h(n), dg(n), du(n);
  ref_.swiglu_forward(h.data(), g.d.data(), u.d.data(), n);
  ref_.swiglu_backward(dg.data(), du.data(), dh.d.data(), g.d.data(), u.d.data(), n);
  BVec hb(n), dgb(n), dub(n);
  k_->swiglu_forward(hb.data(), g.b.data(), u.b.data(), n);
  k_->swiglu_backward(dgb.data(), dub.data(), dh.b.data(), g.b.data(), u.b.data(), n);
  EXPECT_LT(rel_err(to_d(hb), h), kBf16Tol);
  EXPECT_LT(rel_err(to_d(dgb), dg), kBf16Tol);
  EXPECT_LT(rel_err(to_d(dub), du), kBf16Tol);

  DVec y = u.d;
  ref_.axpy(y.data(), g.d.data(), -0.75, n);
  BVec yb = u.b;
  k_->axpy(yb.data(), g.b.data(), -0.75, n);
  EXPECT_LT(rel_err(to_d(yb), y), kBf16Tol);
  EXPECT_NEAR(k_->sum_squares(g.b.data(), n), ref_.sum_squares(g.d.data(), n),
              1e-12 * ref_.sum_squares(g.d.data(), n));  // exact products, summed in double

  FVec f(n);
  k_->convert(f.data(), g.b.data(), n);  // bf16 -> f32 is exact
  EXPECT_EQ(to_d(f), g.d);
  FVec wide = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.1f};
  BVec narrow(3);
  k_->convert(narrow.data(), wide.data(), 3);  // f32 -> bf16 rounds to nearest even
  for (int i = 0; i < 3; ++i) EXPECT_EQ(narrow[i].bits, to_bf16(wide[i]).bits);
}

TEST_F(ReferenceBf16, CrossEntropyAndEmbedding) {
  const int64_t rows = 7, vocab = 40, ld = vocab + 2;
  const Data logits = randb(rows * ld, 14, 4.0f);
  std::vector<int32_t> tgt(rows);
  for (int64_t r = 0; r < rows; ++r) tgt[r] = static_cast<int32_t>((r * 13) % vocab);
  DVec lse(rows);
  const double loss =
      ref_.cross_entropy_forward(logits.d.data(), ld, tgt.data(), rows, vocab, lse.data());
  FVec lsef(rows);
  double got = 1.0;  // the kernel adds to it
  k_->cross_entropy_forward(logits.b.data(), ld, tgt.data(), rows, vocab, lsef.data(), &got);
  EXPECT_NEAR(got - 1.0, loss, kF32Tol * loss);  // float math, summed in double
  EXPECT_LT(rel_err(to_d(lsef), lse), kF32Tol);
  DVec dl(rows * ld, 0.0);
  ref_.cross_entropy_backward(dl.data(), logits.d.data(), ld, lse.data(), tgt.data(), rows, vocab,
                              0.5);
  BVec dlb = logits.b;  // in place, as the head calls it
  k_->cross_entropy_backward(dlb.data(), dlb.data(), ld, lsef.data(), tgt.data(), rows, vocab, 0.5);
  EXPECT_LT(rel_err(to_d(dlb), dl, rows, vocab, ld), kBf16Tol);

  const int64_t n = 12, dim = 10;
  const Data table = randb(vocab * dim, 15), dx = randb(n * dim, 16);
  std::vector<int32_t> tok(n);
  for (int64_t t = 0; t < n; ++t) tok[t] = static_cast<int32_t>((t * 7) % 5);  // repeated ids
  BVec x(n * dim);
  k_->embedding_forward(x.data(), tok.data(), table.b.data(), n, dim);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c)
      ASSERT_EQ(x[t * dim + c].bits, table.b[tok[t] * dim + c].bits);
  DVec dt(vocab * dim, 0.0);
  ref_.embedding_backward(dt.data(), tok.data(), dx.d.data(), n, dim);
  FVec dtf(vocab * dim, 0.0f);  // the master-type gradient of a bf16 table
  k_->embedding_backward(dtf.data(), tok.data(), dx.b.data(), n, dim);
  EXPECT_LT(rel_err(to_d(dtf), dt), kF32Tol);
}

TEST_F(ReferenceBf16, AdamWRefreshesTheWeightCopy) {
  const int64_t n = 50;
  const Data p0 = randb(n, 17);
  FVec p(p0.d.begin(), p0.d.end()), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>(i - 25);
  DVec pd = to_d(p), gd = to_d(g), md(n, 0.0), vd(n, 0.0);
  BVec copy(n);
  k_->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 1, 0.5,
            copy.data());
  ref_.adamw(pd.data(), gd.data(), md.data(), vd.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 1, 0.5);
  EXPECT_LT(rel_err(to_d(p), pd), 1e-6);  // f32 master weights
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i].bits, to_bf16(p[i]).bits) << i;
}

// Each argument's type follows its role; anything else is refused with a message.
TEST_F(ReferenceBf16, RolesAreChecked) {
  BVec x(16), y(16), g(4);
  BVec rstd_b(4);
  FVec rstd(4), dg(4);
  EXPECT_THROW(k_->rmsnorm_forward(y.data(), rstd_b.data(), x.data(), g.data(), 4, 4, 1e-5),
               Error);  // stats must be f32
  BVec dg_b(4);
  EXPECT_THROW(k_->rmsnorm_backward(y.data(), dg_b.data(), x.data(), x.data(), g.data(),
                                    rstd.data(), 4, 4, false),
               Error);  // the gain gradient is master (f32)
  FVec yf(16);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1.0, x.data(), 4, yf.data(), 4, 0.0, y.data(), 4),
               Error);  // A and B of one type
  DVec yd(16);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1.0, x.data(), 4, x.data(), 4, 0.0, yd.data(), 4),
               Error);  // bf16 into f64
  EXPECT_TRUE(k_->supports(Precision::bf16()));
  EXPECT_TRUE(k_->supports(Precision::fp64()));
  EXPECT_FALSE(k_->supports(Precision{DType::kBF16, DType::kF64}));
}

}  // namespace
}  // namespace hp
