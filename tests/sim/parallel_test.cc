// TP (with sequence parallelism) x PP x DP: collective and all-reduce times, the per-part cost
// terms, node placement, memory per GPU, fitting and the effect of DP and pipeline calls.
#include "sim/parallel.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "schedule/generate.h"
#include "sim/memory.h"
#include "util/error.h"

namespace hp {
namespace {

DeviceProfile test_device() {
  DeviceProfile d;
  d.name = "test";
  d.peak_flops = 100e12;
  d.mem_bandwidth_Bps = 2e12;
  d.gemm_efficiency = 0.8;
  d.attn_efficiency = 0.5;
  d.intra = {2e-6, 200e9};
  d.inter = {10e-6, 25e9};
  d.gpus_per_node = 8;
  d.memory_bytes = 80e9;
  return d;
}

ModelConfig test_model() {
  ModelConfig c;
  c.hidden = 1024;
  c.intermediate = 2816;
  c.heads = 16;
  c.kv_heads = 16;
  c.layers = 8;
  c.vocab = 32000;
  return c;
}

TEST(Parallel, RingCollectiveTimes) {
  const LinkProfile link{1e-5, 1e11};
  EXPECT_DOUBLE_EQ(tp_collective_time(1e9, 1, link), 0);
  EXPECT_NEAR(tp_collective_time(1e9, 4, link), 0.75e9 / 1e11 + 3e-5, 1e-15);
  EXPECT_NEAR(tp_collective_time(1e9, 8, link), 0.875e9 / 1e11 + 7e-5, 1e-15);
  EXPECT_DOUBLE_EQ(dp_allreduce_time(1e9, 1, link), 0);
  EXPECT_NEAR(dp_allreduce_time(1e9, 2, link), 2 * 0.5e9 / 1e11 + 2e-5, 1e-15);
  EXPECT_NEAR(dp_allreduce_time(1e9, 8, link), 2 * 0.875e9 / 1e11 + 14e-5, 1e-15);
}

TEST(Parallel, TensorParallelDividesComputeAndAddsSequenceParallelCollectives) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  const int64_t s = 8192;
  CostModel base = CostModel::from_model(cfg, s, 1, dev);
  CostModel one = parallel_costs(cfg, s, 1, dev, TransferMode::kWeights, {1, 4, 1});
  for (PartKind k : {PartKind::kEmbed, PartKind::kPre, PartKind::kAttn, PartKind::kPost, PartKind::kHead})
    for (Dir d : {Dir::kF, Dir::kI, Dir::kW}) EXPECT_DOUBLE_EQ(one.part_time(k, d), base.part_time(k, d));
  for (int t : {2, 4, 8}) {
    CostModel c = parallel_costs(cfg, s, 1, dev, TransferMode::kWeights, {t, 2, 1});
    // The SP all-gather / reduce-scatter of the (s, h) bf16 activation on the NVLink.
    const double coll = (t - 1.0) / t * s * cfg.hidden * 2 / dev.intra.bandwidth_Bps + (t - 1) * 2e-6;
    EXPECT_NEAR(c.part_time(PartKind::kPre, Dir::kF), base.part_time(PartKind::kPre, Dir::kF) / t, 1e-15);
    EXPECT_NEAR(c.part_time(PartKind::kAttn, Dir::kF), base.part_time(PartKind::kAttn, Dir::kF) / t + coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kAttn, Dir::kI), base.part_time(PartKind::kAttn, Dir::kI) / t + coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kPost, Dir::kF), base.part_time(PartKind::kPost, Dir::kF) / t + 3 * coll, 1e-12);
    // I and W as separate passes: post I gathers dX', Z, dR and scatters dZ; W gathers its inputs
    // (dX', Z, dR; the head's Zf) again.
    EXPECT_NEAR(c.part_time(PartKind::kPost, Dir::kI),
                base.part_time(PartKind::kPost, Dir::kI) / t + 4 * coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kPost, Dir::kW),
                base.part_time(PartKind::kPost, Dir::kW) / t + 3 * coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kHead, Dir::kW),
                base.part_time(PartKind::kHead, Dir::kW) / t + coll, 1e-12);
    // A fused backward keeps them: post 4, head 2, attn 2 (src/model/parts.cc).
    ComputeOp b;
    b.dir = Dir::kB;
    b.parts = {Part::post(1)};
    EXPECT_NEAR(c.op_time(b, Recompute::kNone),
                base.part_time(PartKind::kPost, Dir::kB) / t + 4 * coll, 1e-12);
    b.parts = {Part::head()};
    EXPECT_NEAR(c.op_time(b, Recompute::kNone),
                base.part_time(PartKind::kHead, Dir::kB) / t + 2 * coll, 1e-12);
    b.parts = {Part::attn(1)};
    EXPECT_NEAR(c.op_time(b, Recompute::kNone),
                base.part_time(PartKind::kAttn, Dir::kB) / t + 2 * coll, 1e-12);
    // Vocabulary-parallel embedding and head: the runtime's collectives (src/model/parts.cc).
    EXPECT_NEAR(c.part_time(PartKind::kEmbed, Dir::kF), base.part_time(PartKind::kEmbed, Dir::kF) / t + coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kEmbed, Dir::kW), base.part_time(PartKind::kEmbed, Dir::kW) / t + coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kHead, Dir::kF), base.part_time(PartKind::kHead, Dir::kF) / t + coll, 1e-12);
    EXPECT_NEAR(c.part_time(PartKind::kHead, Dir::kI), base.part_time(PartKind::kHead, Dir::kI) / t + 2 * coll, 1e-12);
    EXPECT_NEAR(c.attn_recompute_time(), base.attn_recompute_time() / t + coll, 1e-12);
    // FLOPs per GPU fall by t: one op's model FLOPs.
    ComputeOp op;
    op.parts = {Part::attn(1), Part::post(1)};
    EXPECT_NEAR(c.op_flops(op), base.op_flops(op) / t, base.op_flops(op) * 1e-12);
  }
  EXPECT_THROW(parallel_costs(cfg, s, 1, dev, TransferMode::kWeights, {16, 1, 1}), Error);
}

// shard_costs on hand-made whole-stage costs (the numbers of cost_model_test's
// RecomputedPostsKeepOrRedoTheirGateAndUp), t = 2, a 1 MB activation on a link of 10 us and
// 1 GB/s: one collective sends half the activation, 0.5e-3 s, plus one latency.
TEST(Parallel, ShardCostsSplitComputeAndChargeCollectivesOnTheGivenLink) {
  auto j = nlohmann::json::parse(R"({
    "embed":{"F":0.5,"I":0,"W":0.25}, "pre":{"F":1,"I":2,"W":3}, "attn":{"F":10,"I":20,"W":0},
    "post":{"F":40,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9}, "attn_recompute_F":2,
    "post_gate_up_F":24, "post_down_F":12, "link":{"latency_s":3e-6,"bandwidth_Bps":5e9}})");
  const CostModel whole = CostModel::from_part_costs(j);
  const LinkProfile link{1e-5, 1e9};
  const double coll = 0.5e-3 + 1e-5;
  EXPECT_DOUBLE_EQ(tp_collective_time(1e6, 2, link), coll);
  const CostModel c = shard_costs(whole, 2, 1e6, link);
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      EXPECT_DOUBLE_EQ(c.collective_time(k, d), tp_collectives(k, d) * coll)
          << part_kind_str(k) << " " << dir_str(d);
      EXPECT_DOUBLE_EQ(c.part_time(k, d), whole.part_time(k, d) / 2 + tp_collectives(k, d) * coll)
          << part_kind_str(k) << " " << dir_str(d);
    }
  EXPECT_EQ(tp_collectives(PartKind::kPost, Dir::kF), 3);
  EXPECT_EQ(tp_collectives(PartKind::kPost, Dir::kI), 4);
  EXPECT_EQ(tp_collectives(PartKind::kPost, Dir::kW), 3);
  EXPECT_EQ(tp_collectives(PartKind::kHead, Dir::kW), 1);
  EXPECT_EQ(tp_fused_saving(PartKind::kPost), 3);
  EXPECT_EQ(tp_fused_saving(PartKind::kHead), 1);
  EXPECT_EQ(tp_fused_saving(PartKind::kAttn), 0);
  EXPECT_THROW(tp_collectives(PartKind::kAttn, Dir::kB), Error);
  EXPECT_DOUBLE_EQ(c.attn_recompute_time(), 1 + coll);
  EXPECT_DOUBLE_EQ(c.post_gate_up_time(), 12);
  EXPECT_DOUBLE_EQ(c.post_down_time(), 6 + coll);
  // The pipeline link is the profile's, not the group's.
  EXPECT_DOUBLE_EQ(c.link(0, 1).bandwidth_Bps, 5e9);
  // t = 1 leaves the costs alone.
  EXPECT_DOUBLE_EQ(shard_costs(whole, 1, 1e6, link).part_time(PartKind::kPost, Dir::kF), 40);

  // A calibration factor scales the compute, not the collectives. ZB1P's input backward of one post
  // under no-attn: I (5/2 + 4 coll) and the recomputed post F, which keeps G and U and skips the
  // down projection and the reduce-scatter after it: (40 - 12)/2 + (3 - 1) coll.
  ComputeOp one;
  one.dir = Dir::kI;
  one.parts = {Part::post(3)};
  one.recompute = recompute_parts(one, Recompute::kNoAttn);
  EXPECT_NEAR(c.op_time(one, Recompute::kNoAttn), 2.5 + 4 * coll + 14 + 2 * coll, 1e-12);
  PartTable twice;
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) twice.at(k, d) = 2;
  EXPECT_NEAR(c.op_time(one, Recompute::kNoAttn, &twice), 5 + 4 * coll + 28 + 2 * coll, 1e-12);
  // A fused backward of one post, no recomputation: (5 + 6)/2 of compute (doubled) and 4
  // collectives, not the 7 of separate I and W passes.
  ComputeOp fused;
  fused.dir = Dir::kB;
  fused.parts = {Part::post(3)};
  EXPECT_NEAR(c.op_time(fused, Recompute::kNone, &twice), 11 + 4 * coll, 1e-12);
  // Attention's backward under no-attn: I, W and the QKV rebuild, each with one gather.
  ComputeOp attn;
  attn.dir = Dir::kB;
  attn.parts = {Part::attn(0)};
  EXPECT_NEAR(c.op_time(attn, Recompute::kNoAttn, &twice), 20 + 0 + 2 + 3 * coll, 1e-12);
  // A whole cost model scaled the same way: everything doubles (no collectives recorded).
  EXPECT_NEAR(whole.op_time(attn, Recompute::kNoAttn, &twice), 2 * (20 + 2), 1e-12);
  // Collective times outside the part times are refused.
  CostModel bad = whole;
  PartTable too_much;
  too_much.at(PartKind::kPre, Dir::kF) = 2;  // pre F is 1 s
  EXPECT_THROW(bad.set_collective_times(too_much, 0, 0), Error);
  EXPECT_THROW(bad.set_collective_times(PartTable{}, 3, 0), Error);
}

// A part-cost file of one tensor-parallel rank (profile --tensor-parallel): its part times are the
// rank's compute, and the group's collectives go on top as shard_costs puts them. The same
// numbers as the test above, halved by hand, give the same cost model.
TEST(Parallel, TensorParallelPartCostsAddTheirCollectivesAsShardCostsDoes) {
  auto j = nlohmann::json::parse(R"({
    "embed":{"F":0.5,"I":0,"W":0.25}, "pre":{"F":1,"I":2,"W":3}, "attn":{"F":10,"I":20,"W":0},
    "post":{"F":40,"I":5,"W":6}, "head":{"F":7,"I":8,"W":9}, "attn_recompute_F":2,
    "post_gate_up_F":24, "post_down_F":12, "link":{"latency_s":3e-6,"bandwidth_Bps":5e9}})");
  const CostModel whole = CostModel::from_part_costs(j);
  const double coll = 0.5e-3 + 1e-5;
  const CostModel sharded = shard_costs(whole, 2, 1e6, LinkProfile{1e-5, 1e9});
  auto half = nlohmann::json::parse(R"({
    "embed":{"F":0.25,"I":0,"W":0.125}, "pre":{"F":0.5,"I":1,"W":1.5}, "attn":{"F":5,"I":10,"W":0},
    "post":{"F":20,"I":2.5,"W":3}, "head":{"F":3.5,"I":4,"W":4.5}, "attn_recompute_F":1,
    "post_gate_up_F":12, "post_down_F":6, "link":{"latency_s":3e-6,"bandwidth_Bps":5e9}})");
  half["tensor_parallel"] = {{"size", 2}, {"collective_s", coll}};
  const CostModel c = CostModel::from_part_costs(half, "tp.json");
  EXPECT_EQ(c.tensor_parallel(), 2);
  EXPECT_EQ(whole.tensor_parallel(), 1);
  EXPECT_DOUBLE_EQ(c.tp_collective_s(), coll);
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs) {
      EXPECT_DOUBLE_EQ(c.part_time(k, d), sharded.part_time(k, d))
          << part_kind_str(k) << " " << dir_str(d);
      EXPECT_DOUBLE_EQ(c.collective_time(k, d), sharded.collective_time(k, d))
          << part_kind_str(k) << " " << dir_str(d);
    }
  // post F: 20 s of compute and 3 collectives.
  EXPECT_DOUBLE_EQ(c.part_time(PartKind::kPost, Dir::kF), 20 + 3 * coll);
  EXPECT_DOUBLE_EQ(c.attn_recompute_time(), 1 + coll);
  EXPECT_DOUBLE_EQ(c.post_down_time(), 6 + coll);
  EXPECT_DOUBLE_EQ(c.post_gate_up_time(), 12);
  // Written back in the file's own shape (compute alone and the block), so it loads unchanged.
  const nlohmann::json back = sharded.to_json();
  EXPECT_EQ(back["tensor_parallel"]["size"], 2);
  EXPECT_NEAR(back["post"]["F"].get<double>(), 20, 1e-12);
  const CostModel again = CostModel::from_part_costs(back, "round trip");
  for (PartKind k : kPartKinds)
    for (Dir d : kPartDirs)
      EXPECT_NEAR(again.part_time(k, d), c.part_time(k, d), 1e-12)
          << part_kind_str(k) << " " << dir_str(d);
  EXPECT_NEAR(again.attn_recompute_time(), c.attn_recompute_time(), 1e-12);
  // A rank's costs are not sharded a second time, and a bad block says what it expects.
  EXPECT_THROW(shard_costs(c, 2, 1e6, LinkProfile{1e-5, 1e9}), Error);
  for (const char* bad :
       {R"({"size":1,"collective_s":0.1})", R"({"size":2})", R"({"size":2,"collective_s":-1})",
        R"({"size":2.5,"collective_s":0})", R"({"size":2,"collective_s":0,"x":1})", R"(4)"}) {
    nlohmann::json b = half;
    b["tensor_parallel"] = nlohmann::json::parse(bad);
    EXPECT_THROW(CostModel::from_part_costs(b, "bad.json"), Error) << bad;
  }
}

TEST(Parallel, StagesShareANodeOnlyWhenTheirTpDpGroupsFit) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  CostModel a = parallel_costs(cfg, 1024, 1, dev, TransferMode::kWeights, {2, 4, 2});  // 2 stages/node
  EXPECT_EQ(a.stages_per_node(), 2);
  EXPECT_EQ(a.link(0, 1).bandwidth_Bps, dev.intra.bandwidth_Bps);
  EXPECT_EQ(a.link(1, 2).bandwidth_Bps, dev.inter.bandwidth_Bps);
  CostModel b = parallel_costs(cfg, 1024, 1, dev, TransferMode::kWeights, {8, 4, 2});
  EXPECT_EQ(b.stages_per_node(), 1);
  EXPECT_EQ(b.link(0, 1).bandwidth_Bps, dev.inter.bandwidth_Bps);
}

PlanCase helix_case(Layout lay, int m) {
  PlanCase c;
  c.schedule = "helix";
  c.recompute = Recompute::kNoAttn;
  c.layout = lay;
  c.microbatches = m;
  return c;
}

TEST(Parallel, MemoryPerGpuAndTheLimit) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  const int64_t s = 16384;
  PlanResult r1 = evaluate(helix_case({1, 4, 1}, 8), cfg, s, dev, 1e15);
  PlanResult r2 = evaluate(helix_case({2, 4, 1}, 8), cfg, s, dev, 1e15);
  PlanResult r2d = evaluate(helix_case({2, 4, 4}, 8), cfg, s, dev, 1e15);
  ASSERT_TRUE(r1.fits && r2.fits && r2d.fits);
  // Activations: the stash of the busiest stage, in bf16, over t.
  ScheduleSpec sp;
  sp.name = "helix";
  sp.stages = 4;
  sp.microbatches = 8;
  sp.layers = 8;
  auto peaks = stash_peaks(generate(sp), cfg, s, 2);
  EXPECT_DOUBLE_EQ(r1.memory.activations, static_cast<double>(peaks[0]));
  // With t = 2 one rank's exact stash (the loss's log-sum-exp is whole on every rank): half the
  // stage's and at most 8 micro-batches' lse above it.
  const auto rank = stash_peaks(generate(sp), cfg, s, 2, 2);
  EXPECT_DOUBLE_EQ(r2.memory.activations, static_cast<double>(rank[0]));
  EXPECT_GE(r2.memory.activations, r1.memory.activations / 2);
  EXPECT_LE(r2.memory.activations, r1.memory.activations / 2 + 8.0 * s * 2);
  // Model states: (2 + 4 + 12/d) bytes per parameter of the busiest stage, over t.
  const double params = static_cast<double>(max_stage_params(cfg, "helix", 4));
  EXPECT_DOUBLE_EQ(r1.memory.model_states, params * 18);
  EXPECT_DOUBLE_EQ(r2.memory.model_states, params / 2 * 18);
  EXPECT_DOUBLE_EQ(r2d.memory.model_states, params / 2 * 9);
  // Just under the total: does not fit, and is not simulated.
  PlanResult tight = evaluate(helix_case({1, 4, 1}, 8), cfg, s, dev, r1.memory.total() - 1);
  EXPECT_FALSE(tight.fits);
  EXPECT_EQ(tight.makespan, 0);
  EXPECT_TRUE(evaluate(helix_case({1, 4, 1}, 8), cfg, s, dev, r1.memory.total()).fits);
}

TEST(Parallel, DataParallelAddsTheAllReduceAndMultipliesTokens) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  PlanResult one = evaluate(helix_case({2, 4, 1}, 8), cfg, 8192, dev, 1e15);
  PlanResult four = evaluate(helix_case({2, 4, 4}, 8), cfg, 8192, dev, 1e15);  // t*d = 8: intra
  PlanResult eight = evaluate(helix_case({2, 4, 8}, 8), cfg, 8192, dev, 1e15);  // inter-node
  EXPECT_DOUBLE_EQ(one.allreduce, 0);
  // t*d = 8 fills a node, so the pipeline's links become inter-node: slower, never faster.
  EXPECT_GE(four.makespan, one.makespan);
  DeviceProfile flat = dev;
  flat.inter = flat.intra;  // placement no longer matters: the same pipeline
  EXPECT_NEAR(evaluate(helix_case({2, 4, 1}, 8), cfg, 8192, flat, 1e15).makespan,
              evaluate(helix_case({2, 4, 4}, 8), cfg, 8192, flat, 1e15).makespan, 1e-12);
  const double grad_bytes = static_cast<double>(max_stage_params(cfg, "helix", 4)) / 2 * 2;
  EXPECT_NEAR(four.allreduce, dp_allreduce_time(grad_bytes, 4, dev.intra), 1e-12);
  EXPECT_NEAR(eight.allreduce, dp_allreduce_time(grad_bytes, 8, dev.inter), 1e-12);
  EXPECT_NEAR(four.iteration, four.makespan + four.allreduce, 1e-12);
  EXPECT_NEAR(four.tokens_per_s, 4 * one.tokens_per_s * one.iteration / four.iteration, 1e-6);
}

TEST(Parallel, PipelineCallsTradeBubblesForMemory) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  PlanCase big = helix_case({1, 4, 1}, 16);
  PlanResult all = evaluate(big, cfg, 16384, dev, 1e15);
  PlanCase split = big;
  split.microbatches = 8;
  split.rounds = 2;
  PlanResult two = evaluate(split, cfg, 16384, dev, 1e15);
  EXPECT_NEAR(two.memory.activations, all.memory.activations / 2, 1.0);
  PlanResult half = evaluate(helix_case({1, 4, 1}, 8), cfg, 16384, dev, 1e15);
  EXPECT_NEAR(two.iteration, 2 * half.makespan, 1e-12);
  EXPECT_GT(two.iteration, all.iteration);  // one more fill and drain
  EXPECT_NEAR(two.tokens_per_s, 16 * 16384 / two.iteration, 1e-6);
  // evaluate_fitting splits into calls only when it has to, and respects the limit.
  PlanResult fitted = evaluate_fitting(big, cfg, 16384, dev, all.memory.total() - 1);
  ASSERT_TRUE(fitted.fits);
  EXPECT_TRUE(fitted.c.rounds > 1 || fitted.c.mlp_chunk > 0);
  EXPECT_LE(fitted.memory.total(), all.memory.total() - 1);
  EXPECT_EQ(fitted.c.microbatches * fitted.c.rounds, 16);
  EXPECT_EQ(evaluate_fitting(big, cfg, 16384, dev, 1e15).c.rounds, 1);
}

// The overlap condition, worked by hand for the test model (h = 1024, q = h + 2h = 3072, L = 8) at
// s = 8192 in bf16 (e = 2) with TP2 x PP8 x DP1: 8 / (2*1) = 4 stages per node, so the pipeline
// spans two nodes and the slowest link is the inter-node one (25 GB/s).
//   Th = 8192 * 1024 = 8 388 608 elements.
//   helix, weights mode: qkvr = 2Th + h*q = 16 777 216 + 3 145 728 = 19 922 944; ro = 2Th =
//     16 777 216; together 36 700 160 elements = 73 400 320 B; / t = 36 700 160 B; * 7/8 =
//     32 112 640 B per layer; / 25e9 B/s = 1.2845056 ms.
//   helix, activations mode: qkvr = Tq + Th = 25 165 824 + 8 388 608 = 33 554 432; with ro
//     50 331 648 elements = 100 663 296 B; / 2 * 7/8 = 44 040 192 B; / 25e9 = 1.76160768 ms.
//   1f1b: one T x h activation per stage of L/p = 1 layer: 16 777 216 B / 2 = 8 388 608 B per
//     layer; / 25e9 = 0.33554432 ms. Interleaved V=2 has two boundaries: 16 777 216 B.
//   With TP2 x PP4 x DP1 the four stages share a node: NVLink, 200 GB/s.
TEST(Parallel, OverlapConditionByHand) {
  const ModelConfig cfg = test_model();
  const DeviceProfile dev = test_device();
  PlanCase h = helix_case({2, 8, 1}, 16);
  OverlapCheck o = overlap_check(h, cfg, 8192, dev);
  EXPECT_TRUE(o.inter_node);
  EXPECT_DOUBLE_EQ(o.bytes, 32112640.0);
  EXPECT_NEAR(o.t_comm, 1.2845056e-3, 1e-12);
  const CostModel c = parallel_costs(cfg, 8192, 1, dev, TransferMode::kWeights, {2, 8, 1});
  EXPECT_DOUBLE_EQ(o.t_attn, c.part_time(PartKind::kAttn, Dir::kF));
  h.transfer = TransferMode::kActivations;
  o = overlap_check(h, cfg, 8192, dev);
  EXPECT_DOUBLE_EQ(o.bytes, 44040192.0);
  EXPECT_NEAR(o.t_comm, 1.76160768e-3, 1e-12);
  PlanCase b = h;
  b.schedule = "1f1b";
  b.recompute = Recompute::kNone;
  o = overlap_check(b, cfg, 8192, dev);
  EXPECT_DOUBLE_EQ(o.bytes, 8388608.0);
  EXPECT_NEAR(o.t_comm, 0.33554432e-3, 1e-12);
  b.schedule = "interleaved";
  b.virtual_stages = 2;
  EXPECT_DOUBLE_EQ(overlap_check(b, cfg, 8192, dev).bytes, 16777216.0);
  // One node: the same bytes on the NVLink.
  PlanCase n = helix_case({2, 4, 1}, 8);
  o = overlap_check(n, cfg, 8192, dev);
  EXPECT_FALSE(o.inter_node);
  // (p-1)/p = 3/4 of 36 700 160 B = 27 525 120 B; / 200e9 = 0.1376256 ms.
  EXPECT_DOUBLE_EQ(o.bytes, 27525120.0);
  EXPECT_NEAR(o.t_comm, 0.1376256e-3, 1e-12);
  // The condition and its wording.
  OverlapCheck fail_case{0.031, 0.043, 1e9, true};
  EXPECT_FALSE(fail_case.holds());
  EXPECT_EQ(fail_case.describe(),
            "attention 31.0 ms < transfer 43.0 ms on the inter-node link: HelixPipe cannot hide its "
            "traffic here");
  EXPECT_TRUE((OverlapCheck{0.05, 0.043, 1e9, false}).holds());
}

TEST(Parallel, LayoutsCoverEveryFactorization) {
  auto ls = layouts(16, 8, 8);
  for (const Layout& l : ls) {
    EXPECT_EQ(l.gpus(), 16);
    EXPECT_EQ(8 % l.pp, 0);
    EXPECT_GE(l.pp, 2);
    EXPECT_LE(l.tp, 8);
  }
  // t in {1,2,4,8}; pp in {2,4,8} dividing 16/t: 3 + 3 + 2 + 1 = 9.
  EXPECT_EQ(ls.size(), 9u);
}

}  // namespace
}  // namespace hp
