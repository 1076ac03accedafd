// helixpipe grad: the mean loss of a checkpoint over fixed data and its gradient with respect to
// every parameter, saved under the parameter names. Sequence k = j*B + r (micro-batch j, row r)
// reads inputs tokens[k*S .. k*S+S-1] and targets tokens[k*S+1 .. k*S+S] from the start of the
// file. The last line printed is {"loss": ...}. The computation is runtime/train_run.h
// (run_local_grad); the pipelined version is cli/train_dist.*.
#include "cli/commands.h"
#include "cli/train_cli.h"
#include "cli/train_dist.h"
#include "comm/mpi_comm.h"
#include "runtime/train_run.h"

namespace hp::cli {

int cmd_grad(int argc, char** argv) {
  // Under mpirun the ranks run the pipelined (D x P) path; cli/train_dist.h.
  if (MpiComm::launched_by_mpirun()) return grad_dist_main(argc, argv);
  CLI::App app("Loss and gradients of a checkpoint on the first B*M sequences of a data file.",
               "grad");
  GradRequest f;
  add_grad_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  run_local_grad(f);
  return 0;
}

}  // namespace hp::cli
