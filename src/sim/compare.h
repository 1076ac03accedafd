// Every schedule (gpipe, 1f1b with none, no-attn and selective recomputation, interleaved V=2,
// zb1p, weipipe, adapipe, helix F=1, helix F=2)
// simulated on one cost setup (weipipe: sim/weipipe.h's ring; adapipe: 1F1B with the layer split
// and per-stage recomputation of sim/adapipe.h, searched for the device's memory), with the DP
// all-reduce, the iteration, tokens/s and (with a model and a device) the memory per GPU and
// whether it fits: the rows of `helixpipe compare`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/parallel.h"
#include "sim/sim_setup.h"

namespace hp {

struct CompareEntry {
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

struct Comparison {
  int stages = 0, microbatches = 0, layers = 0;
  std::vector<CompareEntry> entries;  // in the order above
  double base = 0;                    // 1F1B's iteration (0 when it cannot run)
  double memory_limit = 0;            // the device's memory per GPU (0: none known)
};

// Simulates every schedule of the list on `c` (with its recomputation policy when set, else each
// schedule's own), p = `stages`, m = `microbatches`, L = `layers`.
Comparison compare_schedules(const CostSetup& c, int stages, int microbatches, int layers);

// The JSON document of `compare --format=json` (version 1).
nlohmann::json comparison_json(const Comparison& cmp, const CostSetup& c);
// The same as `helixpipe compare` prints it: one line per row (or why it cannot run), rows that
// do not fit marked, then each row's peak stash per stage.
std::string comparison_text(const Comparison& cmp, const CostSetup& c);

}  // namespace hp
