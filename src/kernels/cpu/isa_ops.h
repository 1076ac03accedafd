// The table of SIMD entry points one ISA build provides (attention_*.cc and elementwise_*.cc are
// compiled once per ISA; the dispatcher in cpu_kernels.cc picks a table at run time). Every entry
// takes the thread count to use (1: plain loops, no OpenMP region at all) and, where it needs
// temporary memory, a scratch pointer sized by the matching *_scratch function (in floats,
// 64-byte aligned, contents undefined). Shapes are checked by the dispatcher before the call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace hp::cpu {

// Attention tile sizes: query rows and key columns per tile (both ISAs).
inline constexpr int64_t kAttnTile = 64;

struct IsaOps {
  const char* name;

  size_t (*attn_fwd_scratch)(const AttnShape& s, int threads);
  void (*attn_fwd)(const AttnShape& s, const float* q, const float* k, const float* v, float* o,
                   float* lse, float* scratch, int threads);
  size_t (*attn_bwd_scratch)(const AttnShape& s, int threads);
  void (*attn_bwd)(const AttnShape& s, const float* q, const float* k, const float* v,
                   const float* o, const float* dout, const float* lse, float* dq, float* dk,
                   float* dv, float* scratch, int threads);

  void (*rmsnorm_fwd)(float* y, float* rstd, const float* x, const float* g, int64_t rows,
                      int64_t dim, float eps, int threads);
  // scratch: threads * dim floats (per-thread partial dg, summed in thread order).
  void (*rmsnorm_bwd)(float* dx, float* dg, const float* dy, const float* x, const float* g,
                      const float* rstd, int64_t rows, int64_t dim, bool accumulate,
                      float* scratch, int threads);
  // cs: cos/sin table, [seq][head_dim/2] each (rope_angles.h values).
  void (*rope)(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads,
               int64_t head_dim, const float* cos_t, const float* sin_t, bool inverse,
               int threads);
  void (*swiglu_fwd)(float* h, const float* g, const float* u, int64_t n, int threads);
  void (*swiglu_bwd)(float* dg, float* du, const float* dh, const float* g, const float* u,
                     int64_t n, int threads);
  // lse[r] for every row; the loss total is summed by the caller in row order.
  void (*ce_fwd)(const float* logits, int64_t ld, int64_t rows, int64_t vocab, float* lse,
                 int threads);
  // A target < 0: no one-hot in that row (the target is in another rank's vocabulary slice).
  void (*ce_bwd)(float* dlogits, const float* logits, int64_t ld, const float* lse,
                 const int32_t* targets, int64_t rows, int64_t vocab, float scale, int threads);
  void (*axpy)(float* y, const float* x, float alpha, int64_t n, int threads);
  // partial: one double per block of kSumBlock elements (block sums are added in order by the
  // caller, so the result does not depend on the thread count).
  void (*sum_squares_blocks)(const float* x, int64_t n, double* partial, int threads);
};

inline constexpr int64_t kSumBlock = 1 << 14;

const IsaOps& avx512_ops();
const IsaOps& avx2_ops();

}  // namespace hp::cpu
