// The bf16 elementwise kernels (RMSNorm, rotary, SwiGLU, cross-entropy, embedding gradient,
// conversions, axpy, sum of squares) for AVX512-BF16, and the
// Bf16Ops table (bf16_ops.h). They are memory bound: bf16 halves the bytes they move; the math is
// f32 throughout (16 lanes, tails by masks) and each result is rounded once, when stored. Work is
// split into fixed chunks, so results do not depend on the thread count.
#define HP_SIMD_AVX512BF16 1
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/bf16_simd.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/cpu/simd.h"

namespace hp {
namespace HP_SIMD_NS {

// Defined in attention_bf16_avx512bf16.cc.
size_t attn_bf16_fwd_scratch(const AttnShape& s, int threads);
void attn_bf16_fwd(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                   float* lse, float* scratch, int threads);
size_t attn_bf16_bwd_scratch(const AttnShape& s, int threads);
void attn_bf16_bwd(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                   const bf16* dout, const float* lse, bf16* dq, bf16* dk, bf16* dv, float* scratch,
                   int threads);

namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per parallel chunk of the flat kernels

template <class F>
void chunked(int64_t n, int64_t chunk, int threads, F&& f) {
  const int64_t nc = (n + chunk - 1) / chunk;
  par_for(nc, threads, [&](int64_t c, int) { f(c * chunk, std::min(n, (c + 1) * chunk)); });
}

int64_t rows_per_chunk(int64_t dim) {
  return std::max<int64_t>(1, kChunk / std::max<int64_t>(dim, 1));
}

// Runs f(i, lanes) over [0, n) in steps of 16 with lanes = min(16, n - i).
template <class F>
HP_ALWAYS_INLINE void lanes(int64_t i0, int64_t i1, F&& f) {
  for (int64_t i = i0; i < i1; i += 16) f(i, std::min<int64_t>(16, i1 - i));
}

void rmsnorm_fwd(bf16* y, float* rstd, const bf16* x, const bf16* g, int64_t rows, int64_t dim,
                 float eps, int threads) {
  chunked(rows, rows_per_chunk(dim), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const u16* xr = raw(x) + r * dim;
      u16* yr = raw(y) + r * dim;
      __m512 acc = vzero();
      lanes(0, dim, [&](int64_t c, int64_t n) {
        const __m512 xv = bload_n(xr + c, n);
        acc = vfmadd(xv, xv, acc);
      });
      const float rs = 1.0f / std::sqrt(hsum(acc) / static_cast<float>(dim) + eps);
      rstd[r] = rs;
      const __m512 vr = vset1(rs);
      lanes(0, dim, [&](int64_t c, int64_t n) {
        bstore_n(yr + c, vmul(vmul(bload_n(xr + c, n), vr), bload_n(raw(g) + c, n)), n);
      });
    }
  });
}

// dx = rs g dy - x rs^3/dim sum(dy g x) (rounded once; += adds to the bf16 dx first in f32);
// dg (f32) += dy x rs.
void rmsnorm_bwd_rows(bf16* dx, float* dg, const bf16* dy, const bf16* x, const bf16* g,
                      const float* rstd, int64_t r0, int64_t r1, int64_t dim, bool accumulate) {
  for (int64_t r = r0; r < r1; ++r) {
    const u16* xr = raw(x) + r * dim;
    const u16* dyr = raw(dy) + r * dim;
    u16* dxr = raw(dx) + r * dim;
    const float rs = rstd[r];
    __m512 acc = vzero();
    lanes(0, dim, [&](int64_t c, int64_t n) {
      acc = vfmadd(vmul(bload_n(dyr + c, n), bload_n(raw(g) + c, n)), bload_n(xr + c, n), acc);
    });
    const float k = rs * rs * rs * hsum(acc) / static_cast<float>(dim);
    const __m512 vrs = vset1(rs), vk = vset1(k);
    lanes(0, dim, [&](int64_t c, int64_t n) {
      const __m512 dyv = bload_n(dyr + c, n), xv = bload_n(xr + c, n);
      __m512 v = vfnmadd(xv, vk, vmul(vmul(vrs, bload_n(raw(g) + c, n)), dyv));
      if (accumulate) v = vadd(bload_n(dxr + c, n), v);
      bstore_n(dxr + c, v, n);
      fstore_n(dg + c, vfmadd(vmul(dyv, xv), vrs, fload_n(dg + c, n)), n);
    });
  }
}

void rmsnorm_bwd(bf16* dx, float* dg, const bf16* dy, const bf16* x, const bf16* g,
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

void rope(bf16* x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
          const float* cos_t, const float* sin_t, bool inverse, int threads) {
  const int64_t half = head_dim / 2;
  chunked(rows, rows_per_chunk(n_heads * head_dim), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const int64_t pos = t % seq;
      const float* ct = cos_t + pos * half;
      const float* st = sin_t + pos * half;
      for (int64_t h = 0; h < n_heads; ++h) {
        u16* a = raw(x) + t * ld + h * head_dim;
        u16* b = a + half;
        lanes(0, half, [&](int64_t j, int64_t n) {
          const __m512 c = fload_n(ct + j, n);
          const __m512 sv = inverse ? vsub(vzero(), fload_n(st + j, n)) : fload_n(st + j, n);
          const __m512 av = bload_n(a + j, n), bv = bload_n(b + j, n);
          bstore_n(a + j, vfnmadd(bv, sv, vmul(av, c)), n);
          bstore_n(b + j, vfmadd(av, sv, vmul(bv, c)), n);
        });
      }
    }
  });
}

HP_ALWAYS_INLINE __m512 vsigmoid(__m512 g) {
  return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), g))));
}

void swiglu_fwd(bf16* h, const bf16* g, const bf16* u, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    lanes(i0, i1, [&](int64_t i, int64_t m) {
      const __m512 gv = bload_n(raw(g) + i, m);
      bstore_n(raw(h) + i, vmul(vmul(gv, vsigmoid(gv)), bload_n(raw(u) + i, m)), m);
    });
  });
}

void swiglu_bwd(bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t n,
                int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    const __m512 one = vset1(1.0f);
    lanes(i0, i1, [&](int64_t i, int64_t m) {
      const __m512 gv = bload_n(raw(g) + i, m), uv = bload_n(raw(u) + i, m);
      const __m512 dhv = bload_n(raw(dh) + i, m);
      const __m512 sig = vsigmoid(gv);
      bstore_n(raw(du) + i, vmul(vmul(dhv, gv), sig), m);
      bstore_n(raw(dg) + i, vmul(vmul(vmul(dhv, uv), sig), vfmadd(gv, vsub(one, sig), one)), m);
    });
  });
}

// log-sum-exp of one row of bf16 logits, blockwise as the f32 kernel (elementwise_impl.h): each
// block is read once from memory for its max, then from L1 for its sum of exp.
float row_lse(const u16* x, int64_t vocab) {
  constexpr int64_t kBlock = 2048;
  const float ninf = -std::numeric_limits<float>::infinity();
  float run_m = ninf, run_s = 0.0f;
  for (int64_t b0 = 0; b0 < vocab; b0 += kBlock) {
    const int64_t b1 = std::min(vocab, b0 + kBlock);
    __m512 vm = vset1(ninf);
    lanes(b0, b1, [&](int64_t c, int64_t n) {
      vm = _mm512_mask_max_ps(vm, first_n(n), vm, bload_n(x + c, n));
    });
    const float m = hmax(vm);
    const __m512 vmb = vset1(m);
    __m512 vs = vzero();
    lanes(b0, b1, [&](int64_t c, int64_t n) {
      vs = _mm512_mask_add_ps(vs, first_n(n), vs, vexp(vsub(bload_n(x + c, n), vmb)));
    });
    const float s = hsum(vs);
    if (m > run_m) {
      run_s = run_s * std::exp(run_m - m) + s;
      run_m = m;
    } else {
      run_s += s * std::exp(m - run_m);
    }
  }
  return run_m + std::log(run_s);
}

void ce_fwd(const bf16* logits, int64_t ld, int64_t rows, int64_t vocab, float* lse, int threads) {
  chunked(rows, rows_per_chunk(vocab), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) lse[r] = row_lse(raw(logits) + r * ld, vocab);
  });
}

// One row of dlogits = (softmax - onehot) * scale; `load` reads 16 (or n) logits as f32.
template <class Load>
HP_ALWAYS_INLINE void ce_bwd_row(u16* d, float xt, int64_t t, float lse, int64_t vocab, float scale,
                                 Load&& load) {
  const float dt = (std::exp(xt - lse) - 1.0f) * scale;  // read before d may overwrite x
  const __m512 vl = vset1(lse), vsc = vset1(scale);
  lanes(0, vocab,
        [&](int64_t c, int64_t n) { bstore_n(d + c, vmul(vexp(vsub(load(c, n), vl)), vsc), n); });
  if (t >= 0) d[t] = f2bf(dt);  // t < 0: the target is in another rank's vocabulary slice
}

void ce_bwd(bf16* dl, const bf16* logits, int64_t ld, const float* lse, const int32_t* targets,
            int64_t rows, int64_t vocab, float scale, int threads) {
  chunked(rows, rows_per_chunk(vocab), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const u16* x = raw(logits) + r * ld;
      const float xt = targets[r] >= 0 ? bf2f(x[targets[r]]) : 0.0f;
      ce_bwd_row(raw(dl) + r * ld, xt, targets[r], lse[r], vocab, scale,
                 [&](int64_t c, int64_t n) { return bload_n(x + c, n); });
    }
  });
}

void ce_bwd_f32(bf16* dl, const float* logits, int64_t ld, const float* lse, const int32_t* targets,
                int64_t rows, int64_t vocab, float scale, int threads) {
  chunked(rows, rows_per_chunk(vocab), threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = logits + r * ld;
      const float xt = targets[r] >= 0 ? x[targets[r]] : 0.0f;
      ce_bwd_row(raw(dl) + r * ld, xt, targets[r], lse[r], vocab, scale,
                 [&](int64_t c, int64_t n) { return fload_n(x + c, n); });
    }
  });
}

// Each element sums its tokens in token order, so splitting columns across threads gives the same
// bits as one thread.
void embedding_bwd(float* dtable, const int32_t* tokens, const bf16* dx, int64_t n, int64_t dim,
                   int threads) {
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < n; ++t) {
      if (tokens[t] < 0) continue;  // in another rank's vocabulary slice
      float* dst = dtable + static_cast<int64_t>(tokens[t]) * dim;
      const u16* src = raw(dx) + t * dim;
      lanes(c0, c1, [&](int64_t j, int64_t m) {
        fstore_n(dst + j, vadd(fload_n(dst + j, m), bload_n(src + j, m)), m);
      });
    }
  };
  constexpr int64_t kCols = 256;
  const int64_t nc = (dim + kCols - 1) / kCols;
  if (threads <= 1 || nc <= 1 || n * dim < (1 << 15)) {
    run(0, dim);
    return;
  }
  par_for(nc, threads, [&](int64_t c, int) { run(c * kCols, std::min(dim, (c + 1) * kCols)); });
}

// f32 -> bf16, two vectors per vcvtne2ps2bf16 in the body.
void to_bf16(bf16* dst, const float* src, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 32 <= i1; i += 32) {
      const __m512bh b = _mm512_cvtne2ps_pbh(vload(src + i + 16), vload(src + i));
      _mm512_storeu_si512(raw(dst) + i, reinterpret_cast<__m512i>(b));
    }
    lanes(i, i1, [&](int64_t j, int64_t m) { bstore_n(raw(dst) + j, fload_n(src + j, m), m); });
  });
}

void to_f32(float* dst, const bf16* src, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    lanes(i0, i1, [&](int64_t i, int64_t m) { fstore_n(dst + i, bload_n(raw(src) + i, m), m); });
  });
}

void axpy(bf16* y, const bf16* x, float alpha, int64_t n, int threads) {
  chunked(n, kChunk, threads, [&](int64_t i0, int64_t i1) {
    const __m512 va = vset1(alpha);
    lanes(i0, i1, [&](int64_t i, int64_t m) {
      bstore_n(raw(y) + i, vfmadd(va, bload_n(raw(x) + i, m), bload_n(raw(y) + i, m)), m);
    });
  });
}

// Not inlined: one compiled copy for the serial and the OpenMP path (same bits for any threads).
__attribute__((noinline)) double block_sum_squares(const u16* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double v = bf2f(x[i]);
    acc += v * v;
  }
  return acc;
}

void sum_squares_blocks(const bf16* x, int64_t n, double* partial, int threads) {
  chunked(n, cpu::kSumBlock, threads, [&](int64_t i0, int64_t i1) {
    partial[i0 / cpu::kSumBlock] = block_sum_squares(raw(x) + i0, i1 - i0);
  });
}

}  // namespace
}  // namespace HP_SIMD_NS

namespace cpu {

const Bf16Ops& avx512bf16_ops() {
  namespace I = HP_SIMD_NS;
  static const Bf16Ops ops = {
      I::attn_bf16_fwd_scratch,
      I::attn_bf16_fwd,
      I::attn_bf16_bwd_scratch,
      I::attn_bf16_bwd,
      I::rmsnorm_fwd,
      I::rmsnorm_bwd,
      I::rope,
      I::swiglu_fwd,
      I::swiglu_bwd,
      I::ce_fwd,
      I::ce_bwd,
      I::ce_bwd_f32,
      I::embedding_bwd,
      I::to_bf16,
      I::to_f32,
      I::axpy,
      I::sum_squares_blocks,
  };
  return ops;
}

}  // namespace cpu
}  // namespace hp
