// Shared by the schedule tests: one-line schedule generation.
#pragma once

#include <optional>
#include <string>

#include "schedule/generate.h"

namespace hp::test {

// generate() with the spec's fields as arguments (recompute unset = the schedule's default).
inline Schedule gen(const std::string& name, int p, int m, int L, int F = 1, int V = 1,
                    std::optional<Recompute> rc = std::nullopt,
                    TransferMode t = TransferMode::kWeights) {
  ScheduleSpec spec;
  spec.name = name;
  spec.stages = p;
  spec.microbatches = m;
  spec.layers = L;
  spec.folds = F;
  spec.virtual_stages = V;
  spec.recompute = rc;
  spec.transfer = t;
  return generate(spec);
}

}  // namespace hp::test
