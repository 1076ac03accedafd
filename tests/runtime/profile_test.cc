// helixpipe profile's library side: measured part costs are positive and finite, load in the
// simulator's cost model unchanged, and the whole-step prediction is the documented sum.
#include "runtime/profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "comm/local_comm.h"
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
  for (PartKind k : kPartKinds) EXPECT_GT(p.time.at(k, Dir::kF), 0) << "F of " << part_kind_str(k);
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost, PartKind::kHead})
    EXPECT_GT(p.time.at(k, Dir::kI), 0) << "I of " << part_kind_str(k);
  for (PartKind k : {PartKind::kEmbed, PartKind::kAttn, PartKind::kPost, PartKind::kHead})
    EXPECT_GT(p.time.at(k, Dir::kW), 0) << "W of " << part_kind_str(k);
  EXPECT_GT(p.link_bandwidth_Bps, 0);
  EXPECT_GE(p.link_latency_s, 0);
  EXPECT_EQ(p.message_bytes, 256 * 64 * 4);
  // Attention's own QKV + rotary rebuild under no-attn, timed alone: some of attention's work,
  // not a whole attention pass.
  EXPECT_GT(p.attn_recompute_f, 0);
  EXPECT_LT(p.attn_recompute_f,
            p.time.at(PartKind::kAttn, Dir::kF) + p.time.at(PartKind::kAttn, Dir::kI));

  const CostModel c = CostModel::from_part_costs(p.to_json(), "test");
  for (PartKind k : kPartKinds)
    for (Dir d : {Dir::kF, Dir::kI, Dir::kW, Dir::kB})
      EXPECT_DOUBLE_EQ(c.part_time(k, d), p.time.at(k, d)) << part_kind_str(k) << dir_str(d);
  EXPECT_DOUBLE_EQ(c.attn_recompute_time(), p.attn_recompute_f);
  // The post F split by GEMM FLOPs, h = 64, f = 128: W_o 4096, gate + up 16384, down 8192.
  const double post_f = p.time.at(PartKind::kPost, Dir::kF);
  EXPECT_DOUBLE_EQ(c.post_gate_up_time(), post_f * 16384 / 28672);
  EXPECT_DOUBLE_EQ(c.post_down_time(), post_f * 8192 / 28672);
  EXPECT_DOUBLE_EQ(c.latency(0, 1), p.link_latency_s);
}

// Profiles at two lengths: every part and direction gets a finite positive time (the profiler
// measured it rather than skipping it), and the activation message it reports is b * s * h fp32
// values, exactly doubling with s. How attention's time grows with s is a measurement, printed by
// `helixpipe profile` and bench_kernels, not something a test on a shared machine can assert.
TEST(Profile, EveryPartIsTimedAtEachLength) {
  const ModelConfig cfg = small_cfg();
  const PartProfile p1 = profile_parts(cfg, opts(1024, TransferMode::kActivations));
  const PartProfile p2 = profile_parts(cfg, opts(2048, TransferMode::kActivations));
  for (const PartProfile* p : {&p1, &p2})
    for (PartKind k : kPartKinds)
      for (Dir d : kPartDirs) {
        const double t = p->time.at(k, d);
        if (k == PartKind::kAttn && d == Dir::kW) {  // attention owns no weights: an empty op
          EXPECT_TRUE(std::isfinite(t) && t >= 0) << t;
          EXPECT_LT(t, p->time.at(PartKind::kAttn, Dir::kF))
              << "an empty W pass took longer than attention's forward";
          continue;
        }
        EXPECT_TRUE(std::isfinite(t) && t > 0) << part_kind_str(k) << " " << dir_str(d) << ": " << t;
        EXPECT_TRUE(std::isfinite(p->spread.at(k, d)) && p->spread.at(k, d) >= 0);
      }
  EXPECT_EQ(p1.message_bytes, int64_t{1024} * cfg.hidden * 4);
  EXPECT_EQ(p2.message_bytes, 2 * p1.message_bytes);
}

// The whole-step check on P = 1: it runs a real step (a positive median and a non-empty store)
// and predicts it as M * (embed + L * (pre + attn + post) + head) over F, I and W of the profile.
// Whether prediction and measurement agree is a measurement (`helixpipe profile` prints both).
TEST(Profile, StepCheckPredictsFromThePartTimes) {
  ModelConfig cfg = small_cfg();
  const ProfileOptions o = opts(512, TransferMode::kWeights);
  const PartProfile p = profile_parts(cfg, o);
  const StepCheck c = check_step(cfg, o, p, 2);
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.microbatches, 2);
  ASSERT_GT(c.measured_s, 0);
  EXPECT_TRUE(std::isfinite(c.measured_s));
  double per_mb = 0;
  for (PartKind k : kPartKinds) {
    const double count = (k == PartKind::kEmbed || k == PartKind::kHead) ? 1.0 : 4.0;
    for (Dir d : kPartDirs) per_mb += count * p.time.at(k, d);
  }
  EXPECT_NEAR(c.predicted_s, 2 * per_mb, 1e-12 * per_mb);
  EXPECT_GT(c.peak_store_bytes, 0);
}

// --tensor-parallel: two ranks (threads) time their shards at once with the group's collectives.
// They agree on one profile; the collectives per part and pass are the simulator's counts (the
// head's forward adds the gather of its loss statistics); the file charges each part its
// collectives on top of the compute.
TEST(Profile, TensorParallelRankTimesItsShardsWithTheGroupsCollectives) {
  const ModelConfig cfg = small_cfg();
  ProfileOptions o = opts(256, TransferMode::kWeights);
  o.repeats = 3;
  o.tensor_parallel = 2;
  std::vector<nlohmann::json> files(2);
  std::vector<PartProfile> got(2);
  LocalWorld world(2, CommOptions{60, false});
  world.run([&](Comm& comm) {
    got[static_cast<size_t>(comm.rank())] = profile_parts(cfg, o, &comm);
    files[static_cast<size_t>(comm.rank())] = got[static_cast<size_t>(comm.rank())].to_json();
  });
  // (The in-process link estimate is each rank's own memcpy.)
  for (nlohmann::json& f : files) f.erase("link");
  EXPECT_EQ(files[0], files[1]);
  const PartProfile& p = got[0];
  EXPECT_EQ(p.tensor_parallel, 2);
  ASSERT_GT(p.collective_s, 0);
  for (PartKind k : kPartKinds) {
    const int extra = k == PartKind::kHead ? 1 : 0;
    EXPECT_EQ(p.collectives.at(k, Dir::kF), tp_collectives(k, Dir::kF) + extra) << part_kind_str(k);
    EXPECT_EQ(p.collectives.at(k, Dir::kI), tp_collectives(k, Dir::kI)) << part_kind_str(k);
    EXPECT_EQ(p.collectives.at(k, Dir::kW), tp_collectives(k, Dir::kW)) << part_kind_str(k);
    for (Dir d : kPartDirs)
      EXPECT_TRUE(std::isfinite(p.time.at(k, d)) && p.time.at(k, d) >= 0)
          << part_kind_str(k) << " " << dir_str(d);
  }
  EXPECT_GT(p.time.at(PartKind::kPost, Dir::kF), 0);
  EXPECT_GT(p.attn_recompute_f, 0);
  const CostModel c = CostModel::from_part_costs(files[0], "tp profile");
  EXPECT_EQ(c.tensor_parallel(), 2);
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs)
      EXPECT_DOUBLE_EQ(c.part_time(k, d), p.time.at(k, d) + tp_collectives(k, d) * p.collective_s);
  EXPECT_DOUBLE_EQ(c.attn_recompute_time(), p.attn_recompute_f + p.collective_s);
  // A group size without its group is refused.
  EXPECT_THROW(profile_parts(cfg, o), Error);
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
