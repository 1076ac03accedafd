// One simulation set up from plain inputs: where the costs come from (a part-cost JSON, or a model,
// a sequence length and a device profile, optionally in a TP x DP layout), the layer count, and
// generating + lowering + simulating one schedule with its per-stage stash. The simulator commands
// (simulate, compare) and bench's predictions share it. Error texts name the command-line flags
// the inputs come from (--part-costs, --device, ...), since that is what a user has to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/generate.h"
#include "schedule/ir.h"
#include "schedule/values.h"
#include "sim/cost_model.h"
#include "sim/device.h"
#include "sim/parallel.h"
#include "sim/simulator.h"
#include "util/model_config.h"

namespace hp {

// The cost source as given (docs/formats/sim.md).
struct CostSpec {
  std::string part_costs;  // a part-cost JSON file
  std::string model;       // preset name or JSON file
  std::string device;      // built-in profile name or JSON file
  int64_t seq_len = 0;
  int64_t microbatch_size = 1;
  std::string recompute;         // empty: the schedule's natural policy
  std::string transfer = "weights";
  bool eager = false;            // eager sends instead of rendezvous
  bool shared_nic = false;       // a stage's inter-node messages share one port
  bool head_in_backward = false;  // the LM head's forward merged into its backward (CostModel)
  int tp = 1;                    // tensor parallelism (with sequence parallelism) per stage
  int dp = 1;                    // data-parallel pipelines
  // With part costs: take the tensor parallelism the file was measured with instead of checking
  // it against `tp` (bench, which checks it against its own group).
  bool tp_from_file = false;
};

// Everything the cost side resolved.
struct CostSetup {
  CostModel cost;
  std::optional<ModelConfig> model;  // set with a model
  std::optional<DeviceProfile> device;
  int64_t tokens_per_mb = 0;     // b * s when known
  ElemBytes elem_bytes{};        // stash and messages: the device dtype, fp32 otherwise
  std::optional<Recompute> recompute;
  TransferMode transfer = TransferMode::kWeights;
  bool rendezvous = true;
  bool shared_nic = false;
  // TP and DP degrees (pp is the schedule's stage count). With tp > 1 the cost model is one
  // rank's: parallel_costs() (a device's compute / t plus the SP collectives) or a part-cost file
  // of profile --tensor-parallel; messages (/ t) and stash are per GPU.
  Layout layout;
};
// Checks the combination (exactly one of part costs or a device; a device needs a model and a
// sequence length) and builds the cost model. Throws hp::Error saying what is missing.
CostSetup build_cost(const CostSpec& spec);

// The layer count to use: `layers` when > 0, else the model's; a mismatch with the model is an
// error, as is no count at all with part costs.
int resolve_layers(int layers, const CostSetup& c);

// One simulated schedule.
struct SimRun {
  ScheduleSpec spec;
  Schedule schedule;  // lowered
  SimResult result;
};
// Generates, lowers (message sizes from the model when known, / tp), simulates and fills the
// per-stage peak activation bytes (per GPU: one TP rank's, rank_stash_peaks in sim/memory.h). Throws hp::Error from the
// generator when the shape is invalid. `stage_time_scale` and `stage_part_scale`: per-stage
// compute multipliers (SimOptions' fields of those names).
SimRun simulate_spec(const ScheduleSpec& spec, const CostSetup& c, bool record_timeline,
                     const std::vector<double>& stage_time_scale = {},
                     const std::vector<PartTable>& stage_part_scale = {});

// The schedule's picture (`helixpipe schedule --format=svg|trace`): `s` lowered and simulated with
// one time unit per layer part (pre, attn, post) and direction (F, I, W), embed and head free and
// free links, as in the papers' schedule figures.
SimResult simulate_unit_costs(Schedule s);

// What one time unit of simulate_unit_costs is, as the time axis of its SVG names it
// (SvgOptions::time_unit in sim/timeline.h). A full backward B is I + W, so it takes 2 units per
// part, and a recomputed forward part 1 more.
inline constexpr const char* kUnitCostTimeUnit =
    "units; 1 unit = one pre, attn or post part run once as F, I or W; a B of one part = 2; "
    "embed, head and messages take 0";

// Writes the timeline renderings requested (empty path = skip), temp-then-rename.
void write_timelines(const SimResult& r, const std::string& svg_path, const std::string& trace_path);

}  // namespace hp
