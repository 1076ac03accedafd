// AdamW, clipping and the learning-rate schedule.
#include "runtime/optimizer.h"

#include <cmath>
#include <cstdint>
#include <numbers>

#include "util/error.h"

namespace hp {

nlohmann::json AdamWConfig::to_json() const {
  return {{"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", weight_decay}};
}

namespace {

// A number field of a settings object: present, a number, and finite.
double get_real(const nlohmann::json& j, const char* key, const std::string& where,
                const char* object) {
  HP_CHECK(j.is_object() && j.contains(key) && j[key].is_number(),
           "{}: {}.{} is missing or not a number; the file is corrupt or was edited by hand", where,
           object, key);
  return j[key].get<double>();
}

// An integer field: present, an integer (1e3 or 2.5 are refused rather than truncated), and
// within int64.
int64_t get_integer(const nlohmann::json& j, const char* key, const std::string& where,
                    const char* object) {
  HP_CHECK(j.is_object() && j.contains(key) && j[key].is_number_integer() &&
               (!j[key].is_number_unsigned() ||
                j[key].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)),
           "{}: {}.{} must be an integer, got {}; the file is corrupt or was edited by hand", where,
           object, key, j.is_object() && j.contains(key) ? j[key].dump() : "nothing");
  return j[key].get<int64_t>();
}

}  // namespace

void AdamWConfig::validate(const std::string& where) const {
  const std::string w = where.empty() ? "AdamW" : where;
  HP_CHECK(beta1 >= 0 && beta1 < 1, "{}: adamw.beta1 must be in [0, 1) (typically 0.9), got {}", w,
           beta1);
  HP_CHECK(beta2 >= 0 && beta2 < 1, "{}: adamw.beta2 must be in [0, 1) (typically 0.95), got {}", w,
           beta2);
  HP_CHECK(eps > 0 && eps <= 1, "{}: adamw.eps must be in (0, 1] (typically 1e-8), got {}", w, eps);
  HP_CHECK(weight_decay >= 0 && weight_decay <= kMaxWeightDecay,
           "{}: adamw.weight_decay must be in [0, {}] (as --weight-decay; typically 0.1), got {}",
           w, kMaxWeightDecay, weight_decay);
}

AdamWConfig AdamWConfig::from_json(const nlohmann::json& j, const std::string& where) {
  AdamWConfig c;
  c.beta1 = get_real(j, "beta1", where, "adamw");
  c.beta2 = get_real(j, "beta2", where, "adamw");
  c.eps = get_real(j, "eps", where, "adamw");
  c.weight_decay = get_real(j, "weight_decay", where, "adamw");
  c.validate(where);
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
  HP_CHECK(peak > 0 && peak <= kMaxPeak, "--lr must be a positive number at most {}, got {}",
           kMaxPeak, peak);
  HP_CHECK(min_ratio >= 0 && min_ratio <= 1, "--min-lr-ratio must lie in [0, 1], got {}",
           min_ratio);
  HP_CHECK(warmup >= 0 && warmup <= kMaxSteps, "--warmup must be in [0, {}], got {}", kMaxSteps,
           warmup);
  HP_CHECK(total >= 1 && total <= kMaxSteps, "--steps must be in [1, {}], got {}", kMaxSteps,
           total);
}

nlohmann::json LrSchedule::to_json() const {
  return {{"peak", peak}, {"min_ratio", min_ratio}, {"warmup", warmup}, {"total", total}};
}

LrSchedule LrSchedule::from_json(const nlohmann::json& j, const std::string& where) {
  LrSchedule s;
  s.peak = get_real(j, "peak", where, "lr_schedule");
  s.min_ratio = get_real(j, "min_ratio", where, "lr_schedule");
  s.warmup = get_integer(j, "warmup", where, "lr_schedule");
  s.total = get_integer(j, "total", where, "lr_schedule");
  // The same ranges as the flags (--lr, --min-lr, --warmup, --steps), named as in the file.
  HP_CHECK(s.peak > 0 && s.peak <= kMaxPeak,
           "{}: lr_schedule.peak must be in (0, {}] (as --lr), got {}", where, kMaxPeak, s.peak);
  HP_CHECK(s.min_ratio >= 0 && s.min_ratio <= 1,
           "{}: lr_schedule.min_ratio must be in [0, 1] (--min-lr / --lr), got {}", where,
           s.min_ratio);
  HP_CHECK(s.warmup >= 0 && s.warmup <= kMaxSteps,
           "{}: lr_schedule.warmup must be in [0, {}] (as --warmup), got {}", where, kMaxSteps,
           s.warmup);
  HP_CHECK(s.total >= 1 && s.total <= kMaxSteps,
           "{}: lr_schedule.total must be in [1, {}] (as --steps), got {}", where, kMaxSteps,
           s.total);
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

namespace {
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
}  // namespace

int64_t ParamRef::numel() const { return numel_of(shape); }

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
  std::vector<float> host, whole;
  for (const ParamRef& p : params) {
    Moments& mo = moments(p);
    HP_CHECK(mo.m.dtype() == DType::kF32, "optimizer state of '{}' is {}; checkpoints hold f32",
             p.name, dtype_name(mo.m.dtype()));
    host.resize(static_cast<size_t>(p.numel()));
    for (auto [b, prefix] : {std::pair{&mo.m, "exp_avg."}, {&mo.v, "exp_avg_sq."}}) {
      if (p.sharded()) {
        whole.resize(static_cast<size_t>(numel_of(p.tensor->full_shape)));
        file.read_f32(prefix + p.name, p.tensor->full_shape, whole.data());
        cut_shard(*p.tensor, p.tp, whole.data(), host.data());
      } else {
        file.read_f32(prefix + p.name, p.shape, host.data());
      }
      // A NaN, an infinity or a negative second moment would turn every later update into NaN.
      const bool second = b == &mo.v;
      for (int64_t i = 0; i < p.numel(); ++i) {
        const float x = host[static_cast<size_t>(i)];
        HP_CHECK(std::isfinite(x) && !(second && x < 0),
                 "'{}': tensor '{}{}' holds {} at element {}; the optimizer state is corrupt: "
                 "use an earlier checkpoint, or start from the weights with --checkpoint",
                 file.path(), prefix, p.name, x, i);
      }
      if (p.numel() > 0) be_->upload(b->data(), host.data(), b->bytes());
    }
  }
  steps_ = steps;
}

}  // namespace hp
