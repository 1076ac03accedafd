// The fast CPU backend: GEMMs through OpenBLAS, everything else from the reference for now.
#include "kernels/cpu_kernels.h"

#include <cblas.h>

#include "kernels/reference/reference_kernels.h"

namespace hp {
namespace {

class CpuKernels : public ReferenceKernels<float> {
 public:
  CpuKernels(int threads, CpuIsa isa) : threads_(threads), isa_(isa) {}
  std::string name() const override { return std::string("cpu-") + cpu_isa_name(isa_); }

  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                static_cast<blasint>(ldc));
  }

 private:
  int threads_;
  CpuIsa isa_;
};

}  // namespace

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return true;
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
}

CpuIsa cpu_best_isa() { return cpu_supports(CpuIsa::kAvx512) ? CpuIsa::kAvx512 : CpuIsa::kAvx2; }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
  }
  return "?";
}

std::string blas_core_name() {
  const char* n = openblas_get_corename();
  return n ? std::string(n) : std::string("unknown");
}

std::unique_ptr<Kernels<float>> make_cpu_kernels(int threads, CpuIsa isa) {
  if (isa == CpuIsa::kAuto) isa = cpu_best_isa();
  HP_CHECK(cpu_supports(isa), "make_cpu_kernels: this CPU does not support {}; use CpuIsa::kAuto",
           cpu_isa_name(isa));
  HP_CHECK(cpu_supports(CpuIsa::kAvx2),
           "make_cpu_kernels: the CPU backend needs at least AVX2+FMA");
  return std::make_unique<CpuKernels>(threads, isa);
}

std::unique_ptr<Kernels<float>> make_cpu_kernels(int threads) {
  return make_cpu_kernels(threads, CpuIsa::kAuto);
}

}  // namespace hp
