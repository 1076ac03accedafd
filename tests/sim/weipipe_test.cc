// WeiPipe's ring (sim/weipipe.h), worked by hand on two ranks, and its memory per GPU for the 7b
// preset written out from the parameter counts.
#include "sim/weipipe.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/compare.h"
#include "../error_text.h"

namespace hp {
namespace {

// One post part per layer: F 1 s, I 1 s, W 1 s, so a one-layer chunk has F 1 and B 2; all else free.
CostModel unit_costs(LinkProfile link = {}) {
  CostModel c;
  c.set_part_time(PartKind::kPost, Dir::kF, 1);
  c.set_part_time(PartKind::kPost, Dir::kI, 1);
  c.set_part_time(PartKind::kPost, Dir::kW, 1);
  c.set_links(link, link, 8);
  return c;
}

// p = 2, m = 2, L = 2, free links. Rank r's phase at step k is k - r: rank 0 runs F c0, F c1,
// B c1, B c0, idle; rank 1 idle, F c0, F c1, B c1, B c0 (5 steps). Rank 1's idle step costs
// nothing: chunk 0's weights reach it at time 0. Its B c1 (step 3) waits for rank 0's partial sum
// only before adding to it, which rank 0 sends at 4, when rank 1's B c1 ends anyway. Both ranks
// are busy 6 s back to back: makespan 6, no bubble (1F1B on the same shape: (m+p-1)*3 = 9).
TEST(WeiPipe, TwoRanksFreeLinksByHand) {
  const SimResult r = simulate_weipipe(unit_costs(), 2, 2, 2, WeiPipeOptions{});
  EXPECT_DOUBLE_EQ(r.makespan, 6.0);
  ASSERT_EQ(r.stages.size(), 2u);
  for (const StageResult& st : r.stages) {
    EXPECT_DOUBLE_EQ(st.busy, 6.0);
    EXPECT_DOUBLE_EQ(st.wait, 0.0);
  }
  EXPECT_DOUBLE_EQ(r.bubble, 0.0);
  // Rank 0 sends forward weights at steps 0 and 1, backward weights and a partial sum at steps 2
  // and 3, and its finished gradient chunk to rank 1 at the end: 7; rank 1: forward weights at
  // step 0, backward weights at 1 and 2, a partial sum at 3, the closing swap: 5.
  EXPECT_EQ(r.stages[0].messages_sent, 7);
  EXPECT_EQ(r.stages[1].messages_sent, 5);
}

// The same ring with a chunk transfer of 0.5 s (1 GB at 2 GB/s, no latency), rendezvous:
//  step 0: rank 0 F [0,1]; weights 0->1 and 1->0 [0,0.5].
//  step 1: rank 0 F [1,2]; rank 1 waits for chunk 0 until 0.5, F [0.5,1.5]; forward weights
//          0->1 and backward weights 1->0 posted at 1 (rank 0's start), [1,1.5].
//  step 2: rank 0 B c1 [2,4], sends its partial sum at 4 [4,4.5]; rank 1 F [1.5,2.5]; backward
//          weights both ways posted at 2, [2,2.5].
//  step 3: rank 0 B c0 [4,6]; rank 1 B c1 [2.5,4.5], partial sum in at 4.5 (no wait); backward
//          weights 0->1 posted at 4 but behind the partial sum on that link: [4.5,5]; partial sums
//          both ways posted at 6, [6,6.5].
//  step 4: rank 0 idle, waits for its partial sum to go out: ends 6.5; rank 1 waits for backward
//          weights until 5, B c0 [5,7]. Ring ends at 7; the gradient swap takes 0.5: 7.5.
TEST(WeiPipe, TwoRanksWithWeightTransfersByHand) {
  WeiPipeOptions opt;
  opt.chunk_bytes = 1'000'000'000;
  const SimResult r = simulate_weipipe(unit_costs({0, 2e9}), 2, 2, 2, opt);
  EXPECT_DOUBLE_EQ(r.makespan, 7.5);
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 6.0);
  EXPECT_DOUBLE_EQ(r.stages[1].busy, 6.0);
  EXPECT_DOUBLE_EQ(r.stages[0].end, 6.5);
  EXPECT_DOUBLE_EQ(r.stages[1].end, 7.0);
  EXPECT_DOUBLE_EQ(r.stages[0].wait, 0.5);
  EXPECT_DOUBLE_EQ(r.stages[1].wait, 1.0);
  EXPECT_DOUBLE_EQ(r.bubble, 1.5);
  EXPECT_EQ(r.stages[0].sent_bytes, 7 * opt.chunk_bytes);
  EXPECT_EQ(r.pair_bytes.at({1, 0}), 5 * opt.chunk_bytes);
}

// One rank: no ring, the micro-batches one after another (F 2 s and B 4 s each for two layers),
// and a policy's recomputation lands in the backward (full: + the forward, 2 s).
TEST(WeiPipe, OneRankIsSequentialAndRecomputationCosts) {
  EXPECT_DOUBLE_EQ(simulate_weipipe(unit_costs(), 1, 3, 2, WeiPipeOptions{}).makespan, 18.0);
  WeiPipeOptions full;
  full.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(simulate_weipipe(unit_costs(), 1, 3, 2, full).makespan, 24.0);
  // m not a multiple of p: rank 1 of 2 gets one micro-batch of three, rank 0 two.
  const SimResult r = simulate_weipipe(unit_costs(), 2, 3, 2, WeiPipeOptions{});
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 12.0);
  EXPECT_DOUBLE_EQ(r.stages[1].busy, 6.0);
  EXPECT_NE(test::error_of([] { simulate_weipipe(unit_costs(), 3, 2, 2, WeiPipeOptions{}); })
                .find("at least 3 layers"),
            std::string::npos);
}

// 7b (h 4096, ffn 11008, MHA, 32 layers, vocab 32000, untied) at p = 8, TP8, DP1, bf16:
//  per layer 3h*h + h*h + 3h*ffn + 2h = 202 383 360; chunk of 4 layers 809 533 440;
//  replicated embed 131 072 000 + final norm 4096 + head 131 072 000 = 262 148 096;
//  model states = (809 533 440 * 16 + 262 148 096 * 18 + 6 * 809 533 440 * 2) / 8
//               = 27 385 602 048 / 8 = 3 423 200 256 bytes.
TEST(WeiPipe, MemoryPerGpuOf7bOnEightRanks) {
  const ModelConfig cfg = ModelConfig::load("7b");
  EXPECT_EQ(weipipe_rank_params(cfg, 8), 809'533'440 + 262'148'096);
  const GpuMemory m = weipipe_memory(cfg, Layout{8, 8, 1}, 131072, 8e9, 2);
  EXPECT_DOUBLE_EQ(m.model_states, 3'423'200'256.0);
  EXPECT_DOUBLE_EQ(m.activations, 1e9);
  EXPECT_DOUBLE_EQ(m.working, gpu_memory(cfg, "1f1b", Layout{8, 8, 1}, 131072, 0, 0, 2).working);
}

// In compare: a row after zb1p whose every rank keeps one micro-batch's whole-model stash, as
// much as 1F1B's first stage keeps of p micro-batches at L/p layers (plus the head's), and whose
// ring traffic is 3 weight chunks a step, independent of the sequence length.
// compare's rows in the paper's setting: 7b at 128k on H20, TP8 x PP8, m = 16.
Comparison paper_setting_rows() {
  CostSpec spec;
  spec.model = "7b";
  spec.seq_len = 131072;
  spec.device = "h20";
  spec.tp = 8;
  return compare_schedules(build_cost(spec), 8, 16, 32);
}

TEST(WeiPipe, CompareRow) {
  const Comparison cmp = paper_setting_rows();
  auto row = [&](const std::string& label) {
    auto it = std::find_if(cmp.entries.begin(), cmp.entries.end(),
                           [&](const CompareEntry& e) { return e.label == label; });
    EXPECT_NE(it, cmp.entries.end()) << label;
    return *it;
  };
  const CompareEntry wei = row("weipipe"), one = row("1f1b");
  ASSERT_TRUE(wei.run.has_value()) << wei.error;
  EXPECT_EQ(wei.run->schedule.name, "weipipe");
  const int64_t peak = wei.run->result.stages[0].peak_activation_bytes;
  for (const StageResult& st : wei.run->result.stages) EXPECT_EQ(st.peak_activation_bytes, peak);
  EXPECT_GE(peak, one.run->result.stages[0].peak_activation_bytes);
  ASSERT_TRUE(wei.memory.has_value());
  EXPECT_DOUBLE_EQ(wei.memory->activations, static_cast<double>(peak));
  EXPECT_EQ(wei.fits, wei.memory->total() <= cmp.memory_limit);
  // Rank 3 of 8, m = 16 (31 steps): forward weights to rank 4 while rank 4 has a forward slot
  // next (steps 3..18: 16), backward weights to rank 2 while rank 2 has a backward slot next
  // (9..24: 16), partial sums from its first backward on (11..29: 19), the closing swap: 52
  // chunks of 4 layers / TP8 in bf16.
  const int64_t chunk = int64_t{4} * 202'383'360 * 2 / 8;
  EXPECT_EQ(wei.run->result.stages[3].sent_bytes, 52 * chunk);
  EXPECT_GT(wei.iteration, 0);
}

// The planner's WeiPipe case (plan and sweep) is the compare row of the same layout: one ring
// replay and one memory model behind both. And what the planner cannot run is an error, not a fit.
TEST(WeiPipe, PlannerCaseEqualsTheCompareRow) {
  const Comparison cmp = paper_setting_rows();
  const auto it = std::find_if(cmp.entries.begin(), cmp.entries.end(),
                               [](const CompareEntry& e) { return e.label == "weipipe"; });
  ASSERT_NE(it, cmp.entries.end());
  const CompareEntry& row = *it;
  ASSERT_TRUE(row.run.has_value()) << row.error;
  PlanCase pc;
  pc.schedule = "weipipe";
  pc.layout = Layout{8, 8, 1};
  pc.microbatches = 16;
  const ModelConfig cfg = ModelConfig::load("7b");
  const DeviceProfile& dev = device_profile("h20");
  const PlanResult r = evaluate(pc, cfg, 131072, dev, dev.memory_bytes);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_DOUBLE_EQ(r.makespan, row.run->result.makespan);
  EXPECT_DOUBLE_EQ(r.memory.total(), row.memory->total());
  EXPECT_EQ(r.fits, row.fits);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 131072.0 * 16 / r.iteration);
  pc.layout = Layout{1, 64, 1};  // 64 ranks, 32 layers: no chunk for half of them
  const PlanResult bad = evaluate(pc, cfg, 131072, dev, dev.memory_bytes);
  EXPECT_FALSE(bad.fits);
  EXPECT_NE(bad.error.find("64 ranks cannot share 32 layers"), std::string::npos) << bad.error;
}

}  // namespace
}  // namespace hp
