#include "comm/liveness.h"

#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {
constexpr double kNever = -1e300;
}

PeerLiveness::PeerLiveness(int world_size, double period_s, int misses)
    : period_s_(period_s),
      misses_(misses),
      last_seen_(static_cast<size_t>(world_size)),
      watchers_(static_cast<size_t>(world_size)) {
  HP_CHECK(world_size >= 1 && period_s > 0 && misses >= 2,
           "PeerLiveness needs ranks >= 1, a period > 0 and misses >= 2; got {}, {} s, {}",
           world_size, period_s, misses);
  for (auto& t : last_seen_) t.store(kNever);
  for (auto& w : watchers_) w.store(0);
}

void PeerLiveness::saw(int world_rank) {
  if (world_rank < 0 || world_rank >= size()) return;
  last_seen_[static_cast<size_t>(world_rank)].store(now_seconds(), std::memory_order_relaxed);
}

double PeerLiveness::last_seen(int world_rank) const {
  return last_seen_.at(static_cast<size_t>(world_rank)).load(std::memory_order_relaxed);
}

void PeerLiveness::watch(int world_rank) {
  watchers_.at(static_cast<size_t>(world_rank)).fetch_add(1, std::memory_order_relaxed);
}

void PeerLiveness::unwatch(int world_rank) {
  watchers_.at(static_cast<size_t>(world_rank)).fetch_sub(1, std::memory_order_relaxed);
}

bool PeerLiveness::watched(int world_rank) const {
  return watchers_.at(static_cast<size_t>(world_rank)).load(std::memory_order_relaxed) > 0;
}

}  // namespace hp
