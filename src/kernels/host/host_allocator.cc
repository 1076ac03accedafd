// Size classes, the per-class cache and the statistics of the host caching allocator.
#include "kernels/host/host_allocator.h"

#include <bit>
#include <cstdlib>

#include "util/error.h"

namespace hp {

namespace {

HostAllocator::System default_system() {
  return {[](int64_t bytes) {
            return std::aligned_alloc(HostAllocator::kAlignment, static_cast<size_t>(bytes));
          },
          [](void* p) { std::free(p); }};
}

}  // namespace

HostAllocator::HostAllocator() : HostAllocator(default_system()) {}

HostAllocator::HostAllocator(System sys) : sys_(std::move(sys)) {}

HostAllocator::~HostAllocator() {
  release_cached_locked();
  for (auto& [p, b] : handed_out_) sys_.free(p);
}

int64_t HostAllocator::size_class(int64_t bytes) {
  HP_CHECK(bytes >= 0, "allocator: negative request of {} bytes", bytes);
  const int64_t n = std::max<int64_t>(bytes, 1);
  const int64_t pow2 = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(n)));
  const int64_t step = std::max<int64_t>(kAlignment, pow2 / 8);
  return (n + step - 1) / step * step;
}

void* HostAllocator::system_alloc(int64_t size) {
  void* p = sys_.alloc(size);
  if (!p) {  // give the cache back and try once more
    release_cached_locked();
    p = sys_.alloc(size);
  }
  HP_CHECK(p,
           "out of host memory: cannot allocate {} bytes ({} bytes in use, {} reserved); use a "
           "smaller micro-batch, sequence length or model, or a recomputation policy",
           size, stats_.in_use, stats_.reserved);
  ++stats_.system_allocations;
  stats_.reserved += size;
  return p;
}

void* HostAllocator::allocate(int64_t bytes) {
  const int64_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = cache_.find(size);
  if (it != cache_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = system_alloc(size);
  }
  handed_out_[p] = Block{bytes, size};
  stats_.in_use += bytes;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return p;
}

void HostAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handed_out_.find(p);
  HP_CHECK(it != handed_out_.end(), "allocator: {} was not allocated here (or freed twice)", p);
  stats_.in_use -= it->second.requested;
  cache_[it->second.size].push_back(p);
  handed_out_.erase(it);
}

void HostAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void HostAllocator::release_cached_locked() {
  for (auto& [size, blocks] : cache_) {
    for (void* p : blocks) sys_.free(p);
    stats_.reserved -= size * static_cast<int64_t>(blocks.size());
    blocks.clear();
  }
}

MemoryStats HostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void HostAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.in_use;
}

}  // namespace hp
