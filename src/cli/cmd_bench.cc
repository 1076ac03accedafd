// helixpipe bench: measured pipeline steps of every schedule on P in-process ranks (LocalWorld
// threads, one single-threaded CPU kernel set each), with tokens/s, ratio to 1F1B, bubble fraction,
// communication wait and peak memory per stage, and next to each row the simulator's prediction
// from a part-cost file (helixpipe profile): iteration time and peak memory, predicted vs measured.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "cli/commands.h"
#include "cli/sim_common.h"
#include "comm/local_comm.h"
#include "kernels/cpu_kernels.h"
#include "runtime/dist_step.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

namespace {

struct Variant {
  std::string label, name;
  int folds;
};

const std::vector<Variant> kVariants = {
    {"1f1b", "1f1b", 1}, {"gpipe", "gpipe", 1}, {"zb1p", "zb1p", 1},
    {"helix F=1", "helix", 1}, {"helix F=2", "helix", 2}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure one training step of each schedule on P in-process pipeline ranks and set\n"
               "it beside the simulator's prediction from a measured part-cost file.",
               "helixpipe bench"};
  app.footer(
      "Ranks are threads of this process (LocalWorld, in-memory messages), each with its own\n"
      "CPU kernels at --threads threads; give the machine P free cores. Times are the median of\n"
      "--steps steps after one warm-up step (per step: the slowest stage's wall time).\n\n"
      "example:\n"
      "  helixpipe profile --model=m.json --seq-len=4096 --out=c.json\n"
      "  helixpipe bench --model=m.json --seq-len=4096 --stages=2 --microbatches=4 \\\n"
      "      --part-costs=c.json --timeline=helix_vs_measured.svg --out=bench.json");
  std::string model, part_costs, recompute = "natural", out_path, timeline_path,
                                 timeline_label = "helix F=2";
  int64_t seq_len = 0;
  int stages = 2, microbatches = 4, threads = 1, steps = 1;
  app.add_option("--model", model, "model preset or JSON file")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence (micro-batch = 1 sequence)")->required();
  app.add_option("--stages", stages, "pipeline ranks P")->capture_default_str();
  app.add_option("--microbatches", microbatches, "micro-batches per step M")->capture_default_str();
  app.add_option("--threads", threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--recompute", recompute, "natural (each schedule's own), none, full or no-attn")
      ->capture_default_str();
  app.add_option("--part-costs", part_costs, "part-cost JSON for the predictions (helixpipe profile)");
  app.add_option("--timeline", timeline_path,
                 "SVG: simulated (top) and measured (bottom) timeline of --timeline-label");
  app.add_option("--timeline-label", timeline_label, "which schedule the timeline shows")
      ->capture_default_str();
  app.add_option("--out", out_path, "write the results as JSON here");
  if (auto rc = parse_or_exit(app, argc, argv)) return *rc;
  HP_CHECK(stages >= 1 && microbatches >= 1 && steps >= 1 && threads >= 1 && seq_len >= 1,
           "bench: --stages, --microbatches, --steps, --threads and --seq-len must be >= 1");
  HP_CHECK(timeline_path.empty() || !part_costs.empty(),
           "bench: --timeline needs --part-costs (the simulated half of the picture)");
  ModelConfig cfg = ModelConfig::load(model);
  const int L = static_cast<int>(cfg.layers);
  std::optional<Recompute> policy;
  if (recompute != "natural") policy = parse_recompute(recompute);

  std::optional<CostSetup> cost;
  if (!part_costs.empty()) {
    CostFlags cf;
    cf.part_costs = part_costs;
    cf.model = model;
    cf.seq_len = seq_len;
    if (policy) cf.recompute = recompute;
    cost = build_cost(cf);
  }

  const int64_t n = seq_len * microbatches;
  std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % cfg.vocab);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 11) % cfg.vocab);
  }

  nlohmann::json rows = nlohmann::json::array();
  fmt::print("bench  P={} M={} L={} s={} threads/rank={} BLAS core={} recompute={}\n", stages,
             microbatches, L, seq_len, threads, blas_core_name(), recompute);
  fmt::print("{:<10} {:>8} {:>9} {:>7} {:>8} {:>10} {:>10} {:>8} {:>21} {:>21}\n", "schedule",
             "policy", "tokens/s", "vs 1f1b", "bubble", "comm wait", "predicted", "error",
             "peak MiB s0/s1 meas", "peak MiB s0/s1 pred");
  double base_tps = 0;
  for (const Variant& v : kVariants) {
    ScheduleSpec spec{v.name, stages, microbatches, L, v.folds, 1, policy, TransferMode::kWeights};
    Schedule sch;
    try {
      sch = generate(spec);
    } catch (const Error& e) {
      fmt::print("{:<10} skipped: {}\n", v.label, e.what());
      continue;
    }
    lower(sch, &cfg, seq_len);
    const bool want_tl = !timeline_path.empty() && v.label == timeline_label;
    std::vector<double> step_s(static_cast<size_t>(steps), 0.0);  // slowest stage per step
    std::vector<StageStats> last(static_cast<size_t>(stages));
    std::vector<Timeline> tls(static_cast<size_t>(stages));
    std::mutex mu;
    LocalWorld world(stages, CommOptions{600, false});
    world.run([&](Comm& comm) {
      GridComms grid = split_grid(comm, 1, stages);
      auto k = make_cpu_kernels(threads);
      DistStage st(sch, grid, cfg, *k, 1, seq_len);
      st.params().init(1);
      for (int r = 0; r < 1 + steps; ++r) {
        ExecutorOptions eo;
        Timeline tl;
        tl.num_stages = stages;
        if (want_tl && r == steps) {
          eo.timeline = &tl;
        }
        grid.pipeline->barrier();
        eo.time_origin = now_s();
        DistStepResult res = st.loss_and_grads(tokens.data(), targets.data(), eo);
        std::lock_guard<std::mutex> g(mu);
        if (r > 0) {
          double& slot = step_s[static_cast<size_t>(r - 1)];
          slot = std::max(slot, res.stats.total_s);
        }
        if (r == steps) {
          last[static_cast<size_t>(grid.p)] = res.stats;
          if (want_tl) tls[static_cast<size_t>(grid.p)] = tl;
        }
      }
    });
    const double t = median(step_s);
    const double tps = static_cast<double>(n) / t;
    if (v.label == "1f1b") base_tps = tps;
    double bubble = 0, wait = 0;
    for (const auto& s : last) {
      bubble = std::max(bubble, s.bubble_fraction());
      wait = std::max(wait, s.comm_wait_s);
    }
    nlohmann::json row = {{"label", v.label}, {"schedule", v.name}, {"folds", v.folds},
                          {"recompute", recompute_str(sch.recompute)}, {"seq_len", seq_len},
                          {"stages", stages}, {"microbatches", microbatches}, {"step_s", t},
                          {"tokens_per_s", tps}, {"bubble_fraction", bubble}, {"comm_wait_s", wait}};
    nlohmann::json st_json = nlohmann::json::array();
    for (const auto& s : last)
      st_json.push_back({{"total_s", s.total_s}, {"busy_s", s.busy_s}, {"comm_wait_s", s.comm_wait_s},
                         {"peak_stash_bytes", s.peak_stash_bytes}, {"peak_bytes", s.peak_bytes}});
    row["stages_measured"] = st_json;
    std::string pred = "-", err = "-", pmem = "-";
    if (cost) {
      SimRun sr = run_one(spec, *cost, want_tl);
      row["predicted_step_s"] = sr.result.makespan;
      nlohmann::json pm = nlohmann::json::array();
      for (const auto& s : sr.result.stages) pm.push_back(s.peak_activation_bytes);
      row["predicted_peak_bytes"] = pm;
      pred = human_seconds(sr.result.makespan);
      err = fmt::format("{:+.1f}%", 100 * (sr.result.makespan - t) / t);
      pmem.clear();
      for (size_t i = 0; i < sr.result.stages.size(); ++i)
        pmem += fmt::format("{}{:.1f}", i ? "/" : "",
                            static_cast<double>(sr.result.stages[i].peak_activation_bytes) / 1048576.0);
      if (want_tl) {
        Timeline measured;
        measured.num_stages = stages;
        measured.title = "measured: " + v.label;
        for (const auto& tl : tls)
          measured.events.insert(measured.events.end(), tl.events.begin(), tl.events.end());
        sr.result.timeline.title = "simulated: " + v.label;
        write_file_atomic(timeline_path, render_side_by_side(sr.result.timeline, measured));
      }
    }
    std::string mmem;
    for (size_t i = 0; i < last.size(); ++i)
      mmem += fmt::format("{}{:.1f}", i ? "/" : "", static_cast<double>(last[i].peak_bytes) / 1048576.0);
    row["vs_1f1b"] = base_tps > 0 ? tps / base_tps : 0.0;
    fmt::print("{:<10} {:>8} {:>9.0f} {:>7} {:>7.1f}% {:>10} {:>10} {:>8} {:>21} {:>21}\n", v.label,
               recompute_str(sch.recompute), tps,
               base_tps > 0 ? fmt::format("{:.3f}", tps / base_tps) : std::string("-"), 100 * bubble,
               human_seconds(wait), pred, err, mmem, pmem);
    std::fflush(stdout);
    rows.push_back(row);
  }
  if (!out_path.empty()) {
    nlohmann::json j = {{"version", 1}, {"blas_core", blas_core_name()}, {"threads", threads},
                        {"transport", "LocalWorld (in-process threads)"}, {"rows", rows}};
    write_file_atomic(out_path, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace hp::cli
