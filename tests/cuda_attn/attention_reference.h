// Test helpers shared by the CUDA attention test (tests/cuda_attn) and the CPU emulation of its
// kernels (tests/cuda_emu): random problems laid out as the model lays them out (q, k, v slices
// of one QKV row, NaN in the padding), the double-precision reference (the reference backend run
// per (batch, head) on threads), and the checks of a call's outputs against it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference_math.h"

namespace hp::attn_test {

// One problem: rows t = b * seq + i; qkv rows hold [q (heads * d) | k (kv * d) | v (kv * d) |
// padding] with stride ld_qkv; dout rows [heads * d | padding] with stride ld_o. Padding is NaN,
// so a kernel reading outside its slices poisons its results. Values are rounded to bf16 when the
// problem is for bf16 (the reference then sees exactly the device's inputs).
struct Problem {
  AttnShape s;
  bool bf16 = false;
  std::vector<float> qkv, dout;

  int64_t rows() const { return s.batch * s.seq; }
  int64_t q_off() const { return 0; }
  int64_t k_off() const { return s.heads * s.head_dim; }
  int64_t v_off() const { return (s.heads + s.kv_heads) * s.head_dim; }
};

inline AttnShape make_shape(int64_t batch, int64_t seq, int64_t heads, int64_t kv, int64_t d,
                            int64_t qkv_pad, int64_t o_pad) {
  AttnShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = d;
  s.ld_qkv = (heads + 2 * kv) * d + qkv_pad;
  s.ld_o = heads * d + o_pad;
  return s;
}

inline float round_bf16(float x) { return to_float(to_bf16(x)); }

// q entries ~ N(0, q_scale^2), k, v, dout ~ N(0, 1).
inline Problem make_problem(const AttnShape& s, bool bf16, uint32_t seed, float q_scale = 1.0f) {
  Problem p;
  p.s = s;
  p.bf16 = bf16;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.qkv.assign(s.batch * s.seq * s.ld_qkv, nan);
  p.dout.assign(s.batch * s.seq * s.ld_o, nan);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto draw = [&](float scale) {
    const float x = dist(gen) * scale;
    return bf16 ? round_bf16(x) : x;
  };
  const int64_t width = (s.heads + 2 * s.kv_heads) * s.head_dim;
  for (int64_t t = 0; t < p.rows(); ++t) {
    for (int64_t c = 0; c < width; ++c) p.qkv[t * s.ld_qkv + c] = draw(c < p.k_off() ? q_scale : 1);
    for (int64_t c = 0; c < s.heads * s.head_dim; ++c) p.dout[t * s.ld_o + c] = draw(1);
  }
  return p;
}

// Reference results, compact: o and dq [rows][heads * d], dk and dv [rows][kv * d], lse
// [batch][heads][seq].
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

// The reference backend in double, one (batch, head) per task on all cores; dK and dV of a kv
// head are summed over its query heads afterwards.
inline Reference reference(const Problem& pb) {
  const AttnShape& s = pb.s;
  const int64_t d = s.head_dim, n = s.seq, group = s.heads / s.kv_heads;
  Reference r;
  r.o.assign(pb.rows() * s.heads * d, 0);
  r.dq.assign(pb.rows() * s.heads * d, 0);
  r.dk.assign(pb.rows() * s.kv_heads * d, 0);
  r.dv.assign(pb.rows() * s.kv_heads * d, 0);
  r.lse.assign(s.batch * s.heads * n, 0);
  const int64_t tasks = s.batch * s.heads;
  std::vector<std::vector<double>> dk_part(tasks), dv_part(tasks);
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    ReferenceMath<double> ref;
    AttnShape one = s;
    one.batch = 1;
    one.heads = one.kv_heads = 1;
    one.ld_qkv = one.ld_o = d;
    std::vector<double> q(n * d), k(n * d), v(n * d), dout(n * d), o(n * d), dq(n * d);
    std::vector<double> lse(n);
    for (int64_t task; (task = next++) < tasks;) {
      const int64_t b = task / s.heads, h = task % s.heads, kh = h / group;
      for (int64_t i = 0; i < n; ++i) {
        const float* row = pb.qkv.data() + (b * n + i) * s.ld_qkv;
        const float* drow = pb.dout.data() + (b * n + i) * s.ld_o;
        for (int64_t c = 0; c < d; ++c) {
          q[i * d + c] = row[pb.q_off() + h * d + c];
          k[i * d + c] = row[pb.k_off() + kh * d + c];
          v[i * d + c] = row[pb.v_off() + kh * d + c];
          dout[i * d + c] = drow[h * d + c];
        }
      }
      ref.attention_forward(one, q.data(), k.data(), v.data(), o.data(), lse.data());
      auto& dk = dk_part[task];
      auto& dv = dv_part[task];
      dk.assign(n * d, 0);
      dv.assign(n * d, 0);
      ref.attention_backward(one, q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(),
                             dq.data(), dk.data(), dv.data());
      for (int64_t i = 0; i < n; ++i) {
        r.lse[(b * s.heads + h) * n + i] = lse[i];
        for (int64_t c = 0; c < d; ++c) {
          r.o[((b * n + i) * s.heads + h) * d + c] = o[i * d + c];
          r.dq[((b * n + i) * s.heads + h) * d + c] = dq[i * d + c];
        }
      }
    }
  };
  const int64_t nthreads =
      std::max<int64_t>(1, std::min<int64_t>(tasks, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < nthreads; ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / s.heads, kh = (task % s.heads) / group;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) {
        r.dk[((b * n + i) * s.kv_heads + kh) * d + c] += dk_part[task][i * d + c];
        r.dv[((b * n + i) * s.kv_heads + kh) * d + c] += dv_part[task][i * d + c];
      }
  }
  return r;
}

// The same results by the textbook formulas in double, parallel over (batch, head) and chunks of
// query rows, with contiguous rows: for long sequences, where the reference backend (strided
// loops, one thread per head) takes minutes. Checked against reference() by
// CudaAttention.FastReferenceMatchesReferenceBackend. Per query row i (p = softmax(scale q_i.k)):
// o_i = sum p_j v_j, D_i = do_i.o_i, ds_j = p_j (do_i.v_j - D_i), dq_i = scale sum ds_j k_j,
// dk_j += scale ds_j q_i, dv_j += p_j do_i.
inline Reference fast_reference(const Problem& pb) {
  const AttnShape& s = pb.s;
  const int64_t d = s.head_dim, n = s.seq, group = s.heads / s.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Reference r;
  r.o.assign(pb.rows() * s.heads * d, 0);
  r.dq.assign(pb.rows() * s.heads * d, 0);
  r.dk.assign(pb.rows() * s.kv_heads * d, 0);
  r.dv.assign(pb.rows() * s.kv_heads * d, 0);
  r.lse.assign(s.batch * s.heads * n, 0);
  const int64_t heads = s.batch * s.heads;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  // Chunks of rows of about equal work (row i costs i + 1): boundaries at n * sqrt(c / chunks).
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(n, (cores + heads - 1) / heads));
  std::vector<int64_t> bounds(chunks + 1);
  for (int64_t c = 0; c <= chunks; ++c)
    bounds[c] = static_cast<int64_t>(std::llround(n * std::sqrt(double(c) / double(chunks))));
  const int64_t tasks = heads * chunks;
  std::vector<std::vector<double>> dk_part(tasks), dv_part(tasks);
  auto column = [&](const std::vector<float>& src, int64_t ld, int64_t b, int64_t off) {
    std::vector<double> out(n * d);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) out[i * d + c] = src[(b * n + i) * ld + off + c];
    return out;
  };
  auto dot = [d](const double* a, const double* b) {
    double acc[4] = {0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 4 <= d; c += 4)
      for (int u = 0; u < 4; ++u) acc[u] += a[c + u] * b[c + u];
    for (; c < d; ++c) acc[0] += a[c] * b[c];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  };
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    std::vector<double> p(n), o(d);
    for (int64_t task; (task = next++) < tasks;) {
      const int64_t bh = task / chunks, chunk = task % chunks;
      const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / group;
      const std::vector<double> q = column(pb.qkv, s.ld_qkv, b, pb.q_off() + h * d);
      const std::vector<double> k = column(pb.qkv, s.ld_qkv, b, pb.k_off() + kh * d);
      const std::vector<double> v = column(pb.qkv, s.ld_qkv, b, pb.v_off() + kh * d);
      const std::vector<double> dout = column(pb.dout, s.ld_o, b, h * d);
      const int64_t i0 = bounds[chunk], i1 = bounds[chunk + 1];
      std::vector<double>& dk = dk_part[task];
      std::vector<double>& dv = dv_part[task];
      dk.assign(i1 * d, 0);  // keys < i1 only
      dv.assign(i1 * d, 0);
      for (int64_t i = i0; i < i1; ++i) {
        const double* qi = &q[i * d];
        const double* doi = &dout[i * d];
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, p[j] = dot(qi, &k[j * d]) * scale);
        for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          for (int64_t c = 0; c < d; ++c) o[c] += p[j] * v[j * d + c];
        }
        const double delta = dot(doi, o.data());
        double* dqi = &r.dq[((b * n + i) * s.heads + h) * d];
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dot(doi, &v[j * d]) - delta) * scale;
          for (int64_t c = 0; c < d; ++c) {
            dqi[c] += ds * k[j * d + c];
            dk[j * d + c] += ds * qi[c];
            dv[j * d + c] += p[j] * doi[c];
          }
        }
        for (int64_t c = 0; c < d; ++c) r.o[((b * n + i) * s.heads + h) * d + c] = o[c];
        r.lse[bh * n + i] = mx + std::log(sum);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < std::min(cores, tasks); ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t bh = task / chunks, b = bh / s.heads, kh = (bh % s.heads) / group;
    for (int64_t j = 0; j < static_cast<int64_t>(dk_part[task].size()) / d; ++j)
      for (int64_t c = 0; c < d; ++c) {
        r.dk[((b * n + j) * s.kv_heads + kh) * d + c] += dk_part[task][j * d + c];
        r.dv[((b * n + j) * s.kv_heads + kh) * d + c] += dv_part[task][j * d + c];
      }
  }
  return r;
}

// ||got - ref||_2 / ||ref||_2 over a strided slice: rows x width values, got at
// got[t * ld + off + c], ref compact. When ref is exactly zero (dq and dk at seq = 1: the only
// query attends only to itself, so dS = 0), the RMS of got instead. NaN anywhere gives NaN.
inline double normwise(const std::vector<float>& got, int64_t ld, int64_t off,
                       const std::vector<double>& ref, int64_t rows, int64_t width) {
  double num = 0, den = 0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < width; ++c) {
      const double g = got[t * ld + off + c], x = ref[t * width + c];
      num += (g - x) * (g - x);
      den += x * x;
    }
  return std::sqrt(num / (den > 0 ? den : static_cast<double>(rows * width)));
}
inline double normwise(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : static_cast<double>(ref.size())));
}

// Number of values in the slice that are not finite (a kernel that skipped them leaves the NaN
// the test poisoned them with).
inline int64_t count_nonfinite(const std::vector<float>& got, int64_t ld, int64_t off, int64_t rows,
                               int64_t width) {
  int64_t bad = 0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < width; ++c) bad += !std::isfinite(got[t * ld + off + c]);
  return bad;
}

// max |lse - ref|.
inline double lse_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(static_cast<double>(got[i]) - ref[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// Device storage of float values: bf16 bits (rounding to nearest even) or f32.
inline std::vector<uint16_t> bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]).bits;
  return out;
}
inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_float(bf16{x[i]});
  return out;
}

// Normwise bound on o, dq, dk, dv and absolute bound on lse.
struct Tolerance {
  double rel = 0, lse = 0;
};

// The outputs of one forward (o with stride ld_o, lse) and backward (dq, dk, dv as slices of one
// row of stride ld_qkv laid out like pb.qkv), as floats: every value written, nothing written into
// the padding (still NaN), and within tol of the reference. Prints the errors.
inline void expect_matches(const Problem& pb, const Reference& ref, const std::vector<float>& o,
                           const std::vector<float>& lse, const std::vector<float>& dqkv,
                           Tolerance tol) {
  const AttnShape& s = pb.s;
  const int64_t rows = pb.rows(), hd = s.heads * s.head_dim, kd = s.kv_heads * s.head_dim;
  const int64_t o_pad = s.ld_o - hd, qkv_pad = s.ld_qkv - hd - 2 * kd;
  EXPECT_EQ(count_nonfinite(o, s.ld_o, 0, rows, hd), 0) << "o values not written";
  EXPECT_EQ(count_nonfinite(dqkv, s.ld_qkv, 0, rows, hd + 2 * kd), 0) << "dq/dk/dv not written";
  EXPECT_EQ(count_nonfinite(o, s.ld_o, hd, rows, o_pad), rows * o_pad) << "o padding written";
  EXPECT_EQ(count_nonfinite(dqkv, s.ld_qkv, hd + 2 * kd, rows, qkv_pad), rows * qkv_pad)
      << "dqkv padding written";
  const double e_lse = lse_err(lse, ref.lse), e_o = normwise(o, s.ld_o, 0, ref.o, rows, hd);
  const double e_dq = normwise(dqkv, s.ld_qkv, pb.q_off(), ref.dq, rows, hd);
  const double e_dk = normwise(dqkv, s.ld_qkv, pb.k_off(), ref.dk, rows, kd);
  const double e_dv = normwise(dqkv, s.ld_qkv, pb.v_off(), ref.dv, rows, kd);
  std::printf("  errors: lse %.2e o %.2e dq %.2e dk %.2e dv %.2e\n", e_lse, e_o, e_dq, e_dk, e_dv);
  EXPECT_LE(e_lse, tol.lse);
  EXPECT_LE(e_o, tol.rel);
  EXPECT_LE(e_dq, tol.rel);
  EXPECT_LE(e_dk, tol.rel);
  EXPECT_LE(e_dv, tol.rel);
}

}  // namespace hp::attn_test
