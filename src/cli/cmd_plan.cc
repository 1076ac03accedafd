// helixpipe plan: rank every configuration (schedule, TP x PP x DP layout, micro-batches, folds,
// transfer mode, recomputation, MLP chunking) that fits in memory by predicted throughput and MFU,
// and say why the winner wins.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "sim/plan.h"
#include "util/error.h"

namespace hp::cli {

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Rank the training configurations that fit in GPU memory by predicted throughput and\n"
               "MFU: schedule, TP x PP x DP, micro-batches, folds, transfer mode, recomputation and\n"
               "MLP chunking; then say why the winner wins.",
               "helixpipe plan"};
  app.footer(
      "Without --global-batch, micro-batches per pipeline m in {p, 2p, 4p} are tried (4 without\n"
      "a pipeline); with it, m = global batch / DP. Costs and memory: docs/simulator.md.\n\n"
      "examples:\n"
      "  helixpipe plan --model=7b --seq-len=131072 --gpus=64 --device=h20 --memory=96\n"
      "  helixpipe plan --model=3b --seq-len=32768 --gpus=16 --device=a800 --memory=80 --top=5");
  std::string model, device, format = "text";
  int64_t seq = 0;
  int gpus = 0, top = 10, global_batch = 0;
  double memory_gib = 0;
  app.add_option("--model", model, "model preset or JSON file")->required();
  app.add_option("--seq-len", seq, "sequence length in tokens")->required()->check(positive());
  app.add_option("--gpus", gpus, "GPUs in all")->required()->check(positive());
  app.add_option("--device", device,
                 "device profile: h20, a800, a800-2nic, h100, h200, cpu, or a JSON file")
      ->required();
  app.add_option("--memory", memory_gib, "usable GiB per GPU (default: the device's memory)")
      ->check(positive());
  app.add_option("--global-batch", global_batch, "sequences per iteration (fixes m = batch / DP)")
      ->check(positive());
  app.add_option("--top", top, "how many configurations to list (default 10)")->check(positive());
  add_format_flag(app, format);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;

  const ModelConfig cfg = ModelConfig::load(model);
  const DeviceProfile dev = device_profile(device);
  const double memory = usable_memory(dev, memory_gib);
  const PlanSearch found = search_plans(cfg, seq, dev, memory, gpus, global_batch);
  const std::vector<PlanResult>& fit = found.fit;
  const size_t tried = found.tried, too_big = found.too_big;
  const nlohmann::json ranked = plan_ranked_json(fit, top);
  const PlanVerdict verdict = plan_verdict(fit, cfg, seq, dev);
  const std::string& reason = verdict.reason;
  if (format == "json") {
    fmt::print("{}\n", nlohmann::json{{"version", 1}, {"model", cfg.name}, {"device", dev.name},
                                      {"seq_len", seq}, {"gpus", gpus}, {"memory_bytes", memory},
                                      {"tried", tried}, {"fit", fit.size()}, {"ranked", ranked},
                                      {"why", reason}, {"overlap", verdict.overlap}}
                           .dump(2));
    return 0;
  }
  fmt::print("model {} s={} on {} x {} ({:.0f} GiB each): {} configurations tried, {} fit, {} too big\n\n",
             cfg.name, seq, gpus, dev.name, memory / (1ull << 30), tried, fit.size(), too_big);
  if (fit.empty()) {
    fmt::print("nothing fits: try more GPUs, a larger --memory, or a shorter --seq-len\n");
    return 1;
  }
  fmt::print("{:>4} {:<18} {:<36} {:>4} {:>11} {:>6} {:>9} {:>7} {:>7} {:>10}\n", "rank", "layout",
             "schedule", "m", "tokens/s", "MFU", "iter", "bubble", "comm", "mem/GPU");
  for (size_t i = 0; i < fit.size() && static_cast<int>(i) < top; ++i) {
    const PlanResult& r = fit[i];
    fmt::print("{:>4} {:<18} {:<36} {:>4} {:>11.0f} {:>5.1f}% {:>9} {:>6.1f}% {:>6.1f}% {:>10}\n", i + 1,
               r.c.layout.str(), r.c.label(), r.c.microbatches, r.tokens_per_s, 100 * r.mfu,
               human_seconds(r.iteration), 100 * r.bubble_fraction, 100 * r.comm_exposed,
               human_bytes(r.memory.total()));
  }
  fmt::print("\nwinner: {} {} m={}\n  {}\n", fit.front().c.layout.str(), fit.front().c.label(),
             fit.front().c.microbatches, reason);
  fmt::print("\noverlap per layer and micro-batch (forward, one GPU; HelixPipe needs attention >= "
             "transfer):\n");
  for (const std::string& line : verdict.overlap_lines) fmt::print("  {}\n", line);
  return 0;
}

}  // namespace hp::cli
