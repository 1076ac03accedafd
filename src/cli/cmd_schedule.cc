// helixpipe schedule: generate a pipeline schedule and print it as text, JSON, an SVG timeline or a
// Chrome trace (the pictures come from the simulator with uniform unit part costs and free links).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "cli/schedule_flags.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/text_io.h"
#include "sim/sim_setup.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

int cmd_schedule(int argc, char** argv) {
  CLI::App app{"Generate a pipeline schedule: one ordered list of compute ops per stage.",
               "helixpipe schedule"};
  ScheduleFlags flags;
  add_schedule_flags(app, flags);
  std::string format = "text", out;
  app.add_option("--format", format,
                 "text (one op a line), json, svg (timeline picture), trace (Chrome/Perfetto "
                 "JSON) or lowered (every stage's communication ops too, for reading); svg and "
                 "trace simulate with one time unit per layer part and direction (embed and "
                 "head free) and free links")
      ->capture_default_str()
      ->check(one_of({"text", "json", "svg", "trace", "lowered"}));
  std::string model;
  int64_t seq_len = 4096;
  app.add_option("--model", model,
                 "model config (JSON file or preset) to size messages with --format=lowered");
  app.add_option("--seq-len", seq_len, "tokens per micro-batch for message sizes (with --model)")
      ->capture_default_str()
      ->check(in_range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--out", out, "write to FILE instead of standard output");
  app.footer(
      "Examples:\n"
      "  helixpipe schedule --schedule=helix --stages=4 --microbatches=8 --layers=4 --folds=2\n"
      "  helixpipe schedule --schedule=1f1b --stages=4 --microbatches=8 --layers=8 --format=json\n"
      "  helixpipe schedule --schedule=interleaved --stages=4 --microbatches=8 --layers=16 "
      "--virtual=2 --format=svg --out=interleaved.svg\n"
      "  helixpipe schedule --schedule=zb1p --stages=4 --microbatches=8 --layers=8 "
      "--format=trace --out=zb1p.json   (open in ui.perfetto.dev)\n"
      "Schedules: gpipe, 1f1b, interleaved (needs --virtual >= 2), zb1p, helix (--folds 1 or 2).\n"
      "File formats: docs/formats/schedule.md. Check a file with 'helixpipe validate FILE'.\n");
  // Help: exit 0; a bad flag: what is wrong and the valid values, exit 2.
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  Schedule s = generate(schedule_spec(flags));
  std::string text;
  if (format == "text") {
    text = schedule_to_text(s);
  } else if (format == "json") {
    text = schedule_to_json(s).dump(1) + "\n";
  } else if (format == "lowered") {
    ModelConfig cfg;
    if (!model.empty()) cfg = ModelConfig::load(model);
    lower(s, model.empty() ? nullptr : &cfg, seq_len);
    text = lowered_to_text(s);
  } else {
    const SimResult r = simulate_unit_costs(s);
    SvgOptions svg_opt;
    svg_opt.time_unit = kUnitCostTimeUnit;
    text = format == "svg" ? render_svg(r.timeline, svg_opt) : render_chrome_trace(r.timeline);
  }
  if (out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    write_file_atomic(out, text);
    std::fprintf(stderr, "wrote %s (%s, %zu bytes)\n", out.c_str(), format.c_str(), text.size());
  }
  return 0;
}

}  // namespace hp::cli
