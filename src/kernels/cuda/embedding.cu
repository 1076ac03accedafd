// Embedding on CUDA. Forward: a gather, one 16-byte (or element) copy per thread. Backward,
// deterministic without float atomics: the token ids are sorted with a stable radix sort (CUB)
// carrying their positions, so each distinct token becomes a run of positions in increasing
// order; one warp per run then adds dx rows into that token's dtable row, every column
// sequentially in position order. That is the reference's exact order of f32 additions, so the
// result is independent of thread timing and, in fp32, bit-identical to the reference.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

template <typename T, int N>
__global__ void embedding_forward_kernel(T* x, const int32_t* tokens, const T* table, int64_t n,
                                         int64_t dim, DeviceErrorRecord* errors) {
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
    *reinterpret_cast<Raw*>(x + t * dim + k) =
        *reinterpret_cast<const Raw*>(table + static_cast<int64_t>(tok) * dim + k);
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
// (positions order[i..end), increasing) into dtable[key], lanes over columns. Negative keys
// (reported by positions_kernel) sort first and are skipped.
template <typename T>
__global__ void embedding_accumulate_kernel(float* dtable, const int32_t* keys,
                                            const int32_t* order, const T* dx, int64_t n,
                                            int64_t dim) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (i >= n) return;
  const int32_t key = keys[i];
  if (key < 0 || (i > 0 && keys[i - 1] == key)) return;
  int64_t end = i + 1;
  while (end < n && keys[end] == key) ++end;
  float* row = dtable + static_cast<int64_t>(key) * dim;
  for (int64_t c = lane; c < dim; c += 32) {
    float acc = row[c];
    for (int64_t j = i; j < end; ++j) {
      acc = __fadd_rn(acc, to_float(dx[static_cast<int64_t>(order[j]) * dim + c]));
    }
    row[c] = acc;
  }
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(int n) {
  size_t bytes = 0;
  HP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, 32));
  return bytes;
}

template <typename T>
void forward_as(const LaunchContext& ctx, void* x, const int32_t* tokens, const void* table,
                int64_t n, int64_t dim) {
  constexpr int kN = 16 / sizeof(T);
  const int threads = 256;
  T* xt = static_cast<T*>(x);
  const T* tt = static_cast<const T*>(table);
  if (dim % kN == 0 && all_aligned({x, table}, 16)) {
    const unsigned blocks = grid_blocks(n * (dim / kN), threads, 32LL * ctx.sm_count);
    embedding_forward_kernel<T, kN><<<blocks, threads, 0, ctx.stream>>>(xt, tokens, tt, n, dim,
                                                                        ctx.errors);
  } else {
    const unsigned blocks = grid_blocks(n * dim, threads, 32LL * ctx.sm_count);
    embedding_forward_kernel<T, 1><<<blocks, threads, 0, ctx.stream>>>(xt, tokens, tt, n, dim,
                                                                       ctx.errors);
  }
  HP_CUDA_CHECK_LAUNCH("embedding_forward");
}

}  // namespace

void embedding_forward(const LaunchContext& ctx, Elem t, void* x, const int32_t* tokens,
                       const void* table, int64_t n, int64_t dim) {
  if (n == 0 || dim == 0) return;
  if (t == Elem::kF32) return forward_as<float>(ctx, x, tokens, table, n, dim);
  forward_as<Bf16>(ctx, x, tokens, table, n, dim);
}

size_t embedding_backward_scratch(int64_t n) {
  const size_t array = align256(static_cast<size_t>(n) * sizeof(int32_t));
  return 3 * array + align256(sort_temp_bytes(static_cast<int>(n)));
}

void embedding_backward(const LaunchContext& ctx, Elem t, float* dtable, const int32_t* tokens,
                        const void* dx, int64_t n, int64_t dim, void* scratch,
                        size_t scratch_bytes) {
  if (n == 0 || dim == 0) return;
  const size_t array = align256(static_cast<size_t>(n) * sizeof(int32_t));
  char* base = static_cast<char*>(scratch);
  int32_t* sorted_keys = reinterpret_cast<int32_t*>(base);
  int32_t* order = reinterpret_cast<int32_t*>(base + array);
  int32_t* sorted_order = reinterpret_cast<int32_t*>(base + 2 * array);
  void* temp = base + 3 * array;
  size_t temp_bytes = sort_temp_bytes(static_cast<int>(n));
  if (scratch_bytes < 3 * array + temp_bytes) {
    throw_internal("embedding_backward: scratch smaller than embedding_backward_scratch()",
                   __FILE__, __LINE__);
  }
  const int threads = 256;
  positions_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0,
                     ctx.stream>>>(order, tokens, n, ctx.errors);
  HP_CUDA_CHECK_LAUNCH("embedding_backward (positions)");
  HP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_keys, order,
                                                sorted_order, static_cast<int>(n), 0, 32,
                                                ctx.stream));
  HP_CUDA_CHECK_LAUNCH("embedding_backward (radix sort)");
  const int64_t warps_per_block = threads / 32;
  const unsigned blocks = static_cast<unsigned>((n + warps_per_block - 1) / warps_per_block);
  if (t == Elem::kF32) {
    embedding_accumulate_kernel<float><<<blocks, threads, 0, ctx.stream>>>(
        dtable, sorted_keys, sorted_order, static_cast<const float*>(dx), n, dim);
  } else {
    embedding_accumulate_kernel<Bf16><<<blocks, threads, 0, ctx.stream>>>(
        dtable, sorted_keys, sorted_order, static_cast<const Bf16*>(dx), n, dim);
  }
  HP_CUDA_CHECK_LAUNCH("embedding_backward (accumulate)");
}

}  // namespace hp::cuda
