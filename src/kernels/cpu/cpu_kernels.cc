// The fast CPU backend: GEMMs through OpenBLAS, attention and the elementwise kernels through our
// SIMD code (one IsaOps table per ISA, picked at construction). This file is built with the default
// flags: it checks shapes, owns the scratch memory and sums what must be summed in a fixed order.
#include "kernels/cpu_kernels.h"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/cpu/isa_ops.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/rope_angles.h"

namespace hp {
namespace {

// Grow-only, 64-byte aligned float buffer: after the first call of a given size, no allocation.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p_); }
  float* get(size_t floats) {
    if (floats > n_) {
      std::free(p_);
      const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p_) throw std::bad_alloc();
      n_ = floats;
    }
    return p_;
  }
  size_t size() const { return n_; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

// Everything a call may need besides its arguments. One workspace per concurrent caller (see
// CpuKernels::Lease), so several threads (ranks run as threads) may share one backend object.
struct Workspace {
  Scratch attn, small;
  std::vector<float> rope_cos, rope_sin;  // [positions][head_dim / 2]
  int64_t rope_head_dim = -1, rope_npos = 0;
  double rope_theta = 0;
};

int resolve_threads(int threads) { return cpu_threads(threads); }

class CpuKernels : public ReferenceKernels<float> {
 public:
  CpuKernels(int threads, CpuIsa isa)
      : threads_(resolve_threads(threads)),
        isa_(isa),
        ops_(isa == CpuIsa::kAvx512 ? cpu::avx512_ops() : cpu::avx2_ops()) {
    openblas_set_num_threads(threads_);
  }
  std::string name() const override { return std::string("cpu-") + cpu_isa_name(isa_); }

  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override {
    if (M == 0 || N == 0) return;
    // OpenBLAS has one global thread count; several backends with different counts may coexist.
    if (openblas_get_num_threads() != threads_) openblas_set_num_threads(threads_);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                static_cast<blasint>(ldc));
  }

  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* g, int64_t rows,
                       int64_t dim, double eps) override {
    HP_CHECK(rows >= 0 && dim >= 1, "rmsnorm: bad shape rows={} dim={}", rows, dim);
    ops_.rmsnorm_fwd(y, rstd, x, g, rows, dim, static_cast<float>(eps), threads_);
  }
  void rmsnorm_backward(float* dx, float* dg, const float* dy, const float* x, const float* g,
                        const float* rstd, int64_t rows, int64_t dim, bool accumulate) override {
    HP_CHECK(rows >= 0 && dim >= 1, "rmsnorm: bad shape rows={} dim={}", rows, dim);
    Lease ws(*this);
    float* part = ws->small.get(static_cast<size_t>(threads_ * dim));
    ops_.rmsnorm_bwd(dx, dg, dy, x, g, rstd, rows, dim, accumulate, part, threads_);
  }

  void rope(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) override {
    HP_CHECK(head_dim % 2 == 0, "rope: head_dim {} must be even", head_dim);
    HP_CHECK(seq >= 1 && ld >= n_heads * head_dim,
             "rope: seq={} must be >= 1 and ld={} >= n_heads*head_dim={}", seq, ld,
             n_heads * head_dim);
    const int64_t half = head_dim / 2;
    const int64_t npos = std::min(seq, rows);  // positions actually used
    Lease ws(*this);
    if (ws->rope_head_dim != head_dim || ws->rope_theta != theta || ws->rope_npos < npos) {
      ws->rope_cos.resize(static_cast<size_t>(npos * half));
      ws->rope_sin.resize(static_cast<size_t>(npos * half));
      for (int64_t p = 0; p < npos; ++p)
        for (int64_t j = 0; j < half; ++j)
          rope_cos_sin(p, j, head_dim, theta, &ws->rope_cos[p * half + j],
                       &ws->rope_sin[p * half + j]);
      ws->rope_head_dim = head_dim;
      ws->rope_theta = theta;
      ws->rope_npos = npos;
    }
    ops_.rope(x, rows, ld, seq, n_heads, head_dim, ws->rope_cos.data(), ws->rope_sin.data(),
              inverse, threads_);
  }

  void attention_forward(const AttnShape& s, const float* q, const float* k, const float* v,
                         float* o, float* lse) override {
    check_attn(s);
    if (s.head_dim % 8 != 0) {  // toy sizes: the plain loops (correct, slow)
      ReferenceKernels<float>::attention_forward(s, q, k, v, o, lse);
      return;
    }
    Lease ws(*this);
    float* scratch = ws->attn.get(ops_.attn_fwd_scratch(s, threads_));
    ops_.attn_fwd(s, q, k, v, o, lse, scratch, threads_);
  }
  void attention_backward(const AttnShape& s, const float* q, const float* k, const float* v,
                          const float* o, const float* dout, const float* lse, float* dq,
                          float* dk, float* dv) override {
    check_attn(s);
    if (s.head_dim % 8 != 0) {
      ReferenceKernels<float>::attention_backward(s, q, k, v, o, dout, lse, dq, dk, dv);
      return;
    }
    Lease ws(*this);
    float* scratch = ws->attn.get(ops_.attn_bwd_scratch(s, threads_));
    ops_.attn_bwd(s, q, k, v, o, dout, lse, dq, dk, dv, scratch, threads_);
  }

  void swiglu_forward(float* h, const float* g, const float* u, int64_t n) override {
    ops_.swiglu_fwd(h, g, u, n, threads_);
  }
  void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                       int64_t n) override {
    ops_.swiglu_bwd(dg, du, dh, g, u, n, threads_);
  }

  double cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t vocab, float* lse) override {
    check_ce(ld, targets, rows, vocab);
    ops_.ce_fwd(logits, ld, rows, vocab, lse, threads_);
    double total = 0;
    for (int64_t r = 0; r < rows; ++r)
      total += static_cast<double>(lse[r]) - static_cast<double>(logits[r * ld + targets[r]]);
    return total;
  }
  void cross_entropy_backward(float* dlogits, const float* logits, int64_t ld, const float* lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              float scale) override {
    check_ce(ld, targets, rows, vocab);
    ops_.ce_bwd(dlogits, logits, ld, lse, targets, rows, vocab, scale, threads_);
  }

  void embedding_forward(float* x, const int32_t* tokens, const float* table, int64_t n,
                         int64_t dim) override {
    check_tokens(tokens, n);
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(x + t * dim, table + static_cast<int64_t>(tokens[t]) * dim, sizeof(float) * dim);
  }
  // Token order is kept per column, so splitting columns across threads stays deterministic.
  void embedding_backward(float* dtable, const int32_t* tokens, const float* dx, int64_t n,
                          int64_t dim) override {
    check_tokens(tokens, n);
    const int64_t cols = 256, nc = (dim + cols - 1) / cols;
    auto run = [&](int64_t c) {
      const int64_t c0 = c * cols, c1 = std::min(dim, c0 + cols);
      for (int64_t t = 0; t < n; ++t) {
        float* dst = dtable + static_cast<int64_t>(tokens[t]) * dim;
        const float* src = dx + t * dim;
        for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
      }
    };
    if (threads_ <= 1 || nc <= 1 || n * dim < (1 << 15)) {
      for (int64_t c = 0; c < nc; ++c) run(c);
    } else {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t c = 0; c < nc; ++c) run(c);
    }
  }

  void axpy(float* y, const float* x, float alpha, int64_t n) override {
    ops_.axpy(y, x, alpha, n, threads_);
  }
  // Block sums in double, added in block order: the same result for every thread count.
  double sum_squares(const float* x, int64_t n) override {
    const int64_t nb = (n + cpu::kSumBlock - 1) / cpu::kSumBlock;
    Lease ws(*this);
    double* part = reinterpret_cast<double*>(ws->small.get(static_cast<size_t>(2 * nb + 2)));
    ops_.sum_squares_blocks(x, n, part, threads_);
    double total = 0;
    for (int64_t b = 0; b < nb; ++b) total += part[b];
    return total;
  }
  void adamw(float* param, const float* grad, float* m, float* v, int64_t n, double lr,
             double beta1, double beta2, double eps, double weight_decay, int64_t step) override {
    HP_CHECK(step >= 1, "adamw: step {} must count from 1", step);
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    ops_.adamw(param, grad, m, v, n, static_cast<float>(lr), static_cast<float>(beta1),
               static_cast<float>(beta2), static_cast<float>(eps),
               static_cast<float>(1 - lr * weight_decay), static_cast<float>(lr / bc1),
               static_cast<float>(std::sqrt(bc2)), threads_);
  }

 private:
  static void check_attn(const AttnShape& s) {
    HP_CHECK(s.batch >= 1 && s.seq >= 1 && s.kv_heads >= 1 && s.heads % s.kv_heads == 0,
             "attention: bad shape batch={} seq={} heads={} kv_heads={} (heads must be a "
             "multiple of kv_heads)",
             s.batch, s.seq, s.heads, s.kv_heads);
    HP_CHECK(s.head_dim >= 1, "attention: head_dim {} must be >= 1", s.head_dim);
    HP_CHECK(s.ld_qkv >= s.heads * s.head_dim && s.ld_o >= s.heads * s.head_dim,
             "attention: strides ld_qkv={} ld_o={} are smaller than heads*head_dim={}", s.ld_qkv,
             s.ld_o, s.heads * s.head_dim);
  }
  static void check_ce(int64_t ld, const int32_t* targets, int64_t rows, int64_t vocab) {
    HP_CHECK(vocab >= 1 && ld >= vocab, "cross_entropy: vocab={} must be >= 1 and ld={} >= vocab",
             vocab, ld);
    for (int64_t r = 0; r < rows; ++r)
      HP_CHECK(targets[r] >= 0 && targets[r] < vocab,
               "cross_entropy: target {} of row {} is outside [0, {})", targets[r], r, vocab);
  }
  static void check_tokens(const int32_t* tokens, int64_t n) {
    for (int64_t t = 0; t < n; ++t)
      HP_CHECK(tokens[t] >= 0, "embedding: token {} at position {} is negative", tokens[t], t);
  }

  int threads_;
  CpuIsa isa_;
  const cpu::IsaOps& ops_;
  // Takes a free workspace for the duration of one call (a new one only when every existing one
  // is in use by another thread, so one caller never allocates in steady state).
  class Lease {
   public:
    explicit Lease(CpuKernels& k) : k_(k) {
      std::lock_guard<std::mutex> lock(k_.pool_mu_);
      if (k_.free_.empty()) {
        ws_ = std::make_unique<Workspace>();
      } else {
        ws_ = std::move(k_.free_.back());
        k_.free_.pop_back();
      }
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(k_.pool_mu_);
      k_.free_.push_back(std::move(ws_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace* operator->() { return ws_.get(); }

   private:
    CpuKernels& k_;
    std::unique_ptr<Workspace> ws_;
  };

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Workspace>> free_;
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

std::unique_ptr<KernelsT<float>> make_cpu_kernels(int threads, CpuIsa isa) {
  if (isa == CpuIsa::kAuto) isa = cpu_best_isa();
  HP_CHECK(cpu_supports(isa), "make_cpu_kernels: this CPU does not support {}; use CpuIsa::kAuto",
           cpu_isa_name(isa));
  HP_CHECK(cpu_supports(CpuIsa::kAvx2),
           "make_cpu_kernels: the CPU backend needs at least AVX2+FMA");
  return std::make_unique<CpuKernels>(threads, isa);
}

// HP_CPU_ISA=avx2|avx512 forces the path kAuto takes (tests and benchmarks of the fallback).
std::unique_ptr<KernelsT<float>> make_cpu_kernels(int threads) {
  CpuIsa isa = CpuIsa::kAuto;
  if (const char* env = std::getenv("HP_CPU_ISA"); env && *env) {
    const std::string e(env);
    if (e == "avx2") isa = CpuIsa::kAvx2;
    else if (e == "avx512") isa = CpuIsa::kAvx512;
    else if (e != "auto") fail("HP_CPU_ISA={} is not one of avx2, avx512, auto", e);
  }
  return make_cpu_kernels(threads, isa);
}

int cpu_threads(int threads) {
  if (threads > 0) return threads;
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  // libgomp counts the cores this process may run on (its affinity mask: one under mpirun's
  // default binding of one rank per core), not every core of the machine.
  return std::max(1, omp_get_num_procs());
}

}  // namespace hp
