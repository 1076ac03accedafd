// The caching allocator over a fake system allocator (no GPU needed): size classes, reuse without
// new system allocations, statistics, the out-of-memory path and bad frees.
#include "kernels/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/error.h"

namespace hp::cuda {
namespace {

// Hands out fake addresses (never dereferenced) up to `limit` bytes live at once.
class FakeMemory final : public SystemMemory {
 public:
  explicit FakeMemory(int64_t limit) : limit_(limit) {}
  void* allocate(int64_t bytes) override {
    if (live_ + bytes > limit_) return nullptr;
    live_ += bytes;
    ++allocations;
    next_ += static_cast<uintptr_t>(bytes) + 4096;
    sizes_[next_] = bytes;
    return reinterpret_cast<void*>(next_);
  }
  void release(void* p) override {
    live_ -= sizes_.at(reinterpret_cast<uintptr_t>(p));
    ++releases;
  }
  void wait_idle() override { ++waits; }
  std::string describe() override { return "fake memory of " + std::to_string(limit_) + " bytes"; }

  int allocations = 0, releases = 0, waits = 0;

 private:
  int64_t limit_, live_ = 0;
  uintptr_t next_ = 1 << 20;
  std::map<uintptr_t, int64_t> sizes_;
};

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::size_class(1), 512);
  EXPECT_EQ(CachingAllocator::size_class(512), 512);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024);
  EXPECT_EQ(CachingAllocator::size_class(4096), 4096);
  EXPECT_EQ(CachingAllocator::size_class(4097), 4096 + 512);
  EXPECT_EQ(CachingAllocator::size_class(1 << 20), 1 << 20);
  EXPECT_EQ(CachingAllocator::size_class((1 << 20) + 1), (1 << 20) + (1 << 17));
  int64_t prev = 0;
  for (int64_t b = 1; b < (int64_t{1} << 34); b = b * 5 / 4 + 1) {
    const int64_t c = CachingAllocator::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_GE(c, prev) << "classes must not shrink as requests grow";
    EXPECT_EQ(c % 512, 0) << "every class keeps 512-byte granularity (256-byte alignment)";
    if (b > 4096) {
      EXPECT_LE(c - b, b / 8) << b;
    }
    prev = c;
  }
  EXPECT_THROW(CachingAllocator::size_class(0), Error);
}

TEST(CachingAllocator, RepeatedSequenceReusesBlocks) {
  FakeMemory mem(int64_t{1} << 40);
  CachingAllocator alloc(mem, "fake");
  const std::vector<int64_t> sizes = {100, 5000, 5000, 1 << 20, 3, 77777, 1 << 26};
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> ptrs;
    for (int64_t s : sizes) ptrs.push_back(alloc.allocate(s));
    const MemoryStats st = alloc.stats();
    int64_t expect_in_use = 0;
    for (int64_t s : sizes) expect_in_use += CachingAllocator::size_class(s);
    EXPECT_EQ(st.in_use, expect_in_use);
    EXPECT_EQ(st.reserved, expect_in_use);
    EXPECT_EQ(st.system_allocations, static_cast<int64_t>(sizes.size()))
        << "round " << round << " went to the system allocator again";
    for (void* p : ptrs) alloc.deallocate(p);
    EXPECT_EQ(alloc.stats().in_use, 0);
    EXPECT_EQ(alloc.cached_bytes(), expect_in_use);
  }
  EXPECT_EQ(mem.allocations, static_cast<int>(sizes.size()));
  EXPECT_EQ(alloc.allocate(0), nullptr);
  alloc.deallocate(nullptr);
}

TEST(CachingAllocator, PeakAndReset) {
  FakeMemory mem(int64_t{1} << 30);
  CachingAllocator alloc(mem, "fake");
  void* a = alloc.allocate(1 << 20);
  void* b = alloc.allocate(1 << 20);
  alloc.deallocate(a);
  EXPECT_EQ(alloc.stats().peak, 2 << 20);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak, 1 << 20);
  alloc.deallocate(b);
}

TEST(CachingAllocator, OutOfMemoryReturnsCacheThenSaysWhatIsUsed) {
  FakeMemory mem(3 << 20);
  CachingAllocator alloc(mem, "cuda:7");
  void* a = alloc.allocate(2 << 20);
  alloc.deallocate(a);  // cached: 2 MiB
  // 2 MiB cached + 1.5 MiB new > 3 MiB: the cache goes back (after waiting) and the retry fits.
  void* b = alloc.allocate(3 << 19);
  EXPECT_EQ(mem.releases, 1);
  EXPECT_GE(mem.waits, 1);
  EXPECT_EQ(alloc.cached_bytes(), 0);
  EXPECT_EQ(alloc.stats().reserved, 3 << 19);
  try {
    alloc.allocate(2 << 20);
    FAIL() << "allocation beyond the limit succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:7: out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 2097152 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1572864 bytes in use"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1572864 bytes reserved"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake memory of"), std::string::npos) << msg;
  }
  alloc.deallocate(b);
}

TEST(CachingAllocator, BadFreeThrows) {
  FakeMemory mem(1 << 30);
  CachingAllocator alloc(mem, "fake");
  int on_stack = 0;
  EXPECT_THROW(alloc.deallocate(&on_stack), Error);
  void* p = alloc.allocate(10);
  alloc.deallocate(p);
  EXPECT_THROW(alloc.deallocate(p), Error) << "a double free must be caught";
  EXPECT_THROW(alloc.allocate(-1), Error);
}

}  // namespace
}  // namespace hp::cuda
