// The error paths of cuda_check.h: format the failed call into an hp::Error.
#include "kernels/cuda/cuda_check.h"

#include "util/error.h"

namespace hp::cuda {

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  fail("CUDA call {} failed: {} ({}) at {}:{}", what, cudaGetErrorName(status),
       cudaGetErrorString(status), file, line);
}

void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
  fail("cuBLASLt call {} failed: {} ({}) at {}:{}", what, cublasLtGetStatusName(status),
       cublasLtGetStatusString(status), file, line);
}

void throw_internal(const char* what, const char* file, int line) {
  fail("internal error in the CUDA backend: {} at {}:{}", what, file, line);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    fail("CUDA kernel {} failed to launch: {} ({}) at {}:{}", kernel, cudaGetErrorName(status),
         cudaGetErrorString(status), file, line);
  }
}

}  // namespace hp::cuda
