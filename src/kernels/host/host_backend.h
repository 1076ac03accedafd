// A backend whose memory is this process's memory: the caching allocator (host_allocator.h), memcpy
// copies, and the kernels it is given (the CPU kernels or the reference kernels). Not the kernels.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/host/host_allocator.h"

namespace hp {

class HostBackend : public Backend {
 public:
  HostBackend(std::string name, std::unique_ptr<Kernels> kernels);
  // With the blocks of the allocator coming from `sys` (tests: a guarded arena).
  HostBackend(std::string name, std::unique_ptr<Kernels> kernels, HostAllocator::System sys);

  Device device() const override { return Device::kHost; }
  std::string name() const override { return name_; }
  Kernels& kernels() override { return *kernels_; }

  void* allocate(int64_t bytes) override { return alloc_.allocate(bytes); }
  void deallocate(void* p) override { alloc_.deallocate(p); }
  void copy(void* dst, const void* src, int64_t bytes) override;
  void upload(void* dst, const void* host_src, int64_t bytes) override;
  void download(void* host_dst, const void* src, int64_t bytes) override;
  void zero(void* p, int64_t bytes) override;
  void synchronize() override {}

  MemoryStats memory_stats() const override { return alloc_.stats(); }
  void reset_peak() override { alloc_.reset_peak(); }
  HostAllocator& allocator() { return alloc_; }

 private:
  std::string name_;
  std::unique_ptr<Kernels> kernels_;
  HostAllocator alloc_;
};

}  // namespace hp
