// The reference math: every kernel of kernels.h as plain loops over one number type T (float for
// comparisons, double for finite-difference gradient checks), typed, so tests call it directly.
// Obviously correct beats fast here; the attention is the textbook softmax(q k^T / sqrt(d)) v, one
// query row at a time. Statistics (rstd, lse) are T as well. The reference backend
// (reference_kernels.cc) runs f32 and f64 through this and bf16 through ReferenceMath<float>.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/rope_angles.h"
#include "util/error.h"

namespace hp {

template <typename T>
class ReferenceMath {
 public:
  // C[M,N] = alpha * op(A) op(B) + beta * C, accumulated in T. beta == 0 means C is not read
  // (BLAS convention), so C may hold garbage.
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
            int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        T acc = 0;
        for (int64_t p = 0; p < K; ++p) {
          const T a = trans_a ? A[p * lda + i] : A[i * lda + p];
          const T b = trans_b ? B[j * ldb + p] : B[p * ldb + j];
          acc += a * b;
        }
        T& c = C[i * ldc + j];
        c = (beta == T(0)) ? alpha * acc : alpha * acc + beta * c;
      }
    }
  }

  void rmsnorm_forward(T* y, T* rstd, const T* x, const T* g, int64_t rows, int64_t dim,
                       double eps) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim;
      T ss = 0;
      for (int64_t k = 0; k < dim; ++k) ss += xr[k] * xr[k];
      const T rs = T(1) / std::sqrt(ss / T(dim) + T(eps));
      rstd[r] = rs;
      for (int64_t k = 0; k < dim; ++k) y[r * dim + k] = xr[k] * rs * g[k];
    }
  }

  // With y_k = x_k r g_k and r = (mean(x^2) + eps)^-1/2:
  // dx_k = r g_k dy_k - x_k r^3 / dim * sum_j dy_j g_j x_j.
  void rmsnorm_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd,
                        int64_t rows, int64_t dim, bool accumulate) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim;
      const T* dyr = dy + r * dim;
      const T rs = rstd[r];
      T dot = 0;
      for (int64_t k = 0; k < dim; ++k) dot += dyr[k] * g[k] * xr[k];
      const T c = rs * rs * rs * dot / T(dim);
      for (int64_t k = 0; k < dim; ++k) {
        const T v = rs * g[k] * dyr[k] - xr[k] * c;
        dx[r * dim + k] = accumulate ? dx[r * dim + k] + v : v;
        dg[k] += dyr[k] * xr[k] * rs;
      }
    }
  }

  void rope(T* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) {
    HP_CHECK(head_dim % 2 == 0, "rope: head_dim {} must be even", head_dim);
    const int64_t half = head_dim / 2;
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t pos = t % seq;
      for (int64_t h = 0; h < n_heads; ++h) {
        T* xh = x + t * ld + h * head_dim;
        for (int64_t j = 0; j < half; ++j) {
          float c, s;
          rope_cos_sin(pos, j, head_dim, theta, &c, &s);
          const T sn = inverse ? -T(s) : T(s);
          const T a = xh[j], b = xh[j + half];
          xh[j] = a * T(c) - b * sn;
          xh[j + half] = b * T(c) + a * sn;
        }
      }
    }
  }

  // o and lse (batch, heads, seq) from q, k, v.
  void attention_forward(const AttnShape& s, const T* q, const T* k, const T* v, T* o, T* lse) {
    check_shape(s);
    const int64_t group = s.heads / s.kv_heads, d = s.head_dim;
    const T scale = T(1) / std::sqrt(T(d));
    std::vector<T>& p = row_;
    p.resize(static_cast<size_t>(s.seq));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kh = h / group;
        for (int64_t i = 0; i < s.seq; ++i) {
          const T* qi = q + (b * s.seq + i) * s.ld_qkv + h * d;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j <= i; ++j) {
            const T* kj = k + (b * s.seq + j) * s.ld_qkv + kh * d;
            T dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
            p[j] = dot * scale;
            mx = std::max(mx, p[j]);
          }
          T sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          T* oi = o + (b * s.seq + i) * s.ld_o + h * d;
          for (int64_t c = 0; c < d; ++c) {
            T acc = 0;
            for (int64_t j = 0; j <= i; ++j) acc += p[j] * v[(b * s.seq + j) * s.ld_qkv + kh * d + c];
            oi[c] = acc / sum;
          }
          lse[(b * s.heads + h) * s.seq + i] = mx + std::log(sum);
        }
      }
    }
  }

  // Recomputes the softmax instead of reading lse (an independent check of the forward's). With p = softmax(scale q.k): dv_j += p_j do, dp_j = do.v_j,
  // ds_j = p_j (dp_j - do.o), dq += scale ds_j k_j, dk_j += scale ds_j q.
  void attention_backward(const AttnShape& s, const T* q, const T* k, const T* v, const T* o,
                          const T* dout, const T* lse, T* dq, T* dk, T* dv) {
    check_shape(s);
    const int64_t group = s.heads / s.kv_heads, d = s.head_dim;
    const T scale = T(1) / std::sqrt(T(d));
    for (int64_t t = 0; t < s.batch * s.seq; ++t) {
      for (int64_t c = 0; c < s.heads * d; ++c) dq[t * s.ld_qkv + c] = 0;
      for (int64_t c = 0; c < s.kv_heads * d; ++c) dk[t * s.ld_qkv + c] = dv[t * s.ld_qkv + c] = 0;
    }
    std::vector<T>& p = row_;
    p.resize(static_cast<size_t>(s.seq));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kh = h / group;
        for (int64_t i = 0; i < s.seq; ++i) {
          const T* qi = q + (b * s.seq + i) * s.ld_qkv + h * d;
          const T* oi = o + (b * s.seq + i) * s.ld_o + h * d;
          const T* doi = dout + (b * s.seq + i) * s.ld_o + h * d;
          T* dqi = dq + (b * s.seq + i) * s.ld_qkv + h * d;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j <= i; ++j) {
            const T* kj = k + (b * s.seq + j) * s.ld_qkv + kh * d;
            T dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
            p[j] = dot * scale;
            mx = std::max(mx, p[j]);
          }
          T sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          T delta = 0;  // do . o
          for (int64_t c = 0; c < d; ++c) delta += doi[c] * oi[c];
          for (int64_t j = 0; j <= i; ++j) {
            const T pj = p[j] / sum;
            const T* kj = k + (b * s.seq + j) * s.ld_qkv + kh * d;
            const T* vj = v + (b * s.seq + j) * s.ld_qkv + kh * d;
            T* dkj = dk + (b * s.seq + j) * s.ld_qkv + kh * d;
            T* dvj = dv + (b * s.seq + j) * s.ld_qkv + kh * d;
            T dp = 0;
            for (int64_t c = 0; c < d; ++c) dp += doi[c] * vj[c];
            const T ds = pj * (dp - delta) * scale;
            for (int64_t c = 0; c < d; ++c) {
              dvj[c] += pj * doi[c];
              dqi[c] += ds * kj[c];
              dkj[c] += ds * qi[c];
            }
          }
        }
      }
    }
  }

  void swiglu_forward(T* h, const T* g, const T* u, int64_t n) {
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
  }

  // silu'(g) = sig(g) (1 + g (1 - sig(g))).
  void swiglu_backward(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const T sig = T(1) / (T(1) + std::exp(-g[i]));
      const T gi = g[i], ui = u[i], dhi = dh[i];
      du[i] = dhi * gi * sig;
      dg[i] = dhi * ui * sig * (T(1) + gi * (T(1) - sig));
    }
  }

  // lse[r] = logsumexp(logits[r,:]); returns the sum over rows (in row order, in double) of
  // lse[r] - logits[r, target[r]].
  double cross_entropy_forward(const T* logits, int64_t ld, const int32_t* targets, int64_t rows,
                               int64_t vocab, T* lse) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      check_target(targets[r], vocab, r);
      const T l = row_lse(logits + r * ld, vocab);
      lse[r] = l;
      total += static_cast<double>(l - logits[r * ld + targets[r]]);
    }
    return total;
  }

  // Recomputes the row log-sum-exp (see attention_backward for why). dlogits may alias logits.
  void cross_entropy_backward(T* dlogits, const T* logits, int64_t ld, const T* lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              T scale) {
    for (int64_t r = 0; r < rows; ++r) {
      check_target(targets[r], vocab, r);
      const T l = row_lse(logits + r * ld, vocab);
      for (int64_t c = 0; c < vocab; ++c) {
        const T pc = std::exp(logits[r * ld + c] - l);
        dlogits[r * ld + c] = (pc - (c == targets[r] ? T(1) : T(0))) * scale;
      }
    }
  }

  // Vocabulary-parallel cross-entropy (Kernels::vocab_cross_entropy_*).
  void vocab_cross_entropy_stats(const T* logits, int64_t ld, const int32_t* targets, VocabSlice v,
                                 int64_t rows, T* parts) {
    for (int64_t r = 0; r < rows; ++r) {
      check_target(targets[r], v.total, r);
      parts[r] = row_lse(logits + r * ld, v.count);
      parts[rows + r] = v.holds(targets[r]) ? logits[r * ld + targets[r] - v.begin] : T(0);
    }
  }
  // Returns the sum over rows of lse[r] - the target's logit (in row order, in double).
  static double vocab_cross_entropy_combine(const T* parts, int64_t nparts, int64_t rows, T* lse) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -std::numeric_limits<double>::infinity(), target = 0;
      for (int64_t p = 0; p < nparts; ++p) mx = std::max(mx, static_cast<double>(parts[p * 2 * rows + r]));
      double sum = 0;
      for (int64_t p = 0; p < nparts; ++p) {
        sum += std::exp(static_cast<double>(parts[p * 2 * rows + r]) - mx);
        target += static_cast<double>(parts[p * 2 * rows + rows + r]);
      }
      lse[r] = static_cast<T>(mx + std::log(sum));
      total += static_cast<double>(lse[r]) - target;
    }
    return total;
  }
  void vocab_cross_entropy_backward(T* dlogits, const T* logits, int64_t ld, const T* lse,
                                    const int32_t* targets, VocabSlice v, int64_t rows, T scale) {
    for (int64_t r = 0; r < rows; ++r) {
      check_target(targets[r], v.total, r);
      for (int64_t c = 0; c < v.count; ++c) {
        const T pc = std::exp(logits[r * ld + c] - lse[r]);
        dlogits[r * ld + c] = (pc - (c + v.begin == targets[r] ? T(1) : T(0))) * scale;
      }
    }
  }
  void vocab_embedding_forward(T* x, const int32_t* tokens, const T* table, VocabSlice v, int64_t n,
                               int64_t dim) {
    for (int64_t t = 0; t < n; ++t) {
      check_token(tokens[t], v.total, t);
      const bool mine = v.holds(tokens[t]);
      for (int64_t c = 0; c < dim; ++c)
        x[t * dim + c] = mine ? table[(tokens[t] - v.begin) * dim + c] : T(0);
    }
  }
  void vocab_embedding_backward(T* dtable, const int32_t* tokens, const T* dx, VocabSlice v,
                                int64_t n, int64_t dim) {
    for (int64_t t = 0; t < n; ++t) {
      check_token(tokens[t], v.total, t);
      if (!v.holds(tokens[t])) continue;
      for (int64_t c = 0; c < dim; ++c) dtable[(tokens[t] - v.begin) * dim + c] += dx[t * dim + c];
    }
  }

  void embedding_forward(T* x, const int32_t* tokens, const T* table, int64_t n,
                         int64_t dim) {
    for (int64_t t = 0; t < n; ++t) {
      HP_CHECK(tokens[t] >= 0, "embedding: token {} at position {} is negative", tokens[t], t);
      for (int64_t c = 0; c < dim; ++c) x[t * dim + c] = table[tokens[t] * dim + c];
    }
  }

  void embedding_backward(T* dtable, const int32_t* tokens, const T* dx, int64_t n,
                          int64_t dim) {
    for (int64_t t = 0; t < n; ++t) {
      HP_CHECK(tokens[t] >= 0, "embedding: token {} at position {} is negative", tokens[t], t);
      for (int64_t c = 0; c < dim; ++c) dtable[tokens[t] * dim + c] += dx[t * dim + c];
    }
  }

  void axpy(T* y, const T* x, T alpha, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  double sum_squares(const T* x, int64_t n) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return acc;
  }

  // One AdamW update, arithmetic in double whatever T is, in PyTorch's order: decay the weight,
  // then the bias-corrected Adam step. The gradient is multiplied by grad_scale first.
  void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1,
             double beta2, double eps, double weight_decay, int64_t step, double grad_scale) {
    HP_CHECK(step >= 1, "adamw: step {} must count from 1", step);
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    const double shrink = 1.0 - lr * weight_decay;
    const double step_size = lr / bc1, inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
    for (int64_t i = 0; i < n; ++i) {
      const double g = static_cast<double>(grad[i]) * grad_scale;
      const double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
      const double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
      m[i] = static_cast<T>(mi);
      v[i] = static_cast<T>(vi);
      const double denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
      param[i] = static_cast<T>(static_cast<double>(param[i]) * shrink - step_size * mi / denom);
    }
  }

 private:
  static void check_shape(const AttnShape& s) {
    HP_CHECK(s.batch >= 1 && s.seq >= 1 && s.head_dim >= 1 && s.kv_heads >= 1 &&
                 s.heads % s.kv_heads == 0,
             "attention: bad shape batch={} seq={} heads={} kv_heads={} head_dim={} (heads must "
             "be a multiple of kv_heads)",
             s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
    HP_CHECK(s.ld_qkv >= s.heads * s.head_dim && s.ld_o >= s.heads * s.head_dim,
             "attention: strides ld_qkv={} ld_o={} are smaller than heads*head_dim={}", s.ld_qkv,
             s.ld_o, s.heads * s.head_dim);
  }
  static void check_target(int32_t t, int64_t vocab, int64_t r) {
    HP_CHECK(t >= 0 && t < vocab, "cross_entropy: target {} of row {} is outside [0, {})", t, r,
             vocab);
  }
  static void check_token(int32_t t, int64_t vocab, int64_t i) {
    HP_CHECK(t >= 0 && t < vocab, "embedding: token {} at position {} is outside [0, {})", t, i,
             vocab);
  }
  static T row_lse(const T* x, int64_t vocab) {
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < vocab; ++c) mx = std::max(mx, x[c]);
    T sum = 0;
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(x[c] - mx);
    return mx + std::log(sum);
  }

  std::vector<T> row_;  // attention's probabilities of one query row (grows to seq)
};

}  // namespace hp
