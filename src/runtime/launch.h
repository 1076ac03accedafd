// Where the ranks of a pipelined `train` or `grad` run: under mpirun, the MPI world; otherwise
// D x P x T threads of this process (LocalWorld, in-memory messages), so a pipelined run needs no
// MPI launch to try. Errors are printed once, by the lowest rank that found them (docs/cli.md).
#pragma once

#include <functional>
#include <string>

#include "comm/comm.h"
#include "runtime/train_run.h"

namespace hp {

// Runs `body` on every rank and returns the exit code. Under mpirun: the MPI world (d.stages, when
// 0, becomes the ranks divided by D x T; `progress_thread` moves MPI progress to a background
// thread). Otherwise D x P x T threads of this process (d.stages 0: the schedule file's, else 1; a
// `threads` of 0 becomes the cores divided among the ranks). An error is printed once, by the
// lowest rank that found it (prefixed with its rank when there are several), as
// "helixpipe COMMAND: error: ..."; the exit code is then 1 (3 for an internal error), and under
// mpirun the job ends without Open MPI's abort banner.
int run_on_ranks(const std::string& command, DistLaunchRequest& d, bool progress_thread,
                 int& threads, int* argc, char*** argv, const std::function<void(Comm&)>& body);

}  // namespace hp
