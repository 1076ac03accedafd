#include "sim/compare.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/adapipe.h"
#include "sim/weipipe.h"
#include "util/error.h"
#include "util/human_units.h"

namespace hp {

Comparison compare_schedules(const CostSetup& c, int stages, int microbatches, int layers) {
  Comparison cmp;
  cmp.stages = stages;
  cmp.microbatches = microbatches;
  cmp.layers = layers;
  auto add = [&](const std::string& label, const std::string& name, int folds, int v) {
    CompareEntry e;
    e.label = label;
    e.spec.name = name;
    e.spec.stages = stages;
    e.spec.microbatches = microbatches;
    e.spec.layers = layers;
    e.spec.folds = folds;
    e.spec.virtual_stages = v;
    cmp.entries.push_back(std::move(e));
  };
  add("gpipe", "gpipe", 1, 1);
  add("1f1b", "1f1b", 1, 1);
  if (!c.recompute) {  // 1F1B as the reference code and Megatron-LM run it (ir.h Recompute)
    add("1f1b no-attn", "1f1b", 1, 1);
    cmp.entries.back().spec.recompute = Recompute::kNoAttn;
    add("1f1b selective", "1f1b", 1, 1);
    cmp.entries.back().spec.recompute = Recompute::kSelective;
  }
  add("interleaved V=2", "interleaved", 1, 2);
  add("zb1p", "zb1p", 1, 1);
  add("weipipe", "weipipe", 1, 1);  // not a generator: sim/weipipe.h replays its ring
  add("adapipe", "1f1b", 1, 1);  // 1F1B with AdaPipe's layer split and recomputation per stage
  add("helix F=1", "helix", 1, 1);
  add("helix F=2", "helix", 2, 1);
  const Layout& lay = c.layout;
  cmp.memory_limit = c.device ? c.device->memory_bytes : 0;
  for (CompareEntry& e : cmp.entries) {
    try {
      if (e.label == "adapipe") {
        const AdaPipePlan plan = adapipe_plan(c, stages, microbatches, layers, cmp.memory_limit);
        HP_CHECK(plan.found, "adapipe: no layer split with per-stage recomputation fits {} bytes "
                 "per GPU", cmp.memory_limit);
        e.spec.stage_layers = plan.layers;
        e.spec.stage_recompute = plan.recompute;
      }
      e.run = e.spec.name == "weipipe" ? simulate_weipipe_spec(e.spec, c)
                                        : simulate_spec(e.spec, c, false);
    } catch (const Error& err) {
      e.error = err.what();
      continue;
    }
    const SimResult& r = e.run->result;
    if (c.model && c.device) {
      const std::string& sched = e.spec.name;
      const bool wei = sched == "weipipe";
      const bool uneven = !e.spec.stage_layers.empty();
      const double params = wei      ? static_cast<double>(weipipe_rank_params(*c.model, stages)) / lay.tp
                            : uneven ? plan_max_params(*c.model, e.spec.stage_layers, lay.tp)
                                     : stage_params_per_gpu(*c.model, sched, stages, lay.tp);
      const LinkProfile& dp_link =
          lay.tp * lay.dp <= c.device->gpus_per_node ? c.device->intra : c.device->inter;
      e.allreduce = dp_allreduce_time(params * 2, lay.dp, dp_link);
      double stash = 0;  // the busiest stage's, whole TP group
      std::vector<double> stashes;
      for (const auto& st : r.stages) {
        stashes.push_back(static_cast<double>(st.peak_activation_bytes) * lay.tp);
        stash = std::max(stash, stashes.back());
      }
      const Layout lay_p{lay.tp, stages, lay.dp};
      const int eb = c.device->bytes_per_elem();
      if (wei)
        e.memory = weipipe_memory(*c.model, lay_p, c.tokens_per_mb, stash, eb);
      else if (uneven)  // each stage's own parameters and stash
        e.memory = plan_gpu_memory(*c.model, lay_p, c.tokens_per_mb, e.spec.stage_layers, stashes,
                                   0, eb);
      else
        e.memory = gpu_memory(*c.model, sched, lay_p, c.tokens_per_mb, stash, 0, eb);
      e.fits = cmp.memory_limit <= 0 || e.memory->total() <= cmp.memory_limit;
    }
    e.iteration = r.makespan + e.allreduce;
    e.tokens_per_s = e.iteration > 0 && c.tokens_per_mb > 0
                         ? static_cast<double>(c.tokens_per_mb) * microbatches * lay.dp / e.iteration
                         : r.tokens_per_s;
    if (e.label == "1f1b") cmp.base = e.iteration;
  }
  return cmp;
}

nlohmann::json comparison_json(const Comparison& cmp, const CostSetup& c) {
  nlohmann::json out = {{"version", 1},
                        {"costs", c.cost.source()},
                        {"stages", cmp.stages},
                        {"microbatches", cmp.microbatches},
                        {"layers", cmp.layers},
                        {"tp", c.layout.tp},
                        {"data_parallel", c.layout.dp}};
  if (cmp.memory_limit > 0) out["memory_bytes"] = cmp.memory_limit;
  if (c.tokens_per_mb > 0) out["tokens_per_microbatch"] = c.tokens_per_mb;
  nlohmann::json results = nlohmann::json::array();
  for (const CompareEntry& e : cmp.entries) {
    nlohmann::json j;
    if (e.run) {
      j = sim_result_json(e.run->result, e.run->schedule);
      j["tokens_per_s"] = e.tokens_per_s;
      j["allreduce_s"] = e.allreduce;
      j["iteration_s"] = e.iteration;
      j["speedup_vs_1f1b"] = cmp.base > 0 ? cmp.base / e.iteration : 0.0;
      if (!e.spec.stage_layers.empty()) {
        j["partition"] = e.spec.stage_layers;
        j["stage_recompute"] = recompute_names(e.spec.stage_recompute);
      }
      if (e.memory) {
        j["memory_per_gpu_bytes"] = e.memory->total();
        j["memory"] = {{"model_states", e.memory->model_states},
                       {"activations", e.memory->activations},
                       {"working", e.memory->working}};
        if (cmp.memory_limit > 0) j["fits"] = e.fits;
      }
    } else {
      j = {{"schedule", e.spec.name}, {"folds", e.spec.folds}, {"virtual", e.spec.virtual_stages},
           {"error", e.error}};
    }
    j["label"] = e.label;
    results.push_back(std::move(j));
  }
  out["results"] = std::move(results);
  return out;
}

std::string comparison_text(const Comparison& cmp, const CostSetup& c) {
  std::string out;
  const Layout& lay = c.layout;
  const double base = cmp.base, memory_limit = cmp.memory_limit;
  out += fmt::format(
      "costs: {}   p={} m={} L={}{}\n\n", c.cost.source(), cmp.stages, cmp.microbatches, cmp.layers,
      lay.tp > 1 || lay.dp > 1
          ? "   layout " + Layout{lay.tp, cmp.stages, lay.dp}.str() + " (stash and memory per GPU)"
          : "");
  out += fmt::format("{:<16} {:<9} {:>11} {:>13} {:>7} {:>8} {:>6} {:>12} {:>12} {:>12}\n",
                     "schedule", "recomp", "iteration", "tokens/s", "vs 1f1b", "bubble", "MFU",
                     "stash max", "stash min", "mem/GPU");
  int over = 0;
  for (const CompareEntry& e : cmp.entries) {
    if (!e.run) {
      out += fmt::format("{:<16} n/a: {}\n", e.label, e.error);
      continue;
    }
    const SimResult& r = e.run->result;
    int64_t mx = 0, mn = INT64_MAX;
    for (const auto& st : r.stages) {
      mx = std::max(mx, st.peak_activation_bytes);
      mn = std::min(mn, st.peak_activation_bytes);
    }
    over += e.fits ? 0 : 1;
    out += fmt::format(
        "{:<16} {:<9} {:>11} {:>13} {:>7} {:>7.1f}% {:>5.1f}% {:>12} {:>12} {:>12}{}\n", e.label,
        recompute_label(e.run->schedule), human_seconds(e.iteration),
        e.tokens_per_s > 0 ? fmt::format("{:.1f}", e.tokens_per_s) : "-",
        base > 0 ? fmt::format("{:.3f}", base / e.iteration) : "-", 100 * r.bubble_fraction,
        100 * r.mfu * r.makespan / e.iteration,
        c.model ? human_bytes(static_cast<double>(mx)) : "-",
        c.model ? human_bytes(static_cast<double>(mn)) : "-",
        e.memory ? human_bytes(e.memory->total()) : "-", e.fits ? "" : "  DOES NOT FIT");
  }
  if (over > 0)
    out += fmt::format(
        "\nDOES NOT FIT: {} of the rows need more than the {} of {} per GPU; their times "
        "are what the run would take with enough memory\n",
        over, human_bytes(memory_limit), c.device->name);
  if (c.model) {
    out += fmt::format("\npeak activation stash per stage:\n");
    for (const CompareEntry& e : cmp.entries) {
      if (!e.run) continue;
      out += fmt::format("  {:<16}", e.label);
      for (const auto& st : e.run->result.stages)
        out += fmt::format(" {:>10}", human_bytes(static_cast<double>(st.peak_activation_bytes)));
      out += fmt::format("\n");
    }
  }
  return out;
}

}  // namespace hp
