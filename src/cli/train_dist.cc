// The distributed `train`: world = D x P ranks; each replica reads its share of every global batch
// (the same sequences the single-process run reads for M*D micro-batches), runs the lowered
// schedule, gradients are all-reduced over replicas, clipped by the global norm and applied by
// AdamW per stage. Rank 0 prints the progress line and writes the JSONL log and checkpoints
// (weights gathered from every stage + trainer state). See docs/executor.md.
#include "cli/train_dist.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>

#include "cli/train_cli.h"
#include "comm/mpi_comm.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "runtime/dist_step.h"
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

int train_dist_main(int argc, char** argv) {
  CLI::App app("Train a model with pipeline (and data) parallelism under mpirun.", "train");
  TrainFlags f;
  add_train_flags(app, f);
  std::string sched_name = "helix", sched_file, transfer = "weights", trace, timeline;
  int stages = 1, folds = 1, virt = 1, dp = 1;
  bool progress_thread = false;
  app.add_option("--schedule", sched_name, "gpipe, 1f1b, interleaved, zb1p or helix");
  app.add_option("--schedule-file", sched_file, "run this hand-written schedule (validated first)");
  app.add_option("--stages", stages, "pipeline stages P")->check(CLI::PositiveNumber);
  app.add_option("--folds", folds, "HelixPipe folds F")->check(CLI::PositiveNumber);
  app.add_option("--virtual", virt, "virtual stages (interleaved)")->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", dp, "data-parallel replicas D")->check(CLI::PositiveNumber);
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
    if (root && !plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);
    const ModelConfig& cfg = plan.cfg;
    const StepShape& shape = plan.shape;
    const int M = static_cast<int>(shape.microbatches);
    const int64_t B = shape.microbatch_size, S = shape.seq_len;
    Schedule sch;
    if (!sched_file.empty()) {
      sch = load_checked_schedule(sched_file, cfg, B * S);
    } else {
      ScheduleSpec spec{sched_name, stages, M, static_cast<int>(cfg.layers), folds, virt,
                        shape.recompute, parse_transfer(transfer)};
      if (!app.get_option("--recompute")->count()) spec.recompute.reset();
      sch = generate(spec);
      ValidationReport rep = validate(sch, ValidateOptions{&cfg, B * S});
      if (!rep.ok()) throw Error("the generated schedule is invalid: " + rep.text(sch));
      lower(sch, &cfg, B * S);
    }
    if (sch.microbatches != M)
      throw Error("the schedule has " + std::to_string(sch.microbatches) +
                  " micro-batches but --microbatches is " + std::to_string(M) + "; make them agree");
    GridComms grid = split_grid(*world, dp, sch.num_stages);
    auto be = make_cpu_backend(f.threads);
    DistStage stage(sch, grid, cfg, *be, B, S, plan.model_options);
    if (plan.source) {
      load_checkpoint_params(*plan.source, stage.params());
    } else {
      stage.params().init(plan.state.seed);
    }
    TrainState st = plan.state;
    AdamW opt(*be, st.adamw);
    std::vector<ParamRef> refs = param_refs(stage.params());
    if (plan.resumed && plan.source->optimizer_path)
      opt.load_state(SafetensorsReader::open(*plan.source->optimizer_path), refs, st.step);
    const TokenSource source = TokenSource::open(f.data);
    const SequenceReader reader(source, S, cfg.vocab);
    StepShape global = shape;
    global.microbatches = shape.microbatches * dp;  // the batch of all replicas together
    MetricsLog log;
    if (root && !f.log.empty()) log.open(f.log, plan.resumed);
    const int64_t total = st.lr.total;
    const int64_t end = f.stop_after > 0 ? std::min(f.stop_after, total) : total;
    const int64_t first_step = st.step;
    const double step_flops = train_step_flops(cfg, global);
    // MFU against the peak of all ranks together (per-rank peak x ranks).
    const MfuPeak peak = resolve_mfu_peak(f);
    if (root)
      fmt::print("train (distributed): {} = {} x {} ranks (data x pipeline), schedule {}, M={} "
                 "B={} S={}; step {} -> {}; MFU against {} per rank x {} ranks\n",
                 world->size(), dp, sch.num_stages, sch.name, M, B, S, first_step, end, peak.what,
                 world->size());
    std::fflush(stdout);
    ProgressLine progress(stdout, root && ::isatty(::fileno(stdout)) != 0, total,
                          std::max<int64_t>(1, (end - first_step) / 20));
    std::vector<int32_t> tokens, targets;
    const auto t0 = std::chrono::steady_clock::now();
    double compute_seconds = 0;
    Timeline tl;
    // A checkpoint in the single-process layout: weights and AdamW moments of every stage
    // gathered on rank 0 (replica 0's stages; the replicas hold identical copies).
    auto save = [&] {
      Params full(cfg, root ? Params::all_parts(cfg) : std::vector<Part>{}, *be);
      if (grid.d == 0) stage.gather_params(grid.p == 0 ? &full : nullptr);
      std::vector<StWriteTensor> moments = opt.state_tensors(refs);
      std::vector<std::vector<float>> received;
      if (grid.d == 0) {
        Comm& pipe = *grid.pipeline;
        if (pipe.rank() == 0) {
          for (int q = 1; q < pipe.size(); ++q) {
            Params other(cfg, stage_parts(sch, q), *be);
            for (const ParamRef& pr : param_refs(other)) {
              for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
                received.emplace_back(static_cast<size_t>(pr.numel()));
                Request rq = pipe.irecv(received.back().data(), pr.numel() * 4, q, 4);
                pipe.wait(rq, "optimizer state of stage " + std::to_string(q));
                moments.push_back({kind + pr.name, StDType::kF32, pr.shape, nullptr});
              }
            }
          }
          // Pointers last: `received` no longer grows.
          size_t k = 0;
          for (StWriteTensor& t : moments)
            if (t.data == nullptr) t.data = received[k++].data();
        } else {
          for (const StWriteTensor& t : moments) {
            int64_t n = 1;
            for (int64_t d : t.shape) n *= d;
            Request rq = pipe.isend(t.data, n * 4, 0, 4);
            pipe.wait(rq, "sending the optimizer state to stage 0");
          }
        }
      }
      if (root) {
        CheckpointContents c;
        c.config = model_config_to_hf(cfg);
        std::vector<float> host;
        c.model = params_write_tensors(full, host);
        c.optimizer = std::move(moments);
        TrainState saved = st;
        saved.microbatches = global.microbatches;  // the global batch: M per replica x D
        c.trainer_state = saved.to_json();
        save_checkpoint(f.save, c);
      }
      world->barrier();
    };
    // Test-only fault injection (docs/executor.md): HP_TEST_KILL_RANK=R:N makes rank R kill
    // itself with SIGKILL when step N starts, so tests can check that the job ends naming it.
    int kill_rank = -1;
    long long kill_step = -1;
    if (const char* k = std::getenv("HP_TEST_KILL_RANK")) {
      if (std::sscanf(k, "%d:%lld", &kill_rank, &kill_step) != 2)
        throw Error(fmt::format("HP_TEST_KILL_RANK='{}' should be RANK:STEP, e.g. 1:3", k));
    }
    while (st.step < end) {
      if (world->rank() == kill_rank && st.step + 1 == kill_step) std::raise(SIGKILL);
      const double ts = now_s();
      read_step_batch(reader, st.next_sequence, global, /*wrap=*/true, tokens, targets);
      const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
      const bool last = st.step + 1 == end && (!trace.empty() || !timeline.empty());
      if (last) tl = Timeline{sch.num_stages, "helixpipe train (measured)", {}};
      DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off,
                                              ExecutorOptions{last ? &tl : nullptr, ts});
      const double lr = st.lr.at(st.step);
      double norm = stage.global_grad_norm();
      if (!std::isfinite(r.loss) || !std::isfinite(norm))
        throw Error(fmt::format("step {}: the loss ({}) or gradient norm ({}) is not finite; "
                                "lower --lr, raise --warmup, or keep --clip > 0",
                                st.step + 1, r.loss, norm));
      opt.step(refs, lr, clip_factor(norm, st.clip));
      double bubble[2] = {r.stats.busy_s, r.stats.total_s};
      world->allreduce_sum(bubble, 2);
      const double secs = now_s() - ts;
      compute_seconds += secs;
      st.step += 1;
      st.next_sequence += global.sequences();
      st.tokens_seen += global.tokens();
      StepRecord rec{st.step, r.loss, lr, norm, secs, static_cast<double>(global.tokens()) / secs};
      st.history.push_back(rec);
      if (root) {
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double eta = elapsed / static_cast<double>(st.step - first_step) *
                           static_cast<double>(end - st.step);
        const double gflops = step_flops / secs / 1e9;
        const double bub = bubble[1] > 0 ? 100.0 * (1 - bubble[0] / bubble[1]) : 0;
        std::string extra = fmt::format("bubble {:.1f}%", bub);
        extra += fmt::format("  MFU {:.1f}%", 100.0 * gflops / (peak.gflops * world->size()));
        nlohmann::json line = rec.to_json();
        line["tokens_seen"] = st.tokens_seen;
        line["bubble_pct"] = bub;
        line["peak_stash_bytes_rank0"] = r.stats.peak_stash_bytes;
        log.write(line);
        progress.update(rec, eta, extra);
      }
      if (!f.save.empty() && f.save_every > 0 && st.step % f.save_every == 0 && st.step != end)
        save();
    }
    if (root) progress.finish();
    if (!f.save.empty()) save();
    if (root && !f.loss_svg.empty())
      write_loss_svg(f.loss_svg, st.history,
                     fmt::format("helixpipe train ({} x {} ranks, {}): {} layers, h {}, S {}, {} "
                                 "tokens/step",
                                 dp, sch.num_stages, sch.name, cfg.layers, cfg.hidden, S,
                                 global.tokens()));
    if (!trace.empty() || !timeline.empty()) {
      // Stage 0 of replica 0 collects every stage's events and writes the files.
      if (grid.d == 0) {
        gather_timeline(*grid.pipeline, tl);
        if (grid.p == 0) {
          if (!trace.empty()) write_file_atomic(trace, render_chrome_trace(tl));
          if (!timeline.empty()) write_file_atomic(timeline, render_svg(tl));
        }
      }
    }
    if (root) {
      const double tokens_run = static_cast<double>((end - first_step) * global.tokens());
      fmt::print("done: {} steps, {} tok/s; loss {:.4f} -> {:.4f}{}\n", end - first_step,
                 format_count(tokens_run / compute_seconds), st.history[st.history.size() - static_cast<size_t>(end - first_step)].loss,
                 st.history.back().loss, f.save.empty() ? "" : "; saved " + f.save);
    }
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
  int stages = 1, folds = 1, virt = 1, dp = 1;
  app.add_option("--schedule", sched_name, "gpipe, 1f1b, interleaved, zb1p or helix");
  app.add_option("--schedule-file", sched_file, "run this hand-written schedule (validated first)");
  app.add_option("--stages", stages, "pipeline stages P")->check(CLI::PositiveNumber);
  app.add_option("--folds", folds, "HelixPipe folds F")->check(CLI::PositiveNumber);
  app.add_option("--virtual", virt, "virtual stages (interleaved)")->check(CLI::PositiveNumber);
  app.add_option("--data-parallel", dp, "data-parallel replicas D")->check(CLI::PositiveNumber);
  app.add_option("--transfer", transfer, "weights or activations (helix)");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto world = MpiComm::init_world(&argc, &argv, CommOptions{});
  try {
    check_grad_flags(f);
    const CheckpointInfo info = open_checkpoint(f.checkpoint);
    const ModelConfig cfg = checkpoint_model_config(info);
    if (f.microbatches % dp != 0)
      throw Error(fmt::format("--microbatches {} must be a multiple of --data-parallel {}",
                              f.microbatches, dp));
    const int M = static_cast<int>(f.microbatches / dp);
    const int64_t B = f.microbatch_size, S = f.seq_len;
    Schedule sch;
    if (!sched_file.empty()) {
      sch = load_checked_schedule(sched_file, cfg, B * S);
    } else {
      ScheduleSpec spec{sched_name, stages, M, static_cast<int>(cfg.layers), folds, virt,
                        parse_recompute(f.recompute), parse_transfer(transfer)};
      if (!app.get_option("--recompute")->count()) spec.recompute.reset();
      sch = generate(spec);
      ValidationReport rep = validate(sch, ValidateOptions{&cfg, B * S});
      if (!rep.ok()) throw Error("the generated schedule is invalid: " + rep.text(sch));
      lower(sch, &cfg, B * S);
    }
    GridComms grid = split_grid(*world, dp, sch.num_stages);
    auto be = make_cpu_backend(f.threads);
    ModelOptions mo;
    mo.mlp_chunk = f.mlp_chunk;
    DistStage stage(sch, grid, cfg, *be, B, S, mo);
    load_checkpoint_params(info, stage.params());
    const TokenSource source = TokenSource::open(f.data);
    const SequenceReader reader(source, S, cfg.vocab);
    StepShape shape;
    shape.seq_len = S;
    shape.microbatch_size = B;
    shape.microbatches = f.microbatches;
    std::vector<int32_t> tokens, targets;
    read_step_batch(reader, 0, shape, /*wrap=*/false, tokens, targets);
    const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
    DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
    Params full(cfg, grid.d == 0 && grid.p == 0 ? Params::all_parts(cfg) : std::vector<Part>{},
                *be);
    if (grid.d == 0) stage.gather_grads(grid.p == 0 ? &full : nullptr);
    if (world->rank() == 0) {
      std::vector<float> host;
      const auto grads = params_write_tensors(full, host, /*grads=*/true);
      write_safetensors(f.out, grads,
                        {{"format", "pt"},
                         {"helixpipe", "gradients of the mean loss"},
                         {"loss", fmt::format("{:.9g}", r.loss)}});
      fmt::print("wrote {}: gradients of {} tensors over {} sequences of {} tokens ({} x {} ranks, "
                 "schedule {})\n",
                 f.out, grads.size(), shape.sequences(), S, dp, sch.num_stages, sch.name);
      fmt::print("{}\n", nlohmann::json{{"loss", r.loss}}.dump());
    }
    world->barrier();
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return 0;
}

}  // namespace hp::cli
