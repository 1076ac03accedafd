// The launch of a pipelined run (runtime/launch.h).
#include "runtime/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "schedule/text_io.h"
#include "util/error.h"

namespace hp {

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

int run_on_ranks(const std::string& command, DistLaunchRequest& d, bool progress_thread,
                 int& threads, int* argc, char*** argv, const std::function<void(Comm&)>& body) {
  if (MpiComm::launched_by_mpirun()) {
    CommOptions copt;
    copt.progress_thread = progress_thread;
    auto world = MpiComm::init_world(argc, argv, copt);
    try {
      d.stages = resolve_stages(d, world->size());
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
  if (progress_thread) fail("--progress-thread applies under mpirun only");
  d.stages = resolve_stages(d, 0);
  const int ranks = d.stages * d.dp * d.tp;
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

}  // namespace hp
