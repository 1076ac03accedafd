// The rope launcher (launch.h) over rope_kernels.cuh.
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/rope_kernels.cuh"

namespace hp::cuda {

void rope(const LaunchContext& ctx, Elem t, void* x, const float2* table, int64_t rows, int64_t ld,
          int64_t seq, int64_t n_heads, int64_t head_dim, bool inverse) {
  CudaLaunch launch{ctx.stream};
  rope_run(launch, ctx.sm_count, t, x, table, rows, ld, seq, n_heads, head_dim, inverse);
}

}  // namespace hp::cuda
