// helixpipe compare: every schedule (gpipe, 1f1b, interleaved V=2, zb1p, adapipe, helix F=1, F=2) on
// one model, sequence length and device, side by side: throughput, bubble, peak memory per stage;
// with --tp / --data-parallel in a TP x PP x DP layout (sim/parallel.h), and with a device, whether
// each schedule fits in the device's memory.
#include <fmt/format.h>

#include <algorithm>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "sim/compare.h"
#include "util/error.h"

namespace hp::cli {

int cmd_compare(int argc, char** argv) {
  CLI::App app{"Simulate every schedule side by side on one model, sequence length and device:\n"
               "throughput (and its ratio to 1F1B), bubble, MFU and peak activation memory per stage.",
               "helixpipe compare"};
  app.footer(
      "Schedules: gpipe, 1f1b, interleaved (V=2), zb1p, weipipe, adapipe (1F1B, layers and\n"
      "recomputation per stage searched to fit memory), helix F=1, helix F=2; helix recomputes\n"
      "no-attn and the others none unless --recompute is given (adapipe chooses its own). A\n"
      "schedule that cannot run the shape is listed with the reason. With --device every row\n"
      "states its memory per GPU (docs/simulator.md); a row that does not fit is marked (\"fits\":\n"
      "false in JSON). --tp/--data-parallel simulate one pipeline of a TP x PP x DP layout (ranks\n"
      "as in plan and sweep; inter-node messages share a GPU's port).\n\n"
      "examples:\n"
      "  helixpipe compare --model=7b --seq-len=131072 --stages=8 --microbatches=16 --device=h20\n"
      "  helixpipe compare --model=7b --seq-len=131072 --tp=8 --stages=8 --microbatches=16 \\\n"
      "      --device=h20 --format=json\n"
      "  helixpipe compare --model=1.3b --seq-len=32768 --stages=4 --microbatches=8 --device=a800 \\\n"
      "      --recompute=full --format=json");
  ShapeFlags shape;
  CostSpec costf;
  std::string format = "text";
  add_shape_flags(app, shape, /*with_schedule=*/false);
  add_cost_flags(app, costf);
  add_layout_flags(app, costf);
  add_format_flag(app, format);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  HP_CHECK(shape.folds == 1 && shape.virtual_stages == 1,
           "compare runs helix with F=1 and F=2 and interleaved with V=2 itself; leave out --folds "
           "and --virtual");

  CostSetup c = build_cost(costf);
  const int L = resolve_layers(shape.layers, c);
  const Comparison cmp = compare_schedules(c, shape.stages, shape.microbatches, L);
  if (format == "json") {
    fmt::print("{}\n", comparison_json(cmp, c).dump(2));
    return 0;
  }
  const Layout& lay = c.layout;
  const double base = cmp.base, memory_limit = cmp.memory_limit;
  fmt::print("costs: {}   p={} m={} L={}{}\n\n", c.cost.source(), shape.stages, shape.microbatches, L,
             lay.tp > 1 || lay.dp > 1 ? "   layout " + Layout{lay.tp, shape.stages, lay.dp}.str() +
                                            " (stash and memory per GPU)"
                                      : "");
  fmt::print("{:<16} {:<8} {:>11} {:>13} {:>7} {:>8} {:>6} {:>12} {:>12} {:>12}\n", "schedule",
             "recomp", "iteration", "tokens/s", "vs 1f1b", "bubble", "MFU", "stash max",
             "stash min", "mem/GPU");
  int over = 0;
  for (const CompareEntry& e : cmp.entries) {
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
               e.label, recompute_label(e.run->schedule), human_seconds(e.iteration),
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
    for (const CompareEntry& e : cmp.entries) {
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
