// helixpipe compare: every schedule (gpipe, 1f1b, interleaved V=2, zb1p, helix F=1, helix F=2) on
// one model, sequence length and device, side by side: throughput, bubble, peak memory per stage;
// with --tp / --data-parallel in a TP x PP x DP layout (sim/parallel.h), and with a device, whether
// each schedule fits in the device's memory.
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
  double allreduce = 0;  // DP gradient all-reduce after the flush
  double iteration = 0;  // makespan + allreduce
  double tokens_per_s = 0;  // all DP pipelines
  std::optional<GpuMemory> memory;  // per GPU, when the model and the device are known
  bool fits = true;
};

}  // namespace

int cmd_compare(int argc, char** argv) {
  CLI::App app{"Simulate every schedule side by side on one model, sequence length and device:\n"
               "throughput (and its ratio to 1F1B), bubble, MFU and peak activation memory per stage.",
               "helixpipe compare"};
  app.footer(
      "Schedules: gpipe, 1f1b, interleaved (V=2), zb1p, helix F=1, helix F=2, each with its own\n"
      "recomputation policy (helix no-attn, the others none) unless --recompute is given. A\n"
      "schedule that cannot run the shape is listed with the reason. With --device every row\n"
      "states its memory per GPU (model states, stash, one layer's backward; docs/simulator.md)\n"
      "and a row that does not fit in the device's memory is marked (\"fits\": false in JSON).\n"
      "--tp/--data-parallel simulate one pipeline of a TP x PP x DP layout (ranks as in plan and\n"
      "sweep; a stage's inter-node messages share its GPU's network port).\n\n"
      "examples:\n"
      "  helixpipe compare --model=7b --seq-len=131072 --stages=8 --microbatches=16 --device=h20\n"
      "  helixpipe compare --model=7b --seq-len=131072 --tp=8 --stages=8 --microbatches=16 \\\n"
      "      --device=h20 --format=json\n"
      "  helixpipe compare --model=1.3b --seq-len=32768 --stages=4 --microbatches=8 --device=a800 \\\n"
      "      --recompute=full --format=json");
  ShapeFlags shape;
  CostFlags costf;
  std::string format = "text";
  add_shape_flags(app, shape, /*with_schedule=*/false);
  add_cost_flags(app, costf);
  add_layout_flags(app, costf);
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
  const Layout& lay = c.layout;
  const double memory_limit = c.device ? c.device->memory_bytes : 0;
  double base = 0;  // 1F1B's iteration
  for (Entry& e : entries) {
    try {
      e.run = run_one(e.spec, c, false);
    } catch (const Error& err) {
      e.error = err.what();
      continue;
    }
    const SimResult& r = e.run->result;
    if (c.model && c.device) {
      const std::string& sched = e.spec.name;
      const double params =
          static_cast<double>(max_stage_params(*c.model, sched, shape.stages)) / lay.tp;
      const LinkProfile& dp_link =
          lay.tp * lay.dp <= c.device->gpus_per_node ? c.device->intra : c.device->inter;
      e.allreduce = dp_allreduce_time(params * 2, lay.dp, dp_link);
      double stash = 0;  // the busiest stage's, whole TP group
      for (const auto& st : r.stages)
        stash = std::max(stash, static_cast<double>(st.peak_activation_bytes) * lay.tp);
      e.memory = gpu_memory(*c.model, sched, {lay.tp, shape.stages, lay.dp}, c.tokens_per_mb, stash,
                            0, c.device->bytes_per_elem());
      e.fits = memory_limit <= 0 || e.memory->total() <= memory_limit;
    }
    e.iteration = r.makespan + e.allreduce;
    e.tokens_per_s = e.iteration > 0 && c.tokens_per_mb > 0
                         ? static_cast<double>(c.tokens_per_mb) * shape.microbatches * lay.dp /
                               e.iteration
                         : r.tokens_per_s;
    if (e.spec.name == "1f1b") base = e.iteration;
  }

  if (format == "json") {
    nlohmann::json out = {{"version", 1},
                          {"costs", c.cost.source()},
                          {"stages", shape.stages},
                          {"microbatches", shape.microbatches},
                          {"layers", L},
                          {"tp", lay.tp},
                          {"data_parallel", lay.dp}};
    if (memory_limit > 0) out["memory_bytes"] = memory_limit;
    if (c.tokens_per_mb > 0) out["tokens_per_microbatch"] = c.tokens_per_mb;
    nlohmann::json results = nlohmann::json::array();
    for (const Entry& e : entries) {
      nlohmann::json j;
      if (e.run) {
        j = sim_result_json(e.run->result, e.run->schedule);
        j["tokens_per_s"] = e.tokens_per_s;
        j["allreduce_s"] = e.allreduce;
        j["iteration_s"] = e.iteration;
        j["speedup_vs_1f1b"] = base > 0 ? base / e.iteration : 0.0;
        if (e.memory) {
          j["memory_per_gpu_bytes"] = e.memory->total();
          j["memory"] = {{"model_states", e.memory->model_states},
                         {"activations", e.memory->activations},
                         {"working", e.memory->working}};
          if (memory_limit > 0) j["fits"] = e.fits;
        }
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

  fmt::print("costs: {}   p={} m={} L={}{}\n\n", c.cost.source(), shape.stages, shape.microbatches, L,
             lay.tp > 1 || lay.dp > 1 ? "   layout " + Layout{lay.tp, shape.stages, lay.dp}.str() +
                                            " (stash and memory per GPU)"
                                      : "");
  fmt::print("{:<16} {:<8} {:>11} {:>13} {:>7} {:>8} {:>6} {:>12} {:>12} {:>12}\n", "schedule",
             "recomp", "iteration", "tokens/s", "vs 1f1b", "bubble", "MFU", "stash max",
             "stash min", "mem/GPU");
  int over = 0;
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
    over += e.fits ? 0 : 1;
    fmt::print("{:<16} {:<8} {:>11} {:>13} {:>7} {:>7.1f}% {:>5.1f}% {:>12} {:>12} {:>12}{}\n",
               e.label, recompute_str(e.run->schedule.recompute), human_seconds(e.iteration),
               e.tokens_per_s > 0 ? fmt::format("{:.1f}", e.tokens_per_s) : "-",
               base > 0 ? fmt::format("{:.3f}", base / e.iteration) : "-", 100 * r.bubble_fraction,
               100 * r.mfu * r.makespan / e.iteration,
               c.model ? human_bytes(static_cast<double>(mx)) : "-",
               c.model ? human_bytes(static_cast<double>(mn)) : "-",
               e.memory ? human_bytes(e.memory->total()) : "-", e.fits ? "" : "  DOES NOT FIT");
  }
  if (over > 0)
    fmt::print("\nDOES NOT FIT: {} of the rows need more than the {} of {} per GPU; their times "
               "are what the run would take with enough memory\n",
               over, human_bytes(memory_limit), c.device->name);
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
