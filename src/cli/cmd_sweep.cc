// helixpipe sweep: the paper's trends on paper. For each sequence length and GPU count, the best
// TP x PP x DP layout (and recomputation, folds) that fits in memory for HelixPipe and each baseline
// (sim/plan.h sweep_families), with throughput, MFU and memory per GPU, and HelixPipe's gain over
// the best baseline.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "sim/plan.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

int cmd_sweep(int argc, char** argv) {
  CLI::App app{"Sweep sequence length and GPU count: for HelixPipe, 1F1B, ZB1P, AdaPipe and WeiPipe,\n"
               "the fastest TP x PP x DP layout (with recomputation, folds, MLP chunking) that fits in\n"
               "memory, its throughput, MFU and memory per GPU, and HelixPipe's gain over the best baseline.",
               "helixpipe sweep"};
  app.footer(
      "Model of TP (with sequence parallelism) and DP: src/sim/parallel.h and docs/simulator.md.\n"
      "Every layout has PP >= 2 and micro-batches per pipeline = global batch / DP.\n\n"
      "examples:\n"
      "  helixpipe sweep --model=7b --device=h20\n"
      "  helixpipe sweep --model=7b --device=a800 --seq-lens=16k,32k --gpus=64 --format=json");
  std::string model = "7b", device = "h20", format = "text", out;
  std::vector<int64_t> seqs = {16384, 32768, 65536, 131072, 262144}, gpus = {8, 16, 32, 64};
  int global_batch = 32, want_tp = 0, want_pp = 0;
  double memory_gib = 0;
  app.add_option("--model", model, "model preset or JSON file (default 7b)");
  app.add_option("--device", device, "device profile (default h20)");
  app.add_option("--seq-lens", seqs, "sequence lengths, comma-separated (k = 1024; default 16k..256k)")
      ->delimiter(',')
      ->transform(k_suffix())
      ->check(positive());
  app.add_option("--gpus", gpus, "GPU counts, comma-separated (default 8,16,32,64)")
      ->delimiter(',')
      ->check(positive());
  app.add_option("--global-batch", global_batch, "sequences per iteration (default 32)")
      ->check(positive());
  app.add_option("--memory", memory_gib, "usable GiB per GPU (default: the device's memory)")
      ->check(positive());
  app.add_option("--tp", want_tp, "only layouts with this TP degree (default: any)")
      ->check(positive());
  app.add_option("--pp", want_pp, "only layouts with this PP degree (default: any >= 2)")
      ->check(positive());
  add_format_flag(app, format);
  app.add_option("--out", out, "also write the JSON result to this file");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;

  const ModelConfig cfg = ModelConfig::load(model);
  const DeviceProfile dev = device_profile(device);
  const double memory = usable_memory(dev, memory_gib);

  nlohmann::json rows = nlohmann::json::array();
  const std::vector<std::string>& fams = sweep_families();
  if (format == "text") {
    fmt::print("model {} on {} ({:.0f} GiB per GPU), global batch {} sequences\n\n", cfg.name,
               dev.name, memory / (1ull << 30), global_batch);
    fmt::print("{:>7} {:>5} | {:<34} {:>9} {:>6} {:>8}", "seq", "GPUs", "helix: layout, config",
               "tok/s", "MFU", "mem/GPU");
    for (size_t f = 1; f < fams.size(); ++f) fmt::print(" | {:<30} {:>9} {:>8}", fams[f], "tok/s", "mem/GPU");
    fmt::print(" | {:>7}\n", "gain");
  }
  auto brief = [](const PlanResult& r) {
    return r.fits ? fmt::format("{} {} m={}", r.c.layout.str(), r.c.label().substr(r.c.schedule.size() + 1),
                                r.c.microbatches)
                  : std::string("does not fit");
  };
  auto tok = [](const PlanResult& r) { return r.fits ? fmt::format("{:.0f}", r.tokens_per_s) : "-"; };
  auto mem = [](const PlanResult& r) { return r.fits ? human_bytes(r.memory.total()) : "-"; };
  for (int64_t s : seqs) {
    for (int64_t n : gpus) {
      const SweepRow row =
          sweep_row(cfg, s, static_cast<int>(n), dev, memory, global_batch, want_tp, want_pp);
      rows.push_back(row.json());
      if (format != "text") continue;
      const PlanResult& h = row.best.front();
      fmt::print("{:>7} {:>5} | {:<34} {:>9} {:>5.1f}% {:>8}", s, n, brief(h), tok(h), 100 * h.mfu, mem(h));
      for (size_t f = 1; f < fams.size(); ++f)
        fmt::print(" | {:<30} {:>9} {:>8}", brief(row.best[f]), tok(row.best[f]), mem(row.best[f]));
      fmt::print(" | {:>7}\n", row.has_gain ? fmt::format("{:+.1f}%", 100 * row.helix_gain) : "-");
      std::fflush(stdout);
    }
  }
  nlohmann::json result = {{"version", 1}, {"model", cfg.name}, {"device", dev.name},
                           {"memory_bytes", memory}, {"global_batch", global_batch}, {"rows", rows}};
  if (!out.empty()) write_file_atomic(out, result.dump(2) + "\n");
  if (format == "json") fmt::print("{}\n", result.dump(2));
  return 0;
}

}  // namespace hp::cli
