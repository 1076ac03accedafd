// The fast CPU backend: f32 GEMMs through OpenBLAS, attention and the elementwise kernels through
// our SIMD code (one IsaOps table per ISA, picked at construction); on a CPU with AVX512-BF16 also
// bf16 (GEMMs through oneDNN, bf16_gemm.h; the rest through the Bf16Ops table, bf16_ops.h). This
// file is built with the default flags: it checks shapes and types, owns the scratch memory and
// sums what must be summed in a fixed order. The backend around these kernels is kernels/host.
#include "kernels/cpu_kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/reference/reference_math.h"
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
  std::unique_ptr<cpu::Bf16Gemm> gemm16;  // made on the first bf16 GEMM of this workspace
  ReferenceMath<float> ref;  // plain-loop attention for head dims that are no multiple of 8
  std::vector<float> rope_cos, rope_sin;  // [positions][head_dim / 2]
  std::vector<int32_t> ids;               // ids relative to a vocabulary slice
  int64_t rope_head_dim = -1, rope_npos = 0;
  double rope_theta = 0;
};

int resolve_threads(int threads) { return cpu_threads(threads); }

// One single-threaded OpenBLAS sgemm (row-major).
void sgemm1(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
              static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

// C = alpha op(A) op(B) + beta C on `threads` OpenMP threads: the longer of C's two sides is cut
// into one contiguous block per thread (multiples of 16 rows or columns, the kernels' register
// width), each block one single-threaded sgemm. OpenBLAS keeps one thread: Debian's build has its
// own pthread pool, and with that pool and the OpenMP threads of every other kernel here on the
// same cores, each pool spun while the other worked (a 2-thread fp32 training step of the small
// preset at s=256 ran at half its 1-thread speed). A product too small to share runs whole on
// the caller.
void sgemm_omp(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, int threads) {
  constexpr int64_t kAlign = 16, kMinBlock = 64;
  const bool by_rows = M >= N;
  const int64_t n = by_rows ? M : N;
  const int64_t parts = std::min<int64_t>(threads, n / kMinBlock);
  if (parts <= 1) {
    sgemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t block = ((n + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
  const int team = static_cast<int>(parts);
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t t = 0; t < parts; ++t) {
    const int64_t lo = t * block, len = std::min(n, lo + block) - lo;
    if (len <= 0) continue;
    if (by_rows)  // rows lo.. of C are rows lo.. of op(A)
      sgemm1(trans_a, trans_b, len, N, K, alpha, trans_a ? A + lo : A + lo * lda, lda, B, ldb, beta,
             C + lo * ldc, ldc);
    else  // columns lo.. of C are columns lo.. of op(B)
      sgemm1(trans_a, trans_b, M, len, K, alpha, A, lda, trans_b ? B + lo * ldb : B + lo, ldb, beta,
             C + lo, ldc);
  }
}

// Values of any of the three types read as double (generic host loops: convert, sum_squares).
double read_any(ConstDataPtr p, int64_t i) {
  switch (p.dtype) {
    case DType::kF64: return p.as<double>()[i];
    case DType::kF32: return p.as<float>()[i];
    case DType::kBF16: return to_float(p.as<bf16>()[i]);
  }
  return 0;
}

// The CPU kernels. Every entry point dispatches on the element type of its compute operand: f32
// runs the OpenBLAS / SIMD code, bf16 the oneDNN GEMM and the Bf16Ops table when the ISA is
// kAvx512Bf16 (else a clear error), other types throw.
class CpuKernels final : public Kernels {
 public:
  CpuKernels(int threads, CpuIsa isa)
      : threads_(resolve_threads(threads)),
        isa_(isa),
        ops_(isa == CpuIsa::kAvx2 ? cpu::avx2_ops() : cpu::avx512_ops()),
        b16_(isa == CpuIsa::kAvx512Bf16 && cpu::Bf16Gemm::available() ? &cpu::avx512bf16_ops()
                                                                        : nullptr) {
    openblas_set_num_threads(1);  // the GEMMs share out their work themselves (sgemm_omp)
  }
  std::string name() const override { return std::string("cpu-") + cpu_isa_name(isa_); }
  bool supports(const Precision& p) const override {
    return p == Precision::fp32() || (p == Precision::bf16() && b16_);
  }
  int threads() const { return threads_; }

  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
            ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
            int64_t ldc) override {
    if (A.dtype == DType::kBF16) {
      gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    if (A.dtype != DType::kF32) unsupported("gemm", A.dtype);
    if (M == 0 || N == 0) return;
    // OpenBLAS's thread count is global to the process: something else may have changed it.
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    sgemm_omp(trans_a, trans_b, M, N, K, static_cast<float>(alpha), A.as<float>(), lda,
              B.as<float>(), ldb, static_cast<float>(beta), C.as<float>(), ldc, threads_);
  }

  void rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g, int64_t rows,
                       int64_t dim, double eps) override {
    HP_CHECK(rows >= 0 && dim >= 1, "rmsnorm: bad shape rows={} dim={}", rows, dim);
    if (x.dtype == DType::kBF16) {
      b16("rmsnorm_forward").rmsnorm_fwd(y.as<bf16>(), rstd.as<float>(), x.as<bf16>(),
                                         g.as<bf16>(), rows, dim, static_cast<float>(eps),
                                         threads_);
      return;
    }
    if (x.dtype != DType::kF32) unsupported("rmsnorm_forward", x.dtype);
    ops_.rmsnorm_fwd(y.as<float>(), rstd.as<float>(), x.as<float>(), g.as<float>(), rows, dim,
                     static_cast<float>(eps), threads_);
  }
  void rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x, ConstDataPtr g,
                        ConstDataPtr rstd, int64_t rows, int64_t dim, bool accumulate) override {
    HP_CHECK(rows >= 0 && dim >= 1, "rmsnorm: bad shape rows={} dim={}", rows, dim);
    if (x.dtype == DType::kBF16) {
      const cpu::Bf16Ops& o = b16("rmsnorm_backward");
      Lease ws(*this);
      o.rmsnorm_bwd(dx.as<bf16>(), dg.as<float>(), dy.as<bf16>(), x.as<bf16>(), g.as<bf16>(),
                    rstd.as<float>(), rows, dim, accumulate,
                    ws->small.get(static_cast<size_t>(threads_ * dim)), threads_);
      return;
    }
    if (x.dtype != DType::kF32) unsupported("rmsnorm_backward", x.dtype);
    Lease ws(*this);
    float* part = ws->small.get(static_cast<size_t>(threads_ * dim));
    ops_.rmsnorm_bwd(dx.as<float>(), dg.as<float>(), dy.as<float>(), x.as<float>(), g.as<float>(),
                     rstd.as<float>(), rows, dim, accumulate, part, threads_);
  }

  void rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) override {
    if (x.dtype != DType::kF32 && x.dtype != DType::kBF16) unsupported("rope", x.dtype);
    const cpu::Bf16Ops* o = x.dtype == DType::kBF16 ? &b16("rope") : nullptr;
    HP_CHECK(head_dim % 2 == 0, "rope: head_dim {} must be even", head_dim);
    HP_CHECK(seq >= 1 && ld >= n_heads * head_dim,
             "rope: seq={} must be >= 1 and ld={} >= n_heads*head_dim={}", seq, ld,
             n_heads * head_dim);
    Lease ws(*this);
    rope_table(*ws, std::min(seq, rows), head_dim, theta);  // positions actually used
    if (o) {
      o->rope(x.as<bf16>(), rows, ld, seq, n_heads, head_dim, ws->rope_cos.data(),
              ws->rope_sin.data(), inverse, threads_);
      return;
    }
    ops_.rope(x.as<float>(), rows, ld, seq, n_heads, head_dim, ws->rope_cos.data(),
              ws->rope_sin.data(), inverse, threads_);
  }

  void attention_forward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                         DataPtr o, DataPtr lse) override {
    check_attn(s);
    if (q.dtype == DType::kBF16) {
      attention_forward_bf16(s, q, k, v, o, lse);
      return;
    }
    if (q.dtype != DType::kF32) unsupported("attention_forward", q.dtype);
    if (s.head_dim % 8 != 0) {  // toy sizes: the plain loops (correct, slow)
      Lease ws(*this);
      ws->ref.attention_forward(s, q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(),
                                lse.as<float>());
      return;
    }
    Lease ws(*this);
    float* scratch = ws->attn.get(ops_.attn_fwd_scratch(s, threads_));
    ops_.attn_fwd(s, q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(), lse.as<float>(),
                  scratch, threads_);
  }
  void attention_backward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                          ConstDataPtr o, ConstDataPtr dout, ConstDataPtr lse, DataPtr dq,
                          DataPtr dk, DataPtr dv) override {
    check_attn(s);
    if (q.dtype == DType::kBF16) {
      attention_backward_bf16(s, q, k, v, o, dout, lse, dq, dk, dv);
      return;
    }
    if (q.dtype != DType::kF32) unsupported("attention_backward", q.dtype);
    Lease ws(*this);
    if (s.head_dim % 8 != 0) {
      ws->ref.attention_backward(s, q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(),
                                 dout.as<float>(), lse.as<float>(), dq.as<float>(), dk.as<float>(),
                                 dv.as<float>());
      return;
    }
    float* scratch = ws->attn.get(ops_.attn_bwd_scratch(s, threads_));
    ops_.attn_bwd(s, q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(), dout.as<float>(),
                  lse.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>(), scratch,
                  threads_);
  }

  void swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) override {
    if (g.dtype == DType::kBF16) {
      b16("swiglu_forward").swiglu_fwd(h.as<bf16>(), g.as<bf16>(), u.as<bf16>(), n, threads_);
      return;
    }
    if (g.dtype != DType::kF32) unsupported("swiglu_forward", g.dtype);
    ops_.swiglu_fwd(h.as<float>(), g.as<float>(), u.as<float>(), n, threads_);
  }
  void swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g, ConstDataPtr u,
                       int64_t n) override {
    if (g.dtype == DType::kBF16) {
      b16("swiglu_backward").swiglu_bwd(dg.as<bf16>(), du.as<bf16>(), dh.as<bf16>(),
                                        g.as<bf16>(), u.as<bf16>(), n, threads_);
      return;
    }
    if (g.dtype != DType::kF32) unsupported("swiglu_backward", g.dtype);
    ops_.swiglu_bwd(dg.as<float>(), du.as<float>(), dh.as<float>(), g.as<float>(), u.as<float>(),
                    n, threads_);
  }

  void cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                             int64_t rows, int64_t vocab, DataPtr lse,
                             DataPtr loss_sum) override {
    check_ce(ld, targets, rows, vocab);
    if (logits.dtype == DType::kBF16) {
      const bf16* x = logits.as<bf16>();
      float* l = lse.as<float>();
      b16("cross_entropy_forward").ce_fwd(x, ld, rows, vocab, l, threads_);
      double total = 0;
      for (int64_t r = 0; r < rows; ++r)
        total += static_cast<double>(l[r]) - static_cast<double>(to_float(x[r * ld + targets[r]]));
      *loss_sum.as<double>() += total;
      return;
    }
    if (logits.dtype != DType::kF32) unsupported("cross_entropy_forward", logits.dtype);
    const float* x = logits.as<float>();
    float* l = lse.as<float>();
    ops_.ce_fwd(x, ld, rows, vocab, l, threads_);
    double total = 0;
    for (int64_t r = 0; r < rows; ++r)
      total += static_cast<double>(l[r]) - static_cast<double>(x[r * ld + targets[r]]);
    *loss_sum.as<double>() += total;
  }
  void cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld, ConstDataPtr lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              double scale) override {
    check_ce(ld, targets, rows, vocab);
    ce_backward(dlogits, logits, ld, lse, targets, rows, vocab, scale);
  }

  void embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                         int64_t dim) override {
    check_tokens(tokens, n);
    embedding_rows(x, tokens, table, VocabSlice{0, std::numeric_limits<int32_t>::max(), 0}, n, dim);
  }
  void embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                          int64_t dim) override {
    check_tokens(tokens, n);
    embedding_add(dtable, tokens, dx, n, dim);
  }

  void vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, VocabSlice v,
                               int64_t n, int64_t dim) override {
    check_ids("embedding", "token", tokens, n, v.total);
    embedding_rows(x, tokens, table, v, n, dim);
  }
  void vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                VocabSlice v, int64_t n, int64_t dim) override {
    check_ids("embedding", "token", tokens, n, v.total);
    Lease ws(*this);
    embedding_add(dtable, slice_ids(ws->ids, tokens, n, v), dx, n, dim);
  }
  void vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                 VocabSlice v, int64_t rows, DataPtr parts) override {
    HP_CHECK(v.count >= 1 && ld >= v.count,
             "vocab_cross_entropy_stats: slice of {} ids must be >= 1 and ld={} >= it", v.count, ld);
    check_ids("cross_entropy", "target", targets, rows, v.total);
    float* p = parts.as<float>();
    if (logits.dtype == DType::kBF16) {
      const bf16* x = logits.as<bf16>();
      b16("vocab_cross_entropy_stats").ce_fwd(x, ld, rows, v.count, p, threads_);
      for (int64_t r = 0; r < rows; ++r)
        p[rows + r] = v.holds(targets[r]) ? to_float(x[r * ld + targets[r] - v.begin]) : 0.0f;
      return;
    }
    if (logits.dtype != DType::kF32) unsupported("vocab_cross_entropy_stats", logits.dtype);
    const float* x = logits.as<float>();
    ops_.ce_fwd(x, ld, rows, v.count, p, threads_);
    for (int64_t r = 0; r < rows; ++r)
      p[rows + r] = v.holds(targets[r]) ? x[r * ld + targets[r] - v.begin] : 0.0f;
  }
  void vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows, DataPtr lse,
                                   DataPtr loss_sum) override {
    if (parts.dtype != DType::kF32) unsupported("vocab_cross_entropy_combine", parts.dtype);
    *loss_sum.as<double>() += ReferenceMath<float>::vocab_cross_entropy_combine(
        parts.as<float>(), nparts, rows, lse.as<float>());
  }
  void vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                    ConstDataPtr lse, const int32_t* targets, VocabSlice v,
                                    int64_t rows, double scale) override {
    HP_CHECK(v.count >= 1 && ld >= v.count,
             "vocab_cross_entropy_backward: slice of {} ids must be >= 1 and ld={} >= it", v.count,
             ld);
    check_ids("cross_entropy", "target", targets, rows, v.total);
    Lease ws(*this);
    ce_backward(dlogits, logits, ld, lse, slice_ids(ws->ids, targets, rows, v), rows, v.count,
                scale);
  }

  void axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) override {
    if (y.dtype == DType::kBF16) {
      b16("axpy").axpy(y.as<bf16>(), x.as<bf16>(), static_cast<float>(alpha), n, threads_);
      return;
    }
    if (y.dtype != DType::kF32) unsupported("axpy", y.dtype);
    ops_.axpy(y.as<float>(), x.as<float>(), static_cast<float>(alpha), n, threads_);
  }
  void convert(DataPtr dst, ConstDataPtr src, int64_t n) override;
  double sum_squares(ConstDataPtr x, int64_t n) override;
  void adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n, double lr,
             double beta1, double beta2, double eps, double weight_decay, int64_t step,
             double grad_scale, DataPtr weight_copy) override;

 private:
  // dlogits = (softmax - onehot) * scale with ids already checked; an id < 0 has no one-hot.
  void ce_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld, ConstDataPtr lse,
                   const int32_t* targets, int64_t rows, int64_t vocab, double scale) {
    if (dlogits.dtype == DType::kBF16) {
      const cpu::Bf16Ops& o = b16("cross_entropy_backward");
      if (logits.dtype == DType::kF32)
        o.ce_bwd_f32(dlogits.as<bf16>(), logits.as<float>(), ld, lse.as<float>(), targets, rows,
                     vocab, static_cast<float>(scale), threads_);
      else
        o.ce_bwd(dlogits.as<bf16>(), logits.as<bf16>(), ld, lse.as<float>(), targets, rows, vocab,
                 static_cast<float>(scale), threads_);
      return;
    }
    if (dlogits.dtype != DType::kF32) unsupported("cross_entropy_backward", dlogits.dtype);
    ops_.ce_bwd(dlogits.as<float>(), logits.as<float>(), ld, lse.as<float>(), targets, rows, vocab,
                static_cast<float>(scale), threads_);
  }
  // x rows = the table rows of the tokens in `v` (ids checked), zero rows for the others.
  void embedding_rows(DataPtr x, const int32_t* tokens, ConstDataPtr table, VocabSlice v, int64_t n,
                      int64_t dim) const {
    if (table.dtype != DType::kF32 && table.dtype != DType::kBF16)
      unsupported("embedding_forward", table.dtype);
    if (table.dtype == DType::kBF16) b16("embedding_forward");
    HP_CHECK(x.dtype == table.dtype, "embedding_forward: rows of {} values into {} values",
             dtype_name(table.dtype), dtype_name(x.dtype));
    const size_t row = static_cast<size_t>(dim * dtype_bytes(x.dtype));
    char* xx = static_cast<char*>(x.data);
    const char* t = static_cast<const char*>(table.data);
    for (int64_t i = 0; i < n; ++i) {
      if (v.holds(tokens[i]))
        std::memcpy(xx + i * row, t + (tokens[i] - v.begin) * static_cast<int64_t>(row), row);
      else
        std::memset(xx + i * row, 0, row);
    }
  }
  // dtable rows += dx rows by checked ids (ids < 0 skipped).
  void embedding_add(DataPtr dtable, const int32_t* ids, ConstDataPtr dx, int64_t n, int64_t dim);
  // ids - v.begin for the ids in `v`, -1 for the others, in `buf` (grow-only, per workspace).
  static const int32_t* slice_ids(std::vector<int32_t>& buf, const int32_t* ids, int64_t n,
                                  VocabSlice v) {
    buf.resize(std::max(buf.size(), static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i)
      buf[static_cast<size_t>(i)] = v.holds(ids[i]) ? static_cast<int32_t>(ids[i] - v.begin) : -1;
    return buf.data();
  }
  static void check_ids(const char* kernel, const char* what, const int32_t* ids, int64_t n,
                        int64_t total) {
    for (int64_t i = 0; i < n; ++i)
      HP_CHECK(ids[i] >= 0 && ids[i] < total, "{}: {} {} of row {} is outside [0, {})", kernel,
               what, ids[i], i, total);
  }

  [[noreturn]] void unsupported(const char* kernel, DType t) const {
    fail("{}: the CPU kernels do not have {} for {} values (supported: f32, and bf16 on a CPU "
         "with AVX512-BF16); use precision fp32 or the reference backend",
         name(), kernel, dtype_name(t));
  }
  // The bf16 table, or an error saying why this backend has none.
  const cpu::Bf16Ops& b16(const char* kernel) const {
    if (b16_) return *b16_;
    if (!cpu::Bf16Gemm::available())
      fail("{}: {} got bf16 values, but this build has no oneDNN (install libdnnl-dev with "
           "scripts/install_deps.sh and reconfigure); use precision fp32",
           name(), kernel);
    fail("{}: {} got bf16 values, but bf16 needs the avx512bf16 path ({}; this backend runs "
         "{}); use precision fp32, or HP_CPU_ISA=auto on such a CPU",
         name(), kernel,
         cpu::cpu_has_avx512bf16() ? "this CPU has it" : "this CPU has no AVX512-BF16",
         cpu_isa_name(isa_));
  }
  void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                 ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
                 int64_t ldc);
  void attention_forward_bf16(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                              DataPtr o, DataPtr lse);
  void attention_backward_bf16(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                               ConstDataPtr v, ConstDataPtr o, ConstDataPtr dout,
                               ConstDataPtr lse, DataPtr dq, DataPtr dk, DataPtr dv);
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
  // The cos/sin table of `npos` positions in the workspace (rebuilt when the shape changes).
  static void rope_table(Workspace& ws, int64_t npos, int64_t head_dim, double theta) {
    const int64_t half = head_dim / 2;
    if (ws.rope_head_dim == head_dim && ws.rope_theta == theta && ws.rope_npos >= npos) return;
    ws.rope_cos.resize(static_cast<size_t>(npos * half));
    ws.rope_sin.resize(static_cast<size_t>(npos * half));
    for (int64_t p = 0; p < npos; ++p)
      for (int64_t j = 0; j < half; ++j)
        rope_cos_sin(p, j, head_dim, theta, &ws.rope_cos[p * half + j], &ws.rope_sin[p * half + j]);
    ws.rope_head_dim = head_dim;
    ws.rope_theta = theta;
    ws.rope_npos = npos;
  }

  int threads_;
  CpuIsa isa_;
  const cpu::IsaOps& ops_;
  const cpu::Bf16Ops* b16_;  // null unless the ISA is kAvx512Bf16 and oneDNN is built in
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
    Workspace& operator*() { return *ws_; }

   private:
    CpuKernels& k_;
    std::unique_ptr<Workspace> ws_;
  };

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Workspace>> free_;
};

// bf16 A and B into a bf16 C (activations) or an f32 C (parameter gradients), through the
// workspace's oneDNN GEMM (its primitives are cached per call shape).
void CpuKernels::gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           double alpha, ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb,
                           double beta, DataPtr C, int64_t ldc) {
  b16("gemm");
  HP_CHECK(C.dtype == DType::kBF16 || C.dtype == DType::kF32,
           "gemm: bf16 inputs go into a bf16 or an f32 C, not {}", dtype_name(C.dtype));
  Lease ws(*this);
  if (!ws->gemm16) ws->gemm16 = std::make_unique<cpu::Bf16Gemm>(threads_);
  const float a = static_cast<float>(alpha), b = static_cast<float>(beta);
  if (C.dtype == DType::kBF16)
    ws->gemm16->run(trans_a, trans_b, M, N, K, a, A.as<bf16>(), lda, B.as<bf16>(), ldb, b,
                    C.as<bf16>(), ldc);
  else
    ws->gemm16->run(trans_a, trans_b, M, N, K, a, A.as<bf16>(), lda, B.as<bf16>(), ldb, b,
                    C.as<float>(), ldc);
}

void CpuKernels::attention_forward_bf16(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                        ConstDataPtr v, DataPtr o, DataPtr lse) {
  const cpu::Bf16Ops& b = b16("attention_forward");
  HP_CHECK(s.head_dim % 2 == 0,
           "attention_forward: bf16 attention on the CPU needs an even head_dim (it reads column "
           "pairs), got {}; use precision fp32",
           s.head_dim);
  Lease ws(*this);
  float* scratch = ws->attn.get(b.attn_fwd_scratch(s, threads_));
  b.attn_fwd(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), o.as<bf16>(), lse.as<float>(), scratch,
             threads_);
}

void CpuKernels::attention_backward_bf16(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                         ConstDataPtr v, ConstDataPtr o, ConstDataPtr dout,
                                         ConstDataPtr lse, DataPtr dq, DataPtr dk, DataPtr dv) {
  const cpu::Bf16Ops& b = b16("attention_backward");
  HP_CHECK(s.head_dim % 2 == 0,
           "attention_backward: bf16 attention on the CPU needs an even head_dim (it reads "
           "column pairs), got {}; use precision fp32",
           s.head_dim);
  Lease ws(*this);
  float* scratch = ws->attn.get(b.attn_bwd_scratch(s, threads_));
  b.attn_bwd(s, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), o.as<bf16>(), dout.as<bf16>(),
             lse.as<float>(), dq.as<bf16>(), dk.as<bf16>(), dv.as<bf16>(), scratch, threads_);
}

// Token order is kept per column, so splitting columns across threads stays deterministic.
void CpuKernels::embedding_add(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                               int64_t dim) {
  if (dx.dtype == DType::kBF16) {
    b16("embedding_backward")
        .embedding_bwd(dtable.as<float>(), tokens, dx.as<bf16>(), n, dim, threads_);
    return;
  }
  if (dx.dtype != DType::kF32) unsupported("embedding_backward", dx.dtype);
  float* table = dtable.as<float>();
  const float* d = dx.as<float>();
  const int64_t cols = 256, nc = (dim + cols - 1) / cols;
  auto run = [&](int64_t c) {
    const int64_t c0 = c * cols, c1 = std::min(dim, c0 + cols);
    for (int64_t t = 0; t < n; ++t) {
      if (tokens[t] < 0) continue;  // another rank's vocabulary slice
      float* dst = table + static_cast<int64_t>(tokens[t]) * dim;
      const float* src = d + t * dim;
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

void CpuKernels::convert(DataPtr dst, ConstDataPtr src, int64_t n) {
  if (dst.dtype == src.dtype) {
    std::memcpy(dst.data, src.data, static_cast<size_t>(n * dtype_bytes(dst.dtype)));
    return;
  }
  // f32 <-> bf16 vectorized where the CPU has AVX512-BF16 (f32 subnormals round to zero there).
  if (b16_ && dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
    b16_->to_bf16(dst.as<bf16>(), src.as<float>(), n, threads_);
    return;
  }
  if (b16_ && dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
    b16_->to_f32(dst.as<float>(), src.as<bf16>(), n, threads_);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double x = read_any(src, i);
    switch (dst.dtype) {
      case DType::kF64: dst.as<double>()[i] = x; break;
      case DType::kF32: dst.as<float>()[i] = static_cast<float>(x); break;
      case DType::kBF16: dst.as<bf16>()[i] = to_bf16(static_cast<float>(x)); break;
    }
  }
}

// Block sums in double, added in block order: the same result for every thread count.
double CpuKernels::sum_squares(ConstDataPtr x, int64_t n) {
  if (x.dtype == DType::kBF16 && b16_) {
    const int64_t nb = (n + cpu::kSumBlock - 1) / cpu::kSumBlock;
    Lease ws(*this);
    double* part = reinterpret_cast<double*>(ws->small.get(static_cast<size_t>(2 * nb + 2)));
    b16_->sum_squares_blocks(x.as<bf16>(), n, part, threads_);
    double total = 0;
    for (int64_t b = 0; b < nb; ++b) total += part[b];
    return total;
  }
  if (x.dtype != DType::kF32) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += read_any(x, i) * read_any(x, i);
    return acc;
  }
  const int64_t nb = (n + cpu::kSumBlock - 1) / cpu::kSumBlock;
  Lease ws(*this);
  double* part = reinterpret_cast<double*>(ws->small.get(static_cast<size_t>(2 * nb + 2)));
  ops_.sum_squares_blocks(x.as<float>(), n, part, threads_);
  double total = 0;
  for (int64_t b = 0; b < nb; ++b) total += part[b];
  return total;
}

// In double, the reference's formula element by element. This file is built for the baseline ISA,
// which has no FMA, so the compiler cannot contract a product and a sum into one rounding: the
// results are bitwise the reference's, for every vector width and thread count.
void CpuKernels::adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n,
                       double lr, double beta1, double beta2, double eps, double weight_decay,
                       int64_t step, double grad_scale, DataPtr weight_copy) {
  if (param.dtype != DType::kF32) unsupported("adamw", param.dtype);
  HP_CHECK(step >= 1, "adamw: step {} must count from 1", step);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double shrink = 1.0 - lr * weight_decay, step_size = lr / bc1;
  const double inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  float* p = param.as<float>();
  const float* g = grad.as<float>();
  float* mm = m.as<float>();
  float* vv = v.as<float>();
  auto run = [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const double gi = static_cast<double>(g[i]) * grad_scale;
      const double mi = beta1 * static_cast<double>(mm[i]) + (1.0 - beta1) * gi;
      const double vi = beta2 * static_cast<double>(vv[i]) + (1.0 - beta2) * gi * gi;
      mm[i] = static_cast<float>(mi);
      vv[i] = static_cast<float>(vi);
      const double denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
      p[i] = static_cast<float>(static_cast<double>(p[i]) * shrink - step_size * mi / denom);
    }
  };
  const int64_t chunk = 1 << 16, nc = (n + chunk - 1) / chunk;
  if (threads_ <= 1 || nc <= 1) {
    run(0, n);
  } else {
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t c = 0; c < nc; ++c) run(c * chunk, std::min(n, (c + 1) * chunk));
  }
  if (weight_copy) convert(weight_copy, param, n);
}

}  // namespace

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return true;
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    case CpuIsa::kAvx512Bf16: return cpu::cpu_has_avx512bf16();
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
}

CpuIsa cpu_best_isa() {
  if (cpu_supports(CpuIsa::kAvx512Bf16)) return CpuIsa::kAvx512Bf16;
  return cpu_supports(CpuIsa::kAvx512) ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kAvx2: return "avx2";
  }
  return "?";
}

std::string blas_core_name() {
  const char* n = openblas_get_corename();
  return n ? std::string(n) : std::string("unknown");
}

std::unique_ptr<Kernels> make_cpu_kernels(int threads, CpuIsa isa) {
  if (isa == CpuIsa::kAuto) isa = cpu_best_isa();
  HP_CHECK(cpu_supports(isa), "make_cpu_kernels: this CPU does not support {}; use CpuIsa::kAuto",
           cpu_isa_name(isa));
  HP_CHECK(cpu_supports(CpuIsa::kAvx2),
           "make_cpu_kernels: the CPU backend needs at least AVX2+FMA");
  return std::make_unique<CpuKernels>(threads, isa);
}

// HP_CPU_ISA=avx2|avx512|avx512bf16 forces the path kAuto takes (tests and benchmarks of the
// fallbacks; avx512 on an AVX512-BF16 CPU is the f32-only path).
CpuIsa cpu_isa_from_env() {
  CpuIsa isa = CpuIsa::kAuto;
  if (const char* env = std::getenv("HP_CPU_ISA"); env && *env) {
    const std::string e(env);
    if (e == "avx2") isa = CpuIsa::kAvx2;
    else if (e == "avx512") isa = CpuIsa::kAvx512;
    else if (e == "avx512bf16") isa = CpuIsa::kAvx512Bf16;
    else if (e != "auto") fail("HP_CPU_ISA={} is not one of avx2, avx512, avx512bf16, auto", e);
  }
  return isa;
}

std::unique_ptr<Kernels> make_cpu_kernels(int threads) {
  return make_cpu_kernels(threads, cpu_isa_from_env());
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
