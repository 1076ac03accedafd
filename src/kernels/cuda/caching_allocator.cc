// The caching allocator of caching_allocator.h: size classes, a per-class free list, statistics.
#include "kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>

#include "util/error.h"

namespace hp::cuda {
namespace {

constexpr int64_t kSmallGranule = 512;
constexpr int64_t kSmallLimit = 4096;
constexpr int64_t kClassesPerOctave = 8;

}  // namespace

CachingAllocator::CachingAllocator(SystemMemory& system, std::string name)
    : system_(system), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  try {
    system_.wait_idle();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, size] : live_) system_.release(p);
    live_.clear();
    release_cached_locked();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error while freeing device memory: %s\n", name_.c_str(), e.what());
  }
}

int64_t CachingAllocator::size_class(int64_t bytes) {
  HP_CHECK(bytes > 0 && bytes <= (int64_t{1} << 60),
           "size_class: {} bytes is not a size between 1 byte and 1 EiB", bytes);
  if (bytes <= kSmallLimit) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  // The largest power of two <= bytes, cut into kClassesPerOctave steps.
  const int64_t octave = int64_t{1} << (63 - std::countl_zero(static_cast<uint64_t>(bytes)));
  const int64_t step = octave / kClassesPerOctave;  // >= 512 since octave >= 4096
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(int64_t bytes) {
  HP_CHECK(bytes >= 0, "{}: cannot allocate a negative size ({} bytes)", name_, bytes);
  if (bytes == 0) return nullptr;
  const int64_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = cached_.find(size);
  if (it != cached_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
  } else {
    p = system_.allocate(size);
    if (!p && cached_bytes_ > 0) {  // free what the cache holds and try once more
      release_cached_locked();
      p = system_.allocate(size);
    }
    if (!p) {
      fail(
          "{}: out of memory: requested {} bytes ({} after rounding to a size class); {} bytes "
          "in use, {} bytes reserved ({} cached) by this backend; {}. Use a smaller micro-batch "
          "or sequence length, more stages, or recomputation.",
          name_, bytes, size, stats_.in_use, stats_.reserved, cached_bytes_, system_.describe());
    }
    stats_.reserved += size;
    ++stats_.system_allocations;
  }
  live_.emplace(p, size);
  stats_.in_use += size;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  HP_CHECK(it != live_.end(),
           "{}: deallocate({}) of a pointer this backend did not allocate (or freed twice)", name_,
           p);
  const int64_t size = it->second;
  live_.erase(it);
  cached_[size].push_back(p);
  cached_bytes_ += size;
  stats_.in_use -= size;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  if (cached_bytes_ == 0) return;
  system_.wait_idle();  // queued work may still read or write a cached block
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) {
      system_.release(p);
      stats_.reserved -= size;
    }
    blocks.clear();
  }
  cached_.clear();
  cached_bytes_ = 0;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.in_use;
}

}  // namespace hp::cuda
