// Test helpers: hand-built lowered schedules and a small XML well-formedness check.
#pragma once

#include <string>
#include <vector>

#include "schedule/ir.h"

namespace hp::test {

// A schedule with one op list per stage, no communication yet.
inline Schedule make_schedule(int stages, int mbs = 1, int layers = 1) {
  Schedule s;
  s.num_stages = stages;
  s.microbatches = mbs;
  s.layers = layers;
  s.stages.resize(stages);
  return s;
}

// Appends a compute op to `stage` and its lowered form; returns its op index.
inline int add_compute(Schedule& s, int stage, Dir dir, int mb, std::vector<Part> parts) {
  ComputeOp op;
  op.dir = dir;
  op.mb = mb;
  op.parts = std::move(parts);
  s.stages[stage].ops.push_back(op);
  int idx = static_cast<int>(s.stages[stage].ops.size()) - 1;
  s.stages[stage].lowered.push_back({OpKind::kCompute, idx});
  return idx;
}

// Declares a message (no ops); returns its id.
inline int add_message(Schedule& s, int src, int dst, int mb, int64_t bytes, Dir dir = Dir::kF) {
  Message m;
  m.id = static_cast<int>(s.messages.size()) + 100;  // ids need not be indices
  m.src = src;
  m.dst = dst;
  m.mb = mb;
  m.dir = dir;
  m.from = Part::post(1);
  m.to = Part::pre(2);
  m.bytes = bytes;
  s.messages.push_back(m);
  return m.id;
}

inline void add_op(Schedule& s, int stage, OpKind kind, int msg_id) {
  s.stages[stage].lowered.push_back({kind, msg_id});
}

// True when every tag opens and closes in order (enough to catch broken SVG output).
inline bool xml_well_formed(const std::string& x, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = x.find('<', i)) != std::string::npos) {
    size_t j = x.find('>', i);
    if (j == std::string::npos) {
      *why = "unterminated tag at " + std::to_string(i);
      return false;
    }
    std::string tag = x.substr(i + 1, j - i - 1);
    i = j + 1;
    if (tag.empty()) { *why = "empty tag"; return false; }
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag.back() == '/') continue;
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        *why = "closing </" + name + "> does not match <" + (stack.empty() ? "" : stack.back()) + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    if (tag.find('<') != std::string::npos) { *why = "'<' inside a tag"; return false; }
    stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
  }
  if (!stack.empty()) { *why = "unclosed <" + stack.back() + ">"; return false; }
  return true;
}

}  // namespace hp::test
