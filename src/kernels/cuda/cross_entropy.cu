// Cross-entropy launchers (launch.h) over cross_entropy_kernels.cuh.
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/launch.h"

namespace hp::cuda {

void cross_entropy_forward(const LaunchContext& ctx, Elem t, const void* logits, int64_t ld,
                           const int32_t* targets, int64_t rows, int64_t vocab, float* lse,
                           double* row_loss, double* loss_sum) {
  CudaLaunch launch{ctx.stream};
  cross_entropy_forward_run(launch, ctx.errors, t, logits, ld, targets, rows, vocab, lse, row_loss,
                            loss_sum);
}

void cross_entropy_backward(const LaunchContext& ctx, Elem dt, void* dlogits, Elem lt,
                            const void* logits, int64_t ld, const float* lse,
                            const int32_t* targets, int64_t rows, int64_t vocab, float scale,
                            int64_t begin, int64_t total) {
  CudaLaunch launch{ctx.stream};
  cross_entropy_backward_run(launch, ctx.errors, dt, dlogits, lt, logits, ld, lse, targets, rows,
                             VocabCols{begin, vocab, total < 0 ? vocab : total}, scale);
}

void vocab_cross_entropy_stats(const LaunchContext& ctx, Elem t, const void* logits, int64_t ld,
                               const int32_t* targets, int64_t rows, int64_t begin, int64_t vocab,
                               int64_t total, float* parts) {
  CudaLaunch launch{ctx.stream};
  vocab_cross_entropy_stats_run(launch, ctx.errors, t, logits, ld, targets, rows,
                                VocabCols{begin, vocab, total}, parts);
}

void vocab_cross_entropy_combine(const LaunchContext& ctx, const float* parts, int64_t nparts,
                                 int64_t rows, float* lse, double* row_loss, double* loss_sum) {
  CudaLaunch launch{ctx.stream};
  vocab_cross_entropy_combine_run(launch, parts, nparts, rows, lse, row_loss, loss_sum);
}

}  // namespace hp::cuda
