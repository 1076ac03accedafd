#include "sim/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/adapipe.h"
#include "util/error.h"
#include "util/human_units.h"

namespace hp {

double usable_memory(const DeviceProfile& dev, double memory_gib) {
  const double memory = memory_gib > 0 ? memory_gib * (1ull << 30) : dev.memory_bytes;
  HP_CHECK(memory > 0, "device '{}' states no memory; give --memory=GiB", dev.name);
  return memory;
}

namespace {
// The baselines' recomputation, Megatron-LM's choices: none, selective (attention rerun), full.
constexpr Recompute kBaselinePolicies[] = {Recompute::kNone, Recompute::kSelective,
                                           Recompute::kFull};
}  // namespace

std::vector<PlanCase> plan_candidates(const Layout& lay, const std::vector<int>& ms) {
  std::vector<PlanCase> out;
  for (int m : ms) {
    PlanCase c;
    c.layout = lay;
    c.microbatches = m;
    for (const char* name : {"gpipe", "1f1b", "zb1p", "weipipe"}) {
      c.schedule = name;
      for (Recompute r : kBaselinePolicies) {
        c.recompute = r;
        out.push_back(c);
      }
    }
    c.schedule = "interleaved";
    c.virtual_stages = 2;
    for (Recompute r : kBaselinePolicies) {
      c.recompute = r;
      out.push_back(c);
    }
    c.virtual_stages = 1;
    c.schedule = "adapipe";  // its recomputation is searched per stage by evaluate()
    c.recompute = Recompute::kNone;
    out.push_back(c);
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

PlanSearch search_plans(const ModelConfig& cfg, int64_t seq, const DeviceProfile& dev,
                        double memory, int gpus, int global_batch) {
  auto lays = layouts(gpus, static_cast<int>(cfg.layers), dev.gpus_per_node, 1);
  HP_CHECK(!lays.empty(), "no TP x PP x DP layout of {} GPUs divides {} layers", gpus, cfg.layers);
  PlanSearch out;
  for (const Layout& lay : lays) {
    std::vector<int> ms;
    if (global_batch > 0) {
      if (global_batch % lay.dp) continue;
      ms = {global_batch / lay.dp};
    } else {
      // One stage: m only sets how often gradients are reduced; 4 sequences per replica.
      ms = lay.pp == 1 ? std::vector<int>{4} : std::vector<int>{lay.pp, 2 * lay.pp, 4 * lay.pp};
    }
    for (PlanCase pc : plan_candidates(lay, ms)) {
      if (lay.pp == 1 && pc.schedule != "1f1b") continue;  // one stage: every schedule is the same
      ++out.tried;
      PlanResult r = evaluate_fitting(pc, cfg, seq, dev, memory);
      if (r.fits) out.fit.push_back(r);
      else if (r.error.empty()) ++out.too_big;
    }
  }
  std::stable_sort(out.fit.begin(), out.fit.end(), [](const PlanResult& a, const PlanResult& b) {
    return a.tokens_per_s > b.tokens_per_s;
  });
  return out;
}

std::string plan_why(const PlanResult& w, const PlanResult& r) {
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

namespace {

// An uneven plan's layers and policies per stage (adapipe), as compare's JSON gives them.
void add_stage_plan(nlohmann::json& j, const PlanCase& c) {
  if (c.stage_layers.empty()) return;
  j["partition"] = c.stage_layers;
  j["stage_recompute"] = recompute_names(c.stage_recompute);
}

}  // namespace

nlohmann::json plan_ranked_json(const std::vector<PlanResult>& fit, int top) {
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
    add_stage_plan(ranked.back(), r.c);
  }
  return ranked;
}

PlanVerdict plan_verdict(const std::vector<PlanResult>& fit, const ModelConfig& cfg, int64_t seq,
                         const DeviceProfile& dev) {
  PlanVerdict v;
  if (fit.empty()) return v;
  const PlanResult& w = fit.front();
  auto other = std::find_if(fit.begin(), fit.end(),
                            [&](const PlanResult& r) { return r.c.schedule != w.c.schedule; });
  v.reason = other == fit.end() ? "no other schedule fits" : plan_why(w, *other);
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
    v.overlap[key] = {{"config", c.label()}, {"layout", c.layout.str()},
                      {"t_attn_s", o.t_attn}, {"t_comm_s", o.t_comm},
                      {"bytes_per_layer", o.bytes}, {"inter_node", o.inter_node},
                      {"holds", o.holds()}, {"text", o.describe()}};
    if (c.schedule == "helix" && c.layout.pp > 1) {
      v.overlap_lines.push_back(
          fmt::format("{} {} ({}): {}", c.layout.str(), c.label(), note, o.describe()));
    } else {
      v.overlap_lines.push_back(fmt::format(
          "{} {} ({}): attention {:.1f} ms, its own traffic {:.1f} ms per layer ({} on the {} "
          "link)",
          c.layout.str(), c.label(), note, o.t_attn * 1e3, o.t_comm * 1e3, human_bytes(o.bytes),
          o.inter_node ? "inter-node" : "intra-node"));
    }
  };
  if (w.c.schedule != "helix") entry("winner", w.c, "winner");
  entry("helix", hc, w.c.schedule == "helix" ? "winner" : h_note);
  return v;
}

PlanResult best_fitting(const std::string& family, const ModelConfig& cfg, int64_t s, int gpus,
                        const DeviceProfile& dev, double memory, int global_batch, int want_tp,
                        int want_pp) {
  PlanResult best;
  for (const Layout& lay : layouts(gpus, static_cast<int>(cfg.layers), dev.gpus_per_node)) {
    if ((want_tp && lay.tp != want_tp) || (want_pp && lay.pp != want_pp)) continue;
    if (global_batch % lay.dp) continue;
    const int m = global_batch / lay.dp;
    std::vector<PlanCase> cases;
    PlanCase c;
    c.schedule = family;
    c.layout = lay;
    c.microbatches = m;
    if (family == "helix") {
      for (int F : {1, 2})
        for (Recompute r : {Recompute::kNoAttn, Recompute::kNone}) {
          c.folds = F;
          c.recompute = r;
          cases.push_back(c);
        }
    } else if (family == "adapipe") {
      cases.push_back(c);  // one case: the search inside evaluate() picks the recomputation
    } else {
      for (Recompute r : kBaselinePolicies) {
        c.recompute = r;
        cases.push_back(c);
      }
    }
    for (PlanCase& pc : cases) {
      PlanResult r = evaluate_fitting(pc, cfg, s, dev, memory);
      if (r.fits && (!best.fits || r.tokens_per_s > best.tokens_per_s)) best = r;
    }
  }
  return best;
}

nlohmann::json sweep_entry_json(const PlanResult& r) {
  nlohmann::json j = {{"fits", r.fits}};
  if (r.fits) {
    j.update({{"tp", r.c.layout.tp}, {"pp", r.c.layout.pp}, {"dp", r.c.layout.dp},
              {"config", r.c.label()}, {"microbatches", r.c.microbatches},
              {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
              {"memory_per_gpu_bytes", r.memory.total()},
              {"bubble_fraction", r.bubble_fraction}, {"comm_exposed", r.comm_exposed}});
    add_stage_plan(j, r.c);
  }
  return j;
}

SweepRow sweep_row(const ModelConfig& cfg, int64_t s, int gpus, const DeviceProfile& dev,
                   double memory, int global_batch, int want_tp, int want_pp) {
  SweepRow row;
  row.seq_len = s;
  row.gpus = gpus;
  double base = 0;
  for (const std::string& f : sweep_families()) {
    row.best.push_back(best_fitting(f, cfg, s, gpus, dev, memory, global_batch, want_tp, want_pp));
    if (f != "helix" && row.best.back().fits) base = std::max(base, row.best.back().tokens_per_s);
  }
  row.has_gain = row.best.front().fits && base > 0;
  if (row.has_gain) row.helix_gain = row.best.front().tokens_per_s / base - 1;
  return row;
}

nlohmann::json SweepRow::json() const {
  nlohmann::json j = {{"seq_len", seq_len}, {"gpus", gpus}};
  for (size_t i = 0; i < best.size(); ++i) j[sweep_families()[i]] = sweep_entry_json(best[i]);
  if (has_gain) j["helix_gain"] = helix_gain;
  return j;
}

}  // namespace hp
