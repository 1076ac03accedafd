// measure_calibrated without a world (runtime/pipeline_bench.h): what `helixpipe bench` does
// outside mpirun, every rank of a D x P x T grid as a thread of this process (LocalWorld). The
// numbers it gathers are checked against each other: one row per stage and per rank, the tensor
// ranks of a stage agreeing on what they share, each rank's collective time split into transfer
// and waiting without losing any of it. (It is also the in-process pipeline path that
// scripts/sanitize.sh runs under ThreadSanitizer.)
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "../model/model_test_util.h"
#include "runtime/pipeline_bench.h"
#include "schedule/generate.h"
#include "schedule/lower.h"

namespace hp {
namespace {

TEST(PipelineBench, InProcessRanksReportEveryStageAndRank) {
  ModelConfig cfg;
  cfg.hidden = 16;
  cfg.intermediate = 24;
  cfg.heads = 2;
  cfg.kv_heads = 2;  // T = 2 divides the heads, the key/value heads and the MLP width
  cfg.layers = 4;
  cfg.vocab = 64;
  const int P = 2, M = 2, T = 2;
  const int64_t S = 8;
  Schedule sch = generate(ScheduleSpec{"1f1b", P, M, static_cast<int>(cfg.layers), 1, 1,
                                       Recompute::kNone});
  lower(sch, &cfg, S);
  const auto tokens = test::random_tokens(M * S, cfg.vocab, 3);
  const auto targets = test::random_tokens(M * S, cfg.vocab, 4);
  BenchSetup b;
  b.cfg = cfg;
  b.seq_len = S;
  b.steps = 2;
  b.tokens = &tokens;
  b.targets = &targets;
  b.tensor_parallel = T;

  const CalibratedRun run = measure_calibrated(nullptr, sch, b, nullptr, true);
  EXPECT_TRUE(run.before.empty() && run.after.empty() && run.scale.empty());  // no cost model
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

}  // namespace
}  // namespace hp
