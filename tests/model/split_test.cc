// Every recomputation policy, transfer mode and split of the model into ops (contiguous part
// runs, B or I+W backward, attention local or "remote") gives bitwise the same loss and gradients
// as the single-op run, leaves nothing behind, and keeps exactly the stash it promises.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/kernels.h"
#include "model_test_util.h"
#include "util/error.h"

namespace hp {
namespace {

struct Baseline {
  double loss = 0;
  std::vector<float> grads;
};

class SplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = test::tiny_config();
    cfg_.layers = 2;
    tokens_ = test::random_tokens(B * S * M, cfg_.vocab, 21);
    targets_ = test::random_tokens(B * S * M, cfg_.vocab, 22);
  }
  Baseline run_one(const std::vector<std::vector<Part>>& ops, const test::SplitRun& r,
                   int64_t mlp_chunk, int64_t* stash_after_forward = nullptr) {
    auto kern = make_reference_kernels<float>();
    Params params(cfg_, Params::all_parts(cfg_));
    test::randomize(params, 5);
    Model model(cfg_, *kern, params, ModelOptions{mlp_chunk, 4});
    ValueStore store;
    Baseline out;
    out.loss = test::run_split(model, store, ops, r, tokens_.data(), targets_.data(), B, S, M,
                               [&](ValueStore& s) {
                                 if (stash_after_forward) *stash_after_forward = s.stash_bytes();
                                 // After a forward only stash is left (no value in flight).
                                 for (auto [v, mb] : s.keys())
                                   EXPECT_TRUE(s.is_stashed(v, mb)) << v.str() << " in flight";
                               });
    EXPECT_EQ(store.size(), 0u) << "left behind: " << store.describe();
    EXPECT_EQ(store.stash_bytes(), 0);
    out.grads.assign(params.grads(), params.grads() + params.size());
    return out;
  }
  Baseline reference(int64_t mlp_chunk) {
    auto kern = make_reference_kernels<float>();
    Params params(cfg_, Params::all_parts(cfg_));
    test::randomize(params, 5);
    Model model(cfg_, *kern, params, ModelOptions{mlp_chunk, 4});
    Baseline out;
    out.loss = loss_and_grads(model, tokens_.data(), targets_.data(), B, S, M);
    out.grads.assign(params.grads(), params.grads() + params.size());
    return out;
  }

  static constexpr int64_t B = 1, S = 6;
  static constexpr int M = 2;
  ModelConfig cfg_;
  std::vector<int32_t> tokens_, targets_;
};

// All ways to cut the 8 parts of a 2-layer model (embed pre attn post pre attn post head) into
// contiguous ops: 2^7 = 128 cut sets.
std::vector<std::vector<int>> all_cuts(int layers) {
  const int n = 3 * layers + 2;
  std::vector<std::vector<int>> out;
  for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
    std::vector<int> cuts;
    for (int i = 1; i < n; ++i)
      if (mask & (1 << (i - 1))) cuts.push_back(i);
    out.push_back(cuts);
  }
  return out;
}

TEST_F(SplitTest, EverySplitPolicyAndModeMatchesTheSingleOpRunBitwise) {
  for (int64_t chunk : {int64_t{0}, int64_t{4}}) {
    const Baseline ref = reference(chunk);
    int runs = 0;
    for (const auto& cuts : all_cuts(static_cast<int>(cfg_.layers))) {
      const auto ops = test::split_parts(static_cast<int>(cfg_.layers), cuts);
      for (Recompute pol : {Recompute::kNone, Recompute::kFull, Recompute::kNoAttn})
        for (TransferMode tr : {TransferMode::kWeights, TransferMode::kActivations})
          for (bool split : {false, true})
            for (bool remote : {false, true}) {
              // The lowering refuses I/W of a remote attention in weights mode; so do we.
              if (split && remote && tr == TransferMode::kWeights) continue;
              test::SplitRun r{pol, tr, split, remote};
              Baseline got = run_one(ops, r, chunk);
              ASSERT_EQ(got.loss, ref.loss) << "cuts " << ::testing::PrintToString(cuts)
                                            << " policy " << recompute_str(pol);
              ASSERT_EQ(0, std::memcmp(got.grads.data(), ref.grads.data(),
                                       ref.grads.size() * sizeof(float)))
                  << "gradients differ: cuts " << ::testing::PrintToString(cuts) << " policy "
                  << recompute_str(pol) << " transfer " << transfer_str(tr) << " split " << split
                  << " remote " << remote << " chunk " << chunk;
              ++runs;
            }
    }
    EXPECT_EQ(runs, 128 * 3 * 2 * 4 - 128 * 3);
  }
}

// The stash after a micro-batch's forward is exactly the union of the parts' promised stash
// (values.h forward_stash; attention that starts an op going on to post:l keeps X:l).
TEST_F(SplitTest, StashEqualsThePromisedValues) {
  const int L = static_cast<int>(cfg_.layers);
  for (const auto& cuts : all_cuts(L)) {
    const auto ops = test::split_parts(L, cuts);
    for (Recompute pol : {Recompute::kNone, Recompute::kFull, Recompute::kNoAttn})
      for (TransferMode tr : {TransferMode::kWeights, TransferMode::kActivations})
        for (bool remote : {false, true}) {
          test::SplitRun r{pol, tr, false, remote};
          std::vector<Value> promised;
          std::vector<Value> values_h;  // values.h alone
          for (const auto& parts : ops) {
            ComputeOp op = test::make_op(Dir::kF, 0, parts, pol);
            auto ctx = test::contexts<float>(op, r);
            for (size_t i = 0; i < parts.size(); ++i) {
              for (const Value& v : part_stash(op, i, ctx[i], L))
                if (std::find(promised.begin(), promised.end(), v) == promised.end())
                  promised.push_back(v);
              for (const Value& v : forward_stash(parts[i], ctx[i], L))
                if (std::find(values_h.begin(), values_h.end(), v) == values_h.end())
                  values_h.push_back(v);
            }
          }
          const int64_t expect = values_bytes(promised, cfg_, B * S);
          int64_t got = -1;
          run_one(ops, r, 0, &got);
          ASSERT_EQ(got, expect) << "cuts " << ::testing::PrintToString(cuts) << " policy "
                                 << recompute_str(pol) << " transfer " << transfer_str(tr);
          // values.h's table (with feeds_next_in_op) says the same.
          EXPECT_EQ(got, values_bytes(values_h, cfg_, B * S));
        }
  }
}

// HelixPipe's recomputation without attention on a one-op-per-part split: per layer A + O at the
// attention, X + O at the post chunk; O counted once (docs/memory.md).
TEST_F(SplitTest, NoAttnStashPerLayerIsAPlusOPlusX) {
  const int L = static_cast<int>(cfg_.layers);
  std::vector<int> cuts;
  for (int i = 1; i <= 3 * L + 1; ++i) cuts.push_back(i);
  int64_t got = -1;
  run_one(test::split_parts(L, cuts), test::SplitRun{Recompute::kNoAttn, TransferMode::kWeights},
          0, &got);
  const int64_t T = B * S, h = cfg_.hidden;
  // per layer: X:l (pre keeps its input), A, O, lse (attn), X:l again is the same value; head X:L+1.
  const int64_t per_layer = (3 * T * h + cfg_.heads * T) * 4;
  EXPECT_EQ(got, L * per_layer + T * h * 4);
}

TEST(ValueStoreTest, MarksPoolAndPeaks) {
  ValueStore s;
  const Value a{ValueKind::kA, 1}, o{ValueKind::kO, 1};
  float* pa = s.create(a, 0, 10);
  EXPECT_EQ(s.bytes(), 40);
  EXPECT_THROW(s.create(a, 0, 10), Error);
  EXPECT_THROW(s.get(o, 0), Error);
  s.keep(a, 0);
  s.keep(a, 0);  // two keepers
  EXPECT_EQ(s.stash_bytes(), 40);
  s.release(a, 0);
  EXPECT_TRUE(s.contains(a, 0));
  s.unkeep(a, 0);
  EXPECT_TRUE(s.contains(a, 0));
  s.unkeep(a, 0);
  EXPECT_FALSE(s.contains(a, 0));
  EXPECT_EQ(s.bytes(), 0);
  EXPECT_EQ(s.stash_bytes(), 0);
  EXPECT_EQ(s.peak_bytes(), 40);
  EXPECT_EQ(s.peak_stash_bytes(), 40);
  float* po = s.create(o, 3, 10);  // same size: the pooled buffer comes back
  EXPECT_EQ(po, pa);
  EXPECT_EQ(s.allocations(), 1);
  s.create(a, 3, 7);
  EXPECT_EQ(s.allocations(), 2);
  EXPECT_EQ(s.peak_bytes(), 68);
  s.clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.pool_bytes(), 68);
}

TEST(ValueStoreTest, SteadyStateStepsAllocateNothing) {
  const ModelConfig cfg = test::tiny_config();
  auto kern = make_reference_kernels<float>();
  Params params(cfg, Params::all_parts(cfg));
  params.init(1);
  Model model(cfg, *kern, params);
  auto tok = test::random_tokens(12, cfg.vocab, 3);
  ValueStore store;
  loss_and_grads(model, tok.data(), tok.data(), 2, 3, 2, {}, &store);
  const int64_t allocs = store.allocations();
  const int64_t ws = model.workspace_bytes();
  loss_and_grads(model, tok.data(), tok.data(), 2, 3, 2, {}, &store);
  EXPECT_EQ(store.allocations(), allocs);
  EXPECT_EQ(model.workspace_bytes(), ws);
}

TEST(ParamsTest, HuggingFaceNamesAndShapes) {
  ModelConfig cfg = test::tiny_config();
  Params p(cfg, Params::all_parts(cfg));
  const ParamTensor* q = p.find("model.layers.1.self_attn.q_proj.weight");
  const ParamTensor* k = p.find("model.layers.1.self_attn.k_proj.weight");
  const ParamTensor* v = p.find("model.layers.1.self_attn.v_proj.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(k->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(k->offset, q->offset + 64);  // q | k | v back to back form W_qkv
  EXPECT_EQ(v->offset, k->offset + 32);
  EXPECT_EQ(p.at(Slot::kWqkv, 2), p.data() + q->offset);
  EXPECT_TRUE(p.find("lm_head.weight"));
  EXPECT_TRUE(p.find("model.norm.weight"));
  EXPECT_EQ(p.size(), cfg.params_total());
  EXPECT_THROW(p.param("model.layers.2.mlp.up_proj.weight"), Error);
  EXPECT_EQ(p.find("model.layers.0.input_layernorm.weight")->decay, false);
  EXPECT_EQ(p.find("model.layers.0.mlp.down_proj.weight")->shape,
            (std::vector<int64_t>{8, 12}));
}

TEST(ParamsTest, InitIsTheSameWhateverTheStageSplit) {
  ModelConfig cfg = test::tiny_config();
  Params all(cfg, Params::all_parts(cfg));
  all.init(42);
  Params stage(cfg, {Part::post(1), Part::pre(2), Part::attn(2)});
  stage.init(42);
  EXPECT_EQ(stage.tensors().size(), 9u);
  for (const ParamTensor& t : stage.tensors()) {
    const ParamTensor* o = all.find(t.name);
    ASSERT_TRUE(o) << t.name;
    EXPECT_EQ(0, std::memcmp(stage.data() + t.offset, all.data() + o->offset, t.numel * 4)) << t.name;
  }
  EXPECT_FALSE(stage.owns(Part::embed()));
  EXPECT_THROW(stage.at(Slot::kEmbed), Error);
  Params other(cfg, Params::all_parts(cfg));
  other.init(43);
  EXPECT_NE(0, std::memcmp(other.data(), all.data(), 64));
}

TEST(ParamsTest, TiedModelNeedsEmbedWithTheHead) {
  ModelConfig cfg = test::tiny_config(true);
  EXPECT_THROW(Params(cfg, {Part::post(2), Part::head()}), Error);
  Params p(cfg, {Part::embed(), Part::head()});
  EXPECT_FALSE(p.find("lm_head.weight"));
  EXPECT_EQ(p.at(Slot::kLmHead), p.at(Slot::kEmbed));
}

TEST(ModelTest, BadOpsGiveClearErrors) {
  const ModelConfig cfg = test::tiny_config();
  auto kern = make_reference_kernels<float>();
  Params params(cfg, {Part::embed(), Part::pre(1)});
  Model model(cfg, *kern, params);
  ValueStore store;
  auto tok = test::random_tokens(4, cfg.vocab, 1);
  Batch b{tok.data(), tok.data(), 1, 4, 0.25};
  // attn:1 without its input in the store
  ComputeOp op = test::make_op(Dir::kF, 0, {Part::attn(1)}, Recompute::kNone);
  try {
    model.run(op, local_contexts(op, Recompute::kNone, TransferMode::kWeights), store, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs A:1"), std::string::npos) << e.what();
  }
  // a part this stage does not hold
  op = test::make_op(Dir::kF, 0, {Part::post(1)}, Recompute::kNone);
  EXPECT_THROW(model.run(op, local_contexts(op, Recompute::kNone, TransferMode::kWeights), store, b),
               Error);
  // not contiguous
  op = test::make_op(Dir::kF, 0, {Part::embed(), Part::attn(1)}, Recompute::kNone);
  EXPECT_THROW(model.run(op, local_contexts(op, Recompute::kNone, TransferMode::kWeights), store, b),
               Error);
  // a token outside the vocabulary
  std::vector<int32_t> bad{1, 2, 99, 3};
  Batch bb{bad.data(), bad.data(), 1, 4, 0.25};
  op = test::make_op(Dir::kF, 0, {Part::embed()}, Recompute::kNone);
  EXPECT_THROW(model.run(op, local_contexts(op, Recompute::kNone, TransferMode::kWeights), store, bb),
               Error);
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

// forward_logits: every position's logits give eval_loss's cross-entropy; last_only picks the last
// row of each sequence; eval_loss equals the loss of a training step and leaves no gradient.
TEST(ModelTest, LogitsAndEvalAgreeWithTheTrainingLoss) {
  const ModelConfig cfg = test::tiny_config();
  auto kern = make_reference_kernels<double>();
  ParamsT<double> params(cfg, ParamsT<double>::all_parts(cfg));
  test::randomize(params, 3);
  ModelT<double> model(cfg, *kern, params);
  const int64_t B = 2, S = 7, V = cfg.vocab;
  auto tok = test::random_tokens(B * S, V, 5), tgt = test::random_tokens(B * S, V, 6);
  std::vector<double> logits(B * S * V), last(B * V);
  forward_logits(model, tok.data(), B, S, logits.data(), false);
  forward_logits(model, tok.data(), B, S, last.data(), true);
  double ce = 0;
  for (int64_t t = 0; t < B * S; ++t) {
    const double* row = logits.data() + t * V;
    double mx = *std::max_element(row, row + V), sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(row[c] - mx);
    ce += mx + std::log(sum) - row[tgt[t]];
  }
  ce /= B * S;
  const double ev = eval_loss(model, tok.data(), tgt.data(), B, S);
  EXPECT_NEAR(ev, ce, 1e-12);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < V; ++c)
      EXPECT_EQ(last[r * V + c], logits[((r + 1) * S - 1) * V + c]);
  for (int64_t i = 0; i < params.size(); ++i) ASSERT_EQ(params.grads()[i], 0.0);
  EXPECT_NEAR(loss_and_grads(model, tok.data(), tgt.data(), B, S, 1), ev, 1e-12);
}

}  // namespace
}  // namespace hp
