// PeerLiveness: what one process knows about whether its peers are still running, for telling a
// stopped or hung peer apart from a slow one. MpiComm's heartbeat thread fills it in (it pings the
// peers a long wait is watching and records every answer); Comm::wait reads it. A rank's waits and
// its heartbeat thread share one PeerLiveness, indexed by world rank; every member is thread-safe.
#pragma once

#include <atomic>
#include <vector>

namespace hp {

class PeerLiveness {
 public:
  // `period_s` (> 0): how often a watched peer is pinged; `misses` (>= 2, since a live peer's
  // answers come about one period apart): a peer silent for misses x period_s seconds is taken
  // for stopped or hung.
  PeerLiveness(int world_size, double period_s, int misses);

  int size() const { return static_cast<int>(last_seen_.size()); }
  double period_s() const { return period_s_; }
  int misses() const { return misses_; }
  double limit_s() const { return period_s_ * misses_; }

  // A heartbeat message (ping or answer) came from `world_rank` now.
  void saw(int world_rank);
  // When the last one came (now_seconds() clock); a very negative value when none ever came.
  double last_seen(int world_rank) const;

  // A wait starts / stops watching `world_rank`; the heartbeat thread pings watched peers.
  void watch(int world_rank);
  void unwatch(int world_rank);
  bool watched(int world_rank) const;

 private:
  double period_s_;
  int misses_;
  std::vector<std::atomic<double>> last_seen_;  // per world rank
  std::vector<std::atomic<int>> watchers_;      // waits watching each world rank
};

}  // namespace hp
