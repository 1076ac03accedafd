// CudaLaunch: how the launchers (*.cu) start the kernels of the *_kernels.cuh dispatchers, on one
// stream, checking the launch. nvcc only (the CPU emulation has its own launch object).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cuda_check.h"

namespace hp::cuda {

struct CudaLaunch {
  cudaStream_t stream;

  // Kernels that need more than the default 48 KiB of dynamic shared memory opt in first.
  template <typename... KArgs, typename... Args>
  void operator()(const char* name, void (*kernel)(KArgs...), unsigned blocks, int threads,
                  size_t shared_bytes, Args... args) const {
    if (shared_bytes > 48 * 1024) {
      HP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
    }
    kernel<<<blocks, threads, shared_bytes, stream>>>(static_cast<KArgs>(args)...);
    HP_CUDA_CHECK_LAUNCH(name);
  }
};

}  // namespace hp::cuda
