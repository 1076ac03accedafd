// CudaBackend (cuda_backend.h): a stream, the caching allocator over cudaMalloc, copies ordered on
// the stream (host transfers staged through two pinned buffers so that the host memory is free
// again when upload returns and nothing waits for the device before it must), and the kernels.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <exception>

#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "util/error.h"

namespace hp {
namespace cuda {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

class CudaSystemMemory final : public SystemMemory {
 public:
  explicit CudaSystemMemory(cudaStream_t stream) : stream_(stream) {}
  void* allocate(int64_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, static_cast<size_t>(bytes));
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so later launch checks do not see it
      return nullptr;
    }
    HP_CUDA_CHECK(status);
    return p;
  }
  void release(void* p) override { HP_CUDA_CHECK(cudaFree(p)); }
  void wait_idle() override { HP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  std::string describe() override {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return "the device's free memory is unknown";
    }
    return fmt::format(
        "the device has {:.2f} GiB free of {:.2f} GiB (other backends and "
        "processes included)",
        static_cast<double>(free_bytes) / kGiB, static_cast<double>(total_bytes) / kGiB);
  }

 private:
  cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override { release_all(); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return description_; }
  Kernels& kernels() override { return *kernels_; }

  void* allocate(int64_t bytes) override {
    DeviceGuard guard(device_);
    return allocator_->allocate(bytes);
  }
  // Stream-ordered: the block may be handed out again at once, because everything that will use
  // it next is queued on this backend's stream after the work that used it before.
  void deallocate(void* p) override { allocator_->deallocate(p); }

  void copy(void* dst, const void* src, int64_t bytes) override;
  void upload(void* dst, const void* host_src, int64_t bytes) override;
  void download(void* host_dst, const void* src, int64_t bytes) override;
  void zero(void* p, int64_t bytes) override;
  void synchronize() override;

  MemoryStats memory_stats() const override { return allocator_->stats(); }
  void reset_peak() override { allocator_->reset_peak(); }

 private:
  static constexpr int64_t kStagingBytes = 4 << 20;  // per pinned staging buffer

  void ensure_staging();
  void release_all() noexcept;

  int device_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaSystemMemory> system_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<CudaKernels> kernels_;
  std::array<void*, 2> staging_{};             // pinned host buffers
  std::array<cudaEvent_t, 2> staging_free_{};  // recorded after the last copy using each
  int next_staging_ = 0;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  try {
    DeviceGuard guard(device_);
    description_ = cuda_device_description(device_);
    HP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    system_ = std::make_unique<CudaSystemMemory>(stream_);
    allocator_ = std::make_unique<CachingAllocator>(*system_, fmt::format("cuda:{}", device_));
    kernels_ = std::make_unique<CudaKernels>(*this, device_, stream_);
  } catch (...) {
    release_all();
    throw;
  }
}

// Teardown in dependency order: kernels (they hold blocks), allocator, pinned buffers, stream.
void CudaBackend::release_all() noexcept {
  try {
    DeviceGuard guard(device_);
    if (stream_) HP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    kernels_.reset();
    allocator_.reset();
    system_.reset();
    for (int i = 0; i < 2; ++i) {
      if (staging_free_[i]) HP_CUDA_CHECK(cudaEventDestroy(staging_free_[i]));
      if (staging_[i]) HP_CUDA_CHECK(cudaFreeHost(staging_[i]));
      staging_free_[i] = nullptr;
      staging_[i] = nullptr;
    }
    if (stream_) HP_CUDA_CHECK(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda:%d: error while releasing the backend: %s\n", device_, e.what());
  }
}

void CudaBackend::ensure_staging() {
  if (staging_[0]) return;
  for (int i = 0; i < 2; ++i) {
    HP_CUDA_CHECK(cudaMallocHost(&staging_[i], kStagingBytes));
    HP_CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_[i], cudaEventDisableTiming));
  }
}

void CudaBackend::copy(void* dst, const void* src, int64_t bytes) {
  HP_CHECK(bytes >= 0, "cuda copy: negative size {}", bytes);
  if (bytes == 0 || dst == src) return;
  DeviceGuard guard(device_);
  HP_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
}

// Each piece: wait until the staging buffer's previous copy has run, fill it, queue its copy.
void CudaBackend::upload(void* dst, const void* host_src, int64_t bytes) {
  HP_CHECK(bytes >= 0, "cuda upload: negative size {}", bytes);
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  ensure_staging();
  const char* src = static_cast<const char*>(host_src);
  char* out = static_cast<char*>(dst);
  for (int64_t off = 0; off < bytes; off += kStagingBytes) {
    const int64_t len = std::min(kStagingBytes, bytes - off);
    const int slot = next_staging_;
    next_staging_ ^= 1;
    HP_CUDA_CHECK(cudaEventSynchronize(staging_free_[slot]));
    std::memcpy(staging_[slot], src + off, static_cast<size_t>(len));
    HP_CUDA_CHECK(cudaMemcpyAsync(out + off, staging_[slot], static_cast<size_t>(len),
                                  cudaMemcpyHostToDevice, stream_));
    HP_CUDA_CHECK(cudaEventRecord(staging_free_[slot], stream_));
  }
}

// Pieces alternate between the two staging buffers: piece p + 1 is copied by the device while the
// host copies piece p out. The bad-input record is fetched first, so it is on the host (and
// checked) once the last piece is.
void CudaBackend::download(void* host_dst, const void* src, int64_t bytes) {
  HP_CHECK(bytes >= 0, "cuda download: negative size {}", bytes);
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  ensure_staging();
  kernels_->queue_error_fetch();
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(host_dst);
  const int64_t pieces = (bytes + kStagingBytes - 1) / kStagingBytes;
  auto piece_len = [&](int64_t p) { return std::min(kStagingBytes, bytes - p * kStagingBytes); };
  auto issue = [&](int64_t p) {
    const int slot = static_cast<int>(p % 2);
    HP_CUDA_CHECK(cudaMemcpyAsync(staging_[slot], in + p * kStagingBytes,
                                  static_cast<size_t>(piece_len(p)), cudaMemcpyDeviceToHost,
                                  stream_));
    HP_CUDA_CHECK(cudaEventRecord(staging_free_[slot], stream_));
  };
  issue(0);
  for (int64_t p = 0; p < pieces; ++p) {
    if (p + 1 < pieces) issue(p + 1);
    const int slot = static_cast<int>(p % 2);
    HP_CUDA_CHECK(cudaEventSynchronize(staging_free_[slot]));
    std::memcpy(out + p * kStagingBytes, staging_[slot], static_cast<size_t>(piece_len(p)));
  }
  kernels_->check_reported_errors();
}

void CudaBackend::zero(void* p, int64_t bytes) {
  HP_CHECK(bytes >= 0, "cuda zero: negative size {}", bytes);
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  HP_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
}

void CudaBackend::synchronize() {
  DeviceGuard guard(device_);
  kernels_->queue_error_fetch();
  HP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  kernels_->check_reported_errors();
}

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
  }
  return count == 0 ? "the driver reports no CUDA device" : "";
}

std::string cuda_device_description(int device) {
  const int count = cuda_device_count();
  HP_CHECK(device >= 0 && device < count, "CUDA device {} does not exist ({} device(s) usable{})",
           device, count, count == 0 ? ": " + cuda_unavailable_reason() : std::string());
  cudaDeviceProp prop{};
  HP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  HP_CUDA_CHECK(cudaDriverGetVersion(&driver));
  HP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  return fmt::format("cuda:{} {} (sm_{}{}, {} SMs, {:.1f} GiB, driver {}.{}, runtime {}.{})",
                     device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                     static_cast<double>(prop.totalGlobalMem) / cuda::kGiB, driver / 1000,
                     driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = cuda_device_count();
  HP_CHECK(count > 0,
           "make_cuda_backend: no CUDA device is usable ({}). This build has the CUDA backend "
           "but this machine has no GPU or no driver; use the cpu backend.",
           cuda_unavailable_reason());
  HP_CHECK(device >= 0 && device < count,
           "make_cuda_backend: CUDA device {} does not exist; this machine has {} (0..{})", device,
           count, count - 1);
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace hp
