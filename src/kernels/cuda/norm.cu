// RMSNorm launchers (launch.h) over the kernels of norm_kernels.cuh.
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm_kernels.cuh"

namespace hp::cuda {

void rmsnorm_forward(const LaunchContext& ctx, Elem t, void* y, float* rstd, const void* x,
                     const void* g, int64_t rows, int64_t dim, float eps) {
  CudaLaunch launch{ctx.stream};
  rmsnorm_forward_run(launch, t, y, rstd, x, g, rows, dim, eps);
}

int64_t rmsnorm_backward_blocks(const LaunchContext& ctx, int64_t rows) {
  return rmsnorm_backward_grid(ctx.sm_count, rows);
}

void rmsnorm_backward(const LaunchContext& ctx, Elem t, void* dx, float* dg, float* partial,
                      const void* dy, const void* x, const void* g, const float* rstd, int64_t rows,
                      int64_t dim, bool accumulate) {
  CudaLaunch launch{ctx.stream};
  rmsnorm_backward_run(launch, ctx.sm_count, t, dx, dg, partial, dy, x, g, rstd, rows, dim,
                       accumulate);
}

}  // namespace hp::cuda
