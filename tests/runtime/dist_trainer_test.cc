
// DistTrainer, the pipelined training run `train` uses under mpirun, on in-process ranks
// (LocalWorld) against the single-process Trainer on the same data file. GPipe accumulates in the
// single process's order, so without clipping its losses, weights and the saved optimizer state
// are bitwise equal; HelixPipe with two data-parallel replicas and clipping follows within
// rounding, and a checkpoint the single process saved resumes in the pipeline as it would there.
// With tensor parallelism (two ranks per stage) the same holds within rounding, and the saved
// checkpoint holds whole tensors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <vector>

#include "comm/local_comm.h"
#include "data/token_file.h"
#include "kernels/backend.h"
#include "runtime/dist_trainer.h"
#include "runtime/trainer.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "util/atomic_file.h"
#include "util/rng.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

ModelConfig cfg4() {
  ModelConfig c;
  c.hidden = 16;
  c.intermediate = 24;
  c.heads = 2;
  c.kv_heads = 1;
  c.layers = 4;
  c.vocab = 64;
  return c;
}

class DistTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hp_dist_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Rng rng(5);
    std::vector<int32_t> toks(3000);
    for (auto& t : toks) t = static_cast<int32_t>(rng.uniform() * 64) % 64;
    write_token_file(path("d.tok"), toks, TokenDType::kUint8, 64);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  static TrainState fresh(double clip) {
    TrainState s;
    s.seed = 4;
    s.lr.peak = 1e-2;
    s.lr.warmup = 1;
    s.lr.total = 20;
    s.lr.min_ratio = 0.1;
    s.clip = clip;
    return s;
  }

  // The single process: `steps` steps of the whole global batch, then a save into `dir`.
  std::vector<double> single(const TrainState& st, const StepShape& global, int steps,
                             const std::string& dir, const std::string& resume = "") {
    const ModelConfig cfg = cfg_;
    auto be = make_reference_backend();
    Params params(cfg, Params::all_parts(cfg), *be);
    TrainState state = st;
    if (resume.empty()) {
      params.init(st.seed);
    } else {
      const CheckpointInfo info = open_checkpoint(resume);
      load_checkpoint_params(info, params);
      state = TrainState::from_json(*info.trainer_state, resume);
    }
    Trainer t(cfg, params, {}, global, state);
    if (!resume.empty()) t.load_optimizer(*open_checkpoint(resume).optimizer_path);
    const TokenSource src = TokenSource::open(path("d.tok"));
    const SequenceReader reader(src, global.seq_len, cfg.vocab);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(t.step(reader).loss);
    t.save(dir);
    return losses;
  }

  // D x P x T ranks of `name`, each replica's step `shape`; the same steps, then a save.
  std::vector<double> pipelined(const std::string& name, int D, int P, int folds,
                                const TrainState& st, const StepShape& shape, int steps,
                                const std::string& dir, const std::string& resume = "",
                                int T = 1) {
    const ModelConfig cfg = cfg_;
    Schedule sch = generate(ScheduleSpec{name, P, static_cast<int>(shape.microbatches),
                                         static_cast<int>(cfg.layers), folds, 1, std::nullopt});
    lower(sch, &cfg, shape.microbatch_size * shape.seq_len);
    std::vector<double> losses;
    std::mutex mu;
    LocalWorld world(D * P * T);
    world.run([&](Comm& comm) {
      auto be = make_reference_backend();
      TrainState state = st;
      std::optional<CheckpointInfo> info;
      if (!resume.empty()) {
        info = open_checkpoint(resume);
        state = TrainState::from_json(*info->trainer_state, resume);
      }
      DistTrainer t(comm, sch, D, cfg, *be, shape, {}, Precision::fp32(), state, T);
      if (info) {
        t.load_params(*info);
        t.load_optimizer(*info->optimizer_path);
      } else {
        t.init_params();
      }
      const TokenSource src = TokenSource::open(path("d.tok"));
      const SequenceReader reader(src, shape.seq_len, cfg.vocab);
      for (int s = 0; s < steps; ++s) {
        const StepRecord r = t.step(reader);
        std::lock_guard<std::mutex> lock(mu);
        if (comm.rank() == 0) losses.push_back(r.loss);
      }
      t.save(dir);
    });
    return losses;
  }

  // Every tensor of two safetensors files agrees within `rel` of its largest magnitude.
  static void expect_close_files(const std::string& a_path, const std::string& b_path,
                                 double rel) {
    const auto a = SafetensorsReader::open(a_path);
    const auto b = SafetensorsReader::open(b_path);
    ASSERT_EQ(a.tensors().size(), b.tensors().size()) << a_path;
    for (const StTensorInfo& t : a.tensors()) {
      std::vector<float> x(static_cast<size_t>(t.numel())), y(x.size());
      a.read_f32(t.name, t.shape, x.data());
      b.read_f32(t.name, t.shape, y.data());
      double err = 0, mx = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        err = std::max(err, std::abs(double(x[i]) - y[i]));
        mx = std::max(mx, std::abs(double(x[i])));
      }
      EXPECT_LE(err, rel * mx) << a_path << ": " << t.name;
    }
  }

  ModelConfig cfg_ = cfg4();
  fs::path dir_;
};

TEST_F(DistTrainerTest, GpipeIsBitwiseTheSingleProcess) {
  StepShape shape;
  shape.seq_len = 12;
  shape.microbatch_size = 2;
  shape.microbatches = 3;
  const TrainState st = fresh(/*clip=*/0);  // the norm's summation order differs across stages
  const auto want = single(st, shape, 4, path("one"));
  const auto got = pipelined("gpipe", 1, 2, 1, st, shape, 4, path("two"));
  EXPECT_EQ(got, want);
  for (const char* f : {"/model.safetensors", "/optimizer.safetensors", "/config.json"})
    EXPECT_EQ(read_file(path("two") + f), read_file(path("one") + f)) << f;
  const auto state = nlohmann::json::parse(read_file(path("two") + "/trainer_state.json"));
  EXPECT_EQ(state["step"], 4);
  EXPECT_EQ(state["data"]["next_sequence"], 4 * 6);
  EXPECT_EQ(state["data"]["microbatches"], 3);
  EXPECT_EQ(state["loss_history"].size(), 4u);
}

TEST_F(DistTrainerTest, HelixWithReplicasFollowsAndResumesTheSingleProcess) {
  StepShape replica;
  replica.seq_len = 12;
  replica.microbatches = 2;
  replica.recompute = Recompute::kNoAttn;
  StepShape global = replica;
  global.microbatches = 4;  // D = 2 replicas of 2
  const TrainState st = fresh(/*clip=*/0.5);
  const auto want = single(st, global, 3, path("one"));
  const auto got = pipelined("helix", 2, 2, 2, st, replica, 3, path("two"));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "step " << i + 1;
  // Both continue from the single process's checkpoint for two more steps.
  const auto want2 = single(st, global, 2, path("one_b"), path("one"));
  const auto got2 = pipelined("helix", 2, 2, 2, st, replica, 2, path("two_b"), path("one"));
  ASSERT_EQ(got2.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got2[i], want2[i], 1e-6 * want2[i]);
  expect_close_files(path("one_b") + "/model.safetensors", path("two_b") + "/model.safetensors",
                     1e-5);
}

// Two tensor-parallel ranks per stage (two key/value heads, so T = 2 divides every split), with
// replicas and clipping: the losses follow the single process, the checkpoint (gathered from the
// blocks) holds the same whole weights and moments, and a resume cuts them again.
TEST_F(DistTrainerTest, TensorParallelStagesFollowAndResumeTheSingleProcess) {
  cfg_.kv_heads = 2;
  StepShape replica;
  replica.seq_len = 12;
  replica.microbatches = 2;
  replica.recompute = Recompute::kNoAttn;
  StepShape global = replica;
  global.microbatches = 4;  // D = 2 replicas of 2
  const TrainState st = fresh(/*clip=*/0.5);
  const auto want = single(st, global, 3, path("one"));
  const auto got = pipelined("helix", 2, 2, 2, st, replica, 3, path("two"), "", /*T=*/2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "step " << i + 1;
  // The row-parallel products add T partial sums, so gradients differ from the single process in
  // the last bits (the grad CLI tests hold them within 1e-6). AdamW divides each element by its own
  // root mean square, so an element whose gradient is near eps (1e-8) turns that rounding into a
  // weight change up to ~1e3 times larger: measured 2e-4 of the largest weight after three steps
  // at lr 1e-2. A block gathered into the wrong place would be off by the weights themselves.
  const double adam_rounding = 1e-3;
  expect_close_files(path("one") + "/model.safetensors", path("two") + "/model.safetensors",
                     adam_rounding);
  expect_close_files(path("one") + "/optimizer.safetensors",
                     path("two") + "/optimizer.safetensors", adam_rounding);
  // Resumed from the single process's checkpoint, and 1F1B with T = 2 from the pipeline's.
  const auto want2 = single(st, global, 2, path("one_b"), path("one"));
  const auto got2 = pipelined("helix", 2, 2, 2, st, replica, 2, path("two_b"), path("one"), 2);
  ASSERT_EQ(got2.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got2[i], want2[i], 1e-6 * want2[i]);
  expect_close_files(path("one_b") + "/model.safetensors", path("two_b") + "/model.safetensors",
                     adam_rounding);
  const auto got3 = pipelined("1f1b", 1, 2, 1, st, global, 2, path("two_c"), path("two"), 2);
  ASSERT_EQ(got3.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got3[i], want2[i], 1e-5 * want2[i]);
}

}  // namespace
}  // namespace hp
