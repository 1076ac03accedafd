// AdaPipe's search (sim/adapipe.h): the dynamic programme on hand-made tables worked out on paper,
// its time table against the op costs the simulator charges, its memory table against the stash
// replay of the uneven 1F1B it produces, and the compare row built from it.
#include "sim/adapipe.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "schedule/generate.h"
#include "sim/compare.h"
#include "sim/memory.h"
#include "sim/sim_setup.h"
#include "util/error.h"

namespace hp {
namespace {

// 3 stages, 7 layers. Per layer, forward + backward takes 1.0 s with no recomputation, 1.2 s with
// no-attn and 1.5 s with full; it stashes 4, 2 and 1 bytes per micro-batch. The last stage's head
// adds 1.0 s. Stage i keeps 3 - i micro-batches in flight, so M(i, n, r) = (3 - i) * n * stash(r).
AdaPipeTable toy_table(double limit) {
  AdaPipeTable t;
  t.stages = 3;
  t.layers = 7;
  t.memory_limit = limit;
  t.policies = {Recompute::kNone, Recompute::kNoAttn, Recompute::kFull};  // the three priced here
  auto per = [](Recompute r, double none, double no_attn, double full) {
    return r == Recompute::kNone ? none : r == Recompute::kNoAttn ? no_attn : full;
  };
  t.time = [per](int i, int n, Recompute r) {
    return n * per(r, 1.0, 1.2, 1.5) + (i == 2 ? 1.0 : 0.0);
  };
  t.memory = [per](int i, int n, Recompute r) { return (3 - i) * n * per(r, 4, 2, 1); };
  return t;
}

// Limit 16 bytes. Stage 0 (3 in flight) fits n <= 1 without recomputation, n <= 2 with no-attn,
// n <= 5 with full: c(0, n) = 1.0, 2.4, 4.5, ... Stage 1 (2 in flight): none n <= 2, no-attn
// n <= 4: c(1, n) = 1, 2, 3.6, 4.8. Stage 2 (1 in flight): none n <= 4: c(2, n) = n + 1. A
// bottleneck of 3.6 allows n0 <= 2, n1 <= 3, n2 <= 2, which is 7 layers only as (2, 3, 2); no
// lower one reaches 7 (at 3.0: 2 + 2 + 2).
TEST(AdaPipe, HandWorkedPartitionAndPolicies) {
  const AdaPipePlan plan = adapipe_search(toy_table(16));
  ASSERT_TRUE(plan.found);
  EXPECT_EQ(plan.layers, (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(plan.recompute,
            (std::vector<Recompute>{Recompute::kNoAttn, Recompute::kNoAttn, Recompute::kNone}));
  ASSERT_EQ(plan.stage_time.size(), 3u);
  EXPECT_DOUBLE_EQ(plan.stage_time[0], 2.4);
  EXPECT_DOUBLE_EQ(plan.stage_time[1], 3.6);
  EXPECT_DOUBLE_EQ(plan.stage_time[2], 3.0);
  EXPECT_DOUBLE_EQ(plan.bottleneck, 3.6);
  EXPECT_EQ(plan.stage_memory, (std::vector<double>{12, 12, 8}));
}

// Limit 11 bytes. c(0, n) = 1.2 (no-attn), 3.0 (full), 4.5 (full); c(1, n) = 1, 2.4, 4.5, 6;
// c(2, n) = 2, 3, 4.6 (no-attn). At 3.0 at most 2 + 2 + 2 layers fit, at 4.5 they do: the
// bottleneck is 4.5, reached by (3, 3, 1) with total 11, (2, 3, 2) with 10.5 and (3, 2, 2) with
// 9.9; the second pass takes the least total.
TEST(AdaPipe, SecondPassTakesTheLeastTotalUnderTheBottleneck) {
  const AdaPipePlan plan = adapipe_search(toy_table(11));
  ASSERT_TRUE(plan.found);
  EXPECT_EQ(plan.layers, (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(plan.recompute,
            (std::vector<Recompute>{Recompute::kFull, Recompute::kNoAttn, Recompute::kNone}));
  EXPECT_DOUBLE_EQ(plan.bottleneck, 4.5);
  EXPECT_DOUBLE_EQ(plan.stage_time[0] + plan.stage_time[1] + plan.stage_time[2], 9.9);
}

// Limit 2 bytes: stage 0 needs 3 bytes for one layer even with full recomputation.
TEST(AdaPipe, NothingFitsMeansNoPlan) {
  EXPECT_FALSE(adapipe_search(toy_table(2)).found);
  // Without a limit every stage keeps everything and only balance counts.
  const AdaPipePlan free = adapipe_search(toy_table(0));
  ASSERT_TRUE(free.found);
  for (Recompute r : free.recompute) EXPECT_EQ(r, Recompute::kNone);
  EXPECT_DOUBLE_EQ(free.bottleneck, 3.0);
}

// T(i, n, r) from part costs. Per layer F + I + W: pre 1 + 1 + 1, attn 4 + 6 + 0.5, post
// 2 + 2 + 2 = 19.5; full recomputes the forward, 1 + 4 + 2 = 7 more; no-attn recomputes pre and
// post (3) plus attention's own QKV (0.5). embed costs 0.25 per direction, head 3 + 3 + 1.
TEST(AdaPipe, TimeTableIsTheSimulatorsOpCost) {
  CostModel cost;
  auto set = [&](PartKind k, double f, double i, double w) {
    cost.set_part_time(k, Dir::kF, f);
    cost.set_part_time(k, Dir::kI, i);
    cost.set_part_time(k, Dir::kW, w);
  };
  set(PartKind::kPre, 1, 1, 1);
  set(PartKind::kAttn, 4, 6, 0.5);
  set(PartKind::kPost, 2, 2, 2);
  set(PartKind::kEmbed, 0.25, 0.25, 0.25);
  set(PartKind::kHead, 3, 3, 1);
  cost.set_attn_recompute_time(0.5);
  const AdaPipeTable t = adapipe_table(cost, nullptr, 0, ElemBytes{}, Layout{}, TransferMode::kWeights,
                                       3, 8, 7, 0);
  EXPECT_FALSE(t.memory);
  EXPECT_DOUBLE_EQ(t.time(0, 2, Recompute::kNone), 2 * 19.5 + 0.75);
  EXPECT_DOUBLE_EQ(t.time(0, 1, Recompute::kFull), 19.5 + 7 + 0.75 + 0.25);  // embed's F again
  EXPECT_DOUBLE_EQ(t.time(1, 2, Recompute::kNoAttn), 2 * (19.5 + 3.5));
  EXPECT_DOUBLE_EQ(t.time(2, 3, Recompute::kFull), 3 * (19.5 + 7) + 7);  // the head is not rerun
}

CostSetup small_h100() {
  CostSpec s;
  s.model = "small";
  s.seq_len = 4096;
  s.device = "h100";
  return build_cost(s);
}

// The memory the search assumes for stage i is what the uneven 1F1B it asks for peaks at when
// replayed op by op: min(m, p - i) micro-batches of the stage's forward stash.
TEST(AdaPipe, MemoryTableIsTheReplayedStashOfTheUnevenPlan) {
  const CostSetup c = small_h100();
  const ModelConfig& cfg = *c.model;
  ASSERT_EQ(cfg.layers, 4);
  ScheduleSpec spec;
  spec.name = "1f1b";
  spec.stages = 3;
  spec.microbatches = 4;
  spec.layers = 4;
  spec.stage_layers = {1, 2, 1};
  spec.stage_recompute = {Recompute::kFull, Recompute::kNoAttn, Recompute::kNone};
  const Schedule s = generate(spec);
  EXPECT_EQ(recompute_label(s), "mixed");
  EXPECT_EQ(s.stages[1].ops.front().parts.front(), Part::pre(2));
  EXPECT_EQ(s.stages[2].ops.front().parts.back(), Part::head());
  const auto peaks = stash_peaks(s, cfg, c.tokens_per_mb, c.elem_bytes);
  const AdaPipeTable t = adapipe_table(c.cost, &cfg, c.tokens_per_mb, c.elem_bytes, c.layout,
                                       c.transfer, 3, 4, 4, 0);
  for (int i = 0; i < 3; ++i) {
    const int n = spec.stage_layers[i];
    const Recompute r = spec.stage_recompute[i];
    const double params = stage_params_per_gpu(cfg, n, i == 0, i == 2, c.layout.tp);
    const double want = stage_gpu_memory(cfg, c.layout, c.tokens_per_mb, params,
                                         static_cast<double>(peaks[i]), 0, c.elem_bytes.compute)
                            .total();
    EXPECT_DOUBLE_EQ(t.memory(i, n, r), want) << "stage " << i;
  }
  // Full recomputation keeps only the op's input: less than no-attn's and none's stash.
  EXPECT_LT(t.memory(1, 2, Recompute::kFull), t.memory(1, 2, Recompute::kNoAttn));
  EXPECT_LT(t.memory(1, 2, Recompute::kNoAttn), t.memory(1, 2, Recompute::kNone));
}

TEST(AdaPipe, UnevenPlansAreCheckedByTheGenerator) {
  ScheduleSpec spec;
  spec.name = "1f1b";
  spec.stages = 2;
  spec.microbatches = 2;
  spec.layers = 4;
  spec.stage_layers = {1, 2};
  EXPECT_THROW(generate(spec), Error);  // adds up to 3
  spec.stage_layers = {4, 0};
  EXPECT_THROW(generate(spec), Error);
  spec.stage_layers = {3, 1};
  spec.stage_recompute = {Recompute::kFull};
  EXPECT_THROW(generate(spec), Error);  // one policy for two stages
  spec.stage_recompute.clear();
  spec.name = "helix";
  EXPECT_THROW(generate(spec), Error);
}

// compare's adapipe row: the plan fits the device, its memory is the search's worst stage, and
// the JSON carries the partition and the per-stage policies.
TEST(AdaPipe, CompareRowCarriesItsPlan) {
  const CostSetup c = small_h100();
  const Comparison cmp = compare_schedules(c, 2, 4, 4);
  const auto it = std::find_if(cmp.entries.begin(), cmp.entries.end(),
                               [](const CompareEntry& e) { return e.label == "adapipe"; });
  ASSERT_NE(it, cmp.entries.end());
  ASSERT_TRUE(it->run.has_value()) << it->error;
  const AdaPipePlan plan = adapipe_plan(c, 2, 4, 4, cmp.memory_limit);
  EXPECT_EQ(it->spec.stage_layers, plan.layers);
  EXPECT_TRUE(it->fits);
  ASSERT_TRUE(it->memory.has_value());
  EXPECT_NEAR(it->memory->total(), *std::max_element(plan.stage_memory.begin(), plan.stage_memory.end()),
              1e-6 * it->memory->total());
  const nlohmann::json j = comparison_json(cmp, c);
  const auto row = std::find_if(j["results"].begin(), j["results"].end(),
                                [](const nlohmann::json& r) { return r["label"] == "adapipe"; });
  ASSERT_NE(row, j["results"].end());
  EXPECT_EQ((*row)["partition"].get<std::vector<int>>(), plan.layers);
  EXPECT_EQ((*row)["stage_recompute"].size(), 2u);
  EXPECT_EQ((*row)["schedule"], "1f1b");
  EXPECT_TRUE(row->contains("speedup_vs_1f1b"));
}

}  // namespace
}  // namespace hp
