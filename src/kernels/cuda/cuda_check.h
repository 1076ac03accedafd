// Status checks for CUDA runtime and cuBLASLt calls: a failed call throws hp::Error naming the
// call, the status and where it was made. No fmt here, so kernel sources (*.cu) include it freely.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace hp::cuda {

// Throw hp::Error "<what> failed: <name> (<description>) at file:line".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what, const char* file,
                                     int line);

// hp::Error for a broken internal invariant (a bug in this backend, not bad input).
[[noreturn]] void throw_internal(const char* what, const char* file, int line);

// After a kernel launch: launch errors (bad configuration, no device code for this GPU) and any
// sticky error of earlier asynchronous work, named after `kernel`.
void check_launch(const char* kernel, const char* file, int line);

}  // namespace hp::cuda

#define HP_CUDA_CHECK(call)                                                     \
  do {                                                                          \
    const cudaError_t hp_cuda_status_ = (call);                                 \
    if (hp_cuda_status_ != cudaSuccess)                                         \
      ::hp::cuda::throw_cuda_error(hp_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define HP_CUBLAS_CHECK(call)                                                       \
  do {                                                                              \
    const cublasStatus_t hp_cublas_status_ = (call);                                \
    if (hp_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::hp::cuda::throw_cublas_error(hp_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define HP_CUDA_CHECK_LAUNCH(kernel) ::hp::cuda::check_launch(kernel, __FILE__, __LINE__)
