// Flash-style causal attention over bf16 q, k, v, o and dout with f32 accumulation, for AVX512-BF16
// (vdpbf16ps: 16 lanes x 2 products per instruction, twice the f32 FMA's work). Same tiles (64
// queries x 64 keys), work items, causal skipping and summation order as the f32 kernel
// (attention_impl.h), so results do not depend on the thread count.
//
// Every product goes through one micro-kernel, C (f32) += A B, where A is bf16 with its K index
// contiguous (one 32-bit broadcast feeds a pair) and B is packed in pairs along K (each 32-bit word
// holds B(2p, n) and B(2p+1, n)). The layouts are chosen so that every A operand is either the
// caller's rows (q, k, dout) or a plain transpose packed once, and every B operand is either packed
// once per call or written by the softmax step in pair form directly:
//   forward:  S^T = K Q^T (Q^T in pairs per query tile); O^T += V^T P^T (V^T packed per call, P^T
//             written in pairs from S^T). Queries run along the vector lanes, so the running max,
//             sum and rescale factor of 16 queries are one vector each.
//   backward: S = Q K^T, dP = dO V^T (K^T, V^T in pairs per call); dV^T += dO^T P, dK^T += Q^T dS
//             (Q^T, dO^T transposed per work item; P, dS written in pairs); dQ += dS K (K in pairs
//             per call, dS rounded to bf16 rows).
// P and dS are rounded to bf16 for the products that read them (as GPU flash attention does); the
// softmax statistics, the row sums and every accumulator are f32. 1/sqrt(d) scales the f32 scores
// (not the bf16 inputs, which would round them again) and dq, dk when they are stored.
#define HP_SIMD_AVX512BF16 1
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/bf16_simd.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/cpu/simd.h"

namespace hp {
namespace HP_SIMD_NS {
namespace {

constexpr int64_t T = cpu::kAttnTile;
constexpr int kMR = 6, kNV = 4;  // 24 accumulators + 4 B vectors + 1 broadcast

// C[MR x NV*16] (+)= A B over K = 2 * kp_n (see the file comment for the layouts; lda in bf16
// elements, ldb in 32-bit pairs).
// With acc and cscale, C's old columns are first scaled by cscale (one factor per column: the
// forward's rescaling of O^T by alpha, fused into the load).
template <int MR, int NV>
HP_ALWAYS_INLINE void micro(int64_t kp_n, const u16* A, int64_t lda, const uint32_t* B, int64_t ldb,
                            float* C, int64_t ldc, bool acc, const float* cscale) {
  __m512 c[MR][NV];
  if (!acc) {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[m][v] = vzero();
  } else if (cscale) {
    __m512 s[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) s[v] = vload(cscale + v * 16);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[m][v] = vmul(vload(C + m * ldc + v * 16), s[v]);
  } else {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[m][v] = vload(C + m * ldc + v * 16);
  }
  for (int64_t kp = 0; kp < kp_n; ++kp) {
    __m512bh b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(B + kp * ldb + v * 16));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      uint32_t w;
      std::memcpy(&w, A + m * lda + 2 * kp, 4);
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[m][v] = _mm512_dpbf16_ps(c[m][v], a, b[v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) vstore(C + m * ldc + v * 16, c[m][v]);
}

// Rows [0, M) of one column block: full blocks of kMR rows, then the remaining rows (kept out of
// the loop so the common case is a direct call).
template <int NV>
void micro_block(int64_t M, int64_t kp_n, const u16* A, int64_t lda, const uint32_t* B, int64_t ldb,
                 float* C, int64_t ldc, bool acc, const float* cscale) {
  static_assert(kMR == 6, "the tail below dispatches 1..5 rows");
  int64_t m0 = 0;
  for (; m0 + kMR <= M; m0 += kMR)
    micro<kMR, NV>(kp_n, A + m0 * lda, lda, B, ldb, C + m0 * ldc, ldc, acc, cscale);
  const u16* At = A + m0 * lda;
  float* Ct = C + m0 * ldc;
  // clang-format off
  switch (M - m0) {
    case 5: micro<5, NV>(kp_n, At, lda, B, ldb, Ct, ldc, acc, cscale); break;
    case 4: micro<4, NV>(kp_n, At, lda, B, ldb, Ct, ldc, acc, cscale); break;
    case 3: micro<3, NV>(kp_n, At, lda, B, ldb, Ct, ldc, acc, cscale); break;
    case 2: micro<2, NV>(kp_n, At, lda, B, ldb, Ct, ldc, acc, cscale); break;
    case 1: micro<1, NV>(kp_n, At, lda, B, ldb, Ct, ldc, acc, cscale); break;
    default: break;
  }
  // clang-format on
}

// C[M x N] (+)= A[M x 2 kp_n] B[2 kp_n x N]; N a multiple of 16. kp_n == 0 with acc = false
// zeroes C. cscale (N factors, or null): see micro.
void gemm_tile(int64_t M, int64_t N, int64_t kp_n, const u16* A, int64_t lda, const uint32_t* B,
               int64_t ldb, float* C, int64_t ldc, bool acc, const float* cscale = nullptr) {
  for (int64_t n0 = 0; n0 < N; n0 += kNV * 16) {
    const int nv = static_cast<int>(std::min<int64_t>(kNV, (N - n0) / 16));
    const uint32_t* Bn = B + n0;
    float* Cn = C + n0;
    const float* sn = cscale ? cscale + n0 : nullptr;
    // clang-format off
    switch (nv) {
      case 4: micro_block<4>(M, kp_n, A, lda, Bn, ldb, Cn, ldc, acc, sn); break;
      case 3: micro_block<3>(M, kp_n, A, lda, Bn, ldb, Cn, ldc, acc, sn); break;
      case 2: micro_block<2>(M, kp_n, A, lda, Bn, ldb, Cn, ldc, acc, sn); break;
      default: micro_block<1>(M, kp_n, A, lda, Bn, ldb, Cn, ldc, acc, sn); break;
    }
    // clang-format on
  }
}

struct Dims {
  int64_t d, dh, dp, sp, nt, group;  // dh: pairs along head_dim; dp: head_dim padded to 16
  float scale;
};

Dims dims_of(const AttnShape& s) {
  Dims m;
  m.d = s.head_dim;
  m.dh = s.head_dim / 2;
  m.dp = (s.head_dim + 15) / 16 * 16;
  m.nt = (s.seq + T - 1) / T;
  m.sp = m.nt * T;
  m.group = s.heads / s.kv_heads;
  m.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return m;
}

size_t round64(size_t floats) { return (floats + 15) / 16 * 16; }  // keeps 64-byte alignment

uint32_t word(const u16* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// dst[p*ldd + j] = the pair (c = 2p, 2p+1) of row j of src, for j < T (0 for j >= nvalid): a
// d x T tile of rows in pair form.
void pack_pairs_t(const u16* src, int64_t ld, int64_t nvalid, int64_t dh, uint32_t* dst,
                  int64_t ldd) {
  for (int64_t j = 0; j < T; ++j) {
    if (j < nvalid) {
      const u16* row = src + j * ld;
      for (int64_t p = 0; p < dh; ++p) dst[p * ldd + j] = word(row + 2 * p);
    } else {
      for (int64_t p = 0; p < dh; ++p) dst[p * ldd + j] = 0;
    }
  }
}

// dst[c*ldd + j] = src[j*ld + c] for j in [j0, j1) (0 for j >= seq): a plain transpose, 32 rows
// at a time so that the rows being read stay in L1 and each store run is 64 contiguous bytes.
void pack_t(const u16* src, int64_t ld, int64_t seq, int64_t j0, int64_t j1, int64_t d, u16* dst,
            int64_t ldd) {
  constexpr int64_t kRows = 32;
  for (int64_t b0 = j0; b0 < j1; b0 += kRows) {
    const int64_t b1 = std::min(j1, b0 + kRows), valid = std::min(b1, seq);
    for (int64_t c = 0; c < d; ++c) {
      u16* out = dst + c * ldd;
      for (int64_t j = b0; j < valid; ++j) out[j] = src[j * ld + c];
      for (int64_t j = std::max(b0, valid); j < b1; ++j) out[j] = 0;
    }
  }
}

// 16 columns of two f32 rows as 16 bf16 pairs (lo: row lo, hi: row hi), each rounded to nearest
// even: the pair form the micro-kernel's B operand reads.
HP_ALWAYS_INLINE __m512i pair16(__m512 lo, __m512 hi) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// Row r of out (bf16, d values) = mul[r] * column r of src (f32, d x T, stride T), for r < n.
void store_t(const float* src, const float* mul, int64_t n, int64_t d, u16* out, int64_t ld) {
  const __m512i cols = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(T));
  for (int64_t r = 0; r < n; ++r) {
    const __m512 vm = vset1(mul[r]);
    for (int64_t c = 0; c < d; c += 16) {
      const int64_t w = std::min<int64_t>(16, d - c);
      const __m512 x = _mm512_mask_i32gather_ps(vzero(), first_n(w), cols, src + c * T + r, 4);
      bstore_n(out + r * ld + c, vmul(x, vm), w);
    }
  }
}

// Sets St[c][r] = -inf where key k0 + c comes after query q0 + r (c < nk).
void mask_tile_t(float* St, int64_t nk, int64_t q0, int64_t k0) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < nk; ++c) {
    const int64_t stop = std::min<int64_t>(T, std::max<int64_t>(0, k0 + c - q0));
    for (int64_t r = 0; r < stop; ++r) St[c * T + r] = ninf;
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
// Forward. Scratch: V^T per (b, kv head) [d][sp] bf16; per thread Q^T pairs [dh][T], S^T [T][T],
// P^T pairs [T/2][T], the O^T accumulator [d][T], m, l, alpha and 1/l [T] each.

size_t fwd_vt_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * m.d * m.sp + 1) / 2);
}
size_t fwd_thread_floats(const Dims& m) {
  return round64(m.dh * T) + T * T + T * T / 2 + round64(m.d * T) + 4 * T;
}

// Causal softmax step over S^T (keys x queries, nk keys): scores times scale, the running max mx
// and sum l of each query (a lane) updated, alpha = the factor the old O must be scaled by; P^T is
// written in pairs of keys (PTp[i][r] = keys 2i, 2i+1 of query r; a key >= nk reads as 0), the
// form the O^T product reads, straight from the registers.
void softmax_t(const float* St, int64_t nk, float scale, float* mx, float* l, float* alpha,
               uint32_t* PTp) {
  const __m512 vs = vset1(scale);
  for (int64_t r = 0; r < T; r += 16) {
    __m512 vm = vload(St + r);
    for (int64_t c = 1; c < nk; ++c) vm = vmax(vm, vload(St + c * T + r));
    const __m512 mold = vload(mx + r);
    const __m512 mnew = vmax(mold, vmul(vm, vs));
    const __m512 a = vexp_softmax(vsub(mold, mnew));  // 0 on the first tile (mold = -inf)
    __m512 sum = vzero();
    for (int64_t c = 0; c < nk; c += 2) {
      const __m512 p0 = vexp_softmax(_mm512_fmsub_ps(vload(St + c * T + r), vs, mnew));
      sum = vadd(sum, p0);
      __m512 p1 = vzero();
      if (c + 1 < nk) {
        p1 = vexp_softmax(_mm512_fmsub_ps(vload(St + (c + 1) * T + r), vs, mnew));
        sum = vadd(sum, p1);
      }
      _mm512_storeu_si512(PTp + (c / 2) * T + r, pair16(p0, p1));
    }
    vstore(l + r, vfmadd(vload(l + r), a, sum));
    vstore(mx + r, mnew);
    vstore(alpha + r, a);
  }
}

}  // namespace

size_t attn_bf16_fwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return fwd_vt_floats(s, m) + static_cast<size_t>(std::max(threads, 1)) * fwd_thread_floats(m);
}

void attn_bf16_fwd(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                   float* lse, float* scratch, int threads) {
  const Dims m = dims_of(s);
  u16* VT = reinterpret_cast<u16*>(scratch);  // [b*kvh][d][sp]
  float* per_thread = scratch + fwd_vt_floats(s, m);
  const int64_t vt_sz = m.d * m.sp;
  par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
    const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
    pack_t(raw(v) + b * s.seq * s.ld_qkv + kh * m.d, s.ld_qkv, s.seq, 0, m.sp, m.d, VT + i * vt_sz,
           m.sp);
  });

  const float ninf = -std::numeric_limits<float>::infinity();
  par_for(s.batch * s.heads * m.nt, threads, [&](int64_t it, int tid) {
    // Longest rows (last query tiles) first so the dynamic schedule ends evenly.
    const int64_t qt = m.nt - 1 - it % m.nt, bh = it / m.nt;
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
    float* base = per_thread + tid * fwd_thread_floats(m);
    uint32_t* QTp = reinterpret_cast<uint32_t*>(base);        // [dh][T]
    float* St = base + round64(m.dh * T);                     // [T keys][T queries]
    uint32_t* PTp = reinterpret_cast<uint32_t*>(St + T * T);  // [T/2][T]
    float* OT = St + T * T + T * T / 2;                       // [d][T]
    float* mx = OT + round64(m.d * T);                        // [T] each
    float* l = mx + T;
    float* alpha = l + T;
    float* inv = alpha + T;
    const u16* k_head = raw(k) + b * s.seq * s.ld_qkv + kh * m.d;
    const u16* vt_head = VT + (b * s.kv_heads + kh) * vt_sz;
    pack_pairs_t(raw(q) + (b * s.seq + q0) * s.ld_qkv + h * m.d, s.ld_qkv, nq, m.dh, QTp, T);
    for (int64_t r = 0; r < T; r += 16) {
      vstore(mx + r, vset1(ninf));
      vstore(l + r, vzero());
    }
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int64_t k0 = kt * T, nk = std::min<int64_t>(T, s.seq - k0);
      gemm_tile(nk, T, m.dh, k_head + k0 * s.ld_qkv, s.ld_qkv, QTp, T, St, T, false);
      if (kt == qt) mask_tile_t(St, nk, q0, k0);
      softmax_t(St, nk, m.scale, mx, l, alpha, PTp);
      // O^T = alpha O^T + V^T P^T, the rescaling done as the accumulators are loaded.
      gemm_tile(m.d, T, (nk + 1) / 2, vt_head + k0, m.sp, PTp, T, OT, T, kt > 0, alpha);
    }
    for (int64_t r = 0; r < nq; ++r) {
      inv[r] = 1.0f / l[r];
      lse[(b * s.heads + h) * s.seq + q0 + r] = mx[r] + std::log(l[r]);
    }
    store_t(OT, inv, nq, m.d, raw(o) + (b * s.seq + q0) * s.ld_o + h * m.d, s.ld_o);
  });
}

// ---------------------------------------------------------------------------------------------
// Backward (FlashAttention-2 order, as attention_impl.h): key tiles outer, query tiles from the
// diagonal down inner; the key tiles of each (b, head) cut into up to kSplits groups of about
// equal causal work, one work item each, each with its own dQ partial (added in group order);
// per-query-head dK/dV summed over the GQA group in head order.

namespace {

constexpr int64_t kSplits = 4;

int64_t split_key_tiles(int64_t nt, int64_t* cut) {
  const int64_t n = std::min(nt, kSplits), total = nt * (nt + 1) / 2;
  int64_t g = 1, acc = 0;
  cut[0] = 0;
  for (int64_t kt = 0; kt < nt && g < n; ++kt) {
    acc += nt - kt;
    if (acc * n >= g * total && kt + 1 < nt) cut[g++] = kt + 1;
  }
  for (; g <= n; ++g) cut[g] = nt;
  return n;
}

// Shared: K^T and V^T in pairs [b*kvh][nt][dh][T], K in pairs [b*kvh][sp/2][dp], Q^T and dO^T
// [b*h][d][sp] bf16 and D = rowsum(dO o) [b*h][sp] f32, dK and dV per query head [b*h][sp][dp]
// f32, the dQ partials [b*h][splits][sp][dp] f32.
size_t bwd_pairs_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * m.nt * m.dh * T));
}
size_t bwd_kpairs_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.kv_heads * (m.sp / 2) * m.dp));
}
size_t bwd_qt_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * m.d * m.sp + 1) / 2);
}
size_t bwd_d_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * m.sp));
}
size_t bwd_head_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * m.sp * m.dp));
}
size_t bwd_dq_floats(const AttnShape& s, const Dims& m) {
  return round64(static_cast<size_t>(s.batch * s.heads * std::min(m.nt, kSplits) * m.sp * m.dp));
}
// Per thread: P and dS [T][T] f32, P and dS in pairs [T/2][T], dS as bf16 rows [T][T], the dK^T
// and dV^T accumulators [d][T].
size_t bwd_thread_floats(const Dims& m) {
  return 2 * T * T + 3 * (T * T / 2) + 2 * round64(m.d * T);
}

struct BwdThread {
  float *P, *dS;
  uint32_t *Pp, *dSp;
  u16* dSb;
  float *dKt, *dVt;
};

BwdThread bwd_thread(float* base, const Dims& m) {
  BwdThread t;
  t.P = base;
  t.dS = t.P + T * T;
  t.Pp = reinterpret_cast<uint32_t*>(t.dS + T * T);
  t.dSp = t.Pp + T * T / 2;
  t.dSb = reinterpret_cast<u16*>(t.dSp + T * T / 2);
  t.dKt = t.dS + T * T + 3 * (T * T / 2);
  t.dVt = t.dKt + round64(m.d * T);
  return t;
}

// P = exp(scale S - lse) and dS = P (dP - D) for nq rows of one tile (w.P holds S and w.dS holds
// dP on entry; both are only read): P and dS go out in pairs of rows (a row >= nq reads as 0) for
// the dV^T and dK^T products and dS as bf16 rows for the dQ product, straight from the registers.
void softmax_grad(const BwdThread& w, int64_t nq, int64_t q0, const float* lse_h, const float* D,
                  float scale) {
  const __m512 vs = vset1(scale);
  for (int64_t r = 0; r < nq; r += 2) {
    const bool hi = r + 1 < nq;
    const __m512 l0 = vset1(lse_h[q0 + r]), d0 = vset1(D[q0 + r]);
    const __m512 l1 = vset1(hi ? lse_h[q0 + r + 1] : 0.0f), d1 = vset1(hi ? D[q0 + r + 1] : 0.0f);
    for (int64_t c = 0; c < T; c += 16) {
      const __m512 p0 = vexp_softmax(_mm512_fmsub_ps(vload(w.P + r * T + c), vs, l0));
      const __m512 ds0 = vmul(p0, vsub(vload(w.dS + r * T + c), d0));
      bstore(w.dSb + r * T + c, ds0);
      __m512 p1 = vzero(), ds1 = vzero();
      if (hi) {
        p1 = vexp_softmax(_mm512_fmsub_ps(vload(w.P + (r + 1) * T + c), vs, l1));
        ds1 = vmul(p1, vsub(vload(w.dS + (r + 1) * T + c), d1));
        bstore(w.dSb + (r + 1) * T + c, ds1);
      }
      _mm512_storeu_si512(w.Pp + (r / 2) * T + c, pair16(p0, p1));
      _mm512_storeu_si512(w.dSp + (r / 2) * T + c, pair16(ds0, ds1));
    }
  }
}

}  // namespace

size_t attn_bf16_bwd_scratch(const AttnShape& s, int threads) {
  const Dims m = dims_of(s);
  return 2 * bwd_pairs_floats(s, m) + bwd_kpairs_floats(s, m) + 2 * bwd_qt_floats(s, m) +
         bwd_d_floats(s, m) + 2 * bwd_head_floats(s, m) + bwd_dq_floats(s, m) +
         static_cast<size_t>(std::max(threads, 1)) * bwd_thread_floats(m);
}

namespace {

// Packs K^T, V^T (pairs along head_dim, per key tile) and K (pairs along keys) of each kv head.
void bwd_pack_kv(const AttnShape& s, const Dims& m, const bf16* k, const bf16* v, uint32_t* KTp,
                 uint32_t* VTp, uint32_t* Kp, int threads) {
  const int64_t pt_sz = m.nt * m.dh * T, kp_sz = (m.sp / 2) * m.dp;
  par_for(s.batch * s.kv_heads, threads, [&](int64_t i, int) {
    const int64_t b = i / s.kv_heads, kh = i % s.kv_heads;
    const u16* kh_rows = raw(k) + b * s.seq * s.ld_qkv + kh * m.d;
    const u16* vh_rows = raw(v) + b * s.seq * s.ld_qkv + kh * m.d;
    for (int64_t t = 0; t < m.nt; ++t) {
      const int64_t nvalid = std::min<int64_t>(T, s.seq - t * T);
      pack_pairs_t(kh_rows + t * T * s.ld_qkv, s.ld_qkv, nvalid, m.dh,
                   KTp + i * pt_sz + t * m.dh * T, T);
      pack_pairs_t(vh_rows + t * T * s.ld_qkv, s.ld_qkv, nvalid, m.dh,
                   VTp + i * pt_sz + t * m.dh * T, T);
    }
    uint32_t* out = Kp + i * kp_sz;
    for (int64_t jp = 0; jp < m.sp / 2; ++jp)
      for (int64_t c = 0; c < m.dp; ++c) {
        const int64_t j = 2 * jp;
        const uint32_t lo = j < s.seq && c < m.d ? kh_rows[j * s.ld_qkv + c] : 0;
        const uint32_t hi = j + 1 < s.seq && c < m.d ? kh_rows[(j + 1) * s.ld_qkv + c] : 0;
        out[jp * m.dp + c] = lo | hi << 16;
      }
  });
}

// Packs Q^T and dO^T of each query head and computes D = rowsum(dO o) in f32.
void bwd_pack_q(const AttnShape& s, const Dims& m, const bf16* q, const bf16* o, const bf16* dout,
                u16* QT, u16* dOT, float* D, int threads) {
  const int64_t t_sz = m.d * m.sp;
  par_for(s.batch * s.heads, threads, [&](int64_t bh, int) {
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const u16* qh = raw(q) + b * s.seq * s.ld_qkv + h * m.d;
    const u16* doh = raw(dout) + b * s.seq * s.ld_o + h * m.d;
    const u16* oh = raw(o) + b * s.seq * s.ld_o + h * m.d;
    pack_t(qh, s.ld_qkv, s.seq, 0, m.sp, m.d, QT + bh * t_sz, m.sp);
    pack_t(doh, s.ld_o, s.seq, 0, m.sp, m.d, dOT + bh * t_sz, m.sp);
    float* Dh = D + bh * m.sp;
    for (int64_t r = 0; r < s.seq; ++r) {
      __m512 acc = vzero();
      for (int64_t c = 0; c < m.d; c += 16) {
        const int64_t n = std::min<int64_t>(16, m.d - c);
        acc = vfmadd(bload_n(doh + r * s.ld_o + c, n), bload_n(oh + r * s.ld_o + c, n), acc);
      }
      Dh[r] = hsum(acc);
    }
  });
}

// dq = (sum of the dQ partials of the groups that reach the row, in group order) / sqrt(d); dk,
// dv of kv head kh = the sum over its query heads, in head order.
void bwd_reduce(const AttnShape& s, const Dims& m, const float* dQs, int64_t ns, const int64_t* cut,
                const float* dKh, const float* dVh, bf16* dq, bf16* dk, bf16* dv, int threads) {
  const int64_t head_sz = m.sp * m.dp;
  par_for(s.batch * s.heads * m.nt, threads, [&](int64_t i, int) {
    const int64_t bh = i / m.nt, qt = i % m.nt;
    const int64_t b = bh / s.heads, h = bh % s.heads;
    const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
    for (int64_t r = q0; r < q0 + nq; ++r) {
      u16* out = raw(dq) + (b * s.seq + r) * s.ld_qkv + h * m.d;
      for (int64_t c = 0; c < m.d; c += 16) {
        const int64_t w = std::min<int64_t>(16, m.d - c);
        __m512 acc = vload(dQs + (bh * ns) * head_sz + r * m.dp + c);
        for (int64_t g = 1; g < ns && cut[g] <= qt; ++g) {
          if (cut[g] == cut[g + 1]) continue;
          acc = vadd(acc, vload(dQs + (bh * ns + g) * head_sz + r * m.dp + c));
        }
        bstore_n(out + c, vmul(acc, vset1(m.scale)), w);
      }
    }
  });
  par_for(s.batch * s.kv_heads * m.nt, threads, [&](int64_t i, int) {
    const int64_t c0 = (i % m.nt) * T, bk = i / m.nt;
    const int64_t b = bk / s.kv_heads, kh = bk % s.kv_heads;
    const int64_t rows = std::min<int64_t>(T, s.seq - c0);
    const int64_t h0 = b * s.heads + kh * m.group;
    for (int64_t r = c0; r < c0 + rows; ++r) {
      u16* ok = raw(dk) + (b * s.seq + r) * s.ld_qkv + kh * m.d;
      u16* ov = raw(dv) + (b * s.seq + r) * s.ld_qkv + kh * m.d;
      for (int64_t c = 0; c < m.d; c += 16) {
        const int64_t w = std::min<int64_t>(16, m.d - c);
        __m512 ak = vload(dKh + h0 * head_sz + r * m.dp + c);
        __m512 av = vload(dVh + h0 * head_sz + r * m.dp + c);
        for (int64_t g = 1; g < m.group; ++g) {
          ak = vadd(ak, vload(dKh + (h0 + g) * head_sz + r * m.dp + c));
          av = vadd(av, vload(dVh + (h0 + g) * head_sz + r * m.dp + c));
        }
        bstore_n(ok + c, ak, w);
        bstore_n(ov + c, av, w);
      }
    }
  });
}

// Writes column j of the f32 d x T tile src, times mul, to row j of out (f32, stride dp).
void store_cols(const float* src, int64_t nk, int64_t d, float mul, float* out, int64_t dp) {
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t c = 0; c < d; ++c) out[j * dp + c] = mul * src[c * T + j];
}

}  // namespace

void attn_bf16_bwd(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                   const bf16* dout, const float* lse, bf16* dq, bf16* dk, bf16* dv, float* scratch,
                   int threads) {
  const Dims m = dims_of(s);
  const size_t pn = bwd_pairs_floats(s, m), kn = bwd_kpairs_floats(s, m);
  const size_t qn = bwd_qt_floats(s, m), hn = bwd_head_floats(s, m);
  uint32_t* KTp = reinterpret_cast<uint32_t*>(scratch);
  uint32_t* VTp = reinterpret_cast<uint32_t*>(scratch + pn);
  uint32_t* Kp = reinterpret_cast<uint32_t*>(scratch + 2 * pn);
  u16* QT = reinterpret_cast<u16*>(scratch + 2 * pn + kn);
  u16* dOT = reinterpret_cast<u16*>(scratch + 2 * pn + kn + qn);
  float* D = scratch + 2 * pn + kn + 2 * qn;
  float* dKh = D + bwd_d_floats(s, m);
  float* dVh = dKh + hn;
  float* dQs = dVh + hn;
  float* per_thread = dQs + bwd_dq_floats(s, m);
  const int64_t head_sz = m.sp * m.dp, pt_sz = m.nt * m.dh * T, kp_sz = (m.sp / 2) * m.dp;
  const int64_t t_sz = m.d * m.sp;
  int64_t cut[kSplits + 1];
  const int64_t ns = split_key_tiles(m.nt, cut);
  bwd_pack_kv(s, m, k, v, KTp, VTp, Kp, threads);
  bwd_pack_q(s, m, q, o, dout, QT, dOT, D, threads);

  par_for(s.batch * s.heads * ns, threads, [&](int64_t item, int tid) {
    const int64_t grp = item / (s.batch * s.heads), bh = item % (s.batch * s.heads);
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / m.group;
    const int64_t kt_begin = cut[grp], kt_end = cut[grp + 1];
    if (kt_begin == kt_end) return;
    const BwdThread w = bwd_thread(per_thread + tid * bwd_thread_floats(m), m);
    float* dQ = dQs + (bh * ns + grp) * head_sz;  // [sp][dp], rows from kt_begin * T on
    const u16* qh = raw(q) + b * s.seq * s.ld_qkv + h * m.d;
    const u16* doh = raw(dout) + b * s.seq * s.ld_o + h * m.d;
    const u16* qt_h = QT + bh * t_sz;
    const u16* dot_h = dOT + bh * t_sz;
    const float* lse_h = lse + (b * s.heads + h) * s.seq;
    const float* D_h = D + bh * m.sp;
    const int64_t kvi = b * s.kv_heads + kh;
    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
      const int64_t k0 = kt * T, nk = std::min<int64_t>(T, s.seq - k0);
      const uint32_t* kt_tile = KTp + kvi * pt_sz + kt * m.dh * T;
      const uint32_t* vt_tile = VTp + kvi * pt_sz + kt * m.dh * T;
      const uint32_t* k_pairs = Kp + kvi * kp_sz + (k0 / 2) * m.dp;
      for (int64_t qt = kt; qt < m.nt; ++qt) {
        const int64_t q0 = qt * T, nq = std::min<int64_t>(T, s.seq - q0);
        const bool first = qt == kt;
        gemm_tile(nq, T, m.dh, qh + q0 * s.ld_qkv, s.ld_qkv, kt_tile, T, w.P, T, false);
        if (qt == kt || nk < T) mask_tile(w.P, nq, q0, k0, nk);
        gemm_tile(nq, T, m.dh, doh + q0 * s.ld_o, s.ld_o, vt_tile, T, w.dS, T, false);
        softmax_grad(w, nq, q0, lse_h, D_h, m.scale);
        // dV^T += dO^T P, dK^T += Q^T dS (1/sqrt(d) applied when storing), dQ += dS K.
        gemm_tile(m.d, T, (nq + 1) / 2, dot_h + q0, m.sp, w.Pp, T, w.dVt, T, !first);
        gemm_tile(m.d, T, (nq + 1) / 2, qt_h + q0, m.sp, w.dSp, T, w.dKt, T, !first);
        // The group's first key tile reaches every row it owns: it writes, later ones add.
        gemm_tile(nq, m.dp, (nk + 1) / 2, w.dSb, T, k_pairs, m.dp, dQ + q0 * m.dp, m.dp,
                  kt > kt_begin);
      }
      store_cols(w.dKt, nk, m.d, m.scale, dKh + bh * head_sz + k0 * m.dp, m.dp);
      store_cols(w.dVt, nk, m.d, 1.0f, dVh + bh * head_sz + k0 * m.dp, m.dp);
    }
  });
  bwd_reduce(s, m, dQs, ns, cut, dKh, dVh, dq, dk, dv, threads);
}

}  // namespace HP_SIMD_NS
}  // namespace hp
