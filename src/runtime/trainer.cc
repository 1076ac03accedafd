// Single-process trainer and the checkpoint <-> Params glue.
#include "runtime/trainer.h"

#include <cmath>

#include "runtime/model_io.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {

std::vector<ParamRef> param_refs(Params& params) {
  std::vector<ParamRef> refs;
  refs.reserve(params.tensors().size());
  const bool copy = params.precision().weight_copy();
  for (const ParamTensor& t : params.tensors()) {
    refs.push_back({t.name, t.shape, params.data().at(t.offset), params.grads().at(t.offset),
                    copy ? params.compute_data().at(t.offset) : DataPtr(), &t, params.tp()});
  }
  return refs;
}

std::vector<double> grad_square_partials(const Params& params) {
  std::vector<double> partials;
  partials.reserve(params.tensors().size());
  Kernels& k = params.backend().kernels();
  for (const ParamTensor& t : params.tensors())
    partials.push_back(k.sum_squares(params.grads().at(t.offset), t.numel));
  return partials;
}

ModelConfig checkpoint_model_config(const CheckpointInfo& info) {
  const ModelConfig cfg = model_config_from_hf(info.config, info.dir + "/" + kConfigFile);
  cfg.check_runtime_supported();  // eval, generate, train --checkpoint/--resume
  // The weights file must match before anyone allocates parameters for this config.
  check_model_safetensors(info.model_path, cfg);
  return cfg;
}

void load_checkpoint_params(const CheckpointInfo& info, Params& params) {
  HP_CHECK(params.precision().master == DType::kF32,
           "checkpoints hold f32 weights; load them into f32 master weights (precision fp32 or "
           "bf16), not {}",
           dtype_name(params.precision().master));
  if (params.tp().size > 1) {  // checkpoints hold whole tensors: load them, keep this rank's blocks
    Params whole(params.config(), params.parts(), params.backend(), params.precision());
    load_checkpoint_params(info, whole);
    params.copy_from(whole);
    return;
  }
  std::vector<float> host = params.host_values<float>();
  load_model_safetensors(info.model_path, params.config(), [&](const std::string& name) -> float* {
    const ParamTensor* t = params.find(name);
    return t ? host.data() + t->offset : nullptr;
  });
  params.set_values(host);
}

std::vector<StWriteTensor> params_write_tensors(const Params& params, std::vector<float>& host,
                                                bool grads) {
  HP_CHECK(params.precision().master == DType::kF32,
           "checkpoints hold f32 weights; these are {}", dtype_name(params.precision().master));
  host = grads ? params.host_grads<float>() : params.host_values<float>();
  return model_write_tensors(params.config(), [&](const std::string& name) -> const float* {
    const ParamTensor* t = params.find(name);
    HP_CHECK(t != nullptr, "cannot write '{}': this process does not hold it", name);
    return host.data() + t->offset;
  });
}

void save_training_checkpoint(const std::string& dir, Params& params, AdamW* opt,
                              const TrainState* state, StDType model_dtype) {
  const ModelConfig& cfg = params.config();
  for (const HfTensorSpec& s : hf_tensor_specs(cfg))
    HP_CHECK(params.find(s.name) != nullptr,
             "cannot save '{}': this process does not hold tensor '{}'", dir, s.name);
  CheckpointContents c;
  c.config = model_config_to_hf(cfg);
  std::vector<float> host;
  c.model = params_write_tensors(params, host);
  std::vector<ParamRef> refs;
  if (opt != nullptr) {
    refs = param_refs(params);
    c.optimizer = opt->state_tensors(refs);
  }
  if (state != nullptr) c.trainer_state = state->to_json();
  c.model_dtype = model_dtype;
  save_checkpoint(dir, c);
}

void StepShape::validate() const {
  HP_CHECK(seq_len >= 1, "--seq-len must be >= 1, got {}", seq_len);
  HP_CHECK(microbatch_size >= 1, "--microbatch-size must be >= 1, got {}", microbatch_size);
  HP_CHECK(microbatches >= 1, "--microbatches must be >= 1, got {}", microbatches);
  HP_CHECK(seq_len <= TrainState::kMaxSeqLen, "--seq-len must be at most {}, got {}",
           TrainState::kMaxSeqLen, seq_len);
  HP_CHECK(microbatch_size <= TrainState::kMaxMicrobatch,
           "--microbatch-size must be at most {}, got {}", TrainState::kMaxMicrobatch,
           microbatch_size);
  HP_CHECK(microbatches <= TrainState::kMaxMicrobatch, "--microbatches must be at most {}, got {}",
           TrainState::kMaxMicrobatch, microbatches);
  // B * M <= 2^40 here, so the division keeps the check itself from overflowing.
  HP_CHECK(sequences() <= kMaxTokensPerStep / seq_len,
           "a step of {} x {} sequences of {} tokens is more than {} tokens; lower "
           "--microbatch-size, --microbatches or --seq-len",
           microbatches, microbatch_size, seq_len, kMaxTokensPerStep);
}

void read_step_batch(const SequenceReader& reader, int64_t first, const StepShape& shape, bool wrap,
                     std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  HP_CHECK(reader.seq_len() == shape.seq_len, "internal: reader S {} vs step S {}",
           reader.seq_len(), shape.seq_len);
  tokens.resize(shape.tokens());
  targets.resize(shape.tokens());
  // Micro-batch j, row r = sequence first + j*B + r: all B*M sequences are consecutive.
  reader.read(first, shape.sequences(), wrap, tokens.data(), targets.data());
}

Trainer::Trainer(const ModelConfig& cfg, Params& params, ModelOptions model_opt, StepShape shape,
                 TrainState state)
    : cfg_(cfg),
      params_(params),
      model_(std::make_unique<Model>(params, model_opt)),
      shape_(shape),
      state_(std::move(state)),
      opt_(params.backend(), state_.adamw),
      refs_(param_refs(params)),
      store_(params.backend(), params.precision()) {
  check_and_record_run(state_, shape_);
}

void check_and_record_run(TrainState& state, const StepShape& global) {
  global.validate();
  state.lr.validate();
  state.adamw.validate();
  HP_CHECK(state.clip >= 0 && state.clip <= TrainState::kMaxClip,
           "--clip must be in [0, {}] (0: no clipping), got {}", TrainState::kMaxClip, state.clip);
  state.seq_len = global.seq_len;
  state.microbatch_size = global.microbatch_size;
  state.microbatches = global.microbatches;
}

void Trainer::load_optimizer(const std::string& path) {
  const SafetensorsReader file = SafetensorsReader::open(path);
  opt_.load_state(file, refs_, state_.step);
}

StepRecord Trainer::step(const SequenceReader& data) {
  const Timer timer;
  read_step_batch(data, state_.next_sequence, shape_, /*wrap=*/true, tokens_, targets_);
  Backend& be = params_.backend();
  tokens_dev_.upload(be, tokens_, cfg_.vocab, "token");
  targets_dev_.upload(be, targets_, cfg_.vocab, "target");
  params_.zero_grad();
  StepOptions so;
  so.recompute = shape_.recompute;
  const double loss =
      loss_and_grads(*model_, tokens_dev_.data(), targets_dev_.data(), shape_.microbatch_size,
                     shape_.seq_len, static_cast<int>(shape_.microbatches), so, &store_);
  HP_CHECK(store_.size() == 0, "internal: values left in the store after a step: {}",
           store_.describe());
  const std::vector<double> partials = grad_square_partials(params_);
  const double norm = global_norm_from_partials(partials);
  HP_CHECK(std::isfinite(loss) && std::isfinite(norm),
           "step {}: the loss ({}) or the gradient norm ({}) is not finite; training diverged. "
           "Lower --lr, raise --warmup, or keep --clip > 0",
           state_.step + 1, loss, norm);
  const double lr = state_.lr.at(state_.step);
  opt_.step(refs_, lr, clip_factor(norm, state_.clip));
  state_.step += 1;
  state_.next_sequence += shape_.sequences();
  state_.tokens_seen += shape_.tokens();
  const double secs = timer.seconds();
  StepRecord r;
  r.step = state_.step;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = norm;
  r.seconds = secs;
  r.tokens_per_s = secs > 0 ? static_cast<double>(shape_.tokens()) / secs : 0;
  state_.history.push_back(r);
  return r;
}

void Trainer::save(const std::string& dir, StDType model_dtype) {
  save_training_checkpoint(dir, params_, model_dtype == StDType::kF32 ? &opt_ : nullptr, &state_,
                           model_dtype);
}

void run_train_loop(TrainEngine& engine, const SequenceReader& data, const TrainLoopOptions& opt,
                    const std::function<void(const StepRecord&)>& on_step,
                    const std::function<void(int64_t)>& before_step) {
  HP_CHECK(opt.save_every == 0 || !opt.save.empty(), "save_every needs a checkpoint folder");
  while (engine.state().step < opt.end) {
    if (before_step) before_step(engine.state().step + 1);
    const StepRecord r = engine.step(data);
    if (on_step) on_step(r);
    if (opt.save_every > 0 && r.step % opt.save_every == 0 && r.step != opt.end)
      engine.save(opt.save, opt.save_dtype);
  }
  if (!opt.save.empty()) engine.save(opt.save, opt.save_dtype);
}

double train_step_flops(const ModelConfig& cfg, const StepShape& shape) {
  const double h = static_cast<double>(cfg.hidden);
  const double matrix_params =
      static_cast<double>(cfg.layers) *
          (static_cast<double>(cfg.qkv_dim()) * h + h * h + 3.0 * h * cfg.intermediate) +
      static_cast<double>(cfg.vocab) * h;  // LM head (the embedding lookup is no matmul)
  const double tokens = static_cast<double>(shape.tokens());
  // Causal attention counted once over the triangle: a token sees s/2 keys on average, so QK^T
  // and PV cost s*h FLOPs each per token forward; backward is twice forward.
  const double attn = 3.0 * 2.0 * static_cast<double>(shape.seq_len) * h * cfg.layers;
  return tokens * (6.0 * matrix_params + attn);
}

}  // namespace hp
