// Wall-clock time for progress lines, traces and benchmarks.
#pragma once

#include <chrono>

namespace hp {

// Seconds since an arbitrary fixed point (steady clock).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Timer {
 public:
  Timer() : start_(now_seconds()) {}
  double seconds() const { return now_seconds() - start_; }
  void reset() { start_ = now_seconds(); }

 private:
  double start_;
};

}  // namespace hp
