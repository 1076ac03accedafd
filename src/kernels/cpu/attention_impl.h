// Flash-style causal attention, forward and backward, for one ISA (included by attention_avx512.cc
// and attention_avx2.cc; see simd.h for the rules of these files).
//
// Tiles of kAttnTile (64) query rows x 64 keys. Only the log-sum-exp per query row is kept between
// forward and backward; no seq x seq matrix ever exists, tiles above the diagonal are never
// visited, and only the diagonal tile (and a ragged last tile) is masked element by element.
// The products of a tile (forward S^T = K Q^T and O += P V; backward S = Q K^T, dV += P^T dO,
// dP = dO V^T, dQ += dS K, dK += dS^T Q) all go through one register-tiled micro-kernel:
// C[MR x NV vectors] += A B with A read by broadcast (row-major or transposed, so P^T and dS^T
// need no copy) and B read as whole vectors. The forward packs Q^T per query tile; the backward
// packs K^T and V^T once per call, 1/sqrt(d) folded into Q^T and K^T. Row-major B operands (V, K, Q, dO) are read
// in place when head_dim is a whole number of vectors, else packed with zero padding (so head_dim
// need only be a multiple of 8); the backward applies 1/sqrt(d) to dQ and dK when storing them.
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
#if defined(HP_SIMD_512)
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
#if defined(HP_SIMD_512)
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
  // direct: head_dim is a whole number of vectors, so row-major B operands (V, K, Q, dO) are read
  // straight from the caller's rows; else they are packed with zero padding to dp columns.
  bool direct;
  int64_t dn;  // width of the head_dim-wide products: d (direct) or dp (packed)
  float scale;
};

Dims dims_of(const AttnShape& s) {
  Dims m;
  m.d = s.head_dim;
  m.dp = (s.head_dim + 15) / 16 * 16;  // same padding for both ISAs
  m.nt = (s.seq + T - 1) / T;
  m.sp = m.nt * T;
  m.group = s.heads / s.kv_heads;
  m.direct = s.head_dim % kW == 0;
  m.dn = m.direct ? m.d : m.dp;
  m.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return m;
}

size_t round64(size_t n) { return (n + 15) / 16 * 16; }  // floats, keeps 64-byte alignment

// Transposes 8 rows x 8 columns (rows r[0..7]) in registers; out[i] = column i.
HP_ALWAYS_INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// dst[c][j] = mul * src[j * ld + c] for c < d, j < T (zero for j >= nvalid): one d x T tile,
// 8 x 8 blocks at a time (d is a multiple of 8).
void pack_tile_t(const float* src, int64_t ld, int64_t nvalid, int64_t d, float mul, float* dst) {
  const __m256 vm = _mm256_set1_ps(mul);
  for (int64_t j0 = 0; j0 < T; j0 += 8) {
    for (int64_t c0 = 0; c0 < d; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = j0 + i < nvalid ? _mm256_mul_ps(vm, _mm256_loadu_ps(src + (j0 + i) * ld + c0))
                               : _mm256_setzero_ps();
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (c0 + i) * T + j0, r[i]);
    }
  }
}

// Packs one kv head: dst[tile][c][j] = mul * src[tile*T + j][c] (d x T per tile, zero for keys
// past the end of the sequence).
void pack_kt(const AttnShape& s, const Dims& m, const float* src, float mul, float* dst) {
  for (int64_t t = 0; t < m.nt; ++t)
    pack_tile_t(src + t * T * s.ld_qkv, s.ld_qkv, std::min<int64_t>(T, s.seq - t * T), m.d, mul,
                dst + t * m.d * T);
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

// dst[r][c] = mul * src[r][c] for rows x cols.
void scale_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
                float mul) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ldd + c] = mul * src[r * lds + c];
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
// Forward, in transposed form: per query tile, Q^T (d x 64, scaled) is packed once, and for each
// key tile S^T = K Q^T (keys x queries) comes from K rows read in place. With queries along the
// vector lanes, the running max, the running sum and the rescale factor of 16 (AVX-512) queries
// are one vector each: no horizontal reductions and no scalar exp per row. O += P V then reads P
// transposed (a broadcast from S^T). Scratch: V packed per (b, kv head) only when head_dim is not
// a vector multiple; per thread Q^T, S^T, the O accumulator, m, l and alpha.

size_t fwd_kv_floats(const AttnShape& s, const Dims& m) {
  return m.direct ? 0 : round64(static_cast<size_t>(s.batch * s.kv_heads * m.sp * m.dp));
}
size_t fwd_thread_floats(const Dims& m) { return round64(m.dp * T + T * T + T * m.dp + 3 * T); }

// Sets St[c][r] = -inf where key k0 + c comes after query q0 + r (c < nk).
void mask_tile_t(float* St, int64_t nk, int64_t q0, int64_t k0) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < nk; ++c) {
    const int64_t stop = std::min<int64_t>(T, std::max<int64_t>(0, k0 + c - q0));
    for (int64_t r = 0; r < stop; ++r) St[c * T + r] = ninf;
  }
}

}  // namespace

size_t attn_fwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return fwd_kv_floats(s, m) + static_cast<size_t>(std::max(threads, 1)) * fwd_thread_floats(m);
}

void attn_fwd(const AttnShape& s, const float* q, const float* k, const float* v, float* o,
              float* lse, float* scratch, int threads) {
  const Dims m = dims_of(s);
  float* Vp = scratch;  // [b*kvh][sp][dp] (packed mode only)
  float* per_thread = scratch + fwd_kv_floats(s, m);
  const int64_t head_sz = m.sp * m.dp;

  if (!m.direct) {
    par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
      const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
      pack_rows(m, s.seq, v + b * s.seq * s.ld_qkv + kh * m.d, s.ld_qkv, 1.0f, Vp + i * head_sz);
    });
  }

  const int64_t items = s.batch * s.heads * m.nt;
  const float ninf = -std::numeric_limits<float>::infinity();
  par_for(items, threads, [&](int64_t it, int tid) {
    // Longest rows (last query tiles) first so the dynamic schedule ends evenly.
    const int64_t qt = m.nt - 1 - it % m.nt, bh = it / m.nt;
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
    float* QT = per_thread + tid * fwd_thread_floats(m);  // [d][T]
    float* St = QT + m.dp * T;                             // [T keys][T queries]
    float* O = St + T * T;                                 // [T][dp]
    float* mx = O + T * m.dp;                              // [T] each
    float* l = mx + T;
    float* alpha = l + T;
    const float* k_head = k + b * s.seq * s.ld_qkv + kh * m.d;
    const float* v_head = m.direct ? v + b * s.seq * s.ld_qkv + kh * m.d
                                   : Vp + (b * s.kv_heads + kh) * head_sz;
    const int64_t ldv = m.direct ? s.ld_qkv : m.dp;
    pack_tile_t(q + (b * s.seq + q0) * s.ld_qkv + h * m.d, s.ld_qkv, nq, m.d, m.scale, QT);
    for (int64_t r = 0; r < T; r += kW) {
      vstore(mx + r, vset1(ninf));
      vstore(l + r, vzero());
    }
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int64_t k0 = kt * T, nk = std::min<int64_t>(T, s.seq - k0);
      gemm_tile<false>(nk, T, m.d, k_head + k0 * s.ld_qkv, s.ld_qkv, QT, T, St, T, false);
      if (kt == qt) mask_tile_t(St, nk, q0, k0);
      bool rescale = false;
      for (int64_t r = 0; r < T; r += kW) {
        vf vm = vload(St + r);
        for (int64_t c = 1; c < nk; ++c) vm = vmax(vm, vload(St + c * T + r));
        const vf mold = vload(mx + r);
        const vf mnew = vmax(mold, vm);
        const vf a = vexp_softmax(vsub(mold, mnew));  // 0 on the first tile (mold = -inf)
        vf sum = vzero();
        for (int64_t c = 0; c < nk; ++c) {
          const vf p = vexp_softmax(vsub(vload(St + c * T + r), mnew));
          vstore(St + c * T + r, p);
          sum = vadd(sum, p);
        }
        vstore(l + r, vfmadd(vload(l + r), a, sum));
        vstore(mx + r, mnew);
        vstore(alpha + r, a);
      }
      if (kt == 0) {
        std::memset(O, 0, sizeof(float) * nq * m.dp);
      } else {
        for (int64_t r = 0; r < nq; ++r) rescale |= alpha[r] != 1.0f;
        if (rescale) {
          for (int64_t r = 0; r < nq; ++r) {
            float* Or = O + r * m.dp;
            const vf va = vset1(alpha[r]);
            for (int64_t c = 0; c < m.dn; c += kW) vstore(Or + c, vmul(vload(Or + c), va));
          }
        }
      }
      gemm_tile<true>(nq, m.dn, nk, St, T, v_head + k0 * ldv, ldv, O, m.dp, true);
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
// Backward (FlashAttention-2 order): key tiles outer, query tiles from the diagonal down inner;
// dK/dV of a key tile accumulate in thread scratch and are stored once. The key tiles of each
// (b, head) are cut into up to kSplits groups of about equal causal work, one work item each, so
// a few heads still feed many threads; each group accumulates its own dQ partial, and the partials
// are added in group order. Per-query-head dK/dV are summed over the GQA group in head order. The
// cut depends only on the shape, so results are bit-identical for any thread count.

namespace {

size_t bwd_kv_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * m.sp * m.dp));
}
size_t bwd_head_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * m.sp * m.dp));
}
size_t bwd_thread_floats(const Dims& m) {
  return round64(2 * m.sp * m.dp + m.sp + 2 * T * T + 2 * T * m.dp);
}

constexpr int64_t kSplits = 4;

// Cuts key tiles [0, nt) into n = min(nt, kSplits) groups [cut[g], cut[g+1]) of about equal
// work (key tile kt meets nt - kt query tiles). Returns n.
int64_t split_key_tiles(int64_t nt, int64_t* cut) {
  const int64_t n = std::min(nt, kSplits), total = nt * (nt + 1) / 2;
  int64_t g = 1, acc = 0;
  cut[0] = 0;
  for (int64_t kt = 0; kt < nt && g < n; ++kt) {
    acc += nt - kt;
    if (acc * n >= g * total && kt + 1 < nt) cut[g++] = kt + 1;
  }
  for (; g <= n; ++g) cut[g] = nt;  // the last group ends at nt (an empty group is allowed)
  return n;
}

size_t bwd_dq_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * std::min(m.nt, kSplits) * m.sp * m.dp));
}

// dq = (sum of the dQ partials [b*h][split][sp][dp] of the key-tile groups that reach the row, in
// group order) / sqrt(d).
void bwd_sum_dq(const AttnShape& s, const Dims& m, const float* dQs, int64_t ns, const int64_t* cut,
                float* dq, int threads) {
  const int64_t head_sz = m.sp * m.dp;
  par_for(s.batch * s.heads * m.nt, threads, [&](int64_t i, int) {
    const int64_t bh = i / m.nt, qt = i % m.nt;
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
    for (int64_t r = q0; r < q0 + nq; ++r) {
      float* out = dq + (b * s.seq + r) * s.ld_qkv + h * m.d;
      scale_rows(out, 0, dQs + (bh * ns) * head_sz + r * m.dp, 0, 1, m.d, 1.0f);
      for (int64_t g = 1; g < ns && cut[g] <= qt; ++g) {
        if (cut[g] == cut[g + 1]) continue;
        const float* part = dQs + (bh * ns + g) * head_sz + r * m.dp;
        for (int64_t c = 0; c < m.d; ++c) out[c] += part[c];
      }
      for (int64_t c = 0; c < m.d; ++c) out[c] *= m.scale;
    }
  });
}

// dk, dv of kv head kh = the sum of its query heads' dK, dV [b*h][sp][dp], in head order.
void bwd_sum_dkdv(const AttnShape& s, const Dims& m, const float* dKh, const float* dVh, float* dk,
                  float* dv, int threads) {
  const int64_t head_sz = m.sp * m.dp, chunks = (s.seq + T - 1) / T;
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

}  // namespace

size_t attn_bwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return 3 * bwd_kv_floats(s, m) + 2 * bwd_head_floats(s, m) + bwd_dq_floats(s, m) +
         static_cast<size_t>(std::max(threads, 1)) * bwd_thread_floats(m);
}

void attn_bwd(const AttnShape& s, const float* q, const float* k, const float* v, const float* o,
              const float* dout, const float* lse, float* dq, float* dk, float* dv,
              float* scratch, int threads) {
  const Dims m = dims_of(s);
  const size_t kvn = bwd_kv_floats(s, m), hn = bwd_head_floats(s, m);
  float* KT = scratch;             // [b*kvh][nt][d][T], scaled
  float* VT = scratch + kvn;       // [b*kvh][nt][d][T]
  float* Kp = scratch + 2 * kvn;   // [b*kvh][sp][dp] (packed mode only)
  float* dKh = scratch + 3 * kvn;  // [b*h][sp][dp]
  float* dVh = dKh + hn;           // [b*h][sp][dp]
  float* dQs = dVh + hn;           // [b*h][split][sp][dp]
  float* per_thread = dQs + bwd_dq_floats(s, m);
  const int64_t head_sz = m.sp * m.dp;
  int64_t cut[kSplits + 1];
  const int64_t ns = split_key_tiles(m.nt, cut);

  par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
    const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
    const int64_t off = b * s.seq * s.ld_qkv + kh * m.d;
    pack_kt(s, m, k + off, m.scale, KT + i * head_sz);
    pack_kt(s, m, v + off, 1.0f, VT + i * head_sz);
    if (!m.direct) pack_rows(m, s.seq, k + off, s.ld_qkv, 1.0f, Kp + i * head_sz);
  });

  // Heaviest groups (first key tiles) of every head first.
  par_for(s.batch * s.heads * ns, threads, [&](int64_t item, int tid) {
    const int64_t grp = item / (s.batch * s.heads), bh = item % (s.batch * s.heads);
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    const int64_t kt_begin = cut[grp], kt_end = cut[grp + 1];
    if (kt_begin == kt_end) return;
    const int64_t r_begin = kt_begin * T;  // first query row this group touches
    float* Qp = per_thread + tid * bwd_thread_floats(m);  // [sp][dp] (packed mode only)
    float* dOp = Qp + head_sz;                            // [sp][dp] (packed mode only)
    float* D = dOp + head_sz;                             // [sp]
    float* dQ = dQs + (bh * ns + grp) * head_sz;          // [sp][dp], rows >= r_begin
    float* P = D + m.sp;                                  // [T][T]
    float* dS = P + T * T;                                // [T][T]
    float* dKt = dS + T * T;                              // [T][dp]
    float* dVt = dKt + T * m.dp;                          // [T][dp]
    const float* qh = q + b * s.seq * s.ld_qkv + h * m.d;
    const float* doh = dout + b * s.seq * s.ld_o + h * m.d;
    const float* oh = o + b * s.seq * s.ld_o + h * m.d;
    const float* lse_h = lse + (b * s.heads + h) * s.seq;
    const int64_t kvi = b * s.kv_heads + kh;
    if (!m.direct) {
      pack_rows(m, s.seq, qh, s.ld_qkv, 1.0f, Qp);
      pack_rows(m, s.seq, doh, s.ld_o, 1.0f, dOp);
    }
    const float* qB = m.direct ? qh : Qp;
    const float* doB = m.direct ? doh : dOp;
    const float* kB = m.direct ? k + b * s.seq * s.ld_qkv + kh * m.d : Kp + kvi * head_sz;
    const int64_t ldq = m.direct ? s.ld_qkv : m.dp, ldo = m.direct ? s.ld_o : m.dp;
    const int64_t ldk = ldq;
    std::memset(dQ + r_begin * m.dp, 0, sizeof(float) * (m.sp - r_begin) * m.dp);
    for (int64_t r = r_begin; r < s.seq; ++r) {
      const float* a = doh + r * s.ld_o;
      const float* c = oh + r * s.ld_o;
      float acc = 0.0f;
      for (int64_t j = 0; j < m.d; ++j) acc += a[j] * c[j];
      D[r] = acc;
    }
    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
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
            const vf p = vexp_softmax(vsub(vload(Pr + c), l));
            vstore(Pr + c, p);
            vstore(dSr + c, vmul(p, vsub(vload(dSr + c), dr)));
          }
        }
        // dV_t += P^T dO, dK_t += dS^T Q, dQ += dS K (1/sqrt(d) is applied when storing).
        gemm_tile<true>(nk, m.dn, nq, P, T, doB + q0 * ldo, ldo, dVt, m.dp, !first);
        gemm_tile<true>(nk, m.dn, nq, dS, T, qB + q0 * ldq, ldq, dKt, m.dp, !first);
        gemm_tile<false>(nq, m.dn, nk, dS, T, kB + k0 * ldk, ldk, dQ + q0 * m.dp, m.dp, true);
        first = false;
      }
      scale_rows(dKh + bh * head_sz + k0 * m.dp, m.dp, dKt, m.dp, nk, m.d, m.scale);
      std::memcpy(dVh + bh * head_sz + k0 * m.dp, dVt, sizeof(float) * nk * m.dp);
    }
  });

  bwd_sum_dq(s, m, dQs, ns, cut, dq, threads);
  bwd_sum_dkdv(s, m, dKh, dVh, dk, dv, threads);
}

}  // namespace HP_SIMD_NS
}  // namespace hp
