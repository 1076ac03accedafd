// helixpipe profile's library side: measured part costs are positive, load in the simulator's cost
// model unchanged, and core attention's cost grows roughly quadratically with the sequence length.
#include <gtest/gtest.h>

#include "runtime/profile.h"
#include "sim/cost_model.h"
#include "util/error.h"

namespace hp {
namespace {

ModelConfig small_cfg() {
  ModelConfig c;
  c.hidden = 64;
  c.intermediate = 128;
  c.heads = 2;
  c.kv_heads = 2;
  c.layers = 4;
  c.vocab = 256;
  return c;
}

ProfileOptions opts(int64_t s, TransferMode t) {
  ProfileOptions o;
  o.seq_len = s;
  o.repeats = 5;
  o.warmup = 1;
  o.transfer = t;
  return o;
}

TEST(Profile, CostsArePositiveAndLoadInTheSimulator) {
  const PartProfile p = profile_parts(small_cfg(), opts(256, TransferMode::kWeights));
  for (int k = 0; k < 5; ++k) EXPECT_GT(p.time[k][0], 0) << "F of " << k;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost, PartKind::kHead})
    EXPECT_GT(p.time[static_cast<int>(k)][1], 0) << "I of " << part_kind_str(k);
  for (PartKind k : {PartKind::kEmbed, PartKind::kAttn, PartKind::kPost, PartKind::kHead})
    EXPECT_GT(p.time[static_cast<int>(k)][2], 0) << "W of " << part_kind_str(k);
  EXPECT_GT(p.link_bandwidth_Bps, 0);
  EXPECT_GE(p.link_latency_s, 0);
  EXPECT_EQ(p.message_bytes, 256 * 64 * 4);

  const CostModel c = CostModel::from_part_costs(p.to_json(), "test");
  for (int k = 0; k < 5; ++k) {
    EXPECT_DOUBLE_EQ(c.part_time(static_cast<PartKind>(k), Dir::kF), p.time[k][0]);
    EXPECT_DOUBLE_EQ(c.part_time(static_cast<PartKind>(k), Dir::kI), p.time[k][1]);
    EXPECT_DOUBLE_EQ(c.part_time(static_cast<PartKind>(k), Dir::kW), p.time[k][2]);
  }
  EXPECT_DOUBLE_EQ(c.attn_recompute_time(), p.attn_recompute_f);
  EXPECT_DOUBLE_EQ(c.latency(0, 1), p.link_latency_s);
}

// In activations mode attn is core attention (+ rotary) only: causal attention does ~s^2 work, so
// doubling s should take about 4x. Loose bound [2.5, 6.5]: the linear rotary/copy terms pull the
// ratio below 4 at small s, and other processes share this machine's cores.
TEST(Profile, AttentionGrowsQuadratically) {
  const ModelConfig cfg = small_cfg();
  const double t1 = profile_parts(cfg, opts(1024, TransferMode::kActivations)).time[2][0];
  const double t2 = profile_parts(cfg, opts(2048, TransferMode::kActivations)).time[2][0];
  ASSERT_GT(t1, 0);
  const double ratio = t2 / t1;
  EXPECT_GT(ratio, 2.5) << "attn F " << t1 << " s -> " << t2 << " s";
  EXPECT_LT(ratio, 6.5) << "attn F " << t1 << " s -> " << t2 << " s";
}

// The part costs predict a whole single-process step (P = 1): same work, so within a loose factor
// (op boundaries and cache effects differ; the machine is shared).
TEST(Profile, PartCostsPredictAWholeStep) {
  ModelConfig cfg = small_cfg();
  const ProfileOptions o = opts(512, TransferMode::kWeights);
  const PartProfile p = profile_parts(cfg, o);
  const StepCheck c = check_step(cfg, o, p, 2);
  EXPECT_EQ(c.layers, 4);
  ASSERT_GT(c.measured_s, 0);
  ASSERT_GT(c.predicted_s, 0);
  EXPECT_GT(c.predicted_s / c.measured_s, 0.5);
  EXPECT_LT(c.predicted_s / c.measured_s, 2.0);
  EXPECT_GT(c.peak_store_bytes, 0);
}

TEST(Profile, BadOptionsAreErrors) {
  ProfileOptions o = opts(0, TransferMode::kWeights);
  EXPECT_THROW(profile_parts(small_cfg(), o), Error);
  o = opts(64, TransferMode::kWeights);
  o.link_latency_s = 1e-6;  // latency without bandwidth
  EXPECT_THROW(profile_parts(small_cfg(), o), Error);
}

}  // namespace
}  // namespace hp
