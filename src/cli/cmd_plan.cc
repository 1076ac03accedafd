// helixpipe plan: rank every configuration (schedule, TP x PP x DP layout, micro-batches, folds,
// transfer mode, recomputation, MLP chunking) that fits in memory by predicted throughput and MFU,
// and say why the winner wins.
#include <fmt/format.h>

#include <algorithm>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "sim/parallel.h"
#include "util/error.h"

namespace hp::cli {

namespace {

std::vector<PlanCase> candidates(const Layout& lay, const std::vector<int>& ms) {
  std::vector<PlanCase> out;
  for (int m : ms) {
    PlanCase c;
    c.layout = lay;
    c.microbatches = m;
    for (const char* name : {"gpipe", "1f1b", "zb1p"}) {
      c.schedule = name;
      for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
        c.recompute = r;
        out.push_back(c);
      }
    }
    c.schedule = "interleaved";
    c.virtual_stages = 2;
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      c.recompute = r;
      out.push_back(c);
    }
    c.virtual_stages = 1;
    c.schedule = "helix";
    for (int F : {1, 2})
      for (TransferMode tm : {TransferMode::kWeights, TransferMode::kActivations})
        for (Recompute r : {Recompute::kNoAttn, Recompute::kNone, Recompute::kFull}) {
          c.folds = F;
          c.transfer = tm;
          c.recompute = r;
          out.push_back(c);
        }
  }
  return out;
}

std::string why(const PlanResult& w, const PlanResult& r) {
  std::string s = fmt::format(
      "{:.1f}% faster than the best {} ({} {}, m={}): bubble {:.1f}% vs {:.1f}% of the iteration, "
      "exposed communication {:.1f}% vs {:.1f}%, DP all-reduce {:.1f}% vs {:.1f}%, memory {} vs {} "
      "per GPU",
      100 * (w.tokens_per_s / r.tokens_per_s - 1), r.c.schedule, r.c.layout.str(), r.c.label(),
      r.c.microbatches, 100 * w.bubble_fraction, 100 * r.bubble_fraction, 100 * w.comm_exposed,
      100 * r.comm_exposed, 100 * w.allreduce / w.iteration, 100 * r.allreduce / r.iteration,
      human_bytes(w.memory.total()), human_bytes(r.memory.total()));
  return s;
}

}  // namespace

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
  app.add_option("--seq-len", seq, "sequence length in tokens")->required()->check(CLI::PositiveNumber);
  app.add_option("--gpus", gpus, "GPUs in all")->required()->check(CLI::PositiveNumber);
  app.add_option("--device", device, "device profile: h20, a800, h100, h200, cpu, or a JSON file")
      ->required();
  app.add_option("--memory", memory_gib, "usable GiB per GPU (default: the device's memory)")
      ->check(CLI::PositiveNumber);
  app.add_option("--global-batch", global_batch, "sequences per iteration (fixes m = batch / DP)")
      ->check(CLI::PositiveNumber);
  app.add_option("--top", top, "how many configurations to list (default 10)")->check(CLI::PositiveNumber);
  add_format_flag(app, format);
  if (auto rc = parse_or_exit(app, argc, argv)) return *rc;

  const ModelConfig cfg = ModelConfig::load(model);
  const DeviceProfile dev = device_profile(device);
  const double memory = memory_gib > 0 ? memory_gib * (1ull << 30) : dev.memory_bytes;
  HP_CHECK(memory > 0, "device '{}' states no memory; give --memory=GiB", dev.name);
  auto lays = layouts(gpus, static_cast<int>(cfg.layers), dev.gpus_per_node, 1);
  HP_CHECK(!lays.empty(), "no TP x PP x DP layout of {} GPUs divides {} layers", gpus, cfg.layers);

  std::vector<PlanResult> fit;
  size_t tried = 0, too_big = 0;
  for (const Layout& lay : lays) {
    std::vector<int> ms;
    if (global_batch > 0) {
      if (global_batch % lay.dp) continue;
      ms = {global_batch / lay.dp};
    } else {
      // One stage: m only sets how often gradients are reduced; 4 sequences per replica.
      ms = lay.pp == 1 ? std::vector<int>{4} : std::vector<int>{lay.pp, 2 * lay.pp, 4 * lay.pp};
    }
    for (PlanCase pc : candidates(lay, ms)) {
      if (lay.pp == 1 && pc.schedule != "1f1b") continue;  // one stage: every schedule is the same
      ++tried;
      PlanResult r = evaluate_fitting(pc, cfg, seq, dev, memory);
      if (r.fits) fit.push_back(r);
      else if (r.error.empty()) ++too_big;
    }
  }
  std::stable_sort(fit.begin(), fit.end(), [](const PlanResult& a, const PlanResult& b) {
    return a.tokens_per_s > b.tokens_per_s;
  });

  nlohmann::json ranked = nlohmann::json::array();
  for (size_t i = 0; i < fit.size() && static_cast<int>(i) < top; ++i) {
    const PlanResult& r = fit[i];
    ranked.push_back({{"rank", i + 1}, {"schedule", r.c.schedule}, {"config", r.c.label()},
                      {"tp", r.c.layout.tp}, {"pp", r.c.layout.pp}, {"dp", r.c.layout.dp},
                      {"microbatches", r.c.microbatches}, {"folds", r.c.folds},
                      {"transfer", transfer_str(r.c.transfer)}, {"recompute", recompute_str(r.c.recompute)},
                      {"mlp_chunk", r.c.mlp_chunk}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
                      {"iteration_s", r.iteration}, {"bubble_fraction", r.bubble_fraction},
                      {"comm_exposed", r.comm_exposed}, {"memory_per_gpu_bytes", r.memory.total()}});
  }
  std::string reason;
  // The overlap condition (sim/parallel.h) for the winner and for the best HelixPipe
  // configuration; when no HelixPipe configuration fits, for helix F=2 on the winner's layout.
  nlohmann::json overlap = nlohmann::json::object();
  std::vector<std::string> overlap_lines;
  if (!fit.empty()) {
    const PlanResult& w = fit.front();
    auto other = std::find_if(fit.begin(), fit.end(),
                              [&](const PlanResult& r) { return r.c.schedule != w.c.schedule; });
    reason = other == fit.end() ? "no other schedule fits" : why(w, *other);
    auto helix = std::find_if(fit.begin(), fit.end(),
                              [](const PlanResult& r) { return r.c.schedule == "helix"; });
    PlanCase hc;
    std::string h_note;
    if (helix != fit.end()) {
      hc = helix->c;
      h_note = fmt::format("best HelixPipe, rank {}", helix - fit.begin() + 1);
    } else {
      hc = w.c;
      hc.schedule = "helix";
      hc.folds = 2;
      hc.virtual_stages = 1;
      hc.recompute = Recompute::kNoAttn;
      hc.transfer = TransferMode::kWeights;
      h_note = "no HelixPipe configuration fits; the winner's layout";
    }
    auto entry = [&](const char* key, const PlanCase& c, const std::string& note) {
      const OverlapCheck o = overlap_check(c, cfg, seq, dev);
      overlap[key] = {{"config", c.label()}, {"layout", c.layout.str()},
                      {"t_attn_s", o.t_attn}, {"t_comm_s", o.t_comm},
                      {"bytes_per_layer", o.bytes}, {"inter_node", o.inter_node},
                      {"holds", o.holds()}, {"text", o.describe()}};
      if (c.schedule == "helix" && c.layout.pp > 1) {
        overlap_lines.push_back(fmt::format("{} {} ({}): {}", c.layout.str(), c.label(), note,
                                            o.describe()));
      } else {
        overlap_lines.push_back(fmt::format(
            "{} {} ({}): attention {:.1f} ms, its own traffic {:.1f} ms per layer ({} on the {} "
            "link)",
            c.layout.str(), c.label(), note, o.t_attn * 1e3, o.t_comm * 1e3, human_bytes(o.bytes),
            o.inter_node ? "inter-node" : "intra-node"));
      }
    };
    if (w.c.schedule != "helix") entry("winner", w.c, "winner");
    entry("helix", hc, w.c.schedule == "helix" ? "winner" : h_note);
  }
  if (format == "json") {
    fmt::print("{}\n", nlohmann::json{{"version", 1}, {"model", cfg.name}, {"device", dev.name},
                                      {"seq_len", seq}, {"gpus", gpus}, {"memory_bytes", memory},
                                      {"tried", tried}, {"fit", fit.size()}, {"ranked", ranked},
                                      {"why", reason}, {"overlap", overlap}}
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
  for (const std::string& line : overlap_lines) fmt::print("  {}\n", line);
  return 0;
}

}  // namespace hp::cli
