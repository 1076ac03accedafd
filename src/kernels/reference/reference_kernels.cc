// The reference backend's kernels: ReferenceMath<double> for f64, ReferenceMath<float> for f32 and
// for bf16, whose operands are widened to float before the math and rounded to bf16 (nearest even)
// when stored, so every bf16 kernel is "float math, one rounding per stored element" (GEMMs
// accumulate in float). Checks that every argument has the type its role asks for.
#include <array>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/reference/reference_math.h"
#include "util/error.h"

namespace hp {
namespace {

// Elements a rows x cols block with row stride ld spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) {
  return rows > 0 ? (rows - 1) * ld + cols : 0;
}

class ReferenceKernels final : public Kernels {
 public:
  std::string name() const override { return "reference"; }
  bool supports(const Precision& p) const override {
    return p == Precision::fp32() || p == Precision::bf16() || p == Precision::fp64();
  }

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, ConstDataPtr A,
            int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
            int64_t ldc) override {
    const DType c = A.dtype;
    want(B, c, "gemm", "B");
    if (c == DType::kF64) {
      want(C, c, "gemm", "C");
      d_.gemm(ta, tb, M, N, K, alpha, A.as<double>(), lda, B.as<double>(), ldb, beta,
              C.as<double>(), ldc);
      return;
    }
    HP_CHECK(C.dtype == c || C.dtype == DType::kF32,
             "reference gemm: C is {} but A and B are {}; C must be {} or f32", dtype_name(C.dtype),
             dtype_name(c), dtype_name(c));
    const float* a = load(A, ta ? K : M, ta ? M : K, lda, 0);
    const float* b = load(B, tb ? N : K, tb ? K : N, ldb, 1);
    float* cc = load_out(C, M, N, ldc, 2, beta != 0);
    f_.gemm(ta, tb, M, N, K, static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta),
            cc, ldc);
    store(C, cc, M, N, ldc);
  }

  void rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g, int64_t rows,
                       int64_t dim, double eps) override {
    const DType c = x.dtype;
    want(y, c, "rmsnorm_forward", "y");
    want(g, c, "rmsnorm_forward", "g");
    want(rstd, stats_of(c), "rmsnorm_forward", "rstd");
    if (c == DType::kF64) {
      d_.rmsnorm_forward(y.as<double>(), rstd.as<double>(), x.as<double>(), g.as<double>(), rows,
                         dim, eps);
      return;
    }
    float* yy = load_out(y, rows, dim, dim, 0, false);
    f_.rmsnorm_forward(yy, rstd.as<float>(), load(x, rows, dim, dim, 1), load(g, 1, dim, dim, 2),
                       rows, dim, eps);
    store(y, yy, rows, dim, dim);
  }

  void rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x, ConstDataPtr g,
                        ConstDataPtr rstd, int64_t rows, int64_t dim, bool accumulate) override {
    const DType c = x.dtype;
    want(dx, c, "rmsnorm_backward", "dx");
    want(dy, c, "rmsnorm_backward", "dy");
    want(g, c, "rmsnorm_backward", "g");
    want(dg, master_of(c), "rmsnorm_backward", "dg");
    want(rstd, stats_of(c), "rmsnorm_backward", "rstd");
    if (c == DType::kF64) {
      d_.rmsnorm_backward(dx.as<double>(), dg.as<double>(), dy.as<double>(), x.as<double>(),
                          g.as<double>(), rstd.as<double>(), rows, dim, accumulate);
      return;
    }
    float* dxx = load_out(dx, rows, dim, dim, 0, accumulate);
    f_.rmsnorm_backward(dxx, dg.as<float>(), load(dy, rows, dim, dim, 1),
                        load(x, rows, dim, dim, 2), load(g, 1, dim, dim, 3), rstd.as<float>(), rows,
                        dim, accumulate);
    store(dx, dxx, rows, dim, dim);
  }

  void rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) override {
    if (x.dtype == DType::kF64) {
      d_.rope(x.as<double>(), rows, ld, seq, n_heads, head_dim, theta, inverse);
      return;
    }
    const int64_t cols = n_heads * head_dim;
    float* xx = load_out(x, rows, cols, ld, 0, true);
    f_.rope(xx, rows, ld, seq, n_heads, head_dim, theta, inverse);
    store(x, xx, rows, cols, ld);
  }

  void attention_forward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                         DataPtr o, DataPtr lse) override {
    const DType c = q.dtype;
    for (auto [p, n] : {std::pair{k, "k"}, {v, "v"}, {ConstDataPtr(o), "o"}})
      want(p, c, "attention_forward", n);
    want(lse, stats_of(c), "attention_forward", "lse");
    if (c == DType::kF64) {
      d_.attention_forward(s, q.as<double>(), k.as<double>(), v.as<double>(), o.as<double>(),
                           lse.as<double>());
      return;
    }
    const int64_t T = s.batch * s.seq, qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
    float* oo = load_out(o, T, qw, s.ld_o, 3, false);
    f_.attention_forward(s, load(q, T, qw, s.ld_qkv, 0), load(k, T, kw, s.ld_qkv, 1),
                         load(v, T, kw, s.ld_qkv, 2), oo, lse.as<float>());
    store(o, oo, T, qw, s.ld_o);
  }

  void attention_backward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                          ConstDataPtr o, ConstDataPtr dout, ConstDataPtr lse, DataPtr dq,
                          DataPtr dk, DataPtr dv) override {
    const DType c = q.dtype;
    for (auto [p, n] : {std::pair{k, "k"},
                        {v, "v"},
                        {o, "o"},
                        {dout, "dout"},
                        {ConstDataPtr(dq), "dq"},
                        {ConstDataPtr(dk), "dk"},
                        {ConstDataPtr(dv), "dv"}})
      want(p, c, "attention_backward", n);
    want(lse, stats_of(c), "attention_backward", "lse");
    if (c == DType::kF64) {
      d_.attention_backward(s, q.as<double>(), k.as<double>(), v.as<double>(), o.as<double>(),
                            dout.as<double>(), lse.as<double>(), dq.as<double>(), dk.as<double>(),
                            dv.as<double>());
      return;
    }
    const int64_t T = s.batch * s.seq, qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
    float* dqq = load_out(dq, T, qw, s.ld_qkv, 5, false);
    float* dkk = load_out(dk, T, kw, s.ld_qkv, 6, false);
    float* dvv = load_out(dv, T, kw, s.ld_qkv, 7, false);
    f_.attention_backward(s, load(q, T, qw, s.ld_qkv, 0), load(k, T, kw, s.ld_qkv, 1),
                          load(v, T, kw, s.ld_qkv, 2), load(o, T, qw, s.ld_o, 3),
                          load(dout, T, qw, s.ld_o, 4), lse.as<float>(), dqq, dkk, dvv);
    store(dq, dqq, T, qw, s.ld_qkv);
    store(dk, dkk, T, kw, s.ld_qkv);
    store(dv, dvv, T, kw, s.ld_qkv);
  }

  void swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) override {
    want(h, g.dtype, "swiglu_forward", "h");
    want(u, g.dtype, "swiglu_forward", "u");
    if (g.dtype == DType::kF64) {
      d_.swiglu_forward(h.as<double>(), g.as<double>(), u.as<double>(), n);
      return;
    }
    float* hh = load_out(h, 1, n, n, 0, false);
    f_.swiglu_forward(hh, load(g, 1, n, n, 1), load(u, 1, n, n, 2), n);
    store(h, hh, 1, n, n);
  }

  void swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g, ConstDataPtr u,
                       int64_t n) override {
    for (auto [p, nm] :
         {std::pair{ConstDataPtr(dg), "dg"}, {ConstDataPtr(du), "du"}, {dh, "dh"}, {u, "u"}})
      want(p, g.dtype, "swiglu_backward", nm);
    if (g.dtype == DType::kF64) {
      d_.swiglu_backward(dg.as<double>(), du.as<double>(), dh.as<double>(), g.as<double>(),
                         u.as<double>(), n);
      return;
    }
    float* dgg = load_out(dg, 1, n, n, 0, false);
    float* duu = load_out(du, 1, n, n, 1, false);
    f_.swiglu_backward(dgg, duu, load(dh, 1, n, n, 2), load(g, 1, n, n, 3), load(u, 1, n, n, 4), n);
    store(dg, dgg, 1, n, n);
    store(du, duu, 1, n, n);
  }

  void cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets, int64_t rows,
                             int64_t vocab, DataPtr lse, DataPtr loss_sum) override {
    want(loss_sum, DType::kF64, "cross_entropy_forward", "loss_sum");
    want(lse, stats_of(logits.dtype), "cross_entropy_forward", "lse");
    if (logits.dtype == DType::kF64) {
      *loss_sum.as<double>() +=
          d_.cross_entropy_forward(logits.as<double>(), ld, targets, rows, vocab, lse.as<double>());
      return;
    }
    *loss_sum.as<double>() += f_.cross_entropy_forward(load(logits, rows, vocab, ld, 0), ld,
                                                       targets, rows, vocab, lse.as<float>());
  }

  void cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld, ConstDataPtr lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              double scale) override {
    want(lse, stats_of(dlogits.dtype), "cross_entropy_backward", "lse");
    if (dlogits.dtype == DType::kF64) {
      want(logits, DType::kF64, "cross_entropy_backward", "logits");
      d_.cross_entropy_backward(dlogits.as<double>(), logits.as<double>(), ld, lse.as<double>(),
                                targets, rows, vocab, scale);
      return;
    }
    HP_CHECK(logits.dtype == dlogits.dtype || logits.dtype == DType::kF32,
             "reference cross_entropy_backward: logits are {}, dlogits {}",
             dtype_name(logits.dtype), dtype_name(dlogits.dtype));
    const float* l = load(logits, rows, vocab, ld, 0);
    float* d = load_out(dlogits, rows, vocab, ld, 1, false);
    f_.cross_entropy_backward(d, l, ld, lse.as<float>(), targets, rows, vocab,
                              static_cast<float>(scale));
    store(dlogits, d, rows, vocab, ld);
  }

  void embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                         int64_t dim) override {
    want(x, table.dtype, "embedding_forward", "x");
    if (table.dtype == DType::kF64) {
      d_.embedding_forward(x.as<double>(), tokens, table.as<double>(), n, dim);
    } else if (table.dtype == DType::kF32) {
      f_.embedding_forward(x.as<float>(), tokens, table.as<float>(), n, dim);
    } else {  // a row copy is exact in any type
      const bf16* t = table.as<bf16>();
      bf16* xx = x.as<bf16>();
      for (int64_t i = 0; i < n; ++i) {
        HP_CHECK(tokens[i] >= 0, "embedding: token {} at position {} is negative", tokens[i], i);
        for (int64_t c = 0; c < dim; ++c) xx[i * dim + c] = t[tokens[i] * dim + c];
      }
    }
  }

  void embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                          int64_t dim) override {
    want(dtable, master_of(dx.dtype), "embedding_backward", "dtable");
    if (dx.dtype == DType::kF64) {
      d_.embedding_backward(dtable.as<double>(), tokens, dx.as<double>(), n, dim);
      return;
    }
    f_.embedding_backward(dtable.as<float>(), tokens, load(dx, n, dim, dim, 0), n, dim);
  }

  void vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, VocabSlice v,
                               int64_t n, int64_t dim) override {
    want(x, table.dtype, "vocab_embedding_forward", "x");
    if (table.dtype == DType::kF64) {
      d_.vocab_embedding_forward(x.as<double>(), tokens, table.as<double>(), v, n, dim);
      return;
    }
    float* xx = load_out(x, n, dim, dim, 0, false);  // row copies and zeros: exact in any type
    f_.vocab_embedding_forward(xx, tokens, load(table, v.count, dim, dim, 1), v, n, dim);
    store(x, xx, n, dim, dim);
  }

  void vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                VocabSlice v, int64_t n, int64_t dim) override {
    want(dtable, master_of(dx.dtype), "vocab_embedding_backward", "dtable");
    if (dx.dtype == DType::kF64) {
      d_.vocab_embedding_backward(dtable.as<double>(), tokens, dx.as<double>(), v, n, dim);
      return;
    }
    f_.vocab_embedding_backward(dtable.as<float>(), tokens, load(dx, n, dim, dim, 0), v, n, dim);
  }

  void vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                 VocabSlice v, int64_t rows, DataPtr parts) override {
    want(parts, stats_of(logits.dtype), "vocab_cross_entropy_stats", "parts");
    if (logits.dtype == DType::kF64) {
      d_.vocab_cross_entropy_stats(logits.as<double>(), ld, targets, v, rows, parts.as<double>());
      return;
    }
    f_.vocab_cross_entropy_stats(load(logits, rows, v.count, ld, 0), ld, targets, v, rows,
                                 parts.as<float>());
  }

  void vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows, DataPtr lse,
                                   DataPtr loss_sum) override {
    want(loss_sum, DType::kF64, "vocab_cross_entropy_combine", "loss_sum");
    want(lse, parts.dtype, "vocab_cross_entropy_combine", "lse");
    if (parts.dtype == DType::kF64) {
      *loss_sum.as<double>() += ReferenceMath<double>::vocab_cross_entropy_combine(
          parts.as<double>(), nparts, rows, lse.as<double>());
      return;
    }
    want(parts, DType::kF32, "vocab_cross_entropy_combine", "parts");
    *loss_sum.as<double>() += ReferenceMath<float>::vocab_cross_entropy_combine(
        parts.as<float>(), nparts, rows, lse.as<float>());
  }

  void vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                    ConstDataPtr lse, const int32_t* targets, VocabSlice v,
                                    int64_t rows, double scale) override {
    want(lse, stats_of(dlogits.dtype), "vocab_cross_entropy_backward", "lse");
    if (dlogits.dtype == DType::kF64) {
      want(logits, DType::kF64, "vocab_cross_entropy_backward", "logits");
      d_.vocab_cross_entropy_backward(dlogits.as<double>(), logits.as<double>(), ld,
                                      lse.as<double>(), targets, v, rows, scale);
      return;
    }
    HP_CHECK(logits.dtype == dlogits.dtype || logits.dtype == DType::kF32,
             "reference vocab_cross_entropy_backward: logits are {}, dlogits {}",
             dtype_name(logits.dtype), dtype_name(dlogits.dtype));
    const float* l = load(logits, rows, v.count, ld, 0);
    float* d = load_out(dlogits, rows, v.count, ld, 1, false);
    f_.vocab_cross_entropy_backward(d, l, ld, lse.as<float>(), targets, v, rows,
                                    static_cast<float>(scale));
    store(dlogits, d, rows, v.count, ld);
  }

  void axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) override {
    want(x, y.dtype, "axpy", "x");
    if (y.dtype == DType::kF64) {
      d_.axpy(y.as<double>(), x.as<double>(), alpha, n);
      return;
    }
    float* yy = load_out(y, 1, n, n, 0, true);
    f_.axpy(yy, load(x, 1, n, n, 1), static_cast<float>(alpha), n);
    store(y, yy, 1, n, n);
  }

  void convert(DataPtr dst, ConstDataPtr src, int64_t n) override { convert_any(dst, src, n); }

  double sum_squares(ConstDataPtr x, int64_t n) override {
    if (x.dtype == DType::kF64) return d_.sum_squares(x.as<double>(), n);
    return f_.sum_squares(load(x, 1, n, n, 0), n);
  }

  void adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n, double lr,
             double beta1, double beta2, double eps, double weight_decay, int64_t step,
             double grad_scale, DataPtr weight_copy) override {
    HP_CHECK(param.dtype == DType::kF32 || param.dtype == DType::kF64,
             "reference adamw: master weights must be f32 or f64, not {}", dtype_name(param.dtype));
    for (auto [p, nm] : {std::pair{grad, "grad"}, {ConstDataPtr(m), "m"}, {ConstDataPtr(v), "v"}})
      want(p, param.dtype, "adamw", nm);
    if (param.dtype == DType::kF64) {
      d_.adamw(param.as<double>(), grad.as<double>(), m.as<double>(), v.as<double>(), n, lr, beta1,
               beta2, eps, weight_decay, step, grad_scale);
    } else {
      f_.adamw(param.as<float>(), grad.as<float>(), m.as<float>(), v.as<float>(), n, lr, beta1,
               beta2, eps, weight_decay, step, grad_scale);
    }
    if (weight_copy) convert_any(weight_copy, param, n);
  }

 private:
  static DType master_of(DType compute) { return compute == DType::kBF16 ? DType::kF32 : compute; }
  static DType stats_of(DType compute) {
    return compute == DType::kF64 ? DType::kF64 : DType::kF32;
  }
  static void want(ConstDataPtr p, DType t, const char* kernel, const char* arg) {
    HP_CHECK(p.dtype == t,
             "reference {}: {} is {} where {} is expected (see the roles in kernels.h)", kernel,
             arg, dtype_name(p.dtype), dtype_name(t));
  }

  // A float view of a rows x cols block (stride ld): f32 in place, bf16 widened into scratch slot.
  const float* load(ConstDataPtr p, int64_t rows, int64_t cols, int64_t ld, int slot) {
    if (p.dtype == DType::kF32) return p.as<float>();
    HP_CHECK(p.dtype == DType::kBF16, "reference: {} operand where f32 or bf16 is expected",
             dtype_name(p.dtype));
    std::vector<float>& s = scratch_.at(static_cast<size_t>(slot));
    s.resize(static_cast<size_t>(span(rows, cols, ld)));
    const bf16* src = p.as<bf16>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) s[r * ld + c] = to_float(src[r * ld + c]);
    return s.data();
  }
  // The same for an output: f32 in place; bf16 into scratch, widened first when `read`.
  float* load_out(DataPtr p, int64_t rows, int64_t cols, int64_t ld, int slot, bool read) {
    if (p.dtype == DType::kF32) return p.as<float>();
    if (read) return const_cast<float*>(load(p, rows, cols, ld, slot));
    HP_CHECK(p.dtype == DType::kBF16, "reference: {} operand where f32 or bf16 is expected",
             dtype_name(p.dtype));
    std::vector<float>& s = scratch_.at(static_cast<size_t>(slot));
    s.resize(static_cast<size_t>(span(rows, cols, ld)));
    return s.data();
  }
  // Rounds a computed block back into a bf16 output (only its rows x cols elements: the gaps of a
  // strided block may be another output's). Nothing to do for f32, computed in place.
  static void store(DataPtr p, const float* s, int64_t rows, int64_t cols, int64_t ld) {
    if (p.dtype != DType::kBF16) return;
    bf16* dst = p.as<bf16>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = to_bf16(s[r * ld + c]);
  }
  static double read(ConstDataPtr p, int64_t i) {
    switch (p.dtype) {
      case DType::kF64:
        return p.as<double>()[i];
      case DType::kF32:
        return p.as<float>()[i];
      case DType::kBF16:
        return to_float(p.as<bf16>()[i]);
    }
    return 0;
  }
  static void convert_any(DataPtr dst, ConstDataPtr src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = read(src, i);
      switch (dst.dtype) {
        case DType::kF64:
          dst.as<double>()[i] = x;
          break;
        // bf16 from f64 goes through float (rounding twice can differ from one rounding in the
        // last bit; no tensor here converts f64 to bf16).
        case DType::kF32:
          dst.as<float>()[i] = static_cast<float>(x);
          break;
        case DType::kBF16:
          dst.as<bf16>()[i] = to_bf16(static_cast<float>(x));
          break;
      }
    }
  }

  ReferenceMath<double> d_;
  ReferenceMath<float> f_;
  std::array<std::vector<float>, 8> scratch_;
};

}  // namespace

std::unique_ptr<Kernels> make_reference_kernels() { return std::make_unique<ReferenceKernels>(); }

}  // namespace hp
