// AdaPipe (ASPLOS'24) as a baseline: a 1F1B pipeline whose layer partition is uneven and whose
// recomputation is chosen stage by stage, both searched so that every stage fits its memory and
// the slowest stage is as fast as it can be (docs/simulator.md "AdaPipe").
//
// The search sees a table: for stage i holding n layers under recompute policy r, the seconds one
// micro-batch's forward plus backward takes there, T(i, n, r), and the bytes the stage needs,
// M(i, n, r) (for 1F1B: its parameters' states, min(m, p - i) micro-batches of stash, one layer's
// working memory). Because a stage's memory depends only on its own n and r, the best policy of a
// (stage, layer count) is the fastest one that fits:
//   c(i, n) = min { T(i, n, r) : M(i, n, r) <= limit }   (infinite when none fits),
// and the partition is a dynamic programme over (stages placed, layers placed):
//   B(0, 0) = 0;  B(i + 1, j) = min over n >= 1 of max(B(i, j - n), c(i, n));
// B(p, L) is the bottleneck the plan reaches. A second pass over the same states keeps only
// stages with c(i, n) <= B(p, L) and minimises the sum of the stage times instead (less total
// work: a shorter fill and drain), S(i + 1, j) = min over n of S(i, j - n) + c(i, n); the plan is
// read back from it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "schedule/ir.h"
#include "schedule/values.h"
#include "sim/cost_model.h"
#include "sim/parallel.h"
#include "sim/sim_setup.h"
#include "util/model_config.h"

namespace hp {

struct AdaPipeTable {
  int stages = 0, layers = 0;
  // The policies to choose from; among equally fast ones the earlier wins.
  std::vector<Recompute> policies = {Recompute::kNone, Recompute::kNoAttn, Recompute::kSelective,
                                     Recompute::kFull};
  std::function<double(int stage, int layers, Recompute policy)> time;    // T(i, n, r), seconds
  std::function<double(int stage, int layers, Recompute policy)> memory;  // M(i, n, r), bytes
  double memory_limit = 0;  // bytes per device; <= 0: no limit
};

struct AdaPipePlan {
  bool found = false;               // false: no partition fits the memory
  std::vector<int> layers;          // per stage, summing to L
  std::vector<Recompute> recompute; // per stage
  std::vector<double> stage_time;   // T of each stage's choice
  std::vector<double> stage_memory; // M of each stage's choice
  double bottleneck = 0;            // max of stage_time
};

// The two-pass dynamic programme above. Needs 1 <= stages <= layers.
AdaPipePlan adapipe_search(const AdaPipeTable& table);

// The table of a 1F1B pipeline of `stages` stages, `microbatches` micro-batches and `layers`
// layers on `cost` (the same CostModel::op_time the simulator charges: a forward op and a backward
// op over the stage's parts, the first stage with the embedding, the last with the head). With a
// model config the memory is stage_gpu_memory() (sim/parallel.h) with stage_params_per_gpu() and
// min(m, p - i) * op_stash_bytes() (sim/memory.h) for micro-batches of `tokens` at `eb`; without
// one it is 0. The table's time refers to `cost`, which must outlive it.
AdaPipeTable adapipe_table(const CostModel& cost, const ModelConfig* cfg, int64_t tokens,
                           ElemBytes eb, const Layout& layout, TransferMode transfer, int stages,
                           int microbatches, int layers, double memory_limit,
                           int64_t mlp_chunk = 0);

// adapipe_search() on the table of `c` (its cost model, model config, micro-batch tokens, element
// bytes, layout and transfer mode) for p = `stages`, m = `microbatches`, L = `layers`.
AdaPipePlan adapipe_plan(const CostSetup& c, int stages, int microbatches, int layers,
                         double memory_limit);

// The memory per GPU of the stage of a per-stage plan that needs the most: stage i holds
// stage_layers[i] layers (the embedding on stage 0, the head on the last) and peaks at
// stash_bytes[i] (its whole TP group's).
GpuMemory plan_gpu_memory(const ModelConfig& cfg, const Layout& layout, int64_t tokens,
                          const std::vector<int>& stage_layers,
                          const std::vector<double>& stash_bytes, int64_t mlp_chunk,
                          int bytes_per_elem);

// Parameters (elements) per GPU of the stage of a per-stage plan that holds the most, in a TP
// group of `tp` (stage_params_per_gpu, sim/parallel.h).
double plan_max_params(const ModelConfig& cfg, const std::vector<int>& stage_layers, int tp);

// "4,4,5" and "none,no-attn,full", for labels and JSON.
std::string join_layers(const std::vector<int>& layers);
std::vector<std::string> recompute_names(const std::vector<Recompute>& policies);
// "layers 3,2,2 recompute full,no-attn,none".
std::string adapipe_plan_str(const std::vector<int>& layers, const std::vector<Recompute>& policies);

}  // namespace hp
