#include "runtime/dist_trainer.h"

#include <algorithm>
#include <cmath>

#include "checkpoint/safetensors.h"
#include "runtime/model_io.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

DistTrainer::DistTrainer(Comm& world, Schedule sch, int data_parallel, const ModelConfig& cfg,
                         Backend& be, StepShape shape, ModelOptions model_opt, Precision prec,
                         TrainState state, int tensor_parallel)
    : world_(world),
      sch_(std::move(sch)),
      grid_(split_grid(world, data_parallel, sch_.num_stages, tensor_parallel)),
      cfg_(cfg),
      be_(be),
      shape_(shape),
      global_(shape),
      opt_(be, state.adamw),
      state_(std::move(state)) {
  shape_.validate();
  HP_CHECK(sch_.microbatches == shape_.microbatches,
           "the schedule has {} micro-batches but a replica's step has {}; make them agree",
           sch_.microbatches, shape_.microbatches);
  global_.microbatches = shape_.microbatches * data_parallel;
  check_and_record_run(state_, global_);  // the global batch: M per replica x D
  stage_ = std::make_unique<DistStage>(sch_, grid_, cfg_, be_, shape_.microbatch_size,
                                       shape_.seq_len, model_opt, prec);
}

void DistTrainer::load_params(const CheckpointInfo& info) {
  load_checkpoint_params(info, stage_->params());
}

void DistTrainer::load_optimizer(const std::string& path) {
  const std::vector<ParamRef> refs = param_refs(stage_->params());
  opt_.load_state(SafetensorsReader::open(path), refs, state_.step);
}

StepRecord DistTrainer::step(const SequenceReader& data) {
  const double t0 = now_seconds();
  read_step_batch(data, state_.next_sequence, global_, /*wrap=*/true, tokens_, targets_);
  const int64_t off = static_cast<int64_t>(grid_.d) * shape_.tokens();
  const DistStepResult r = stage_->loss_and_grads(tokens_.data() + off, targets_.data() + off,
                                                  ExecutorOptions{timeline_, t0});
  // The loss is reduced over every rank, so all of them stop here together.
  HP_CHECK(std::isfinite(r.loss),
           "step {}: the loss ({}) is not finite; training diverged. Lower --lr, raise --warmup, "
           "or keep --clip > 0",
           state_.step + 1, r.loss);
  const double lr = state_.lr.at(state_.step);
  const double norm = stage_->optimizer_step(opt_, lr, state_.clip);
  double busy_total[2] = {r.stats.busy_s, r.stats.total_s};
  world_.allreduce_sum(busy_total, 2);
  bubble_ = busy_total[1] > 0 ? 1 - busy_total[0] / busy_total[1] : 0;
  peak_stash_ = r.stats.peak_stash_bytes;
  tp_stats_ = r.tp;
  state_.step += 1;
  state_.next_sequence += global_.sequences();
  state_.tokens_seen += global_.tokens();
  const double secs = now_seconds() - t0;
  StepRecord rec{state_.step, r.loss, lr, norm, secs,
                 secs > 0 ? static_cast<double>(global_.tokens()) / secs : 0};
  state_.history.push_back(rec);
  return rec;
}

void DistTrainer::save(const std::string& dir, StDType model_dtype) {
  const bool with_optimizer = model_dtype == StDType::kF32;  // the same on every rank
  const bool root = world_.rank() == 0;
  Params full(cfg_, root ? Params::all_parts(cfg_) : std::vector<Part>{}, be_);
  std::vector<std::vector<float>> storage;
  std::vector<StWriteTensor> moments;
  if (grid_.d == 0) {
    stage_->gather_params(grid_.p == 0 ? &full : nullptr);
    if (with_optimizer) moments = stage_->gather_optimizer_state(opt_, storage);
  }
  if (root) {
    CheckpointContents c;
    c.config = model_config_to_hf(cfg_);
    std::vector<float> host;
    c.model = params_write_tensors(full, host);
    // In the single-process order: the model's tensors in order, each one's two moments.
    const std::vector<ParamRef> refs = with_optimizer ? param_refs(full) : std::vector<ParamRef>{};
    for (const ParamRef& p : refs)
      for (const std::string& name : {"exp_avg." + p.name, "exp_avg_sq." + p.name}) {
        auto it = std::find_if(moments.begin(), moments.end(),
                               [&](const StWriteTensor& t) { return t.name == name; });
        HP_CHECK(it != moments.end(), "internal: no stage sent the optimizer state '{}'", name);
        c.optimizer.push_back(*it);
      }
    c.trainer_state = state_.to_json();
    c.model_dtype = model_dtype;
    save_checkpoint(dir, c, before_marker_);
  }
  world_.barrier();
}

}  // namespace hp
