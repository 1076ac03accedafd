// The SIMT attention kernel bodies: plain f32 FMAs (no tensor cores, no TF32), any head_dim up to
// 256, f32 or bf16 storage (T = float or bf16raw), deterministic (fixed summation order, no
// atomics). The exactness path for f32 and the fallback for bf16 shapes the tensor-core path does
// not take. Also the D_i = rowsum(dO_i * O_i) body both backward paths use. Primitives as in
// attention_mma.cuh.
//
// Tiles are 32 queries x 32 keys; the 256 threads are 8 warps, warp w owning rows w, w + 8,
// w + 16, w + 24 of the tile (tile-local) and lane l owning key (or query) l of the other side
// and columns l, l + 32, ... of head_dim (padded to 32 * NC with zeros).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_params.h"
#if defined(__CUDACC__)
#include "kernels/cuda/attention_primitives.cuh"
#elif !defined(HP_ATTN_HOST_PRIMITIVES)
#error "the attention kernel bodies need a host emulation of the primitives (warp_emulator.h)"
#endif

namespace hp::cuda::attn {

HP_DEV float load_f32(const float* p) { return *p; }
HP_DEV float load_f32(const bf16raw* p) { return bf16_to_f32(*p); }
HP_DEV void store_f32(float* p, float v) { *p = v; }
HP_DEV void store_f32(bf16raw* p, float v) { *p = f32_to_bf16(v); }

HP_DEV float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, shfl_xor(v, m));
  return v;
}
// Butterfly sum: every lane ends with the same bits (each step adds the same two values).
HP_DEV float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}

// s[r][c] = g[(row0 + r) * ld + c] as f32 for r < 32, c < 32 * NC; zero past seq and head_dim.
template <typename T, int NC>
HP_DEV void simt_load_rows(float* s, const T* g, int64_t ld, int row0, int seq, int d, int tid) {
  constexpr int kDp = 32 * NC, kLds = simt_lds(NC);
  for (int i = tid; i < kSimtTile * kDp; i += kSimtThreads) {
    const int r = i / kDp, c = i % kDp, row = row0 + r;
    s[r * kLds + c] =
        (row < seq && c < d) ? load_f32(g + static_cast<int64_t>(row) * ld + c) : 0.0f;
  }
}

// dot(a[0..32*NC), b[0..32*NC)) for the 4 rows a + w*lds.. of this warp against one b row, in
// column order.
template <int NC>
HP_DEV void simt_dot4(float (&out)[4], const float* a, const float* b) {
  constexpr int kLds = simt_lds(NC);
#pragma unroll
  for (int m = 0; m < 4; ++m) out[m] = 0.0f;
  for (int x = 0; x < 32 * NC; ++x) {
    const float bx = b[x];
#pragma unroll
    for (int m = 0; m < 4; ++m) out[m] += a[m * 8 * kLds + x] * bx;
  }
}

// Forward. bx = b * heads + h, by = q tile slot (last tile first).
template <typename T, int NC>
HP_DEV void fwd_simt_body(const Params& p, int bx, int by, int tid, unsigned char* smem) {
  constexpr int kLds = simt_lds(NC);
  float* sQ = reinterpret_cast<float*>(smem);
  float* sK = sQ + kSimtTile * kLds;
  float* sV = sK + kSimtTile * kLds;
  const int n_qt = static_cast<int>(ceil_div(p.seq, kSimtTile));
  const int qt = n_qt - 1 - by, q0 = qt * kSimtTile;
  const int b = bx / p.heads, h = bx % p.heads, kh = h / p.group, d = p.head_dim;
  const int warp = tid >> 5, lane = tid & 31;
  const int64_t tok0 = static_cast<int64_t>(b) * p.seq;
  const T* gk = static_cast<const T*>(p.k) + tok0 * p.ld_qkv + kh * d;
  const T* gv = static_cast<const T*>(p.v) + tok0 * p.ld_qkv + kh * d;
  simt_load_rows<T, NC>(sQ, static_cast<const T*>(p.q) + tok0 * p.ld_qkv + h * d, p.ld_qkv, q0,
                        p.seq, d, tid);

  float m[4], l[4], acc[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int n = 0; n < NC; ++n) acc[r][n] = 0.0f;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    block_sync();  // the previous tile is consumed (and, the first time, Q is loaded)
    simt_load_rows<T, NC>(sK, gk, p.ld_qkv, kt * kSimtTile, p.seq, d, tid);
    simt_load_rows<T, NC>(sV, gv, p.ld_qkv, kt * kSimtTile, p.seq, d, tid);
    block_sync();
    float s[4], pr[4];
    simt_dot4<NC>(s, sQ + warp * kLds, sK + lane * kLds);
    const int key = kt * kSimtTile + lane;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = q0 + warp + 8 * r;
      const float x = key > row ? -INFINITY : s[r] * p.scale;
      const float m_new = fmaxf(m[r], warp_max(x));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[r] - m_use);
      pr[r] = expf(x - m_use);
      l[r] = l[r] * alpha + warp_sum(pr[r]);
      m[r] = m_new;
#pragma unroll
      for (int n = 0; n < NC; ++n) acc[r][n] *= alpha;
    }
    for (int j = 0; j < kSimtTile; ++j) {
      float pj[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) pj[r] = shfl_idx(pr[r], j);
#pragma unroll
      for (int n = 0; n < NC; ++n) {
        const float vv = sV[j * kLds + lane + 32 * n];
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[r][n] += pj[r] * vv;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = q0 + warp + 8 * r;
    if (row >= p.seq) continue;
    T* out = static_cast<T*>(p.o_out) + (tok0 + row) * p.ld_o + h * d;
#pragma unroll
    for (int n = 0; n < NC; ++n)
      if (lane + 32 * n < d) store_f32(out + lane + 32 * n, acc[r][n] / l[r]);
    if (lane == 0) p.lse_out[static_cast<int64_t>(bx) * p.seq + row] = m[r] + logf(l[r]);
  }
}

// Backward dK, dV. bx = b * kv_heads + kh, by = key tile (tile 0 first: it has the most work).
// Loops over the group's query heads and the query tiles at or after the key tile.
template <typename T, int NC>
HP_DEV void bwd_simt_dkdv_body(const Params& p, int bx, int by, int tid, unsigned char* smem) {
  constexpr int kLds = simt_lds(NC);
  float* sK = reinterpret_cast<float*>(smem);
  float* sV = sK + kSimtTile * kLds;
  float* sQ = sV + kSimtTile * kLds;
  float* sdO = sQ + kSimtTile * kLds;
  float* sL = sdO + kSimtTile * kLds;
  float* sD = sL + kSimtTile;
  const int b = bx / p.kv_heads, kh = bx % p.kv_heads, d = p.head_dim;
  const int k0 = by * kSimtTile, n_qt = static_cast<int>(ceil_div(p.seq, kSimtTile));
  const int warp = tid >> 5, lane = tid & 31;
  const int64_t tok0 = static_cast<int64_t>(b) * p.seq;
  simt_load_rows<T, NC>(sK, static_cast<const T*>(p.k) + tok0 * p.ld_qkv + kh * d, p.ld_qkv, k0,
                        p.seq, d, tid);
  simt_load_rows<T, NC>(sV, static_cast<const T*>(p.v) + tok0 * p.ld_qkv + kh * d, p.ld_qkv, k0,
                        p.seq, d, tid);
  float dk[4][NC], dv[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int n = 0; n < NC; ++n) dk[r][n] = dv[r][n] = 0.0f;

  for (int h = kh * p.group; h < (kh + 1) * p.group; ++h) {
    const int64_t rows = (static_cast<int64_t>(b) * p.heads + h) * p.seq;
    for (int qt = by; qt < n_qt; ++qt) {
      const int q0 = qt * kSimtTile;
      block_sync();  // the previous query tile is consumed
      simt_load_rows<T, NC>(sQ, static_cast<const T*>(p.q) + tok0 * p.ld_qkv + h * d, p.ld_qkv, q0,
                            p.seq, d, tid);
      simt_load_rows<T, NC>(sdO, static_cast<const T*>(p.dout) + tok0 * p.ld_o + h * d, p.ld_o, q0,
                            p.seq, d, tid);
      if (tid < 2 * kSimtTile) {
        const int r = tid % kSimtTile, row = q0 + r;
        const float val = row < p.seq ? (tid < kSimtTile ? p.lse : p.dvec)[rows + row] : 0.0f;
        (tid < kSimtTile ? sL : sD)[r] = val;
      }
      block_sync();
      float s[4], dp[4], pr[4], ds[4];
      simt_dot4<NC>(s, sK + warp * kLds, sQ + lane * kLds);
      simt_dot4<NC>(dp, sV + warp * kLds, sdO + lane * kLds);
      const int query = q0 + lane;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = k0 + warp + 8 * r;
        pr[r] = (query >= key && query < p.seq) ? expf(s[r] * p.scale - sL[lane]) : 0.0f;
        ds[r] = pr[r] * (dp[r] - sD[lane]);
      }
      for (int i = 0; i < kSimtTile; ++i) {
        float pi[4], si[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          pi[r] = shfl_idx(pr[r], i);
          si[r] = shfl_idx(ds[r], i);
        }
#pragma unroll
        for (int n = 0; n < NC; ++n) {
          const float ov = sdO[i * kLds + lane + 32 * n], qv = sQ[i * kLds + lane + 32 * n];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            dv[r][n] += pi[r] * ov;
            dk[r][n] += si[r] * qv;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int key = k0 + warp + 8 * r;
    if (key >= p.seq) continue;
    const int64_t at = (tok0 + key) * p.ld_qkv + kh * d;
#pragma unroll
    for (int n = 0; n < NC; ++n) {
      if (lane + 32 * n >= d) continue;
      store_f32(static_cast<T*>(p.dk) + at + lane + 32 * n, dk[r][n] * p.scale);
      store_f32(static_cast<T*>(p.dv) + at + lane + 32 * n, dv[r][n]);
    }
  }
}

// Backward dQ, in its own pass over the key tiles (no atomics). bx = b * heads + h, by = q tile
// slot (last tile first).
template <typename T, int NC>
HP_DEV void bwd_simt_dq_body(const Params& p, int bx, int by, int tid, unsigned char* smem) {
  constexpr int kLds = simt_lds(NC);
  float* sQ = reinterpret_cast<float*>(smem);
  float* sdO = sQ + kSimtTile * kLds;
  float* sK = sdO + kSimtTile * kLds;
  float* sV = sK + kSimtTile * kLds;
  const int n_qt = static_cast<int>(ceil_div(p.seq, kSimtTile));
  const int qt = n_qt - 1 - by, q0 = qt * kSimtTile;
  const int b = bx / p.heads, h = bx % p.heads, kh = h / p.group, d = p.head_dim;
  const int warp = tid >> 5, lane = tid & 31;
  const int64_t tok0 = static_cast<int64_t>(b) * p.seq;
  const T* gk = static_cast<const T*>(p.k) + tok0 * p.ld_qkv + kh * d;
  const T* gv = static_cast<const T*>(p.v) + tok0 * p.ld_qkv + kh * d;
  simt_load_rows<T, NC>(sQ, static_cast<const T*>(p.q) + tok0 * p.ld_qkv + h * d, p.ld_qkv, q0,
                        p.seq, d, tid);
  simt_load_rows<T, NC>(sdO, static_cast<const T*>(p.dout) + tok0 * p.ld_o + h * d, p.ld_o, q0,
                        p.seq, d, tid);
  float lse[4], dd[4], acc[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = q0 + warp + 8 * r;
    const int64_t at = static_cast<int64_t>(bx) * p.seq + row;
    lse[r] = row < p.seq ? p.lse[at] : 0.0f;
    dd[r] = row < p.seq ? p.dvec[at] : 0.0f;
#pragma unroll
    for (int n = 0; n < NC; ++n) acc[r][n] = 0.0f;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    block_sync();
    simt_load_rows<T, NC>(sK, gk, p.ld_qkv, kt * kSimtTile, p.seq, d, tid);
    simt_load_rows<T, NC>(sV, gv, p.ld_qkv, kt * kSimtTile, p.seq, d, tid);
    block_sync();
    float s[4], dp[4], ds[4];
    simt_dot4<NC>(s, sQ + warp * kLds, sK + lane * kLds);
    simt_dot4<NC>(dp, sdO + warp * kLds, sV + lane * kLds);
    const int key = kt * kSimtTile + lane;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = q0 + warp + 8 * r;
      const float pr = key <= row ? expf(s[r] * p.scale - lse[r]) : 0.0f;
      ds[r] = pr * (dp[r] - dd[r]);
    }
    for (int j = 0; j < kSimtTile; ++j) {
      float sj[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) sj[r] = shfl_idx(ds[r], j);
#pragma unroll
      for (int n = 0; n < NC; ++n) {
        const float kv = sK[j * kLds + lane + 32 * n];
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[r][n] += sj[r] * kv;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = q0 + warp + 8 * r;
    if (row >= p.seq) continue;
    T* out = static_cast<T*>(p.dq) + (tok0 + row) * p.ld_qkv + h * d;
#pragma unroll
    for (int n = 0; n < NC; ++n)
      if (lane + 32 * n < d) store_f32(out + lane + 32 * n, acc[r][n] * p.scale);
  }
}

// dvec[b][h][i] = sum over c of dout * o (f32, column order within each lane, then a butterfly).
// One warp per (token, head) row: w = (b * seq + i) * heads + h.
template <typename T>
HP_DEV void row_dot_body(const Params& p, int64_t w, int lane) {
  const int64_t tok = w / p.heads;
  if (tok >= static_cast<int64_t>(p.batch) * p.seq) return;
  const int h = static_cast<int>(w % p.heads);
  const T* o = static_cast<const T*>(p.o) + tok * p.ld_o + h * p.head_dim;
  const T* dout = static_cast<const T*>(p.dout) + tok * p.ld_o + h * p.head_dim;
  float acc = 0.0f;
  for (int c = lane; c < p.head_dim; c += 32) acc += load_f32(o + c) * load_f32(dout + c);
  acc = warp_sum(acc);
  const int64_t b = tok / p.seq, i = tok % p.seq;
  if (lane == 0) p.dvec[(b * p.heads + h) * p.seq + i] = acc;
}

}  // namespace hp::cuda::attn
