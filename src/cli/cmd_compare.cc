// helixpipe compare: every schedule (gpipe, 1f1b and its recomputations, interleaved V=2, zb1p,
// weipipe, adapipe, helix F=1, F=2) on one model, sequence length and device, side by side:
// throughput, bubble, peak memory per stage; with --tp / --data-parallel in a TP x PP x DP layout
// (sim/parallel.h), and with a device, whether each schedule fits in the device's memory.
#include <fmt/format.h>

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
      "Schedules: gpipe, 1f1b, 1f1b no-attn and 1f1b selective (without --recompute),\n"
      "interleaved (V=2), zb1p, weipipe, adapipe (1F1B, layers and recomputation per stage\n"
      "searched to fit memory), helix F=1, helix F=2; helix recomputes no-attn and the others\n"
      "none unless --recompute is given (adapipe chooses its own). A schedule that cannot run\n"
      "the shape is listed with the reason. With --device every row states its memory per GPU\n"
      "(docs/simulator.md); a row that does not fit is marked (\"fits\": false in JSON).\n"
      "--tp/--data-parallel simulate one pipeline of a TP x PP x DP layout (ranks as in plan and\n"
      "sweep; inter-node messages share a GPU's port).\n\n"
      "examples:\n"
      "  helixpipe compare --model=7b --seq-len=131072 --stages=8 --microbatches=16 --device=h20\n"
      "  helixpipe compare --model=7b --seq-len=131072 --tp=8 --stages=8 --microbatches=16 \\\n"
      "      --device=h20 --format=json\n"
      "  helixpipe compare --model=1.3b --seq-len=32768 --stages=4 --microbatches=8 --device=a800 "
      "\\\n"
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
  fmt::print("{}", comparison_text(cmp, c));
  return 0;
}

}  // namespace hp::cli
