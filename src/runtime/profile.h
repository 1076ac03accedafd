// Measured part costs: times the real Model (CPU kernels) one part at a time, forward (F),
// backward-for-inputs (I) and backward-for-weights (W), for one model config, sequence length and
// micro-batch size, and a link estimate, in the part-cost JSON shape the simulator reads
// (CostModel::from_part_costs, docs/formats/sim.md). Used by `helixpipe profile`.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "kernels/dtype.h"
#include "schedule/ir.h"
#include "util/model_config.h"

namespace hp {

struct ProfileOptions {
  int64_t seq_len = 1024;
  int64_t microbatch_size = 1;
  int threads = 1;         // CPU kernel threads
  int warmup = 1;          // untimed full passes first
  int repeats = 5;         // timed passes; the median of each (part, direction) is reported
  int layers = 1;          // layers actually built and timed (per-layer parts are averaged over
                           // them); the cost of one part does not depend on the model's depth
  TransferMode transfer = TransferMode::kWeights;
  Precision precision = Precision::fp32();  // the policy the parts run in (docs/precision.md)
  uint64_t seed = 1;
  // Also time attention's own QKV(+rotary) recompute under no-attn once per pass
  // (attn_recompute_f; 0 when off).
  bool measure_attn_recompute = true;
  // Ranks of a tensor-parallel group the parts are split over (docs/tensor-parallel.md): each
  // rank times its shard of every part, collectives included, and the profile keeps one rank's
  // compute and the group's time per collective (profile_launch splits the world into groups).
  int tensor_parallel = 1;
  // Link: measured with an in-process memcpy of one activation message unless given (> 0).
  double link_latency_s = -1;
  double link_bandwidth_Bps = -1;
};

struct PartProfile {
  PartTable time;    // median seconds per micro-batch of one part of each kind, F, I and W
  PartTable spread;  // of the repetitions behind each: (max - min) / median
  // With tensor_parallel > 1, `time` is one rank's compute alone (each part's time less the
  // seconds inside its collectives), the slowest rank's cell by cell: a group runs at its slowest
  // rank's pace. `collective_s` is one all-gather or reduce-scatter of the N x h activation: the
  // median over the profile's collectives of that size (not the head's loss statistics) of the
  // group's shortest time for each (the rank that arrives last waits for the data only).
  // `collectives` counts them per part (one rank's, per micro-batch: the runtime's counts, a split
  // W re-gathering its inputs).
  int tensor_parallel = 1;
  double collective_s = 0;
  PartTable collectives;
  double attn_recompute_f = 0;  // attention's own QKV(+rotary) recompute under no-attn
  // The measured post F split by its GEMM FLOPs (post_gemm_shares, sim/cost_model.h): its gate
  // and up GEMMs and its down projection, for recomputed posts (CostModel::post_recompute_extra).
  double post_gate_up_f = 0, post_down_f = 0;
  double link_latency_s = 0;
  double link_bandwidth_Bps = 0;
  std::string link_source;  // "memcpy (in-process)" or "given"
  int64_t message_bytes = 0;  // one activation message (b * s * h * bytes of the compute type)
  std::string blas_core;
  int threads = 1;

  // The part-cost JSON (only the keys from_part_costs accepts).
  nlohmann::json to_json() const;
};

// A check of the costs on P = 1: the wall time of one whole single-process training step
// (loss_and_grads over all cfg.layers, `microbatches` micro-batches, no recomputation) against the
// sum of the profiled part times for the same work (M * (embed + L * (pre + attn + post) + head),
// F + I + W each).
struct StepCheck {
  int microbatches = 0;
  int layers = 0;
  double measured_s = 0;   // median of `repeats` steps after one warm-up
  double predicted_s = 0;  // from the part profile
  int64_t peak_store_bytes = 0;  // ValueStore peak during the step (activations + stash)
};
StepCheck check_step(const ModelConfig& cfg, const ProfileOptions& opt, const PartProfile& parts,
                     int microbatches);

// A model with opt.layers layers of `cfg`'s shape (random weights, random tokens), built once and
// timed pass after pass: every part's F in model order, then its I and W in reverse, each as its
// own op. Keeping it between passes reuses warm memory (bench's calibration passes between timed
// steps). Throws hp::Error on a bad option.
class PartTimer {
 public:
  // With `tensor` (a communicator holding exactly one tensor-parallel group, every rank of it
  // constructing a PartTimer and running the same passes in the same order), each rank holds
  // its shard of the parts and the passes run the group's collectives; parts are then timed by
  // wall time (a collective waits on the other ranks) whatever the threads.
  PartTimer(const ModelConfig& cfg, const ProfileOptions& opt, Comm* tensor = nullptr);
  ~PartTimer();
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;
  // One pass under `policy`: seconds of one part of each kind per micro-batch, F, I and W (the
  // per-layer kinds averaged over the layers), on ProfileOptions' clock.
  PartTable pass(Recompute policy);
  // What the last pass spent in the group's collectives (all zero without a group): seconds and
  // counts per micro-batch in pass()'s cells (so pass() less `seconds` is the compute), and the
  // seconds of each collective in call order with the bytes this rank sent in it.
  struct Collectives {
    PartTable seconds, count;
    std::vector<double> each;
    std::vector<int64_t> each_bytes;
  };
  const Collectives& last_collectives() const;
  // Seconds of the work attention's backward adds under no-attn, timed alone on the same backend
  // and clock: rebuilding QKVr of one micro-batch from A and W_qkv (weights mode) or from QKV
  // (activations mode), the projection and the rotary (Model::run's make_qkvr). One untimed call,
  // then the median of `repeats`. With a group: the rank's compute alone (less the all-gather of A
  // that the weights mode's projection starts with).
  double qkv_recompute(int repeats = 3);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs warm-up + repeated passes over a model with opt.layers layers of `cfg`'s shape (random
// weights, random tokens). Throws hp::Error on a bad option. With `tensor` (size
// opt.tensor_parallel, every rank calling this at once): one rank's shard of every part, as
// PartProfile describes; every rank returns the same profile.
PartProfile profile_parts(const ModelConfig& cfg, const ProfileOptions& opt,
                          Comm* tensor = nullptr);

// A profile as `helixpipe profile` takes it. With a `world` of 2 or more ranks (mpirun), the link
// is measured first by an MPI ping-pong between ranks 0 and 1 (unless opt gives it), then every
// rank profiles the parts at once, loading the cores as a pipeline does; rank 0 returns the
// result, the others nullopt. Without one: the parts in this process and an in-process estimate
// of the link. opt.tensor_parallel = T > 1 needs a world of a multiple of T ranks, split into
// groups of T consecutive ranks (as train and bench lay a group out), each profiling its shards;
// rank 0 reports its group's.
std::optional<PartProfile> profile_launch(Comm* world, const ModelConfig& cfg, ProfileOptions opt);

// What `profile` prints as text: the part costs, the link, with a group its collectives beside
// the link model's charge for them, and the step check when there is one.
std::string profile_report_text(const ModelConfig& cfg, const ProfileOptions& opt,
                                const PartProfile& p, const std::optional<StepCheck>& step);

// What `profile --format=json` prints: the part costs and what they were measured on.
nlohmann::json profile_report_json(const ModelConfig& cfg, const ProfileOptions& opt,
                                   const PartProfile& p, const std::optional<StepCheck>& step);

}  // namespace hp
