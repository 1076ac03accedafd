// The kernel launchers of the CUDA attention (attention_kernels.cu), declared for the host
// dispatcher (flash_attention.cc) and the benchmark. Each returns the first CUDA error of its
// launches (cudaSuccess otherwise); the caller turns failures into hp::Error. No fmt, no hp
// headers: this is included by nvcc-built and host-built files alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.h"

namespace hp::cuda::attn {

// Tensor-core forward; p.head_dim must be 64 or 128 and every row 16-byte aligned (the
// dispatcher checks).
cudaError_t launch_forward_mma(const Params& p, cudaStream_t stream);
// SIMT forward for f32 (bf16 = false) or bf16 storage; p.head_dim <= kSimtMaxHeadDim.
cudaError_t launch_forward_simt(bool bf16, const Params& p, cudaStream_t stream);
// p.dvec from p.o and p.dout.
cudaError_t launch_row_dot(bool bf16, const Params& p, cudaStream_t stream);
// Tensor-core backward: zeroes p.dq_acc, adds dQ into it, writes dk, dv, then converts dq.
// Needs p.dvec.
cudaError_t launch_backward_mma(const Params& p, cudaStream_t stream);
// SIMT backward: dk, dv, then dq in its own pass. Needs p.dvec.
cudaError_t launch_backward_simt(bool bf16, const Params& p, cudaStream_t stream);

// n values uniform in [lo, hi) from a counter hash of (seed, index): fills benchmark inputs on
// the device.
cudaError_t launch_fill_uniform(bool bf16, void* dst, int64_t n, uint64_t seed, float lo, float hi,
                                cudaStream_t stream);

}  // namespace hp::cuda::attn
