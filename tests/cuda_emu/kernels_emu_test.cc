// The CUDA backend's kernel bodies and dispatchers (src/kernels/cuda/*_kernels.cuh) run on the CPU
// emulation of thread blocks (kernel_emulator.h) against the reference backend, so their indexing,
// vector and scalar paths, grid-stride loops, block partitions, barriers and shuffles are checked
// on every build, without a GPU. The launch geometry is the real one, for a pretend GPU of one or
// two SMs (so grid-stride loops wrap). Not covered here: cuBLASLt, CUB's sort (done on the host
// below), the backend's memory and streams, real concurrency; tests/cuda checks those on a GPU.
// Tolerances are those of tests/cuda/cuda_kernels_test.cc (see there); the bitwise checks too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/reference/reference_math.h"
#include "kernels/rope_angles.h"

// clang-format off
#include "kernel_emulator.h"  // before the kernel bodies: it defines the CUDA names they use
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/cuda/rope_kernels.cuh"
// clang-format on

namespace hp::cuda {
namespace {

using FVec = std::vector<float>;
using DVec = std::vector<double>;

// A host array standing in for device memory: f32 or bf16 storage, filled from floats.
class Data {
 public:
  Data(Elem t, const FVec& v) : t_(t) {
    if (t == Elem::kF32) {
      f_ = v;
    } else {
      b_.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) b_[i] = to_bf16(v[i]);
    }
  }
  void* ptr(int64_t off = 0) {
    return t_ == Elem::kF32 ? static_cast<void*>(f_.data() + off)
                            : static_cast<void*>(b_.data() + off);
  }
  FVec floats(int64_t off = 0) const {
    FVec out;
    if (t_ == Elem::kF32) return FVec(f_.begin() + off, f_.end());
    for (size_t i = static_cast<size_t>(off); i < b_.size(); ++i) out.push_back(to_float(b_[i]));
    return out;
  }

 private:
  Elem t_;
  FVec f_;
  std::vector<bf16> b_;
};

DVec to_d(const FVec& v) { return DVec(v.begin(), v.end()); }
FVec rounded(FVec v, Elem t) {
  if (t == Elem::kBF16) {
    for (float& x : v) x = to_float(to_bf16(x));
  }
  return v;
}

// max|got - ref| / max|ref| <= tol, and every got finite where ref is.
::testing::AssertionResult near(const FVec& got, const DVec& ref, double tol,
                                const std::string& what) {
  double worst = 0, mag = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i]) && !std::isfinite(got[i])) {
      return ::testing::AssertionFailure() << what << ": element " << i << " not finite";
    }
    worst = std::max(worst, std::abs(got[i] - ref[i]));
    mag = std::max(mag, std::abs(ref[i]));
  }
  if (worst / mag > tol) {
    return ::testing::AssertionFailure() << what << ": error " << worst / mag << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult same_bits(const FVec& a, const FVec& b, const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      return ::testing::AssertionFailure()
             << what << ": differs at " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return a.size() == b.size() ? ::testing::AssertionSuccess()
                              : ::testing::AssertionFailure() << what << ": sizes differ";
}

class KernelsEmuTest : public ::testing::TestWithParam<Elem> {
 protected:
  Elem t() const { return GetParam(); }
  double tol(double f32_tol) const { return t() == Elem::kBF16 ? 1.0 / 256 + f32_tol : f32_tol; }
  FVec randn(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    FVec v(n);
    for (float& x : v) x = dist(rng_);
    return rounded(v, t());
  }
  std::vector<int32_t> tokens(size_t n, int32_t vocab) {
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = dist(rng_);
    return v;
  }

  // The embedding backward as embedding.cu runs it: positions, a stable sort (on the host here,
  // standing in for CUB's) and the accumulate kernel.
  void embedding_backward_emu(FVec& dtable, const std::vector<int32_t>& toks, Data& dx, int64_t dim,
                              int64_t begin = 0, int64_t count = INT64_MAX) {
    const int64_t n = static_cast<int64_t>(toks.size());
    std::vector<int32_t> order(n, -1);
    embedding_positions_run(launch_, &errors_, order.data(), toks.data(), n);
    std::vector<int32_t> sorted_order(order);
    std::stable_sort(sorted_order.begin(), sorted_order.end(),
                     [&](int32_t a, int32_t b) { return toks[a] < toks[b]; });
    std::vector<int32_t> sorted_keys(n);
    for (int64_t i = 0; i < n; ++i) sorted_keys[i] = toks[sorted_order[i]];
    embedding_accumulate_run(launch_, t(), dtable.data(), sorted_keys.data(), sorted_order.data(),
                             dx.ptr(), n, dim, begin, count);
  }

  std::mt19937 rng_{12345};
  kemu::EmuLaunch launch_;
  ReferenceMath<double> ref_;
  ReferenceMath<float> ref_f_;
  DeviceErrorRecord errors_{};
};

std::string elem_name(const ::testing::TestParamInfo<Elem>& p) {
  return p.param == Elem::kF32 ? "f32" : "bf16";
}
INSTANTIATE_TEST_SUITE_P(Types, KernelsEmuTest, ::testing::Values(Elem::kF32, Elem::kBF16),
                         elem_name);

// dim 72 and 200 take the vector path, 37 and an offset view the scalar one; 7 rows over 2 SMs
// split unevenly across the backward's 4 blocks.
TEST_P(KernelsEmuTest, RmsNorm) {
  for (auto [rows, dim, off] :
       {std::array<int64_t, 3>{3, 72, 0}, {7, 37, 0}, {5, 200, 0}, {7, 72, 1}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << dim << " offset " << off);
    const FVec x = randn(rows * dim + off), g = randn(dim + off), dy = randn(rows * dim + off);
    Data dx(t(), x), dg(t(), g), ddy(t(), dy), y(t(), FVec(rows * dim + off, NAN));
    FVec rstd(rows, NAN);
    rmsnorm_forward_run(launch_, t(), y.ptr(off), rstd.data(), dx.ptr(off), dg.ptr(off), rows, dim,
                        1e-5f);
    const DVec xd(x.begin() + off, x.end()), gd(g.begin() + off, g.end());
    const DVec dyd(dy.begin() + off, dy.end());
    DVec ry(rows * dim), rr(rows);
    ref_.rmsnorm_forward(ry.data(), rr.data(), xd.data(), gd.data(), rows, dim, 1e-5);
    EXPECT_TRUE(near(y.floats(off), ry, tol(5e-5), "y"));
    EXPECT_TRUE(near(rstd, rr, 5e-5, "rstd"));

    for (bool accumulate : {false, true}) {
      const FVec dx0 = randn(rows * dim + off), dg0 = randn(dim);
      Data out(t(), accumulate ? dx0 : FVec(rows * dim + off, NAN));
      FVec dgain = dg0;
      FVec partial(rmsnorm_backward_grid(2, rows) * dim, NAN);
      rmsnorm_backward_run(launch_, 2, t(), out.ptr(off), dgain.data(), partial.data(),
                           ddy.ptr(off), dx.ptr(off), dg.ptr(off), rstd.data(), rows, dim,
                           accumulate);
      DVec rdx = accumulate ? DVec(dx0.begin() + off, dx0.end()) : DVec(rows * dim, 0.0);
      DVec rdg = to_d(dg0);
      ref_.rmsnorm_backward(rdx.data(), rdg.data(), dyd.data(), xd.data(), gd.data(),
                            to_d(rstd).data(), rows, dim, accumulate);
      EXPECT_TRUE(near(out.floats(off), rdx, tol(5e-5), accumulate ? "dx +=" : "dx ="));
      EXPECT_TRUE(near(dgain, rdg, 5e-5, "dg"));
    }
  }
}

TEST_P(KernelsEmuTest, Rope) {
  const int64_t batch = 2, seq = 5, heads = 3, hd = 8, ld = heads * hd + 3, rows = batch * seq;
  const double theta = 1e4;
  std::vector<float2> table(seq * hd / 2);
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      rope_cos_sin(p, j, hd, theta, &table[p * hd / 2 + j].x, &table[p * hd / 2 + j].y);
    }
  }
  const FVec x = randn(rows * ld);
  Data dx(t(), x);
  for (bool inverse : {false, true}) {
    const FVec before = dx.floats();
    rope_run(launch_, 1, t(), dx.ptr(), table.data(), rows, ld, seq, heads, hd, inverse);
    FVec want = before;
    ref_f_.rope(want.data(), rows, ld, seq, heads, hd, theta, inverse);
    if (t() == Elem::kF32) {
      EXPECT_TRUE(same_bits(dx.floats(), want, "rope"));
    } else {
      EXPECT_TRUE(near(dx.floats(), to_d(want), tol(1e-6), "rope"));
    }
  }
}

// n above one sweep of the grid (16 blocks of 256 threads for one SM) so grid-stride loops wrap,
// plus an odd tail; offset 1 takes the scalar path.
TEST_P(KernelsEmuTest, Elementwise) {
  for (int64_t off : {0, 1}) {
    const int64_t n = 20011;
    SCOPED_TRACE(::testing::Message() << "offset " << off);
    const FVec g = randn(n + off, 2.0f), u = randn(n + off), dh = randn(n + off);
    Data dg_in(t(), g), du_in(t(), u), ddh(t(), dh), h(t(), FVec(n + off, NAN));
    Data dgo(t(), FVec(n + off, NAN)), duo(t(), FVec(n + off, NAN));
    swiglu_forward_run(launch_, 1, t(), h.ptr(off), dg_in.ptr(off), du_in.ptr(off), n);
    swiglu_backward_run(launch_, 1, t(), dgo.ptr(off), duo.ptr(off), ddh.ptr(off), dg_in.ptr(off),
                        du_in.ptr(off), n);
    const DVec gd(g.begin() + off, g.end()), ud(u.begin() + off, u.end());
    const DVec dhd(dh.begin() + off, dh.end());
    DVec rh(n), rdg(n), rdu(n);
    ref_.swiglu_forward(rh.data(), gd.data(), ud.data(), n);
    ref_.swiglu_backward(rdg.data(), rdu.data(), dhd.data(), gd.data(), ud.data(), n);
    EXPECT_TRUE(near(h.floats(off), rh, tol(4e-6), "swiglu h"));
    EXPECT_TRUE(near(dgo.floats(off), rdg, tol(4e-6), "swiglu dg"));
    EXPECT_TRUE(near(duo.floats(off), rdu, tol(4e-6), "swiglu du"));

    Data y(t(), u);
    axpy_run(launch_, 1, t(), y.ptr(off), dg_in.ptr(off), -0.3f, n);
    DVec ry = ud;
    ref_.axpy(ry.data(), gd.data(), -0.3, n);
    EXPECT_TRUE(near(y.floats(off), ry, tol(4e-6), "axpy"));
  }
}

TEST_P(KernelsEmuTest, SumSquares) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{20011}}) {
    for (int64_t off : {0, 1}) {
      const FVec x = randn(n + off);
      Data dx(t(), x);
      std::vector<double> partial(sum_squares_grid(1, n), NAN);
      double out = NAN;
      sum_squares_run(launch_, 1, t(), dx.ptr(off), n, partial.data(), &out);
      long double want = 0;
      for (int64_t i = off; i < n + off; ++i) want += static_cast<long double>(x[i]) * x[i];
      EXPECT_NEAR(out, static_cast<double>(want), 1e-12 * static_cast<double>(want))
          << "n=" << n << " offset " << off;
    }
  }
}

TEST_P(KernelsEmuTest, CrossEntropy) {
  // vocab 200 f32 and 256 take the vector path; 37 and 1001 the scalar one; ld pads some rows.
  for (auto [rows, vocab, pad] :
       {std::array<int64_t, 3>{3, 37, 0}, {2, 200, 0}, {3, 1001, 3}, {2, 256, 8}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << vocab << " pad " << pad);
    const int64_t ld = vocab + pad;
    const FVec logits = randn(rows * ld, 3.0f);
    const std::vector<int32_t> targets = tokens(rows, static_cast<int32_t>(vocab));
    Data dl(t(), logits);
    FVec lse(rows, NAN);
    std::vector<double> row_loss(rows, NAN);
    double loss = 1.5;
    cross_entropy_forward_run(launch_, &errors_, t(), dl.ptr(), ld, targets.data(), rows, vocab,
                              lse.data(), row_loss.data(), &loss);
    DVec rlse(rows);
    const double total = ref_.cross_entropy_forward(to_d(logits).data(), ld, targets.data(), rows,
                                                    vocab, rlse.data());
    EXPECT_TRUE(near(lse, rlse, 1e-5, "lse"));
    EXPECT_NEAR(loss, 1.5 + total, 1e-5 * (1.5 + total));
    Data grad(t(), FVec(rows * ld, NAN));
    cross_entropy_backward_run(launch_, &errors_, t(), grad.ptr(), t(), dl.ptr(), ld, lse.data(),
                               targets.data(), rows, vocab, 0.37f);
    DVec rg(rows * ld, NAN);
    ref_.cross_entropy_backward(rg.data(), to_d(logits).data(), ld, rlse.data(), targets.data(),
                                rows, vocab, 0.37);
    const FVec got = grad.floats();
    FVec got_rows;
    DVec ref_rows;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ld; ++c) {
        if (c >= vocab) {
          EXPECT_TRUE(std::isnan(got[r * ld + c])) << "wrote padding at " << r << "," << c;
          continue;
        }
        got_rows.push_back(got[r * ld + c]);
        ref_rows.push_back(rg[r * ld + c]);
      }
    }
    EXPECT_TRUE(near(got_rows, ref_rows, tol(1e-5), "dlogits"));
  }
  EXPECT_EQ(errors_.code, 0);
  // A target outside the vocabulary: recorded, and that row's loss is NaN.
  const FVec logits = randn(2 * 5);
  Data dl(t(), logits);
  const std::vector<int32_t> bad = {1, 5};
  FVec lse(2, NAN);
  std::vector<double> row_loss(2, NAN);
  double loss = 0;
  cross_entropy_forward_run(launch_, &errors_, t(), dl.ptr(), 5, bad.data(), 2, 5, lse.data(),
                            row_loss.data(), &loss);
  EXPECT_EQ(errors_.code, kErrCrossEntropyTarget);
  EXPECT_EQ(errors_.a, 1);
  EXPECT_EQ(errors_.b, 5);
  EXPECT_EQ(errors_.c, 5);
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_TRUE(std::isfinite(row_loss[0]));
}

// Forward is a copy (bitwise); the backward's positions and accumulate kernels run around a host
// stable sort standing in for CUB's, and must equal the float reference bit for bit.
TEST_P(KernelsEmuTest, Embedding) {
  for (auto [n, vocab, dim] : {std::array<int64_t, 3>{1, 5, 72}, {67, 13, 200}, {300, 7, 37}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " vocab=" << vocab << " dim=" << dim);
    const FVec table = randn(vocab * dim);
    const std::vector<int32_t> toks = tokens(n, static_cast<int32_t>(vocab));
    Data dt(t(), table), x(t(), FVec(n * dim, NAN));
    embedding_forward_run(launch_, 1, &errors_, t(), x.ptr(), toks.data(), dt.ptr(), n, dim);
    FVec want(n * dim);
    ref_f_.embedding_forward(want.data(), toks.data(), table.data(), n, dim);
    EXPECT_TRUE(same_bits(x.floats(), want, "embedding_forward"));

    const FVec dx = randn(n * dim);
    Data ddx(t(), dx);
    FVec dtable = randn(vocab * dim);
    FVec want_dt = dtable;
    ref_f_.embedding_backward(want_dt.data(), toks.data(), dx.data(), n, dim);
    embedding_backward_emu(dtable, toks, ddx, dim);
    EXPECT_TRUE(same_bits(dtable, want_dt, "embedding_backward"));
  }
  EXPECT_EQ(errors_.code, 0);
}

// The vocabulary-parallel forms: a slice's statistics and the combine against the reference's (f64
// on the same inputs), and each slice's dlogits against the reference's columns; tolerances as in
// CrossEntropy above.
TEST_P(KernelsEmuTest, VocabParallelCrossEntropy) {
  for (auto [rows, vocab, nparts] :
       {std::array<int64_t, 3>{3, 48, 3}, {2, 1024, 4}, {4, 74, 2}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << vocab << " in " << nparts << " slices");
    const int64_t count = vocab / nparts;
    const FVec logits = randn(rows * vocab, 3.0f);
    const std::vector<int32_t> targets = tokens(rows, static_cast<int32_t>(vocab));
    FVec parts(2 * rows * nparts, NAN);
    DVec rparts(2 * rows * nparts);
    std::vector<Data> slices;
    for (int64_t p = 0; p < nparts; ++p) {
      FVec cols(rows * count);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < count; ++c) cols[r * count + c] = logits[r * vocab + p * count + c];
      slices.emplace_back(t(), cols);
      const VocabCols v{p * count, count, vocab};
      vocab_cross_entropy_stats_run(launch_, &errors_, t(), slices.back().ptr(), count,
                                    targets.data(), rows, v, parts.data() + 2 * rows * p);
      ref_.vocab_cross_entropy_stats(to_d(cols).data(), count, targets.data(),
                                     VocabSlice{p * count, count, vocab}, rows,
                                     rparts.data() + 2 * rows * p);
    }
    EXPECT_TRUE(near(parts, rparts, 1e-5, "parts"));
    FVec lse(rows, NAN);
    std::vector<double> row_loss(rows, NAN);
    double loss = 1.5;
    vocab_cross_entropy_combine_run(launch_, parts.data(), nparts, rows, lse.data(),
                                    row_loss.data(), &loss);
    DVec rlse(rows);
    const double total = ref_.cross_entropy_forward(to_d(logits).data(), vocab, targets.data(),
                                                    rows, vocab, rlse.data());
    EXPECT_TRUE(near(lse, rlse, 1e-5, "lse"));
    EXPECT_NEAR(loss, 1.5 + total, 1e-5 * (1.5 + total));
    DVec rg(rows * vocab);
    ref_.cross_entropy_backward(rg.data(), to_d(logits).data(), vocab, rlse.data(), targets.data(),
                                rows, vocab, 0.37);
    FVec got_all(rows * vocab);
    for (int64_t p = 0; p < nparts; ++p) {
      Data& s = slices[static_cast<size_t>(p)];
      cross_entropy_backward_run(launch_, &errors_, t(), s.ptr(), t(), s.ptr(), count, lse.data(),
                                 targets.data(), rows, VocabCols{p * count, count, vocab}, 0.37f);
      const FVec got = s.floats();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < count; ++c) got_all[r * vocab + p * count + c] = got[r * count + c];
    }
    EXPECT_TRUE(near(got_all, rg, tol(1e-5), "dlogits"));
  }
  EXPECT_EQ(errors_.code, 0);
}

// A slice's lookups are the table's rows or zeros; its backward adds only its tokens' rows, bit
// for bit the float reference's.
TEST_P(KernelsEmuTest, VocabParallelEmbedding) {
  const int64_t n = 67, vocab = 12, dim = 200, count = 4;
  const FVec table = randn(vocab * dim);
  const std::vector<int32_t> toks = tokens(n, static_cast<int32_t>(vocab));
  const FVec dx = randn(n * dim);
  Data ddx(t(), dx);
  for (int64_t p = 0; p < vocab / count; ++p) {
    SCOPED_TRACE(::testing::Message() << "slice " << p);
    const VocabSlice v{p * count, count, vocab};
    const FVec rows(table.begin() + p * count * dim, table.begin() + (p + 1) * count * dim);
    Data dt(t(), rows), x(t(), FVec(n * dim, NAN));
    embedding_forward_run(launch_, 1, &errors_, t(), x.ptr(), toks.data(), dt.ptr(), n, dim,
                          v.begin, v.count);
    FVec want(n * dim);
    ref_f_.vocab_embedding_forward(want.data(), toks.data(), rows.data(), v, n, dim);
    EXPECT_TRUE(same_bits(x.floats(), want, "vocab_embedding_forward"));

    FVec dtable = randn(count * dim);
    FVec want_dt = dtable;
    ref_f_.vocab_embedding_backward(want_dt.data(), toks.data(), dx.data(), v, n, dim);
    embedding_backward_emu(dtable, toks, ddx, dim, v.begin, v.count);
    EXPECT_TRUE(same_bits(dtable, want_dt, "vocab_embedding_backward"));
  }
  EXPECT_EQ(errors_.code, 0);
}

// Not parameterized by the compute type: master weights are f32; the weight copy is either.
TEST(KernelsEmu, AdamWAndConvert) {
  kemu::EmuLaunch launch;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t off : {0, 1}) {
    const int64_t n = 20011;
    FVec p(n + off), g(n + off), m(n + off), v(n + off);
    for (int64_t i = 0; i < n + off; ++i) {
      p[i] = dist(rng);
      g[i] = 0.1f * dist(rng);
      m[i] = 0.01f * dist(rng);
      v[i] = std::abs(1e-3f * dist(rng));
    }
    AdamWConsts c{};
    const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;
    const int64_t step = 7;
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    c.beta1 = b1;
    c.one_minus_beta1 = 1.0 - b1;
    c.beta2 = b2;
    c.one_minus_beta2 = 1.0 - b2;
    c.shrink = 1.0 - lr * wd;
    c.step_size = lr / bc1;
    c.inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
    c.eps = eps;
    c.grad_scale = scale;
    FVec rp(p.begin() + off, p.end()), rm(m.begin() + off, m.end()), rv(v.begin() + off, v.end());
    const FVec gs(g.begin() + off, g.end());
    ReferenceMath<float>().adamw(rp.data(), gs.data(), rm.data(), rv.data(), n, lr, b1, b2, eps,
                                 wd, step, scale);
    std::vector<bf16> copy(n + off);
    adamw_run(launch, 1, p.data() + off, g.data() + off, m.data() + off, v.data() + off, n, c,
              Elem::kBF16, copy.data() + off);
    EXPECT_TRUE(same_bits(FVec(p.begin() + off, p.end()), rp, "adamw param (bitwise)"));
    EXPECT_TRUE(same_bits(FVec(m.begin() + off, m.end()), rm, "adamw m (bitwise)"));
    EXPECT_TRUE(same_bits(FVec(v.begin() + off, v.end()), rv, "adamw v (bitwise)"));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(copy[i + off].bits, to_bf16(p[i + off]).bits) << i;
    }
    // convert both ways: f32 -> bf16 must be dtype.h's rounding, bf16 -> f32 exact.
    std::vector<bf16> half(n + off);
    convert_run(launch, 1, Elem::kBF16, half.data() + off, Elem::kF32, p.data() + off, n);
    FVec back(n + off, NAN);
    convert_run(launch, 1, Elem::kF32, back.data() + off, Elem::kBF16, half.data() + off, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(half[i + off].bits, to_bf16(p[i + off]).bits) << i;
      ASSERT_EQ(back[i + off], to_float(half[i + off])) << i;
    }
  }
}

TEST(KernelsEmu, ScaleMatrix) {
  kemu::EmuLaunch launch;
  FVec c(6 * 9);
  std::iota(c.begin(), c.end(), 1.0f);
  const FVec before = c;
  scale_matrix_run(launch, 1, Elem::kF32, c.data(), 6, 7, 9, 0.5f);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 9; ++j) {
      EXPECT_EQ(c[i * 9 + j], j < 7 ? 0.5f * before[i * 9 + j] : before[i * 9 + j]);
    }
  }
  FVec nan(6 * 7, NAN);
  scale_matrix_run(launch, 1, Elem::kF32, nan.data(), 6, 7, 7, 0.0f);
  for (float x : nan) EXPECT_EQ(x, 0.0f) << "beta = 0 must not read C";
}

}  // namespace
}  // namespace hp::cuda
