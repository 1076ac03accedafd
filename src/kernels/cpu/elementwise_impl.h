// The non-GEMM kernels for one ISA (included by elementwise_avx512.cc and elementwise_avx2.cc; see
// simd.h for the rules) and that ISA's IsaOps table. Each kernel makes one pass over its rows with
// everything a row needs fused into it (RMSNorm: sum of squares, scale and gain; its backward: the
// dot product, dx and the dg partial; cross-entropy: a blockwise log-sum-exp that reads each logit
// once from memory). Work is split into fixed chunks, so results do not depend on scheduling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/isa_decls.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/cpu/simd.h"

namespace hp {
namespace HP_SIMD_NS {
namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per parallel chunk of the flat kernels

// Calls f(begin, end) over [0, n) in chunks of about `chunk` elements.
template <class F>
void chunked(int64_t n, int64_t chunk, int threads, F&& f) {
  const int64_t nc = (n + chunk - 1) / chunk;
  par_for(nc, threads, [&](int64_t c, int) { f(c * chunk, std::min(n, (c + 1) * chunk)); });
}

int64_t rows_per_chunk(int64_t dim) { return std::max<int64_t>(1, kChunk / std::max<int64_t>(dim, 1)); }

void rmsnorm_fwd(float* y, float* rstd, const float* x, const float* g, int64_t rows, int64_t dim,
                 float eps, int threads) {
  chunked(rows, rows_per_chunk(dim), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      int64_t c = 0;
      vf acc = vzero();
      for (; c + kW <= dim; c += kW) acc = vfmadd(vload(xr + c), vload(xr + c), acc);
      float ss = hsum(acc);
      for (; c < dim; ++c) ss += xr[c] * xr[c];
      const float rs = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      rstd[r] = rs;
      const vf vr = vset1(rs);
      for (c = 0; c + kW <= dim; c += kW) vstore(yr + c, vmul(vmul(vload(xr + c), vr), vload(g + c)));
      for (; c < dim; ++c) yr[c] = xr[c] * rs * g[c];
    }
  });
}

// dx = rs g dy - x rs^3/dim sum(dy g x); dg += dy x rs.
void rmsnorm_bwd_rows(float* dx, float* dg, const float* dy, const float* x, const float* g,
                      const float* rstd, int64_t r0, int64_t r1, int64_t dim, bool accumulate) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const float rs = rstd[r];
    int64_t c = 0;
    vf acc = vzero();
    for (; c + kW <= dim; c += kW)
      acc = vfmadd(vmul(vload(dyr + c), vload(g + c)), vload(xr + c), acc);
    float dot = hsum(acc);
    for (; c < dim; ++c) dot += dyr[c] * g[c] * xr[c];
    const float k = rs * rs * rs * dot / static_cast<float>(dim);
    const vf vrs = vset1(rs), vk = vset1(k);
    for (c = 0; c + kW <= dim; c += kW) {
      const vf dyv = vload(dyr + c), xv = vload(xr + c);
      vf v = vfnmadd(xv, vk, vmul(vmul(vrs, vload(g + c)), dyv));
      if (accumulate) v = vadd(vload(dxr + c), v);
      vstore(dxr + c, v);
      vstore(dg + c, vfmadd(vmul(dyv, xv), vrs, vload(dg + c)));
    }
    for (; c < dim; ++c) {
      const float v = rs * g[c] * dyr[c] - xr[c] * k;
      dxr[c] = accumulate ? dxr[c] + v : v;
      dg[c] += dyr[c] * xr[c] * rs;
    }
  }
}

void rmsnorm_bwd(float* dx, float* dg, const float* dy, const float* x, const float* g,
                 const float* rstd, int64_t rows, int64_t dim, bool accumulate, float* scratch,
                 int threads) {
  if (threads <= 1 || rows * dim < 2 * kChunk) {
    rmsnorm_bwd_rows(dx, dg, dy, x, g, rstd, 0, rows, dim, accumulate);
    return;
  }
  // Thread t owns rows [t rows / threads, (t+1) rows / threads) and a dg partial; the partials
  // are added to dg in thread order.
  par_for(threads, threads, [&](int64_t t, int) {
    float* part = scratch + t * dim;
    std::memset(part, 0, sizeof(float) * dim);
    rmsnorm_bwd_rows(dx, part, dy, x, g, rstd, t * rows / threads, (t + 1) * rows / threads, dim,
                     accumulate);
  });
  for (int64_t t = 0; t < threads; ++t) {
    const float* part = scratch + t * dim;
    for (int64_t c = 0; c < dim; ++c) dg[c] += part[c];
  }
}

void rope(float* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
          const float* cos_t, const float* sin_t, bool inverse, int threads) {
  const int64_t half = head_dim / 2;
  chunked(rows, rows_per_chunk(n_heads * head_dim), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const int64_t pos = t % seq;
      const float* ct = cos_t + pos * half;
      const float* st = sin_t + pos * half;
      for (int64_t h = 0; h < n_heads; ++h) {
        float* a = x + t * ld + h * head_dim;
        float* b = a + half;
        int64_t j = 0;
        for (; j + kW <= half; j += kW) {
          const vf c = vload(ct + j);
          const vf sv = inverse ? vsub(vzero(), vload(st + j)) : vload(st + j);
          const vf av = vload(a + j), bv = vload(b + j);
          vstore(a + j, vfnmadd(bv, sv, vmul(av, c)));
          vstore(b + j, vfmadd(av, sv, vmul(bv, c)));
        }
        for (; j < half; ++j) {
          const float c = ct[j], sn = inverse ? -st[j] : st[j];
          const float av = a[j], bv = b[j];
          a[j] = av * c - bv * sn;
          b[j] = bv * c + av * sn;
        }
      }
    }
  });
}

HP_ALWAYS_INLINE vf vsigmoid(vf g) { return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), g)))); }

void swiglu_fwd(float* h, const float* g, const float* u, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + kW <= i1; i += kW) {
      const vf gv = vload(g + i);
      vstore(h + i, vmul(vmul(gv, vsigmoid(gv)), vload(u + i)));
    }
    for (; i < i1; ++i) h[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
}

void swiglu_bwd(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n,
                int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    const vf one = vset1(1.0f);
    for (; i + kW <= i1; i += kW) {
      const vf gv = vload(g + i), uv = vload(u + i), dhv = vload(dh + i);
      const vf sig = vsigmoid(gv);
      vstore(du + i, vmul(vmul(dhv, gv), sig));
      vstore(dg + i, vmul(vmul(vmul(dhv, uv), sig), vfmadd(gv, vsub(one, sig), one)));
    }
    for (; i < i1; ++i) {
      const float sig = 1.0f / (1.0f + std::exp(-g[i]));
      du[i] = dh[i] * g[i] * sig;
      dg[i] = dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    }
  });
}

// log-sum-exp of one row, blockwise: each block of kBlock logits is read once from memory (max),
// then again from L1 (sum of exp), and merged into the running (max, sum).
float row_lse(const float* x, int64_t vocab) {
  constexpr int64_t kBlock = 2048;
  float run_m = -std::numeric_limits<float>::infinity(), run_s = 0.0f;
  for (int64_t b0 = 0; b0 < vocab; b0 += kBlock) {
    const int64_t b1 = std::min(vocab, b0 + kBlock);
    int64_t c = b0;
    vf vm = vset1(-std::numeric_limits<float>::infinity());
    for (; c + kW <= b1; c += kW) vm = vmax(vm, vload(x + c));
    float m = hmax(vm);
    for (; c < b1; ++c) m = std::max(m, x[c]);
    const vf vmb = vset1(m);
    vf vs = vzero();
    for (c = b0; c + kW <= b1; c += kW) vs = vadd(vs, vexp(vsub(vload(x + c), vmb)));
    float s = hsum(vs);
    for (; c < b1; ++c) s += std::exp(x[c] - m);
    if (m > run_m) {
      run_s = run_s * std::exp(run_m - m) + s;
      run_m = m;
    } else {
      run_s += s * std::exp(m - run_m);
    }
  }
  return run_m + std::log(run_s);
}

void ce_fwd(const float* logits, int64_t ld, int64_t rows, int64_t vocab, float* lse,
            int threads) {
  chunked(rows, rows_per_chunk(vocab), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) lse[r] = row_lse(logits + r * ld, vocab);
  });
}

void ce_bwd(float* dl, const float* logits, int64_t ld, const float* lse, const int32_t* targets,
            int64_t rows, int64_t vocab, float scale, int threads) {
  chunked(rows, rows_per_chunk(vocab), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = logits + r * ld;
      float* d = dl + r * ld;
      const int64_t t = targets[r];  // < 0: the target is in another rank's vocabulary slice
      // Read before d may overwrite x.
      const float dt = t >= 0 ? (std::exp(x[t] - lse[r]) - 1.0f) * scale : 0.0f;
      const vf vl = vset1(lse[r]), vsc = vset1(scale);
      int64_t c = 0;
      for (; c + kW <= vocab; c += kW) vstore(d + c, vmul(vexp(vsub(vload(x + c), vl)), vsc));
      for (; c < vocab; ++c) d[c] = std::exp(x[c] - lse[r]) * scale;
      if (t >= 0) d[t] = dt;
    }
  });
}

void axpy(float* y, const float* x, float alpha, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    const vf va = vset1(alpha);
    int64_t i = i0;
    for (; i + kW <= i1; i += kW) vstore(y + i, vfmadd(va, vload(x + i), vload(y + i)));
    for (; i < i1; ++i) y[i] += alpha * x[i];
  });
}

// Not inlined: one compiled copy for the serial and the OpenMP path, so the vectorized summation
// order (and hence the bits) is the same for every thread count.
__attribute__((noinline)) double block_sum_squares(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return acc;
}

void sum_squares_blocks(const float* x, int64_t n, double* partial, int threads) {
  chunked(n, cpu::kSumBlock, threads, [&](int64_t i0, int64_t i1) {
    partial[i0 / cpu::kSumBlock] = block_sum_squares(x + i0, i1 - i0);
  });
}

}  // namespace
}  // namespace HP_SIMD_NS

namespace cpu {

#if defined(HP_SIMD_512)
const IsaOps& avx512_ops() {
#else
const IsaOps& avx2_ops() {
#endif
  namespace I = HP_SIMD_NS;
  static const IsaOps ops = {
      HP_SIMD_NS_NAME,     I::attn_fwd_scratch, I::attn_fwd,   I::attn_bwd_scratch, I::attn_bwd,
      I::rmsnorm_fwd,      I::rmsnorm_bwd,      I::rope,       I::swiglu_fwd,       I::swiglu_bwd,
      I::ce_fwd,           I::ce_bwd,           I::axpy,       I::sum_squares_blocks,
  };
  return ops;
}

}  // namespace cpu
}  // namespace hp
