// A backend is where a stage computes: its memory (a caching allocator), its kernels and its order
// of execution (one stream on a device). The model, the value store and the parameters hold their
// tensors through Buffers from a Backend, so nothing above this line knows whether a pointer is
// host or device memory. Backends: cpu and reference (host), cuda (kernels/cuda, HP_CUDA builds).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/kernels.h"

namespace hp {

enum class Device : uint8_t { kHost, kCuda };

struct MemoryStats {
  int64_t in_use = 0;     // bytes handed out and not yet returned
  int64_t peak = 0;       // largest in_use since the last reset_peak()
  int64_t reserved = 0;   // bytes held from the system (in use + cached for reuse)
  int64_t system_allocations = 0;  // calls to the underlying allocator (cudaMalloc, aligned_alloc)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // For messages and logs, e.g. "cpu-avx512 (OpenBLAS SkylakeX, 2 threads)" or "cuda:0 (H200)".
  virtual std::string name() const = 0;
  virtual Kernels& kernels() = 0;

  // `bytes` of this backend's memory, 256-byte aligned, contents undefined. Freed blocks return to
  // a cache and are reused for later requests of a similar size, so a steady-state step makes no
  // system allocations. Throws hp::Error (with the size and what is in use) when memory runs out.
  virtual void* allocate(int64_t bytes) = 0;
  // Returns a block from allocate(); work already issued that reads or writes it completes first.
  virtual void deallocate(void* p) = 0;

  // Copies ordered with the kernels. copy: within this backend's memory; upload/download: from/to
  // host memory. download returns once the bytes are on the host.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, int64_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual void zero(void* p, int64_t bytes) = 0;
  // Returns once every kernel and copy issued so far has finished (host backends: at once).
  virtual void synchronize() = 0;

  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak() = 0;
};

// One allocation of `elems` elements of one type from a backend, returned when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, DType dtype, int64_t elems)
      : be_(&be), dtype_(dtype), elems_(elems),
        data_(elems > 0 ? be.allocate(elems * dtype_bytes(dtype)) : nullptr) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = std::exchange(o.be_, nullptr);
      dtype_ = o.dtype_;
      elems_ = std::exchange(o.elems_, 0);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DataPtr ptr() const { return {data_, dtype_}; }
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  int64_t elems() const { return elems_; }
  int64_t bytes() const { return elems_ * dtype_bytes(dtype_); }
  Backend* backend() const { return be_; }
  void reset() {
    if (data_) be_->deallocate(data_);
    data_ = nullptr;
    elems_ = 0;
  }

 private:
  Backend* be_ = nullptr;
  DType dtype_ = DType::kF32;
  int64_t elems_ = 0;
  void* data_ = nullptr;
};

// `bytes` of a backend's memory with no element type: message buffers (values of several types
// packed back to back) and token ids (int32). Returned when destroyed.
class RawBuffer {
 public:
  RawBuffer() = default;
  RawBuffer(Backend& be, int64_t bytes)
      : be_(&be), bytes_(bytes), data_(bytes > 0 ? be.allocate(bytes) : nullptr) {}
  ~RawBuffer() { reset(); }
  RawBuffer(RawBuffer&& o) noexcept { *this = std::move(o); }
  RawBuffer& operator=(RawBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = std::exchange(o.be_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  RawBuffer(const RawBuffer&) = delete;
  RawBuffer& operator=(const RawBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Backend* backend() const { return be_; }
  void reset() {
    if (data_) be_->deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  Backend* be_ = nullptr;
  int64_t bytes_ = 0;
  void* data_ = nullptr;
};

// Host backends (kernels/host): the caching allocator over this process's memory. cpu: OpenBLAS
// GEMMs and our SIMD kernels (f32 for now: supports(bf16()) is false); threads <= 0 means
// cpu_threads(0). reference: plain loops in fp32, bf16 and fp64, for checks.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);
std::unique_ptr<Backend> make_reference_backend();

}  // namespace hp
