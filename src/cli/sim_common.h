// Flags and plumbing shared by the simulator commands (simulate, compare, sweep, plan): the
// schedule-shape flags, the cost source (a part-cost JSON, or model + sequence length + device),
// building the cost model, generating + lowering + simulating one schedule, and the memory figures.
#pragma once

#include <CLI/CLI.hpp>

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

namespace hp::cli {

struct ShapeFlags {
  std::string schedule;
  int stages = 0;
  int microbatches = 0;
  int layers = 0;  // 0: the model's layer count
  int folds = 1;
  int virtual_stages = 1;
};

struct CostFlags {
  std::string part_costs;  // a part-cost JSON file (docs/formats/sim.md)
  std::string model;       // preset name or JSON file
  std::string device;      // built-in profile name or JSON file
  int64_t seq_len = 0;
  int64_t microbatch_size = 1;
  std::string recompute;         // empty: the schedule's natural policy
  std::string transfer = "weights";
  bool eager = false;            // eager sends instead of rendezvous
  bool shared_nic = false;       // a stage's inter-node messages share one port
  int tp = 1;                    // tensor parallelism (with sequence parallelism) per stage
  int dp = 1;                    // data-parallel pipelines
};

// Adds --schedule/--stages/--microbatches/--layers/--folds/--virtual. `with_schedule` false leaves
// out --schedule (compare runs them all).
void add_shape_flags(CLI::App& app, ShapeFlags& f, bool with_schedule = true);
// Adds --part-costs/--model/--seq-len/--device/--microbatch-size/--recompute/--transfer/--eager.
void add_cost_flags(CLI::App& app, CostFlags& f);
// Adds --tp and --data-parallel (sim/parallel.h: TP with sequence parallelism inside a node,
// DP pipelines with a gradient all-reduce after the flush).
void add_layout_flags(CLI::App& app, CostFlags& f);
// Adds --format=text|json.
void add_format_flag(CLI::App& app, std::string& format);

// Parses argv with CLI11; returns an exit code to return now (help printed: 0; bad flag: 2) or
// nullopt to go on. The error text names the flag and what is valid.
std::optional<int> parse_or_exit(CLI::App& app, int argc, char** argv);

// Everything the cost side resolved from the flags.
struct CostSetup {
  CostModel cost;
  std::optional<ModelConfig> model;  // set with --model
  std::optional<DeviceProfile> device;
  int64_t tokens_per_mb = 0;     // b * s when known
  ElemBytes elem_bytes{};        // stash and messages: the device dtype, fp32 otherwise
  std::optional<Recompute> recompute;
  TransferMode transfer = TransferMode::kWeights;
  bool rendezvous = true;
  bool shared_nic = false;
  // TP and DP degrees (pp is the schedule's stage count). With tp > 1 the cost model is
  // parallel_costs(): compute / t plus the SP collectives; messages and stash are per GPU (/ t).
  Layout layout;
};
// Checks the combination (exactly one of --part-costs or --device; --device needs --model and
// --seq-len) and builds the cost model. Throws hp::Error saying what is missing.
CostSetup build_cost(const CostFlags& f);

// The layer count to use: --layers, else the model's; a mismatch with the model is an error.
int resolve_layers(const ShapeFlags& f, const CostSetup& c);

// One simulated schedule.
struct SimRun {
  ScheduleSpec spec;
  Schedule schedule;  // lowered
  SimResult result;
};
// Generates, lowers (message sizes from the model when known, / tp), simulates and fills the
// per-stage peak activation bytes (per GPU: the stage's stash / tp). Throws hp::Error from the generator when the shape is invalid.
// `stage_time_scale`: per-stage compute multipliers (SimOptions::stage_time_scale).
SimRun run_one(const ScheduleSpec& spec, const CostSetup& c, bool record_timeline,
               const std::vector<double>& stage_time_scale = {});

// "12.3 GiB", "512 MiB", "0 B".
std::string human_bytes(double bytes);
// "1.23 s", "45.6 ms", "789 us".
std::string human_seconds(double s);

// Writes the timeline renderings requested (empty path = skip), temp-then-rename.
void write_timelines(const SimResult& r, const std::string& svg_path, const std::string& trace_path);

}  // namespace hp::cli
