// Flash-style causal attention, forward and backward, for one ISA (included by attention_avx512.cc
// and attention_avx2.cc; see simd.h for the rules of these files).
//
// Tiles of kAttnTile (64) query rows x 64 keys. Only the log-sum-exp per query row is kept between
// forward and backward; no seq x seq matrix ever exists, tiles above the diagonal are never
// visited, and only the diagonal tile (and a ragged last tile) is masked element by element.
// The four products of a tile (S = Q K^T, O += P V, and in the backward dV += P^T dO,
// dP = dO V^T, dQ += dS K, dK += dS^T Q) all go through one register-tiled micro-kernel:
// C[MR x NV vectors] += A B with A read by broadcast (row-major or transposed, so P^T and dS^T
// need no copy) and B read as whole vectors. K, V, Q and dO are packed once per call into
// scratch so that B operands are contiguous and padded to a vector multiple (head_dim needs only
// be a multiple of 8); 1/sqrt(d) is folded into the packed copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/isa_ops.h"
#include "kernels/cpu/isa_decls.h"
#include "kernels/cpu/simd.h"

namespace hp {
namespace HP_SIMD_NS {
namespace {

constexpr int64_t T = cpu::kAttnTile;
#if defined(__AVX512F__)
constexpr int kMR = 6, kNV = 4;  // 24 accumulators of 16 floats + 4 B vectors
#else
constexpr int kMR = 6, kNV = 2;  // 12 accumulators of 8 floats + 2 B vectors
#endif

// C[MR x NV*kW] (+)= A[MR x K] B[K x NV*kW]. TA: A(m, k) = A[k*lda + m], else A[m*lda + k].
template <bool TA, int MR, int NV>
HP_ALWAYS_INLINE void micro(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                            float* C, int64_t ldc, bool acc) {
  vf c[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[m][v] = acc ? vload(C + m * ldc + v * kW) : vzero();
  for (int64_t k = 0; k < K; ++k) {
    vf b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = vload(B + k * ldb + v * kW);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const vf a = vset1(TA ? A[k * lda + m] : A[m * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[m][v] = vfmadd(a, b[v], c[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) vstore(C + m * ldc + v * kW, c[m][v]);
}

template <bool TA, int NV>
void micro_rows(int mr, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                float* C, int64_t ldc, bool acc) {
  switch (mr) {
    case 6: micro<TA, 6, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
    case 5: micro<TA, 5, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
    case 4: micro<TA, 4, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
    case 3: micro<TA, 3, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
    case 2: micro<TA, 2, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
    default: micro<TA, 1, NV>(K, A, lda, B, ldb, C, ldc, acc); break;
  }
}

// C[M x N] (+)= op(A)[M x K] B[K x N]; N must be a multiple of kW. K == 0 with acc = false zeroes C.
template <bool TA>
void gemm_tile(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc, bool acc) {
  static_assert(kMR == 6, "micro_rows dispatches 1..6 rows");
  for (int64_t n0 = 0; n0 < N; n0 += kNV * kW) {
    const int nv = static_cast<int>(std::min<int64_t>(kNV, (N - n0) / kW));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, M - m0));
      const float* Am = TA ? A + m0 : A + m0 * lda;
      float* Cm = C + m0 * ldc + n0;
      const float* Bn = B + n0;
      switch (nv) {
#if defined(__AVX512F__)
        case 4: micro_rows<TA, 4>(mr, K, Am, lda, Bn, ldb, Cm, ldc, acc); break;
        case 3: micro_rows<TA, 3>(mr, K, Am, lda, Bn, ldb, Cm, ldc, acc); break;
#endif
        case 2: micro_rows<TA, 2>(mr, K, Am, lda, Bn, ldb, Cm, ldc, acc); break;
        default: micro_rows<TA, 1>(mr, K, Am, lda, Bn, ldb, Cm, ldc, acc); break;
      }
    }
  }
}

struct Dims {
  int64_t d, dp, sp, nt, group;
  float scale;
};

Dims dims_of(const AttnShape& s) {
  Dims m;
  m.d = s.head_dim;
  m.dp = (s.head_dim + 15) / 16 * 16;  // same padding for both ISAs
  m.nt = (s.seq + T - 1) / T;
  m.sp = m.nt * T;
  m.group = s.heads / s.kv_heads;
  m.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return m;
}

size_t round64(size_t n) { return (n + 15) / 16 * 16; }  // floats, keeps 64-byte alignment

// Packs key/value head (b, kh): kt[tile][c][j] = mul * src[tile*T + j][c] (d x T per tile, zero
// beyond seq), and rows[r][c] = mul2 * src2[r][c] padded to dp columns and sp rows.
void pack_kt(const AttnShape& s, const Dims& m, const float* src, float mul, float* dst) {
  for (int64_t t = 0; t < m.nt; ++t) {
    float* tile = dst + t * m.d * T;
    const int64_t nk = std::min<int64_t>(T, s.seq - t * T);
    for (int64_t j = 0; j < T; ++j) {
      if (j < nk) {
        const float* row = src + (t * T + j) * s.ld_qkv;
        for (int64_t c = 0; c < m.d; ++c) tile[c * T + j] = mul * row[c];
      } else {
        for (int64_t c = 0; c < m.d; ++c) tile[c * T + j] = 0.0f;
      }
    }
  }
}

void pack_rows(const Dims& m, int64_t seq, const float* src, int64_t ld, float mul, float* dst) {
  for (int64_t r = 0; r < m.sp; ++r) {
    float* out = dst + r * m.dp;
    if (r < seq) {
      const float* row = src + r * ld;
      for (int64_t c = 0; c < m.d; ++c) out[c] = mul * row[c];
      for (int64_t c = m.d; c < m.dp; ++c) out[c] = 0.0f;
    } else {
      std::memset(out, 0, sizeof(float) * m.dp);
    }
  }
}

// Sets S[r][c] = -inf where key k0 + c is after query q0 + r or past the end of the sequence.
void mask_tile(float* S, int64_t nq, int64_t q0, int64_t k0, int64_t nk) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t first = std::min<int64_t>(nk, std::max<int64_t>(0, q0 + r - k0 + 1));
    for (int64_t c = first; c < T; ++c) S[r * T + c] = ninf;
  }
}

// ---------------------------------------------------------------------------------------------
// Forward. Scratch: KT and V packed per (b, kv head), then per thread S, O accumulator, m, l.

size_t fwd_kv_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * m.sp * m.dp));
}
size_t fwd_thread_floats(const Dims& m) { return round64(T * T + T * m.dp + 2 * T); }

}  // namespace

size_t attn_fwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return 2 * fwd_kv_floats(s, m) + static_cast<size_t>(std::max(threads, 1)) * fwd_thread_floats(m);
}

void attn_fwd(const AttnShape& s, const float* q, const float* k, const float* v, float* o,
              float* lse, float* scratch, int threads) {
  const Dims m = dims_of(s);
  const size_t kvn = fwd_kv_floats(s, m);
  float* KT = scratch;  // [b*kvh][nt][d][T], scaled by 1/sqrt(d)
  float* Vp = scratch + kvn;  // [b*kvh][sp][dp]
  float* per_thread = scratch + 2 * kvn;
  const int64_t head_sz = m.sp * m.dp;

  par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
    const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
    const int64_t off = b * s.seq * s.ld_qkv + kh * m.d;
    pack_kt(s, m, k + off, m.scale, KT + i * head_sz);
    pack_rows(m, s.seq, v + off, s.ld_qkv, 1.0f, Vp + i * head_sz);
  });

  const int64_t items = s.batch * s.heads * m.nt;
  par_for(items, threads, [&](int64_t it, int tid) {
    // Longest rows (last query tiles) first so the dynamic schedule ends evenly.
    const int64_t qt = m.nt - 1 - it % m.nt, bh = it / m.nt;
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
    float* S = per_thread + tid * fwd_thread_floats(m);
    float* O = S + T * T;
    float* mx = O + T * m.dp;
    float* l = mx + T;
    const float* kt_head = KT + (b * s.kv_heads + kh) * head_sz;
    const float* v_head = Vp + (b * s.kv_heads + kh) * head_sz;
    const float* qrows = q + (b * s.seq + q0) * s.ld_qkv + h * m.d;
    for (int64_t r = 0; r < nq; ++r) {
      mx[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
    }
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int64_t k0 = kt * T, nk = std::min<int64_t>(T, s.seq - k0);
      gemm_tile<false>(nq, T, m.d, qrows, s.ld_qkv, kt_head + kt * m.d * T, T, S, T, false);
      if (kt == qt || nk < T) mask_tile(S, nq, q0, k0, nk);
      for (int64_t r = 0; r < nq; ++r) {
        float* Sr = S + r * T;
        vf vm = vload(Sr);
        for (int64_t c = kW; c < T; c += kW) vm = vmax(vm, vload(Sr + c));
        const float mnew = std::max(mx[r], hmax(vm));
        const float alpha = std::exp(mx[r] - mnew);  // 0 on the first tile (mx = -inf)
        const vf vmn = vset1(mnew);
        vf sum = vzero();
        for (int64_t c = 0; c < T; c += kW) {
          const vf p = vexp(vsub(vload(Sr + c), vmn));
          vstore(Sr + c, p);
          sum = vadd(sum, p);
        }
        l[r] = l[r] * alpha + hsum(sum);
        mx[r] = mnew;
        float* Or = O + r * m.dp;
        if (kt == 0) {
          std::memset(Or, 0, sizeof(float) * m.dp);
        } else if (alpha != 1.0f) {
          const vf va = vset1(alpha);
          for (int64_t c = 0; c < m.dp; c += kW) vstore(Or + c, vmul(vload(Or + c), va));
        }
      }
      gemm_tile<false>(nq, m.dp, nk, S, T, v_head + k0 * m.dp, m.dp, O, m.dp, true);
    }
    for (int64_t r = 0; r < nq; ++r) {
      const float inv = 1.0f / l[r];
      float* orow = o + (b * s.seq + q0 + r) * s.ld_o + h * m.d;
      const float* Or = O + r * m.dp;
      for (int64_t c = 0; c < m.d; ++c) orow[c] = Or[c] * inv;
      lse[(b * s.heads + h) * s.seq + q0 + r] = mx[r] + std::log(l[r]);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Backward (FlashAttention-2 order): per (b, head), key tiles outer, query tiles from the diagonal
// down inner; dK/dV of a key tile accumulate in registers-friendly thread scratch and are stored
// once; dQ accumulates in a per-thread copy of the head. Per-query-head dK/dV are summed over the
// GQA group at the end in head order, so the result is deterministic for any thread count.

namespace {

size_t bwd_kv_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * m.sp * m.dp));
}
size_t bwd_head_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * m.sp * m.dp));
}
size_t bwd_thread_floats(const Dims& m) {
  return round64(3 * m.sp * m.dp + m.sp + 2 * T * T + 2 * T * m.dp);
}

}  // namespace

size_t attn_bwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return 3 * bwd_kv_floats(s, m) + 2 * bwd_head_floats(s, m) +
         static_cast<size_t>(std::max(threads, 1)) * bwd_thread_floats(m);
}

void attn_bwd(const AttnShape& s, const float* q, const float* k, const float* v, const float* o,
              const float* dout, const float* lse, float* dq, float* dk, float* dv,
              float* scratch, int threads) {
  const Dims m = dims_of(s);
  const size_t kvn = bwd_kv_floats(s, m), hn = bwd_head_floats(s, m);
  float* KT = scratch;             // [b*kvh][nt][d][T], scaled
  float* VT = scratch + kvn;       // [b*kvh][nt][d][T]
  float* Ks = scratch + 2 * kvn;   // [b*kvh][sp][dp], scaled
  float* dKh = scratch + 3 * kvn;  // [b*h][sp][dp]
  float* dVh = dKh + hn;           // [b*h][sp][dp]
  float* per_thread = dVh + hn;
  const int64_t head_sz = m.sp * m.dp;

  par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
    const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
    const int64_t off = b * s.seq * s.ld_qkv + kh * m.d;
    pack_kt(s, m, k + off, m.scale, KT + i * head_sz);
    pack_kt(s, m, v + off, 1.0f, VT + i * head_sz);
    pack_rows(m, s.seq, k + off, s.ld_qkv, m.scale, Ks + i * head_sz);
  });

  par_for(s.batch * s.heads, threads, [&](int64_t bh, int tid) {
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    float* Qs = per_thread + tid * bwd_thread_floats(m);  // [sp][dp], scaled
    float* dOp = Qs + head_sz;                            // [sp][dp]
    float* dQ = dOp + head_sz;                            // [sp][dp]
    float* D = dQ + head_sz;                              // [sp]
    float* P = D + m.sp;                                  // [T][T]
    float* dS = P + T * T;                                // [T][T]
    float* dKt = dS + T * T;                              // [T][dp]
    float* dVt = dKt + T * m.dp;                          // [T][dp]
    const float* qh = q + b * s.seq * s.ld_qkv + h * m.d;
    const float* doh = dout + b * s.seq * s.ld_o + h * m.d;
    const float* oh = o + b * s.seq * s.ld_o + h * m.d;
    const float* lse_h = lse + (b * s.heads + h) * s.seq;
    const int64_t kvi = b * s.kv_heads + kh;
    pack_rows(m, s.seq, qh, s.ld_qkv, m.scale, Qs);
    pack_rows(m, s.seq, doh, s.ld_o, 1.0f, dOp);
    std::memset(dQ, 0, sizeof(float) * head_sz);
    for (int64_t r = 0; r < s.seq; ++r) {
      const float* a = doh + r * s.ld_o;
      const float* c = oh + r * s.ld_o;
      float acc = 0.0f;
      for (int64_t j = 0; j < m.d; ++j) acc += a[j] * c[j];
      D[r] = acc;
    }
    for (int64_t kt = 0; kt < m.nt; ++kt) {
      const int64_t k0 = kt * T, nk = std::min<int64_t>(T, s.seq - k0);
      const float* kt_tile = KT + kvi * head_sz + kt * m.d * T;
      const float* vt_tile = VT + kvi * head_sz + kt * m.d * T;
      bool first = true;
      for (int64_t qt = kt; qt < m.nt; ++qt) {
        const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
        gemm_tile<false>(nq, T, m.d, qh + q0 * s.ld_qkv, s.ld_qkv, kt_tile, T, P, T, false);
        if (qt == kt || nk < T) mask_tile(P, nq, q0, k0, nk);
        gemm_tile<false>(nq, T, m.d, doh + q0 * s.ld_o, s.ld_o, vt_tile, T, dS, T, false);
        for (int64_t r = 0; r < nq; ++r) {
          float* Pr = P + r * T;
          float* dSr = dS + r * T;
          const vf l = vset1(lse_h[q0 + r]), dr = vset1(D[q0 + r]);
          for (int64_t c = 0; c < T; c += kW) {
            const vf p = vexp(vsub(vload(Pr + c), l));
            vstore(Pr + c, p);
            vstore(dSr + c, vmul(p, vsub(vload(dSr + c), dr)));
          }
        }
        // dV_t += P^T dO, dK_t += dS^T Qs, dQ += dS Ks (the 1/sqrt(d) is inside Qs and Ks).
        gemm_tile<true>(nk, m.dp, nq, P, T, dOp + q0 * m.dp, m.dp, dVt, m.dp, !first);
        gemm_tile<true>(nk, m.dp, nq, dS, T, Qs + q0 * m.dp, m.dp, dKt, m.dp, !first);
        gemm_tile<false>(nq, m.dp, nk, dS, T, Ks + kvi * head_sz + k0 * m.dp, m.dp,
                         dQ + q0 * m.dp, m.dp, true);
        first = false;
      }
      std::memcpy(dKh + bh * head_sz + k0 * m.dp, dKt, sizeof(float) * nk * m.dp);
      std::memcpy(dVh + bh * head_sz + k0 * m.dp, dVt, sizeof(float) * nk * m.dp);
    }
    for (int64_t r = 0; r < s.seq; ++r) {
      float* out = dq + (b * s.seq + r) * s.ld_qkv + h * m.d;
      std::memcpy(out, dQ + r * m.dp, sizeof(float) * m.d);
    }
  });

  // dk, dv of kv head kh = sum over its query heads, in head order.
  const int64_t chunks = (s.seq + T - 1) / T;
  par_for(s.batch * s.kv_heads * chunks, threads, [&](int64_t i, int) {
    const int64_t c0 = (i % chunks) * T, bk = i / chunks;
    const int64_t b = bk / s.kv_heads, kh = bk % s.kv_heads;
    const int64_t rows = std::min<int64_t>(T, s.seq - c0);
    for (int64_t r = c0; r < c0 + rows; ++r) {
      float* ok = dk + (b * s.seq + r) * s.ld_qkv + kh * m.d;
      float* ov = dv + (b * s.seq + r) * s.ld_qkv + kh * m.d;
      const int64_t h0 = b * s.heads + kh * m.group;
      std::memcpy(ok, dKh + h0 * head_sz + r * m.dp, sizeof(float) * m.d);
      std::memcpy(ov, dVh + h0 * head_sz + r * m.dp, sizeof(float) * m.d);
      for (int64_t g = 1; g < m.group; ++g) {
        const float* sk = dKh + (h0 + g) * head_sz + r * m.dp;
        const float* sv = dVh + (h0 + g) * head_sz + r * m.dp;
        for (int64_t c = 0; c < m.d; ++c) {
          ok[c] += sk[c];
          ov[c] += sv[c];
        }
      }
    }
  });
}

}  // namespace HP_SIMD_NS
}  // namespace hp
