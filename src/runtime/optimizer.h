// The optimizer side of a training step: AdamW (decoupled weight decay, bias correction) over
// backend memory, the global gradient norm and its clip factor, and the warmup + cosine
// learning-rate schedule.
// The global norm is computed from partial sums of squares so the distributed runtime can reduce
// the partials across ranks first and then call the same function.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "kernels/backend.h"
#include "model/params.h"

namespace hp {

struct AdamWConfig {
  static constexpr double kMaxWeightDecay = 10;  // lr * decay near 1 already wipes the weights
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to matrices (rank >= 2) only, not to norm gains
  // hp::Error naming the field (prefixed by `where`, the file) unless beta1, beta2 in [0, 1),
  // eps in (0, 1], weight_decay in [0, kMaxWeightDecay] (NaN fails every range).
  void validate(const std::string& where = "") const;
  nlohmann::json to_json() const;
  static AdamWConfig from_json(const nlohmann::json& j, const std::string& where);  // validated
};

// Linear warmup over `warmup` steps to `peak`, then cosine decay to peak * min_ratio at `total`.
struct LrSchedule {
  static constexpr double kMaxPeak = 10;                  // far above any AdamW learning rate
  static constexpr int64_t kMaxSteps = int64_t{1} << 40;  // keeps step counts far from overflow
  double peak = 3e-3;
  double min_ratio = 0.1;
  int64_t warmup = 0;
  int64_t total = 1;
  // Learning rate of update number step+1 (step counts completed updates, from 0).
  double at(int64_t step) const;
  void validate() const;  // hp::Error naming the bad field (as its flag)
  nlohmann::json to_json() const;
  // Checks every field against validate()'s ranges; errors name `where` and the field.
  static LrSchedule from_json(const nlohmann::json& j, const std::string& where);
};

// sqrt of the sum of the partial sums of squares (per tensor, per rank: any partition).
double global_norm_from_partials(std::span<const double> partial_sums_of_squares);
// Scale for the gradients so their global norm is at most max_norm; 1 when max_norm <= 0 (no
// clipping) or the norm is already small enough.
double clip_factor(double norm, double max_norm);

// A named parameter with its gradient, as the optimizer sees it: backend memory of the master type,
// and the compute-type copy of the weights to refresh after the update (null without one).
struct ParamRef {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;
  DataPtr param;
  ConstDataPtr grad;
  DataPtr weight_copy;
  // With tensor parallelism, the tensor this is a block of (split_dim, full_shape) and the rank's
  // place in the group: checkpoints hold whole tensors, load_state cuts this rank's block.
  const ParamTensor* tensor = nullptr;
  TpShard tp;
  int64_t numel() const;
  bool sharded() const { return tensor != nullptr && tensor->split_dim >= 0 && tp.size > 1; }
};

// AdamW state (m, v) for a set of named parameters, in the backend's memory in the parameters'
// (master) type; the update runs through the backend's kernels (Kernels::adamw).
class AdamW {
 public:
  explicit AdamW(Backend& be, AdamWConfig cfg = {}) : be_(&be), cfg_(cfg) {}
  const AdamWConfig& config() const { return cfg_; }
  int64_t steps() const { return steps_; }

  // Updates every parameter with its gradient times grad_scale; counts one step. Matrices
  // (rank >= 2) decay, vectors do not.
  void step(std::span<const ParamRef> params, double lr, double grad_scale);

  // optimizer.safetensors tensors: "exp_avg.<name>" and "exp_avg_sq.<name>" (full, unsharded,
  // f32). The views point at host copies inside this object: keep it alive while writing.
  std::vector<StWriteTensor> state_tensors(std::span<const ParamRef> params);
  // Loads m and v for `params` (shapes checked; a sharded ParamRef reads the whole tensor and keeps
  // its block) and the step count.
  void load_state(const SafetensorsReader& file, std::span<const ParamRef> params, int64_t steps);

 private:
  struct Moments {
    Buffer m, v;
  };
  Moments& moments(const ParamRef& p);
  Backend* be_;
  AdamWConfig cfg_;
  int64_t steps_ = 0;
  std::map<std::string, Moments> state_;
  std::vector<std::vector<float>> host_;  // downloaded moments for state_tensors
};

}  // namespace hp
