// src/kernels/cuda/flash_attention.h -- causal GQA flash attention on CUDA (bf16 tensor-core path
// and an fp32 path), forward and backward; only the log-sum-exp is kept between them.
#pragma once
#include <cstddef>
#include <cuda_runtime.h>
#include "kernels/dtype.h"
#include "kernels/kernels.h"
namespace hp::cuda {
// o and lse (f32, [batch][heads][seq]) from q, k, v; dtype kF32 or kBF16 (q, k, v, o share it).
void flash_attention_forward(DType dtype, const AttnShape& s, const void* q, const void* k,
                             const void* v, void* o, float* lse, cudaStream_t stream);
// Bytes of scratch flash_attention_backward needs for this shape (e.g. an f32 dq accumulator).
size_t flash_attention_backward_workspace(DType dtype, const AttnShape& s);
// dq, dk, dv (overwritten) from dout, using o and lse of the forward.
void flash_attention_backward(DType dtype, const AttnShape& s, const void* q, const void* k,
                              const void* v, const void* o, const void* dout, const float* lse,
                              void* dq, void* dk, void* dv, void* workspace, cudaStream_t stream);
}  // namespace hp::cuda
