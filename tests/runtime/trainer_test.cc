// The single-process Trainer: one step against a hand-written reference (clip + AdamW + LR on the
// model's own gradient), resume through a checkpoint bit for bit, data position and wrap-around.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "data/batching.h"
#include "data/token_file.h"
#include "runtime/trainer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

ModelConfig small_cfg() {
  ModelConfig c;
  c.hidden = 16;
  c.intermediate = 24;
  c.heads = 2;
  c.kv_heads = 1;
  c.layers = 2;
  c.vocab = 64;
  return c;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hp_trainer_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Rng rng(3);
    std::vector<int32_t> toks(2000);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(rng.uniform() * 5)) % 64);
    write_token_file(path("d.tok"), toks, TokenDType::kUint8, 64);
    be_ = make_cpu_backend(1);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  TrainState fresh_state(int64_t total) const {
    TrainState s;
    s.lr.peak = 1e-2;
    s.lr.warmup = 2;
    s.lr.total = total;
    s.lr.min_ratio = 0.1;
    s.clip = 0.05;  // small enough that every step clips
    s.adamw.weight_decay = 0.1;
    return s;
  }

  fs::path dir_;
  std::unique_ptr<Backend> be_;
};

TEST_F(TrainerTest, OneStepMatchesHandReference) {
  const ModelConfig cfg = small_cfg();
  const TokenSource src = TokenSource::open(path("d.tok"));
  StepShape shape{.seq_len = 12, .microbatch_size = 2, .microbatches = 3};
  const SequenceReader reader(src, shape.seq_len, cfg.vocab);
  Params params(cfg, Params::all_parts(cfg), *be_);
  params.init(1);
  // Reference gradient from the model on the first B*M sequences.
  Params ref(cfg, Params::all_parts(cfg), *be_);
  ref.init(1);
  {
    Model m(ref);
    std::vector<int32_t> tok, tgt;
    read_step_batch(reader, 0, shape, false, tok, tgt);
    TokenBuffer tok_b, tgt_b;
    tok_b.upload(*be_, tok, cfg.vocab, "token");
    tgt_b.upload(*be_, tgt, cfg.vocab, "target");
    ref.zero_grad();
    loss_and_grads(m, tok_b.data(), tgt_b.data(), shape.microbatch_size, shape.seq_len,
                   static_cast<int>(shape.microbatches));
  }
  const std::vector<float> ref_w = ref.host_values<float>(), ref_g = ref.host_grads<float>();
  double sq = 0;
  for (float g : ref_g) sq += static_cast<double>(g) * g;
  const double norm = std::sqrt(sq);
  const TrainState st0 = fresh_state(10);
  const double scale = st0.clip / norm;
  ASSERT_LT(scale, 1.0);
  const double lr = 1e-2 * 1 / 2.0;  // warmup 2: step 1 uses half the peak
  Trainer tr(cfg, params, {}, shape, st0);
  const StepRecord r = tr.step(reader);
  EXPECT_NEAR(r.grad_norm, norm, 1e-12 * norm);
  EXPECT_DOUBLE_EQ(r.lr, lr);
  EXPECT_EQ(tr.state().step, 1);
  EXPECT_EQ(tr.state().next_sequence, 6);
  EXPECT_EQ(tr.state().tokens_seen, 72);
  // AdamW step 1 by hand: m = (1-b1) g, v = (1-b2) g^2, bias-corrected, decoupled decay on matrices.
  const double b1 = st0.adamw.beta1, b2 = st0.adamw.beta2, eps = st0.adamw.eps;
  const std::vector<float> got = params.host_values<float>();
  for (const ParamTensor& t : ref.tensors()) {
    const double decay = t.shape.size() >= 2 ? st0.adamw.weight_decay : 0.0;
    for (int64_t i = 0; i < t.numel; i += 7) {
      const double p0 = ref_w[t.offset + i];
      const double g = ref_g[t.offset + i] * scale;
      const double mhat = (1 - b1) * g / (1 - b1), vhat = (1 - b2) * g * g / (1 - b2);
      const double want = p0 * (1 - lr * decay) - lr * mhat / (std::sqrt(vhat) + eps);
      EXPECT_NEAR(got[t.offset + i], want, 1e-6 * (std::fabs(want) + 1e-3)) << t.name << " " << i;
    }
  }
}

TEST_F(TrainerTest, ResumeThroughCheckpointIsBitwise) {
  const ModelConfig cfg = small_cfg();
  const TokenSource src = TokenSource::open(path("d.tok"));
  StepShape shape{.seq_len = 16, .microbatch_size = 3, .microbatches = 2};
  const SequenceReader reader(src, shape.seq_len, cfg.vocab);
  ASSERT_EQ(reader.sequences(), 124);  // (2000 - 1) / 16, so 30 steps of 6 sequences wrap once
  Params a(cfg, Params::all_parts(cfg), *be_);
  a.init(4);
  Trainer ta(cfg, a, {}, shape, fresh_state(30));
  ta.step(reader);
  ta.step(reader);  // the optimizer's moments are allocated in the first step
  const int64_t allocations = be_->memory_stats().system_allocations;
  EXPECT_GT(allocations, 0);
  for (int i = 2; i < 30; ++i) ta.step(reader);  // 180 sequences: wraps around the data
  // Steady state: values, workspace, tokens and moments all come back from the cache.
  EXPECT_EQ(be_->memory_stats().system_allocations, allocations);
  EXPECT_EQ(ta.state().next_sequence, 180);

  Params b(cfg, Params::all_parts(cfg), *be_);
  b.init(4);
  {
    Trainer tb(cfg, b, {}, shape, fresh_state(30));
    for (int i = 0; i < 13; ++i) tb.step(reader);
    tb.save(path("ck"));
  }
  const CheckpointInfo info = open_checkpoint(path("ck"));
  ASSERT_TRUE(info.trainer_state && info.optimizer_path);
  const TrainState saved = TrainState::from_json(*info.trainer_state, "ck");
  EXPECT_EQ(saved.step, 13);
  EXPECT_EQ(saved.microbatch_size, 3);
  EXPECT_EQ(saved.microbatches, 2);
  Params c(cfg, Params::all_parts(cfg), *be_);
  load_checkpoint_params(info, c);
  Trainer tc(cfg, c, {}, shape, saved);
  tc.load_optimizer(*info.optimizer_path);
  for (int i = 13; i < 30; ++i) tc.step(reader);
  ASSERT_EQ(tc.state().history.size(), 30u);
  for (size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(tc.state().history[i].loss, ta.state().history[i].loss) << i;
    EXPECT_EQ(tc.state().history[i].grad_norm, ta.state().history[i].grad_norm) << i;
  }
  EXPECT_EQ(a.host_values<float>(), c.host_values<float>());
}

TEST_F(TrainerTest, FlopsCountMatchesFormula) {
  ModelConfig cfg = small_cfg();
  StepShape shape{.seq_len = 100, .microbatch_size = 2, .microbatches = 1};
  // Per token: 6 x (per-layer matrices + LM head) + 6 s h per layer for causal attention.
  const double per_layer = 16.0 * (16 + 2 * 8) + 16.0 * 16 + 3.0 * 16 * 24;
  const double want = 200.0 * (6.0 * (2 * per_layer + 64.0 * 16) + 6.0 * 100 * 16 * 2);
  EXPECT_DOUBLE_EQ(train_step_flops(cfg, shape), want);
}

TEST_F(TrainerTest, DivergenceIsReported) {
  const ModelConfig cfg = small_cfg();
  const TokenSource src = TokenSource::open(path("d.tok"));
  StepShape shape{.seq_len = 8};
  const SequenceReader reader(src, shape.seq_len, cfg.vocab);
  Params p(cfg, Params::all_parts(cfg), *be_);
  p.init(1);
  std::vector<float> w = p.host_values<float>();
  w[p.tensor("model.norm.weight").offset] = std::nanf("");
  p.set_values(w);
  Trainer t(cfg, p, {}, shape, fresh_state(5));
  try {
    t.step(reader);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hp
