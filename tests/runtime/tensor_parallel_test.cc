// Tensor + sequence parallelism in the model (model/tensor_parallel.h, runtime/tp_group.h): a
// group of T ranks on threads (LocalComm), each holding its blocks of the weights, gives the
// single-process loss and gradients, for every recomputation policy, transfer mode, split of the
// model into ops, split backward and MLP chunking.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "../model/model_test_util.h"
#include "comm/local_comm.h"
#include "kernels/backend.h"
#include "model/tensor_parallel.h"
#include "runtime/tp_group.h"
#include "util/error.h"

namespace hp {
namespace {

using test::SplitRun;

// Untied, grouped-query attention (8 query heads over 4 key/value heads): T = 2 and T = 4 divide
// the heads, the key/value heads, the MLP width and the vocabulary.
ModelConfig gqa_config() {
  ModelConfig c;
  c.name = "tp-test";
  c.hidden = 32;
  c.intermediate = 48;
  c.heads = 8;
  c.kv_heads = 4;
  c.layers = 2;
  c.vocab = 40;
  c.tie_embeddings = false;
  return c;
}

constexpr int64_t kBatch = 2, kSeq = 8;
constexpr int kMicro = 2;

// Where and how a run computes: fp64 on the reference backend checks the math to rounding; fp32
// on the CPU backend with the default initialization is what a user runs.
struct RunSetup {
  bool fp64 = true;
  std::unique_ptr<Backend> backend() const {
    return fp64 ? make_reference_backend() : make_cpu_backend(1);
  }
  Precision precision() const { return fp64 ? Precision::fp64() : Precision::fp32(); }
  void fill(Params& p) const {
    if (fp64) {
      test::randomize(p, 7);  // norm gains away from 1, larger weights: every term matters
    } else {
      p.init(7);
    }
  }
};

struct Result {
  double loss = 0;
  std::vector<double> rank_losses;  // parallel(): every rank's loss (all the same bits)
  std::vector<double> grads;  // whole tensors, in the single-process arena layout
};

// The whole model on one rank, the reference.
Result single(const RunSetup& s, const ModelConfig& cfg, const SplitRun& run,
              const std::vector<std::vector<Part>>& ops, ModelOptions opt) {
  auto be = s.backend();
  Params p(cfg, Params::all_parts(cfg), *be, s.precision());
  s.fill(p);
  Model m(p, opt);
  const auto tok = test::random_tokens(kBatch * kSeq * kMicro, cfg.vocab, 1);
  const auto tgt = test::random_tokens(kBatch * kSeq * kMicro, cfg.vocab, 2);
  TokenBuffer tb = test::on_backend(*be, tok, cfg.vocab), gb = test::on_backend(*be, tgt, cfg.vocab);
  ValueStore st(*be, p.precision());
  Result r;
  r.loss = test::run_split(m, st, ops, run, tb.data(), gb.data(), kBatch, kSeq, kMicro,
                           [](ValueStore&) {});
  r.grads = p.host_grads<double>();
  return r;
}

// The same on a group of `tp` ranks; each rank's gradient blocks are put back into whole tensors.
Result parallel(const RunSetup& s, const ModelConfig& cfg, int tp, const SplitRun& run,
                const std::vector<std::vector<Part>>& ops, ModelOptions opt) {
  LocalWorld world(tp);
  Result r;
  std::mutex mu;
  world.run([&](Comm& comm) {
    auto be = s.backend();
    Params whole(cfg, Params::all_parts(cfg), *be, s.precision());
    s.fill(whole);
    const TpShard shard{comm.rank(), comm.size()};
    Params p(cfg, Params::all_parts(cfg), *be, s.precision(), shard);
    p.copy_from(whole);
    CommTpGroup group(comm, *be);
    Model m(p, opt, &group);
    const auto tok = test::random_tokens(kBatch * kSeq * kMicro, cfg.vocab, 1);
    const auto tgt = test::random_tokens(kBatch * kSeq * kMicro, cfg.vocab, 2);
    TokenBuffer tb = test::on_backend(*be, tok, cfg.vocab),
                gb = test::on_backend(*be, tgt, cfg.vocab);
    ValueStore st(*be, p.precision());
    const double loss = test::run_split(m, st, ops, run, tb.data(), gb.data(), kBatch, kSeq, kMicro,
                                        [](ValueStore&) {});
    reduce_replicated_grads(p, group);
    const std::vector<double> mine = p.host_grads<double>();
    std::lock_guard<std::mutex> lock(mu);
    if (r.grads.empty()) r.grads.assign(static_cast<size_t>(whole.size()), 0.0);
    for (const ParamTensor& t : p.tensors()) {
      // Replicated tensors: every rank holds the same reduced gradient; rank 0's is kept.
      if (t.split_dim < 0 && shard.rank != 0) continue;
      place_shard(t, shard, mine.data() + t.offset, r.grads.data() + whole.tensor(t.name).offset);
    }
    if (shard.rank == 0) r.loss = loss;
    r.rank_losses.push_back(loss);
  });
  for (double l : r.rank_losses) EXPECT_EQ(l, r.loss) << "a rank's loss differs from rank 0's";
  return r;
}

// Per tensor: max |a - b| <= rel * max |a|.
void expect_close(const ModelConfig& cfg, const Result& ref, const Result& got, double rel,
                  const std::string& label) {
  auto be = make_reference_backend();
  Params layout(cfg, Params::all_parts(cfg), *be);
  EXPECT_NEAR(got.loss, ref.loss, rel * std::abs(ref.loss)) << label;
  ASSERT_EQ(got.grads.size(), ref.grads.size()) << label;
  for (const ParamTensor& t : layout.tensors()) {
    double mx = 0, diff = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      mx = std::max(mx, std::abs(ref.grads[static_cast<size_t>(i)]));
      diff = std::max(diff, std::abs(ref.grads[static_cast<size_t>(i)] - got.grads[static_cast<size_t>(i)]));
    }
    EXPECT_GT(mx, 0) << label << ": " << t.name << " has no gradient";
    EXPECT_LE(diff, rel * mx) << label << ": " << t.name << " max diff " << diff << ", max " << mx;
  }
}

std::string describe(int tp, const SplitRun& r, int64_t chunk) {
  return "T=" + std::to_string(tp) + " " + recompute_str(r.policy) + " " +
         (r.transfer == TransferMode::kWeights ? "weights" : "activations") +
         (r.split_backward ? " I/W" : " B") + (r.remote_attn ? " remote-attn" : "") +
         " mlp_chunk=" + std::to_string(chunk);
}

// Runs every case of the grid through single() and parallel() and compares them; returns the
// number of cases run.
int compare_grid(const RunSetup& s, const std::vector<int>& groups,
                 const std::vector<Recompute>& policies, const std::vector<bool>& splits,
                 double rel, const ModelConfig& cfg = gqa_config()) {
  const int L = static_cast<int>(cfg.layers);
  // Each layer split as HelixPipe splits it ([pre] [attn] [post]) and as one op per layer.
  const auto helix_ops = test::split_parts(L, {1, 2, 3, 4, 5, 6, 7});
  const auto layer_ops = test::split_parts(L, {1, 4, 7});
  int cases = 0;
  for (int tp : groups) {
    for (Recompute policy : policies) {
      for (TransferMode mode : {TransferMode::kWeights, TransferMode::kActivations}) {
        for (bool split : splits) {
          SplitRun run;
          run.policy = policy;
          run.transfer = mode;
          run.split_backward = split;
          run.remote_attn = mode == TransferMode::kWeights && !split;
          const auto& ops = run.remote_attn ? helix_ops : layer_ops;
          for (int64_t chunk : {int64_t{0}, int64_t{5}}) {
            ModelOptions opt;
            opt.mlp_chunk = chunk;
            opt.head_chunk = 3;
            const Result ref = single(s, cfg, run, ops, opt);
            const Result got = parallel(s, cfg, tp, run, ops, opt);
            expect_close(cfg, ref, got, rel, describe(tp, run, chunk));
            ++cases;
          }
        }
      }
    }
  }
  return cases;
}

// The math, to rounding: fp64, weights far from their initialization, every combination.
TEST(TensorParallelTest, GroupGivesTheSingleProcessGradientsToRoundingInFp64) {
  const int cases =
      compare_grid(RunSetup{true}, {2, 4},
                   {Recompute::kNone, Recompute::kFull, Recompute::kNoAttn, Recompute::kSelective},
                   {false, true}, 1e-12);
  EXPECT_EQ(cases, 64);
}

// What a user runs: fp32 on the CPU backend from the default initialization, within 1e-6 of the
// single process (the sums over the group run in another order than the single process's GEMMs).
TEST(TensorParallelTest, GroupGivesTheSingleProcessGradientsWithin1e6InFp32) {
  const int cases = compare_grid(RunSetup{false}, {2, 4}, {Recompute::kNone, Recompute::kNoAttn},
                                 {false, true}, 1e-6);
  EXPECT_EQ(cases, 32);
}

// A tied LM head is the embedding table: one vocabulary-parallel tensor that both parts use, its
// gradient the sum of both parts' on each slice.
TEST(TensorParallelTest, TiedEmbeddingIsVocabularyParallelInBothParts) {
  ModelConfig cfg = gqa_config();
  cfg.tie_embeddings = true;
  const int cases = compare_grid(RunSetup{true}, {2, 4}, {Recompute::kNoAttn}, {false, true}, 1e-12,
                                 cfg);
  EXPECT_EQ(cases, 16);
}

TEST(TensorParallelTest, ShardsInitToBlocksOfTheWholeModel) {
  const ModelConfig cfg = gqa_config();
  auto be = make_cpu_backend(1);
  Params whole(cfg, Params::all_parts(cfg), *be);
  whole.init(11);
  const std::vector<double> w = whole.host_values<double>();
  for (int r = 0; r < 4; ++r) {
    Params p(cfg, Params::all_parts(cfg), *be, Precision::fp32(), {r, 4});
    p.init(11);
    const std::vector<double> v = p.host_values<double>();
    for (const ParamTensor& t : p.tensors()) {
      const ParamTensor& f = whole.tensor(t.name);
      std::vector<double> block(static_cast<size_t>(t.numel));
      cut_shard(t, p.tp(), w.data() + f.offset, block.data());
      for (int64_t i = 0; i < t.numel; ++i)
        ASSERT_EQ(v[static_cast<size_t>(t.offset + i)], block[static_cast<size_t>(i)]) << t.name;
    }
    EXPECT_EQ(p.tensor("model.layers.0.self_attn.q_proj.weight").shape,
              (std::vector<int64_t>{8, 32}));
    EXPECT_EQ(p.tensor("model.layers.0.self_attn.k_proj.weight").shape,
              (std::vector<int64_t>{4, 32}));
    EXPECT_EQ(p.tensor("model.layers.0.self_attn.o_proj.weight").shape,
              (std::vector<int64_t>{32, 8}));
    EXPECT_EQ(p.tensor("model.layers.0.mlp.down_proj.weight").shape,
              (std::vector<int64_t>{32, 12}));
    EXPECT_EQ(p.tensor("lm_head.weight").shape, (std::vector<int64_t>{10, 32}));
    EXPECT_EQ(p.tensor("model.embed_tokens.weight").shape, (std::vector<int64_t>{10, 32}));
    EXPECT_EQ(p.tensor("model.norm.weight").shape, (std::vector<int64_t>{32}));
  }
}

TEST(TensorParallelTest, GroupSizeMustDivideHeadsKvHeadsMlpAndVocabulary) {
  ModelConfig cfg = gqa_config();
  auto be = make_cpu_backend(1);
  try {
    Params p(cfg, Params::all_parts(cfg), *be, Precision::fp32(), {0, 3});
    FAIL() << "a group of 3 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a tensor-parallel group of 3 must divide its 8 attention heads, 4 key/value "
                     "heads, MLP width 48, vocabulary of 40"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("groups that work: 1, 2, 4"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hp
