// The math the model needs, as one interface per backend: reference (plain loops, any number type),
// cpu (OpenBLAS + our SIMD attention), later cuda. Pointers are that backend's memory. All matrices
// are row-major with explicit leading dimensions, tokens along rows ("token-major").
// Implementations must not allocate per call in steady state (keep scratch inside the object).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dtype.h"

namespace hp {

// Attention over a micro-batch of `batch` sequences of `seq` tokens, rows t = b*seq + i.
// q row t holds heads*head_dim values; k and v rows hold kv_heads*head_dim values (GQA: query head
// j reads key/value head j / (heads / kv_heads)). Causal: position i attends to 0..i.
struct AttnShape {
  int64_t batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 1;
  int64_t ld_qkv = 0;  // row stride of q, k, v (all three live in one QKV row in our model)
  int64_t ld_o = 0;    // row stride of o / do
};

// The typed interface being retired: every backend moves to Kernels below (one element type per
// pointer, chosen by a Precision), and this template goes with the last caller.
template <typename T>
class KernelsT {
 public:
  virtual ~KernelsT() = default;
  virtual std::string name() const = 0;

  // C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is M x K, op(B) is K x N.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                    int64_t ldc) = 0;

  // y[r,:] = x[r,:] * rstd[r] * g, rstd[r] = 1/sqrt(mean(x[r,:]^2) + eps). rows x dim.
  virtual void rmsnorm_forward(T* y, T* rstd, const T* x, const T* g, int64_t rows, int64_t dim,
                               double eps) = 0;
  // dx (= or += when accumulate) from dy; dg += sum over rows of dy * x * rstd.
  virtual void rmsnorm_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd,
                                int64_t rows, int64_t dim, bool accumulate) = 0;

  // Rotary positions, Hugging Face Llama convention (rotate_half: pairs (j, j + head_dim/2),
  // inv_freq_j = theta^(-2j/head_dim)), applied in place to the first n_heads*head_dim values of
  // each of `rows` rows (row stride ld); the position of row t is t mod seq.
  // inverse = true rotates by the negative angle (this is the backward).
  virtual void rope(T* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads,
                    int64_t head_dim, double theta, bool inverse) = 0;

  // o (rows x heads*head_dim, stride ld_o) and lse (batch, heads, seq) from q, k, v.
  virtual void attention_forward(const AttnShape& s, const T* q, const T* k, const T* v, T* o,
                                 float* lse) = 0;
  // dq, dk, dv (overwritten, stride ld_qkv) from do (stride ld_o), using o and lse of the forward.
  virtual void attention_backward(const AttnShape& s, const T* q, const T* k, const T* v,
                                  const T* o, const T* dout, const float* lse, T* dq, T* dk,
                                  T* dv) = 0;

  // h = silu(g) * u, elementwise over n.
  virtual void swiglu_forward(T* h, const T* g, const T* u, int64_t n) = 0;
  // dg, du (overwritten) from dh.
  virtual void swiglu_backward(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t n) = 0;

  // Cross-entropy over `rows` rows of logits (stride ld >= vocab): lse[r] = logsumexp(logits[r,:]);
  // returns the sum over rows of lse[r] - logits[r, target[r]].
  virtual double cross_entropy_forward(const T* logits, int64_t ld, const int32_t* targets,
                                       int64_t rows, int64_t vocab, float* lse) = 0;
  // dlogits[r,:] = (softmax(logits[r,:]) - onehot(target[r])) * scale; may alias logits.
  virtual void cross_entropy_backward(T* dlogits, const T* logits, int64_t ld, const float* lse,
                                      const int32_t* targets, int64_t rows, int64_t vocab,
                                      T scale) = 0;

  // x[t,:] = table[tokens[t],:]; dtable[tokens[t],:] += dx[t,:] (in token order: deterministic).
  virtual void embedding_forward(T* x, const int32_t* tokens, const T* table, int64_t n,
                                 int64_t dim) = 0;
  virtual void embedding_backward(T* dtable, const int32_t* tokens, const T* dx, int64_t n,
                                  int64_t dim) = 0;

  // y += alpha * x
  virtual void axpy(T* y, const T* x, T alpha, int64_t n) = 0;
  // sum of squares, accumulated in double
  virtual double sum_squares(const T* x, int64_t n) = 0;
  // AdamW with decoupled weight decay and bias correction; step counts from 1.
  virtual void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1,
                     double beta2, double eps, double weight_decay, int64_t step) = 0;
};


// The math the model needs, once per backend, over typed pointers (dtype.h). Which type each
// argument has follows the Precision the caller runs under; the comments name the role:
//   (compute) activations and their gradients, and the weight copies read by GEMMs and norms;
//   (master)  parameter gradients, master weights, optimizer moments;
//   (stats)   per-row statistics; (tokens) int32 token ids. All pointers are this backend's memory.
// A backend throws hp::Error for a type combination it does not support (supports() tells first).
// Calls are ordered as issued (a device backend queues them on its stream); none of them waits for
// the device except sum_squares, which returns its value to the host.
// Implementations must not allocate per call in steady state (keep scratch inside the object).
class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual std::string name() const = 0;
  // True when every kernel below runs with this precision's types.
  virtual bool supports(const Precision& p) const = 0;

  // C[M,N] = alpha * op(A) op(B) + beta * C; op(A) is M x K, op(B) is K x N. A and B have one
  // type; C has that type or f32 (bf16 inputs into an f32 C: parameter gradients accumulating in
  // fp32). Products accumulate in f32 at least (f64 for f64). beta == 0: C is not read.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                    ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb, double beta,
                    DataPtr C, int64_t ldc) = 0;

  // y (compute) = x * rstd[r] * g, rstd (stats) = 1/sqrt(mean(x^2) + eps); x, g (compute).
  virtual void rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g,
                               int64_t rows, int64_t dim, double eps) = 0;
  // dx (compute; = or += with accumulate) from dy (compute); dg (master) += sum over rows of
  // dy * x * rstd.
  virtual void rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x,
                                ConstDataPtr g, ConstDataPtr rstd, int64_t rows, int64_t dim,
                                bool accumulate) = 0;

  // Rotary positions in place (compute), as KernelsT::rope documents; angles from rope_angles.h.
  virtual void rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads,
                    int64_t head_dim, double theta, bool inverse) = 0;

  // Causal GQA attention: o (compute) and lse (stats; batch, heads, seq) from q, k, v (compute).
  virtual void attention_forward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                 ConstDataPtr v, DataPtr o, DataPtr lse) = 0;
  // dq, dk, dv (compute, overwritten, stride ld_qkv) from dout, using o and lse of the forward.
  virtual void attention_backward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                  ConstDataPtr v, ConstDataPtr o, ConstDataPtr dout,
                                  ConstDataPtr lse, DataPtr dq, DataPtr dk, DataPtr dv) = 0;

  // h = silu(g) * u and its backward, elementwise over n (compute).
  virtual void swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) = 0;
  virtual void swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g,
                               ConstDataPtr u, int64_t n) = 0;

  // Over `rows` rows of logits (compute or f32, stride ld >= vocab): lse[r] (stats) =
  // logsumexp(logits[r,:]); loss_sum (one f64) += sum over rows of lse[r] - logits[r, target[r]],
  // the rows summed in f64 in row order.
  virtual void cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                     int64_t rows, int64_t vocab, DataPtr lse,
                                     DataPtr loss_sum) = 0;
  // dlogits (compute) = (softmax(logits) - onehot(target)) * scale; may alias logits when the two
  // have one type.
  virtual void cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                      ConstDataPtr lse, const int32_t* targets, int64_t rows,
                                      int64_t vocab, double scale) = 0;

  // x[t,:] (compute) = table[tokens[t],:] (compute); dtable (master) [tokens[t],:] += dx[t,:]
  // (compute), deterministic: the result does not depend on thread timing.
  virtual void embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                                 int64_t dim) = 0;
  virtual void embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                  int64_t n, int64_t dim) = 0;

  // y += alpha * x (one type).
  virtual void axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) = 0;
  // dst = src for n elements of any two types (into bf16: round to nearest even).
  virtual void convert(DataPtr dst, ConstDataPtr src, int64_t n) = 0;
  // Sum of squares accumulated in f64, returned to the host (waits for the device).
  virtual double sum_squares(ConstDataPtr x, int64_t n) = 0;
  // One AdamW update (decoupled weight decay, bias correction; step counts from 1) of n master
  // elements, the gradient multiplied by grad_scale first, arithmetic in f32 at least. When
  // weight_copy is set, it receives the updated parameters in its own (compute) type.
  virtual void adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n, double lr,
                     double beta1, double beta2, double eps, double weight_decay, int64_t step,
                     double grad_scale, DataPtr weight_copy) = 0;
};

// The plain-loop backend (any T; double is used by gradient checks).
template <typename T>
std::unique_ptr<KernelsT<T>> make_reference_kernels();

// The fast CPU backend. threads <= 0: one thread per core (OMP_NUM_THREADS if set).
std::unique_ptr<KernelsT<float>> make_cpu_kernels(int threads = 0);

}  // namespace hp
