// helixpipe bench: measured pipeline steps of several schedules on P ranks, with tokens/s, ratio to
// 1F1B, bubble fraction, communication wait and peak memory per stage, and next to each row the
// simulator's prediction from a part-cost file (helixpipe profile): iteration time, bubble and
// peak stash, predicted beside measured.
//
// The runs themselves are runtime/bench_run.h; this file parses the flags and prints the rows.
// Under mpirun the ranks are MPI processes (MpiComm, one per stage, each bound to its core by
// mpirun); otherwise they are threads of this process (LocalWorld, in-memory messages). Either way
// every rank runs the same StageExecutor the trainer uses.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "cli/train_cli.h"
#include "comm/mpi_comm.h"
#include "kernels/cpu_kernels.h"
#include "runtime/bench_run.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

namespace {

std::string per_stage_mib(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{}{:.1f}", i ? "/" : "", static_cast<double>(v[i]) / 1048576.0);
  return out;
}

void print_header(const BenchRequest& f, int layers, const Precision& prec,
                  const std::string& transport) {
  fmt::print("bench  D={} P={} T={} M={} L={} s={} threads/rank={} precision={} BLAS core={} "
             "ranks: {}\n",
             f.data_parallel, f.stages, f.tensor_parallel, f.microbatches, layers, f.seq_len,
             f.threads, prec.name(), blas_core_name(), transport);
  fmt::print("{:<11} {:>7} {:>9} {:>7} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} "
             "{:>17} {:>17}\n",
             "schedule", "policy", "tokens/s", "vs 1f1b", "bubble", "pred", "comm wait", "step",
             "predicted", "error", "core", "replay", "stash MiB meas", "stash MiB pred",
             "store MiB meas");
}

void print_prediction_legend(int tensor_parallel, int data_parallel, bool rank_profile) {
  fmt::print(
      "predicted: the simulator on the part costs, each stage's parts scaled by its core's\n"
      "  calibration (a pass of one layer's parts before every timed step and after the last,\n"
      "  over the profile's; per part, the median of the passes; 'core' sums pre+attn+post);\n"
      "  replay: the simulator given each stage's measured compute time, so its error is the\n"
      "  schedule, bubble and communication model alone. stash pred '=': equal to the\n"
      "  measured bytes.\n");
  if (data_parallel > 1)
    fmt::print(
        "  With D = {}: one replica's pipeline, each stage calibrated by its slowest rank over\n"
        "  the replicas, then each stage's gradient all-reduce after its last op on the part\n"
        "  costs' link (sim/parallel.h dp_allreduce_time).\n",
        data_parallel);
  if (rank_profile)
    fmt::print(
        "  With T = {}: the part costs are one rank's, from profile --tensor-parallel={}: its\n"
        "  compute per part plus the collectives on the time per collective its own group\n"
        "  measured (not calibrated), stash and messages per rank.\n",
        tensor_parallel, tensor_parallel);
  else if (tensor_parallel > 1)
    fmt::print(
        "  With T = {}: each part's cost / T plus its sequence-parallel collectives on the group\n"
        "  link below (sim/parallel.h shard_costs; the calibration scales only the compute), a\n"
        "  stage's calibration being its group's slowest rank, stash and messages per rank.\n",
        tensor_parallel);
}

// One row of the table and its per-rank lines.
void print_row(const BenchRow& x, const BenchRequest& f) {
  std::string pred = "-", err = "-", pmem = "-", pbub = "-", rerr = "-", cal = "-";
  if (x.pred) {
    const BenchPrediction& p = *x.pred;
    rerr = fmt::format("{:+.1f}%", 100 * (p.replay_step_s - x.step_s) / x.step_s);
    if (!p.scale.empty()) {
      cal.clear();
      for (size_t q = 0; q < p.scale.size(); ++q) cal += fmt::format("{}{:.2f}", q ? "/" : "", p.scale[q]);
    }
    pred = human_seconds(p.step_s);
    err = fmt::format("{:+.1f}%", 100 * (p.step_s - x.step_s) / x.step_s);
    pbub = fmt::format("{:.1f}%", 100 * p.bubble_fraction);
    pmem = per_stage_mib(p.stash) + (p.stash_exact ? " =" : " !");
  }
  fmt::print("{:<11} {:>7} {:>9.0f} {:>7} {:>5.1f}% {:>6} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>17} {:>17} {:>17}\n",
             x.variant->label, recompute_str(x.recompute), x.tokens_per_s,
             x.vs_1f1b > 0 ? fmt::format("{:.3f}", x.vs_1f1b) : std::string("-"), 100 * x.bubble,
             pbub, human_seconds(x.comm_wait), human_seconds(x.step_s), pred, err, cal, rerr,
             per_stage_mib(x.stash), pmem, per_stage_mib(x.store));
  std::string line = fmt::format("  per rank: weights+grads+store up to {:.1f} MiB",
                                 static_cast<double>(x.peak_rank_bytes) / 1048576.0);
  if (f.tensor_parallel > 1) {
    const RankMeasured& b = x.busiest;
    line += fmt::format("\n  tensor-parallel: {} collectives, {:.1f} MiB sent, {} inside them = "
                        "{} transfer + {} waiting for the group",
                        b.tp_collectives, static_cast<double>(b.tp_bytes_sent) / 1048576.0,
                        human_seconds(b.tp_seconds), human_seconds(b.tp_transfer_s),
                        human_seconds(b.tp_skew_s));
    line += fmt::format("\n  link model {} ({:+.1f}% of the transfer; group link {} + {:.2f} GB/s",
                        human_seconds(x.tp_pred_s), 100 * (x.tp_pred_s - b.tp_transfer_s) / b.tp_transfer_s,
                        human_seconds(x.tp_link.latency_s), x.tp_link.bandwidth_Bps / 1e9);
    if (x.tp_pred_pingpong_s)
      line += fmt::format("; on the profile's ping-pong link {}", human_seconds(*x.tp_pred_pingpong_s));
    line += ")";
    if (x.tp_pred_profile_s)
      line += fmt::format(
          "\n  the profile's measured collective ({} per N x h) for these bytes: {} "
          "({:+.1f}% of the transfer)",
          human_seconds(x.tp_profile_collective_s), human_seconds(*x.tp_pred_profile_s),
          100 * (*x.tp_pred_profile_s - b.tp_transfer_s) / b.tp_transfer_s);
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

}  // namespace

// Adds bench's flags to `app`; returns --stages (under mpirun it defaults to the ranks).
CLI::Option* add_bench_flags(CLI::App& app, BenchRequest& f) {
  app.footer(
      "Under mpirun (-np P) every stage is its own MPI process; mpirun binds each to a core.\n"
      "Without mpirun the P ranks are threads of this process (in-memory messages); give the\n"
      "machine P free cores. Each kernel set runs --threads threads. Times are the median of\n"
      "--steps steps after one warm-up step (per step: the slowest stage's wall time).\n"
      "Memory: the stash (values kept for a backward) is predicted exactly by the validator and\n"
      "shown predicted beside measured; 'store' adds the in-flight values (inputs and outputs\n"
      "of the running op, message buffers), measured only.\n"
      "Benchmark machines are noisy: unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, keep the\n"
      "cores otherwise idle, and compare ratios measured in one run.\n\n"
      "example:\n"
      "  mpirun -np 2 helixpipe profile --model=m.json --seq-len=4096 --out=c.json\n"
      "  mpirun -np 2 helixpipe bench --model=m.json --seq-len=4096 --microbatches=4 \\\n"
      "      --recompute=natural,no-attn --part-costs=c.json --timeline=helix.svg --out=b.json");
  app.add_option("--model", f.model, "model preset or JSON file")->required();
  app.add_option("--seq-len", f.seq_len, "tokens per sequence (micro-batch = 1 sequence)")->required();
  CLI::Option* stages_opt = app.add_option("--stages", f.stages, "pipeline ranks P (under mpirun: -np)")
                         ->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "micro-batches per step M")->capture_default_str();
  app.add_option("--threads", f.threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--schedules", f.schedules,
                 "comma list of 1f1b, gpipe, zb1p, interleaved, helix1, helix2 (helix F=1, F=2)")
      ->capture_default_str();
  app.add_option("--virtual", f.virtual_stages, "virtual stages V of interleaved")->capture_default_str();
  app.add_option("--data-parallel", f.data_parallel,
                 "replicas D, each running the schedule on its own M micro-batches")
      ->capture_default_str();
  app.add_option("--tensor-parallel", f.tensor_parallel,
                 "tensor-parallel ranks T per stage (with sequence parallelism; "
                 "docs/tensor-parallel.md); the job has D x P x T ranks")
      ->capture_default_str();
  add_precision_flag(app, f.precision);
  app.add_option(
         "--recompute", f.recompute,
         "comma list of policies, each run for every schedule: natural (each schedule's\n"
         "own: helix no-attn, the others none), none, full, no-attn, selective. A run equal\n"
         "to an earlier one is skipped")
      ->capture_default_str();
  app.add_option("--part-costs", f.part_costs, "part-cost JSON for the predictions (helixpipe profile)");
  app.add_option("--timeline", f.timeline_path,
                 "SVG: simulated (top) and measured (bottom) timeline of --timeline-label "
                 "(its first policy)");
  app.add_option("--timeline-label", f.timeline_label, "which schedule the timeline shows")
      ->capture_default_str();
  app.add_flag("--calibrate,!--no-calibrate", f.calibrate,
               "with --part-costs: time one layer's parts on every rank before each timed step\n"
               "and after the last, and scale each stage's predicted parts by its core's speed\n"
               "then against the profile (per part, the median of the passes)")
      ->capture_default_str();
  app.add_option("--trace-dir", f.trace_dir,
                 "write each run's measured timeline here as a Chrome trace (Perfetto):\n"
                 "trace_<schedule>[_<policy>].json, e.g. trace_helix2.json, trace_1f1b_no-attn.json");
  app.add_option("--out", f.out_path, "write the results as JSON here");
  return stages_opt;
}

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure training steps of several schedules on P pipeline ranks and set each beside\n"
               "the simulator's prediction from a measured part-cost file.",
               "helixpipe bench"};
  BenchRequest f;
  CLI::Option* stages_opt = add_bench_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;

  std::unique_ptr<MpiComm> world;
  if (MpiComm::launched_by_mpirun()) {
    world = MpiComm::init_world(&argc, &argv);
    if (stages_opt->count() == 0) f.stages = std::max(1, world->size() / f.grid());
  }
  const bool root = !world || world->rank() == 0;
  try {
    check_bench_request(f, world ? world->size() : 0);
    if (root) {
      if (!f.out_path.empty()) check_output_file("--out", f.out_path);
      if (!f.timeline_path.empty()) check_output_file("--timeline", f.timeline_path);
      if (!f.trace_dir.empty()) check_output_folder("--trace-dir", f.trace_dir);
    }
    const ModelConfig cfg = ModelConfig::load_for_runtime(f.model);
    check_tensor_parallel(cfg, f.tensor_parallel, f.seq_len);
    const int L = static_cast<int>(cfg.layers);

    const std::vector<const BenchVariant*> variants = pick_bench_variants(f.schedules);
    const std::vector<std::optional<Recompute>> policies = pick_bench_policies(f.recompute);

    const Precision prec = resolve_precision(f.precision, *make_cpu_backend(1));
    std::optional<CostSetup> cost;
    if (!f.part_costs.empty()) cost = bench_cost(f, prec);
    const std::string transport =
        world ? fmt::format("MPI (mpirun, {} ranks)", world->size())
              : fmt::format("LocalWorld ({} threads of one process)", f.stages * f.grid());
    const bool predict_steps = cost.has_value();

    if (root) print_header(f, L, prec, transport);
    BenchCallbacks cb;
    cb.skipped = [](const std::string& label, const std::string& why) {
      fmt::print("{:<11} skipped: {}\n", label, why);
    };
    cb.row = [&](const BenchRow& x) { print_row(x, f); };
    const nlohmann::json rows =
        run_bench(world.get(), f, cfg, prec, variants, policies, cost, transport, cb);
    if (root && predict_steps)
      print_prediction_legend(f.tensor_parallel, f.data_parallel, cost->cost.tensor_parallel() > 1);
    if (root && f.tensor_parallel > 1)
      fmt::print("tensor-parallel: the slowest rank's time inside the group's collectives (waits "
                 "included),\n  split into the transfer (per collective, the group's shortest time) and waiting for "
                 "the\n  other ranks to arrive; link model: the simulator's charge for them (sim/parallel.h "
                 "tp_group_time) on the\n  link the group's own all-gather + reduce-scatter showed "
                 "when timed alone after the run.\n");
    if (root && !f.out_path.empty())
      write_file_atomic(f.out_path, bench_json(f, cfg, prec, transport, rows).dump(2) + "\n");
    if (world) world->barrier();
  } catch (const std::exception& e) {
    if (world) world->abort(fmt::format("rank {}: error: {}", world->rank(), e.what()));
    throw;
  }
  return 0;
}

}  // namespace hp::cli
