// The library side of the simulator commands: the cost setup from plain inputs (sim/sim_setup.h),
// every schedule side by side (sim/compare.h) and plan/sweep's searches (sim/plan.h), each checked
// against the lower-level calls they are made of.
#include "sim/sim_setup.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "schedule/lower.h"
#include "sim/compare.h"
#include "sim/memory.h"
#include "sim/plan.h"
#include "../error_text.h"

namespace hp {
namespace {

CostSpec device_spec(int tp = 1) {
  CostSpec s;
  s.model = "small";
  s.seq_len = 4096;
  s.device = "h100";
  s.tp = tp;
  return s;
}

TEST(SimSetup, CostSourceMustBeExactlyOne) {
  CostSpec none;
  EXPECT_NE(test::error_of([&] { build_cost(none); }).find("no cost source"), std::string::npos);
  CostSpec both = device_spec();
  both.part_costs = "x.json";
  EXPECT_NE(test::error_of([&] { build_cost(both); }).find("not both"), std::string::npos);
  CostSpec no_seq = device_spec();
  no_seq.seq_len = 0;
  EXPECT_NE(test::error_of([&] { build_cost(no_seq); }).find("--model needs --seq-len"),
            std::string::npos);
  CostSpec odd_tp = device_spec(3);
  EXPECT_NE(test::error_of([&] { build_cost(odd_tp); }).find("power of two"), std::string::npos);
}

TEST(SimSetup, LayersComeFromTheModelOrMustBeGiven) {
  const CostSetup c = build_cost(device_spec());
  ASSERT_TRUE(c.model.has_value());
  EXPECT_EQ(resolve_layers(0, c), c.model->layers);
  EXPECT_EQ(resolve_layers(static_cast<int>(c.model->layers), c), c.model->layers);
  EXPECT_NE(test::error_of([&] { resolve_layers(static_cast<int>(c.model->layers) + 1, c); })
                .find("differs from the model's"),
            std::string::npos);
  CostSetup no_model;
  EXPECT_EQ(resolve_layers(6, no_model), 6);
  EXPECT_NE(test::error_of([&] { resolve_layers(0, no_model); }).find("--layers=L is needed"),
            std::string::npos);
}

// The per-stage stash of a simulated run is the value-table walk's peak of one TP rank: with tp =
// 2, half the stage's, plus half the loss's log-sum-exp (whole on every rank) on the head's stage.
TEST(SimSetup, SimulatedStashIsTheStashPeakPerTensorRank) {
  for (int tp : {1, 2}) {
    const CostSetup c = build_cost(device_spec(tp));
    const ScheduleSpec spec{"helix", 2, 4, static_cast<int>(c.model->layers), 2, 1, {},
                            TransferMode::kWeights};
    const SimRun run = simulate_spec(spec, c, false);
    Schedule ref = generate(run.spec);
    lower(ref, &*c.model, c.tokens_per_mb, c.elem_bytes);
    const auto peaks = stash_peaks(ref, *c.model, c.tokens_per_mb, c.elem_bytes);
    ASSERT_EQ(run.result.stages.size(), peaks.size());
    for (size_t s = 0; s < peaks.size(); ++s) {
      EXPECT_GT(peaks[s], 0);
      EXPECT_EQ(run.result.stages[s].peak_activation_bytes,
                stash_peaks(ref, *c.model, c.tokens_per_mb, c.elem_bytes, tp)[s])
          << "tp " << tp;
      // The stash held per rank is at least the stage's / tp and at most one lse of a
      // micro-batch per micro-batch in flight above it.
      EXPECT_GE(run.result.stages[s].peak_activation_bytes, peaks[s] / tp);
      EXPECT_LE(run.result.stages[s].peak_activation_bytes,
                peaks[s] / tp + 4 * c.tokens_per_mb * c.elem_bytes.stats);
    }
    EXPECT_GT(run.result.makespan, 0);
  }
}

// One stage runs every part's F, I and W of every micro-batch and layer back to back: 9 time
// units per micro-batch and layer (embed and head are free).
TEST(SimSetup, UnitCostsChargeOneUnitPerLayerPartAndDirection) {
  for (int m : {1, 3}) {
    for (int layers : {1, 2}) {
      const Schedule s = generate(ScheduleSpec{"1f1b", 1, m, layers, 1, 1, {}, TransferMode::kWeights});
      const SimResult r = simulate_unit_costs(s);
      EXPECT_DOUBLE_EQ(r.makespan, 9.0 * m * layers) << "m " << m << " L " << layers;
      EXPECT_FALSE(r.timeline.events.empty());
    }
  }
}

TEST(Compare, RowsAreTheTenSchedulesWithIterationAndBase) {
  const CostSetup c = build_cost(device_spec());
  const int L = static_cast<int>(c.model->layers);
  const Comparison cmp = compare_schedules(c, 2, 4, L);
  ASSERT_EQ(cmp.entries.size(), 10u);  // 1F1B thrice (none, no-attn, selective) and in adapipe
  EXPECT_EQ(cmp.memory_limit, c.device->memory_bytes);
  for (const CompareEntry& e : cmp.entries) {
    ASSERT_TRUE(e.run.has_value()) << e.label << ": " << e.error;
    EXPECT_DOUBLE_EQ(e.iteration, e.run->result.makespan + e.allreduce);
    EXPECT_DOUBLE_EQ(e.tokens_per_s, static_cast<double>(c.tokens_per_mb) * 4 / e.iteration);
    ASSERT_TRUE(e.memory.has_value());
    EXPECT_EQ(e.fits, e.memory->total() <= cmp.memory_limit);
    if (e.label == "1f1b") {
      EXPECT_EQ(cmp.base, e.iteration);
    }
  }
  const nlohmann::json j = comparison_json(cmp, c);
  ASSERT_EQ(j["results"].size(), 10u);
  EXPECT_EQ(j["results"][1]["label"], "1f1b");
  EXPECT_DOUBLE_EQ(j["results"][1]["speedup_vs_1f1b"].get<double>(), 1.0);
}

TEST(Compare, AShapeAScheduleCannotRunIsAnErrorRow) {
  const CostSetup c = build_cost(device_spec());
  // Interleaved V=2 on 3 stages needs L divisible by 6; the model has 4 layers.
  ASSERT_EQ(c.model->layers, 4);
  const Comparison cmp = compare_schedules(c, 3, 4, 4);
  const auto it = std::find_if(cmp.entries.begin(), cmp.entries.end(),
                               [](const CompareEntry& e) { return e.label == "interleaved V=2"; });
  ASSERT_NE(it, cmp.entries.end());
  EXPECT_FALSE(it->run.has_value());
  EXPECT_FALSE(it->error.empty());
}

TEST(Plan, UsableMemoryIsTheFlagOrTheDevices) {
  DeviceProfile d = device_profile("h100");
  EXPECT_EQ(usable_memory(d, 0), d.memory_bytes);
  EXPECT_EQ(usable_memory(d, 2), 2.0 * (1ull << 30));
  d.memory_bytes = 0;
  EXPECT_NE(test::error_of([&] { usable_memory(d, 0); }).find("states no memory"), std::string::npos);
}

TEST(Plan, CandidatesPerMicroBatchCount) {
  const Layout lay{1, 2, 1};
  const auto one = plan_candidates(lay, {2});
  // gpipe, 1f1b, zb1p, weipipe and interleaved x {none, selective, full}; adapipe (searched);
  // helix F=1,2 x 2 transfers x 3 policies.
  EXPECT_EQ(one.size(), 5u * 3 + 1 + 2 * 2 * 3);
  EXPECT_EQ(std::count_if(one.begin(), one.end(),
                          [](const PlanCase& c) { return c.schedule == "weipipe"; }),
            3);
  EXPECT_EQ(std::count_if(one.begin(), one.end(),
                          [](const PlanCase& c) { return c.recompute == Recompute::kSelective; }),
            5);
  EXPECT_EQ(plan_candidates(lay, {2, 4, 8}).size(), 3 * one.size());
  for (const PlanCase& c : one) EXPECT_EQ(c.virtual_stages, c.schedule == "interleaved" ? 2 : 1);
}

// search_plans keeps exactly the fitting candidates, fastest first, each as evaluate_fitting
// rates it on its own.
TEST(Plan, SearchKeepsTheFittingCandidatesFastestFirst) {
  const ModelConfig cfg = ModelConfig::load("small");
  const DeviceProfile dev = device_profile("h100");
  const double memory = usable_memory(dev, 0);
  const PlanSearch found = search_plans(cfg, 4096, dev, memory, 4, 0);
  ASSERT_FALSE(found.fit.empty());
  EXPECT_LE(found.fit.size() + found.too_big, found.tried);
  for (size_t i = 0; i < found.fit.size(); ++i) {
    const PlanResult& r = found.fit[i];
    if (i > 0) {
      EXPECT_GE(found.fit[i - 1].tokens_per_s, r.tokens_per_s);
    }
    const PlanResult again = evaluate_fitting(r.c, cfg, 4096, dev, memory);
    EXPECT_TRUE(again.fits);
    EXPECT_DOUBLE_EQ(again.tokens_per_s, r.tokens_per_s);
  }
  const PlanVerdict v = plan_verdict(found.fit, cfg, 4096, dev);
  EXPECT_FALSE(v.reason.empty());
  EXPECT_TRUE(v.overlap.contains("helix"));
  EXPECT_EQ(v.overlap_lines.size(), v.overlap.size());
  EXPECT_EQ(plan_ranked_json(found.fit, 3).size(), std::min<size_t>(3, found.fit.size()));
}

// best_fitting is the fastest fitting case of the family over the PP >= 2 layouts.
TEST(Plan, BestFittingIsTheFastestOfItsFamily) {
  const ModelConfig cfg = ModelConfig::load("small");
  const DeviceProfile dev = device_profile("h100");
  const double memory = usable_memory(dev, 0);
  const PlanResult best = best_fitting("1f1b", cfg, 4096, 8, dev, memory, 8, 0, 0);
  ASSERT_TRUE(best.fits);
  double fastest = 0;
  for (const Layout& lay : layouts(8, static_cast<int>(cfg.layers), dev.gpus_per_node)) {
    if (8 % lay.dp) continue;
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      PlanCase c;
      c.schedule = "1f1b";
      c.layout = lay;
      c.microbatches = 8 / lay.dp;
      c.recompute = r;
      const PlanResult x = evaluate_fitting(c, cfg, 4096, dev, memory);
      if (x.fits) fastest = std::max(fastest, x.tokens_per_s);
    }
  }
  EXPECT_DOUBLE_EQ(best.tokens_per_s, fastest);
  EXPECT_EQ(sweep_entry_json(best)["tokens_per_s"].get<double>(), best.tokens_per_s);
  PlanResult none;
  EXPECT_EQ(sweep_entry_json(none), nlohmann::json({{"fits", false}}));
}

}  // namespace
}  // namespace hp
