// Searches over training configurations on paper, built on sim/parallel.h's evaluate_fitting:
// `helixpipe plan` (every configuration of a GPU count that fits, ranked, with why the winner
// wins and the overlap condition) and `helixpipe sweep` (the best fitting configuration of one
// schedule family per sequence length and GPU count).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/device.h"
#include "sim/parallel.h"
#include "util/model_config.h"

namespace hp {

// The usable memory per GPU: `memory_gib` GiB when > 0, else the device's. hp::Error when neither
// is known.
double usable_memory(const DeviceProfile& dev, double memory_gib);

// The configurations plan tries on one layout, for each micro-batch count in `ms`: gpipe, 1f1b
// and zb1p (recompute none, full), interleaved V=2 (none, full), adapipe (layers and recompute per
// stage searched, sim/adapipe.h), and helix F=1, 2 in both transfer modes with no-attn, none and
// full.
std::vector<PlanCase> plan_candidates(const Layout& lay, const std::vector<int>& ms);

struct PlanSearch {
  std::vector<PlanResult> fit;  // by tokens/s, fastest first (stable among equals)
  size_t tried = 0, too_big = 0;
};
// Every layout of `gpus` GPUs (PP >= 1) and its candidates: m = global_batch / DP when
// `global_batch` > 0 (layouts it does not divide are skipped), else {p, 2p, 4p} (4 with one stage,
// where only 1f1b is tried). hp::Error when no layout divides the layers.
PlanSearch search_plans(const ModelConfig& cfg, int64_t seq_len, const DeviceProfile& dev,
                        double memory, int gpus, int global_batch);

// Why `w` beats `r`: speed, bubble, exposed communication, DP all-reduce and memory side by side.
std::string plan_why(const PlanResult& w, const PlanResult& r);

// The first `top` results as plan's JSON "ranked" array.
nlohmann::json plan_ranked_json(const std::vector<PlanResult>& fit, int top);

// What plan says about its winner (fit non-empty): why it beats the best other schedule, and the
// overlap condition (sim/parallel.h overlap_check) for the winner and for the best HelixPipe
// configuration (when none fits, helix F=2 on the winner's layout), as JSON and as text lines.
struct PlanVerdict {
  std::string reason;
  nlohmann::json overlap = nlohmann::json::object();
  std::vector<std::string> overlap_lines;
};
PlanVerdict plan_verdict(const std::vector<PlanResult>& fit, const ModelConfig& cfg,
                         int64_t seq_len, const DeviceProfile& dev);

// The best fitting configuration of one schedule family ("helix": F = 1, 2 with no-attn or none;
// "adapipe": its own per-stage search; others: recompute none or full) at sequence length `s` on
// `gpus` GPUs, m = global_batch / DP, over the layouts with PP >= 2 (and the given TP / PP when
// `want_tp` / `want_pp` > 0); fits = false when none fits.
PlanResult best_fitting(const std::string& family, const ModelConfig& cfg, int64_t s, int gpus,
                        const DeviceProfile& dev, double memory, int global_batch, int want_tp,
                        int want_pp);

// One fitting result as sweep's JSON ({"fits": false} when it does not fit).
nlohmann::json sweep_entry_json(const PlanResult& r);

// The families a sweep row compares: HelixPipe first, then its baselines.
inline const std::vector<std::string>& sweep_families() {
  static const std::vector<std::string> f = {"helix", "1f1b", "zb1p", "adapipe", "weipipe"};
  return f;
}

// One row of `helixpipe sweep`: best_fitting() of every sweep family at (s, gpus), and HelixPipe's
// gain over the fastest baseline that fits (none when HelixPipe or every baseline does not fit).
struct SweepRow {
  int64_t seq_len = 0;
  int gpus = 0;
  std::vector<PlanResult> best;  // in sweep_families() order
  bool has_gain = false;
  double helix_gain = 0;  // helix tokens/s over the best baseline's, minus 1
  // {"seq_len", "gpus", one sweep_entry_json per family under its name, "helix_gain" when known}
  nlohmann::json json() const;
};
SweepRow sweep_row(const ModelConfig& cfg, int64_t s, int gpus, const DeviceProfile& dev,
                   double memory, int global_batch, int want_tp, int want_pp);

}  // namespace hp
