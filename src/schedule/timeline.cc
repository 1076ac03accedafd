// Timeline events (the data; sim/timeline.cc renders them).
#include "schedule/timeline.h"

#include <algorithm>

namespace hp {

bool TimelineEvent::is_compute() const {
  return category == "F" || category == "B" || category == "I" || category == "W";
}

double Timeline::end_time() const {
  double t = 0;
  for (const auto& e : events) t = std::max(t, e.end);
  return t;
}

std::string compute_event_name(const ComputeOp& op) {
  std::string name = std::string(dir_str(op.dir)) + std::to_string(op.mb);
  if (op.parts.empty()) return name;
  name += " " + op.parts.front().str();
  if (op.parts.size() > 1) name += ".." + op.parts.back().str();
  return name;
}

TimelineEvent compute_event(int stage, const ComputeOp& op, double start, double end) {
  TimelineEvent e;
  e.stage = stage;
  e.start = start;
  e.end = end;
  e.name = compute_event_name(op);
  e.category = dir_str(op.dir);
  e.mb = op.mb;
  e.dir = op.dir;
  e.first_kind = op.parts.empty() ? PartKind::kEmbed : op.parts.front().kind;
  e.fold = op.fold;
  return e;
}

}  // namespace hp
