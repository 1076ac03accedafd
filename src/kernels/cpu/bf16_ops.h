// The table of bf16 kernels the AVX512-BF16 build provides (attention_bf16_avx512bf16.cc and
// elementwise_bf16_avx512bf16.cc, compiled with -mavx512bf16 into namespace hp::avx512bf16), and
// the cpuid test that says whether this CPU may run them. Conventions as isa_ops.h: every entry
// takes its thread count; scratch is in floats, 64-byte aligned; shapes are checked by the caller.
// bf16 values are read into f32, computed in f32 and rounded to nearest even when stored; per-row
// statistics (rstd, lse) are f32. Not here: the bf16 GEMMs (bf16_gemm.h, oneDNN).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernels.h"

namespace hp::cpu {

struct Bf16Ops {
  // Causal GQA attention (see attention_bf16_avx512bf16.cc): q, k, v, o, dout, dq, dk, dv are
  // bf16; lse is f32. head_dim must be even. Results do not depend on the thread count.
  size_t (*attn_fwd_scratch)(const AttnShape& s, int threads);
  void (*attn_fwd)(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                   float* lse, float* scratch, int threads);
  size_t (*attn_bwd_scratch)(const AttnShape& s, int threads);
  void (*attn_bwd)(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                   const bf16* dout, const float* lse, bf16* dq, bf16* dk, bf16* dv, float* scratch,
                   int threads);

  void (*rmsnorm_fwd)(bf16* y, float* rstd, const bf16* x, const bf16* g, int64_t rows, int64_t dim,
                      float eps, int threads);
  // dg is f32 (master); scratch: threads * dim floats (per-thread dg partials, summed in thread
  // order).
  void (*rmsnorm_bwd)(bf16* dx, float* dg, const bf16* dy, const bf16* x, const bf16* g,
                      const float* rstd, int64_t rows, int64_t dim, bool accumulate, float* scratch,
                      int threads);
  void (*rope)(bf16* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
               const float* cos_t, const float* sin_t, bool inverse, int threads);
  void (*swiglu_fwd)(bf16* h, const bf16* g, const bf16* u, int64_t n, int threads);
  void (*swiglu_bwd)(bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t n,
                     int threads);
  // lse[r] of bf16 logits (f32 logits: IsaOps::ce_fwd).
  void (*ce_fwd)(const bf16* logits, int64_t ld, int64_t rows, int64_t vocab, float* lse,
                 int threads);
  // bf16 dlogits from bf16 logits (may alias) or from f32 logits; a target < 0 has no one-hot in
  // this row (it lies in another rank's vocabulary slice).
  void (*ce_bwd)(bf16* dlogits, const bf16* logits, int64_t ld, const float* lse,
                 const int32_t* targets, int64_t rows, int64_t vocab, float scale, int threads);
  void (*ce_bwd_f32)(bf16* dlogits, const float* logits, int64_t ld, const float* lse,
                     const int32_t* targets, int64_t rows, int64_t vocab, float scale, int threads);
  // dtable (f32) [tokens[t], :] += dx[t, :], in token order per column (deterministic); tokens < 0
  // are skipped (another rank's vocabulary slice).
  void (*embedding_bwd)(float* dtable, const int32_t* tokens, const bf16* dx, int64_t n,
                        int64_t dim, int threads);
  void (*to_bf16)(bf16* dst, const float* src, int64_t n, int threads);
  void (*to_f32)(float* dst, const bf16* src, int64_t n, int threads);
  void (*axpy)(bf16* y, const bf16* x, float alpha, int64_t n, int threads);
  // partial: one double per block of kSumBlock elements (isa_ops.h), summed in order by the caller.
  void (*sum_squares_blocks)(const bf16* x, int64_t n, double* partial, int threads);
  // (AdamW updates f32 master values: the f32 kernel's job; its bf16 weight copy is to_bf16.)
};

// The AVX512-BF16 table; call only when cpu_has_avx512bf16().
const Bf16Ops& avx512bf16_ops();

// True when this CPU (and OS) can run AVX-512 F/BW/DQ/VL and AVX512-BF16 instructions.
bool cpu_has_avx512bf16();

}  // namespace hp::cpu
