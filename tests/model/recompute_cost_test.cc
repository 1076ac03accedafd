// What a recomputation costs, counted in GEMM FLOPs: under no-attn a backward op redoes exactly the
// forward work its backward needs, once. The post part's recomputation keeps G and U for the op's
// backward (which would otherwise multiply them out again) and, when no later recomputed part
// reads its output X:l+1, skips the down projection.
#include <gtest/gtest.h>

#include "forwarding_backend.h"
#include "model_test_util.h"

namespace hp {
namespace {

// The reference kernels, counting 2*M*N*K per GEMM while `on`.
class CountingKernels : public test::ForwardingKernels {
 public:
  using ForwardingKernels::ForwardingKernels;
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, ConstDataPtr A,
            int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
            int64_t ldc) override {
    if (on) flops += 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    ForwardingKernels::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void attention_forward(const AttnShape& sh, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                         DataPtr o, DataPtr lse) override {
    if (on) ++attn_forwards;
    ForwardingKernels::attention_forward(sh, q, k, v, o, lse);
  }
  bool on = false;
  double flops = 0;
  int attn_forwards = 0;
};

struct OpWork {
  std::vector<double> flops;       // GEMM FLOPs of each op's I
  std::vector<int> attn_forwards;  // attention forward calls in each op's I
};

// GEMM FLOPs of the I op of each op in `ops` (one micro-batch, split backward) under `policy`.
OpWork i_op_work(const ModelConfig& cfg, const std::vector<std::vector<Part>>& ops,
                 Recompute policy, int64_t S) {
  auto ref = make_reference_backend();
  CountingKernels k(ref->kernels());
  test::ForwardingBackend be(*ref, k);
  Params params(cfg, Params::all_parts(cfg), be);
  test::randomize(params, 3);
  Model model(params, ModelOptions{4, 4});  // MLP chunks of 4 rows: several chunks
  ValueStore store(be);
  const TokenBuffer tokens = test::on_backend(be, test::random_tokens(S, cfg.vocab, 1), cfg.vocab);
  const TokenBuffer targets = test::on_backend(be, test::random_tokens(S, cfg.vocab, 2), cfg.vocab);
  Batch b{tokens.data(), targets.data(), 1, S, 1.0 / static_cast<double>(S)};
  test::SplitRun r;
  r.policy = policy;
  for (const auto& parts : ops) {
    ComputeOp op = test::make_op(Dir::kF, 0, parts, policy);
    model.run(op, test::contexts(op, r), store, b);
  }
  OpWork out{std::vector<double>(ops.size(), 0.0), std::vector<int>(ops.size(), 0)};
  for (size_t i = ops.size(); i-- > 0;) {
    ComputeOp iop = test::make_op(Dir::kI, 0, ops[i], policy);
    k.flops = 0;
    k.attn_forwards = 0;
    k.on = true;
    model.run(iop, test::contexts(iop, r), store, b);
    k.on = false;
    out.flops[i] = k.flops;
    out.attn_forwards[i] = k.attn_forwards;
    ComputeOp wop = test::make_op(Dir::kW, 0, ops[i], policy);
    model.run(wop, test::contexts(wop, r), store, b);
  }
  EXPECT_EQ(store.size(), 0u) << store.describe();
  return out;
}

TEST(RecomputeCost, NoAttnRedoesOnlyTheForwardTheBackwardNeeds) {
  ModelConfig cfg = test::tiny_config();
  cfg.layers = 2;
  const int64_t S = 10;
  // [embed pre:1 attn:1] [post:1 pre:2] [attn:2] [post:2] [head]: post:1 is followed by a
  // recomputed pre:2 (which reads X:2), post:2 is the last recomputed part of its op.
  const auto ops = test::split_parts(2, {3, 5, 6, 7});
  const auto none = i_op_work(cfg, ops, Recompute::kNone, S).flops;
  const OpWork noattn_work = i_op_work(cfg, ops, Recompute::kNoAttn, S);
  const auto& noattn = noattn_work.flops;
  EXPECT_EQ(noattn_work.attn_forwards, std::vector<int>(5, 0));  // attention is never rerun
  const double T = static_cast<double>(S), h = static_cast<double>(cfg.hidden),
               f = static_cast<double>(cfg.intermediate);
  const double wo = 2 * T * h * h, gate_up = 2 * 2 * T * h * f, down = 2 * T * f * h;
  // post:1 then pre:2 (no GEMM): the whole post forward once, G and U not multiplied again.
  EXPECT_DOUBLE_EQ(noattn[1] - none[1], wo + gate_up + down);
  // post:2 alone: W_o and G, U; the down projection (X:3, read by nobody) is skipped.
  EXPECT_DOUBLE_EQ(noattn[3] - none[3], wo + gate_up);
  // head alone: not rerun; it kept rstdf and lsece, and its backward's logits pass is its only one.
  EXPECT_DOUBLE_EQ(noattn[4], none[4]);
}

// Megatron-LM's selective recomputation, the other way round: only attention is rerun in the
// backward, once per layer, and in weights mode with it the W_qkv projection the attn part owns
// (2*T*h*q); every other part's backward does exactly the work it does without recomputation.
TEST(RecomputeCost, SelectiveRedoesOnlyTheAttention) {
  ModelConfig cfg = test::tiny_config();
  cfg.layers = 2;
  const int64_t S = 10;
  const auto ops = test::split_parts(2, {3, 5, 6, 7});  // as above: attn:1 in op 0, attn:2 in op 2
  const auto none = i_op_work(cfg, ops, Recompute::kNone, S);
  const auto sel = i_op_work(cfg, ops, Recompute::kSelective, S);
  EXPECT_EQ(none.attn_forwards, std::vector<int>(5, 0));
  EXPECT_EQ(sel.attn_forwards, (std::vector<int>{1, 0, 1, 0, 0}));
  const double qkv = 2.0 * S * cfg.hidden * cfg.qkv_dim();
  EXPECT_DOUBLE_EQ(sel.flops[0] - none.flops[0], qkv);
  EXPECT_DOUBLE_EQ(sel.flops[2] - none.flops[2], qkv);
  for (int i : {1, 3, 4}) EXPECT_DOUBLE_EQ(sel.flops[i], none.flops[i]) << "op " << i;
}

}  // namespace
}  // namespace hp
