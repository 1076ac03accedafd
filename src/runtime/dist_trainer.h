// One rank's share of a pipelined training run over a D x P x T grid (comm/split_grid; T tensor-
// parallel ranks per stage, docs/tensor-parallel.md): the same
// contract as the single-process Trainer (runtime/trainer.h) -- one update on the next global
// batch, a whole-model checkpoint -- over a DistStage. Replica d reads micro-batches d*M .. d*M+M-1
// of every global batch of M*D micro-batches, so a run reads the same sequences at any D and P as
// the single process does with M*D micro-batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/comm.h"
#include "runtime/dist_step.h"
#include "runtime/trainer.h"
#include "sim/timeline.h"

namespace hp {

class DistTrainer : public TrainEngine {
 public:
  // Collective over `world` (D * P * T ranks; P = sch.num_stages). `sch` must be lowered for (cfg,
  // B*S) with shape.microbatches micro-batches: `shape` is one replica's share of a step. The
  // stage's parameters live in `be` (which must outlive this) in `prec`, uninitialised until
  // init_params or load_params.
  DistTrainer(Comm& world, Schedule sch, int data_parallel, const ModelConfig& cfg, Backend& be,
              StepShape shape, ModelOptions model_opt, Precision prec, TrainState state,
              int tensor_parallel = 1);

  void init_params() { stage_->params().init(state_.seed); }
  void load_params(const CheckpointInfo& info);
  // Loads this stage's AdamW moments (and the step count) from an optimizer.safetensors.
  void load_optimizer(const std::string& path);

  // One update (every rank): the loss and gradients of the global batch, the global norm over
  // every stage, clipping and AdamW per stage (DistStage::optimizer_step). Throws hp::Error on
  // every rank alike when the loss or the gradient norm is not finite.
  StepRecord step(const SequenceReader& data) override;
  // Gathers every stage's weights and moments on world rank 0, which writes the checkpoint in the
  // single-process layout (tensors in model order). Collective over the world. With kBF16 the
  // model is stored in bf16 and the moments are neither gathered nor written.
  using TrainEngine::save;
  void save(const std::string& dir, StDType model_dtype) override;
  const TrainState& state() const override { return state_; }
  // Runs on the writing rank in every save, after the checkpoint's files and before its marker
  // (save_checkpoint's before_marker): the test-only fault injection of train_run.cc.
  void set_before_checkpoint_marker(std::function<void()> fn) { before_marker_ = std::move(fn); }

  // Records the events of the following steps into `tl` (null: stop recording).
  void record_timeline(Timeline* tl) { timeline_ = tl; }
  // Of the last step: the bubble fraction of all stages together (1 - busy / total over every
  // rank) and this rank's peak stash.
  double last_bubble_fraction() const { return bubble_; }
  int64_t last_peak_stash_bytes() const { return peak_stash_; }
  // This rank's tensor-parallel collectives in the last step's forward and backward.
  const TpGroup::Stats& last_tp_stats() const { return tp_stats_; }

  const StepShape& global_shape() const { return global_; }
  const Schedule& schedule() const { return sch_; }
  GridComms& grid() { return grid_; }
  DistStage& stage() { return *stage_; }
  Comm& world() { return world_; }

 private:
  Comm& world_;
  Schedule sch_;
  GridComms grid_;
  ModelConfig cfg_;
  Backend& be_;
  StepShape shape_, global_;
  std::unique_ptr<DistStage> stage_;
  AdamW opt_;
  TrainState state_;
  std::vector<int32_t> tokens_, targets_;
  Timeline* timeline_ = nullptr;
  double bubble_ = 0;
  int64_t peak_stash_ = 0;
  TpGroup::Stats tp_stats_;
  std::function<void()> before_marker_;
};

}  // namespace hp
