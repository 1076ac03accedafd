// measure_calibrated without a world (runtime/pipeline_bench.h): what `helixpipe bench` does
// outside mpirun, every rank of a D x P x T grid as a thread of this process (LocalWorld). The
// numbers it gathers are checked against each other: one row per stage and per rank, the tensor
// ranks of a stage agreeing on what they share, each rank's collective time split into transfer
// and waiting without losing any of it. (It is also the in-process pipeline path that
// scripts/sanitize.sh runs under ThreadSanitizer.)
#include "runtime/pipeline_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "../model/model_test_util.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "util/error.h"

namespace hp {
namespace {

// A 1F1B on two stages of a tiny model (T = 2 divides its heads, key/value heads and MLP width),
// two micro-batches of 8 tokens, ready for measure_calibrated.
struct TinyBench {
  static constexpr int P = 2, M = 2;
  static constexpr int64_t S = 8;
  ModelConfig cfg;
  Schedule sch;
  std::vector<int32_t> tokens, targets;
  BenchSetup b;
  explicit TinyBench(int steps, int tensor_parallel = 1) {
    cfg.hidden = 16;
    cfg.intermediate = 24;
    cfg.heads = 2;
    cfg.kv_heads = 2;
    cfg.layers = 4;
    cfg.vocab = 64;
    sch =
        generate(ScheduleSpec{"1f1b", P, M, static_cast<int>(cfg.layers), 1, 1, Recompute::kNone});
    lower(sch, &cfg, S);
    tokens = test::random_tokens(M * S, cfg.vocab, 3);
    targets = test::random_tokens(M * S, cfg.vocab, 4);
    b.cfg = cfg;
    b.seq_len = S;
    b.steps = steps;
    b.tokens = &tokens;
    b.targets = &targets;
    b.tensor_parallel = tensor_parallel;
  }
};

TEST(PipelineBench, InProcessRanksReportEveryStageAndRank) {
  const int P = TinyBench::P, T = 2;
  const TinyBench tb(2, T);
  const Schedule& sch = tb.sch;
  const BenchSetup& b = tb.b;
  const CalibratedRun run = measure_calibrated(nullptr, sch, b, nullptr, true);
  EXPECT_FALSE(run.cal.has_value());  // no cost model, no calibration
  const Measured& m = run.m;
  ASSERT_EQ(m.step_s.size(), 2u);
  for (double t : m.step_s) EXPECT_GT(t, 0);
  ASSERT_EQ(m.stages.size(), static_cast<size_t>(P));
  for (const StageStats& s : m.stages) {
    EXPECT_GT(s.busy_s, 0);
    EXPECT_LE(s.busy_s, s.total_s);
    EXPECT_GT(s.peak_bytes, 0);
  }
  ASSERT_EQ(m.ranks.size(), static_cast<size_t>(P * T));
  for (int q = 0; q < P; ++q) {
    const RankMeasured& a = m.ranks[static_cast<size_t>(q * T)];
    const RankMeasured& c = m.ranks[static_cast<size_t>(q * T + 1)];
    // One group: the same collectives, the same bytes, the same parameter blocks' size, and the
    // same transfer time (each collective's shortest time over the group).
    EXPECT_GT(a.tp_collectives, 0);
    EXPECT_EQ(a.tp_collectives, c.tp_collectives) << "stage " << q;
    EXPECT_EQ(a.tp_bytes_sent, c.tp_bytes_sent) << "stage " << q;
    EXPECT_EQ(a.param_bytes, c.param_bytes) << "stage " << q;
    EXPECT_EQ(a.tp_transfer_s, c.tp_transfer_s) << "stage " << q;
    for (const RankMeasured* r : {&a, &c}) {
      EXPECT_GT(r->param_bytes, 0);
      EXPECT_GE(r->tp_skew_s, 0);
      EXPECT_NEAR(r->tp_transfer_s + r->tp_skew_s, r->tp_seconds, 1e-9 * (1 + r->tp_seconds));
    }
  }
  // The timeline of the last step, gathered on rank 0, holds both stages' compute.
  EXPECT_EQ(m.timeline.num_stages, P);
  std::set<int> stages;
  for (const TimelineEvent& e : m.timeline.events) stages.insert(e.stage);
  EXPECT_EQ(stages, (std::set<int>{0, 1}));
  EXPECT_TRUE(std::isfinite(m.tp_link.bandwidth_Bps) && m.tp_link.bandwidth_Bps > 0);
  EXPECT_GE(m.tp_link.latency_s, 0);
}

// calibrate() on hand-made passes: one stage, part costs pre/attn/post F 1, I 2, W 3 (18 per
// layer), embed F 1 only, head 1 each way. Pass 0 runs every part at the profile's speed, pass 2
// at 1.1x, pass 1 at 1.2x except attention's I at 5x (a stall in one part of one pass).
TEST(PipelineBench, CalibrationTakesEachCellsMedianOverThePasses) {
  CostModel cost;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost}) {
    cost.set_part_time(k, Dir::kF, 1);
    cost.set_part_time(k, Dir::kI, 2);
    cost.set_part_time(k, Dir::kW, 3);
  }
  cost.set_part_time(PartKind::kEmbed, Dir::kF, 1);
  for (Dir d : kPartDirs) cost.set_part_time(PartKind::kHead, d, 1);
  auto pass = [&](double a) {
    PartTable t;
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) t.at(k, d) = a * cost.part_time(k, d);
    return t;
  };
  PartTable stall = pass(1.2);
  stall.at(PartKind::kAttn, Dir::kI) = 10;
  const Calibration c = calibrate({{pass(1.0)}, {stall}, {pass(1.1)}}, cost);
  ASSERT_EQ(c.core.size(), 1u);
  const double core1 = (18 * 1.2 - 2 * 1.2 + 10) / 18;  // pre + attn + post of pass 1
  ASSERT_EQ(c.core[0].size(), 3u);
  EXPECT_DOUBLE_EQ(c.core[0][0], 1.0);
  EXPECT_DOUBLE_EQ(c.core[0][1], core1);
  EXPECT_DOUBLE_EQ(c.core[0][2], 1.1);
  EXPECT_DOUBLE_EQ(c.scale[0], 1.1);
  // Every cell's median is pass 2's 1.1: the stall and pass 1's speed fall out. Embed's I and W
  // (zero in the costs) take each pass's core factor, whose median is 1.1 too.
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs)
      EXPECT_NEAR(c.parts[0].at(k, d), 1.1, 1e-12) << part_kind_str(k) << " " << dir_str(d);
  // Step 0 lies between passes 0 and 1, step 1 between passes 1 and 2.
  ASSERT_EQ(c.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(c.steps[0][0].at(PartKind::kAttn, Dir::kI), 0.5 * (1 + 5));
  EXPECT_DOUBLE_EQ(c.steps[1][0].at(PartKind::kPre, Dir::kF), 0.5 * (1.2 + 1.1));
  EXPECT_DOUBLE_EQ(c.steps[0][0].at(PartKind::kEmbed, Dir::kW), 0.5 * (1 + core1));
  EXPECT_THROW(calibrate({{pass(1.0)}}, cost), Error);
  EXPECT_THROW(calibrate({{pass(1.0)}, {pass(1.0), pass(1.0)}}, cost), Error);
}

// A tensor-parallel stage's calibration pass is its group's slowest rank, cell by cell: four ranks
// in two groups of two, rank 1 slow in attention, rank 2 slow in post.
TEST(PipelineBench, EachTensorParallelStageTakesItsSlowestRanksPass) {
  auto pass = [](double a) {
    PartTable t;
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) t.at(k, d) = a;
    return t;
  };
  std::vector<PartTable> ranks = {pass(1), pass(1), pass(2), pass(1.5)};
  ranks[1].at(PartKind::kAttn, Dir::kI) = 4;
  ranks[2].at(PartKind::kPost, Dir::kF) = 3;
  const std::vector<PartTable> st = slowest_of_groups(ranks, 2);
  ASSERT_EQ(st.size(), 2u);
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      const bool attn_i = k == PartKind::kAttn && d == Dir::kI;
      const bool post_f = k == PartKind::kPost && d == Dir::kF;
      EXPECT_DOUBLE_EQ(st[0].at(k, d), attn_i ? 4 : 1);
      EXPECT_DOUBLE_EQ(st[1].at(k, d), post_f ? 3 : 2);
    }
  // One rank per stage: unchanged.
  const std::vector<PartTable> same = slowest_of_groups(ranks, 1);
  ASSERT_EQ(same.size(), 4u);
  EXPECT_DOUBLE_EQ(same[3].at(PartKind::kPre, Dir::kW), 1.5);
  EXPECT_THROW(slowest_of_groups(ranks, 3), Error);
  // Two replicas of a one-stage pipeline with T = 2 (world ranks 0-1 replica 0, 2-3 replica 1):
  // one stage, the slowest of all four.
  const std::vector<PartTable> one = slowest_of_groups(ranks, 2, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_DOUBLE_EQ(one[0].at(PartKind::kAttn, Dir::kI), 4);
  EXPECT_DOUBLE_EQ(one[0].at(PartKind::kPost, Dir::kF), 3);
  EXPECT_DOUBLE_EQ(one[0].at(PartKind::kPre, Dir::kF), 2);
  // Two replicas of two stages with T = 1: stage 0 = ranks 0 and 2, stage 1 = ranks 1 and 3.
  const std::vector<PartTable> two = slowest_of_groups(ranks, 1, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_DOUBLE_EQ(two[0].at(PartKind::kPost, Dir::kF), 3);
  EXPECT_DOUBLE_EQ(two[0].at(PartKind::kPre, Dir::kW), 2);
  EXPECT_DOUBLE_EQ(two[1].at(PartKind::kAttn, Dir::kI), 4);
  EXPECT_DOUBLE_EQ(two[1].at(PartKind::kPre, Dir::kW), 1.5);
  EXPECT_THROW(slowest_of_groups(ranks, 1, 3), Error);  // 4 groups are not replicas of 3 stages
}

// With a cost model the run is calibrated between its steps: steps + 1 passes on every stage.
TEST(PipelineBench, CalibrationPassesSurroundEveryTimedStep) {
  const int P = TinyBench::P;
  const TinyBench tb(3);
  const Schedule& sch = tb.sch;
  const BenchSetup& b = tb.b;
  CostModel cost;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) cost.set_part_time(k, d, 1e-6);
  const CalibratedRun run = measure_calibrated(nullptr, sch, b, &cost, false);
  ASSERT_EQ(run.m.step_s.size(), 3u);
  ASSERT_TRUE(run.cal.has_value());
  const Calibration& c = *run.cal;
  ASSERT_EQ(c.core.size(), static_cast<size_t>(P));
  ASSERT_EQ(c.parts.size(), static_cast<size_t>(P));
  ASSERT_EQ(c.steps.size(), 3u);
  for (int q = 0; q < P; ++q) {
    const std::vector<double>& core = c.core[static_cast<size_t>(q)];
    ASSERT_EQ(core.size(), 4u) << "stage " << q;
    std::vector<double> v = core;
    std::sort(v.begin(), v.end());
    EXPECT_DOUBLE_EQ(c.scale[static_cast<size_t>(q)], 0.5 * (v[1] + v[2]));
    for (double f : core) EXPECT_GT(f, 0);
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) EXPECT_GT(c.parts[static_cast<size_t>(q)].at(k, d), 0);
  }
  // The per-rank numbers are the median step's.
  EXPECT_LT(run.m.median_step, 3);
  std::vector<double> sorted = run.m.step_s;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(run.m.step_s[static_cast<size_t>(run.m.median_step)], sorted[1]);
}

}  // namespace
}  // namespace hp
