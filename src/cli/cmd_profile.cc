// helixpipe profile: measure the F, I and W time of each part kind of a model on this machine (real
// Model, CPU kernels) and a link estimate, and write the part-cost JSON that simulate/compare read
// with --part-costs (docs/formats/sim.md).
#include <fmt/format.h>

#include <optional>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "cli/train_cli.h"
#include "comm/mpi_comm.h"
#include "kernels/kernels.h"
#include "runtime/profile.h"
#include "sim/cost_model.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

namespace {
int profile_report(const ModelConfig& cfg, const ProfileOptions& opt, const PartProfile& p,
                   const std::string& out_path, const std::string& format, int step_mbs);
}  // namespace

int cmd_profile(int argc, char** argv) {
  CLI::App app{"Measure per-part compute costs (F, I, W of embed, pre, attn, post, head) of a model\n"
               "on this machine and a link estimate; write them as a part-cost JSON for the\n"
               "simulator (--part-costs).",
               "helixpipe profile"};
  app.footer(
      "Each part runs as its own op on the real model with the CPU kernels; each figure is the\n"
      "median of --repeats passes after --warmup passes, timed by the thread's CPU time at one\n"
      "thread (other processes on the cores do not inflate it) and by wall time with more.\n"
      "Recomputation costs the part's F.\n\n"
      "The link: under mpirun (2 or more ranks) an MPI ping-pong between ranks 0 and 1 through\n"
      "the runtime's own Comm calls, an 8-byte message for the latency and one activation message\n"
      "(b*s*h*4 bytes) for the bandwidth; then every rank profiles the parts at once (as the\n"
      "pipeline loads the cores) and rank 0 reports. Without mpirun it is an in-process memcpy\n"
      "of one activation message. --link-latency with --link-bandwidth skip measuring.\n\n"
      "--tensor-parallel=T (under mpirun, a multiple of T ranks; groups of T consecutive ranks):\n"
      "each rank holds its shard of every part (docs/tensor-parallel.md) and the passes run the\n"
      "group's collectives, timed by wall time. The JSON keeps one rank's compute per part (the\n"
      "slowest rank's) and the group's time for one all-gather or reduce-scatter of the N x h\n"
      "activation (\"tensor_parallel\"); simulate and compare read it with --tp=T, which charges\n"
      "each part its collectives on top (docs/formats/sim.md).\n\n"
      "examples:\n"
      "  helixpipe profile --model=small --seq-len=4096 --out=costs.json\n"
      "  mpirun -np 2 helixpipe profile --model=small --seq-len=4096 --out=costs.json\n"
      "  mpirun -np 2 helixpipe profile --model=small --seq-len=4096 --tensor-parallel=2 \\\n"
      "      --out=costs_tp2.json\n"
      "  helixpipe simulate --schedule=helix --stages=2 --microbatches=4 --layers=8 \\\n"
      "      --part-costs=costs.json");
  std::string model = "small", out_path, format = "text", transfer = "weights", precision = "fp32";
  ProfileOptions opt;
  app.add_option("--model", model, "model preset name or JSON file")->capture_default_str();
  app.add_option("--seq-len", opt.seq_len, "tokens per sequence")->required();
  app.add_option("--microbatch-size", opt.microbatch_size, "sequences per micro-batch")
      ->capture_default_str();
  app.add_option("--threads", opt.threads, "CPU kernel threads")->capture_default_str();
  app.add_option("--repeats", opt.repeats, "timed passes (median reported)")->capture_default_str();
  app.add_option("--warmup", opt.warmup, "untimed passes first")->capture_default_str();
  app.add_option("--profile-layers", opt.layers,
                 "layers built and timed (per-layer parts averaged over them)")
      ->capture_default_str();
  app.add_option("--tensor-parallel", opt.tensor_parallel,
                 "time one rank's shard of each part in a tensor-parallel group of this size")
      ->capture_default_str();
  app.add_option("--transfer", transfer, "weights or activations (what attn contains)")
      ->capture_default_str();
  app.add_option("--link-latency", opt.link_latency_s, "link latency in seconds (skip measuring)");
  app.add_option("--link-bandwidth", opt.link_bandwidth_Bps, "link bandwidth in bytes/s");
  app.add_option("--out", out_path, "write the part-cost JSON here");
  add_precision_flag(app, precision);
  int step_mbs = 0;
  app.add_option("--step-microbatches", step_mbs,
                 "also time one whole single-process step with this many micro-batches (all of\n"
                 "the model's layers) and compare it with the sum of the part costs (P = 1 check)");
  add_format_flag(app, format);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  opt.transfer = parse_transfer(transfer);
  if (!out_path.empty()) check_output_file("--out", out_path);
  HP_CHECK(opt.tensor_parallel >= 1, "profile: --tensor-parallel must be >= 1 (got {})",
           opt.tensor_parallel);
  HP_CHECK(step_mbs == 0 || opt.tensor_parallel == 1,
           "profile: --step-microbatches times a single-process step; leave it out with "
           "--tensor-parallel");
  opt.precision = resolve_precision(precision, *make_cpu_backend(1));

  const ModelConfig cfg = ModelConfig::load_for_runtime(model);
  std::unique_ptr<MpiComm> world;
  if (MpiComm::launched_by_mpirun()) world = MpiComm::init_world(&argc, &argv);
  try {
    const std::optional<PartProfile> p = profile_launch(world.get(), cfg, opt);
    const int rc = p ? profile_report(cfg, opt, *p, out_path, format, step_mbs) : 0;
    if (world) world->barrier();
    return rc;
  } catch (const std::exception& e) {
    if (world) world->abort(fmt::format("rank {}: error: {}", world->rank(), e.what()));
    throw;
  }
}

namespace {

int profile_report(const ModelConfig& cfg, const ProfileOptions& opt, const PartProfile& p,
                   const std::string& out_path, const std::string& format, int step_mbs) {
  // Round trip: what we write must load in the simulator.
  (void)CostModel::from_part_costs(p.to_json(), "profile output");
  if (!out_path.empty()) write_file_atomic(out_path, p.to_json().dump(2) + "\n");
  std::optional<StepCheck> step;
  if (step_mbs > 0) step = check_step(cfg, opt, p, step_mbs);
  if (format == "json") {
    fmt::print("{}\n", profile_report_json(cfg, opt, p, step).dump(2));
    return 0;
  }
  fmt::print("{}", profile_report_text(cfg, opt, p, step));
  if (!out_path.empty()) fmt::print("wrote     {}\n", out_path);
  return 0;
}

}  // namespace

}  // namespace hp::cli
