// helixpipe train (single process): the flags (cli/train_cli.h) into a request that
// runtime/train_run.h runs (run_local_training: the Trainer through the shared loop and output).
// The pipelined run under mpirun is cli/train_dist.*.
#include "cli/commands.h"
#include "cli/train_cli.h"
#include "cli/train_dist.h"
#include "comm/mpi_comm.h"
#include "runtime/train_run.h"

namespace hp::cli {

int cmd_train(int argc, char** argv) {
  // Under mpirun the ranks run the pipelined (D x P) path; cli/train_dist.h.
  if (MpiComm::launched_by_mpirun()) return train_dist_main(argc, argv);
  CLI::App app("Train a model in one process: AdamW, warmup + cosine LR, gradient accumulation "
               "over micro-batches, global-norm clipping, resumable checkpoints.",
               "train");
  TrainRequest f;
  add_train_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  f.given = given_flags(app);
  run_local_training(f);
  return 0;
}

}  // namespace hp::cli
