// Test doubles: a Kernels and a Backend that pass every call on to another one, with a hook around
// each call (enter/leave) so a test can count, measure or guard what goes through the backend.
#pragma once

#include <string>

#include "kernels/backend.h"
#include "kernels/kernels.h"

namespace hp::test {

class ForwardingKernels : public Kernels {
 public:
  explicit ForwardingKernels(Kernels& inner) : k_(inner) {}
  // Called around every kernel; `name` is the kernel's.
  virtual void enter(const char* name) {}
  virtual void leave() {}

  std::string name() const override { return "forwarding(" + k_.name() + ")"; }
  bool supports(const Precision& p) const override { return k_.supports(p); }
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, ConstDataPtr A,
            int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
            int64_t ldc) override {
    Scope s(*this, "gemm");
    k_.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g, int64_t rows,
                       int64_t dim, double eps) override {
    Scope s(*this, "rmsnorm_forward");
    k_.rmsnorm_forward(y, rstd, x, g, rows, dim, eps);
  }
  void rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x, ConstDataPtr g,
                        ConstDataPtr rstd, int64_t rows, int64_t dim, bool accumulate) override {
    Scope s(*this, "rmsnorm_backward");
    k_.rmsnorm_backward(dx, dg, dy, x, g, rstd, rows, dim, accumulate);
  }
  void rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) override {
    Scope s(*this, "rope");
    k_.rope(x, rows, ld, seq, n_heads, head_dim, theta, inverse);
  }
  void attention_forward(const AttnShape& sh, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                         DataPtr o, DataPtr lse) override {
    Scope s(*this, "attention_forward");
    k_.attention_forward(sh, q, k, v, o, lse);
  }
  void attention_backward(const AttnShape& sh, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                          ConstDataPtr o, ConstDataPtr dout, ConstDataPtr lse, DataPtr dq,
                          DataPtr dk, DataPtr dv) override {
    Scope s(*this, "attention_backward");
    k_.attention_backward(sh, q, k, v, o, dout, lse, dq, dk, dv);
  }
  void swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) override {
    Scope s(*this, "swiglu_forward");
    k_.swiglu_forward(h, g, u, n);
  }
  void swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g, ConstDataPtr u,
                       int64_t n) override {
    Scope s(*this, "swiglu_backward");
    k_.swiglu_backward(dg, du, dh, g, u, n);
  }
  void cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets, int64_t rows,
                             int64_t vocab, DataPtr lse, DataPtr loss_sum) override {
    Scope s(*this, "cross_entropy_forward");
    k_.cross_entropy_forward(logits, ld, targets, rows, vocab, lse, loss_sum);
  }
  void cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld, ConstDataPtr lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              double scale) override {
    Scope s(*this, "cross_entropy_backward");
    k_.cross_entropy_backward(dlogits, logits, ld, lse, targets, rows, vocab, scale);
  }
  void vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, VocabSlice v,
                               int64_t n, int64_t dim) override {
    Scope s(*this, "vocab_embedding_forward");
    k_.vocab_embedding_forward(x, tokens, table, v, n, dim);
  }
  void vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                VocabSlice v, int64_t n, int64_t dim) override {
    Scope s(*this, "vocab_embedding_backward");
    k_.vocab_embedding_backward(dtable, tokens, dx, v, n, dim);
  }
  void vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                 VocabSlice v, int64_t rows, DataPtr parts) override {
    Scope s(*this, "vocab_cross_entropy_stats");
    k_.vocab_cross_entropy_stats(logits, ld, targets, v, rows, parts);
  }
  void vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows, DataPtr lse,
                                   DataPtr loss_sum) override {
    Scope s(*this, "vocab_cross_entropy_combine");
    k_.vocab_cross_entropy_combine(parts, nparts, rows, lse, loss_sum);
  }
  void vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                    ConstDataPtr lse, const int32_t* targets, VocabSlice v,
                                    int64_t rows, double scale) override {
    Scope s(*this, "vocab_cross_entropy_backward");
    k_.vocab_cross_entropy_backward(dlogits, logits, ld, lse, targets, v, rows, scale);
  }
  void embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                         int64_t dim) override {
    Scope s(*this, "embedding_forward");
    k_.embedding_forward(x, tokens, table, n, dim);
  }
  void embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                          int64_t dim) override {
    Scope s(*this, "embedding_backward");
    k_.embedding_backward(dtable, tokens, dx, n, dim);
  }
  void axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) override {
    Scope s(*this, "axpy");
    k_.axpy(y, x, alpha, n);
  }
  void convert(DataPtr dst, ConstDataPtr src, int64_t n) override {
    Scope s(*this, "convert");
    k_.convert(dst, src, n);
  }
  double sum_squares(ConstDataPtr x, int64_t n) override {
    Scope s(*this, "sum_squares");
    return k_.sum_squares(x, n);
  }
  void adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n, double lr,
             double beta1, double beta2, double eps, double weight_decay, int64_t step,
             double grad_scale, DataPtr weight_copy) override {
    Scope s(*this, "adamw");
    k_.adamw(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale,
             weight_copy);
  }

 protected:
  struct Scope {
    Scope(ForwardingKernels& f, const char* name) : f_(f) { f_.enter(name); }
    ~Scope() { f_.leave(); }
    ForwardingKernels& f_;
  };
  Kernels& k_;
};

// A backend over another one's memory with `kernels` (a ForwardingKernels over the inner one's,
// usually) and a hook around every memory operation that touches contents.
class ForwardingBackend : public Backend {
 public:
  ForwardingBackend(Backend& inner, Kernels& kernels) : b_(inner), k_(kernels) {}
  virtual void enter(const char* name) {}
  virtual void leave() {}

  Device device() const override { return b_.device(); }
  std::string name() const override { return "forwarding(" + b_.name() + ")"; }
  Kernels& kernels() override { return k_; }
  void* allocate(int64_t bytes) override { return b_.allocate(bytes); }
  void deallocate(void* p) override { b_.deallocate(p); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    Scope s(*this, "copy");
    b_.copy(dst, src, bytes);
  }
  void upload(void* dst, const void* host_src, int64_t bytes) override {
    Scope s(*this, "upload");
    b_.upload(dst, host_src, bytes);
  }
  void download(void* host_dst, const void* src, int64_t bytes) override {
    Scope s(*this, "download");
    b_.download(host_dst, src, bytes);
  }
  void zero(void* p, int64_t bytes) override {
    Scope s(*this, "zero");
    b_.zero(p, bytes);
  }
  void synchronize() override { b_.synchronize(); }
  MemoryStats memory_stats() const override { return b_.memory_stats(); }
  void reset_peak() override { b_.reset_peak(); }

 protected:
  struct Scope {
    Scope(ForwardingBackend& f, const char* name) : f_(f) { f_.enter(name); }
    ~Scope() { f_.leave(); }
    ForwardingBackend& f_;
  };
  Backend& b_;
  Kernels& k_;
};

}  // namespace hp::test
