// The reference math in double (ReferenceMath<double>): every backward against central finite
// differences of the matching forward (loss = sum of w * output with random w), plus forward facts
// checked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/reference/reference_math.h"
#include "util/error.h"

namespace hp {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks grad[i] == d loss / d x[i] for every i by central differences (step 1e-5; the truncation
// error is O(h^2) ~ 1e-10 times the third derivative).
void expect_grad(Vec& x, const std::function<double()>& loss, const Vec& grad, const char* what) {
  ASSERT_EQ(x.size(), grad.size());
  const double h = 1e-5;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double fd = (lp - lm) / (2 * h);
    const double err = std::abs(fd - grad[i]) / (1.0 + std::abs(fd));
    worst = std::max(worst, err);
    ASSERT_LT(err, 1e-7) << what << " element " << i << ": analytic " << grad[i] << " vs fd " << fd;
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

class ReferenceGrad : public ::testing::Test {
 protected:
  std::unique_ptr<ReferenceMath<double>> k_ = std::make_unique<ReferenceMath<double>>();
};

TEST_F(ReferenceGrad, GemmAllTransposesMatchHandResult) {
  // A = [[1,2,3],[4,5,6]] (2x3), B = [[1,0],[0,1],[2,-1]] (3x2): A B = [[7,-1],[16,-1]].
  const Vec a = {1, 2, 3, 4, 5, 6}, at = {1, 4, 2, 5, 3, 6};
  const Vec b = {1, 0, 0, 1, 2, -1}, bt = {1, 0, 2, 0, 1, -1};
  const Vec want = {7, -1, 16, -1};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Vec c = {NAN, NAN, NAN, NAN};  // beta = 0 must not read C
      k_->gemm(ta, tb, 2, 2, 3, 1.0, ta ? at.data() : a.data(), ta ? 2 : 3,
               tb ? bt.data() : b.data(), tb ? 3 : 2, 0.0, c.data(), 2);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], want[i]) << ta << tb << i;
      Vec c2 = {1, 1, 1, 1};
      k_->gemm(ta, tb, 2, 2, 3, 2.0, ta ? at.data() : a.data(), ta ? 2 : 3,
               tb ? bt.data() : b.data(), tb ? 3 : 2, -1.0, c2.data(), 2);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(c2[i], 2 * want[i] - 1);
    }
  }
}

TEST_F(ReferenceGrad, RmsNorm) {
  const int64_t rows = 3, dim = 7;
  Vec x = random_vec(rows * dim, 1), g = random_vec(dim, 2), w = random_vec(rows * dim, 3);
  const double eps = 1e-5;
  Vec y(rows * dim), rstd(rows);
  auto loss = [&] {
    k_->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), rows, dim, eps);
    return dot(y, w);
  };
  loss();
  // Forward by hand for row 0.
  double ss = 0;
  for (int k = 0; k < dim; ++k) ss += x[k] * x[k];
  EXPECT_NEAR(rstd[0], 1 / std::sqrt(ss / dim + eps), 1e-14);
  EXPECT_NEAR(y[2], x[2] * rstd[0] * g[2], 1e-14);
  Vec dx(rows * dim, 0.0), dg(dim, 0.0);
  k_->rmsnorm_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), rstd.data(), rows, dim,
                       false);
  expect_grad(x, loss, dx, "dx");
  expect_grad(g, loss, dg, "dg");
  // accumulate = true adds onto dx; dg always accumulates.
  Vec dx2(rows * dim, 1.0), dg2(dim, 0.5);
  k_->rmsnorm_backward(dx2.data(), dg2.data(), w.data(), x.data(), g.data(), rstd.data(), rows,
                       dim, true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0, 1e-14);
  for (size_t i = 0; i < dg.size(); ++i) EXPECT_NEAR(dg2[i], dg[i] + 0.5, 1e-14);
}

TEST_F(ReferenceGrad, RopeInverseIsTheBackward) {
  const int64_t rows = 6, seq = 3, heads = 2, hd = 8, ld = 20;  // 4 spare values per row
  const double theta = 10000.0;
  Vec x = random_vec(rows * ld, 4), w = random_vec(rows * ld, 5);
  Vec y;
  auto loss = [&] {
    y = x;
    k_->rope(y.data(), rows, ld, seq, heads, hd, theta, false);
    return dot(y, w);
  };
  loss();
  // Position 0 (rows 0 and 3) is untouched; the spare tail of every row is untouched.
  for (int c = 0; c < ld; ++c) EXPECT_EQ(y[3 * ld + c], x[3 * ld + c]);
  for (int r = 0; r < rows; ++r)
    for (int c = heads * hd; c < ld; ++c) EXPECT_EQ(y[r * ld + c], x[r * ld + c]);
  // Row 1 is position 1; pair j = 0 turns by exactly 1 radian (inv_freq_0 = 1), HF rotate_half.
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  EXPECT_NEAR(y[ld + 0], x[ld + 0] * c1 - x[ld + 4] * s1, 1e-7);
  EXPECT_NEAR(y[ld + 4], x[ld + 4] * c1 + x[ld + 0] * s1, 1e-7);
  // Pair j = 1 of head 1 at position 2: angle 2 * 10000^(-2/8).
  const double a = 2 * std::pow(10000.0, -0.25);
  EXPECT_NEAR(y[2 * ld + 9], x[2 * ld + 9] * std::cos(a) - x[2 * ld + 13] * std::sin(a), 1e-6);
  Vec dx = w;
  k_->rope(dx.data(), rows, ld, seq, heads, hd, theta, true);
  expect_grad(x, loss, dx, "dx");
  // inverse(forward(x)) == x up to c^2 + s^2 = 1 holding only to fp32 accuracy (HF's fp32 cos/sin).
  loss();  // y of the unperturbed x
  Vec z = y;
  k_->rope(z.data(), rows, ld, seq, heads, hd, theta, true);
  for (size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(z[i], x[i], 4e-7 * (1 + std::abs(x[i])));
}

// q, k, v live in one QKV row like in the model: [q heads | k kv_heads | v kv_heads] (+ 3 spare).
struct QkvCase {
  AttnShape s;
  int64_t qkv_cols;
};
QkvCase make_case(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t hd) {
  QkvCase c;
  c.s.batch = batch;
  c.s.seq = seq;
  c.s.heads = heads;
  c.s.kv_heads = kv_heads;
  c.s.head_dim = hd;
  c.qkv_cols = (heads + 2 * kv_heads) * hd;
  c.s.ld_qkv = c.qkv_cols + 3;
  c.s.ld_o = heads * hd + 1;
  return c;
}

TEST_F(ReferenceGrad, AttentionGqa) {
  for (auto [heads, kv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {4, 1}}) {
    const QkvCase c = make_case(2, 5, heads, kv, 4);
    const AttnShape& s = c.s;
    const int64_t rows = s.batch * s.seq;
    Vec qkv = random_vec(rows * s.ld_qkv, 6), w = random_vec(rows * s.ld_o, 7);
    Vec o(rows * s.ld_o, 0.0);
    Vec lse(s.batch * s.heads * s.seq);
    const int64_t ko = heads * 4, vo = (heads + kv) * 4;
    auto loss = [&] {
      k_->attention_forward(s, qkv.data(), qkv.data() + ko, qkv.data() + vo, o.data(), lse.data());
      return dot(o, w);
    };
    loss();
    // lse of (b=1, h=last, i=2) by hand.
    {
      const int64_t b = 1, h = heads - 1, i = 2, kh = h / (heads / kv);
      double m = -INFINITY, sc[3];
      for (int j = 0; j <= i; ++j) {
        double d = 0;
        for (int e = 0; e < 4; ++e)
          d += qkv[(b * 5 + i) * s.ld_qkv + h * 4 + e] * qkv[(b * 5 + j) * s.ld_qkv + ko + kh * 4 + e];
        sc[j] = d / 2.0;
        m = std::max(m, sc[j]);
      }
      double sum = 0;
      for (int j = 0; j <= i; ++j) sum += std::exp(sc[j] - m);
      EXPECT_NEAR(lse[(b * heads + h) * 5 + i], m + std::log(sum), 1e-5);
    }
    Vec g(qkv.size(), 0.0);  // dq, dk, dv written into one gradient QKV row
    k_->attention_backward(s, qkv.data(), qkv.data() + ko, qkv.data() + vo, o.data(), w.data(),
                           lse.data(), g.data(), g.data() + ko, g.data() + vo);
    expect_grad(qkv, loss, g, "dqkv");
  }
}

TEST_F(ReferenceGrad, AttentionIsCausal) {
  const QkvCase c = make_case(1, 6, 2, 1, 4);
  const int64_t rows = 6;
  Vec qkv = random_vec(rows * c.s.ld_qkv, 8), o1(rows * c.s.ld_o), o2(rows * c.s.ld_o);
  Vec lse(12);
  k_->attention_forward(c.s, qkv.data(), qkv.data() + 8, qkv.data() + 12, o1.data(), lse.data());
  for (int64_t col = 0; col < c.qkv_cols; ++col) qkv[5 * c.s.ld_qkv + col] += 1.0;  // last token
  k_->attention_forward(c.s, qkv.data(), qkv.data() + 8, qkv.data() + 12, o2.data(), lse.data());
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t col = 0; col < 8; ++col) EXPECT_EQ(o1[r * c.s.ld_o + col], o2[r * c.s.ld_o + col]);
  bool changed = false;
  for (int64_t col = 0; col < 8; ++col) changed |= o1[5 * c.s.ld_o + col] != o2[5 * c.s.ld_o + col];
  EXPECT_TRUE(changed);
  // Row 0 attends only to itself: o = v_0.
  for (int64_t e = 0; e < 4; ++e) EXPECT_NEAR(o1[4 + e], qkv[12 + e], 1e-15);
}

TEST_F(ReferenceGrad, SwiGlu) {
  const int64_t n = 11;
  Vec g = random_vec(n, 9, 2.0), u = random_vec(n, 10), w = random_vec(n, 11), h(n);
  auto loss = [&] {
    k_->swiglu_forward(h.data(), g.data(), u.data(), n);
    return dot(h, w);
  };
  loss();
  EXPECT_NEAR(h[3], g[3] / (1 + std::exp(-g[3])) * u[3], 1e-15);
  Vec dg(n), du(n);
  k_->swiglu_backward(dg.data(), du.data(), w.data(), g.data(), u.data(), n);
  expect_grad(g, loss, dg, "dg");
  expect_grad(u, loss, du, "du");
}

TEST_F(ReferenceGrad, CrossEntropy) {
  const int64_t rows = 4, vocab = 9, ld = 10;
  Vec logits = random_vec(rows * ld, 12, 3.0);
  const std::vector<int32_t> targets = {0, 8, 3, 3};
  Vec lse(rows);
  const double scale = 0.37;
  auto loss = [&] {
    return scale * k_->cross_entropy_forward(logits.data(), ld, targets.data(), rows, vocab,
                                             lse.data());
  };
  const double l = loss() / scale;
  double want = 0;
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < vocab; ++c) sum += std::exp(logits[r * ld + c]);
    want += std::log(sum) - logits[r * ld + targets[r]];
  }
  EXPECT_NEAR(l, want, 1e-12);
  Vec d(rows * ld, 0.0);
  k_->cross_entropy_backward(d.data(), logits.data(), ld, lse.data(), targets.data(), rows, vocab,
                             scale);
  expect_grad(logits, loss, d, "dlogits");  // the spare column has gradient 0 and d stays 0
  // In place (dlogits aliases logits) gives the same numbers.
  Vec inplace = logits;
  k_->cross_entropy_backward(inplace.data(), inplace.data(), ld, lse.data(), targets.data(), rows,
                             vocab, scale);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < vocab; ++c) EXPECT_NEAR(inplace[r * ld + c], d[r * ld + c], 1e-15);
  const std::vector<int32_t> bad = {0, 9, 0, 0};
  EXPECT_THROW(k_->cross_entropy_forward(logits.data(), ld, bad.data(), rows, vocab, lse.data()),
               Error);
}

TEST_F(ReferenceGrad, Embedding) {
  const int64_t n = 5, dim = 3, vocab = 4;
  Vec table = random_vec(vocab * dim, 13), w = random_vec(n * dim, 14), x(n * dim);
  const std::vector<int32_t> tokens = {2, 0, 2, 3, 2};
  auto loss = [&] {
    k_->embedding_forward(x.data(), tokens.data(), table.data(), n, dim);
    return dot(x, w);
  };
  loss();
  EXPECT_EQ(x[3 * dim + 1], table[3 * dim + 1]);
  Vec dt(vocab * dim, 0.0);
  k_->embedding_backward(dt.data(), tokens.data(), w.data(), n, dim);
  expect_grad(table, loss, dt, "dtable");
}

TEST_F(ReferenceGrad, AxpySumSquaresAdamW) {
  Vec y = {1, 2, 3}, x = {1, -1, 0.5};
  k_->axpy(y.data(), x.data(), 2.0, 3);
  EXPECT_EQ(y, (Vec{3, 0, 4}));
  EXPECT_EQ(k_->sum_squares(y.data(), 3), 25.0);
  // Two AdamW steps against the textbook form p -= lr (mhat / (sqrt(vhat) + eps) + wd p).
  const double lr = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.01;
  Vec p = {0.5, -1.0}, m = {0, 0}, v = {0, 0};
  Vec pw = p, mw = m, vw = v;
  const Vec grads[2] = {{0.3, -2.0}, {-0.1, 0.7}};
  for (int t = 1; t <= 2; ++t) {
    k_->adamw(p.data(), grads[t - 1].data(), m.data(), v.data(), 2, lr, b1, b2, eps, wd, t, 1.0);
    for (int i = 0; i < 2; ++i) {
      const double gi = grads[t - 1][i];
      mw[i] = b1 * mw[i] + (1 - b1) * gi;
      vw[i] = b2 * vw[i] + (1 - b2) * gi * gi;
      const double mh = mw[i] / (1 - std::pow(b1, t)), vh = vw[i] / (1 - std::pow(b2, t));
      pw[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * pw[i]);
      EXPECT_NEAR(p[i], pw[i], 1e-12);
    }
  }
  EXPECT_THROW(k_->adamw(p.data(), grads[0].data(), m.data(), v.data(), 2, lr, b1, b2, eps, wd, 0, 1.0),
               Error);
}

}  // namespace
}  // namespace hp
