// Single-process training: checkpoints <-> Params, one optimizer step (gradient accumulation over
// micro-batches, global-norm clipping, AdamW, warmup + cosine LR), and resumable state. The
// pipelined runtime (executor) reuses the checkpoint helpers; runtime/train_run.h drives the loop
// and prints progress for `helixpipe train`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "data/batching.h"
#include "data/token_file.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/params.h"
#include "runtime/optimizer.h"
#include "runtime/train_state.h"
#include "util/model_config.h"

namespace hp {

// The optimizer's view of every parameter a Params holds (name, shape, value, gradient, and the
// compute-type copy to refresh when the precision keeps one).
std::vector<ParamRef> param_refs(Params& params);

// Per-tensor sums of squares of the gradients, in tensor order (global_norm_from_partials),
// computed by the backend's kernels.
std::vector<double> grad_square_partials(const Params& params);

// config.json of an opened checkpoint as a ModelConfig (model_io rules), checked against the
// tensor names and shapes in the header of its model.safetensors.
ModelConfig checkpoint_model_config(const CheckpointInfo& info);

// Loads the tensors `params` holds from the checkpoint's model.safetensors (the other tensors must
// be in the file but are skipped: a pipeline stage loads its own parts only), through a host copy
// of the master weights (f32), and refreshes the compute-type copy.
void load_checkpoint_params(const CheckpointInfo& info, Params& params);

// The model.safetensors tensors of `params` (which must hold the whole model; f32 master weights
// or, with grads, their gradients), downloaded into `host`: the views point into it.
std::vector<StWriteTensor> params_write_tensors(const Params& params, std::vector<float>& host,
                                                bool grads = false);

// Writes a checkpoint folder: config.json + model.safetensors (+ generation config and tokenizer),
// plus optimizer.safetensors and trainer_state.json when `opt`/`state` are given. `params` must
// hold the whole model. `model_dtype` kBF16 stores the weights rounded to bf16 (not resumable:
// `opt` must then be null; CheckpointContents::model_dtype).
void save_training_checkpoint(const std::string& dir, Params& params, AdamW* opt,
                              const TrainState* state, StDType model_dtype = StDType::kF32);

// The shape of one training step.
struct StepShape {
  static constexpr int64_t kMaxTokensPerStep = int64_t{1} << 40;
  int64_t seq_len = 256;         // S
  int64_t microbatch_size = 1;   // B: sequences per micro-batch
  int64_t microbatches = 1;      // M: micro-batches accumulated per step
  Recompute recompute = Recompute::kNone;
  int64_t sequences() const { return microbatch_size * microbatches; }
  int64_t tokens() const { return sequences() * seq_len; }  // target tokens per step
  void validate() const;  // hp::Error naming the flag
};

// Reads B*M consecutive sequences starting at global sequence `first` into tokens/targets laid out
// as loss_and_grads wants them (micro-batch j, row r is sequence first + j*B + r). With `wrap`,
// indices wrap around the end of the data (training epochs); without, they must all exist.
void read_step_batch(const SequenceReader& reader, int64_t first, const StepShape& shape, bool wrap,
                     std::vector<int32_t>& tokens, std::vector<int32_t>& targets);

// Checks a run's settings (the global step shape, LR schedule, AdamW settings, clip) and records
// the shape in `state`; Trainer and DistTrainer both start with it.
void check_and_record_run(TrainState& state, const StepShape& global);

// What a training loop needs from a run, in one process (Trainer) or as one rank of a pipelined
// job (DistTrainer, runtime/dist_trainer.h).
class TrainEngine {
 public:
  virtual ~TrainEngine() = default;
  // One optimizer update on the next global batch of `data`; appends to and returns the history.
  virtual StepRecord step(const SequenceReader& data) = 0;
  // Writes a whole-model checkpoint (model, optimizer, trainer state); every rank calls it. With
  // `model_dtype` kBF16 the model is stored in bf16 and no optimizer state is written (such a
  // checkpoint is for inference and interoperation, not for --resume).
  virtual void save(const std::string& dir, StDType model_dtype) = 0;
  void save(const std::string& dir) { save(dir, StDType::kF32); }
  virtual const TrainState& state() const = 0;
};

struct TrainLoopOptions {
  int64_t end = 0;         // run until state().step == end
  std::string save;        // checkpoint folder ("": none)
  int64_t save_every = 0;  // also save after every this many steps (0: at the end only)
  StDType save_dtype = StDType::kF32;  // how the saves store the model (TrainEngine::save)
};

// Steps `engine` until opt.end: before each update calls `before_step` with the number the step
// will have, after it `on_step`, then saves when the step is a multiple of save_every; saves once
// more at the end when opt.save is set. Either callback may be empty.
void run_train_loop(TrainEngine& engine, const SequenceReader& data, const TrainLoopOptions& opt,
                    const std::function<void(const StepRecord&)>& on_step,
                    const std::function<void(int64_t)>& before_step = {});

// A whole-model training run in one process, on the backend and in the precision of its Params.
// Holds the model, optimizer and state; step() runs one update on the next global batch of the
// data: the batch is read on the host, checked and uploaded, and the loss and gradient norm are
// the only values read back.
class Trainer : public TrainEngine {
 public:
  // `params` must hold the whole model (Params::all_parts). The state carries the LR schedule,
  // AdamW settings, clip, the data position and history (fresh or from a checkpoint).
  Trainer(const ModelConfig& cfg, Params& params, ModelOptions model_opt, StepShape shape,
          TrainState state);

  // Loads optimizer moments and step count from a checkpoint's optimizer.safetensors.
  void load_optimizer(const std::string& path);

  // One update: zero grads, mean loss and gradient over B*M sequences from state().next_sequence
  // (wrapping around the data), global norm, clip, AdamW with lr = schedule.at(step). Throws
  // hp::Error when the loss or the gradient is not finite (what to try is in the message).
  StepRecord step(const SequenceReader& data) override;

  // Saves model + optimizer + trainer state (model + trainer state with kBF16).
  using TrainEngine::save;
  void save(const std::string& dir, StDType model_dtype) override;

  const TrainState& state() const override { return state_; }
  TrainState& state() { return state_; }
  const StepShape& shape() const { return shape_; }
  Params& params() { return params_; }
  Model& model() { return *model_; }
  AdamW& optimizer() { return opt_; }
  // Activations live here across steps (their buffers come back from the backend's cache, so
  // steps after the first make no system allocations).
  const ValueStore& store() const { return store_; }

 private:
  ModelConfig cfg_;
  Params& params_;
  std::unique_ptr<Model> model_;
  StepShape shape_;
  TrainState state_;
  AdamW opt_;
  std::vector<ParamRef> refs_;
  std::vector<int32_t> tokens_, targets_;
  TokenBuffer tokens_dev_, targets_dev_;
  ValueStore store_;
};

// Model FLOPs of one training step (forward + backward, no recomputation counted): 6 * (matrix
// parameters) per token plus causal attention (about 6 * s * h per token per layer for fwd+bwd).
double train_step_flops(const ModelConfig& cfg, const StepShape& shape);

}  // namespace hp
