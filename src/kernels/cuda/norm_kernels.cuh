// RMSNorm kernels and their launch geometry (norm.cu launches them on a stream; tests/cuda_emu
// runs the same bodies on a CPU emulation). Forward: one block per row. Backward: each block takes
// a contiguous run of rows, writes dx and keeps its share of dg in shared memory (every column
// owned by one thread), then a second kernel adds the blocks' partial dg in block order:
// deterministic, no float atomics. Arithmetic in f32 in the reference's order; bf16 rounded once
// on store.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

// N: elements per access (1: scalar path for odd dims or unaligned pointers).
template <typename T, int N>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* g, int64_t dim,
                                       float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  T* yr = y + row * dim;
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  float ss = 0.0f;
  for (int64_t k = static_cast<int64_t>(threadIdx.x) * N; k < dim; k += step) {
    float xv[N];
    load_vec<T, N>(xr + k, xv);
#pragma unroll
    for (int j = 0; j < N; ++j) ss += xv[j] * xv[j];
  }
  ss = block_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = rs;
  for (int64_t k = static_cast<int64_t>(threadIdx.x) * N; k < dim; k += step) {
    float xv[N], gv[N], out[N];
    load_vec<T, N>(xr + k, xv);
    load_vec<T, N>(g + k, gv);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = __fmul_rn(__fmul_rn(xv[j], rs), gv[j]);
    store_vec<T, N>(yr + k, out);
  }
}

// Rows [rows * b / B, rows * (b + 1) / B) for block b of B. dx may alias dy (each element is
// read and then written by the same thread).
template <typename T, int N>
__global__ void rmsnorm_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const T* g,
                                        const float* rstd, int64_t rows, int64_t dim,
                                        bool accumulate) {
  HP_DYNAMIC_SHARED(float, dg_acc);  // dim floats
  const int64_t b = blockIdx.x, blocks = gridDim.x;
  const int64_t r_begin = rows * b / blocks, r_end = rows * (b + 1) / blocks;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * N;
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  for (int64_t k = first; k < dim; k += step) {
#pragma unroll
    for (int j = 0; j < N; ++j) dg_acc[k + j] = 0.0f;
  }
  const float fdim = static_cast<float>(dim);
  for (int64_t r = r_begin; r < r_end; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    T* dxr = dx + r * dim;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t k = first; k < dim; k += step) {
      float xv[N], gv[N], dyv[N];
      load_vec<T, N>(xr + k, xv);
      load_vec<T, N>(g + k, gv);
      load_vec<T, N>(dyr + k, dyv);
#pragma unroll
      for (int j = 0; j < N; ++j) dot += dyv[j] * gv[j] * xv[j];
    }
    dot = block_sum(dot);
    // c = rs^3 * dot / dim; dx = rs * g * dy - x * c; dg += dy * x * rs.
    const float c = __fdiv_rn(__fmul_rn(__fmul_rn(__fmul_rn(rs, rs), rs), dot), fdim);
    for (int64_t k = first; k < dim; k += step) {
      float xv[N], gv[N], dyv[N], out[N];
      load_vec<T, N>(xr + k, xv);
      load_vec<T, N>(g + k, gv);
      load_vec<T, N>(dyr + k, dyv);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        out[j] = __fsub_rn(__fmul_rn(__fmul_rn(rs, gv[j]), dyv[j]), __fmul_rn(xv[j], c));
        dg_acc[k + j] += __fmul_rn(__fmul_rn(dyv[j], xv[j]), rs);
      }
      if (accumulate) {
        float old[N];
        load_vec<T, N>(dxr + k, old);
#pragma unroll
        for (int j = 0; j < N; ++j) out[j] = __fadd_rn(old[j], out[j]);
      }
      store_vec<T, N>(dxr + k, out);
    }
  }
  for (int64_t k = first; k < dim; k += step) {
#pragma unroll
    for (int j = 0; j < N; ++j) partial[b * dim + k + j] = dg_acc[k + j];
  }
}

// dg[k] += sum over blocks b = 0, 1, ... of partial[b][k], in that order.
__global__ void rmsnorm_dg_reduce_kernel(float* dg, const float* partial, int64_t blocks,
                                         int64_t dim) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= dim) return;
  float s = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) s += partial[b * dim + k];
  dg[k] += s;
}

// 16-byte accesses when dim and every pointer allow them.
template <typename T>
bool rmsnorm_use_vec(int64_t dim, std::initializer_list<const void*> ptrs) {
  return dim % (16 / sizeof(T)) == 0 && all_aligned(ptrs, 16);
}

// Blocks of the backward (each a contiguous run of rows): two per SM, at most one per row.
inline int64_t rmsnorm_backward_grid(int sm_count, int64_t rows) {
  return std::clamp<int64_t>(rows, 1, 2 * static_cast<int64_t>(sm_count));
}

template <typename T, int N, class L>
void rmsnorm_forward_as(L& launch, void* y, float* rstd, const void* x, const void* g, int64_t rows,
                        int64_t dim, float eps) {
  launch("rmsnorm_forward", rmsnorm_forward_kernel<T, N>, static_cast<unsigned>(rows),
         row_block_threads(dim / N), 0, static_cast<T*>(y), rstd, static_cast<const T*>(x),
         static_cast<const T*>(g), dim, eps);
}

template <class L>
void rmsnorm_forward_run(L& launch, Elem t, void* y, float* rstd, const void* x, const void* g,
                         int64_t rows, int64_t dim, float eps) {
  if (rows == 0) return;
  if (t == Elem::kF32) {
    if (rmsnorm_use_vec<float>(dim, {y, x, g})) {
      return rmsnorm_forward_as<float, 4>(launch, y, rstd, x, g, rows, dim, eps);
    }
    return rmsnorm_forward_as<float, 1>(launch, y, rstd, x, g, rows, dim, eps);
  }
  if (rmsnorm_use_vec<Bf16>(dim, {y, x, g})) {
    return rmsnorm_forward_as<Bf16, 8>(launch, y, rstd, x, g, rows, dim, eps);
  }
  rmsnorm_forward_as<Bf16, 1>(launch, y, rstd, x, g, rows, dim, eps);
}

// partial: rmsnorm_backward_grid(sm_count, rows) * dim floats of scratch.
template <typename T, int N, class L>
void rmsnorm_backward_as(L& launch, int sm_count, void* dx, float* dg, float* partial,
                         const void* dy, const void* x, const void* g, const float* rstd,
                         int64_t rows, int64_t dim, bool accumulate) {
  const int64_t blocks = rmsnorm_backward_grid(sm_count, rows);
  launch("rmsnorm_backward", rmsnorm_backward_kernel<T, N>, static_cast<unsigned>(blocks),
         row_block_threads(dim / N), static_cast<size_t>(dim) * sizeof(float), static_cast<T*>(dx),
         partial, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(g),
         rstd, rows, dim, accumulate);
  const int threads = 256;
  launch("rmsnorm_backward (dg reduction)", rmsnorm_dg_reduce_kernel,
         static_cast<unsigned>((dim + threads - 1) / threads), threads, 0, dg,
         static_cast<const float*>(partial), blocks, dim);
}

template <class L>
void rmsnorm_backward_run(L& launch, int sm_count, Elem t, void* dx, float* dg, float* partial,
                          const void* dy, const void* x, const void* g, const float* rstd,
                          int64_t rows, int64_t dim, bool accumulate) {
  if (rows == 0) return;
  if (t == Elem::kF32) {
    if (rmsnorm_use_vec<float>(dim, {dx, dy, x, g})) {
      return rmsnorm_backward_as<float, 4>(launch, sm_count, dx, dg, partial, dy, x, g, rstd, rows,
                                           dim, accumulate);
    }
    return rmsnorm_backward_as<float, 1>(launch, sm_count, dx, dg, partial, dy, x, g, rstd, rows,
                                         dim, accumulate);
  }
  if (rmsnorm_use_vec<Bf16>(dim, {dx, dy, x, g})) {
    return rmsnorm_backward_as<Bf16, 8>(launch, sm_count, dx, dg, partial, dy, x, g, rstd, rows,
                                        dim, accumulate);
  }
  rmsnorm_backward_as<Bf16, 1>(launch, sm_count, dx, dg, partial, dy, x, g, rstd, rows, dim,
                               accumulate);
}

}  // namespace
}  // namespace hp::cuda
