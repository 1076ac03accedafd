#include "runtime/train_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "kernels/kernels.h"
#include "runtime/dist_step.h"
#include "runtime/dist_trainer.h"
#include "runtime/memory_check.h"
#include "runtime/model_io.h"
#include "runtime/progress.h"
#include "runtime/timeline_gather.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "schedule/validate.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

MemoryShape memory_shape(const StepShape& shape, int64_t mlp_chunk, const Precision& prec,
                         bool optimizer) {
  MemoryShape m;
  m.tokens_per_mb = shape.microbatch_size * shape.seq_len;
  m.mlp_chunk = mlp_chunk;
  m.precision = prec;
  m.optimizer = optimizer;
  return m;
}

// Refuses a grid whose ranks on this machine would together need more memory than it has.
void check_grid_memory(const Comm& world, const ModelConfig& cfg, const Schedule& sch,
                       const DistLaunchRequest& d, MemoryShape shape, const char* what) {
  shape.tp = d.tp;
  const int here = ranks_on_this_machine(world.size());
  check_memory_fits(grid_memory_here(cfg, sch, d.dp, world.size(), shape),
                    fmt::format("this {} run's {} rank{} on this machine", what, here,
                                here == 1 ? "" : "s"),
                    available_memory());
}

}  // namespace

void run_training(TrainEngine& engine, const TrainRequest& f, const TrainPlan& plan,
                  const TokenSource& source, const SequenceReader& reader, const StepShape& global,
                  const std::string& compute, const TrainLaunch& launch) {
  const ModelConfig& cfg = plan.cfg;
  // Every output path is checked before the first step, so no run's results are lost at its end.
  std::vector<std::pair<std::string, std::string>> outputs = launch.outputs;
  if (!f.log.empty()) outputs.insert(outputs.begin(), {"--log", f.log});
  if (!f.loss_svg.empty()) outputs.push_back({"--loss-svg", f.loss_svg});
  if (launch.root) {
    if (!f.save.empty()) check_checkpoint_destination(f.save);
    for (const auto& [flag, path] : outputs) check_output_file(flag, path);
  }
  const TrainState& st = engine.state();
  const int64_t total = st.lr.total;
  const int64_t end = last_step(f, st);
  const int64_t first_step = st.step;
  const double step_flops = train_step_flops(cfg, global);
  // MFU against the peak of every rank together (per-rank peak x ranks).
  const MfuPeak peak = resolve_mfu_peak(f, plan.state.precision);
  const double peak_gflops = peak.gflops * launch.ranks;
  if (launch.root) {
    fmt::print("train: {} ({} layers, hidden {}, heads {}/{} kv, vocab {}, {} parameters)\n",
               plan.source ? plan.source->dir : f.model, cfg.layers, cfg.hidden, cfg.heads,
               cfg.kv_heads, cfg.vocab, format_count(static_cast<double>(cfg.params_total())));
    fmt::print("data: {} ({}; {} tokens, {} sequences of {}); step = {} micro-batches x {} "
               "sequences = {} tokens\n",
               f.data, source.describe(), source.size(), reader.sequences(), global.seq_len,
               global.microbatches,
               global.microbatch_size, global.tokens());
    if (!launch.header.empty()) fmt::print("{}\n", launch.header);
    fmt::print("{} at step {}, to step {} of {}; lr {:.3g} (warmup {}, min {:.3g}), weight decay "
               "{}, clip {}; {}; MFU against {}{}\n",
               plan.resumed ? "resuming" : "starting", first_step, end, total, st.lr.peak,
               st.lr.warmup, st.lr.peak * st.lr.min_ratio, st.adamw.weight_decay, st.clip,
               compute, peak.what,
               launch.ranks > 1 ? fmt::format(" per rank x {} ranks", launch.ranks) : "");
  }
  std::fflush(stdout);

  MetricsLog log;
  if (launch.root && !f.log.empty()) log.open(f.log, plan.resumed);
  const LogInterval every =
      plan.log_interval.value_or(LogInterval{std::max<int64_t>(1, (end - first_step) / 20), 0});
  ProgressLine progress(stdout,
                        launch.root && progress_in_place(plan.progress, launch.ranks == 1), total,
                        every);
  const Timer wall;
  double compute_seconds = 0;
  auto on_step = [&](const StepRecord& r) {
    compute_seconds += r.seconds;
    const double gflops = r.seconds > 0 ? step_flops / r.seconds / 1e9 : 0;
    nlohmann::json line = r.to_json();
    line["tokens_seen"] = engine.state().tokens_seen;
    line["gflops"] = gflops;
    std::string extra = fmt::format("{:.1f} GFLOP/s", gflops);
    if (launch.after_step) launch.after_step(r, line, extra);
    extra += fmt::format("  MFU {:.1f}%", 100.0 * gflops / peak_gflops);
    if (!launch.root) return;
    log.write(line);
    const double eta = wall.seconds() / static_cast<double>(r.step - first_step) *
                       static_cast<double>(end - r.step);
    progress.update(r, eta, extra);
  };
  run_train_loop(engine, reader, TrainLoopOptions{end, f.save, f.save_every, plan.save_dtype},
                 on_step, launch.before_step);
  if (launch.root) progress.finish();
  const auto& hist = engine.state().history;
  if (launch.root && !f.loss_svg.empty()) {
    write_loss_svg(f.loss_svg, hist,
                   fmt::format("helixpipe train{}: {} layers, h {}, S {}, {} tokens/step",
                               launch.ranks > 1 ? fmt::format(" ({} ranks)", launch.ranks) : "",
                               cfg.layers, cfg.hidden, global.seq_len, global.tokens()));
  }
  if (launch.after_loop) launch.after_loop();
  if (!launch.root) return;
  // Summary: the loss at the start of this process and the mean of the last (up to) 10 steps.
  const int64_t ran = end - first_step;
  const size_t n_tail = std::min<size_t>(10, hist.size());
  double tail = 0;
  for (size_t i = hist.size() - n_tail; i < hist.size(); ++i) tail += hist[i].loss;
  tail /= static_cast<double>(std::max<size_t>(1, n_tail));
  const double tokens = static_cast<double>(ran * global.tokens());
  std::string wrote;
  if (!f.save.empty())
    wrote += " " + f.save + (plan.save_dtype == StDType::kBF16 ? " (bf16 checkpoint, not resumable)"
                                                               : " (checkpoint)");
  for (const auto& [flag, path] : outputs) wrote += " " + path + " (" + flag.substr(2) + ")";
  fmt::print("done: {} steps in {}, {} tok/s, {:.1f} GFLOP/s; loss {:.4f} (step {}) -> {:.4f} (mean "
             "of last {}){}\n",
             ran, format_duration(wall.seconds()), format_count(tokens / compute_seconds),
             step_flops * static_cast<double>(ran) / compute_seconds / 1e9,
             hist[hist.size() - static_cast<size_t>(ran)].loss, first_step + 1, tail, n_tail,
             wrote.empty() ? "" : "; wrote" + wrote);
}


void run_local_training(const TrainRequest& f) {
  TrainPlan plan = resolve_train_request(f);
  auto be = make_cpu_backend(f.threads);
  const Precision prec = apply_precision(plan, *be);
  if (!plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);

  const ModelConfig& cfg = plan.cfg;
  check_memory_fits(estimate_single_process_memory(
                        cfg, plan.shape.recompute,
                        memory_shape(plan.shape, plan.model_options.mlp_chunk, prec, true)),
                    "this training run", available_memory());
  const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
  const SequenceReader reader(source, plan.shape.seq_len, cfg.vocab);
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  if (plan.source) {
    load_checkpoint_params(*plan.source, params);
  } else {
    params.init(plan.state.seed);
  }
  Trainer trainer(cfg, params, plan.model_options, plan.shape, plan.state);
  if (plan.resumed) trainer.load_optimizer(*plan.source->optimizer_path);
  run_training(trainer, f, plan, source, reader, plan.shape,
               fmt::format("{} on {}", prec.name(), be->name()), TrainLaunch{});
}

void run_local_grad(const GradRequest& f) {
  check_grad_request(f);
  check_output_file("--out", f.out);
  const CheckpointInfo info = open_checkpoint(f.checkpoint);
  const ModelConfig cfg = checkpoint_model_config(info);
  HP_CHECK(f.seq_len <= cfg.max_positions, "--seq-len {} exceeds the model's max_position_embeddings {}",
           f.seq_len, cfg.max_positions);
  auto be = make_cpu_backend(f.threads);
  const Precision prec = resolve_precision(f.precision, *be);
  StepShape shape;
  shape.seq_len = f.seq_len;
  shape.microbatch_size = f.microbatch_size;
  shape.microbatches = f.microbatches;
  shape.recompute = parse_recompute(f.recompute);
  check_memory_fits(estimate_single_process_memory(
                        cfg, shape.recompute, memory_shape(shape, f.mlp_chunk, prec, false)),
                    "this gradient run", available_memory());
  Params params(cfg, Params::all_parts(cfg), *be, prec);
  load_checkpoint_params(info, params);
  const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
  const SequenceReader reader(source, f.seq_len, cfg.vocab);
  std::vector<int32_t> tokens, targets;
  read_step_batch(reader, 0, shape, /*wrap=*/false, tokens, targets);

  ModelOptions mo;
  mo.mlp_chunk = f.mlp_chunk;
  Model model(params, mo);
  TokenBuffer tok, tgt;
  tok.upload(*be, tokens, cfg.vocab, "token");
  tgt.upload(*be, targets, cfg.vocab, "target");
  params.zero_grad();
  StepOptions so;
  so.recompute = shape.recompute;
  const double loss = loss_and_grads(model, tok.data(), tgt.data(), shape.microbatch_size,
                                     shape.seq_len, static_cast<int>(shape.microbatches), so);
  std::vector<float> host;
  const auto grads = params_write_tensors(params, host, /*grads=*/true);
  write_safetensors(f.out, grads,
                    {{"format", "pt"},
                     {"helixpipe", "gradients of the mean loss"},
                     {"loss", fmt::format("{:.9g}", loss)}});
  fmt::print("wrote {}: gradients of {} tensors over {} sequences of {} tokens ({})\n", f.out,
             grads.size(), shape.sequences(), shape.seq_len, params.precision().name());
  fmt::print("{}\n", nlohmann::json{{"loss", loss}}.dump());
}

double mean_token_loss(Params& params, const SequenceReader& reader, int64_t skip, int64_t n,
                       int64_t batch) {
  Backend& be = params.backend();
  const ModelConfig& cfg = params.config();
  const int64_t seq_len = reader.seq_len();
  Model model(params);
  std::vector<int32_t> tokens, targets;
  TokenBuffer tok, tgt;
  double sum = 0;  // sum of token losses
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t rows = std::min(batch, n - first);
    tokens.resize(rows * seq_len);
    targets.resize(rows * seq_len);
    reader.read(skip + first, rows, /*wrap=*/false, tokens.data(), targets.data());
    tok.upload(be, tokens, cfg.vocab, "token");
    tgt.upload(be, targets, cfg.vocab, "target");
    sum += eval_loss(model, tok.data(), tgt.data(), rows, seq_len) *
           static_cast<double>(rows * seq_len);
  }
  const double loss = sum / static_cast<double>(n * seq_len);
  return loss;
}

Schedule dist_schedule(const DistLaunchRequest& d, const ModelConfig& cfg, int64_t tokens_per_mb,
                       int microbatches, Recompute recompute, bool recompute_given) {
  Schedule sch;
  if (!d.schedule_file.empty()) {
    sch = load_checked_schedule(d.schedule_file, cfg, tokens_per_mb);
  } else {
    ScheduleSpec spec{d.schedule, d.stages,       microbatches,
                      static_cast<int>(cfg.layers), d.folds, d.virtual_stages,
                      recompute,  parse_transfer(d.transfer)};
    if (!recompute_given) spec.recompute.reset();
    spec.layers_from_model = true;
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

void run_dist_training(Comm& world, const TrainRequest& f, const DistLaunchRequest& d) {
  const bool root = world.rank() == 0;
  // What each rank checks and reads on its own, agreed on before the first message: a bad flag,
  // schedule or data file ends every rank with one message (comm/comm.h run_then_agree).
  TrainPlan plan;
  std::unique_ptr<Backend> be;
  Precision prec;
  Schedule sch;
  std::optional<TokenSource> source;
  std::optional<SequenceReader> reader;
  run_then_agree(world, [&] {
    plan = resolve_train_request(f);
    be = make_cpu_backend(f.threads);
    prec = apply_precision(plan, *be);
    sch = dist_schedule(d, plan.cfg, plan.shape.microbatch_size * plan.shape.seq_len,
                        static_cast<int>(plan.shape.microbatches), plan.shape.recompute,
                        f.given.count("--recompute") > 0);
    check_grid_memory(world, plan.cfg, sch, d,
                      memory_shape(plan.shape, plan.model_options.mlp_chunk, prec, true),
                      "training");
    source.emplace(open_data(f.data, f.data_format, plan.cfg.vocab));
    reader.emplace(*source, plan.shape.seq_len, plan.cfg.vocab);
  });
  if (root && !plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);
  const ModelConfig& cfg = plan.cfg;
  const StepShape& shape = plan.shape;
  const int M = static_cast<int>(shape.microbatches);
  const std::string sched_label = sch.name;
  const int P = sch.num_stages;
  // The grid's comms are made by every rank alike; the weights each rank reads are agreed on.
  std::unique_ptr<DistTrainer> trainer_ptr;
  run_then_agree(world, [&] {
    trainer_ptr = std::make_unique<DistTrainer>(world, std::move(sch), d.dp, cfg, *be, shape,
                                                plan.model_options, prec, plan.state, d.tp);
    if (plan.source) {
      trainer_ptr->load_params(*plan.source);
    } else {
      trainer_ptr->init_params();
    }
    if (plan.resumed && plan.source->optimizer_path)
      trainer_ptr->load_optimizer(*plan.source->optimizer_path);
  });
  DistTrainer& trainer = *trainer_ptr;

  // Test-only fault injection (docs/executor.md): HP_TEST_KILL_RANK=R:N[:WHEN] makes rank R
  // raise SIGKILL when step N starts (WHEN = step, the default), SIGSTOP then (WHEN = stop), or
  // SIGKILL in the middle of the save that follows step N, after its files and before its
  // completion marker (WHEN = save; rank 0 writes checkpoints, so R must be 0). Tests check that
  // the job ends naming the rank and that a checkpoint survives.
  int kill_rank = -1;
  long long kill_step = -1;
  std::string kill_when = "step";
  if (const char* k = std::getenv("HP_TEST_KILL_RANK")) {
    char when[16] = {};
    const int n = std::sscanf(k, "%d:%lld:%15s", &kill_rank, &kill_step, when);
    if (n == 3) kill_when = when;
    if (n < 2 || (kill_when != "step" && kill_when != "stop" && kill_when != "save") ||
        (kill_when == "save" && kill_rank != 0))
      throw Error(fmt::format("HP_TEST_KILL_RANK='{}' should be RANK:STEP[:step|stop|save], e.g. "
                              "1:3 or 1:3:stop or 0:4:save (only rank 0 saves)",
                              k));
  }
  if (kill_when == "save" && world.rank() == kill_rank) {
    trainer.set_before_checkpoint_marker([&] {
      if (trainer.state().step == kill_step) std::raise(SIGKILL);
    });
  }
  const int64_t end = last_step(f, trainer.state());
  // The last step is recorded when --trace or --timeline asks for it.
  Timeline tl;
  auto before = [&](int64_t next) {
    if (world.rank() == kill_rank && next == kill_step && kill_when != "save")
      std::raise(kill_when == "stop" ? SIGSTOP : SIGKILL);
    if (next == end && (!d.trace.empty() || !d.timeline.empty())) {
      tl = Timeline{P, "helixpipe train (measured)", {}};
      trainer.record_timeline(&tl);
    }
  };
  TrainLaunch launch;
  launch.before_step = before;
  if (!d.trace.empty()) launch.outputs.push_back({"--trace", d.trace});
  if (!d.timeline.empty()) launch.outputs.push_back({"--timeline", d.timeline});
  launch.ranks = world.size();
  launch.root = root;
  launch.header = fmt::format("train (distributed): {} = {} x {} x {} ranks (data x pipeline x "
                              "tensor), schedule {}, {} micro-batches per replica",
                              world.size(), d.dp, P, d.tp, sched_label, M);
  launch.after_step = [&](const StepRecord& r, nlohmann::json& line, std::string& extra) {
    const double bubble = 100.0 * trainer.last_bubble_fraction();
    extra += fmt::format("  bubble {:.1f}%", bubble);
    line["bubble_pct"] = bubble;
    line["peak_stash_bytes_rank0"] = trainer.last_peak_stash_bytes();
    if (d.tp > 1) {  // rank 0's share: its group's collectives, waiting included
      const TpGroup::Stats& t = trainer.last_tp_stats();
      extra += fmt::format("  tp comm {:.3f}s", t.seconds);
      line["tp_comm_s_rank0"] = t.seconds;
      line["tp_bytes_sent_rank0"] = t.bytes_sent;
    }
  };
  launch.after_loop = [&] {
    if (d.trace.empty() && d.timeline.empty()) return;
    // Stage 0 of replica 0 collects every stage's events and writes the files.
    GridComms& grid = trainer.grid();
    if (grid.d != 0 || grid.t != 0) return;  // one tensor rank's view of each stage
    gather_timeline(*grid.pipeline, tl);
    if (grid.p != 0) return;
    if (!d.trace.empty()) write_file_atomic(d.trace, render_chrome_trace(tl));
    if (!d.timeline.empty()) write_file_atomic(d.timeline, render_svg(tl));
  };
  run_training(trainer, f, plan, *source, *reader, trainer.global_shape(),
               fmt::format("{} on {} per rank", prec.name(), be->name()), launch);
  world.barrier();
}

void run_dist_grad(Comm& world, const GradRequest& f, const DistLaunchRequest& d,
                   bool recompute_given) {
  const int64_t B = f.microbatch_size, S = f.seq_len;
  // Checked and read by each rank on its own, agreed on before the first message.
  std::optional<CheckpointInfo> info;
  ModelConfig cfg;
  int M = 0;
  Schedule sch;
  std::unique_ptr<Backend> be;
  Precision prec;
  std::vector<int32_t> tokens, targets;
  StepShape shape;
  run_then_agree(world, [&] {
    check_grad_request(f);
    if (world.rank() == 0) check_output_file("--out", f.out);
    info.emplace(open_checkpoint(f.checkpoint));
    cfg = checkpoint_model_config(*info);
    if (f.microbatches % d.dp != 0)
      throw Error(fmt::format("--microbatches {} must be a multiple of --data-parallel {}",
                              f.microbatches, d.dp));
    M = static_cast<int>(f.microbatches / d.dp);
    sch = dist_schedule(d, cfg, B * S, M, parse_recompute(f.recompute), recompute_given);
    be = make_cpu_backend(f.threads);
    prec = resolve_precision(f.precision, *be);
    const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
    const SequenceReader reader(source, S, cfg.vocab);
    shape.seq_len = S;
    shape.microbatch_size = B;
    shape.microbatches = f.microbatches;
    shape.recompute = sch.recompute;
    check_grid_memory(world, cfg, sch, d, memory_shape(shape, f.mlp_chunk, prec, false),
                      "gradient");
    read_step_batch(reader, 0, shape, /*wrap=*/false, tokens, targets);
  });
  // The grid's comms are made by every rank alike; the weights each rank reads are agreed on.
  std::optional<GridComms> grid_holder;
  std::unique_ptr<DistStage> stage_ptr;
  ModelOptions mo;
  mo.mlp_chunk = f.mlp_chunk;
  run_then_agree(world, [&] {
    grid_holder.emplace(split_grid(world, d.dp, sch.num_stages, d.tp));
    stage_ptr = std::make_unique<DistStage>(sch, *grid_holder, cfg, *be, B, S, mo, prec);
    load_checkpoint_params(*info, stage_ptr->params());
  });
  GridComms& grid = *grid_holder;
  DistStage& stage = *stage_ptr;
  const int64_t off = static_cast<int64_t>(grid.d) * M * B * S;
  DistStepResult r = stage.loss_and_grads(tokens.data() + off, targets.data() + off);
  const bool writer = grid.d == 0 && grid.p == 0 && grid.t == 0;  // world rank 0
  Params full(cfg, writer ? Params::all_parts(cfg) : std::vector<Part>{}, *be);
  if (grid.d == 0) stage.gather_grads(writer ? &full : nullptr);
  if (world.rank() == 0) {
    std::vector<float> host;
    const auto grads = params_write_tensors(full, host, /*grads=*/true);
    write_safetensors(f.out, grads,
                      {{"format", "pt"},
                       {"helixpipe", "gradients of the mean loss"},
                       {"loss", fmt::format("{:.9g}", r.loss)}});
    fmt::print("wrote {}: gradients of {} tensors over {} sequences of {} tokens ({} x {} x {} "
               "ranks, schedule {}, {})\n",
               f.out, grads.size(), shape.sequences(), S, d.dp, sch.num_stages, d.tp, sch.name,
               stage.params().precision().name());
    fmt::print("{}\n", nlohmann::json{{"loss", r.loss}}.dump());
  }
  world.barrier();
}

}  // namespace hp
