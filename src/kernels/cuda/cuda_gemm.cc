// cuBLASLt plans and calls for cuda_gemm.h. The row-major product C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" is our A, and a
// row-major matrix read column-major is its transpose, so each trans flag carries over unchanged.
#include "kernels/cuda/cuda_gemm.h"

#include <cstdlib>
#include <cstring>
#include <functional>

#include "kernels/cuda/cuda_check.h"

namespace hp::cuda {
namespace {

// The largest power of two (at most 256) dividing the address: what cuBLASLt may assume.
int pointer_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && addr % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

}  // namespace

size_t LtGemm::KeyHash::operator()(const Key& k) const {
  size_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) { h = (h ^ std::hash<int64_t>{}(v)) * 1099511628211ull; };
  mix(k.trans_a);
  mix(k.trans_b);
  mix(k.m);
  mix(k.n);
  mix(k.k);
  mix(k.lda);
  mix(k.ldb);
  mix(k.ldc);
  mix(k.ab_type);
  mix(k.c_type);
  mix(k.align_a);
  mix(k.align_b);
  mix(k.align_c);
  return h;
}

LtGemm::LtGemm(void* workspace, size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  const char* mode = std::getenv("HP_CUDA_GEMM");
  force_fallback_ = mode && std::strcmp(mode, "cublas") == 0;
  HP_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (handle_) cublasLtDestroy(handle_);
  if (blas_) cublasDestroy(blas_);
}

size_t LtGemm::fallback_plans() const {
  size_t n = 0;
  for (const auto& [key, plan] : plans_) n += plan.fallback ? 1 : 0;
  return n;
}

void LtGemm::destroy(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

LtGemm::Plan LtGemm::make_plan(const Key& key) {
  Plan plan;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    // Plain fp32 accumulation and f32 alpha/beta for every type combination.
    HP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_lt_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // our B
    const cublasOperation_t op_lt_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // our A
    HP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a,
                                                   sizeof(op_lt_a)));
    HP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b,
                                                   sizeof(op_lt_b)));
    // Stored (column-major) shapes: our B is N x K (K x N when transposed) read column-major...
    const uint64_t lt_a_rows = static_cast<uint64_t>(key.trans_b ? key.k : key.n);
    const uint64_t lt_a_cols = static_cast<uint64_t>(key.trans_b ? key.n : key.k);
    const uint64_t lt_b_rows = static_cast<uint64_t>(key.trans_a ? key.m : key.k);
    const uint64_t lt_b_cols = static_cast<uint64_t>(key.trans_a ? key.k : key.m);
    HP_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&plan.a, key.ab_type, lt_a_rows, lt_a_cols, key.ldb));
    HP_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&plan.b, key.ab_type, lt_b_rows, lt_b_cols, key.lda));
    HP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, key.c_type, static_cast<uint64_t>(key.n),
                                               static_cast<uint64_t>(key.m), key.ldc));

    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_bytes_;
    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // cuBLASLt assumes 256-byte aligned pointers unless told otherwise; sub-matrix views are not.
    const uint32_t align_lt_a = static_cast<uint32_t>(key.align_b);
    const uint32_t align_lt_b = static_cast<uint32_t>(key.align_a);
    const uint32_t align_c = static_cast<uint32_t>(key.align_c);
    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_lt_a, sizeof(align_lt_a)));
    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_lt_b, sizeof(align_lt_b)));
    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    HP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // No algorithm is not an error: NOT_SUPPORTED or zero results send the plan to cublasGemmEx.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
      throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    }
    plan.fallback = force_fallback_ || status != CUBLAS_STATUS_SUCCESS || found == 0 ||
                    result.state != CUBLAS_STATUS_SUCCESS;
    if (!plan.fallback) plan.algo = result.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    destroy(plan);
    throw;
  }
  return plan;
}

void LtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldc,
                g.ab_type,
                g.c_type,
                pointer_alignment(g.a),
                pointer_alignment(g.b),
                pointer_alignment(g.c)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(key)).first;
  const Plan& p = it->second;
  if (p.fallback) return run_fallback(g, stream);
  // cuBLASLt's A is our B and its B is our A; C is read (beta != 0) and written in place.
  HP_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &g.alpha, g.b, p.a, g.a, p.b, &g.beta, g.c, p.c,
                                 g.c, p.c, &p.algo, workspace_, workspace_bytes_, stream));
}

// The same column-major product through the classic cuBLAS API, which takes any alignment and
// stride. Default math mode: CUBLAS_COMPUTE_32F stays plain fp32 for f32 inputs.
void LtGemm::run_fallback(const GemmArgs& g, cudaStream_t stream) {
  if (!blas_) {
    HP_CUBLAS_CHECK(cublasCreate(&blas_));
    HP_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
  }
  HP_CUBLAS_CHECK(cublasSetStream(blas_, stream));
  HP_CUBLAS_CHECK(cublasGemmEx_64(blas_, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m, g.k, &g.alpha,
                                  g.b, g.ab_type, g.ldb, g.a, g.ab_type, g.lda, &g.beta, g.c,
                                  g.c_type, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace hp::cuda
