// Rotary-position kernel and its launch geometry (rope.cu launches it; tests/cuda_emu runs the
// same body on a CPU emulation), in place: one thread per (row, head, pair). The cos/sin of each
// (position, pair) come from a table the host filled with rope_angles.h's fp32 formula, and the
// rotation is rounded step by step as the reference does, so fp32 results match it bit for bit.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

template <typename T>
__global__ void rope_kernel(T* x, const float2* table, int64_t rows, int64_t ld, int64_t seq,
                            int64_t n_heads, int64_t head_dim, bool inverse) {
  const int64_t half = head_dim / 2;
  const int64_t total = rows * n_heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t j = i % half;
    const int64_t head_row = i / half;
    const int64_t h = head_row % n_heads;
    const int64_t t = head_row / n_heads;
    const float2 cs = table[(t % seq) * half + j];
    const float sn = inverse ? -cs.y : cs.y;
    T* xh = x + t * ld + h * head_dim;
    const float a = to_float(xh[j]);
    const float b = to_float(xh[j + half]);
    xh[j] = from_float<T>(__fsub_rn(__fmul_rn(a, cs.x), __fmul_rn(b, sn)));
    xh[j + half] = from_float<T>(__fadd_rn(__fmul_rn(b, cs.x), __fmul_rn(a, sn)));
  }
}

template <typename T, class L>
void rope_as(L& launch, int sm_count, void* x, const float2* table, int64_t rows, int64_t ld,
             int64_t seq, int64_t n_heads, int64_t head_dim, bool inverse) {
  const int threads = 256;
  const int64_t total = rows * n_heads * (head_dim / 2);
  launch("rope", rope_kernel<T>, grid_blocks(total, threads, 32LL * sm_count), threads, 0,
         static_cast<T*>(x), table, rows, ld, seq, n_heads, head_dim, inverse);
}

template <class L>
void rope_run(L& launch, int sm_count, Elem t, void* x, const float2* table, int64_t rows,
              int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim, bool inverse) {
  if (rows == 0 || n_heads == 0 || head_dim == 0) return;
  if (t == Elem::kF32) {
    return rope_as<float>(launch, sm_count, x, table, rows, ld, seq, n_heads, head_dim, inverse);
  }
  rope_as<Bf16>(launch, sm_count, x, table, rows, ld, seq, n_heads, head_dim, inverse);
}

}  // namespace
}  // namespace hp::cuda
