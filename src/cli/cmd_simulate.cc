// helixpipe simulate: generate one schedule, lower it, replay it on a cost model and report
// makespan, bubble, per-stage busy time and peak activation memory, throughput and MFU.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "util/error.h"

namespace hp::cli {

namespace {

void print_text(const SimRun& run, const CostSetup& c) {
  const Schedule& s = run.schedule;
  const SimResult& r = run.result;
  std::string shape = fmt::format("p={} m={} L={}", s.num_stages, s.microbatches, s.layers);
  if (s.name == "helix") shape += fmt::format(" F={}", s.folds);
  if (s.name == "interleaved") shape += fmt::format(" V={}", s.virtual_stages);
  fmt::print("schedule   {} {}  recompute={} transfer={}\n", s.name, shape, recompute_str(s.recompute),
             transfer_str(s.transfer));
  fmt::print("costs      {}\n", c.cost.source());
  if (c.layout.tp > 1)
    fmt::print(
        "layout     one rank of a tensor-parallel group of {} per stage: its compute plus "
        "{} per collective; stash and messages per rank\n",
        c.layout.tp, human_seconds(c.cost.tp_collective_s()));
  fmt::print("makespan   {}\n", human_seconds(r.makespan));
  fmt::print("bubble     {} ({:.1f}% of the makespan; makespan minus the busiest stage)\n",
             human_seconds(r.bubble), 100 * r.bubble_fraction);
  if (r.tokens_per_s > 0) fmt::print("throughput {:.1f} tokens/s\n", r.tokens_per_s);
  if (r.mfu > 0) fmt::print("MFU        {:.1f}%\n", 100 * r.mfu);
  fmt::print("\n{:>5} {:>12} {:>12} {:>12} {:>14} {:>12} {:>12}\n", "stage", "busy", "idle", "comm wait",
             "peak stash", "sent", "received");
  for (const StageResult& st : r.stages) {
    fmt::print("{:>5} {:>12} {:>12} {:>12} {:>14} {:>12} {:>12}\n", st.stage, human_seconds(st.busy),
               human_seconds(st.idle), human_seconds(st.wait),
               c.model ? human_bytes(static_cast<double>(st.peak_activation_bytes)) : "-",
               human_bytes(static_cast<double>(st.sent_bytes)),
               human_bytes(static_cast<double>(st.recv_bytes)));
  }
  if (!r.pair_bytes.empty()) {
    fmt::print("\ncommunication volume per pair (src->dst):\n");
    int col = 0;
    for (const auto& [k, v] : r.pair_bytes) {
      fmt::print("  s{}->s{} {:>11}", k.first, k.second, human_bytes(static_cast<double>(v)));
      if (++col % 4 == 0) fmt::print("\n");
    }
    if (col % 4 != 0) fmt::print("\n");
  }
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  CLI::App app{"Replay one pipeline schedule on a cost model: makespan, bubble, per-stage busy time\n"
               "and peak activation memory, communication volume, throughput and MFU.",
               "helixpipe simulate"};
  app.footer(
      "Costs come from a part-cost JSON (--part-costs) or from a model, a sequence length and a\n"
      "device profile (--model --seq-len --device). Formats: docs/formats/sim.md.\n\n"
      "examples:\n"
      "  helixpipe simulate --schedule=helix --stages=8 --microbatches=16 --folds=2 \\\n"
      "      --model=7b --seq-len=131072 --device=h20\n"
      "  helixpipe simulate --schedule=1f1b --stages=4 --microbatches=8 --layers=8 \\\n"
      "      --part-costs=costs.json --format=json\n"
      "  helixpipe simulate --schedule=1f1b --stages=2 --microbatches=4 --model=small \\\n"
      "      --seq-len=4096 --part-costs=costs_tp2.json --tp=2   (profile --tensor-parallel=2)\n"
      "  helixpipe simulate --schedule=helix --stages=4 --microbatches=8 --folds=2 --model=small "
      "\\\n"
      "      --seq-len=8192 --device=cpu --timeline=helix.svg --trace=helix.trace.json");
  ShapeFlags shape;
  CostSpec costf;
  std::string format = "text", timeline, trace;
  add_shape_flags(app, shape);
  add_cost_flags(app, costf);
  add_tp_flag(app, costf);
  add_format_flag(app, format);
  app.add_option("--timeline", timeline, "write an SVG timeline (stages as rows) to this file");
  app.add_option("--trace", trace, "write a Chrome trace JSON (opens in Perfetto) to this file");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;

  CostSetup c = build_cost(costf);
  ScheduleSpec spec;
  spec.name = shape.schedule;
  spec.stages = shape.stages;
  spec.microbatches = shape.microbatches;
  spec.layers = resolve_layers(shape.layers, c);
  spec.folds = shape.folds;
  spec.virtual_stages = shape.virtual_stages;
  SimRun run = simulate_spec(spec, c, !timeline.empty() || !trace.empty());
  write_timelines(run.result, timeline, trace);
  if (format == "json") {
    nlohmann::json j = sim_result_json(run.result, run.schedule);
    j["costs"] = c.cost.source();
    j["tensor_parallel"] = c.layout.tp;
    j["transfer"] = transfer_str(run.schedule.transfer);
    if (c.tokens_per_mb > 0) j["tokens_per_microbatch"] = c.tokens_per_mb;
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(run, c);
  }
  return 0;
}

}  // namespace hp::cli
