// train and grad on several ranks: the pipeline and grid flags both commands take in every launch.
// Where the ranks run (the MPI world, or threads of this process) is runtime/launch.h.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "runtime/train_run.h"

namespace hp::cli {

struct PipelineFlags {
  PipelineFlags() { d.stages = 0; }  // 0: not given (run_on_ranks resolves it)
  DistLaunchRequest d;
  bool progress_thread = false;  // under mpirun: MPI progress from a background thread
  std::vector<const CLI::Option*> options;  // the flags add_pipeline_flags added
};

// Adds the schedule and grid flags (--schedule, --schedule-file, --stages, --folds, --virtual,
// --data-parallel, --tensor-parallel, --transfer) and, for train, --trace, --timeline and
// --progress-thread, in the help's "Parallelism" and "Output" groups.
void add_pipeline_flags(CLI::App& app, PipelineFlags& p, bool train);

// Whether the command line asks for a pipelined run: started by mpirun, or a schedule, grid or
// trace flag given.
bool wants_ranks(const PipelineFlags& p);

}  // namespace hp::cli
