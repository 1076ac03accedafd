// A caching allocator over a system allocator (cudaMalloc for the CUDA backend, a fake in tests):
// requests are rounded up to size classes, freed blocks wait in a per-class cache and are handed
// out again, so a repeated sequence of requests reaches the system allocator only the first time.
// Not here: streams. The CUDA backend uses one stream per allocator, so a block freed after
// queuing work on it can be handed out at once: later work on that stream runs after it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/backend.h"

namespace hp::cuda {

// Where the blocks come from.
class SystemMemory {
 public:
  virtual ~SystemMemory() = default;
  // nullptr when the memory is exhausted (other failures throw).
  virtual void* allocate(int64_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Waits until no queued work can still touch a cached block (before blocks go back).
  virtual void wait_idle() = 0;
  // One line about the memory for out-of-memory messages, e.g. "device free 1.2 GiB of 80 GiB".
  virtual std::string describe() = 0;
};

class CachingAllocator {
 public:
  // `name` prefixes messages, e.g. "cuda:0".
  CachingAllocator(SystemMemory& system, std::string name);
  // Returns every block (cached or still handed out) to the system.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (nullptr for 0). On exhaustion the cache is returned to the
  // system and the request retried once; then hp::Error with the request and the usage.
  void* allocate(int64_t bytes);
  // Back into the cache; nullptr is ignored; a pointer not from allocate() throws hp::Error.
  void deallocate(void* p);
  // Every cached (free) block back to the system.
  void release_cached();

  MemoryStats stats() const;
  int64_t cached_bytes() const;
  void reset_peak();

  // The size a request of `bytes` (> 0) is rounded up to: multiples of 512 up to 4 KiB, then 8
  // classes per power of two (at most 12.5% over the request).
  static int64_t size_class(int64_t bytes);

 private:
  void release_cached_locked();

  SystemMemory& system_;
  std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, int64_t> live_;       // handed-out block -> its class size
  std::map<int64_t, std::vector<void*>> cached_;  // class size -> free blocks
  MemoryStats stats_;
  int64_t cached_bytes_ = 0;
};

}  // namespace hp::cuda
