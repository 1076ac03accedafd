// The runs of `helixpipe bench`: for every --recompute policy and every schedule asked for, one
// measured run (runtime/pipeline_bench.h measure_calibrated) and, with part costs, the simulator's
// prediction beside it (sim/sim_setup.h). Each result comes back as a BenchRow of numbers plus its
// JSON row; the CLI (cli/cmd_bench.cc) prints them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/comm.h"
#include "runtime/pipeline_bench.h"
#include "sim/sim_setup.h"
#include "util/model_config.h"

namespace hp {

// What bench is asked to run (its flags, docs in cli/cmd_bench.cc).
struct BenchRequest {
  std::string model, part_costs, recompute = "natural", out_path, timeline_path,
      precision = "fp32", timeline_label = "helix F=2", schedules = "1f1b,gpipe,zb1p,helix1,helix2",
      trace_dir;
  int64_t seq_len = 0;
  int stages = 2, microbatches = 4, threads = 1, steps = 1, virtual_stages = 2;
  int data_parallel = 1, tensor_parallel = 1;
  int grid() const { return data_parallel * tensor_parallel; }  // ranks per stage
  bool calibrate = true;
};

// hp::Error for a request that cannot run; `ranks` is mpirun's world size (0 without mpirun).
void check_bench_request(const BenchRequest& r, int ranks);

// One schedule bench can run; --schedules picks by key.
struct BenchVariant {
  std::string key, label, name;
  int folds;
};
// The keys of a comma list (1f1b, gpipe, zb1p, interleaved, helix1, helix2), in the list's order;
// hp::Error for an unknown key or an empty list.
std::vector<const BenchVariant*> pick_bench_variants(const std::string& list);
// A comma list of policies: "natural" (each schedule's own: nullopt), none, full, no-attn.
std::vector<std::optional<Recompute>> pick_bench_policies(const std::string& list);

// The part costs for the predictions, with the stash and messages sized in `prec`.
CostSetup bench_cost(const BenchRequest& r, const Precision& prec);

// The simulator beside one measured run: each stage's parts scaled by its core's calibration
// (the median over the passes, per part kind and direction), and a replay given each stage's
// measured busy time.
struct BenchPrediction {
  double step_s = 0, bubble_fraction = 0, replay_step_s = 0;
  std::vector<double> step_each_s;  // per timed step, from the passes around it (calibrated)
  std::vector<int64_t> stash;       // per stage
  bool stash_exact = false;         // equal to the measured stash
  std::vector<double> scale;        // per stage: the median core factor (empty: not calibrated)
  std::vector<std::pair<double, double>> scale_range;  // per stage: its passes' lowest, highest
};

// One measured run, as numbers and as its JSON row (--out).
struct BenchRow {
  const BenchVariant* variant = nullptr;
  Recompute recompute = Recompute::kNone;  // the policy that ran
  double step_s = 0;                       // median over the timed steps
  double tokens_per_s = 0, vs_1f1b = 0;    // vs_1f1b: 0 before this policy's 1f1b ran
  double bubble = 0, comm_wait = 0;        // the worst stage's
  std::vector<int64_t> stash, store;       // every stage's peaks
  std::optional<BenchPrediction> pred;     // with part costs and one rank per stage
  // Per rank: the largest weights + gradients + store, and the rank longest inside the tensor-
  // parallel collectives beside the simulator's charge for them (sim/parallel.h tp_group_time)
  // on the group's own link and, with part costs, on the profile's ping-pong link.
  int64_t peak_rank_bytes = 0;
  RankMeasured busiest;
  LinkProfile tp_link;
  double tp_pred_s = 0;
  std::optional<double> tp_pred_pingpong_s;
  // With a tensor-parallel rank's profile: its measured time per N x h collective, times the
  // bytes this rank sent over those of one such collective.
  std::optional<double> tp_pred_profile_s;
  double tp_profile_collective_s = 0;
  nlohmann::json json;
};

// Called on rank 0: a schedule that cannot run the shape (its label and why), and each row.
struct BenchCallbacks {
  std::function<void(const std::string& label, const std::string& why)> skipped;
  std::function<void(const BenchRow& row)> row;
};

// Collective over `world` (D x P x T ranks; null: in-process ranks). Runs every policy x variant
// once (a run equal to an earlier one is skipped), writes --trace-dir's traces and --timeline's
// picture, and returns the JSON rows (on rank 0; empty elsewhere).
nlohmann::json run_bench(Comm* world, const BenchRequest& r, const ModelConfig& cfg,
                         const Precision& prec, const std::vector<const BenchVariant*>& variants,
                         const std::vector<std::optional<Recompute>>& policies,
                         const std::optional<CostSetup>& cost, const std::string& transport,
                         const BenchCallbacks& cb);

// What `bench --out` writes: the run's settings (version 2) and its rows.
nlohmann::json bench_json(const BenchRequest& f, const ModelConfig& cfg, const Precision& prec,
                          const std::string& transport, const nlohmann::json& rows);

}  // namespace hp
