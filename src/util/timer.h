// Wall-clock time for progress lines, traces and benchmarks.
#pragma once

#include <chrono>
#include <ctime>

namespace hp {

// Seconds since an arbitrary fixed point (steady clock).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// CPU seconds used by the calling thread. For work that runs entirely on the caller (kernels at
// one thread): neither other processes nor other threads of this process (ranks run as threads,
// MPI's own threads) count.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
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
