// The host caching allocator (size classes, alignment, reuse, statistics, running out of memory)
// and the host backends' memory operations.
#include "kernels/host/host_backend.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/host/host_allocator.h"
#include "util/error.h"

namespace hp {
namespace {

TEST(HostAllocator, SizeClassesWasteAtMostAnEighth) {
  EXPECT_EQ(HostAllocator::size_class(0), 256);
  EXPECT_EQ(HostAllocator::size_class(1), 256);
  EXPECT_EQ(HostAllocator::size_class(256), 256);
  EXPECT_EQ(HostAllocator::size_class(257), 512);
  EXPECT_EQ(HostAllocator::size_class(2048), 2048);
  EXPECT_EQ(HostAllocator::size_class(2049), 2304);
  EXPECT_EQ(HostAllocator::size_class((1 << 20) + 1), (1 << 20) + (1 << 17));
  for (int64_t n = 1; n < (int64_t{1} << 30); n = n * 3 + 7) {
    const int64_t c = HostAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 256, 0) << n;
    if (n > 2048) {
      EXPECT_LE(c - n, n / 8) << n;
    }
  }
}

TEST(HostAllocator, FreedBlocksAreReusedWithoutSystemAllocations) {
  HostAllocator a;
  // One "step": a mix of sizes, some alive at once, freed in another order.
  auto step = [&] {
    std::vector<void*> live;
    for (int64_t bytes : {100, 5000, 5000, 1 << 20, 300, 70000}) {
      void* p = a.allocate(bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
      std::memset(p, 1, static_cast<size_t>(bytes));  // the whole request is usable
      live.push_back(p);
    }
    for (size_t i = 0; i < live.size(); i += 2) a.deallocate(live[i]);
    void* again = a.allocate(5000);  // reuses the 5000-byte block freed above
    a.deallocate(again);
    for (size_t i = 1; i < live.size(); i += 2) a.deallocate(live[i]);
  };
  step();
  const MemoryStats first = a.stats();
  EXPECT_EQ(first.in_use, 0);
  EXPECT_EQ(first.system_allocations, 6);
  EXPECT_EQ(first.peak, 100 + 5000 + 5000 + (1 << 20) + 300 + 70000);
  EXPECT_GE(first.reserved, first.peak);
  step();
  step();
  EXPECT_EQ(a.stats().system_allocations, first.system_allocations);
  EXPECT_EQ(a.stats().reserved, first.reserved);
  a.release_cached();
  EXPECT_EQ(a.stats().reserved, 0);
  int not_a_block = 0;
  EXPECT_THROW(a.deallocate(&not_a_block), Error);
}

TEST(HostAllocator, PeakResetsToWhatIsInUse) {
  HostAllocator a;
  void* p = a.allocate(1000);
  void* q = a.allocate(3000);
  a.deallocate(q);
  EXPECT_EQ(a.stats().peak, 4000);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 1000);
  a.deallocate(p);
}

// A system with a fixed budget: the cache is given back before the allocator gives up, and giving
// up is an hp::Error that says how much was asked for and how much is in use.
TEST(HostAllocator, RunningOutGivesTheCacheBackThenAClearError) {
  int64_t budget = 8192, used = 0;
  HostAllocator::System sys;
  std::vector<std::pair<void*, int64_t>> blocks;
  sys.alloc = [&](int64_t bytes) -> void* {
    if (used + bytes > budget) return nullptr;
    used += bytes;
    void* p = std::aligned_alloc(256, static_cast<size_t>(bytes));
    blocks.emplace_back(p, bytes);
    return p;
  };
  sys.free = [&](void* p) {
    for (auto it = blocks.begin(); it != blocks.end(); ++it)
      if (it->first == p) {
        used -= it->second;
        blocks.erase(it);
        break;
      }
    std::free(p);
  };
  {
    HostAllocator a(sys);
    a.deallocate(a.allocate(6000));  // 6144 bytes now cached
    void* big = a.allocate(7000);    // needs the cached block's memory back
    EXPECT_EQ(a.stats().system_allocations, 2);
    try {
      a.allocate(4000);
      FAIL() << "expected an out-of-memory error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("out of host memory"), std::string::npos) << msg;
      EXPECT_NE(msg.find("4096 bytes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("7000 bytes in use"), std::string::npos) << msg;
    }
    a.deallocate(big);
  }
  EXPECT_EQ(used, 0);  // the destructor returned everything
}

TEST(HostBackend, CopiesAndBuffers) {
  for (auto& be : {make_reference_backend(), make_cpu_backend(1)}) {
    SCOPED_TRACE(be->name());
    EXPECT_EQ(be->device(), Device::kHost);
    const int64_t before = be->memory_stats().system_allocations;
    std::vector<float> host = {1, 2, 3, 4}, back(4);
    {
      Buffer a(*be, DType::kF32, 4), b(*be, DType::kF32, 4);
      EXPECT_EQ(a.bytes(), 16);
      be->upload(a.data(), host.data(), 16);
      be->copy(b.data(), a.data(), 16);
      be->download(back.data(), b.data(), 16);
      EXPECT_EQ(back, host);
      be->zero(b.data(), 8);
      be->download(back.data(), b.data(), 16);
      EXPECT_EQ(back, (std::vector<float>{0, 0, 3, 4}));
      EXPECT_EQ(be->memory_stats().in_use, 32);
    }
    EXPECT_EQ(be->memory_stats().in_use, 0);
    {
      Buffer c(*be, DType::kBF16, 8);  // 16 bytes: the same class, from the cache
      RawBuffer r(*be, 16);
      EXPECT_EQ(c.ptr().dtype, DType::kBF16);
    }
    EXPECT_EQ(be->memory_stats().system_allocations, before + 2);
  }
}

}  // namespace
}  // namespace hp
