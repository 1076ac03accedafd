// The optimizer side of a training step: AdamW (decoupled weight decay, bias correction), the
// global gradient norm and its clip factor, and the warmup + cosine learning-rate schedule.
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

namespace hp {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to matrices (rank >= 2) only, not to norm gains
  nlohmann::json to_json() const;
  static AdamWConfig from_json(const nlohmann::json& j, const std::string& where);
};

// Linear warmup over `warmup` steps to `peak`, then cosine decay to peak * min_ratio at `total`.
struct LrSchedule {
  double peak = 3e-3;
  double min_ratio = 0.1;
  int64_t warmup = 0;
  int64_t total = 1;
  // Learning rate of update number step+1 (step counts completed updates, from 0).
  double at(int64_t step) const;
  void validate() const;  // hp::Error naming the bad field
  nlohmann::json to_json() const;
  static LrSchedule from_json(const nlohmann::json& j, const std::string& where);
};

// Sum of squares of n values, accumulated in double in index order (deterministic).
double sum_squares(const float* x, int64_t n);
// sqrt of the sum of the partial sums of squares (per tensor, per rank: any partition).
double global_norm_from_partials(std::span<const double> partial_sums_of_squares);
// Scale for the gradients so their global norm is at most max_norm; 1 when max_norm <= 0 (no
// clipping) or the norm is already small enough.
double clip_factor(double norm, double max_norm);

// One AdamW update of n elements, in place, for update number `step` (from 1). The gradient is
// multiplied by grad_scale first (clipping, or 1/M for accumulation). Arithmetic in double.
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, double lr,
                  const AdamWConfig& cfg, bool decay, int64_t step, double grad_scale);

// A named parameter with its gradient, as the optimizer sees it.
struct ParamRef {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;
  float* param = nullptr;
  const float* grad = nullptr;
  int64_t numel() const;
};

// AdamW state (m, v) for a set of named parameters, in float.
class AdamW {
 public:
  AdamW() = default;
  explicit AdamW(AdamWConfig cfg) : cfg_(cfg) {}
  const AdamWConfig& config() const { return cfg_; }
  int64_t steps() const { return steps_; }

  // Updates every parameter with its gradient times grad_scale; counts one step.
  void step(std::span<const ParamRef> params, double lr, double grad_scale);

  // optimizer.safetensors tensors: "exp_avg.<name>" and "exp_avg_sq.<name>" (full, unsharded).
  // The returned views point into this object: keep it alive while writing.
  std::vector<StWriteTensor> state_tensors(std::span<const ParamRef> params);
  // Loads m and v for `params` (shapes checked) and the step count.
  void load_state(const SafetensorsReader& file, std::span<const ParamRef> params, int64_t steps);

 private:
  struct Moments {
    std::vector<float> m, v;
  };
  Moments& moments(const ParamRef& p);
  AdamWConfig cfg_;
  int64_t steps_ = 0;
  std::map<std::string, Moments> state_;
};

}  // namespace hp
