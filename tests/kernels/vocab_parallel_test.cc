// The vocabulary-parallel kernels (Kernels::vocab_*) against the same backend's whole-vocabulary
// kernels: the vocabulary cut into 1 to 4 slices, each slice's statistics combined, must give the
// whole cross-entropy (lse per row, loss, dlogits column by column), and the slices' embedding
// lookups summed / their table gradients put side by side must give the whole lookup / gradient.
// Backends: the reference (f64, f32, bf16) and the CPU kernels (f32, and bf16 where the CPU has
// AVX512-BF16).
//
// Tolerances (max |slice - whole| / max |whole| over an output): f64 1e-12. f32: the combine forms
// the log-sum-exp of the slices' log-sum-exps in f64, the whole kernel in one f32 pass over up to
// 1000 logits, so lse and the loss differ by f32 rounding of a long sum: 2e-6; dlogits
// exp(x - lse) inherits that lse difference: 2e-6. bf16: dlogits are rounded to bf16 (8 bits),
// and an lse differing in its last f32 bit can move an element across a rounding boundary: one
// bf16 step, 2^-8 of the element, at most 4e-3 of the largest. The embedding is bitwise in every
// type (row copies, zero rows, and the same additions in the same order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/kernels.h"
#include "util/error.h"

namespace hp {
namespace {

struct Case {
  std::string name;
  bool cpu;     // the CPU kernels, else the reference
  DType dtype;  // of logits, tables and dx
  double tol, tol_grad;
};

std::vector<Case> cases() {
  std::vector<Case> v = {{"reference_f64", false, DType::kF64, 1e-12, 1e-12},
                         {"reference_f32", false, DType::kF32, 2e-6, 2e-6},
                         {"reference_bf16", false, DType::kBF16, 2e-6, 4e-3},
                         {"cpu_f32", true, DType::kF32, 2e-6, 2e-6}};
  if (make_cpu_kernels(1)->supports(Precision::bf16()))
    v.push_back({"cpu_bf16", true, DType::kBF16, 2e-6, 4e-3});
  return v;
}

// Host storage of one type, filled from and read back as doubles.
class Mat {
 public:
  Mat(DType t, int64_t n) : t_(t), bytes_(static_cast<size_t>(n * dtype_bytes(t))) {}
  Mat(DType t, const std::vector<double>& v) : Mat(t, static_cast<int64_t>(v.size())) {
    for (size_t i = 0; i < v.size(); ++i) set(static_cast<int64_t>(i), v[i]);
  }
  DataPtr ptr(int64_t off = 0) { return DataPtr(bytes_.data() + off * dtype_bytes(t_), t_); }
  double get(int64_t i) const {
    const char* p = bytes_.data() + i * dtype_bytes(t_);
    switch (t_) {
      case DType::kF64: return *reinterpret_cast<const double*>(p);
      case DType::kF32: return *reinterpret_cast<const float*>(p);
      default: return to_float(*reinterpret_cast<const bf16*>(p));
    }
  }
  void set(int64_t i, double x) {
    char* p = bytes_.data() + i * dtype_bytes(t_);
    switch (t_) {
      case DType::kF64: *reinterpret_cast<double*>(p) = x; break;
      case DType::kF32: *reinterpret_cast<float*>(p) = static_cast<float>(x); break;
      default: *reinterpret_cast<bf16*>(p) = to_bf16(static_cast<float>(x)); break;
    }
  }

 private:
  DType t_;
  std::vector<char> bytes_;
};

std::vector<double> randn(int64_t n, uint32_t seed, double scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

DType stats_of(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }
DType master_of(DType t) { return t == DType::kBF16 ? DType::kF32 : t; }

class VocabParallelKernels : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Kernels> k_ = GetParam().cpu ? make_cpu_kernels(2) : make_reference_kernels();
  DType t_ = GetParam().dtype;
};

TEST_P(VocabParallelKernels, SlicesCombineToTheWholeCrossEntropy) {
  const int64_t rows = 5;
  for (int64_t vocab : {12, 1000}) {
    const std::vector<double> x = randn(rows * vocab, 3 + static_cast<uint32_t>(vocab), 3.0);
    std::vector<int32_t> targets(rows);
    for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 7919 + 5) % vocab);
    Mat logits(t_, x), lse(stats_of(t_), rows), dl(t_, rows * vocab);
    double loss = 0.5;  // the kernels add to it
    k_->cross_entropy_forward(logits.ptr(), vocab, targets.data(), rows, vocab, lse.ptr(), &loss);
    k_->cross_entropy_backward(dl.ptr(), logits.ptr(), vocab, lse.ptr(), targets.data(), rows,
                               vocab, 0.25);
    double dl_mag = 0;
    for (int64_t i = 0; i < rows * vocab; ++i) dl_mag = std::max(dl_mag, std::abs(dl.get(i)));
    for (int64_t nparts : {1, 2, 3, 4}) {
      if (vocab % nparts != 0) continue;
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " in " << nparts << " slices");
      const int64_t count = vocab / nparts, ld = count + 3;  // padded rows: ld is honoured
      Mat parts(stats_of(t_), 2 * rows * nparts);
      std::vector<Mat> slices;
      for (int64_t p = 0; p < nparts; ++p) {
        Mat s(t_, rows * ld);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < count; ++c) s.set(r * ld + c, logits.get(r * vocab + p * count + c));
        k_->vocab_cross_entropy_stats(s.ptr(), ld, targets.data(), {p * count, count, vocab}, rows,
                                      parts.ptr(2 * rows * p));
        slices.push_back(std::move(s));
      }
      Mat lse_s(stats_of(t_), rows);
      double loss_s = 0.5;
      k_->vocab_cross_entropy_combine(parts.ptr(), nparts, rows, lse_s.ptr(), &loss_s);
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(lse_s.get(r), lse.get(r), GetParam().tol * std::abs(lse.get(r))) << "row " << r;
      EXPECT_NEAR(loss_s, loss, GetParam().tol * std::abs(loss));
      double worst = 0;
      for (int64_t p = 0; p < nparts; ++p) {
        Mat& s = slices[static_cast<size_t>(p)];  // in place, as the model runs it
        k_->vocab_cross_entropy_backward(s.ptr(), s.ptr(), ld, lse_s.ptr(), targets.data(),
                                         {p * count, count, vocab}, rows, 0.25);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < count; ++c)
            worst = std::max(worst, std::abs(s.get(r * ld + c) - dl.get(r * vocab + p * count + c)));
      }
      EXPECT_LE(worst, GetParam().tol_grad * dl_mag);
    }
  }
}

TEST_P(VocabParallelKernels, SlicesSumToTheWholeEmbedding) {
  const int64_t vocab = 12, dim = 40, n = 30;
  const std::vector<double> table = randn(vocab * dim, 11, 1.0), dx = randn(n * dim, 12, 1.0),
                            g0 = randn(vocab * dim, 13, 1.0);
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 5 + i / 7) % vocab);
  Mat tab(t_, table), x(t_, n * dim), d(t_, dx), grad(master_of(t_), g0);
  k_->embedding_forward(x.ptr(), tokens.data(), tab.ptr(), n, dim);
  k_->embedding_backward(grad.ptr(), tokens.data(), d.ptr(), n, dim);
  for (int64_t nparts : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << nparts << " slices");
    const int64_t count = vocab / nparts;
    std::vector<double> sum(static_cast<size_t>(n * dim), 0.0);
    for (int64_t p = 0; p < nparts; ++p) {
      const VocabSlice v{p * count, count, vocab};
      Mat st(t_, count * dim), xs(t_, n * dim), gs(master_of(t_), count * dim);
      for (int64_t i = 0; i < count * dim; ++i) {
        st.set(i, tab.get(p * count * dim + i));
        gs.set(i, g0[static_cast<size_t>(p * count * dim + i)]);
      }
      k_->vocab_embedding_forward(xs.ptr(), tokens.data(), st.ptr(), v, n, dim);
      for (int64_t i = 0; i < n * dim; ++i) {
        if (!v.holds(tokens[i / dim])) {
          ASSERT_EQ(xs.get(i), 0.0) << "a row of another slice";
        }
        sum[static_cast<size_t>(i)] += xs.get(i);
      }
      k_->vocab_embedding_backward(gs.ptr(), tokens.data(), d.ptr(), v, n, dim);
      for (int64_t i = 0; i < count * dim; ++i)
        ASSERT_EQ(gs.get(i), grad.get(p * count * dim + i)) << "table gradient element " << i;
    }
    for (int64_t i = 0; i < n * dim; ++i) ASSERT_EQ(sum[static_cast<size_t>(i)], x.get(i));
  }
}

TEST_P(VocabParallelKernels, IdsOutsideTheWholeVocabularyAreRefused) {
  const int64_t rows = 2, count = 4;
  Mat logits(t_, randn(rows * count, 5, 1.0)), parts(stats_of(t_), 2 * rows), x(t_, rows * 8),
      table(t_, randn(count * 8, 6, 1.0));
  const std::vector<int32_t> bad = {1, 12};  // the vocabulary is 8 ids
  EXPECT_THROW(k_->vocab_cross_entropy_stats(logits.ptr(), count, bad.data(), {4, count, 8}, rows,
                                             parts.ptr()),
               Error);
  EXPECT_THROW(k_->vocab_embedding_forward(x.ptr(), bad.data(), table.ptr(), {4, count, 8}, rows,
                                           8),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, VocabParallelKernels, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace hp
