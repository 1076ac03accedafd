// Host memory operations and the makers of the cpu and reference backends.
#include "kernels/host/host_backend.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/cpu_kernels.h"
#include "util/error.h"

namespace hp {

HostBackend::HostBackend(std::string name, std::unique_ptr<Kernels> kernels)
    : name_(std::move(name)), kernels_(std::move(kernels)) {}

HostBackend::HostBackend(std::string name, std::unique_ptr<Kernels> kernels,
                         HostAllocator::System sys)
    : name_(std::move(name)), kernels_(std::move(kernels)), alloc_(std::move(sys)) {}

void HostBackend::copy(void* dst, const void* src, int64_t bytes) {
  HP_CHECK(bytes >= 0, "copy of {} bytes", bytes);
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void HostBackend::upload(void* dst, const void* host_src, int64_t bytes) {
  copy(dst, host_src, bytes);
}

void HostBackend::download(void* host_dst, const void* src, int64_t bytes) {
  copy(host_dst, src, bytes);
}

void HostBackend::zero(void* p, int64_t bytes) {
  HP_CHECK(bytes >= 0, "zero of {} bytes", bytes);
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
}

std::unique_ptr<Backend> make_cpu_backend(int threads, CpuIsa isa) {
  auto k = make_cpu_kernels(threads, isa);
  std::string name = fmt::format("{} (OpenBLAS {}, {} thread{})", k->name(), blas_core_name(),
                                 cpu_threads(threads), cpu_threads(threads) == 1 ? "" : "s");
  return std::make_unique<HostBackend>(std::move(name), std::move(k));
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return make_cpu_backend(threads, cpu_isa_from_env());
}

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<HostBackend>("reference (plain loops)", make_reference_kernels());
}

}  // namespace hp
