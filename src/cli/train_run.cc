// The training loop's output, shared by `train` in one process (cli/cmd_train.cc) and under mpirun
// (cli/train_dist.cc): header, progress line, JSONL metrics, loss curve and summary.
#include <fmt/format.h>
#include <algorithm>
#include <cstdio>

#include "cli/train_cli.h"
#include "checkpoint/checkpoint.h"
#include "runtime/progress.h"
#include "util/atomic_file.h"
#include "util/timer.h"

namespace hp::cli {

void run_training(TrainEngine& engine, const TrainFlags& f, const TrainPlan& plan,
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
  const MfuPeak peak = resolve_mfu_peak(f);
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
  run_train_loop(engine, reader, TrainLoopOptions{end, f.save, f.save_every}, on_step,
                 launch.before_step);
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
  if (!f.save.empty()) wrote += " " + f.save + " (checkpoint)";
  for (const auto& [flag, path] : outputs) wrote += " " + path + " (" + flag.substr(2) + ")";
  fmt::print("done: {} steps in {}, {} tok/s, {:.1f} GFLOP/s; loss {:.4f} (step {}) -> {:.4f} (mean "
             "of last {}){}\n",
             ran, format_duration(wall.seconds()), format_count(tokens / compute_seconds),
             step_flops * static_cast<double>(ran) / compute_seconds / 1e9,
             hist[hist.size() - static_cast<size_t>(ran)].loss, first_step + 1, tail, n_tail,
             wrote.empty() ? "" : "; wrote" + wrote);
}

}  // namespace hp::cli
