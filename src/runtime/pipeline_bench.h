// Measured pipeline steps for `helixpipe bench`: every rank runs the same DistStage and
// StageExecutor the trainers use, one stage per rank, and the results come back as numbers;
// runtime/bench_run.h sets them beside the simulator's predictions and cli/cmd_bench.cc prints them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "comm/comm.h"
#include "kernels/dtype.h"
#include "model/tensor_parallel.h"
#include "runtime/executor.h"
#include "schedule/ir.h"
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
  int64_t grad_bytes = 0;      // the gradients alone: what the replicas' all-reduce sums
};

// What one schedule measured, identical on every rank after the exchange.
struct Measured {
  std::vector<double> step_s;       // per timed step: the slowest rank's wall time
  int median_step = 0;              // the index in step_s of the median step (the lower middle one)
  std::vector<StageStats> stages;   // the median step, per stage (replica 0, tensor rank 0)
  std::vector<RankMeasured> ranks;  // the median step, per world rank
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
// b.seq_len): one warm-up step, then b.steps timed steps, with fresh parameters (seed 1). When
// given, `between` runs on every rank at once (barriers around it) before each timed step and
// after the last one, outside the timed steps. The timeline, when asked, is the last step's.
Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b, bool want_timeline,
                          const std::function<void()>& between = {});

// The index of the median of `v` (the lower of the two middle ones for an even count); v not empty.
size_t median_index(const std::vector<double>& v);

// How fast each stage's core ran the parts during one run, against the part costs: every rank times
// a one-layer model's parts (F, I and W of each kind, on the profile's clock; one untimed pass,
// then the mean of three) before each timed step and after the last, all ranks at once, so the
// cores are loaded as in the pipeline. A factor > 1: that core ran the part slower than the profile
// measured.
struct Calibration {
  std::vector<PartTable> parts;  // per stage: each cell's median over the passes (predictions)
  std::vector<std::vector<PartTable>> steps;  // [step][stage]: the mean of the passes around it
  std::vector<std::vector<double>> core;      // [stage][pass]: pre + attn + post together
  std::vector<double> scale;                  // per stage: the median of core (reported)
};
// The factors from each pass's part times, times[pass][stage] (>= 2 passes, pass k before step
// k); `cost` holds the part costs. A cell timed as zero (by the costs or the pass) takes the pass's
// pre + attn + post factor.
Calibration calibrate(const std::vector<std::vector<PartTable>>& times, const CostModel& cost);

// Each stage's calibration pass from the passes of every rank that holds it (world rank
// (d*P + p)*t + tp holds stage p: its t tensor ranks in each of the replicas): cell by cell the
// slowest, since every collective inside a part waits for the group's last rank and the replicas'
// gradient all-reduce for the last replica. `stages` = P (0: one stage per group of t, D = 1).
std::vector<PartTable> slowest_of_groups(const std::vector<PartTable>& ranks, int t,
                                         int stages = 0);

// One schedule's run for bench: measure_pipeline with, when `cost` is given, the calibration passes
// between the steps (every rank times the whole one-layer parts and each stage takes the slowest of
// its ranks over the tensor group and the replicas, slowest_of_groups). On `world` when given (D x
// P x T ranks), else on as many in-process ranks (LocalWorld). The result is rank 0's (empty
// elsewhere).
struct CalibratedRun {
  Measured m;
  std::optional<Calibration> cal;  // with a cost model
};
CalibratedRun measure_calibrated(Comm* world, const Schedule& sch, const BenchSetup& b,
                                 const CostModel* cost, bool want_timeline);

}  // namespace hp
