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
    tok_ = test::on_backend(*be_, test::random_tokens(B * S * M, cfg_.vocab, 21), cfg_.vocab);
    tgt_ = test::on_backend(*be_, test::random_tokens(B * S * M, cfg_.vocab, 22), cfg_.vocab);
  }
  Baseline run_one(const std::vector<std::vector<Part>>& ops, const test::SplitRun& r,
                   int64_t mlp_chunk, int64_t* stash_after_forward = nullptr) {
    Params params(cfg_, Params::all_parts(cfg_), *be_);
    test::randomize(params, 5);
    Model model(params, ModelOptions{mlp_chunk, 4});
    ValueStore store(*be_);
    Baseline out;
    out.loss = test::run_split(model, store, ops, r, tok_.data(), tgt_.data(), B, S, M,
                               [&](ValueStore& s) {
                                 if (stash_after_forward) *stash_after_forward = s.stash_bytes();
                                 // After a forward only stash is left (no value in flight).
                                 for (auto [v, mb] : s.keys())
                                   EXPECT_TRUE(s.is_stashed(v, mb)) << v.str() << " in flight";
                               });
    EXPECT_EQ(store.size(), 0u) << "left behind: " << store.describe();
    EXPECT_EQ(store.stash_bytes(), 0);
    out.grads = params.host_grads<float>();
    return out;
  }
  Baseline reference(int64_t mlp_chunk) {
    Params params(cfg_, Params::all_parts(cfg_), *be_);
    test::randomize(params, 5);
    Model model(params, ModelOptions{mlp_chunk, 4});
    Baseline out;
    out.loss = loss_and_grads(model, tok_.data(), tgt_.data(), B, S, M);
    out.grads = params.host_grads<float>();
    return out;
  }

  static constexpr int64_t B = 1, S = 6;
  static constexpr int M = 2;
  ModelConfig cfg_;
  std::unique_ptr<Backend> be_ = make_reference_backend();
  TokenBuffer tok_, tgt_;
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
      for (Recompute pol : kAllRecompute)
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
    EXPECT_EQ(runs, 128 * 4 * 2 * 4 - 128 * 4);
  }
}

// The stash after a micro-batch's forward is exactly the union of the parts' promised stash
// (values.h forward_stash; attention that starts an op going on to post:l keeps X:l).
TEST_F(SplitTest, StashEqualsThePromisedValues) {
  const int L = static_cast<int>(cfg_.layers);
  for (const auto& cuts : all_cuts(L)) {
    const auto ops = test::split_parts(L, cuts);
    for (Recompute pol : kAllRecompute)
      for (TransferMode tr : {TransferMode::kWeights, TransferMode::kActivations})
        for (bool remote : {false, true}) {
          test::SplitRun r{pol, tr, false, remote};
          std::vector<Value> promised;
          std::vector<Value> values_h;  // values.h alone
          for (const auto& parts : ops) {
            ComputeOp op = test::make_op(Dir::kF, 0, parts, pol);
            auto ctx = test::contexts(op, r);
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
  // per layer: X:l (pre keeps its input), A, O, lse (attn), X:l again is the same value; head X:L+1
  // and, never rerun, rstdf and lsece.
  const int64_t per_layer = (3 * T * h + cfg_.heads * T) * 4;
  EXPECT_EQ(got, L * per_layer + (T * h + 2 * T) * 4);
}

TEST(ValueStoreTest, MarksAndPeaks) {
  auto be = make_reference_backend();
  ValueStore s(*be);
  const Value a{ValueKind::kA, 1}, o{ValueKind::kO, 1};
  const DataPtr pa = s.create(a, 0, 10);
  EXPECT_EQ(pa.dtype, DType::kF32);
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
  const int64_t allocs = be->memory_stats().system_allocations;
  const DataPtr po = s.create(o, 3, 10);  // the freed buffer comes back from the backend's cache
  EXPECT_EQ(po.data, pa.data);
  EXPECT_EQ(be->memory_stats().system_allocations, allocs);
  s.create(a, 3, 7);
  EXPECT_EQ(s.peak_bytes(), 68);
  EXPECT_EQ(be->memory_stats().in_use, 68);
  s.clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(be->memory_stats().in_use, 0);
}

// Each value's type follows the precision: statistics in the stats type, the shipped W_qkv
// gradient in the master type, the rest in the compute type; bytes count the real sizes.
TEST(ValueStoreTest, ValueTypesFollowThePrecision) {
  auto be = make_reference_backend();
  ValueStore s(*be, Precision::bf16());
  EXPECT_EQ(s.create(Value{ValueKind::kX, 1}, 0, 10).dtype, DType::kBF16);
  EXPECT_EQ(s.create(Value{ValueKind::kRstd1, 1}, 0, 10).dtype, DType::kF32);
  EXPECT_EQ(s.create(Value{ValueKind::kLse, 1}, 0, 10).dtype, DType::kF32);
  EXPECT_EQ(s.create(Value{ValueKind::kdW, 1}, 0, 10).dtype, DType::kF32);
  EXPECT_EQ(s.create(Value{ValueKind::kW, 1}, 0, 10).dtype, DType::kBF16);
  EXPECT_EQ(s.bytes(), 2 * 20 + 3 * 40);
  for (ValueKind k : {ValueKind::kLseCE, ValueKind::kRstdF, ValueKind::kRstd2})
    EXPECT_EQ(value_dtype(k, Precision::fp64()), DType::kF64);
  EXPECT_EQ(value_dtype(ValueKind::kdLogits, Precision::bf16()), DType::kBF16);
}

// A second identical step makes no system allocation (values, workspace, loss slots and the
// message-free single-stage step all come back from the backend's cache) and uses the same
// workspace.
TEST(ValueStoreTest, SteadyStateStepsAllocateNothing) {
  const ModelConfig cfg = test::tiny_config();
  auto be = make_reference_backend();
  Params params(cfg, Params::all_parts(cfg), *be);
  params.init(1);
  Model model(params);
  TokenBuffer tok = test::on_backend(*be, test::random_tokens(12, cfg.vocab, 3), cfg.vocab);
  ValueStore store(*be);
  for (Recompute policy : {Recompute::kNone, Recompute::kNoAttn}) {
    StepOptions so{policy, TransferMode::kWeights};
    loss_and_grads(model, tok.data(), tok.data(), 2, 3, 2, so, &store);
    const MemoryStats first = be->memory_stats();
    const int64_t ws = model.workspace_bytes();
    loss_and_grads(model, tok.data(), tok.data(), 2, 3, 2, so, &store);
    EXPECT_EQ(be->memory_stats().system_allocations, first.system_allocations);
    EXPECT_EQ(be->memory_stats().reserved, first.reserved);
    EXPECT_EQ(model.workspace_bytes(), ws);
  }
}

TEST(ParamsTest, HuggingFaceNamesAndShapes) {
  ModelConfig cfg = test::tiny_config();
  auto be = make_reference_backend();
  Params p(cfg, Params::all_parts(cfg), *be);
  const ParamTensor* q = p.find("model.layers.1.self_attn.q_proj.weight");
  const ParamTensor* k = p.find("model.layers.1.self_attn.k_proj.weight");
  const ParamTensor* v = p.find("model.layers.1.self_attn.v_proj.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(k->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(k->offset, q->offset + 64);  // q | k | v back to back form W_qkv
  EXPECT_EQ(v->offset, k->offset + 32);
  EXPECT_EQ(p.at(Slot::kWqkv, 2).data, p.data().at(q->offset).data);
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
  auto be = make_reference_backend();
  Params all(cfg, Params::all_parts(cfg), *be);
  all.init(42);
  Params stage(cfg, {Part::post(1), Part::pre(2), Part::attn(2)}, *be);
  stage.init(42);
  EXPECT_EQ(stage.tensors().size(), 9u);
  const std::vector<float> a = all.host_values<float>(), s = stage.host_values<float>();
  for (const ParamTensor& t : stage.tensors()) {
    const ParamTensor* o = all.find(t.name);
    ASSERT_TRUE(o) << t.name;
    EXPECT_EQ(0, std::memcmp(s.data() + t.offset, a.data() + o->offset, t.numel * 4)) << t.name;
  }
  EXPECT_FALSE(stage.owns(Part::embed()));
  EXPECT_THROW(stage.at(Slot::kEmbed), Error);
  Params other(cfg, Params::all_parts(cfg), *be);
  other.init(43);
  EXPECT_NE(other.host_values<float>(), a);
}

// With bf16 compute the parts read a bf16 copy of the f32 master weights, kept in step with them.
TEST(ParamsTest, Bf16WeightCopyFollowsTheMasterWeights) {
  ModelConfig cfg = test::tiny_config();
  auto be = make_reference_backend();
  Params p(cfg, Params::all_parts(cfg), *be, Precision::bf16());
  EXPECT_EQ(p.data().dtype, DType::kF32);
  EXPECT_EQ(p.grads().dtype, DType::kF32);
  EXPECT_EQ(p.at(Slot::kWqkv, 1).dtype, DType::kBF16);
  EXPECT_EQ(p.grad_at(Slot::kWqkv, 1).dtype, DType::kF32);
  p.init(7);
  const std::vector<float> master = p.host_values<float>();
  std::vector<bf16> copy(static_cast<size_t>(p.size()));
  be->download(copy.data(), p.compute_data().data, p.size() * 2);
  for (int64_t i = 0; i < p.size(); ++i) ASSERT_EQ(copy[i].bits, to_bf16(master[i]).bits) << i;
  Params fp32(cfg, Params::all_parts(cfg), *be);
  EXPECT_EQ(fp32.compute_data().data, fp32.data().data);  // no copy without a weight_copy()
}

TEST(ParamsTest, TiedModelNeedsEmbedWithTheHead) {
  ModelConfig cfg = test::tiny_config(true);
  auto be = make_reference_backend();
  EXPECT_THROW(Params(cfg, {Part::post(2), Part::head()}, *be), Error);
  Params p(cfg, {Part::embed(), Part::head()}, *be);
  EXPECT_FALSE(p.find("lm_head.weight"));
  EXPECT_EQ(p.at(Slot::kLmHead).data, p.at(Slot::kEmbed).data);
}

TEST(ModelTest, BadOpsGiveClearErrors) {
  const ModelConfig cfg = test::tiny_config();
  auto be = make_reference_backend();
  Params params(cfg, {Part::embed(), Part::pre(1)}, *be);
  Model model(params);
  ValueStore store(*be);
  TokenBuffer tok = test::on_backend(*be, test::random_tokens(4, cfg.vocab, 1), cfg.vocab);
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
  // a token outside the vocabulary is caught where the batch goes to the backend
  std::vector<int32_t> bad{1, 2, 99, 3};
  try {
    test::on_backend(*be, bad, cfg.vocab);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 99 at position 2 is outside the vocabulary [0, 11)"),
              std::string::npos)
        << e.what();
  }
  // a store of another precision
  ValueStore bf(*be, Precision::bf16());
  op = test::make_op(Dir::kF, 0, {Part::embed()}, Recompute::kNone);
  EXPECT_THROW(model.run(op, local_contexts(op, Recompute::kNone, TransferMode::kWeights), bf, b),
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
  auto be = make_reference_backend();
  Params params(cfg, Params::all_parts(cfg), *be, Precision::fp64());
  test::randomize(params, 3);
  Model model(params);
  const int64_t B = 2, S = 7, V = cfg.vocab;
  auto tgt = test::random_tokens(B * S, V, 6);
  TokenBuffer tok_b = test::on_backend(*be, test::random_tokens(B * S, V, 5), V);
  TokenBuffer tgt_b = test::on_backend(*be, tgt, V);
  std::vector<double> logits(B * S * V), last(B * V);
  forward_logits(model, tok_b.data(), B, S, logits.data(), false);
  forward_logits(model, tok_b.data(), B, S, last.data(), true);
  std::vector<float> last_f(B * V);  // an f32 sink gets the same values, rounded
  forward_logits(model, tok_b.data(), B, S, last_f.data(), true);
  for (int64_t i = 0; i < B * V; ++i) EXPECT_EQ(last_f[i], static_cast<float>(last[i]));
  double ce = 0;
  for (int64_t t = 0; t < B * S; ++t) {
    const double* row = logits.data() + t * V;
    double mx = *std::max_element(row, row + V), sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(row[c] - mx);
    ce += mx + std::log(sum) - row[tgt[t]];
  }
  ce /= B * S;
  const double ev = eval_loss(model, tok_b.data(), tgt_b.data(), B, S);
  EXPECT_NEAR(ev, ce, 1e-12);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < V; ++c)
      EXPECT_EQ(last[r * V + c], logits[((r + 1) * S - 1) * V + c]);
  for (double g : params.host_grads<double>()) ASSERT_EQ(g, 0.0);
  EXPECT_NEAR(loss_and_grads(model, tok_b.data(), tgt_b.data(), B, S, 1), ev, 1e-12);
}

}  // namespace
}  // namespace hp
