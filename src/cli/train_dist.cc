// train and grad on several ranks (cli/train_dist.h): the flags, and the launch under mpirun or as
// threads of this process. The runs themselves are runtime/train_run.h (run_dist_training,
// run_dist_grad): each replica reads its share of every global batch, runs the lowered schedule,
// gradients are all-reduced over replicas, clipped by the global norm and applied by AdamW per
// stage; rank 0 prints and writes. See docs/executor.md.
#include "cli/train_dist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/flags.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "schedule/generate.h"
#include "schedule/text_io.h"
#include "util/error.h"

namespace hp::cli {

namespace {

// The pipeline stages of the launch: --stages, else the schedule file's, else (under mpirun) the
// ranks left after D x T, else 1.
int resolve_stages(const DistLaunchRequest& d, int world_size) {
  if (d.stages > 0) return d.stages;
  if (!d.schedule_file.empty()) return load_schedule(d.schedule_file).num_stages;
  if (world_size <= 0) return 1;
  const int dt = d.dp * d.tp;
  if (world_size % dt != 0)
    fail(
        "mpirun started {} ranks, not a multiple of --data-parallel x --tensor-parallel = {} x {}"
        "; start a multiple of {} ranks or give --stages",
        world_size, d.dp, d.tp, dt);
  return world_size / dt;
}

// An error caught on a rank of `ranks` processes (1: the ranks are threads of this one, which
// prints the first error once), printed once: an agreed failure only by the rank that reports it.
void print_error(const std::string& command, const std::exception& e, int rank, int ranks) {
  if (const auto* a = dynamic_cast<const AgreedFailure*>(&e)) {
    if (!a->reporter() && ranks > 1) return;
    const std::string who = a->failed_ranks() > 1 && a->failed_rank() == 0
                                ? ""
                                : fmt::format("rank {}: ", a->failed_rank());
    std::fprintf(stderr, "helixpipe %s: %serror: %s\n", command.c_str(), who.c_str(), e.what());
    return;
  }
  const bool internal = dynamic_cast<const Error*>(&e) == nullptr;
  std::fprintf(stderr, "helixpipe %s: %s%s: %s\n", command.c_str(),
               ranks == 1 ? "" : fmt::format("rank {}: ", rank).c_str(),
               internal ? "internal error" : "error", e.what());
}

int exit_code(const std::exception& e) { return dynamic_cast<const Error*>(&e) ? 1 : 3; }

}  // namespace

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

int run_on_ranks(const std::string& command, PipelineFlags& p, int& threads, int* argc,
                 char*** argv, const std::function<void(Comm&)>& body) {
  if (MpiComm::launched_by_mpirun()) {
    CommOptions copt;
    copt.progress_thread = p.progress_thread;
    auto world = MpiComm::init_world(argc, argv, copt);
    try {
      p.d.stages = resolve_stages(p.d, world->size());
      body(*world);
    } catch (const std::exception& e) {
      print_error(command, e, world->rank(), world->size());
      // Every rank of an agreed failure is here: wait until the reporter has printed, so that no
      // abort ends it first. Then end the job (an exit would add mpirun's non-zero-exit banner).
      if (dynamic_cast<const AgreedFailure*>(&e) != nullptr) world->barrier();
      MpiComm::abort_job("", exit_code(e));
    }
    return 0;
  }
  if (p.progress_thread) fail("--progress-thread applies under mpirun only");
  p.d.stages = resolve_stages(p.d, 0);
  const int ranks = p.d.stages * p.d.dp * p.d.tp;
  if (threads == 0) {  // the cores shared among the ranks
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / ranks);
  }
  LocalWorld world(ranks, CommOptions{});
  try {
    world.run(body);
  } catch (const std::exception& e) {
    print_error(command, e, 0, 1);  // a thread's error: one message, as from one process
    return exit_code(e);
  }
  return 0;
}

}  // namespace hp::cli
