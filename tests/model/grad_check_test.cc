// Every parameter gradient of the whole model (so every part's backward, and the gradients they
// hand each other) against central finite differences of the loss, in double (Precision::fp64())
// on the reference backend.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "model_test_util.h"

namespace hp {
namespace {

struct GradCase {
  const char* name;
  bool tied;
  TransferMode transfer;
  Recompute policy;
  int64_t mlp_chunk;
  int64_t head_chunk;
};

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, EveryParameterMatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  const ModelConfig cfg = test::tiny_config(c.tied);
  auto be = make_reference_backend();
  Params params(cfg, Params::all_parts(cfg), *be, Precision::fp64());
  test::randomize(params, 7);
  Model model(params, ModelOptions{c.mlp_chunk, c.head_chunk});
  const int64_t B = 2, S = 5;
  const int M = 2;
  const TokenBuffer tokens = test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 11),
                                              cfg.vocab);
  const TokenBuffer targets = test::on_backend(*be, test::random_tokens(B * S * M, cfg.vocab, 12),
                                               cfg.vocab);
  StepOptions so{c.policy, c.transfer};
  params.zero_grad();
  ValueStore store(*be, Precision::fp64());
  const double loss = loss_and_grads(model, tokens.data(), targets.data(), B, S, M, so, &store);
  EXPECT_EQ(store.size(), 0u) << "values left behind: " << store.describe();
  EXPECT_GT(loss, 0.0);
  EXPECT_NEAR(loss, std::log(static_cast<double>(cfg.vocab)), 2.0);  // a sane cross-entropy

  const std::vector<double> grads = params.host_grads<double>();
  std::vector<double> w = params.host_values<double>();
  auto loss_at = [&]() {
    double total = 0;
    for (int j = 0; j < M; ++j)
      total += eval_loss(model, tokens.data() + j * B * S, targets.data() + j * B * S, B, S);
    return total / M;
  };
  EXPECT_NEAR(loss_at(), loss, 1e-12);
  const double eps = 1e-5;
  int checked = 0;
  for (const ParamTensor& t : params.tensors()) {
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      const double w0 = w[t.offset + i];
      w[t.offset + i] = w0 + eps;
      params.set_values(w);
      const double lp = loss_at();
      w[t.offset + i] = w0 - eps;
      params.set_values(w);
      const double lm = loss_at();
      w[t.offset + i] = w0;
      params.set_values(w);
      const double fd = (lp - lm) / (2 * eps);
      max_err = std::max(max_err, std::abs(fd - grads[t.offset + i]));
      max_ref = std::max(max_ref, std::abs(fd));
      ++checked;
    }
    EXPECT_GT(max_ref, 0.0) << t.name << ": zero gradient, the check would be vacuous";
    EXPECT_LT(max_err, 1e-7 * std::max(1.0, max_ref) + 1e-9)
        << c.name << " " << t.name << ": max |fd - analytic| = " << max_err
        << " (max |fd| = " << max_ref << ")";
  }
  EXPECT_EQ(checked, params.size());
}

INSTANTIATE_TEST_SUITE_P(
    Model, GradCheck,
    ::testing::Values(
        GradCase{"untied_weights", false, TransferMode::kWeights, Recompute::kNone, 0, 0},
        GradCase{"tied", true, TransferMode::kWeights, Recompute::kNone, 0, 0},
        GradCase{"activations_full", false, TransferMode::kActivations, Recompute::kFull, 0, 0},
        GradCase{"chunked_noattn", false, TransferMode::kWeights, Recompute::kNoAttn, 3, 4},
        GradCase{"chunked_none", false, TransferMode::kActivations, Recompute::kNone, 4, 3}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace hp
