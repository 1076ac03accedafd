// The model in bf16 compute over f32 master weights (Precision::bf16(), reference backend) against
// the same model in fp32: loss and every parameter gradient, reported per tensor as cosine
// similarity and relative error (||g_bf16 - g_fp32|| / ||g_fp32||). And in bf16, as in fp32,
// every split of the model into ops gives bitwise the same loss and gradients.
//
// Tolerances: each bf16 rounding errs by at most 2^-9 = 0.2% of the value; a gradient is the
// result of a few dozen roundings along the layers (activations, their gradients, the weight
// copies) that partly average out. We ask for the loss within 0.1% (a mean over many tokens; we
// measure about 3e-5), and for every gradient tensor a cosine similarity of at least 0.999 and a
// relative error of at most 5% (we measure 0.9997 and 1-2.5%); the values are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cpu_kernels.h"
#include "model_test_util.h"

namespace hp {
namespace {

ModelConfig config() {
  ModelConfig c = test::tiny_config();
  c.hidden = 32;
  c.intermediate = 48;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.vocab = 40;
  return c;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result run(Backend& be, const ModelConfig& cfg, Precision prec, StepOptions so,
           const std::vector<std::vector<Part>>* ops = nullptr, bool split_backward = false) {
  const int64_t B = 2, S = 12;
  const int M = 2;
  Params params(cfg, Params::all_parts(cfg), be, prec);
  test::randomize(params, 4, 0.2);
  Model model(params, ModelOptions{5, 7});
  const TokenBuffer tok =
      test::on_backend(be, test::random_tokens(B * S * M, cfg.vocab, 8), cfg.vocab);
  const TokenBuffer tgt =
      test::on_backend(be, test::random_tokens(B * S * M, cfg.vocab, 9), cfg.vocab);
  Result r;
  if (!ops) {
    r.loss = loss_and_grads(model, tok.data(), tgt.data(), B, S, M, so);
  } else {
    ValueStore store(be, prec);
    test::SplitRun sr{so.recompute, so.transfer, split_backward, false};
    r.loss = test::run_split(model, store, *ops, sr, tok.data(), tgt.data(), B, S, M,
                             [](ValueStore&) {});
    EXPECT_EQ(store.size(), 0u) << store.describe();
  }
  r.grads = params.host_grads<float>();
  return r;
}

TEST(Bf16Model, LossAndGradientsAgreeWithFp32) {
  const ModelConfig cfg = config();
  auto be = make_reference_backend();
  Params layout(cfg, Params::all_parts(cfg), *be);
  for (Recompute policy : {Recompute::kNone, Recompute::kNoAttn}) {
    SCOPED_TRACE(recompute_str(policy));
    const StepOptions so{policy, TransferMode::kWeights};
    const Result f32 = run(*be, cfg, Precision::fp32(), so);
    const Result b16 = run(*be, cfg, Precision::bf16(), so);
    const double loss_err = std::abs(b16.loss - f32.loss) / f32.loss;
    std::printf("bf16 vs fp32 (%s): loss %.6f vs %.6f, relative error %.2e\n",
                recompute_str(policy), b16.loss, f32.loss, loss_err);
    EXPECT_NE(b16.loss, f32.loss) << "the bf16 run computed in fp32";
    EXPECT_LT(loss_err, 1e-3);
    for (const ParamTensor& t : layout.tensors()) {
      double dot = 0, n32 = 0, n16 = 0, diff = 0;
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
        const double a = f32.grads[i], b = b16.grads[i];
        dot += a * b;
        n32 += a * a;
        n16 += b * b;
        diff += (a - b) * (a - b);
      }
      const double cosine = dot / std::sqrt(n32 * n16), rel = std::sqrt(diff / n32);
      std::printf("  %-42s cosine %.6f  relative error %.2e\n", t.name.c_str(), cosine, rel);
      EXPECT_GT(cosine, 0.999) << t.name;
      EXPECT_LT(rel, 0.05) << t.name;
    }
  }
}

// The split invariance of split_test.cc holds in bf16 too: values stay bf16 between parts and
// between ops alike, so where an op boundary falls does not change a bit.
TEST(Bf16Model, EverySplitGivesBitwiseTheSameResult) {
  const ModelConfig cfg = config();
  auto be = make_reference_backend();
  for (Recompute policy : kAllRecompute)
    for (TransferMode tr : {TransferMode::kWeights, TransferMode::kActivations}) {
      const StepOptions so{policy, tr};
      const Result whole = run(*be, cfg, Precision::bf16(), so);
      const int L = static_cast<int>(cfg.layers);
      for (const std::vector<int>& cuts :
           {std::vector<int>{1, 2, 3, 4, 5, 6, 7}, std::vector<int>{3, 5}, std::vector<int>{2, 7}})
        for (bool split : {false, true}) {
          const auto ops = test::split_parts(L, cuts);
          const Result got = run(*be, cfg, Precision::bf16(), so, &ops, split);
          ASSERT_EQ(got.loss, whole.loss) << recompute_str(policy) << " " << transfer_str(tr);
          ASSERT_EQ(0, std::memcmp(got.grads.data(), whole.grads.data(), got.grads.size() * 4))
              << recompute_str(policy) << " " << transfer_str(tr) << " cuts "
              << ::testing::PrintToString(cuts) << " split " << split;
        }
    }
}

// The CPU backend in bf16 (AVX512-BF16: oneDNN GEMMs, our bf16 attention and row kernels)
// against the CPU backend in fp32, with the bounds of LossAndGradientsAgreeWithFp32, and against
// the reference backend in bf16: the two bf16 runs round differently (the CPU attention rounds P
// and dS, the GEMMs accumulate in another order), so they are held to the same bounds, not to bits.
TEST(Bf16Model, CpuBackendAgreesWithFp32AndTheReference) {
  const ModelConfig cfg = config();
  auto be = make_cpu_backend(1);
  if (!be->kernels().supports(Precision::bf16()))
    GTEST_SKIP() << be->name() << " offers no bf16 (it needs AVX512-BF16 and oneDNN)";
  auto ref = make_reference_backend();
  Params layout(cfg, Params::all_parts(cfg), *be);
  for (Recompute policy : {Recompute::kNone, Recompute::kNoAttn}) {
    SCOPED_TRACE(recompute_str(policy));
    const StepOptions so{policy, TransferMode::kWeights};
    const Result f32 = run(*be, cfg, Precision::fp32(), so);
    const Result b16 = run(*be, cfg, Precision::bf16(), so);
    const Result rb16 = run(*ref, cfg, Precision::bf16(), so);
    EXPECT_NE(b16.loss, f32.loss) << "the bf16 run computed in fp32";
    for (const Result* other : {&f32, &rb16}) {
      const char* what = other == &f32 ? "cpu fp32" : "reference bf16";
      const double loss_err = std::abs(b16.loss - other->loss) / std::abs(other->loss);
      std::printf("cpu bf16 vs %s (%s): loss %.6f vs %.6f, relative error %.2e\n", what,
                  recompute_str(policy), b16.loss, other->loss, loss_err);
      EXPECT_LT(loss_err, 1e-3) << what;
      double worst_cos = 1, worst_rel = 0;
      for (const ParamTensor& t : layout.tensors()) {
        double dot = 0, n1 = 0, n2 = 0, diff = 0;
        for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
          const double a = other->grads[i], b = b16.grads[i];
          dot += a * b;
          n1 += a * a;
          n2 += b * b;
          diff += (a - b) * (a - b);
        }
        const double cosine = dot / std::sqrt(n1 * n2), rel = std::sqrt(diff / n1);
        EXPECT_GT(cosine, 0.999) << t.name << " vs " << what;
        EXPECT_LT(rel, 0.05) << t.name << " vs " << what;
        worst_cos = std::min(worst_cos, cosine);
        worst_rel = std::max(worst_rel, rel);
      }
      std::printf("  gradients: worst cosine %.6f, worst relative error %.2e\n", worst_cos,
                  worst_rel);
    }
  }
}

// The split invariance holds on the CPU backend in bf16 as well.
TEST(Bf16Model, CpuBackendSplitsGiveBitwiseTheSameResult) {
  const ModelConfig cfg = config();
  auto be = make_cpu_backend(1);
  if (!be->kernels().supports(Precision::bf16()))
    GTEST_SKIP() << be->name() << " offers no bf16 (it needs AVX512-BF16 and oneDNN)";
  const StepOptions so{Recompute::kNoAttn, TransferMode::kWeights};
  const Result whole = run(*be, cfg, Precision::bf16(), so);
  const auto ops = test::split_parts(static_cast<int>(cfg.layers), {2, 5});
  const Result got = run(*be, cfg, Precision::bf16(), so, &ops, true);
  EXPECT_EQ(got.loss, whole.loss);
  EXPECT_EQ(0, std::memcmp(got.grads.data(), whole.grads.data(), got.grads.size() * 4));
}

// A CPU backend without the bf16 path (an AVX2 or plain AVX-512 one) refuses bf16 parameters.
TEST(Bf16Model, CpuBackendWithoutBf16RefusesIt) {
  const ModelConfig cfg = config();
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_supports(isa)) continue;
    auto be = make_cpu_backend(1, isa);
    EXPECT_FALSE(be->kernels().supports(Precision::bf16()));
    EXPECT_THROW(Params(cfg, Params::all_parts(cfg), *be, Precision::bf16()), Error);
  }
}

// The validator and the simulator count bytes with elem_bytes(precision); the value store
// allocates with value_dtype. Both say, for every kind of value, the same element size.
TEST(Bf16Model, ElemBytesAgreeWithTheStoreTypes) {
  for (const Precision p : {Precision::fp32(), Precision::bf16(), Precision::fp64()}) {
    const ElemBytes eb = elem_bytes(p);
    for (int k = 0; k <= static_cast<int>(ValueKind::kdLogits); ++k) {
      const auto kind = static_cast<ValueKind>(k);
      EXPECT_EQ(eb.of(kind), dtype_bytes(value_dtype(kind, p)))
          << p.name() << " " << Value{kind, 1}.str();
    }
  }
  EXPECT_EQ(elem_bytes(Precision::bf16()), (ElemBytes{2, 4, 4}));
}

}  // namespace
}  // namespace hp
