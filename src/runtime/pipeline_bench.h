// Measured pipeline steps for `helixpipe bench`: every rank runs the same DistStage and
// StageExecutor the trainers use, one stage per rank, and the results come back as numbers; the
// CLI (cli/cmd_bench.cc) sets them beside the simulator's predictions and prints them.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "kernels/dtype.h"
#include "runtime/executor.h"
#include "schedule/ir.h"
#include "sim/cost_model.h"
#include "sim/timeline.h"
#include "util/model_config.h"

namespace hp {

// What one schedule measured, identical on every rank after the exchange.
struct Measured {
  std::vector<double> step_s;       // per timed step: the slowest stage's wall time
  std::vector<StageStats> stages;   // the last timed step, per stage
  Timeline timeline;                // rank 0 only, when asked: every stage's events
};

struct BenchSetup {
  ModelConfig cfg;
  int64_t seq_len = 0;              // one sequence per micro-batch
  int threads = 1, steps = 1;       // kernel threads per rank; timed steps
  Precision precision = Precision::fp32();
  const std::vector<int32_t>* tokens = nullptr;   // M * seq_len each
  const std::vector<int32_t>* targets = nullptr;
};

// Collective over `world` (P ranks, one stage each; `sch` lowered for b.cfg and b.seq_len): one
// warm-up step, then b.steps timed steps, with fresh parameters (seed 1).
Measured measure_pipeline(Comm& world, const Schedule& sch, const BenchSetup& b,
                          bool want_timeline);

// Collective over `world`: every rank times one pass of the per-layer parts (pre, attn, post; F,
// I and W) on its own core at once, as the pipeline will load them, and divides by the same sum
// from the part costs. Returns every rank's factor (> 1: this core runs slower now than the
// profile measured), which predictions use as per-stage compute scales.
std::vector<double> calibrate_cores(Comm& world, const BenchSetup& b, const CostModel& cost);

// One schedule's run for bench: measure_pipeline, bracketed (when `cost` is given) by
// calibrate_cores right before and right after (the cores of a shared machine change speed
// within minutes); scale[q] is stage q's mean factor. On `world` when given (one rank per stage),
// else on sch.num_stages in-process ranks (LocalWorld). The result is rank 0's (empty elsewhere).
struct CalibratedRun {
  Measured m;
  std::vector<double> before, after, scale;
};
CalibratedRun measure_calibrated(Comm* world, const Schedule& sch, const BenchSetup& b,
                                 const CostModel* cost, bool want_timeline);

}  // namespace hp
