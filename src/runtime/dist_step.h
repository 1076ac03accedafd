// One distributed training step over a D x P grid (world rank = d * P + p; comm/split_grid):
// replica d runs the lowered schedule on its P pipeline ranks over its own micro-batches, then the
// gradients of each stage are summed over the D replicas (started right after the stage's last
// compute op, so the all-reduce overlaps the trailing sends), and the loss is reduced over stages
// and replicas. Every rank ends with the global mean loss and the gradient of that mean for the
// parameters of its stage; global_grad_norm() reduces the partial sums of squares over stages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/params.h"
#include "runtime/executor.h"
#include "runtime/optimizer.h"
#include "schedule/ir.h"

namespace hp {

// Reads a schedule file (text or JSON), validates it for (cfg, tokens_per_mb) and lowers it.
// Throws hp::Error with the validator's full report when the schedule is broken, so every rank
// refuses it before anything is computed or sent.
Schedule load_checked_schedule(const std::string& path, const ModelConfig& cfg,
                               int64_t tokens_per_mb);

// The parts stage `stage` of a schedule runs (its parameters), in model order.
std::vector<Part> stage_parts(const Schedule& sch, int stage);

struct DistStepResult {
  double loss = 0;  // global mean loss (identical on every rank)
  StageStats stats;  // this rank's stage
};

class DistStage {
 public:
  // `sch` must be lowered for (cfg, B*S) and have grid.pipeline->size() stages. The stage's
  // parameters are allocated here in `be`'s memory (which must outlive this) and `prec`
  // (uninitialised; load or init them through params()).
  DistStage(const Schedule& sch, GridComms& grid, const ModelConfig& cfg, Backend& be,
            int64_t microbatch_size, int64_t seq_len, ModelOptions model_opt = {},
            Precision prec = Precision::fp32());

  // Zeroes the gradients, runs the step over this replica's M micro-batches (tokens/targets in
  // host memory, laid out as loss_and_grads wants: micro-batch j, row r at ((j*B + r)*S + i);
  // checked against the vocabulary and uploaded here), all-reduces gradients over the
  // data-parallel group and the loss over everyone. Comm moves backend memory (host backends
  // here).
  DistStepResult loss_and_grads(const int32_t* tokens, const int32_t* targets,
                                const ExecutorOptions& opt = {});
  // sqrt of the sum over all stages of the squared gradients (call on every rank after
  // loss_and_grads; the data-parallel replicas hold equal gradients then).
  double global_grad_norm();

  // Clip to max_norm (<= 0: no clipping) by the global norm over every stage, then one AdamW
  // update of this stage's parameters with `opt` (one AdamW per rank, holding its stage's moments).
  // Returns the global norm before clipping. Call on every rank after loss_and_grads.
  double optimizer_step(AdamW& opt, double lr, double max_norm);
  // Copies every stage's parameters into `full` (a whole-model Params) on world rank 0 of the
  // pipeline group of replica 0 (for checkpoints); other ranks only send. Collective over the
  // pipeline group.
  void gather_params(Params* full);
  // The same for the gradients (into full's gradients, by tensor name).
  void gather_grads(Params* full);
  // The AdamW moments of every stage (`opt` holds this stage's), as optimizer.safetensors tensors
  // (exp_avg.<name>, exp_avg_sq.<name>, f32) on stage 0 of the pipeline group: views into
  // `storage` and into `opt`'s host copies, valid while both live. The other stages send theirs
  // and get an empty list. Collective over the pipeline group.
  std::vector<StWriteTensor> gather_optimizer_state(AdamW& opt,
                                                    std::vector<std::vector<float>>& storage);

  Params& params() { return *params_; }
  Model& model() { return *model_; }
  ValueStore& store() { return store_; }
  const Schedule& schedule() const { return sch_; }
  int stage() const { return grid_.p; }
  int replica() const { return grid_.d; }
  GridComms& grid() { return grid_; }

 private:
  const Schedule& sch_;
  GridComms& grid_;
  ModelConfig cfg_;
  int64_t b_, s_;
  Backend& be_;
  std::unique_ptr<Params> params_;
  std::unique_ptr<Model> model_;
  ValueStore store_;
  TokenBuffer tokens_, targets_;
  std::unique_ptr<StageExecutor> exec_;
};

}  // namespace hp
