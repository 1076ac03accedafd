// helixpipe train: the flags (cli/train_cli.h, cli/train_dist.h) into a request that
// runtime/train_run.h runs: in one process (run_local_training) or, when the command line asks for
// a pipeline (mpirun, or a schedule or grid flag), on P x D x T ranks (run_dist_training) that are
// MPI processes under mpirun and threads of this process otherwise.
#include "cli/commands.h"
#include "cli/train_cli.h"
#include "cli/train_dist.h"
#include "runtime/launch.h"
#include "runtime/train_run.h"

namespace hp::cli {

int cmd_train(int argc, char** argv) {
  CLI::App app("Train a model: AdamW, warmup + cosine LR, gradient accumulation over "
               "micro-batches, global-norm clipping, resumable checkpoints; in one process or "
               "pipelined over ranks.",
               "train");
  TrainRequest f;
  add_train_flags(app, f);
  PipelineFlags p;
  add_pipeline_flags(app, p, /*train=*/true);
  app.footer(
      "Examples:\n"
      "  helixpipe train --model tiny --data corpus.txt --steps 200 --save run1\n"
      "  helixpipe train --model tiny --data corpus.txt --stages 2 --schedule 1f1b\n"
      "      (2 pipeline stages as threads of this process)\n"
      "  mpirun -np 4 helixpipe train --model small --data corpus.txt --schedule helix\n"
      "      (4 stages, one per MPI rank)\n"
      "Flag rules and exit codes: docs/cli.md; the training loop: docs/training.md.");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  f.given = given_flags(app);
  if (!wants_ranks(p)) {
    run_local_training(f);
    return 0;
  }
  return run_on_ranks("train", p.d, p.progress_thread, f.threads, &argc, &argv,
                      [&](Comm& world) { run_dist_training(world, f, p.d); });
}

}  // namespace hp::cli
