// train and grad on several ranks: the pipeline and grid flags both commands take in every launch,
// and where the ranks run. Under mpirun they are the MPI world; otherwise, when the flags ask for
// more than one rank, they are threads of this process (LocalWorld, in-memory messages), so a
// pipelined run needs no MPI launch to try.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "comm/comm.h"
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

// Runs `body` on every rank and returns the exit code. Under mpirun: the MPI world (--stages, when
// not given, is the ranks divided by D x T). Otherwise D x P x T threads of this process (a
// --threads of 0 becomes the cores divided among them). An error is printed once, by the lowest
// rank that found it (prefixed with its rank when there are several), and the exit code is 1
// (docs/cli.md); under mpirun the job then ends without Open MPI's abort banner.
int run_on_ranks(const std::string& command, PipelineFlags& p, int& threads, int* argc,
                 char*** argv, const std::function<void(Comm&)>& body);

}  // namespace hp::cli
