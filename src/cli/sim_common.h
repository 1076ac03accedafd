// Flags shared by the simulator commands (simulate, compare, sweep, plan): the schedule shape, the
// cost source (a part-cost JSON, or model + sequence length + device; sim/sim_setup.h builds it)
// and the output format.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "sim/sim_setup.h"
#include "util/human_units.h"

namespace hp::cli {

struct ShapeFlags {
  std::string schedule;
  int stages = 0;
  int microbatches = 0;
  int layers = 0;  // 0: the model's layer count
  int folds = 1;
  int virtual_stages = 1;
};

// Adds --schedule/--stages/--microbatches/--layers/--folds/--virtual. `with_schedule` false leaves
// out --schedule (compare runs them all).
void add_shape_flags(CLI::App& app, ShapeFlags& f, bool with_schedule = true);
// Adds --part-costs/--model/--seq-len/--device/--microbatch-size/--recompute/--transfer/--eager.
void add_cost_flags(CLI::App& app, CostSpec& f);
// Adds --tp and --data-parallel (sim/parallel.h: TP with sequence parallelism inside a node,
// DP pipelines with a gradient all-reduce after the flush).
void add_layout_flags(CLI::App& app, CostSpec& f);
// Adds --tp alone (simulate: one pipeline, no replicas).
void add_tp_flag(CLI::App& app, CostSpec& f);
// Adds --format=text|json.
void add_format_flag(CLI::App& app, std::string& format);

}  // namespace hp::cli
