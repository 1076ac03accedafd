// The memory estimate against what the backend really allocates: two training steps of the
// single-process trainer and of pipeline stages on in-process ranks, under every recomputation
// policy, with and without a chunked MLP; and the check's refusal message and its limit sources.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/local_comm.h"
#include "data/batching.h"
#include "data/token_file.h"
#include "runtime/dist_trainer.h"
#include "runtime/memory_check.h"
#include "runtime/trainer.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "util/error.h"
#include "util/rng.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

ModelConfig test_cfg() {
  ModelConfig c;
  c.hidden = 64;
  c.intermediate = 176;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 4;
  c.vocab = 256;
  return c;
}

// The estimate is meant to be within this factor of the measured peak either way.
constexpr double kWithin = 1.25;

class MemoryCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hp_memcheck_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Rng rng(5);
    std::vector<int32_t> toks(40000);
    for (auto& t : toks) t = static_cast<int32_t>(rng.uniform() * 256) % 256;
    write_token_file(path("d.tok"), toks, TokenDType::kUint8, 256);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  static TrainState state() {
    TrainState s;
    s.lr.peak = 1e-3;
    s.lr.total = 10;
    return s;
  }

  fs::path dir_;
};

TEST_F(MemoryCheckTest, SingleProcessEstimateIsNearTheMeasuredPeak) {
  const ModelConfig cfg = test_cfg();
  const TokenSource src = TokenSource::open(path("d.tok"));
  for (Recompute rc : {Recompute::kNone, Recompute::kNoAttn, Recompute::kFull}) {
    for (int64_t chunk : {int64_t{0}, int64_t{128}}) {
      SCOPED_TRACE(fmt::format("recompute {} mlp_chunk {}", recompute_str(rc), chunk));
      StepShape shape{.seq_len = 512, .microbatch_size = 2, .microbatches = 2, .recompute = rc};
      auto be = make_cpu_backend(1);
      const SequenceReader reader(src, shape.seq_len, cfg.vocab);
      Params params(cfg, Params::all_parts(cfg), *be);
      params.init(1);
      ModelOptions mo;
      mo.mlp_chunk = chunk;
      Trainer trainer(cfg, params, mo, shape, state());
      trainer.step(reader);
      trainer.step(reader);
      const double measured = static_cast<double>(be->memory_stats().peak);
      MemoryShape ms;
      ms.tokens_per_mb = shape.microbatch_size * shape.seq_len;
      ms.mlp_chunk = chunk;
      const MemoryEstimate est = estimate_single_process_memory(cfg, rc, ms);
      const double ratio = static_cast<double>(est.total()) / measured;
      EXPECT_GT(ratio, 1 / kWithin) << est.describe() << " vs measured " << measured;
      EXPECT_LT(ratio, kWithin) << est.describe() << " vs measured " << measured;
      // The model states are exact: f32 weights, gradients and two moments per parameter.
      EXPECT_EQ(est.weights, cfg.params_total() * 4);
      EXPECT_EQ(est.optimizer, cfg.params_total() * 8);
      std::printf("single process, recompute %-7s chunk %4lld: estimate %.2f MiB, measured %.2f "
                  "MiB (%.3f)\n",
                  recompute_str(rc), static_cast<long long>(chunk),
                  static_cast<double>(est.total()) / (1 << 20), measured / (1 << 20), ratio);
    }
  }
}

TEST_F(MemoryCheckTest, PipelineStageEstimateIsNearEachRanksMeasuredPeak) {
  const ModelConfig cfg = test_cfg();
  const StepShape shape{.seq_len = 512, .microbatch_size = 1, .microbatches = 4};
  struct Case {
    const char* name;
    int folds;
  };
  for (const Case c : {Case{"1f1b", 1}, Case{"zb1p", 1}, Case{"helix", 2}}) {
    SCOPED_TRACE(c.name);
    const int P = 2;
    Schedule sch = generate(ScheduleSpec{c.name, P, static_cast<int>(shape.microbatches),
                                         static_cast<int>(cfg.layers), c.folds, 1, std::nullopt});
    lower(sch, &cfg, shape.microbatch_size * shape.seq_len);
    std::vector<double> measured(P);
    LocalWorld world(P);
    world.run([&](Comm& comm) {
      auto be = make_cpu_backend(1);
      StepShape st = shape;
      st.recompute = sch.recompute;
      DistTrainer t(comm, sch, 1, cfg, *be, st, {}, Precision::fp32(), state());
      t.init_params();
      const TokenSource src = TokenSource::open(path("d.tok"));
      const SequenceReader reader(src, shape.seq_len, cfg.vocab);
      t.step(reader);
      t.step(reader);
      measured[static_cast<size_t>(comm.rank())] = static_cast<double>(be->memory_stats().peak);
    });
    MemoryShape ms;
    ms.tokens_per_mb = shape.microbatch_size * shape.seq_len;
    for (int stage = 0; stage < P; ++stage) {
      const MemoryEstimate est = estimate_stage_memory(cfg, sch, stage, ms);
      const double ratio = static_cast<double>(est.total()) / measured[static_cast<size_t>(stage)];
      EXPECT_GT(ratio, 1 / kWithin) << "stage " << stage << ": " << est.describe();
      EXPECT_LT(ratio, kWithin) << "stage " << stage << ": " << est.describe();
      std::printf("%-6s stage %d: estimate %.2f MiB, measured %.2f MiB (%.3f)\n", c.name, stage,
                  static_cast<double>(est.total()) / (1 << 20),
                  measured[static_cast<size_t>(stage)] / (1 << 20), ratio);
    }
  }
}

TEST(MemoryLimitTest, RefusalNamesTheEstimateTheLimitAndWhatToChange) {
  MemoryEstimate e;
  e.weights = 3 << 20;
  e.gradients = 3 << 20;
  e.optimizer = 6 << 20;
  e.stash = 5 << 20;
  e.working = 1 << 20;
  EXPECT_EQ(e.total(), 18 << 20);
  EXPECT_NO_THROW(check_memory_fits(e, "this run", {18 << 20, "a test"}));  // exactly fits
  EXPECT_NO_THROW(check_memory_fits(e, "this run", {}));                    // unknown limit
  try {
    check_memory_fits(e, "this run", {(18 << 20) - 1, "a test"});
    ADD_FAILURE() << "expected a refusal";
  } catch (const Error& err) {
    const std::string m = err.what();
    for (const char* needle : {"this run would need about 18.00 MiB", "weights 3.00 MiB",
                               "AdamW moments 6.00 MiB", "activation stash 5.00 MiB",
                               "(a test)", "--recompute", "--mlp-chunk"})
      EXPECT_NE(m.find(needle), std::string::npos) << needle << " in " << m;
  }
}

TEST(MemoryLimitTest, LimitFromTheEnvironmentOrTheSystem) {
  ::setenv("HP_MEMORY_LIMIT", "3G", 1);
  EXPECT_EQ(available_memory().bytes, int64_t{3} << 30);
  ::setenv("HP_MEMORY_LIMIT", "12345", 1);
  EXPECT_EQ(available_memory().bytes, 12345);
  for (const char* bad : {"-5", "1.5G", "G", "12Q", "99999999999999999999"}) {
    ::setenv("HP_MEMORY_LIMIT", bad, 1);
    EXPECT_THROW(available_memory(), Error) << bad;
  }
  ::unsetenv("HP_MEMORY_LIMIT");
  const MemoryLimit sys = available_memory();  // Linux has /proc/meminfo
  EXPECT_GT(sys.bytes, 0);
  EXPECT_FALSE(sys.source.empty());
}

TEST(MemoryLimitTest, GridNeedSumsTheRanksOnThisMachine) {
  const ModelConfig cfg = test_cfg();
  Schedule sch = generate(ScheduleSpec{"1f1b", 2, 4, static_cast<int>(cfg.layers), 1, 1,
                                       std::nullopt});
  MemoryShape ms;
  ms.tokens_per_mb = 256;
  const int64_t s0 = estimate_stage_memory(cfg, sch, 0, ms).total();
  const int64_t s1 = estimate_stage_memory(cfg, sch, 1, ms).total();
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  // D = 2 replicas of 2 stages, all here: each stage twice.
  EXPECT_EQ(grid_memory_here(cfg, sch, 2, 4, ms).total(), 2 * (s0 + s1));
  // Open MPI says one rank of the four is here: the largest stage once.
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  EXPECT_EQ(grid_memory_here(cfg, sch, 2, 4, ms).total(), std::max(s0, s1));
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace
}  // namespace hp
