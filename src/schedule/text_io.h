// Schedule files: the diffable text form (one compute op a line) and the JSON form, both version 1,
// both read and written. docs/formats/schedule.md is the reference. Only compute ops are stored:
// the communication is derived by lower(), and the validator checks the result.
//
// Text form:
//   helixpipe-schedule 1            (first line that is not blank or a comment)
//   name helix                      (header lines, each optional, before the first stage line)
//   stages 4
//   microbatches 8
//   layers 4
//   folds 2
//   virtual 1
//   recompute no-attn
//   transfer weights
//   stage 0
//   F 0 embed pre:1                 (DIR MB PART..., optional fold=N and recompute=P,P / -)
//   B 6 post:4 head fold=0 recompute=post:4,head
//   # comments run to the end of a line
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "schedule/ir.h"

namespace hp {

// Writes the text form (header with every field, then each stage's ops). Deterministic.
std::string schedule_to_text(const Schedule& s);

// Reads the text form. `where` names the source in errors ("file.txt:12: ..."). Missing header
// fields are inferred: stages from the stage sections, microbatches and layers from the largest
// micro-batch and layer used, recompute from the schedule name (helix: no-attn, else none).
// Recompute lists default to what the policy implies. Throws hp::Error on anything malformed,
// saying what was expected.
Schedule schedule_from_text(std::string_view text, const std::string& where = "<text>");

// {"schedule":NAME,"version":1,"stages":[{"stage":0,"ops":[{"dir":"F","mb":0,"parts":[...]}]}],
//  "microbatches":M,"layers":L,"folds":F,"virtual":V,"recompute":"none","transfer":"weights"}
// Ops carry "fold" when the schedule has folds and "recompute" when non-empty.
nlohmann::json schedule_to_json(const Schedule& s);
// Reads the JSON form; only "stages" with its ops is required (the rest is inferred as for text).
Schedule schedule_from_json(const nlohmann::json& j, const std::string& where = "<json>");

// A readable listing of a lowered schedule (write-only, for people and debugging): each stage's
// lowered ops in order, one a line, e.g.
//   stage 1
//     recv.start  #0  <- s0  F0 post:1 -> pre:2  [X:2]  65536 B  tag 0
//     recv.wait   #0  <- s0 ...
//     compute     op 0  F 0 pre:2 attn:2 post:2 head
std::string lowered_to_text(const Schedule& s);

// Reads a file in either form (JSON when its first non-blank character is '{').
Schedule load_schedule(const std::string& path);

}  // namespace hp
