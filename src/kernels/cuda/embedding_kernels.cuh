// Embedding kernels and their launch geometry (embedding.cu launches them, with CUB's radix sort
// between the backward's two kernels; tests/cuda_emu runs the same bodies on a CPU emulation with
// a host sort). Forward: a gather, one 16-byte (or element) copy per thread. Backward,
// deterministic without float atomics: the token ids are sorted with a stable radix sort carrying
// their positions, so each distinct token becomes a run of positions in increasing order; one
// warp per run then adds dx rows into that token's dtable row, every column sequentially in
// position order. That is the reference's exact order of f32 additions, so the result is
// independent of thread timing and, in fp32, bit-identical to the reference. A vocabulary slice
// (docs/tensor-parallel.md: the table holds the rows of ids begin .. begin + count - 1) gives zero
// rows for the other tokens forward and skips them backward.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

template <typename T, int N>
__global__ void embedding_forward_kernel(T* x, const int32_t* tokens, const T* table, int64_t n,
                                         int64_t dim, int64_t begin, int64_t count,
                                         DeviceErrorRecord* errors) {
  using Raw = typename RawVec<static_cast<int>(sizeof(T)) * N>::Type;
  const int64_t per_row = dim / N;
  const int64_t total = n * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t t = i / per_row;
    const int64_t k = (i % per_row) * N;
    const int32_t tok = tokens[t];
    if (tok < 0) {
      report_error(errors, kErrEmbeddingToken, t, tok, 0);
      float nan[N];
#pragma unroll
      for (int j = 0; j < N; ++j) nan[j] = nan_f();
      store_vec<T, N>(x + t * dim + k, nan);
      continue;
    }
    const int64_t row = static_cast<int64_t>(tok) - begin;
    if (row < 0 || row >= count) {  // another rank's slice of the vocabulary
      float zero[N];
#pragma unroll
      for (int j = 0; j < N; ++j) zero[j] = 0.0f;
      store_vec<T, N>(x + t * dim + k, zero);
      continue;
    }
    *reinterpret_cast<Raw*>(x + t * dim + k) =
        *reinterpret_cast<const Raw*>(table + row * dim + k);
  }
}

// order[i] = i (the positions the sort carries along), and the negative-token check.
__global__ void positions_kernel(int32_t* order, const int32_t* tokens, int64_t n,
                                 DeviceErrorRecord* errors) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  order[i] = static_cast<int32_t>(i);
  if (tokens[i] < 0) report_error(errors, kErrEmbeddingBackwardToken, i, tokens[i], 0);
}

// One warp per sorted index i; the warp that starts a run of equal keys adds the run's dx rows
// (positions order[i..end), increasing) into dtable[key - begin], lanes over columns. Negative keys
// (reported by positions_kernel) sort first and are skipped, as are keys outside the slice.
template <typename T>
__global__ void embedding_accumulate_kernel(float* dtable, const int32_t* keys,
                                            const int32_t* order, const T* dx, int64_t n,
                                            int64_t dim, int64_t begin, int64_t count) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (i >= n) return;
  const int32_t key = keys[i];
  if (key < 0 || key < begin || key - begin >= count || (i > 0 && keys[i - 1] == key)) return;
  int64_t end = i + 1;
  while (end < n && keys[end] == key) ++end;
  float* row = dtable + (static_cast<int64_t>(key) - begin) * dim;
  for (int64_t c = lane; c < dim; c += 32) {
    float acc = row[c];
    for (int64_t j = i; j < end; ++j) {
      acc = __fadd_rn(acc, to_float(dx[static_cast<int64_t>(order[j]) * dim + c]));
    }
    row[c] = acc;
  }
}

template <typename T, class L>
void embedding_forward_as(L& launch, int sm_count, DeviceErrorRecord* errors, void* x,
                          const int32_t* tokens, const void* table, int64_t n, int64_t dim,
                          int64_t begin, int64_t count) {
  constexpr int kN = 16 / sizeof(T);
  const int threads = 256;
  T* xt = static_cast<T*>(x);
  const T* tt = static_cast<const T*>(table);
  if (dim % kN == 0 && all_aligned({x, table}, 16)) {
    launch("embedding_forward", embedding_forward_kernel<T, kN>,
           grid_blocks(n * (dim / kN), threads, 32LL * sm_count), threads, 0, xt, tokens, tt, n,
           dim, begin, count, errors);
  } else {
    launch("embedding_forward", embedding_forward_kernel<T, 1>,
           grid_blocks(n * dim, threads, 32LL * sm_count), threads, 0, xt, tokens, tt, n, dim,
           begin, count, errors);
  }
}

// The table holds the rows of ids begin .. begin + count - 1 (the whole table: 0 and INT64_MAX).
template <class L>
void embedding_forward_run(L& launch, int sm_count, DeviceErrorRecord* errors, Elem t, void* x,
                           const int32_t* tokens, const void* table, int64_t n, int64_t dim,
                           int64_t begin = 0, int64_t count = INT64_MAX) {
  if (n == 0 || dim == 0) return;
  if (t == Elem::kF32) {
    return embedding_forward_as<float>(launch, sm_count, errors, x, tokens, table, n, dim, begin,
                                       count);
  }
  embedding_forward_as<Bf16>(launch, sm_count, errors, x, tokens, table, n, dim, begin, count);
}

constexpr int kEmbeddingThreads = 256;

// The backward before the sort: order[i] = i and the negative-token check.
template <class L>
void embedding_positions_run(L& launch, DeviceErrorRecord* errors, int32_t* order,
                             const int32_t* tokens, int64_t n) {
  launch("embedding_backward (positions)", positions_kernel,
         static_cast<unsigned>((n + kEmbeddingThreads - 1) / kEmbeddingThreads), kEmbeddingThreads,
         0, order, tokens, n, errors);
}

// The backward after the sort: sorted keys and the positions that came with them.
template <class L>
void embedding_accumulate_run(L& launch, Elem t, float* dtable, const int32_t* sorted_keys,
                              const int32_t* sorted_order, const void* dx, int64_t n, int64_t dim,
                              int64_t begin = 0, int64_t count = INT64_MAX) {
  const int64_t warps_per_block = kEmbeddingThreads / 32;
  const unsigned blocks = static_cast<unsigned>((n + warps_per_block - 1) / warps_per_block);
  if (t == Elem::kF32) {
    launch("embedding_backward (accumulate)", embedding_accumulate_kernel<float>, blocks,
           kEmbeddingThreads, 0, dtable, sorted_keys, sorted_order, static_cast<const float*>(dx),
           n, dim, begin, count);
  } else {
    launch("embedding_backward (accumulate)", embedding_accumulate_kernel<Bf16>, blocks,
           kEmbeddingThreads, 0, dtable, sorted_keys, sorted_order, static_cast<const Bf16*>(dx), n,
           dim, begin, count);
  }
}

}  // namespace
}  // namespace hp::cuda
