// The nice-numbers tick rule and a noise-free label printer (see nice_ticks.h).
#include "util/nice_ticks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "util/error.h"

namespace hp {

namespace {

// 10^n for n >= 0: exact up to 10^22 (repeated multiplication stays exact while the result fits
// in a double's 53-bit mantissa times a power of two), std::pow beyond.
double pow10(int n) {
  if (n > 22) return std::pow(10.0, n);
  double p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

// k x 10^e rounded once: dividing by an exact 10^-e gives the double nearest to the decimal,
// where multiplying by the inexact 10^e (0.1 and the like) would not (3 * 0.1 != 0.3).
double scaled(double k, int e) { return e >= 0 ? k * pow10(e) : k / pow10(-e); }

// floor(log10(x)) for x > 0, corrected where log10 rounds across a power of ten.
int decade(double x) {
  int e = static_cast<int>(std::floor(std::log10(x)));
  if (scaled(1, e) > x) --e;
  if (scaled(1, e + 1) <= x) ++e;
  return e;
}

struct Step {
  int m = 1;  // 1, 2 or 5
  int e = 0;
  double value() const { return scaled(m, e); }
  Step smaller() const { return m == 1 ? Step{5, e - 1} : Step{m == 5 ? 2 : 1, e}; }
};

// The classic rounding: the nice number nearest to x (thresholds at the geometric-ish midpoints
// 1.5, 3 and 7 of each decade).
Step round_nice(double x) {
  const int e = decade(x);
  const double f = x / scaled(1, e);
  if (f < 1.5) return {1, e};
  if (f < 3) return {2, e};
  if (f < 7) return {5, e};
  return {1, e + 1};
}

// The smallest nice number >= x.
Step ceil_nice(double x) {
  const int e = decade(x);
  const double f = x / scaled(1, e);
  const double eps = 1e-12;
  if (f <= 1 + eps) return {1, e};
  if (f <= 2 + eps) return {2, e};
  if (f <= 5 + eps) return {5, e};
  return {1, e + 1};
}

// Multiples k of `step` with lo <= k * step <= hi: [first, last] (empty when first > last). The
// slack absorbs the rounding of lo / step for ends that are themselves multiples.
std::pair<int64_t, int64_t> multiples(double lo, double hi, double step) {
  const double slack = 1e-9;
  return {static_cast<int64_t>(std::ceil(lo / step - slack)),
          static_cast<int64_t>(std::floor(hi / step + slack))};
}

}  // namespace

NiceTicks nice_ticks(double lo, double hi, int target, double min_step) {
  HP_CHECK(std::isfinite(lo) && std::isfinite(hi), "nice_ticks: the range [{}, {}] is not finite",
           lo, hi);
  HP_CHECK(std::isfinite(min_step) && min_step >= 0, "nice_ticks: min_step {} is negative",
           min_step);
  target = std::clamp(target, 1, 1000);
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= std::max(std::abs(lo), std::abs(hi)) * 1e-10) {
    const double half = lo == 0 ? 0.5 : std::abs(lo) * 0.5;
    lo -= half;
    hi += half;
  }
  const double span = hi - lo;
  HP_CHECK(std::isfinite(span), "nice_ticks: the range [{}, {}] is too wide for a double", lo, hi);

  Step step = round_nice(span / std::max(target - 1, 1));
  const Step floor_step = min_step > 0 ? ceil_nice(min_step) : Step{};
  auto below_floor = [&](const Step& s) {
    return min_step > 0 && s.value() < floor_step.value() * (1 - 1e-12);
  };
  if (below_floor(step)) step = floor_step;
  // Fewer ticks inside than asked for (at most two): a smaller step, down to the floor. Halving
  // the step at least every other turn, this ends once two multiples fit in the span.
  const int64_t want = std::min(target, 2);
  for (int guard = 0; guard < 200; ++guard) {
    auto [k0, k1] = multiples(lo, hi, step.value());
    if (k1 - k0 + 1 >= want) break;
    const Step next = step.smaller();
    if (below_floor(next)) break;
    step = next;
  }

  NiceTicks t;
  t.mantissa = step.m;
  t.exponent = step.e;
  t.step = step.value();
  auto [k0, k1] = multiples(lo, hi, t.step);
  // k x m scaled once per tick (not accumulated), and +0.0 so that no tick is a negative zero.
  auto at = [&](int64_t k) { return scaled(static_cast<double>(k) * step.m, step.e) + 0.0; };
  for (int64_t k = k0; k <= k1; ++k) t.values.push_back(at(k));
  t.lo = at(std::min(k0, static_cast<int64_t>(std::floor(lo / t.step + 1e-9))));
  t.hi = at(std::max(k1, static_cast<int64_t>(std::ceil(hi / t.step - 1e-9))));
  return t;
}

std::string NiceTicks::label(double v) const { return tick_label(v, step); }

std::string tick_label(double value, double step) {
  if (value == 0 || !std::isfinite(value)) return value == 0 ? "0" : fmt::format("{}", value);
  step = std::abs(step);
  const int step_e = step > 0 && std::isfinite(step) ? decade(step) : decade(std::abs(value));
  if (step_e >= -6 && std::abs(value) < 1e12) {
    // Digits after the point that a multiple of a 1/2/5 x 10^e step needs: -e.
    return fmt::format("{:.{}f}", value, std::max(0, -step_e));
  }
  // Significant digits from the value's leading digit down to the step's.
  const int digits = std::clamp(decade(std::abs(value)) - step_e, 0, 16);
  std::string s = fmt::format("{:.{}e}", value, digits);
  // Trailing zeros of the mantissa ("3.0e-07" -> "3e-07") say nothing.
  const size_t e_at = s.find('e');
  size_t end = e_at;
  if (s.find('.') < e_at) {
    while (s[end - 1] == '0') --end;
    if (s[end - 1] == '.') --end;
  }
  return s.substr(0, end) + s.substr(e_at);
}

}  // namespace hp
