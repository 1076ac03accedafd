#include "runtime/bench_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "kernels/cpu_kernels.h"
#include "model/value_store.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "sim/parallel.h"
#include "sim/timeline.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp {

namespace {

// In table order.
const std::vector<BenchVariant> kVariants = {{"1f1b", "1f1b", "1f1b", 1},
                                             {"gpipe", "gpipe", "gpipe", 1},
                                             {"zb1p", "zb1p", "zb1p", 1},
                                             {"interleaved", "interleaved", "interleaved", 1},
                                             {"helix1", "helix F=1", "helix", 1},
                                             {"helix2", "helix F=2", "helix", 2}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Deterministic tokens and targets for n positions of a vocabulary of `vocab`.
void bench_tokens(int64_t n, int64_t vocab, std::vector<int32_t>& tokens,
                  std::vector<int32_t>& targets) {
  tokens.resize(static_cast<size_t>(n));
  targets.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 3) % vocab);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 11) % vocab);
  }
}

// The measured half of a row: the worst stage's bubble and communication wait, every stage's
// peaks, and the JSON row before the predictions are added.
void fill_measured(BenchRow& x, const Schedule& sch, bool natural, const BenchRequest& r,
                   const Measured& m) {
  for (const auto& s : m.stages) {
    x.bubble = std::max(x.bubble, s.bubble_fraction());
    x.comm_wait = std::max(x.comm_wait, s.comm_wait_s);
    x.stash.push_back(s.peak_stash_bytes);
    x.store.push_back(s.peak_bytes);
  }
  const BenchVariant& v = *x.variant;
  x.json = {{"label", v.label},
            {"schedule", v.name},
            {"folds", v.folds},
            {"recompute", recompute_str(sch.recompute)},
            {"natural_policy", natural},
            {"seq_len", r.seq_len},
            {"stages", r.stages},
            {"data_parallel", r.data_parallel},
            {"tensor_parallel", r.tensor_parallel},
            {"microbatches", r.microbatches},
            {"step_s", x.step_s},
            {"steps_s", m.step_s},
            {"tokens_per_s", x.tokens_per_s},
            {"vs_1f1b", x.vs_1f1b},
            {"bubble_fraction", x.bubble},
            {"comm_wait_s", x.comm_wait},
            {"peak_stash_bytes", x.stash},
            {"peak_store_bytes", x.store}};
  nlohmann::json st_json = nlohmann::json::array();
  for (const auto& s : m.stages)
    st_json.push_back({{"total_s", s.total_s},
                       {"busy_s", s.busy_s},
                       {"comm_wait_s", s.comm_wait_s},
                       {"peak_stash_bytes", s.peak_stash_bytes},
                       {"peak_bytes", s.peak_bytes}});
  x.json["stages_measured"] = st_json;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMeasured& q : m.ranks)
    ranks.push_back({{"tp_collectives", q.tp_collectives},
                     {"tp_bytes_sent", q.tp_bytes_sent},
                     {"tp_comm_s", q.tp_seconds},
                     {"tp_transfer_s", q.tp_transfer_s},
                     {"tp_skew_s", q.tp_skew_s},
                     {"peak_store_bytes", q.peak_store_bytes},
                     {"param_bytes", q.param_bytes},
                     {"grad_bytes", q.grad_bytes}});
  x.json["ranks_measured"] = ranks;
}

// Memory per rank and, with tensor parallelism, the busiest rank's collectives beside the
// simulator's link model for the same collectives and bytes.
void fill_ranks(BenchRow& x, const BenchRequest& r, const Measured& m,
                const std::optional<CostSetup>& cost) {
  const RankMeasured* busiest = &m.ranks.front();
  for (const RankMeasured& q : m.ranks) {
    x.peak_rank_bytes = std::max(x.peak_rank_bytes, q.param_bytes + q.peak_store_bytes);
    if (q.tp_seconds > busiest->tp_seconds) busiest = &q;
  }
  x.busiest = *busiest;
  x.tp_link = m.tp_link;
  x.json["peak_rank_bytes"] = x.peak_rank_bytes;
  if (r.tensor_parallel <= 1) return;
  x.tp_pred_s = tp_group_time(busiest->tp_collectives, busiest->tp_bytes_sent, r.tensor_parallel,
                              m.tp_link);
  x.json["tp_comm_s"] = busiest->tp_seconds;
  x.json["tp_transfer_s"] = busiest->tp_transfer_s;
  x.json["tp_comm_pred_s"] = x.tp_pred_s;
  x.json["tp_link"] = {{"latency_s", m.tp_link.latency_s},
                       {"bandwidth_Bps", m.tp_link.bandwidth_Bps}};
  if (cost) {
    x.tp_pred_pingpong_s = tp_group_time(busiest->tp_collectives, busiest->tp_bytes_sent,
                                         r.tensor_parallel, cost->cost.link(0, 0));
    x.json["tp_comm_pred_pingpong_s"] = *x.tp_pred_pingpong_s;
    const CostModel& c = cost->cost;
    if (c.tensor_parallel() > 1 && cost->model) {
      const int T = r.tensor_parallel;
      const double one = static_cast<double>(r.seq_len * cost->model->hidden) *
                         cost->elem_bytes.compute * (T - 1) / T;
      x.tp_pred_profile_s = static_cast<double>(busiest->tp_bytes_sent) / one * c.tp_collective_s();
      x.tp_profile_collective_s = c.tp_collective_s();
      x.json["tp_comm_pred_profile_s"] = *x.tp_pred_profile_s;
    }
  }
}

// The simulator's prediction for one measured run, added to the row: with a calibration, every
// timed step simulated with its stage's parts scaled by the passes around it, the prediction being
// the median step (as the measured step is); and a replay given each stage's measured busy time, so
// that what is left of the error is the schedule, bubble and communication model alone. With
// `measured_tl`, writes the side-by-side timeline. `dp_allreduce_s` (per stage; empty with one
// replica): the replicas' gradient all-reduce, which each stage starts after its last op, so a
// step ends at the latest of the pipeline's end and every stage's end plus its all-reduce.
void add_prediction(BenchRow& x, const ScheduleSpec& spec, const CostSetup& cost, const Measured& m,
                    const std::optional<Calibration>& cal, const Timeline* measured_tl,
                    const std::string& timeline_path, const std::vector<double>& dp_allreduce_s) {
  BenchPrediction p;
  nlohmann::json& row = x.json;
  auto step_of = [&](const SimResult& r) {
    double t = r.makespan;
    for (size_t q = 0; q < dp_allreduce_s.size() && q < r.stages.size(); ++q)
      t = std::max(t, r.stages[q].end + dp_allreduce_s[q]);
    return t;
  };
  if (!dp_allreduce_s.empty()) row["predicted_dp_allreduce_s"] = dp_allreduce_s;
  std::vector<PartTable> factors;  // the median step's, per stage (none: unscaled)
  if (cal) {
    p.scale = cal->scale;
    nlohmann::json per_part = nlohmann::json::array();
    for (size_t q = 0; q < cal->parts.size(); ++q) {
      const auto [lo, hi] = std::minmax_element(cal->core[q].begin(), cal->core[q].end());
      p.scale_range.emplace_back(*lo, *hi);
      nlohmann::json f;
      for (PartKind k : kPartKinds)
        for (Dir d : kPartDirs) f[part_kind_str(k)][dir_str(d)] = cal->parts[q].at(k, d);
      per_part.push_back(f);
    }
    for (const std::vector<PartTable>& step : cal->steps)
      p.step_each_s.push_back(step_of(simulate_spec(spec, cost, false, {}, step).result));
    factors = cal->steps[median_index(p.step_each_s)];
    row["stage_time_scale"] = cal->scale;
    row["core_passes"] = cal->core;
    row["part_factors"] = per_part;
    row["predicted_steps_s"] = p.step_each_s;
  }
  SimRun sr = simulate_spec(spec, cost, measured_tl != nullptr, {}, factors);
  std::vector<double> pbusy;
  for (const auto& s : sr.result.stages) {
    p.stash.push_back(s.peak_activation_bytes);
    pbusy.push_back(s.busy);
  }
  row["predicted_busy_s"] = pbusy;
  // The replay: each stage's compute scaled so that its busy time is the measured one.
  const SimRun plain = cal ? simulate_spec(spec, cost, false) : sr;
  std::vector<double> replay_scale;
  for (size_t q = 0; q < m.stages.size(); ++q) {
    const double unscaled = plain.result.stages[q].busy;
    replay_scale.push_back(unscaled > 0 ? m.stages[q].busy_s / unscaled : 1.0);
  }
  p.replay_step_s = step_of(simulate_spec(spec, cost, false, replay_scale).result);
  row["replay_step_s"] = p.replay_step_s;
  // The same statistic as the measured step's: the median over the steps.
  p.step_s = cal ? median(p.step_each_s) : step_of(sr.result);
  p.bubble_fraction = sr.result.bubble_fraction;
  p.stash_exact = p.stash == x.stash;
  row["predicted_step_s"] = p.step_s;
  row["predicted_bubble_fraction"] = p.bubble_fraction;
  row["predicted_peak_stash_bytes"] = p.stash;
  row["stash_exact"] = p.stash_exact;
  if (measured_tl) {
    sr.result.timeline.title = "simulated: " + x.variant->label;
    write_file_atomic(timeline_path, render_side_by_side(sr.result.timeline, *measured_tl));
  }
  x.pred = std::move(p);
}

// The prediction's cost setup for one rank of a tensor-parallel group: the profile's (whole-stage)
// part costs through shard_costs on the link the group's own collectives showed in this run, and
// the stash and messages per rank (layout.tp: sim/sim_setup.h). A profile of a rank's shards
// (profile --tensor-parallel) is that already, with the collectives its own run measured.
CostSetup tensor_parallel_setup(const CostSetup& whole, const BenchRequest& r,
                                const ModelConfig& cfg, const LinkProfile& group_link) {
  if (whole.cost.tensor_parallel() > 1) return whole;  // already a rank's (bench_cost checked T)
  CostSetup c = whole;
  const double act_bytes = static_cast<double>(r.seq_len * cfg.hidden) * whole.elem_bytes.compute;
  c.cost = shard_costs(whole.cost, r.tensor_parallel, act_bytes, group_link);
  c.layout.tp = r.tensor_parallel;
  return c;
}

// Per stage, the replicas' gradient all-reduce (sim/parallel.h dp_allreduce_time: each rank sends
// and receives 2 (D-1)/D of its gradients, as Comm's reduce-scatter + all-gather does) of the
// largest gradient block among the stage's ranks, on the part costs' link between stages (the
// profile's ping-pong). Empty with one replica.
std::vector<double> dp_allreduce_times(const Measured& m, const BenchRequest& r, int stages,
                                       const CostModel& cost) {
  if (r.data_parallel <= 1) return {};
  std::vector<int64_t> bytes(static_cast<size_t>(stages), 0);
  for (size_t w = 0; w < m.ranks.size(); ++w) {
    int64_t& b = bytes[w / static_cast<size_t>(r.tensor_parallel) % static_cast<size_t>(stages)];
    b = std::max(b, m.ranks[w].grad_bytes);
  }
  std::vector<double> out;
  for (int64_t b : bytes)
    out.push_back(dp_allreduce_time(static_cast<double>(b), r.data_parallel, cost.link(0, 0)));
  return out;
}

}  // namespace

void check_bench_request(const BenchRequest& f, int ranks) {
  HP_CHECK(f.stages >= 1 && f.microbatches >= 1 && f.steps >= 1 && f.threads >= 1 && f.seq_len >= 1 &&
               f.data_parallel >= 1 && f.tensor_parallel >= 1,
           "bench: --stages, --microbatches, --steps, --threads, --seq-len, --data-parallel and "
           "--tensor-parallel must be >= 1");
  const int want = f.stages * f.grid();
  HP_CHECK(ranks == 0 || ranks == want,
           "bench: mpirun started {} ranks but --data-parallel x --stages x --tensor-parallel is "
           "{} x {} x {} = {}; run mpirun -np {} or leave --stages out",
           ranks, f.data_parallel, f.stages, f.tensor_parallel, want, want);
  HP_CHECK(f.timeline_path.empty() || !f.part_costs.empty(),
           "bench: --timeline needs --part-costs (the simulated half of the picture)");
  HP_CHECK(f.timeline_path.empty() || f.grid() == 1,
           "bench: --timeline sets the simulator's pipeline beside the measured one, which needs "
           "one rank per stage; leave out --data-parallel and --tensor-parallel or --timeline");
}

std::vector<const BenchVariant*> pick_bench_variants(const std::string& schedules) {
  std::vector<const BenchVariant*> variants;
  for (const std::string& key : split_list(schedules)) {
    auto it = std::find_if(kVariants.begin(), kVariants.end(),
                           [&](const BenchVariant& v) { return v.key == key; });
    HP_CHECK(it != kVariants.end(),
             "bench: unknown schedule '{}' in --schedules; use 1f1b, gpipe, zb1p, interleaved, "
             "helix1 or helix2",
             key);
    variants.push_back(&*it);
  }
  HP_CHECK(!variants.empty(), "bench: --schedules is empty");
  return variants;
}

std::vector<std::optional<Recompute>> pick_bench_policies(const std::string& recompute) {
  std::vector<std::optional<Recompute>> policies;
  for (const std::string& r : split_list(recompute))
    policies.push_back(r == "natural" ? std::nullopt : std::optional<Recompute>(parse_recompute(r)));
  HP_CHECK(!policies.empty(), "bench: --recompute is empty");
  return policies;
}

CostSetup bench_cost(const BenchRequest& f, const Precision& prec) {
  CostSpec cf;
  cf.part_costs = f.part_costs;
  cf.model = f.model;
  cf.seq_len = f.seq_len;
  cf.tp_from_file = true;
  CostSetup cost = build_cost(cf);
  cost.elem_bytes = elem_bytes(prec);
  // A whole-stage profile is split over the group in the run (tensor_parallel_setup); a profile of
  // one rank's shards (profile --tensor-parallel) must be of this group, and is used as measured.
  const int file_tp = cost.layout.tp;
  HP_CHECK(file_tp == 1 || file_tp == f.tensor_parallel,
           "bench: --part-costs '{}' holds one rank's costs in a tensor-parallel group of {}, but "
           "this run has --tensor-parallel={}; profile with --tensor-parallel={} or give a "
           "whole-stage profile (made without --tensor-parallel), which bench splits itself",
           f.part_costs, file_tp, f.tensor_parallel, f.tensor_parallel);
  HP_CHECK(file_tp == 1 || !f.calibrate,
           "bench: --part-costs '{}' is a tensor-parallel rank's profile; the core calibration "
           "compares whole parts against a whole-stage profile, so add --no-calibrate (the "
           "prediction then uses the file as measured) or give a profile made without "
           "--tensor-parallel",
           f.part_costs);
  return cost;
}

nlohmann::json run_bench(Comm* world, const BenchRequest& r, const ModelConfig& cfg,
                         const Precision& prec, const std::vector<const BenchVariant*>& variants,
                         const std::vector<std::optional<Recompute>>& policies,
                         const std::optional<CostSetup>& cost, const std::string& transport,
                         const BenchCallbacks& cb) {
  const bool root = !world || world->rank() == 0;
  const int L = static_cast<int>(cfg.layers);
  const int64_t n = r.seq_len * r.microbatches;
  std::vector<int32_t> tokens, targets;
  bench_tokens(n, cfg.vocab, tokens, targets);
  BenchSetup setup{cfg, r.seq_len, r.threads, r.steps, prec, &tokens, &targets};
  setup.data_parallel = r.data_parallel;
  setup.tensor_parallel = r.tensor_parallel;
  // The simulator's step prediction models one pipeline (a stage of T ranks through shard_costs),
  // calibrated by each stage's slowest rank over its group and the replicas, plus the replicas'
  // gradient all-reduce.
  const bool predict_steps = cost.has_value();

  nlohmann::json rows = nlohmann::json::array();
  std::set<std::pair<std::string, int>> done;  // (schedule label, policy) already measured
  std::map<size_t, double> base_tps;           // --recompute entry -> its 1f1b tokens/s
  bool timeline_written = false;
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    const std::optional<Recompute>& policy = policies[pi];
    for (const BenchVariant* v : variants) {
      ScheduleSpec spec{v->name,   r.stages, r.microbatches, L, v->folds,
                        v->name == "interleaved" ? r.virtual_stages : 1, policy,
                        TransferMode::kWeights};
      Schedule sch;
      try {
        sch = generate(spec);
      } catch (const Error& e) {
        if (root) cb.skipped(v->label, e.what());
        continue;
      }
      const int pol = static_cast<int>(sch.recompute);
      if (!done.insert({v->label, pol}).second) continue;
      lower(sch, &cfg, r.seq_len);
      const bool want_tl =
          !r.timeline_path.empty() && !timeline_written && v->label == r.timeline_label;
      const bool record = want_tl || !r.trace_dir.empty();
      CalibratedRun run = measure_calibrated(
          world, sch, setup, predict_steps && r.calibrate ? &cost->cost : nullptr, record);
      if (!root) continue;
      Measured& m = run.m;
      if (!r.trace_dir.empty()) {
        Timeline tl = m.timeline;
        tl.num_stages = r.stages;
        tl.title = fmt::format("measured: {} ({}, {})", v->label, recompute_str(sch.recompute),
                               transport);
        write_file_atomic(fmt::format("{}/trace_{}{}.json", r.trace_dir, v->key,
                                      policy ? "_" + std::string(recompute_str(*policy)) : ""),
                          render_chrome_trace(tl));
      }
      BenchRow x;
      x.variant = v;
      x.recompute = sch.recompute;
      x.step_s = median(m.step_s);
      x.tokens_per_s = static_cast<double>(n * r.data_parallel) / x.step_s;
      if (v->name == "1f1b") base_tps[pi] = x.tokens_per_s;
      const double base = base_tps.count(pi) ? base_tps[pi] : 0.0;
      x.vs_1f1b = base > 0 ? x.tokens_per_s / base : 0.0;
      fill_measured(x, sch, !policy.has_value(), r, m);
      if (predict_steps) {
        std::optional<Timeline> measured_tl;
        if (want_tl) {
          measured_tl = std::move(m.timeline);
          measured_tl->num_stages = r.stages;
          measured_tl->title = "measured: " + v->label + " (" + transport + ")";
        }
        const CostSetup pc =
            r.tensor_parallel > 1 ? tensor_parallel_setup(*cost, r, cfg, m.tp_link) : *cost;
        add_prediction(x, spec, pc, m, run.cal, measured_tl ? &*measured_tl : nullptr,
                       r.timeline_path, dp_allreduce_times(m, r, sch.num_stages, pc.cost));
        timeline_written = timeline_written || want_tl;
      }
      fill_ranks(x, r, m, cost);
      cb.row(x);
      rows.push_back(x.json);
    }
  }
  return rows;
}

nlohmann::json bench_json(const BenchRequest& f, const ModelConfig& cfg, const Precision& prec,
                          const std::string& transport, const nlohmann::json& rows) {
  return {{"version", 2},
          {"blas_core", blas_core_name()},
          {"threads", f.threads},
          {"transport", transport},
          {"precision", prec.name()},
          {"steps", f.steps},
          {"model", cfg.name},
          {"seq_len", f.seq_len},
          {"stages", f.stages},
          {"data_parallel", f.data_parallel},
          {"tensor_parallel", f.tensor_parallel},
          {"microbatches", f.microbatches},
          {"rows", rows}};
}

}  // namespace hp
