// Axis ticks at round values (the "nice numbers" rule): the step between ticks is 1, 2 or 5 times a
// power of ten, chosen so that a range gets about the number of ticks asked for, and every tick is
// an exact multiple of that step. The labels print the decimal value a reader expects (0.3, never
// 0.30000000000000004). Every SVG the project draws uses it (src/sim/timeline.cc,
// src/runtime/progress.cc).
#pragma once

#include <string>
#include <vector>

namespace hp {

struct NiceTicks {
  double step = 0;  // mantissa x 10^exponent
  int mantissa = 1;  // 1, 2 or 5
  int exponent = 0;
  // The range rounded outwards to multiples of `step` (lo <= the range asked for <= hi): the ends
  // of an axis that may grow to round values.
  double lo = 0, hi = 0;
  // The multiples of `step` inside the range asked for, ascending; each is the double nearest to
  // its decimal value.
  std::vector<double> values;

  std::string label(double v) const;  // tick_label(v, step)
};

// Ticks for [lo, hi] (swapped when lo > hi; both must be finite). `target` is the number of ticks
// wanted (at least 1); the result has about that many, and never fewer than min(target, 2) inside
// the range. A range of zero width (lo == hi, or narrower than 1e-10 of its magnitude, which no
// label could show) is first widened to a width of |lo| (1 at zero) centred on it. `min_step` > 0
// keeps the step at or above it (1 for integer axes such as step counts), which may leave a
// single tick.
NiceTicks nice_ticks(double lo, double hi, int target = 5, double min_step = 0);

// `value` printed at the precision of `step`: plain decimals ("0.3", "250", "-1.5", "0.00002")
// while the step is at least 1e-6 and the value below 1e12; scientific notation with no surplus
// digits ("2.5e-07", "3e+15") beyond that. Zero prints as "0", never "-0".
std::string tick_label(double value, double step);

}  // namespace hp
