// The CUDA backend: device memory through a caching allocator, one CUDA stream per backend object
// (pipeline stages running as threads of one process may share a device, each with its own
// backend and stream), and CudaKernels queued on that stream. Built only with HP_CUDA.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace hp {

// Number of CUDA devices this process can use; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

// Why cuda_device_count() is 0, e.g. "cudaErrorInsufficientDriver (CUDA driver version is
// insufficient for CUDA runtime version)"; empty when devices were found.
std::string cuda_unavailable_reason();

// One line about a device, e.g. "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0,
// runtime 13.0)". Throws hp::Error for a device that does not exist.
std::string cuda_device_description(int device);

// A backend on `device` with its own stream. Throws hp::Error when the device does not exist
// (no GPU or driver: the message says so and names the CPU backend as the alternative).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace hp
