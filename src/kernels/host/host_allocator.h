// The caching allocator behind the host backends: blocks come from the system 256-byte aligned in
// size classes, and a freed block waits in its class's cache for the next request of that class,
// so a training step that repeats the previous one's requests makes no system allocations (fresh
// pages cost a page fault each on first touch). Not a general-purpose malloc: no splitting or
// merging of blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/backend.h"

namespace hp {

class HostAllocator {
 public:
  // Where blocks come from: by default aligned_alloc / free. Tests pass a guarded arena.
  struct System {
    std::function<void*(int64_t bytes)> alloc;  // 256-byte aligned, or nullptr when out of memory
    std::function<void(void* p)> free;
  };
  static constexpr int64_t kAlignment = 256;

  HostAllocator();
  explicit HostAllocator(System sys);
  ~HostAllocator();  // every block (cached or still handed out) goes back to the system
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  // A block of at least `bytes` (>= 0). Throws hp::Error when the system has no memory left even
  // after the cache was given back.
  void* allocate(int64_t bytes);
  // Returns a block from allocate() to its class's cache; throws on a pointer it did not hand out.
  void deallocate(void* p);
  // Cached blocks back to the system.
  void release_cached();

  MemoryStats stats() const;
  void reset_peak();

  // The size a request of `bytes` is rounded up to: multiples of 256 up to 2 KiB, then eight
  // classes per power of two (at most 12.5% over the request).
  static int64_t size_class(int64_t bytes);

 private:
  struct Block {
    int64_t requested = 0, size = 0;
  };
  void* system_alloc(int64_t size);  // with mu_ held
  void release_cached_locked();

  System sys_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> handed_out_;
  std::map<int64_t, std::vector<void*>> cache_;  // class size -> free blocks
  MemoryStats stats_;
};

}  // namespace hp
