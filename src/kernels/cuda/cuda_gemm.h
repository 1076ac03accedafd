// Row-major GEMMs through cuBLASLt: C[M,N] = alpha op(A) op(B) + beta C, computed as the
// column-major C^T = op(B)^T op(A)^T, so no data is transposed. One plan (matmul descriptor,
// layouts and the heuristic's algorithm) per shape, types, strides and pointer alignment, cached.
// f32 inputs compute in plain fp32 (CUBLAS_COMPUTE_32F, never TF32); bf16 inputs accumulate in
// f32 into a bf16 or f32 C. When cuBLASLt's heuristic offers no algorithm for a plan (unusual
// alignment or strides), that plan runs through cublasGemmEx instead, with the same types and
// compute type; HP_CUDA_GEMM=cublas sends every plan there (for tests).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace hp::cuda {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  cudaDataType_t ab_type = CUDA_R_32F;  // CUDA_R_32F or CUDA_R_16BF
  cudaDataType_t c_type = CUDA_R_32F;   // ab_type or CUDA_R_32F
};

class LtGemm {
 public:
  // workspace: device memory of workspace_bytes that outlives this object, used on one stream.
  LtGemm(void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Queues the product on `stream`. m, n, k > 0; strides and types checked by the caller.
  void run(const GemmArgs& g, cudaStream_t stream);
  size_t cached_plans() const { return plans_.size(); }
  // Plans that run through cublasGemmEx.
  size_t fallback_plans() const;

 private:
  struct Key {
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    cudaDataType_t ab_type, c_type;
    int align_a, align_b, align_c;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)
    cublasLtMatmulAlgo_t algo{};
    bool fallback = false;  // no cuBLASLt algorithm: cublasGemmEx
  };
  Plan make_plan(const Key& key);
  void run_fallback(const GemmArgs& g, cudaStream_t stream);
  static void destroy(Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  cublasHandle_t blas_ = nullptr;  // made on the first fallback
  bool force_fallback_ = false;
  void* workspace_;
  size_t workspace_bytes_;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace hp::cuda
