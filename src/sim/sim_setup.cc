#include "sim/sim_setup.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "schedule/lower.h"
#include "sim/memory.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp {

CostSetup build_cost(const CostSpec& f) {
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
    c.model = c.model->for_sequence(f.seq_len);  // a learned position table covers the sequence
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
    HP_CHECK(f.dp == 1,
             "--data-parallel needs --model, --seq-len and --device (the replicas' all-reduce is "
             "charged on a device profile's links)");
    nlohmann::json j;
    std::string text = read_file(f.part_costs);
    try {
      j = parse_json_text(text, "--part-costs '" + f.part_costs + "'");
    } catch (const nlohmann::json::exception& e) {
      fail("--part-costs '{}': not valid JSON ({})", f.part_costs, e.what());
    }
    c.cost = CostModel::from_part_costs(j, f.part_costs);
    if (c.tokens_per_mb > 0) c.cost.set_tokens_per_microbatch(c.tokens_per_mb);
    // A file holds either a whole stage's times or one rank's of a tensor-parallel group; the
    // layout must say the same.
    const int file_tp = c.cost.tensor_parallel();
    HP_CHECK(f.tp_from_file || f.tp == file_tp, "--tp={} but --part-costs '{}' holds {}: {}", f.tp,
             f.part_costs,
             file_tp > 1 ? fmt::format("one rank's costs in a tensor-parallel group of {}", file_tp)
                         : std::string("a whole stage's costs"),
             file_tp > 1 ? fmt::format("simulate it with --tp={}", file_tp)
                         : std::string("measure a group's with mpirun -np T helixpipe profile "
                                       "--tensor-parallel=T, or give --model, --seq-len and "
                                       "--device to split a device profile's costs"));
    c.layout.tp = file_tp;
  }
  c.cost.set_head_in_backward(f.head_in_backward);
  return c;
}

int resolve_layers(int layers, const CostSetup& c) {
  if (c.model) {
    HP_CHECK(layers == 0 || layers == c.model->layers,
             "--layers={} differs from the model's {} layers; leave --layers out (it defaults to "
             "the model's) or use a model config with {} layers",
             layers, c.model->layers, layers);
    return static_cast<int>(c.model->layers);
  }
  HP_CHECK(layers > 0, "--layers=L is needed with --part-costs (there is no model to take it from)");
  return layers;
}

SimRun simulate_spec(const ScheduleSpec& spec_in, const CostSetup& c, bool record_timeline,
                     const std::vector<double>& stage_time_scale,
                     const std::vector<PartTable>& stage_part_scale) {
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
  opt.stage_part_scale = stage_part_scale;
  run.result = simulate(run.schedule, c.cost, opt);
  if (cfg) {
    const auto peaks =
        rank_stash_peaks(run.schedule, *cfg, c.tokens_per_mb, c.elem_bytes, c.layout.tp);
    for (size_t r = 0; r < peaks.size(); ++r) run.result.stages[r].peak_activation_bytes = peaks[r];
  }
  return run;
}

SimResult simulate_unit_costs(Schedule s) {
  CostModel c;
  for (PartKind k : {PartKind::kPre, PartKind::kAttn, PartKind::kPost})
    for (Dir d : {Dir::kF, Dir::kI, Dir::kW}) c.set_part_time(k, d, 1.0);
  lower(s);
  return simulate(s, c, SimOptions{});
}

void write_timelines(const SimResult& r, const std::string& svg_path, const std::string& trace_path) {
  if (!svg_path.empty()) write_file_atomic(svg_path, render_svg(r.timeline));
  if (!trace_path.empty()) write_file_atomic(trace_path, render_chrome_trace(r.timeline));
}

}  // namespace hp
