// The math the model needs, as one interface per backend: reference (plain loops), cpu (OpenBLAS +
// our SIMD attention), cuda (kernels/cuda). Pointers are that backend's memory. All matrices
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

// The ids [begin, begin + count) of a vocabulary of `total` ids: the rows of the embedding table
// and of the LM head one rank of a vocabulary-parallel group holds.
struct VocabSlice {
  int64_t begin = 0, count = 0, total = 0;
  static VocabSlice whole(int64_t vocab) { return {0, vocab, vocab}; }
  bool holds(int64_t id) const { return id >= begin && id < begin + count; }
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

  // Rotary positions in place (compute), Hugging Face Llama convention (rotate_half: pairs (j,
  // j + head_dim/2), angles from rope_angles.h), on the first n_heads*head_dim values of each of
  // `rows` rows (row stride ld); the position of row t is t mod seq. inverse = true rotates by the
  // negative angle (the backward).
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
  // logsumexp(logits[r,:]); loss_sum (one f64) += the sum over rows of lse[r] - logits[r,
  // target[r]], formed in f64 in row order from 0 and then added (so a chunked caller gets the bits
  // of summing per-chunk totals in chunk order).
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

  // Vocabulary-parallel forms (docs/tensor-parallel.md): this rank holds the embedding / LM-head
  // rows of the ids in `v` (a VocabSlice of the whole vocabulary); ids are checked against v.total.
  // x[t,:] = table[tokens[t] - v.begin,:] for a token in the slice, zeros otherwise (the group's
  // sum over its slices is the whole lookup); dtable += dx rows of the slice's tokens only, in token
  // order as embedding_backward.
  virtual void vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table,
                                       VocabSlice v, int64_t n, int64_t dim) = 0;
  virtual void vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                        VocabSlice v, int64_t n, int64_t dim) = 0;
  // The cross-entropy of logits split by vocabulary columns, in two steps. Over `rows` rows of this
  // slice's logits (v.count columns, stride ld): parts (stats, 2*rows) = [lse over the slice's
  // columns of each row | logits[r, target[r] - v.begin] when the target is in the slice, else 0].
  virtual void vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                         VocabSlice v, int64_t rows, DataPtr parts) = 0;
  // From `nparts` such blocks one after another (every slice's, gathered in slice order): lse[r]
  // (stats) = the logsumexp over the slices' lse (largest first, then the sum in slice order, in
  // f64); loss_sum (one f64) += the sum over rows, in row order in f64, of lse[r] - the target's
  // logit. The same inputs give the same bits on every rank.
  virtual void vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows,
                                           DataPtr lse, DataPtr loss_sum) = 0;
  // dlogits (compute) = (exp(logits - lse) - onehot(target - v.begin)) * scale over the slice's
  // columns, lse the whole vocabulary's (from vocab_cross_entropy_combine); may alias logits.
  virtual void vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                            ConstDataPtr lse, const int32_t* targets, VocabSlice v,
                                            int64_t rows, double scale) = 0;

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

// The reference kernels (plain loops: f64, f32, and bf16 as float math rounded at each store) and
// the fast CPU kernels (f32; threads <= 0: cpu_threads(0); cpu_kernels.h picks the SIMD path).
std::unique_ptr<Kernels> make_reference_kernels();
std::unique_ptr<Kernels> make_cpu_kernels(int threads = 0);

}  // namespace hp
