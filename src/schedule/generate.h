// Schedule generators: GPipe, 1F1B, interleaved 1F1B (virtual stages), ZB-H1 ("zb1p") and
// HelixPipe ("helix", folds F >= 1). Each emits compute-only op lists (no communication; see
// lower.h) after checking its constraints up front. docs/schedules.md describes each one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schedule/ir.h"

namespace hp {

struct ScheduleSpec {
  std::string name;       // one of schedule_names()
  int stages = 1;         // p
  int microbatches = 1;   // m
  int layers = 1;         // L
  int folds = 1;          // F (helix only)
  int virtual_stages = 1; // V (interleaved only; must be >= 2 there)
  std::optional<Recompute> recompute;  // unset: default_recompute(name)
  TransferMode transfer = TransferMode::kWeights;
  // Where L comes from, for the error messages: the --layers flag (schedule, simulate, ...), or a
  // model's num_hidden_layers (train and grad), in which case a fix names stage counts instead.
  bool layers_from_model = false;
  // gpipe, 1f1b and zb1p only (an uneven plan such as AdaPipe's, sim/adapipe.h): the layer count
  // of each stage, in stage order (size stages, each >= 1, summing to layers), and the
  // recomputation policy of each stage (size stages). Empty: split_layers() and `recompute`.
  std::vector<int> stage_layers = {};
  std::vector<Recompute> stage_recompute = {};
};

// Builds the schedule. Throws hp::Error naming the broken constraint and the nearest valid values.
Schedule generate(const ScheduleSpec& spec);

// {"gpipe", "1f1b", "interleaved", "zb1p", "helix"}.
const std::vector<std::string>& schedule_names();

// helix -> no-attn (recomputation without attention); every other schedule -> none.
Recompute default_recompute(std::string_view name);

// Baseline layer split: [first, last] (1-based, inclusive) of the layers on each of p stages.
// Every stage gets floor(L/p) layers; the last L mod p stages get one more (1F1B keeps the most
// micro-batches in flight on its first stages, so extra layers go where the stash is smallest).
// Requires 1 <= p <= L.
std::vector<std::pair<int, int>> split_layers(int layers, int parts);

}  // namespace hp
