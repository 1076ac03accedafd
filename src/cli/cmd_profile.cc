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
      "examples:\n"
      "  helixpipe profile --model=small --seq-len=4096 --out=costs.json\n"
      "  mpirun -np 2 helixpipe profile --model=small --seq-len=4096 --out=costs.json\n"
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
  fmt::print("profile   model={} h={} heads={} s={} b={} threads={} BLAS core={} transfer={} "
             "precision={}\n",
             cfg.name, cfg.hidden, cfg.heads, opt.seq_len, opt.microbatch_size, p.threads,
             p.blas_core, transfer_str(opt.transfer), opt.precision.name());
  fmt::print("          median of {} passes after {} warm-up, {} layer(s) timed\n\n", opt.repeats,
             opt.warmup, opt.layers);
  fmt::print("{:>6} {:>12} {:>12} {:>12}   spread F/I/W (max-min)/median\n", "part", "F", "I", "W");
  for (PartKind k : kPartKinds) {
    auto t = [&](Dir d) { return human_seconds(p.time.at(k, d)); };
    auto sp = [&](Dir d) { return 100 * p.spread.at(k, d); };
    fmt::print("{:>6} {:>12} {:>12} {:>12}   {:.0f}% / {:.0f}% / {:.0f}%\n", part_kind_str(k),
               t(Dir::kF), t(Dir::kI), t(Dir::kW), sp(Dir::kF), sp(Dir::kI), sp(Dir::kW));
  }
  fmt::print("\nattn recompute F (no-attn) {}\n", human_seconds(p.attn_recompute_f));
  fmt::print(
      "post gate+up F {}, down F {} (post F by GEMM FLOPs: a recomputed post's backward "
      "redoes the first when G and U were not kept; a recompute nothing reads skips the "
      "second)\n",
      human_seconds(p.post_gate_up_f), human_seconds(p.post_down_f));
  fmt::print("link      latency {} bandwidth {:.2f} GB/s  ({}; message {})\n",
             human_seconds(p.link_latency_s), p.link_bandwidth_Bps / 1e9, p.link_source,
             human_bytes(static_cast<double>(p.message_bytes)));
  if (step)
    fmt::print("step      P=1, {} layers, {} micro-batches: measured {}, predicted from parts {} "
               "({:+.1f}%), peak store {}\n",
               step->layers, step->microbatches, human_seconds(step->measured_s),
               human_seconds(step->predicted_s),
               100 * (step->predicted_s - step->measured_s) / step->measured_s,
               human_bytes(static_cast<double>(step->peak_store_bytes)));
  if (!out_path.empty()) fmt::print("wrote     {}\n", out_path);
  return 0;
}

}  // namespace

}  // namespace hp::cli
