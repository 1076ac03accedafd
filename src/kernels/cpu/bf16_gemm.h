// bf16 GEMMs on the CPU through oneDNN's matmul: bf16 A and B (either transposed, through strides)
// into a bf16 or f32 C, accumulated in f32. Not here: f32 GEMMs (OpenBLAS, cpu_kernels.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dtype.h"

namespace hp::cpu {

// One object per concurrent caller (it owns a oneDNN stream and a scratchpad). Each distinct call
// shape (transposes, sizes, strides, C type, alpha, beta) builds one oneDNN primitive the first
// time it is seen; later calls with that shape reuse it, so a training step builds nothing after
// the first. oneDNN runs on OpenMP here; every call runs on exactly `threads` threads.
class Bf16Gemm {
 public:
  explicit Bf16Gemm(int threads);
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  // C[M,N] = alpha * op(A) op(B) + beta * C, row-major with leading dimensions lda, ldb, ldc;
  // op(A) is M x K, op(B) is K x N. beta == 0: C is not read. Any alpha and beta; the rounding
  // into a bf16 C is to nearest even.
  void run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
           int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc);
  void run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
           int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

  // Primitives built so far (a test checks that repeating a shape builds nothing).
  int64_t primitives_built() const;
  // oneDNN's name for the implementation a shape would run, e.g. "brg:avx512_core_bf16".
  std::string implementation(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             int64_t lda, int64_t ldb, int64_t ldc, DType c_type);
  int threads() const { return threads_; }

  // False when this build has no oneDNN (then run() throws hp::Error saying how to get it).
  static bool available();

 private:
  struct Impl;
  void run_any(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, void* C,
               DType c_type, int64_t ldc);
  int threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hp::cpu
