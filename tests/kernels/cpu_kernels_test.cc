// The CPU backend against the reference backend run in double on the same (float) inputs, over odd
// shapes, on every SIMD path this CPU has (AVX2+FMA always, AVX-512 when present), with 1 and 2
// threads.
//
// Tolerances: errors are measured as max|cpu - ref| / max|ref| over a whole output (relative to
// the magnitude of that output). fp32 has unit roundoff u = 6e-8; a sum of n products carries a
// relative error of about sqrt(n) u on random data (n u is the worst case). Elementwise kernels
// (one exp, a few products) stay within ~10 u: 2e-6. Row reductions over <= 5000 elements
// (RMSNorm, log-sum-exp): 1e-5. Attention forward chains a d <= 128 dot product, a softmax over
// <= 257 keys and a 257-term weighted sum: 2e-5. Its backward adds two more such products and the
// sum over up to 4 query heads of a GQA group: 5e-5.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference_math.h"
#include "util/error.h"

namespace hp {
namespace {

using FVec = std::vector<float>;
using DVec = std::vector<double>;

FVec randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  FVec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

DVec to_d(const FVec& v) { return DVec(v.begin(), v.end()); }

// max|got - ref| / max|ref| (max|ref| floored at 1e-30).
double rel_err(const float* got, const double* ref, size_t n, size_t stride = 1, size_t width = 0) {
  if (width == 0) width = n;
  double worst = 0, mag = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    const size_t at = (i / width) * stride + i % width;
    worst = std::max(worst, std::abs(static_cast<double>(got[at]) - ref[at]));
    mag = std::max(mag, std::abs(ref[at]));
  }
  return worst / mag;
}
double rel_err(const FVec& got, const DVec& ref) { return rel_err(got.data(), ref.data(), got.size()); }

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> out = {CpuIsa::kAvx2};
  if (cpu_supports(CpuIsa::kAvx512)) out.push_back(CpuIsa::kAvx512);
  return out;
}

class CpuKernelsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  std::unique_ptr<Kernels> k1_ = make_cpu_kernels(1, GetParam());
  std::unique_ptr<Kernels> k2_ = make_cpu_kernels(2, GetParam());
  std::unique_ptr<ReferenceMath<double>> ref_ = std::make_unique<ReferenceMath<double>>();
};

// One attention case: q/k/v interleaved in one QKV row as in the model (plus padding), o with its
// own padded stride. Checks forward (o, lse) and backward (dq, dk, dv) against the double
// reference and that 1 and 2 threads give bit-identical results.
void check_attention(Kernels& k1, Kernels& k2, ReferenceMath<double>& ref, int64_t batch,
                     int64_t seq, int64_t heads, int64_t kv_heads, int64_t d, float q_amp = 1.0f) {
  SCOPED_TRACE(::testing::Message() << "batch=" << batch << " seq=" << seq << " heads=" << heads
                                    << " kv_heads=" << kv_heads << " d=" << d);
  AttnShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = d;
  s.ld_qkv = (heads + 2 * kv_heads) * d + 5;
  s.ld_o = heads * d + 3;
  const int64_t rows = batch * seq;
  const uint32_t seed = static_cast<uint32_t>(seq * 131 + heads * 17 + d + batch * 7);
  FVec qkv = randn(rows * s.ld_qkv, seed);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < heads * d; ++c) qkv[r * s.ld_qkv + c] *= q_amp;
  const FVec dout = randn(rows * s.ld_o, seed + 1);
  const float* q = qkv.data();
  const float* kp = q + heads * d;
  const float* vp = kp + kv_heads * d;
  const int64_t nlse = batch * heads * seq;

  FVec o1(rows * s.ld_o, 0.0f), lse1(nlse), o2(rows * s.ld_o, 0.0f), lse2(nlse);
  k1.attention_forward(s, q, kp, vp, o1.data(), lse1.data());
  k2.attention_forward(s, q, kp, vp, o2.data(), lse2.data());

  const DVec qkvd = to_d(qkv), doutd = to_d(dout);
  DVec od(rows * s.ld_o, 0.0);
  DVec lsed(nlse);
  ref.attention_forward(s, qkvd.data(), qkvd.data() + heads * d, qkvd.data() + (heads + kv_heads) * d,
                        od.data(), lsed.data());
  EXPECT_LT(rel_err(o1.data(), od.data(), rows * heads * d, s.ld_o, heads * d), 2e-5) << "o";
  EXPECT_LT(rel_err(lse1, lsed), 2e-5) << "lse";
  EXPECT_EQ(o1, o2) << "forward differs between 1 and 2 threads";
  EXPECT_EQ(lse1, lse2);

  // Backward from the CPU forward's o and lse; the reference recomputes its own softmax.
  FVec g1(rows * s.ld_qkv, 7.0f), g2(rows * s.ld_qkv, 7.0f);
  k1.attention_backward(s, q, kp, vp, o1.data(), dout.data(), lse1.data(), g1.data(),
                        g1.data() + heads * d, g1.data() + (heads + kv_heads) * d);
  k2.attention_backward(s, q, kp, vp, o1.data(), dout.data(), lse1.data(), g2.data(),
                        g2.data() + heads * d, g2.data() + (heads + kv_heads) * d);
  DVec gd(rows * s.ld_qkv, 7.0);
  ref.attention_backward(s, qkvd.data(), qkvd.data() + heads * d,
                         qkvd.data() + (heads + kv_heads) * d, od.data(), doutd.data(),
                         lsed.data(), gd.data(), gd.data() + heads * d,
                         gd.data() + (heads + kv_heads) * d);
  if (seq > 1) {
    EXPECT_LT(rel_err(g1.data(), gd.data(), rows * heads * d, s.ld_qkv, heads * d), 5e-5) << "dq";
    EXPECT_LT(rel_err(g1.data() + heads * d, gd.data() + heads * d, rows * kv_heads * d, s.ld_qkv,
                      kv_heads * d),
              5e-5)
        << "dk";
  } else {
    // One key per query: its softmax weight is 1, so o = v and dS = dO.v - dO.o is exactly 0, and
    // so are dq and dk. The reference is then (often exactly) 0, where a relative error means
    // nothing; the kernel keeps the rounding of the two float dot products, which depends on the
    // order the compiler sums them in (an -O1 build differs from -O2 here). Bound it instead: a
    // dot product of d terms is off by at most d eps sum|dO_j v_j|, twice that for dS, times
    // |q| or |k|, 1/sqrt(d), and the query heads of a group summed into dk.
    const int64_t group = heads / kv_heads;
    double dot = 0, amax = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        double sum = 0;
        for (int64_t j = 0; j < d; ++j)
          sum += std::abs(static_cast<double>(dout[r * s.ld_o + h * d + j]) *
                          vp[r * s.ld_qkv + (h / group) * d + j]);
        dot = std::max(dot, sum);
      }
      for (int64_t c = 0; c < (heads + kv_heads) * d; ++c)
        amax = std::max(amax, std::abs(static_cast<double>(qkv[r * s.ld_qkv + c])));
    }
    const double bound = 2 * d * std::numeric_limits<float>::epsilon() * dot * amax * group /
                         std::sqrt(static_cast<double>(d));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < (heads + kv_heads) * d; ++c)
        ASSERT_LE(std::abs(g1[r * s.ld_qkv + c]), bound)
            << (c < heads * d ? "dq" : "dk") << " row " << r << " column " << c
            << " of a one-token sequence is not 0 to rounding";
  }
  EXPECT_LT(rel_err(g1.data() + (heads + kv_heads) * d, gd.data() + (heads + kv_heads) * d,
                    rows * kv_heads * d, s.ld_qkv, kv_heads * d),
            5e-5)
      << "dv";
  // Padding columns of the QKV gradient rows are left alone.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = (heads + 2 * kv_heads) * d; c < s.ld_qkv; ++c)
      ASSERT_EQ(g1[r * s.ld_qkv + c], 7.0f);
  EXPECT_EQ(g1, g2) << "backward differs between 1 and 2 threads";
}

TEST_P(CpuKernelsTest, AttentionOddShapesAgainstReference) {
  int i = 0;
  for (int64_t seq : {1, 7, 63, 130, 257}) {
    for (int64_t group : {1, 2, 4}) {
      for (int64_t d : {32, 64, 80, 128}) {
        const int64_t batch = 1 + (i++ % 2);
        check_attention(*k1_, *k2_, *ref_, batch, seq, 2 * group, 2, d);
        if (HasFailure()) return;
      }
    }
  }
}

TEST_P(CpuKernelsTest, AttentionSmallHeadDimsAndOneKvHead) {
  for (int64_t d : {8, 24, 40, 56})
    check_attention(*k1_, *k2_, *ref_, 2, 70, 3, 1, d);
  check_attention(*k1_, *k2_, *ref_, 1, 200, 4, 1, 64);
}

// Scores of size ~30 (peaked softmax, the running max changes from tile to tile by large steps):
// the online rescaling must not lose accuracy.
TEST_P(CpuKernelsTest, AttentionLargeScores) {
  check_attention(*k1_, *k2_, *ref_, 1, 300, 4, 2, 64, 30.0f);
}

TEST_P(CpuKernelsTest, AttentionRejectsBadShapes) {
  AttnShape s;
  s.seq = 4;
  s.heads = 3;
  s.kv_heads = 2;
  s.head_dim = 8;
  s.ld_qkv = s.ld_o = 64;
  FVec buf(1024), lse(64);
  EXPECT_THROW(k1_->attention_forward(s, buf.data(), buf.data(), buf.data(), buf.data(), lse.data()),
               Error);
  s.heads = 2;
  s.ld_qkv = 1;  // smaller than heads * head_dim
  EXPECT_THROW(k1_->attention_forward(s, buf.data(), buf.data(), buf.data(), buf.data(), lse.data()),
               Error);
}

// head_dim not a multiple of 8 (toy models) runs the plain loops: still right.
TEST_P(CpuKernelsTest, AttentionOddHeadDimFallsBack) {
  for (int64_t d : {2, 4, 12}) check_attention(*k1_, *k2_, *ref_, 2, 20, 4, 2, d);
}

// The same object called with a smaller then a larger shape, then the first again: scratch is
// reused or grown, and results do not depend on what ran before.
TEST_P(CpuKernelsTest, AttentionRepeatableAcrossCalls) {
  AttnShape s{1, 100, 2, 1, 32, 4 * 32, 2 * 32};
  const FVec qkv = randn(s.seq * s.ld_qkv, 3);
  FVec o_a(s.seq * s.ld_o), o_b(s.seq * s.ld_o), lse(2 * s.seq);
  const float* q = qkv.data();
  k1_->attention_forward(s, q, q + 64, q + 96, o_a.data(), lse.data());
  AttnShape big{2, 300, 2, 1, 32, 4 * 32, 2 * 32};
  const FVec qkv2 = randn(2 * 300 * big.ld_qkv, 4);
  FVec o2(2 * 300 * big.ld_o), lse2(2 * 2 * 300);
  k1_->attention_forward(big, qkv2.data(), qkv2.data() + 64, qkv2.data() + 96, o2.data(), lse2.data());
  k1_->attention_forward(s, q, q + 64, q + 96, o_b.data(), lse.data());
  EXPECT_EQ(o_a, o_b);
}

// The fp32 GEMM, cut into one block of C's rows (M >= N) or columns per thread when big enough,
// against the double reference: every transpose, padded leading dimensions, alpha and beta, sizes
// that are and are not multiples of the blocks; C's padding is left alone. Sums of K <= 64
// products: 1e-5 of the output's magnitude.
TEST_P(CpuKernelsTest, GemmSharedOverThreadsMatchesReference) {
  struct Shape {
    int64_t M, N, K;
  };
  uint32_t seed = 300;
  for (const Shape sh : {Shape{300, 70, 50}, Shape{40, 333, 64}, Shape{129, 128, 33},
                         Shape{100, 60, 17}, Shape{1, 500, 8}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      SCOPED_TRACE(::testing::Message() << "M=" << sh.M << " N=" << sh.N << " K=" << sh.K
                                        << " trans_a=" << ta << " trans_b=" << tb);
      const int64_t lda = (ta ? sh.M : sh.K) + 3, ldb = (tb ? sh.K : sh.N) + 5, ldc = sh.N + 7;
      const FVec a = randn(static_cast<size_t>((ta ? sh.K : sh.M) * lda), ++seed);
      const FVec b = randn(static_cast<size_t>((tb ? sh.N : sh.K) * ldb), ++seed);
      const FVec c0 = randn(static_cast<size_t>(sh.M * ldc), ++seed);
      const DVec ad = to_d(a), bd = to_d(b);
      DVec cd = to_d(c0);
      ref_->gemm(ta, tb, sh.M, sh.N, sh.K, 0.5, ad.data(), lda, bd.data(), ldb, 0.75, cd.data(),
                 ldc);
      for (Kernels* k : {k1_.get(), k2_.get()}) {
        FVec c = c0;
        k->gemm(ta, tb, sh.M, sh.N, sh.K, 0.5, a.data(), lda, b.data(), ldb, 0.75, c.data(), ldc);
        EXPECT_LT(rel_err(c.data(), cd.data(), static_cast<size_t>(sh.M * sh.N),
                          static_cast<size_t>(ldc), static_cast<size_t>(sh.N)),
                  1e-5)
            << (k == k1_.get() ? "1 thread" : "2 threads");
        for (int64_t r = 0; r < sh.M; ++r)
          for (int64_t j = sh.N; j < ldc; ++j) ASSERT_EQ(c[r * ldc + j], c0[r * ldc + j]);
      }
    }
  }
}

// Ranks run as threads may share one backend object: concurrent calls (each with its own shape)
// give the same bits as the same calls made one after the other.
TEST_P(CpuKernelsTest, ConcurrentCallsOnOneObject) {
  constexpr int kCallers = 3;
  std::vector<AttnShape> shapes;
  std::vector<FVec> inputs, douts;
  for (int i = 0; i < kCallers; ++i) {
    const int64_t seq = 50 + 40 * i, heads = 2, d = 32;
    shapes.push_back(AttnShape{1, seq, heads, 1, d, (heads + 2) * d, heads * d});
    inputs.push_back(randn(seq * (heads + 2) * d, 90 + i));
    douts.push_back(randn(seq * heads * d, 95 + i));
  }
  auto run = [&](int i, FVec& o, FVec& g, FVec& rope_x) {
    const AttnShape& s = shapes[i];
    const float* q = inputs[i].data();
    FVec lse(s.heads * s.seq);
    o.assign(s.seq * s.ld_o, 0.0f);
    g.assign(s.seq * s.ld_qkv, 0.0f);
    for (int rep = 0; rep < 5; ++rep) {
      k2_->attention_forward(s, q, q + 64, q + 96, o.data(), lse.data());
      k2_->attention_backward(s, q, q + 64, q + 96, o.data(), douts[i].data(), lse.data(), g.data(),
                              g.data() + 64, g.data() + 96);
      rope_x = inputs[i];
      k2_->rope(rope_x.data(), s.seq, s.ld_qkv, s.seq, 3, 32, 10000.0 + 1000.0 * i, false);
    }
  };
  std::vector<FVec> o_serial(kCallers), g_serial(kCallers), r_serial(kCallers);
  for (int i = 0; i < kCallers; ++i) run(i, o_serial[i], g_serial[i], r_serial[i]);
  std::vector<FVec> o_par(kCallers), g_par(kCallers), r_par(kCallers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i)
    threads.emplace_back([&, i] { run(i, o_par[i], g_par[i], r_par[i]); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kCallers; ++i) {
    EXPECT_EQ(o_par[i], o_serial[i]) << i;
    EXPECT_EQ(g_par[i], g_serial[i]) << i;
    EXPECT_EQ(r_par[i], r_serial[i]) << i;
  }
}

TEST_P(CpuKernelsTest, RmsNormForwardBackward) {
  for (int64_t dim : {1, 7, 64, 100, 1000}) {
    for (int64_t rows : {1, 3, 130}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim=" << dim << " rows=" << rows << " acc=" << accumulate);
        const FVec x = randn(rows * dim, 11 + dim), g = randn(dim, 12), dy = randn(rows * dim, 13);
        const FVec dx0 = randn(rows * dim, 14), dg0 = randn(dim, 15);
        const DVec xd = to_d(x), gd = to_d(g), dyd = to_d(dy);
        DVec yd(rows * dim), rsd(rows), dxd = to_d(dx0), dgd = to_d(dg0);
        ref_->rmsnorm_forward(yd.data(), rsd.data(), xd.data(), gd.data(), rows, dim, 1e-5);
        ref_->rmsnorm_backward(dxd.data(), dgd.data(), dyd.data(), xd.data(), gd.data(), rsd.data(),
                               rows, dim, accumulate);
        for (auto* k : {k1_.get(), k2_.get()}) {
          FVec y(rows * dim), rs(rows), dx = dx0, dg = dg0;
          k->rmsnorm_forward(y.data(), rs.data(), x.data(), g.data(), rows, dim, 1e-5);
          EXPECT_LT(rel_err(y, yd), 1e-5);
          EXPECT_LT(rel_err(rs, rsd), 1e-5);
          k->rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), g.data(), rs.data(), rows,
                              dim, accumulate);
          // dx = r g dy - x r^3/dim sum(dy g x) cancels almost exactly when dim is tiny (dim = 1
          // gives r g dy eps / (x^2 + eps)), so its error is measured against the size of the
          // terms, max |r g dy| + |dx before|, not against the (tiny) result.
          double worst = 0, terms = 1e-30;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < dim; ++c) {
              const int64_t i = r * dim + c;
              worst = std::max(worst, std::abs(dx[i] - dxd[i]));
              terms = std::max(terms, std::abs(rsd[r] * gd[c] * dyd[i]) +
                                          (accumulate ? std::abs(double(dx0[i])) : 0.0));
            }
          EXPECT_LT(worst / terms, 1e-5);
          EXPECT_LT(rel_err(dg, dgd), 1e-5);
        }
      }
    }
  }
}

TEST_P(CpuKernelsTest, RmsNormLargeUsesThreadsAndMatches) {
  const int64_t rows = 300, dim = 512;  // above the parallel threshold
  const FVec x = randn(rows * dim, 21), g = randn(dim, 22), dy = randn(rows * dim, 23);
  const DVec xd = to_d(x), gd = to_d(g), dyd = to_d(dy);
  DVec yd(rows * dim), rsd(rows), dxd(rows * dim), dgd(dim, 0.0);
  ref_->rmsnorm_forward(yd.data(), rsd.data(), xd.data(), gd.data(), rows, dim, 1e-6);
  ref_->rmsnorm_backward(dxd.data(), dgd.data(), dyd.data(), xd.data(), gd.data(), rsd.data(), rows,
                         dim, false);
  FVec y(rows * dim), rs(rows), dx(rows * dim), dg(dim, 0.0f);
  k2_->rmsnorm_forward(y.data(), rs.data(), x.data(), g.data(), rows, dim, 1e-6);
  k2_->rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), g.data(), rs.data(), rows, dim,
                        false);
  EXPECT_LT(rel_err(y, yd), 1e-5);
  EXPECT_LT(rel_err(dx, dxd), 1e-5);
  EXPECT_LT(rel_err(dg, dgd), 1e-5);
}

TEST_P(CpuKernelsTest, RopeForwardAndInverse) {
  for (int64_t hd : {8, 64, 80, 128}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "head_dim=" << hd << " inverse=" << inverse);
      const int64_t seq = 37, rows = 2 * seq, heads = 3, ld = heads * hd + 9;
      const FVec x0 = randn(rows * ld, 31 + hd);
      DVec xd = to_d(x0);
      ref_->rope(xd.data(), rows, ld, seq, heads, hd, 10000.0, inverse);
      for (auto* k : {k1_.get(), k2_.get()}) {
        FVec x = x0;
        k->rope(x.data(), rows, ld, seq, heads, hd, 10000.0, inverse);
        EXPECT_LT(rel_err(x, xd), 2e-6);
        for (int64_t r = 0; r < rows; ++r)  // padding untouched
          for (int64_t c = heads * hd; c < ld; ++c) ASSERT_EQ(x[r * ld + c], x0[r * ld + c]);
      }
    }
  }
}

TEST_P(CpuKernelsTest, SwiGluForwardBackward) {
  for (int64_t n : {1, 7, 1000, 70001}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    FVec g = randn(n, 41, 3.0f), u = randn(n, 42), dh = randn(n, 43);
    if (n > 10) {  // saturated sigmoid on both sides
      g[3] = 120.0f;
      g[5] = -120.0f;
    }
    const DVec gd = to_d(g), ud = to_d(u), dhd = to_d(dh);
    DVec hd(n), dgd(n), dud(n);
    ref_->swiglu_forward(hd.data(), gd.data(), ud.data(), n);
    ref_->swiglu_backward(dgd.data(), dud.data(), dhd.data(), gd.data(), ud.data(), n);
    for (auto* k : {k1_.get(), k2_.get()}) {
      FVec h(n), dg(n), du(n);
      k->swiglu_forward(h.data(), g.data(), u.data(), n);
      k->swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
      EXPECT_LT(rel_err(h, hd), 2e-6);
      EXPECT_LT(rel_err(dg, dgd), 2e-6);
      EXPECT_LT(rel_err(du, dud), 2e-6);
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(h[i]) && std::isfinite(dg[i]));
    }
  }
}

TEST_P(CpuKernelsTest, CrossEntropyForwardBackward) {
  for (int64_t vocab : {1, 7, 1000, 5000}) {
    for (int64_t rows : {1, 5, 33}) {
      SCOPED_TRACE(::testing::Message() << "vocab=" << vocab << " rows=" << rows);
      const int64_t ld = vocab + 3;
      const FVec logits = randn(rows * ld, 51 + vocab, 4.0f);
      std::vector<int32_t> targets(rows);
      for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 7919) % vocab);
      const DVec ld_d = to_d(logits);
      DVec lse_ref(rows);
      const double loss_ref =
          ref_->cross_entropy_forward(ld_d.data(), ld, targets.data(), rows, vocab, lse_ref.data());
      DVec dl_ref(rows * ld, 0.0);
      ref_->cross_entropy_backward(dl_ref.data(), ld_d.data(), ld, lse_ref.data(), targets.data(),
                                   rows, vocab, 0.25);
      for (auto* k : {k1_.get(), k2_.get()}) {
        FVec lse(rows);
        double loss = 0.5;  // the kernel adds to it
        k->cross_entropy_forward(logits.data(), ld, targets.data(), rows, vocab, lse.data(), &loss);
        EXPECT_NEAR(loss - 0.5, loss_ref, 1e-5 * std::max(1.0, std::abs(loss_ref)));
        EXPECT_LT(rel_err(lse, lse_ref), 1e-5);
        FVec dl(rows * ld, 0.0f);
        k->cross_entropy_backward(dl.data(), logits.data(), ld, lse.data(), targets.data(), rows,
                                  vocab, 0.25f);
        EXPECT_LT(rel_err(dl.data(), dl_ref.data(), rows * vocab, ld, vocab), 1e-5);
        FVec inplace = logits;  // dlogits may alias logits
        k->cross_entropy_backward(inplace.data(), inplace.data(), ld, lse.data(), targets.data(),
                                  rows, vocab, 0.25f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < vocab; ++c) ASSERT_EQ(inplace[r * ld + c], dl[r * ld + c]);
      }
      std::vector<int32_t> bad = targets;
      bad[0] = static_cast<int32_t>(vocab);
      FVec lse(rows);
      double loss = 0;
      EXPECT_THROW(
          k1_->cross_entropy_forward(logits.data(), ld, bad.data(), rows, vocab, lse.data(), &loss),
          Error);
    }
  }
}

TEST_P(CpuKernelsTest, EmbeddingAxpySumSquaresAdamW) {
  const int64_t vocab = 50, dim = 300, n = 200;
  std::vector<int32_t> tokens(n);
  for (int64_t t = 0; t < n; ++t) tokens[t] = static_cast<int32_t>((t * 13) % vocab);
  const FVec table = randn(vocab * dim, 61), dx = randn(n * dim, 62);
  const DVec tabled = to_d(table), dxd = to_d(dx);
  DVec xd(n * dim), dtd(vocab * dim, 0.0);
  ref_->embedding_forward(xd.data(), tokens.data(), tabled.data(), n, dim);
  ref_->embedding_backward(dtd.data(), tokens.data(), dxd.data(), n, dim);
  FVec dt_1thread;
  for (auto* k : {k1_.get(), k2_.get()}) {
    FVec x(n * dim), dt(vocab * dim, 0.0f);
    k->embedding_forward(x.data(), tokens.data(), table.data(), n, dim);
    EXPECT_EQ(rel_err(x, xd), 0.0);
    k->embedding_backward(dt.data(), tokens.data(), dx.data(), n, dim);
    EXPECT_LT(rel_err(dt, dtd), 1e-6);
    if (dt_1thread.empty()) dt_1thread = dt;
    else EXPECT_EQ(dt, dt_1thread);  // token order kept: same bits with 2 threads
  }
  std::vector<int32_t> neg = {0, -1};
  FVec x2(2 * dim);
  EXPECT_THROW(k1_->embedding_forward(x2.data(), neg.data(), table.data(), 2, dim), Error);

  for (int64_t len : {1, 17, 100000}) {
    SCOPED_TRACE(::testing::Message() << "n=" << len);
    const FVec xs = randn(len, 71), ys = randn(len, 72);
    const DVec xsd = to_d(xs);
    DVec yref = to_d(ys);
    ref_->axpy(yref.data(), xsd.data(), -0.75, len);
    const double ss_ref = ref_->sum_squares(xsd.data(), len);
    double ss_1 = 0;
    for (auto* k : {k1_.get(), k2_.get()}) {
      FVec y = ys;
      k->axpy(y.data(), xs.data(), -0.75f, len);
      EXPECT_LT(rel_err(y, yref), 1e-6);
      const double ss = k->sum_squares(xs.data(), len);
      EXPECT_NEAR(ss, ss_ref, 1e-12 * ss_ref);
      if (k == k1_.get()) ss_1 = ss;
      else EXPECT_EQ(ss, ss_1);
    }

    const FVec p0 = randn(len, 73), gr = randn(len, 74, 0.1f), m0 = randn(len, 75, 0.01f);
    FVec v0 = randn(len, 76, 0.01f);
    for (auto& e : v0) e = e * e;
    const DVec grd = to_d(gr);
    DVec pd = to_d(p0), md = to_d(m0), vd = to_d(v0);
    ref_->adamw(pd.data(), grd.data(), md.data(), vd.data(), len, 1e-3, 0.9, 0.95, 1e-8, 0.1, 3,
                0.5);
    // The f32 update in the reference's double arithmetic: what the CPU kernels must match bitwise
    // (the trainer's results do not depend on the backend's vector width).
    FVec pr = p0, mr = m0, vr = v0;
    ReferenceMath<float>().adamw(pr.data(), gr.data(), mr.data(), vr.data(), len, 1e-3, 0.9, 0.95,
                                 1e-8, 0.1, 3, 0.5);
    for (auto* k : {k1_.get(), k2_.get()}) {
      FVec p = p0, m = m0, v = v0;
      k->adamw(p.data(), gr.data(), m.data(), v.data(), len, 1e-3, 0.9, 0.95, 1e-8, 0.1, 3, 0.5,
               DataPtr());
      EXPECT_LT(rel_err(p, pd), 1e-6);
      EXPECT_LT(rel_err(m, md), 1e-6);
      EXPECT_LT(rel_err(v, vd), 1e-6);
      EXPECT_EQ(p, pr);
      EXPECT_EQ(m, mr);
      EXPECT_EQ(v, vr);
    }
  }
}

TEST(CpuKernelsFactory, IsaChoiceAndNames) {
  EXPECT_TRUE(cpu_supports(CpuIsa::kAvx2));
  EXPECT_EQ(make_cpu_kernels(1, CpuIsa::kAvx2)->name(), "cpu-avx2");
  EXPECT_EQ(make_cpu_kernels(1, CpuIsa::kAuto)->name(),
            std::string("cpu-") + cpu_isa_name(cpu_best_isa()));
  if (!cpu_supports(CpuIsa::kAvx512)) {
    EXPECT_THROW(make_cpu_kernels(1, CpuIsa::kAvx512), Error);
  }
  EXPECT_FALSE(blas_core_name().empty());
}

TEST(CpuKernelsFactory, EnvironmentForcesIsa) {
  ASSERT_EQ(setenv("HP_CPU_ISA", "avx2", 1), 0);
  EXPECT_EQ(make_cpu_kernels(1)->name(), "cpu-avx2");
  ASSERT_EQ(setenv("HP_CPU_ISA", "sse9", 1), 0);
  EXPECT_THROW(make_cpu_kernels(1), Error);
  ASSERT_EQ(unsetenv("HP_CPU_ISA"), 0);
  EXPECT_EQ(make_cpu_kernels(1)->name(), std::string("cpu-") + cpu_isa_name(cpu_best_isa()));
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuKernelsTest, ::testing::ValuesIn(isas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           return std::string(cpu_isa_name(p.param));
                         });

}  // namespace
}  // namespace hp
