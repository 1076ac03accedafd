// Shared flags and helpers of the simulator commands.
#include "cli/sim_common.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "schedule/lower.h"
#include "sim/memory.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp::cli {

void add_shape_flags(CLI::App& app, ShapeFlags& f, bool with_schedule) {
  if (with_schedule) {
    app.add_option("--schedule", f.schedule, "schedule generator: gpipe, 1f1b, interleaved, zb1p, helix")
        ->required()
        ->check(CLI::IsMember(schedule_names()));
  }
  app.add_option("--stages", f.stages, "pipeline stages p (>= 1)")->required()->check(CLI::PositiveNumber);
  app.add_option("--microbatches", f.microbatches, "micro-batches per iteration m (>= 1)")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", f.layers, "transformer layers L (default: the model's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--folds", f.folds, "HelixPipe folds F (helix only; default 1)")->check(CLI::PositiveNumber);
  app.add_option("--virtual", f.virtual_stages, "model chunks per stage V (interleaved only)")
      ->check(CLI::PositiveNumber);
}

void add_cost_flags(CLI::App& app, CostFlags& f) {
  app.add_option("--part-costs", f.part_costs,
                 "JSON file of seconds per part and direction + link (docs/formats/sim.md)");
  app.add_option("--model", f.model,
                 "model config: a preset (tiny, small, 1.3b, 3b, 7b, ...) or a JSON file");
  app.add_option("--seq-len", f.seq_len, "sequence length s in tokens")->check(CLI::PositiveNumber);
  app.add_option("--device", f.device,
                 "device profile: h20, a800, h100, h200, cpu, or a JSON file (docs/formats/sim.md)");
  app.add_option("--microbatch-size", f.microbatch_size, "sequences per micro-batch b (default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute", f.recompute,
                 "recomputation: none, full, no-attn (default: the schedule's own: helix no-attn, "
                 "others none)")
      ->check(CLI::IsMember({"none", "full", "no-attn"}));
  app.add_option("--transfer", f.transfer, "helix W_qkv transfer mode: weights or activations")
      ->check(CLI::IsMember({"weights", "activations"}));
  app.add_flag("--eager", f.eager, "messages leave at the send (default: when both sides posted)");
  app.add_flag("--shared-nic", f.shared_nic,
               "a stage's inter-node messages share one network port (default: one wire per pair)");
}

void add_layout_flags(CLI::App& app, CostFlags& f) {
  app.add_option("--tp", f.tp,
                 "tensor-parallel GPUs per stage, with sequence parallelism (a power of two, at "
                 "most the device's GPUs per node; needs --device; default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", f.dp,
                 "data-parallel pipelines: tokens/s counts all of them, and each iteration ends "
                 "with the gradient all-reduce (needs --device; default 1)")
      ->check(CLI::PositiveNumber);
}

void add_format_flag(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "output: text or json")->check(CLI::IsMember({"text", "json"}));
}

std::optional<int> parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return std::nullopt;
}

CostSetup build_cost(const CostFlags& f) {
  CostSetup c;
  if (!f.recompute.empty()) c.recompute = parse_recompute(f.recompute);
  c.transfer = parse_transfer(f.transfer);
  c.rendezvous = !f.eager;
  c.shared_nic = f.shared_nic;
  const bool have_costs = !f.part_costs.empty(), have_device = !f.device.empty();
  if (have_costs && have_device)
    fail("give either --part-costs or --device, not both (a part-cost file already holds the "
         "times a device profile would give)");
  if (!have_costs && !have_device)
    fail("no cost source: give --part-costs=FILE.json, or --model=CONFIG --seq-len=S "
         "--device=PROFILE");
  if (!f.model.empty()) {
    c.model = ModelConfig::load(f.model);
    HP_CHECK(f.seq_len > 0, "--model needs --seq-len=S (tokens per sequence) to size activations");
    c.tokens_per_mb = f.seq_len * f.microbatch_size;
  } else {
    HP_CHECK(f.seq_len == 0, "--seq-len needs --model=CONFIG (the dimensions it multiplies)");
  }
  if (have_device) {
    HP_CHECK(c.model.has_value(), "--device needs --model=CONFIG and --seq-len=S");
    c.device = device_profile(f.device);
    HP_CHECK((f.tp & (f.tp - 1)) == 0 && f.tp <= c.device->gpus_per_node,
             "--tp={}: tensor parallelism must be a power of two of at most the {} GPUs per node of "
             "device '{}' (a TP group sits in one node)",
             f.tp, c.device->gpus_per_node, c.device->name);
    c.layout = {f.tp, 1, f.dp};
    c.cost = parallel_costs(*c.model, f.seq_len, f.microbatch_size, *c.device, c.transfer, c.layout);
    c.elem_bytes = c.device->bytes_per_elem();
    // A cluster layout: one network port per GPU, shared by a stage's inter-node messages (as
    // plan and sweep assume).
    if (f.tp > 1 || f.dp > 1) c.shared_nic = true;
  } else {
    HP_CHECK(f.tp == 1 && f.dp == 1,
             "--tp and --data-parallel need --model, --seq-len and --device (a part-cost file "
             "holds one GPU's times, not how they split)");
    nlohmann::json j;
    std::string text = read_file(f.part_costs);
    try {
      j = parse_json_text(text, "--part-costs '" + f.part_costs + "'");
    } catch (const nlohmann::json::exception& e) {
      fail("--part-costs '{}': not valid JSON ({})", f.part_costs, e.what());
    }
    c.cost = CostModel::from_part_costs(j, f.part_costs);
    if (c.tokens_per_mb > 0) c.cost.set_tokens_per_microbatch(c.tokens_per_mb);
  }
  return c;
}

int resolve_layers(const ShapeFlags& f, const CostSetup& c) {
  if (c.model) {
    HP_CHECK(f.layers == 0 || f.layers == c.model->layers,
             "--layers={} differs from the model's {} layers; leave --layers out (it defaults to "
             "the model's) or use a model config with {} layers",
             f.layers, c.model->layers, f.layers);
    return static_cast<int>(c.model->layers);
  }
  HP_CHECK(f.layers > 0, "--layers=L is needed with --part-costs (there is no model to take it from)");
  return f.layers;
}

SimRun run_one(const ScheduleSpec& spec_in, const CostSetup& c, bool record_timeline,
               const std::vector<double>& stage_time_scale) {
  SimRun run;
  run.spec = spec_in;
  if (c.recompute) run.spec.recompute = c.recompute;
  run.spec.transfer = c.transfer;
  run.schedule = generate(run.spec);
  const ModelConfig* cfg = c.model ? &*c.model : nullptr;
  if (run.schedule.num_stages > 1) lower(run.schedule, cfg, cfg ? c.tokens_per_mb : 0, c.elem_bytes);
  SimOptions opt;
  opt.rendezvous = c.rendezvous;
  opt.shared_nic = c.shared_nic;
  if (c.device) opt.comm_compute_share = c.device->comm_compute_share;
  opt.message_bytes_scale = 1.0 / c.layout.tp;  // each TP rank sends its shard on its own link
  opt.record_timeline = record_timeline;
  opt.tokens_per_microbatch = c.tokens_per_mb;
  opt.stage_time_scale = stage_time_scale;
  run.result = simulate(run.schedule, c.cost, opt);
  if (cfg) {
    auto peaks = stash_peaks(run.schedule, *cfg, c.tokens_per_mb, c.elem_bytes);
    for (size_t r = 0; r < peaks.size(); ++r)
      run.result.stages[r].peak_activation_bytes = peaks[r] / c.layout.tp;
  }
  return run;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

std::string human_seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

void write_timelines(const SimResult& r, const std::string& svg_path, const std::string& trace_path) {
  if (!svg_path.empty()) write_file_atomic(svg_path, render_svg(r.timeline));
  if (!trace_path.empty()) write_file_atomic(trace_path, render_chrome_trace(r.timeline));
}

}  // namespace hp::cli
