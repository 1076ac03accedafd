// train and grad on several ranks (cli/train_dist.h): the flags; the launch under mpirun or as
// threads of this process is runtime/launch.h. The runs themselves are runtime/train_run.h (run_dist_training,
// run_dist_grad): each replica reads its share of every global batch, runs the lowered schedule,
// gradients are all-reduced over replicas, clipped by the global norm and applied by AdamW per
// stage; rank 0 prints and writes. See docs/executor.md.
#include "cli/train_dist.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/flags.h"
#include "comm/mpi_comm.h"
#include "runtime/launch.h"
#include "schedule/generate.h"

namespace hp::cli {

void add_pipeline_flags(CLI::App& app, PipelineFlags& p, bool train) {
  DistLaunchRequest& d = p.d;
  const std::string g = "Parallelism";
  // Every flag added here asks for a pipelined run when given (wants_ranks).
  const auto keep = [&p](CLI::Option* o) { p.options.push_back(o); };
  keep(app.add_option("--schedule", d.schedule,
                      "gpipe, 1f1b, interleaved, zb1p or helix (default helix)")
           ->check(one_of(schedule_names()))
           ->group(g));
  keep(app.add_option("--schedule-file", d.schedule_file,
                      "run this hand-written schedule (validated first)")
           ->group(g));
  keep(app.add_option(
              "--stages", d.stages,
              "pipeline stages P (default: under mpirun the ranks / (D x T), else 1); without "
              "mpirun, P x D x T ranks run as threads of this process")
           ->check(positive())
           ->group(g));
  keep(app.add_option("--folds", d.folds, "HelixPipe folds F (default 1)")
           ->check(positive())
           ->group(g));
  keep(app.add_option("--virtual", d.virtual_stages, "model chunks per stage (interleaved)")
           ->check(positive())
           ->group(g));
  keep(app.add_option("--data-parallel", d.dp, "data-parallel replicas D (default 1)")
           ->check(positive())
           ->group(g));
  keep(app.add_option("--tensor-parallel", d.tp,
                      "tensor-parallel ranks T per stage, with sequence parallelism "
                      "(docs/tensor-parallel.md; default 1)")
           ->check(positive())
           ->group(g));
  keep(app.add_option("--transfer", d.transfer, "helix: weights or activations (default weights)")
           ->check(one_of({"weights", "activations"}))
           ->group(g));
  if (!train) return;
  keep(app.add_flag("--progress-thread", p.progress_thread,
                    "under mpirun: progress MPI from a background thread")
           ->group(g));
  keep(app.add_option("--trace", d.trace, "Chrome trace JSON of the last step (pipelined runs)")
           ->group("Output"));
  keep(app.add_option("--timeline", d.timeline, "SVG timeline of the last step (pipelined runs)")
           ->group("Output"));
}

bool wants_ranks(const PipelineFlags& p) {
  if (MpiComm::launched_by_mpirun()) return true;
  return std::any_of(p.options.begin(), p.options.end(),
                     [](const CLI::Option* o) { return o->count() > 0; });
}

}  // namespace hp::cli
