// The distributed `train` and `grad` flags: world = D x P x T ranks; the runs themselves are
// runtime/train_run.h (run_dist_training, run_dist_grad). Each replica reads its share of every
// global batch (the same sequences the single-process run reads for M*D micro-batches), runs the
// lowered schedule, gradients are all-reduced over replicas, clipped by the global norm and applied
// by AdamW per stage. Rank 0 prints the progress line and writes the JSONL log and checkpoints
// (weights gathered from every stage + trainer state). See docs/executor.md.
#include "cli/train_dist.h"

#include "cli/train_cli.h"
#include "comm/mpi_comm.h"
#include "runtime/train_run.h"

namespace hp::cli {

namespace {

// The schedule and grid flags train and grad share under mpirun.
void add_dist_flags(CLI::App& app, DistLaunchRequest& d) {
  app.add_option("--schedule", d.schedule, "gpipe, 1f1b, interleaved, zb1p or helix");
  app.add_option("--schedule-file", d.schedule_file, "run this hand-written schedule (validated first)");
  app.add_option("--stages", d.stages, "pipeline stages P")->check(CLI::PositiveNumber);
  app.add_option("--folds", d.folds, "HelixPipe folds F")->check(CLI::PositiveNumber);
  app.add_option("--virtual", d.virtual_stages, "virtual stages (interleaved)")->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", d.dp, "data-parallel replicas D")->check(CLI::PositiveNumber);
  app.add_option("--tensor-parallel", d.tp,
                 "tensor-parallel ranks T per stage (with sequence parallelism; "
                 "docs/tensor-parallel.md); the job has D x P x T ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--transfer", d.transfer, "weights or activations (helix)");
}

}  // namespace

int train_dist_main(int argc, char** argv) {
  CLI::App app("Train a model with pipeline (and data) parallelism under mpirun.", "train");
  TrainRequest f;
  add_train_flags(app, f);
  DistLaunchRequest d;
  add_dist_flags(app, d);
  bool progress_thread = false;
  app.add_option("--trace", d.trace, "Chrome trace JSON of the last measured step (rank 0 writes)");
  app.add_option("--timeline", d.timeline, "SVG timeline of the last measured step");
  app.add_flag("--progress-thread", progress_thread, "progress MPI from a background thread");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  f.given = given_flags(app);

  CommOptions copt;
  copt.progress_thread = progress_thread;
  auto world = MpiComm::init_world(&argc, &argv, copt);
  try {
    run_dist_training(*world, f, d);
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return 0;
}

int grad_dist_main(int argc, char** argv) {
  CLI::App app("Loss and gradients of a checkpoint, computed by the pipelined runtime under mpirun.",
               "grad");
  GradRequest f;
  add_grad_flags(app, f);
  DistLaunchRequest d;
  add_dist_flags(app, d);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto world = MpiComm::init_world(&argc, &argv, CommOptions{});
  try {
    run_dist_grad(*world, f, d, app.get_option("--recompute")->count() > 0);
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return 0;
}

}  // namespace hp::cli
