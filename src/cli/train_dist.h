// helixpipe train / grad under mpirun: the pipelined runtime (runtime/dist_step.h) driven by the
// same flags as the single-process commands (cli/train_cli.h) plus the grid and schedule flags.
#pragma once

namespace hp::cli {

// `mpirun -np D*P*T helixpipe train --schedule=helix --folds=2 --stages=P [--data-parallel=D]
// [--tensor-parallel=T] ...`
int train_dist_main(int argc, char** argv);
// `mpirun -np D*P*T helixpipe grad --stages=P ...`: the same gradient file as the single process.
int grad_dist_main(int argc, char** argv);

}  // namespace hp::cli
