// One distributed training step over a D x P x T grid (world rank = (d * P + p) * T + t;
// comm/split_grid): replica d runs the lowered schedule on its P pipeline stages over its own
// micro-batches, each stage held by a tensor-parallel group of T ranks (docs/tensor-parallel.md;
// T = 1: one rank). After the stage's last compute op the group sums the gradients of its
// replicated tensors, then the gradients of each stage are summed over the D replicas (overlapping
// the trailing sends), and the loss is reduced over stages and replicas. Every rank ends with the
// global mean loss and the gradient of that mean for its block of its stage's parameters;
// global_grad_norm() reduces the partial sums of squares over the group and the stages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/params.h"
#include "model/tensor_parallel.h"
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
  TpGroup::Stats tp;  // this rank's tensor-parallel collectives in the step (none without TP)
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
  // Copies every stage's parameters into `full` (a whole-model Params) on stage 0, tensor rank 0
  // (for checkpoints); other ranks only send. Collective over the replica's ranks: a stage's
  // group first assembles whole tensors on its rank 0, then those ranks send to stage 0.
  void gather_params(Params* full);
  // The same for the gradients (into full's gradients, by tensor name).
  void gather_grads(Params* full);
  // The AdamW moments of every stage (`opt` holds this rank's), as optimizer.safetensors tensors
  // (exp_avg.<name>, exp_avg_sq.<name>, f32, whole) on stage 0, tensor rank 0: views into
  // `storage` and into `opt`'s host copies, valid while both live. The other ranks send theirs
  // and get an empty list. Collective over the replica's ranks.
  std::vector<StWriteTensor> gather_optimizer_state(AdamW& opt,
                                                    std::vector<std::vector<float>>& storage);

  Params& params() { return *params_; }
  Model& model() { return *model_; }
  ValueStore& store() { return store_; }
  const Schedule& schedule() const { return sch_; }
  int stage() const { return grid_.p; }
  int replica() const { return grid_.d; }
  int tensor_rank() const { return grid_.t; }
  TpGroup* tensor_group() { return tp_.get(); }
  GridComms& grid() { return grid_; }

 private:
  // The stage's parameters (or gradients) as whole tensors on tensor rank 0, assembled from the
  // group's blocks; nullptr on the other ranks, which send theirs. Collective over the group.
  std::unique_ptr<Params> assemble_stage(bool grads);
  void pipeline_gather_params(const Params& mine, Params* full);
  void pipeline_gather_grads(const Params& mine, Params* full);

  const Schedule& sch_;
  GridComms& grid_;
  ModelConfig cfg_;
  int64_t b_, s_;
  Backend& be_;
  std::unique_ptr<TpGroup> tp_;  // null without tensor parallelism
  std::unique_ptr<Params> params_;
  std::unique_ptr<Model> model_;
  ValueStore store_;
  TokenBuffer tokens_, targets_;
  std::unique_ptr<StageExecutor> exec_;
};

}  // namespace hp
