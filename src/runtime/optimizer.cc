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

double global_norm_from_partials(std::span<const double> partials) {
  double s = 0;
  for (double p : partials) s += p;
  return std::sqrt(s);
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  return max_norm / norm;
}

int64_t ParamRef::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

AdamW::Moments& AdamW::moments(const ParamRef& p) {
  Moments& mo = state_[p.name];
  if (!mo.m.data() && p.numel() > 0) {
    mo.m = Buffer(*be_, p.param.dtype, p.numel());
    mo.v = Buffer(*be_, p.param.dtype, p.numel());
    be_->zero(mo.m.data(), mo.m.bytes());
    be_->zero(mo.v.data(), mo.v.bytes());
  }
  HP_CHECK(mo.m.elems() == p.numel() && mo.m.dtype() == p.param.dtype,
           "optimizer state for '{}' has {} {} elements, the parameter {} {}", p.name,
           mo.m.elems(), dtype_name(mo.m.dtype()), p.numel(), dtype_name(p.param.dtype));
  return mo;
}

void AdamW::step(std::span<const ParamRef> params, double lr, double grad_scale) {
  ++steps_;
  Kernels& k = be_->kernels();
  for (const ParamRef& p : params) {
    if (p.numel() == 0) continue;
    Moments& mo = moments(p);
    const double decay = p.shape.size() >= 2 ? cfg_.weight_decay : 0.0;
    k.adamw(p.param, p.grad, mo.m.ptr(), mo.v.ptr(), p.numel(), lr, cfg_.beta1, cfg_.beta2,
            cfg_.eps, decay, steps_, grad_scale, p.weight_copy);
  }
}

std::vector<StWriteTensor> AdamW::state_tensors(std::span<const ParamRef> params) {
  std::vector<StWriteTensor> out;
  host_.clear();
  host_.reserve(2 * params.size());  // the views below point into these: no reallocation
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    HP_CHECK(mo.m.dtype() == DType::kF32, "optimizer state of '{}' is {}; checkpoints hold f32",
             p.name, dtype_name(mo.m.dtype()));
    for (const Buffer* b : {&mo.m, &mo.v}) {
      host_.emplace_back(static_cast<size_t>(p.numel()));
      if (p.numel() > 0) be_->download(host_.back().data(), b->data(), b->bytes());
    }
    out.push_back({"exp_avg." + p.name, StDType::kF32, p.shape, host_[host_.size() - 2].data()});
    out.push_back({"exp_avg_sq." + p.name, StDType::kF32, p.shape, host_.back().data()});
  }
  return out;
}

void AdamW::load_state(const SafetensorsReader& file, std::span<const ParamRef> params,
                       int64_t steps) {
  std::vector<float> host;
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    HP_CHECK(mo.m.dtype() == DType::kF32, "optimizer state of '{}' is {}; checkpoints hold f32",
             p.name, dtype_name(mo.m.dtype()));
    host.resize(static_cast<size_t>(p.numel()));
    for (auto [b, prefix] : {std::pair{&mo.m, "exp_avg."}, {&mo.v, "exp_avg_sq."}}) {
      file.read_f32(prefix + p.name, p.shape, host.data());
      if (p.numel() > 0) be_->upload(b->data(), host.data(), b->bytes());
    }
  }
  steps_ = steps;
}

}  // namespace hp
