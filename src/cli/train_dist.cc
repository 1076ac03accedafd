// The distributed `train`: world = D x P ranks; each replica reads its share of every global batch
// (the same sequences the single-process run reads for M*D micro-batches), runs the lowered
// schedule, gradients are all-reduced over replicas, clipped by the global norm and applied by
// AdamW per stage. Rank 0 prints the progress line and writes the JSONL log and checkpoints
// (weights gathered from every stage + trainer state). See docs/executor.md.
#include "cli/train_dist.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>

#include "cli/train_cli.h"
#include "comm/mpi_comm.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "runtime/dist_step.h"
#include "runtime/dist_trainer.h"
#include "runtime/model_io.h"
#include "checkpoint/safetensors.h"
#include <nlohmann/json.hpp>
#include "runtime/progress.h"
#include "runtime/trainer.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "runtime/timeline_gather.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

namespace {

// The schedule the flags name (generated, validated and lowered) or --schedule-file, for
// micro-batches of B*S tokens and M micro-batches per replica.
Schedule flag_schedule(const std::string& name, const std::string& file, const ModelConfig& cfg,
                       int64_t tokens_per_mb, int stages, int microbatches, int folds, int virt,
                       Recompute recompute, bool recompute_given, const std::string& transfer) {
  Schedule sch;
  if (!file.empty()) {
    sch = load_checked_schedule(file, cfg, tokens_per_mb);
  } else {
    ScheduleSpec spec{name, stages, microbatches, static_cast<int>(cfg.layers), folds, virt,
                      recompute, parse_transfer(transfer)};
    if (!recompute_given) spec.recompute.reset();
    sch = generate(spec);
    ValidationReport rep = validate(sch, ValidateOptions{&cfg, tokens_per_mb});
    if (!rep.ok()) throw Error("the generated schedule is invalid: " + rep.text(sch));
    lower(sch, &cfg, tokens_per_mb);
  }
  if (sch.microbatches != microbatches)
    throw Error(fmt::format("the schedule has {} micro-batches but --microbatches is {}; make "
                            "them agree",
                            sch.microbatches, microbatches));
  return sch;
}

}  // namespace

int train_dist_main(int argc, char** argv) {
  CLI::App app("Train a model with pipeline (and data) parallelism under mpirun.", "train");
  TrainFlags f;
  add_train_flags(app, f);
  std::string sched_name = "helix", sched_file, transfer = "weights", trace, timeline;
  int stages = 1, folds = 1, virt = 1, dp = 1, tp = 1;
  bool progress_thread = false;
  app.add_option("--schedule", sched_name, "gpipe, 1f1b, interleaved, zb1p or helix");
  app.add_option("--schedule-file", sched_file, "run this hand-written schedule (validated first)");
  app.add_option("--stages", stages, "pipeline stages P")->check(CLI::PositiveNumber);
  app.add_option("--folds", folds, "HelixPipe folds F")->check(CLI::PositiveNumber);
  app.add_option("--virtual", virt, "virtual stages (interleaved)")->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", dp, "data-parallel replicas D")->check(CLI::PositiveNumber);
  app.add_option("--tensor-parallel", tp,
                 "tensor-parallel ranks T per stage (with sequence parallelism; "
                 "docs/tensor-parallel.md); the job has D x P x T ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--transfer", transfer, "weights or activations (helix)");
  app.add_option("--trace", trace, "Chrome trace JSON of the last measured step (rank 0 writes)");
  app.add_option("--timeline", timeline, "SVG timeline of the last measured step");
  app.add_flag("--progress-thread", progress_thread, "progress MPI from a background thread");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;

  CommOptions copt;
  copt.progress_thread = progress_thread;
  auto world = MpiComm::init_world(&argc, &argv, copt);
  const bool root = world->rank() == 0;
  try {
    TrainPlan plan = resolve_train_flags(f, app);
    auto be = make_cpu_backend(f.threads);
    const Precision prec = apply_precision(plan, *be);
    if (root && !plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);
    const ModelConfig& cfg = plan.cfg;
    const StepShape& shape = plan.shape;
    const int M = static_cast<int>(shape.microbatches);
    Schedule sch = flag_schedule(sched_name, sched_file, cfg, shape.microbatch_size * shape.seq_len,
                                 stages, M, folds, virt, shape.recompute,
                                 app.get_option("--recompute")->count() > 0, transfer);
    const std::string sched_label = sch.name;
    const int P = sch.num_stages;
    DistTrainer trainer(*world, std::move(sch), dp, cfg, *be, shape, plan.model_options, prec,
                        plan.state, tp);
    if (plan.source) {
      trainer.load_params(*plan.source);
    } else {
      trainer.init_params();
    }
    if (plan.resumed && plan.source->optimizer_path)
      trainer.load_optimizer(*plan.source->optimizer_path);
    const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
    const SequenceReader reader(source, shape.seq_len, cfg.vocab);

    // Test-only fault injection (docs/executor.md): HP_TEST_KILL_RANK=R:N makes rank R kill
    // itself with SIGKILL when step N starts, so tests can check that the job ends naming it.
    int kill_rank = -1;
    long long kill_step = -1;
    if (const char* k = std::getenv("HP_TEST_KILL_RANK")) {
      if (std::sscanf(k, "%d:%lld", &kill_rank, &kill_step) != 2)
        throw Error(fmt::format("HP_TEST_KILL_RANK='{}' should be RANK:STEP, e.g. 1:3", k));
    }
    const int64_t end = last_step(f, trainer.state());
    // The last step is recorded when --trace or --timeline asks for it.
    Timeline tl;
    auto before = [&](int64_t next) {
      if (world->rank() == kill_rank && next == kill_step) std::raise(SIGKILL);
      if (next == end && (!trace.empty() || !timeline.empty())) {
        tl = Timeline{P, "helixpipe train (measured)", {}};
        trainer.record_timeline(&tl);
      }
    };
    TrainLaunch launch;
    launch.before_step = before;
    if (!trace.empty()) launch.outputs.push_back({"--trace", trace});
    if (!timeline.empty()) launch.outputs.push_back({"--timeline", timeline});
    launch.ranks = world->size();
    launch.root = root;
    launch.header = fmt::format("train (distributed): {} = {} x {} x {} ranks (data x pipeline x "
                                "tensor), schedule {}, {} micro-batches per replica",
                                world->size(), dp, P, tp, sched_label, M);
    launch.after_step = [&](const StepRecord& r, nlohmann::json& line, std::string& extra) {
      const double bubble = 100.0 * trainer.last_bubble_fraction();
      extra += fmt::format("  bubble {:.1f}%", bubble);
      line["bubble_pct"] = bubble;
      line["peak_stash_bytes_rank0"] = trainer.last_peak_stash_bytes();
      if (tp > 1) {  // rank 0's share: its group's collectives, waiting included
        const TpGroup::Stats& t = trainer.last_tp_stats();
        extra += fmt::format("  tp comm {:.3f}s", t.seconds);
        line["tp_comm_s_rank0"] = t.seconds;
        line["tp_bytes_sent_rank0"] = t.bytes_sent;
      }
    };
    launch.after_loop = [&] {
      if (trace.empty() && timeline.empty()) return;
      // Stage 0 of replica 0 collects every stage's events and writes the files.
      GridComms& grid = trainer.grid();
      if (grid.d != 0 || grid.t != 0) return;  // one tensor rank's view of each stage
      gather_timeline(*grid.pipeline, tl);
      if (grid.p != 0) return;
      if (!trace.empty()) write_file_atomic(trace, render_chrome_trace(tl));
      if (!timeline.empty()) write_file_atomic(timeline, render_svg(tl));
    };
    run_training(trainer, f, plan, source, reader, trainer.global_shape(),
                 fmt::format("{} on {} per rank", prec.name(), be->name()), launch);
    world->barrier();
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return 0;
}

int grad_dist_main(int argc, char** argv) {
  CLI::App app("Loss and gradients of a checkpoint, computed by the pipelined runtime under mpirun.",
               "grad");
  GradFlags f;
  add_grad_flags(app, f);
  std::string sched_name = "helix", sched_file, transfer = "weights";
  int stages = 1, folds = 1, virt = 1, dp = 1, tp = 1;
  app.add_option("--schedule", sched_name, "gpipe, 1f1b, interleaved, zb1p or helix");
  app.add_option("--schedule-file", sched_file, "run this hand-written schedule (validated first)");
  app.add_option("--stages", stages, "pipeline stages P")->check(CLI::PositiveNumber);
  app.add_option("--folds", folds, "HelixPipe folds F")->check(CLI::PositiveNumber);
  app.add_option("--virtual", virt, "virtual stages (interleaved)")->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", dp, "data-parallel replicas D")->check(CLI::PositiveNumber);
  app.add_option("--tensor-parallel", tp,
                 "tensor-parallel ranks T per stage (with sequence parallelism; "
                 "docs/tensor-parallel.md); the job has D x P x T ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--transfer", transfer, "weights or activations (helix)");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto world = MpiComm::init_world(&argc, &argv, CommOptions{});
  try {
    check_grad_flags(f);
    if (world->rank() == 0) check_output_file("--out", f.out);
    const CheckpointInfo info = open_checkpoint(f.checkpoint);
    const ModelConfig cfg = checkpoint_model_config(info);
    if (f.microbatches % dp != 0)
      throw Error(fmt::format("--microbatches {} must be a multiple of --data-parallel {}",
                              f.microbatches, dp));
    const int M = static_cast<int>(f.microbatches / dp);
    const int64_t B = f.microbatch_size, S = f.seq_len;
    const Schedule sch = flag_schedule(sched_name, sched_file, cfg, B * S, stages, M, folds, virt,
                                       parse_recompute(f.recompute),
                                       app.get_option("--recompute")->count() > 0, transfer);
    GridComms grid = split_grid(*world, dp, sch.num_stages, tp);
    auto be = make_cpu_backend(f.threads);
    ModelOptions mo;
    mo.mlp_chunk = f.mlp_chunk;
    DistStage stage(sch, grid, cfg, *be, B, S, mo, resolve_precision(f.precision, *be));
    load_checkpoint_params(info, stage.params());
    const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
    const SequenceReader reader(source, S, cfg.vocab);
    StepShape shape;
    shape.seq_len = S;
    shape.microbatch_size = B;
    shape.microbatches = f.microbatches;
    std::vector<int32_t> tokens, targets;
    read_step_batch(reader, 0, shape, /*wrap=*/false, tokens, targets);
    const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
    DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
    const bool writer = grid.d == 0 && grid.p == 0 && grid.t == 0;  // world rank 0
    Params full(cfg, writer ? Params::all_parts(cfg) : std::vector<Part>{}, *be);
    if (grid.d == 0) stage.gather_grads(writer ? &full : nullptr);
    if (world->rank() == 0) {
      std::vector<float> host;
      const auto grads = params_write_tensors(full, host, /*grads=*/true);
      write_safetensors(f.out, grads,
                        {{"format", "pt"},
                         {"helixpipe", "gradients of the mean loss"},
                         {"loss", fmt::format("{:.9g}", r.loss)}});
      fmt::print("wrote {}: gradients of {} tensors over {} sequences of {} tokens ({} x {} x {} "
                 "ranks, schedule {}, {})\n",
                 f.out, grads.size(), shape.sequences(), S, dp, sch.num_stages, tp, sch.name,
                 stage.params().precision().name());
      fmt::print("{}\n", nlohmann::json{{"loss", r.loss}}.dump());
    }
    world->barrier();
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return 0;
}

}  // namespace hp::cli
