// Embedding launchers (launch.h) over embedding_kernels.cuh; the backward sorts the token ids
// with CUB's radix sort (stable, so equal ids keep their positions in increasing order).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/launch.h"

namespace hp::cuda {
namespace {

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(int n) {
  size_t bytes = 0;
  HP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, 32));
  return bytes;
}

}  // namespace

void embedding_forward(const LaunchContext& ctx, Elem t, void* x, const int32_t* tokens,
                       const void* table, int64_t n, int64_t dim, int64_t begin, int64_t count) {
  CudaLaunch launch{ctx.stream};
  embedding_forward_run(launch, ctx.sm_count, ctx.errors, t, x, tokens, table, n, dim, begin,
                        count);
}

size_t embedding_backward_scratch(int64_t n) {
  const size_t array = align256(static_cast<size_t>(n) * sizeof(int32_t));
  return 3 * array + align256(sort_temp_bytes(static_cast<int>(n)));
}

void embedding_backward(const LaunchContext& ctx, Elem t, float* dtable, const int32_t* tokens,
                        const void* dx, int64_t n, int64_t dim, void* scratch,
                        size_t scratch_bytes, int64_t begin, int64_t count) {
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
  CudaLaunch launch{ctx.stream};
  embedding_positions_run(launch, ctx.errors, order, tokens, n);
  HP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_keys, order,
                                                sorted_order, static_cast<int>(n), 0, 32,
                                                ctx.stream));
  HP_CUDA_CHECK_LAUNCH("embedding_backward (radix sort)");
  embedding_accumulate_run(launch, t, dtable, sorted_keys, sorted_order, dx, n, dim, begin, count);
}

}  // namespace hp::cuda
