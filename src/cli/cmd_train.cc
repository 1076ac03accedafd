// helixpipe train (single process): builds the run from the flags (cli/train_cli.h), steps the
// Trainer (runtime/trainer.h), prints a live progress line, appends JSONL metrics, saves
// checkpoints, and ends with a summary. The pipelined run under mpirun is cli/train_dist.*.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/train_dist.h"
#include "comm/mpi_comm.h"
#include "cli/train_cli.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"
#include "util/error.h"

namespace hp::cli {

int cmd_train(int argc, char** argv) {
  // Under mpirun the ranks run the pipelined (D x P) path; cli/train_dist.h.
  if (MpiComm::launched_by_mpirun()) return train_dist_main(argc, argv);
  CLI::App app("Train a model in one process: AdamW, warmup + cosine LR, gradient accumulation "
               "over micro-batches, global-norm clipping, resumable checkpoints.",
               "train");
  TrainFlags f;
  add_train_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  TrainPlan plan = resolve_train_flags(f, app);
  if (!plan.notes.empty()) std::fputs(plan.notes.c_str(), stderr);

  const ModelConfig& cfg = plan.cfg;
  const TokenSource source = TokenSource::open(f.data);
  const SequenceReader reader(source, plan.shape.seq_len, cfg.vocab);
  auto be = make_cpu_backend(f.threads);
  Params params(cfg, Params::all_parts(cfg), *be);
  if (plan.source) {
    load_checkpoint_params(*plan.source, params);
  } else {
    params.init(plan.state.seed);
  }
  Trainer trainer(cfg, params, plan.model_options, plan.shape, plan.state);
  if (plan.resumed) trainer.load_optimizer(*plan.source->optimizer_path);
  MetricsLog log;
  if (!f.log.empty()) log.open(f.log, plan.resumed);

  const TrainState& st = trainer.state();
  const int64_t total = st.lr.total;
  const int64_t end = f.stop_after > 0 ? std::min(f.stop_after, total) : total;
  const int64_t first_step = st.step;
  const double step_flops = train_step_flops(cfg, plan.shape);
  const MfuPeak peak = resolve_mfu_peak(f);
  fmt::print("train: {} ({} layers, hidden {}, heads {}/{} kv, vocab {}, {} parameters)\n",
             plan.source ? plan.source->dir : f.model, cfg.layers, cfg.hidden, cfg.heads,
             cfg.kv_heads, cfg.vocab, format_count(static_cast<double>(cfg.params_total())));
  fmt::print("data: {} ({} tokens, {} sequences of {}); step = {} micro-batches x {} sequences = "
             "{} tokens\n",
             f.data, source.size(), reader.sequences(), plan.shape.seq_len, plan.shape.microbatches,
             plan.shape.microbatch_size, plan.shape.tokens());
  fmt::print("{} at step {}, to step {} of {}; lr {:.3g} (warmup {}, min {:.3g}), weight decay {}, "
             "clip {}; MFU against {}\n",
             plan.resumed ? "resuming" : "starting", first_step, end, total, st.lr.peak,
             st.lr.warmup, st.lr.peak * st.lr.min_ratio, st.adamw.weight_decay, st.clip, peak.what);
  std::fflush(stdout);

  ProgressLine progress(stdout, ::isatty(::fileno(stdout)) != 0, total,
                        std::max<int64_t>(1, (end - first_step) / 20));
  const auto t0 = std::chrono::steady_clock::now();
  double compute_seconds = 0;
  while (trainer.state().step < end) {
    const StepRecord r = trainer.step(reader);
    compute_seconds += r.seconds;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t done = r.step - first_step;
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(end - r.step);
    const double gflops = r.seconds > 0 ? step_flops / r.seconds / 1e9 : 0;
    std::string extra = fmt::format("{:.1f} GFLOP/s", gflops);
    extra += fmt::format("  MFU {:.1f}%", 100.0 * gflops / peak.gflops);
    nlohmann::json line = r.to_json();
    line["tokens_seen"] = trainer.state().tokens_seen;
    line["gflops"] = gflops;
    log.write(line);
    progress.update(r, eta, extra);
    if (f.save_every > 0 && r.step % f.save_every == 0 && r.step != end) trainer.save(f.save);
  }
  progress.finish();
  if (!f.save.empty()) trainer.save(f.save);
  const auto& hist = trainer.state().history;
  if (!f.loss_svg.empty()) {
    write_loss_svg(f.loss_svg, hist,
                   fmt::format("helixpipe train: {} layers, h {}, S {}, {} tokens/step", cfg.layers,
                               cfg.hidden, plan.shape.seq_len, plan.shape.tokens()));
  }
  // Summary: the loss at the start of this process and the mean of the last (up to) 10 steps.
  const int64_t ran = end - first_step;
  const size_t n_tail = std::min<size_t>(10, hist.size());
  double tail = 0;
  for (size_t i = hist.size() - n_tail; i < hist.size(); ++i) tail += hist[i].loss;
  tail /= static_cast<double>(std::max<size_t>(1, n_tail));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = static_cast<double>(ran * plan.shape.tokens());
  fmt::print("done: {} steps in {}, {} tok/s, {:.1f} GFLOP/s; loss {:.4f} (step {}) -> {:.4f} (mean "
             "of last {}){}{}\n",
             ran, format_duration(wall), format_count(tokens / compute_seconds),
             step_flops * static_cast<double>(ran) / compute_seconds / 1e9,
             hist[hist.size() - static_cast<size_t>(ran)].loss, first_step + 1, tail, n_tail,
             f.save.empty() ? "" : "; saved " + f.save, f.log.empty() ? "" : "; log " + f.log);
  return 0;
}

}  // namespace hp::cli
