// AdamW, clipping and the learning-rate schedule.
#include "runtime/optimizer.h"

#include <cmath>
#include <numbers>

#include "util/error.h"

namespace hp {

nlohmann::json AdamWConfig::to_json() const {
  return {{"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", weight_decay}};
}

AdamWConfig AdamWConfig::from_json(const nlohmann::json& j, const std::string& where) {
  AdamWConfig c;
  try {
    c.beta1 = j.at("beta1").get<double>();
    c.beta2 = j.at("beta2").get<double>();
    c.eps = j.at("eps").get<double>();
    c.weight_decay = j.at("weight_decay").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad AdamW settings ({})", where, e.what());
  }
  return c;
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double lo = peak * min_ratio;
  return lo + (peak - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

void LrSchedule::validate() const {
  HP_CHECK(peak > 0 && std::isfinite(peak), "--lr must be a positive number, got {}", peak);
  HP_CHECK(min_ratio >= 0 && min_ratio <= 1, "--min-lr-ratio must lie in [0, 1], got {}",
           min_ratio);
  HP_CHECK(warmup >= 0, "--warmup must be >= 0, got {}", warmup);
  HP_CHECK(total >= 1, "--steps must be >= 1, got {}", total);
}

nlohmann::json LrSchedule::to_json() const {
  return {{"peak", peak}, {"min_ratio", min_ratio}, {"warmup", warmup}, {"total", total}};
}

LrSchedule LrSchedule::from_json(const nlohmann::json& j, const std::string& where) {
  LrSchedule s;
  try {
    s.peak = j.at("peak").get<double>();
    s.min_ratio = j.at("min_ratio").get<double>();
    s.warmup = j.at("warmup").get<int64_t>();
    s.total = j.at("total").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad learning-rate schedule ({})", where, e.what());
  }
  return s;
}

double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double global_norm_from_partials(std::span<const double> partials) {
  double s = 0;
  for (double p : partials) s += p;
  return std::sqrt(s);
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  return max_norm / norm;
}

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, double lr,
                  const AdamWConfig& cfg, bool decay, int64_t step, double grad_scale) {
  const double b1 = cfg.beta1, b2 = cfg.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const double shrink = decay ? 1.0 - lr * cfg.weight_decay : 1.0;
  const double step_size = lr / bc1;
  const double inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * grad_scale;
    const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g;
    const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    // Same order as torch.optim.AdamW: decay the weight, then the Adam step.
    const double denom = std::sqrt(vi) * inv_sqrt_bc2 + cfg.eps;
    param[i] = static_cast<T>(static_cast<double>(param[i]) * shrink - step_size * mi / denom);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, double,
                                  const AdamWConfig&, bool, int64_t, double);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, double,
                                   const AdamWConfig&, bool, int64_t, double);

int64_t ParamRef::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

AdamW::Moments& AdamW::moments(const ParamRef& p) {
  Moments& mo = state_[p.name];
  if (mo.m.empty() && p.numel() > 0) {
    mo.m.assign(p.numel(), 0.f);
    mo.v.assign(p.numel(), 0.f);
  }
  HP_CHECK(static_cast<int64_t>(mo.m.size()) == p.numel(),
           "optimizer state for '{}' has {} elements, the parameter {}", p.name, mo.m.size(),
           p.numel());
  return mo;
}

void AdamW::step(std::span<const ParamRef> params, double lr, double grad_scale) {
  ++steps_;
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    adamw_update(p.param, p.grad, mo.m.data(), mo.v.data(), p.numel(), lr, cfg_,
                 p.shape.size() >= 2, steps_, grad_scale);
  }
}

std::vector<StWriteTensor> AdamW::state_tensors(std::span<const ParamRef> params) {
  std::vector<StWriteTensor> out;
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    out.push_back({"exp_avg." + p.name, StDType::kF32, p.shape, mo.m.data()});
    out.push_back({"exp_avg_sq." + p.name, StDType::kF32, p.shape, mo.v.data()});
  }
  return out;
}

void AdamW::load_state(const SafetensorsReader& file, std::span<const ParamRef> params,
                       int64_t steps) {
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    file.read_f32("exp_avg." + p.name, p.shape, mo.m.data());
    file.read_f32("exp_avg_sq." + p.name, p.shape, mo.v.data());
  }
  steps_ = steps;
}

}  // namespace hp
