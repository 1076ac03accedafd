// Timelines as data: what ran where and when. The simulator fills one from its walk, the runtime
// records the same structure when it runs for real, so the two compare. Renderings (SVG, Chrome
// trace) live in sim/timeline.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/ir.h"

namespace hp {

struct TimelineEvent {
  int stage = 0;
  double start = 0, end = 0;  // seconds from the start of the iteration
  std::string name;           // e.g. "F3 attn:2..pre:3", "send F3 attn:2 -> s1"
  // "F", "B", "I", "W" for compute; "send", "recv" for transfers; "wait" for a stage blocked on
  // one.
  std::string category;
  int mb = -1;
  Dir dir = Dir::kF;
  PartKind first_kind = PartKind::kEmbed;  // colours compute ops
  int fold = 0;
  int peer = -1;      // transfers and waits: the other stage
  int64_t bytes = 0;  // transfers: message size

  bool is_compute() const;
};

struct Timeline {
  int num_stages = 0;
  std::string title;
  std::vector<TimelineEvent> events;

  double end_time() const;  // latest event end, 0 when empty
};

// "F3 attn:2..pre:3": direction, micro-batch, first and last part.
std::string compute_event_name(const ComputeOp& op);

// The event of compute op `op` run on `stage` from `start` to `end`.
TimelineEvent compute_event(int stage, const ComputeOp& op, double start, double end);

}  // namespace hp
