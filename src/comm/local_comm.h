// LocalWorld: n ranks as threads of one process, talking through in-memory mailboxes with the
// same semantics as MpiComm (non-blocking, matched by (src, tag) in posting order, sends complete
// only when matched, timeouts). For unit tests without mpirun; not a performance transport.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/comm.h"

namespace hp {

namespace detail {
struct LocalShared;
}

class LocalWorld {
 public:
  explicit LocalWorld(int n, const CommOptions& options = {});
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  // The world comm of rank r; use it only from the thread that plays rank r.
  Comm& comm(int r);

  // Runs fn(comm(r)) on n threads and joins them. If any rank throws (or a wait times out), the
  // other ranks' waits fail instead of hanging, and the first error is rethrown here. After a clean
  // run, a message posted but never matched is an error too (it names sender, receiver and tag).
  void run(const std::function<void(Comm&)>& fn);

 private:
  std::shared_ptr<detail::LocalShared> shared_;
  std::vector<std::unique_ptr<Comm>> comms_;
};

}  // namespace hp
