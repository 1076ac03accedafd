// Measured pipeline steps for `helixpipe bench`: every rank runs the same DistStage and
// StageExecutor the trainers use, one stage per rank, and the results come back as numbers;
// runtime/bench_run.h sets them beside the simulator's predictions and cli/cmd_bench.cc prints them.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "kernels/dtype.h"
#include "runtime/executor.h"
#include "schedule/ir.h"
#include "model/tensor_parallel.h"
#include "sim/cost_model.h"
#include "sim/timeline.h"
#include "util/model_config.h"

namespace hp {

// One rank's share of the last timed step beyond its stage's StageStats: its tensor-parallel
// collectives and the bytes its parameters hold.
struct RankMeasured {
  int64_t tp_collectives = 0, tp_bytes_sent = 0;
  double tp_seconds = 0;       // wall time inside the group's collectives (waits included)
  // Of tp_seconds: summed over the collectives, the group's shortest time in each (the rank that
  // arrived last waits only for the transfer) and what this rank waited beyond that (the group's
  // ranks reaching the collective at different times).
  double tp_transfer_s = 0, tp_skew_s = 0;
  int64_t peak_store_bytes = 0;
  int64_t param_bytes = 0;     // weights, gradients and the compute copy of this rank's block
};

// What one schedule measured, identical on every rank after the exchange.
struct Measured {
  std::vector<double> step_s;       // per timed step: the slowest rank's wall time
  std::vector<StageStats> stages;   // the last timed step, per stage (replica 0, tensor rank 0)
  std::vector<RankMeasured> ranks;  // the last timed step, per world rank
  // With tensor parallelism: world rank 0's group timed alone right after the steps
  // (measure_group_link); zero otherwise.
  LinkProfile tp_link;
  Timeline timeline;                // rank 0 only, when asked: replica 0's stages' events
};

struct BenchSetup {
  ModelConfig cfg;
  int64_t seq_len = 0;              // one sequence per micro-batch
  int threads = 1, steps = 1;       // kernel threads per rank; timed steps
  Precision precision = Precision::fp32();
  const std::vector<int32_t>* tokens = nullptr;   // M * seq_len each
  const std::vector<int32_t>* targets = nullptr;
  int data_parallel = 1;            // D replicas, each running the schedule on its own M
  int tensor_parallel = 1;          // T ranks per stage (docs/tensor-parallel.md)
};

// The link a tensor-parallel group's collectives see, timed with the group's own all-gathers and
// reduce-scatters (the exchange in both directions at once, the summing of received blocks, cold
// caches) of `n` and n/8 elements of `t` per rank, the median of `repeats` each: latency per
// message and bandwidth per byte a rank sends, fitted to the two sizes. Collective over the group;
// leaves its stats as they were.
LinkProfile measure_group_link(TpGroup& group, DType t, int64_t n, int repeats);

// Collective over `world` (D x P x T ranks, comm/split_grid's layout; `sch` lowered for b.cfg and
// b.seq_len): one warm-up step, then b.steps timed steps, with fresh parameters (seed 1).
Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b,
                          bool want_timeline);

// Collective over `world`: every rank times one pass of the per-layer parts (pre, attn, post; F,
// I and W) on its own core at once, as the pipeline will load them, and divides by the same sum
// from the part costs. Returns every rank's factor (> 1: this core runs slower now than the
// profile measured), which predictions use as per-stage compute scales.
std::vector<double> calibrate_cores(Comm& world, const BenchSetup& b, const CostModel& cost);

// One schedule's run for bench: measure_pipeline, bracketed (when `cost` is given) by
// calibrate_cores right before and right after (the cores of a shared machine change speed
// within minutes); scale[q] is stage q's mean factor (calibration needs D = T = 1). On `world`
// when given (D x P x T ranks), else on as many in-process ranks (LocalWorld). The result is
// rank 0's (empty elsewhere).
struct CalibratedRun {
  Measured m;
  std::vector<double> before, after, scale;
};
CalibratedRun measure_calibrated(Comm* world, const Schedule& sch, const BenchSetup& b,
                                 const CostModel* cost, bool want_timeline);

}  // namespace hp
