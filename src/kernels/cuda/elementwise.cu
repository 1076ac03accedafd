// Elementwise launchers (launch.h) over elementwise_kernels.cuh.
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/launch.h"

namespace hp::cuda {

void swiglu_forward(const LaunchContext& ctx, Elem t, void* h, const void* g, const void* u,
                    int64_t n) {
  CudaLaunch launch{ctx.stream};
  swiglu_forward_run(launch, ctx.sm_count, t, h, g, u, n);
}

void swiglu_backward(const LaunchContext& ctx, Elem t, void* dg, void* du, const void* dh,
                     const void* g, const void* u, int64_t n) {
  CudaLaunch launch{ctx.stream};
  swiglu_backward_run(launch, ctx.sm_count, t, dg, du, dh, g, u, n);
}

void axpy(const LaunchContext& ctx, Elem t, void* y, const void* x, float alpha, int64_t n) {
  CudaLaunch launch{ctx.stream};
  axpy_run(launch, ctx.sm_count, t, y, x, alpha, n);
}

void convert(const LaunchContext& ctx, Elem dst_t, void* dst, Elem src_t, const void* src,
             int64_t n) {
  CudaLaunch launch{ctx.stream};
  convert_run(launch, ctx.sm_count, dst_t, dst, src_t, src, n);
}

int64_t sum_squares_blocks(const LaunchContext& ctx, int64_t n) {
  return sum_squares_grid(ctx.sm_count, n);
}

void sum_squares(const LaunchContext& ctx, Elem t, const void* x, int64_t n, double* partial,
                 double* out) {
  CudaLaunch launch{ctx.stream};
  sum_squares_run(launch, ctx.sm_count, t, x, n, partial, out);
}

void adamw(const LaunchContext& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWConsts& c, Elem copy_t, void* copy) {
  CudaLaunch launch{ctx.stream};
  adamw_run(launch, ctx.sm_count, param, grad, m, v, n, c, copy_t, copy);
}

void scale_matrix(const LaunchContext& ctx, Elem t, void* c, int64_t rows, int64_t cols, int64_t ld,
                  float beta) {
  CudaLaunch launch{ctx.stream};
  scale_matrix_run(launch, ctx.sm_count, t, c, rows, cols, ld, beta);
}

}  // namespace hp::cuda
