// helixpipe compare: every schedule (gpipe, 1f1b, interleaved V=2, zb1p, helix F=1, helix F=2) on
// one model, sequence length and device, side by side: throughput, bubble, peak memory per stage.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "util/error.h"

namespace hp::cli {

namespace {

struct Entry {
  std::string label;
  ScheduleSpec spec;
  std::optional<SimRun> run;
  std::string error;  // why this schedule cannot run this shape
};

}  // namespace

int cmd_compare(int argc, char** argv) {
  CLI::App app{"Simulate every schedule side by side on one model, sequence length and device:\n"
               "throughput (and its ratio to 1F1B), bubble, MFU and peak activation memory per stage.",
               "helixpipe compare"};
  app.footer(
      "Schedules: gpipe, 1f1b, interleaved (V=2), zb1p, helix F=1, helix F=2, each with its own\n"
      "recomputation policy (helix no-attn, the others none) unless --recompute is given. A\n"
      "schedule that cannot run the shape is listed with the reason.\n\n"
      "examples:\n"
      "  helixpipe compare --model=7b --seq-len=131072 --stages=8 --microbatches=16 --device=h20\n"
      "  helixpipe compare --model=1.3b --seq-len=32768 --stages=4 --microbatches=8 --device=a800 \\\n"
      "      --recompute=full --format=json");
  ShapeFlags shape;
  CostFlags costf;
  std::string format = "text";
  add_shape_flags(app, shape, /*with_schedule=*/false);
  add_cost_flags(app, costf);
  add_format_flag(app, format);
  if (auto rc = parse_or_exit(app, argc, argv)) return *rc;
  HP_CHECK(shape.folds == 1 && shape.virtual_stages == 1,
           "compare runs helix with F=1 and F=2 and interleaved with V=2 itself; leave out --folds "
           "and --virtual");

  CostSetup c = build_cost(costf);
  const int L = resolve_layers(shape, c);
  std::vector<Entry> entries;
  auto add = [&](const std::string& label, const std::string& name, int folds, int v) {
    Entry e;
    e.label = label;
    e.spec.name = name;
    e.spec.stages = shape.stages;
    e.spec.microbatches = shape.microbatches;
    e.spec.layers = L;
    e.spec.folds = folds;
    e.spec.virtual_stages = v;
    entries.push_back(std::move(e));
  };
  add("gpipe", "gpipe", 1, 1);
  add("1f1b", "1f1b", 1, 1);
  add("interleaved V=2", "interleaved", 1, 2);
  add("zb1p", "zb1p", 1, 1);
  add("helix F=1", "helix", 1, 1);
  add("helix F=2", "helix", 2, 1);
  double base = 0;
  for (Entry& e : entries) {
    try {
      e.run = run_one(e.spec, c, false);
      if (e.spec.name == "1f1b") base = e.run->result.makespan;
    } catch (const Error& err) {
      e.error = err.what();
    }
  }

  if (format == "json") {
    nlohmann::json out = {{"version", 1},
                          {"costs", c.cost.source()},
                          {"stages", shape.stages},
                          {"microbatches", shape.microbatches},
                          {"layers", L}};
    if (c.tokens_per_mb > 0) out["tokens_per_microbatch"] = c.tokens_per_mb;
    nlohmann::json results = nlohmann::json::array();
    for (const Entry& e : entries) {
      nlohmann::json j;
      if (e.run) {
        j = sim_result_json(e.run->result, e.run->schedule);
        j["speedup_vs_1f1b"] = base > 0 ? base / e.run->result.makespan : 0.0;
      } else {
        j = {{"schedule", e.spec.name}, {"folds", e.spec.folds}, {"virtual", e.spec.virtual_stages},
             {"error", e.error}};
      }
      j["label"] = e.label;
      results.push_back(std::move(j));
    }
    out["results"] = std::move(results);
    fmt::print("{}\n", out.dump(2));
    return 0;
  }

  fmt::print("costs: {}   p={} m={} L={}\n\n", c.cost.source(), shape.stages, shape.microbatches, L);
  fmt::print("{:<16} {:<8} {:>11} {:>13} {:>7} {:>8} {:>6} {:>12} {:>12}\n", "schedule", "recomp",
             "makespan", "tokens/s", "vs 1f1b", "bubble", "MFU", "stash max", "stash min");
  for (const Entry& e : entries) {
    if (!e.run) {
      fmt::print("{:<16} n/a: {}\n", e.label, e.error);
      continue;
    }
    const SimResult& r = e.run->result;
    int64_t mx = 0, mn = INT64_MAX;
    for (const auto& st : r.stages) {
      mx = std::max(mx, st.peak_activation_bytes);
      mn = std::min(mn, st.peak_activation_bytes);
    }
    fmt::print("{:<16} {:<8} {:>11} {:>13} {:>7} {:>7.1f}% {:>5.1f}% {:>12} {:>12}\n", e.label,
               recompute_str(e.run->schedule.recompute), human_seconds(r.makespan),
               r.tokens_per_s > 0 ? fmt::format("{:.1f}", r.tokens_per_s) : "-",
               base > 0 ? fmt::format("{:.3f}", base / r.makespan) : "-", 100 * r.bubble_fraction,
               100 * r.mfu, c.model ? human_bytes(static_cast<double>(mx)) : "-",
               c.model ? human_bytes(static_cast<double>(mn)) : "-");
  }
  if (c.model) {
    fmt::print("\npeak activation stash per stage:\n");
    for (const Entry& e : entries) {
      if (!e.run) continue;
      fmt::print("  {:<16}", e.label);
      for (const auto& st : e.run->result.stages)
        fmt::print(" {:>10}", human_bytes(static_cast<double>(st.peak_activation_bytes)));
      fmt::print("\n");
    }
  }
  return 0;
}

}  // namespace hp::cli
