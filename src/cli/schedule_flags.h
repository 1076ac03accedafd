// The flags that describe a generated schedule, shared by `schedule` (and usable by `simulate`):
// --schedule --stages --microbatches --layers [--folds] [--virtual] [--recompute] [--transfer].
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "schedule/generate.h"

namespace hp::cli {

struct ScheduleFlags {
  std::string name;
  int stages = 0, microbatches = 0, layers = 0, folds = 1, virtual_stages = 1;
  std::string recompute;  // empty: the schedule's default
  std::string transfer = "weights";
};

// Adds the flags to `app`, with their valid values listed in --help and checked on parse.
void add_schedule_flags(CLI::App& app, ScheduleFlags& f);

// The generator spec for the parsed flags.
ScheduleSpec schedule_spec(const ScheduleFlags& f);

}  // namespace hp::cli
