// The kernel launchers of the *.cu files, called by CudaKernels (cuda_kernels.cc) after it has
// checked shapes and types. Each queues its kernel(s) on `stream` and checks the launch; none
// waits for the device. Plain C++ on purpose: no fmt, no Kernels types.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_types.h"

namespace hp::cuda {

// What a launcher needs to know about the device.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  int sm_count = 1;
  DeviceErrorRecord* errors = nullptr;  // device pointer
};

// rmsnorm (norm.cu). Forward: one block per row.
void rmsnorm_forward(const LaunchContext& ctx, Elem t, void* y, float* rstd, const void* x,
                     const void* g, int64_t rows, int64_t dim, float eps);
// Backward: dx per row; dg += sum over rows through per-block partial sums (partial holds
// rmsnorm_backward_blocks(rows) * dim floats) reduced in block order by a second kernel.
int64_t rmsnorm_backward_blocks(const LaunchContext& ctx, int64_t rows);
void rmsnorm_backward(const LaunchContext& ctx, Elem t, void* dx, float* dg, float* partial,
                      const void* dy, const void* x, const void* g, const float* rstd, int64_t rows,
                      int64_t dim, bool accumulate);

// rope (rope.cu), in place; table holds (cos, sin) for seq x head_dim/2 (position-major).
void rope(const LaunchContext& ctx, Elem t, void* x, const float2* table, int64_t rows, int64_t ld,
          int64_t seq, int64_t n_heads, int64_t head_dim, bool inverse);

// Elementwise (elementwise.cu).
void swiglu_forward(const LaunchContext& ctx, Elem t, void* h, const void* g, const void* u,
                    int64_t n);
void swiglu_backward(const LaunchContext& ctx, Elem t, void* dg, void* du, const void* dh,
                     const void* g, const void* u, int64_t n);
void axpy(const LaunchContext& ctx, Elem t, void* y, const void* x, float alpha, int64_t n);
// Different element types only (same types are a plain copy).
void convert(const LaunchContext& ctx, Elem dst_t, void* dst, Elem src_t, const void* src,
             int64_t n);
// Sum of squares in f64 into *out (device), through sum_squares_blocks() partial sums.
int64_t sum_squares_blocks(const LaunchContext& ctx, int64_t n);
void sum_squares(const LaunchContext& ctx, Elem t, const void* x, int64_t n, double* partial,
                 double* out);

// param, grad, m, v: f32. copy (may be null): the updated parameters in copy_t.
void adamw(const LaunchContext& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWConsts& c, Elem copy_t, void* copy);

// Cross-entropy (cross_entropy.cu). Forward: lse per row and row_loss[r] = lse - logit[target]
// (f64), then loss_sum[0] += the rows summed in a fixed order.
void cross_entropy_forward(const LaunchContext& ctx, Elem t, const void* logits, int64_t ld,
                           const int32_t* targets, int64_t rows, int64_t vocab, float* lse,
                           double* row_loss, double* loss_sum);
// The row's `vocab` columns are ids begin .. begin + vocab - 1 of `total` (< 0: vocab).
void cross_entropy_backward(const LaunchContext& ctx, Elem dt, void* dlogits, Elem lt,
                            const void* logits, int64_t ld, const float* lse,
                            const int32_t* targets, int64_t rows, int64_t vocab, float scale,
                            int64_t begin = 0, int64_t total = -1);
// Vocabulary-parallel cross-entropy: a slice's parts (2 * rows floats: lse of the slice | target
// logit or 0), then the combine of nparts such blocks into lse and row_loss, summed into loss_sum.
void vocab_cross_entropy_stats(const LaunchContext& ctx, Elem t, const void* logits, int64_t ld,
                               const int32_t* targets, int64_t rows, int64_t begin, int64_t vocab,
                               int64_t total, float* parts);
void vocab_cross_entropy_combine(const LaunchContext& ctx, const float* parts, int64_t nparts,
                                 int64_t rows, float* lse, double* row_loss, double* loss_sum);

// Embedding (embedding.cu).
// The table holds the rows of ids begin .. begin + count - 1: other tokens give zero rows
// forward and are skipped backward (the whole table: the defaults).
void embedding_forward(const LaunchContext& ctx, Elem t, void* x, const int32_t* tokens,
                       const void* table, int64_t n, int64_t dim, int64_t begin = 0,
                       int64_t count = INT64_MAX);
// Scratch for the backward's token sort: 3 int32 arrays of n plus CUB's temporary storage.
size_t embedding_backward_scratch(int64_t n);
void embedding_backward(const LaunchContext& ctx, Elem t, float* dtable, const int32_t* tokens,
                        const void* dx, int64_t n, int64_t dim, void* scratch,
                        size_t scratch_bytes, int64_t begin = 0, int64_t count = INT64_MAX);

// Fills a rows x cols strided f32/bf16 matrix with beta * itself (beta == 0: zeros, not read).
void scale_matrix(const LaunchContext& ctx, Elem t, void* c, int64_t rows, int64_t cols, int64_t ld,
                  float beta);

}  // namespace hp::cuda
