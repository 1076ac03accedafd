// The bf16 tensor-core attention kernel bodies (FlashAttention-2 style, mma.sync m16n8k16 with
// ldmatrix and cp.async), forward and backward, for head_dim 64 and 128. Bodies take their block
// and thread index as arguments and call the primitives of attention_primitives.cuh (under nvcc)
// or of the CPU emulation in tests/cuda_emu (which must be included first on the host).
//
// Fragment layouts (PTX ISA, m16n8k16; g = lane / 4, t = lane % 4):
//   A 16x16 (4 regs): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8  (2 regs): b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C 16x8  (4 f32):  c0, c1 (g, 2t / 2t+1), c2, c3 (g+8, 2t / 2t+1)
// So an accumulator tile over 16 columns (two C blocks) is, packed to bf16, the A fragment of the
// next product: P and dS never leave registers on their way to P*V, P^T*dO and dS^T*Q.
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

// Lane address for ldsm_x4 of a 16x16 A tile (rows m0.., cols k0..) stored row-major: lanes
// 0-15 give rows 0-15 at column k0, lanes 16-31 rows 0-15 at k0 + 8 -> r = a0, a1, a2, a3.
HP_DEV const bf16raw* a_addr(const bf16raw* s, int lds, int m0, int k0, int lane) {
  return s + (m0 + (lane & 15)) * lds + k0 + (lane >> 4) * 8;
}
// Lane address for ldsm_x4 of the B fragments of two 8-wide n blocks when B[k][n] = S[n][k]
// (S row-major, rows n0..n0+15, cols k0..k0+15): r = b0, b1 of block n0, b0, b1 of n0 + 8.
HP_DEV const bf16raw* bt_addr(const bf16raw* s, int lds, int n0, int k0, int lane) {
  return s + (n0 + (lane & 7) + (lane >> 4) * 8) * lds + k0 + ((lane >> 3) & 1) * 8;
}
// Lane address for ldsm_x4_t when B[k][n] = S[k][n] (S row-major, rows k0..k0+15, cols
// n0..n0+15): r = b0, b1 of block n0, b0, b1 of n0 + 8. Also the A fragment of A[m][k] = S[k][m]
// with the roles named (k0 <-> m0) by at_addr below.
HP_DEV const bf16raw* b_addr_t(const bf16raw* s, int lds, int k0, int n0, int lane) {
  return s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * lds + n0 + (lane >> 4) * 8;
}
// Lane address for ldsm_x4_t of a 16x16 A tile with A[m][k] = S[k][m] (S row-major, rows
// k0..k0+15, cols m0..m0+15): r = a0, a1, a2, a3.
HP_DEV const bf16raw* at_addr(const bf16raw* s, int lds, int m0, int k0, int lane) {
  return s + (k0 + (lane & 7) + (lane >> 4) * 8) * lds + m0 + ((lane >> 3) & 1) * 8;
}

// Copies rows row0..row0+ROWS-1 (D bf16 each, row stride ld in global memory) into shared rows of
// stride D + 8 with 16-byte cp.async; rows at or past seq are zero-filled.
template <int D, int ROWS, int NT>
HP_DEV void load_rows(bf16raw* s, const bf16raw* g, int64_t ld, int row0, int seq, int tid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
  static_assert(kTotal % NT == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int it = 0; it < kTotal / NT; ++it) {
    const int c = tid + it * NT, r = c / kChunks, ch = c % kChunks;
    const int row = row0 + r;
    const bool ok = row < seq;
    cp_async16(s + r * (D + 8) + ch * 8, g + static_cast<int64_t>(ok ? row : 0) * ld + ch * 8, ok);
  }
}

// Packs columns 16kk..16kk+15 of a 16-row accumulator tile (C blocks 2kk and 2kk+1) into the A
// fragment of a product that contracts over those columns.
HP_DEV void pack_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// One key tile of the forward's online softmax, in the exp2 domain (scores scaled by
// scale * log2 e inside the exponent), for this lane's two rows (wrow + g, wrow + g + 8): masks
// the keys after each row (only tiles reaching past the warp's first row), rescales the running
// sums and the O accumulator by the new row maxima, and turns s into the tile's probabilities.
template <int D, int kBk>
HP_DEV void fwd_online_softmax(float (&s)[kBk / 8][4], float (&acc)[D / 8][4], float (&row_max)[2],
                               float (&row_sum)[2], int k0, int wrow, int g, int t,
                               float scale_log2) {
  if (k0 + kBk - 1 > wrow) {
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (k0 + n * 8 + 2 * t + (e & 1) > wrow + g + 8 * (e >> 1)) s[n][e] = -INFINITY;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, shfl_xor(mx, 1));
    mx = fmaxf(mx, shfl_xor(mx, 2));
    const float m_new = fmaxf(row_max[r], mx * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet
    const float alpha = fast_exp2(row_max[r] - m_use);
    row_max[r] = m_new;
    row_sum[r] *= alpha;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][2 * r] *= alpha;
      acc[n][2 * r + 1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n) {
      s[n][2 * r] = fast_exp2(fmaf(s[n][2 * r], scale_log2, -m_use));
      s[n][2 * r + 1] = fast_exp2(fmaf(s[n][2 * r + 1], scale_log2, -m_use));
      row_sum[r] += s[n][2 * r] + s[n][2 * r + 1];
    }
  }
}

// Forward. blockIdx: bx = b * heads + h, by = q tile slot (the last tiles, with the most keys,
// run first). Writes o rows and lse for this tile.
template <int D>
HP_DEV void fwd_mma_body(const Params& p, int bx, int by, int tid, unsigned char* smem) {
  using C = MmaFwdCfg<D>;
  constexpr int kLds = C::kLds, kBq = C::kBq, kBk = C::kBk;
  const int n_qt = static_cast<int>(ceil_div(p.seq, kBq));
  const int q0 = (n_qt - 1 - by) * kBq;
  const int b = bx / p.heads, h = bx % p.heads, kh = h / p.group;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t tok0 = static_cast<int64_t>(b) * p.seq;

  bf16raw* sQ = reinterpret_cast<bf16raw*>(smem);
  bf16raw* sKV = sQ + kBq * kLds;  // stage s: K at sKV + 2s * kBk * kLds, V right after it
  const bf16raw* gq = static_cast<const bf16raw*>(p.q) + tok0 * p.ld_qkv + h * D;
  const bf16raw* gk = static_cast<const bf16raw*>(p.k) + tok0 * p.ld_qkv + kh * D;
  const bf16raw* gv = static_cast<const bf16raw*>(p.v) + tok0 * p.ld_qkv + kh * D;

  const int kv_end = q0 + kBq < p.seq ? q0 + kBq : p.seq;  // keys 0..kv_end-1 are needed
  const int n_kv = static_cast<int>(ceil_div(kv_end, kBk));
  load_rows<D, kBq, C::kThreads>(sQ, gq, p.ld_qkv, q0, p.seq, tid);
  load_rows<D, kBk, C::kThreads>(sKV, gk, p.ld_qkv, 0, p.seq, tid);
  load_rows<D, kBk, C::kThreads>(sKV + kBk * kLds, gv, p.ld_qkv, 0, p.seq, tid);
  cp_async_commit();

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int wrow = q0 + warp * 16;  // this warp's first query row; it owns rows wrow + g, + g + 8

  for (int kt = 0; kt < n_kv; ++kt) {
    cp_async_wait_all();
    block_sync();  // tile kt visible to all; every warp is done with tile kt - 1's stage
    if (kt + 1 < n_kv) {
      bf16raw* nk = sKV + ((kt + 1) & 1) * 2 * kBk * kLds;
      load_rows<D, kBk, C::kThreads>(nk, gk, p.ld_qkv, (kt + 1) * kBk, p.seq, tid);
      load_rows<D, kBk, C::kThreads>(nk + kBk * kLds, gv, p.ld_qkv, (kt + 1) * kBk, p.seq, tid);
      cp_async_commit();
    }
    const int k0 = kt * kBk;
    if (k0 > wrow + 15) continue;  // every key of the tile is after every row of this warp
    const bf16raw* sK = sKV + (kt & 1) * 2 * kBk * kLds;
    const bf16raw* sV = sK + kBk * kLds;

    float s[kBk / 8][4];  // S = Q K^T for 16 rows x 64 keys
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, a_addr(sQ, kLds, warp * 16, kk * 16, lane));
#pragma unroll
      for (int n2 = 0; n2 < kBk / 16; ++n2) {
        uint32_t bb[4];
        ldsm_x4(bb, bt_addr(sK, kLds, n2 * 16, kk * 16, lane));
        mma_bf16(s[2 * n2], a, bb[0], bb[1]);
        mma_bf16(s[2 * n2 + 1], a, bb[2], bb[3]);
      }
    }

    fwd_online_softmax<D, kBk>(s, acc, row_max, row_sum, k0, wrow, g, t, p.scale_log2);

    // O += P V: P from registers, V through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t a[4];
      pack_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int n2 = 0; n2 < D / 16; ++n2) {
        uint32_t bb[4];
        ldsm_x4_t(bb, b_addr_t(sV, kLds, kk * 16, n2 * 16, lane));
        mma_bf16(acc[2 * n2], a, bb[0], bb[1]);
        mma_bf16(acc[2 * n2 + 1], a, bb[2], bb[3]);
      }
    }
  }

  // Each row's sum is spread over the 4 lanes of its quad.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += shfl_xor(l, 1);
    l += shfl_xor(l, 2);
    const int row = wrow + g + 8 * r;
    if (row >= p.seq) continue;
    const float inv = 1.0f / l;
    uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<bf16raw*>(p.o_out) +
                                                (tok0 + row) * p.ld_o + h * D + 2 * t);
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      out[n * 4] = pack_bf16(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    if (t == 0) p.lse_out[static_cast<int64_t>(bx) * p.seq + row] = (row_max[r] + log2f(l)) * kLn2;
  }
}

// Backward, phase 1 for one warp (16 keys kw.. of the tile) against one query tile, in slices of
// kSlice queries: S^T, dP^T, P^T, dS^T in registers, then dV += P^T dO and dK += dS^T Q, and
// dS^T into shared memory. Slicing the queries and packing P^T and dS^T to bf16 (the operand type
// of the products that read them) as soon as they exist keeps the f32 tiles beside the 2 x D / 2
// dK, dV accumulators small (no spills at D = 128).
template <int D>
HP_DEV void bwd_mma_keys(const Params& p, const bf16raw* sK, const bf16raw* sV, const bf16raw* sQ,
                         const bf16raw* sdO, const float* sLse, const float* sD, bf16raw* sdS,
                         int k0, int q0, int warp, int lane, float (&dk)[D / 8][4],
                         float (&dv)[D / 8][4]) {
  using C = MmaBwdCfg<D>;
  constexpr int kLds = C::kLds, kSlice = 32;
  const int g = lane >> 2, t = lane & 3, kw = warp * 16;
  // Only tiles reaching before this warp's last key, or past the sequence, mask.
  const bool mask = q0 < k0 + kw + 15 || q0 + C::kBq > p.seq;
#pragma unroll 1
  for (int qs = 0; qs < C::kBq; qs += kSlice) {
    float s[kSlice / 8][4], dp[kSlice / 8][4];
#pragma unroll
    for (int n = 0; n < kSlice / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {  // S^T = K Q^T
      uint32_t a[4];
      ldsm_x4(a, a_addr(sK, kLds, kw, kk * 16, lane));
#pragma unroll
      for (int n2 = 0; n2 < kSlice / 16; ++n2) {
        uint32_t bb[4];
        ldsm_x4(bb, bt_addr(sQ, kLds, qs + n2 * 16, kk * 16, lane));
        mma_bf16(s[2 * n2], a, bb[0], bb[1]);
        mma_bf16(s[2 * n2 + 1], a, bb[2], bb[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {  // dP^T = V dO^T
      uint32_t a[4];
      ldsm_x4(a, a_addr(sV, kLds, kw, kk * 16, lane));
#pragma unroll
      for (int n2 = 0; n2 < kSlice / 16; ++n2) {
        uint32_t bb[4];
        ldsm_x4(bb, bt_addr(sdO, kLds, qs + n2 * 16, kk * 16, lane));
        mma_bf16(dp[2 * n2], a, bb[0], bb[1]);
        mma_bf16(dp[2 * n2 + 1], a, bb[2], bb[3]);
      }
    }
    // P^T = exp(S^T * scale - lse) (0 where the query is before the key or past the sequence);
    // dS^T = P^T (dP^T - D), without the 1/sqrt(d) (applied to dK and dQ when stored).
#pragma unroll
    for (int n = 0; n < kSlice / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = qs + n * 8 + 2 * t + (e & 1);
        const int query = q0 + qi, key = k0 + kw + g + 8 * (e >> 1);
        float pv = fast_exp2(s[n][e] * p.scale_log2 - sLse[qi] * kLog2e);
        if (mask && (query < key || query >= p.seq)) pv = 0.0f;
        s[n][e] = pv;
        dp[n][e] = pv * (dp[n][e] - sD[qi]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kSlice / 16; ++kk) {  // dV += P^T dO, dK += dS^T Q
      uint32_t ap[4], as[4];
      pack_a(ap, s[2 * kk], s[2 * kk + 1]);
      pack_a(as, dp[2 * kk], dp[2 * kk + 1]);
      // as = rows g, g + 8 of query blocks 2kk, 2kk + 1 of the slice: dS^T into shared memory.
      bf16raw* row = sdS + (kw + g) * C::kLdsS + qs + kk * 16 + 2 * t;
      *reinterpret_cast<uint32_t*>(row) = as[0];
      *reinterpret_cast<uint32_t*>(row + 8 * C::kLdsS) = as[1];
      *reinterpret_cast<uint32_t*>(row + 8) = as[2];
      *reinterpret_cast<uint32_t*>(row + 8 * C::kLdsS + 8) = as[3];
      const int qrow = qs + kk * 16;
#pragma unroll
      for (int n2 = 0; n2 < D / 16; ++n2) {
        uint32_t bo[4], bq[4];
        ldsm_x4_t(bo, b_addr_t(sdO, kLds, qrow, n2 * 16, lane));
        mma_bf16(dv[2 * n2], ap, bo[0], bo[1]);
        mma_bf16(dv[2 * n2 + 1], ap, bo[2], bo[3]);
        ldsm_x4_t(bq, b_addr_t(sQ, kLds, qrow, n2 * 16, lane));
        mma_bf16(dk[2 * n2], as, bq[0], bq[1]);
        mma_bf16(dk[2 * n2 + 1], as, bq[2], bq[3]);
      }
    }
  }
}

// Backward, phase 2: dQ[64 x D] += dS[64 x 128] K[128 x D]; warp w takes query rows
// 16 (w % 4).. and half of the columns, (w / 4) * D / 2.., and adds them into dq_acc.
template <int D>
HP_DEV void bwd_mma_dq(const Params& p, const bf16raw* sK, const bf16raw* sdS, int64_t tok0, int h,
                       int q0, int warp, int lane) {
  using C = MmaBwdCfg<D>;
  const int g = lane >> 2, t = lane & 3;
  const int qr = (warp & 3) * 16, dc = (warp >> 2) * (D / 2);
  float acc[D / 16][4];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < C::kBk / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4_t(a, at_addr(sdS, C::kLdsS, qr, kk * 16, lane));
#pragma unroll
    for (int n2 = 0; n2 < D / 32; ++n2) {
      uint32_t bb[4];
      ldsm_x4_t(bb, b_addr_t(sK, C::kLds, kk * 16, dc + n2 * 16, lane));
      mma_bf16(acc[2 * n2], a, bb[0], bb[1]);
      mma_bf16(acc[2 * n2 + 1], a, bb[2], bb[3]);
    }
  }
  const int64_t ld = static_cast<int64_t>(p.heads) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + qr + g + 8 * r;
    if (row >= p.seq) continue;
    float* dst = p.dq_acc + (tok0 + row) * ld + h * D + dc + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 16; ++n) red_add2(dst + n * 8, acc[n][2 * r], acc[n][2 * r + 1]);
  }
}

// Backward. blockIdx: bx = b * kv_heads + kh, by = key tile (tile 0 has the most query tiles
// and runs first). Writes dK, dV of these keys; adds into dq_acc.
template <int D>
HP_DEV void bwd_mma_body(const Params& p, int bx, int by, int tid, unsigned char* smem) {
  using C = MmaBwdCfg<D>;
  constexpr int kLds = C::kLds, kBq = C::kBq, kBk = C::kBk, kNT = C::kThreads;
  const int b = bx / p.kv_heads, kh = bx % p.kv_heads;
  const int k0 = by * kBk;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t tok0 = static_cast<int64_t>(b) * p.seq;

  bf16raw* sK = reinterpret_cast<bf16raw*>(smem);
  bf16raw* sV = sK + kBk * kLds;
  bf16raw* sQ = sV + kBk * kLds;       // 2 stages
  bf16raw* sdO = sQ + 2 * kBq * kLds;  // 2 stages
  bf16raw* sdS = sdO + 2 * kBq * kLds;
  float* sLse = reinterpret_cast<float*>(sdS + kBk * C::kLdsS);  // 2 stages
  float* sD = sLse + 2 * kBq;                                    // 2 stages

  load_rows<D, kBk, kNT>(sK, static_cast<const bf16raw*>(p.k) + tok0 * p.ld_qkv + kh * D, p.ld_qkv,
                         k0, p.seq, tid);
  load_rows<D, kBk, kNT>(sV, static_cast<const bf16raw*>(p.v) + tok0 * p.ld_qkv + kh * D, p.ld_qkv,
                         k0, p.seq, tid);

  // Iterations run over (query head of the group, query tile from the diagonal on).
  const int qt0 = k0 / kBq, n_qt = static_cast<int>(ceil_div(p.seq, kBq));
  const int per_head = n_qt - qt0, n_it = p.group * per_head;
  auto load_stage = [&](int it, int stage) {
    const int h = kh * p.group + it / per_head, q0 = (qt0 + it % per_head) * kBq;
    load_rows<D, kBq, kNT>(sQ + stage * kBq * kLds,
                           static_cast<const bf16raw*>(p.q) + tok0 * p.ld_qkv + h * D, p.ld_qkv, q0,
                           p.seq, tid);
    load_rows<D, kBq, kNT>(sdO + stage * kBq * kLds,
                           static_cast<const bf16raw*>(p.dout) + tok0 * p.ld_o + h * D, p.ld_o, q0,
                           p.seq, tid);
    const int64_t rows = (static_cast<int64_t>(b) * p.heads + h) * p.seq;
    if (tid < 2 * kBq) {
      const int r = tid % kBq, row = q0 + r;
      const bool ok = row < p.seq;
      const float* src = (tid < kBq ? p.lse : p.dvec) + rows + (ok ? row : 0);
      cp_async4((tid < kBq ? sLse : sD) + stage * kBq + r, src, ok);
    }
  };
  load_stage(0, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  for (int it = 0; it < n_it; ++it) {
    const int stage = it & 1;
    cp_async_wait_all();
    block_sync();  // stage it visible; every warp is done with stage it - 1 and with sdS
    if (it + 1 < n_it) {
      load_stage(it + 1, stage ^ 1);
      cp_async_commit();
    }
    const int h = kh * p.group + it / per_head, q0 = (qt0 + it % per_head) * kBq;
    if (k0 + warp * 16 > q0 + kBq - 1) {  // every key of this warp is after every query
#pragma unroll
      for (int n = 0; n < kBq / 8; ++n) {
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g) * C::kLdsS + n * 8 + 2 * t) = 0u;
        *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + 8) * C::kLdsS + n * 8 + 2 * t) = 0u;
      }
    } else {
      bwd_mma_keys<D>(p, sK, sV, sQ + stage * kBq * kLds, sdO + stage * kBq * kLds,
                      sLse + stage * kBq, sD + stage * kBq, sdS, k0, q0, warp, lane, dk, dv);
    }
    block_sync();  // dS^T complete
    bwd_mma_dq<D>(p, sK, sdS, tok0, h, q0, warp, lane);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + warp * 16 + g + 8 * r;
    if (key >= p.seq) continue;
    const int64_t at = (tok0 + key) * p.ld_qkv + kh * D + 2 * t;
    uint32_t* odk = reinterpret_cast<uint32_t*>(static_cast<bf16raw*>(p.dk) + at);
    uint32_t* odv = reinterpret_cast<uint32_t*>(static_cast<bf16raw*>(p.dv) + at);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      odk[n * 4] = pack_bf16(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      odv[n * 4] = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dq (bf16, stride ld_qkv) = dq_acc * scale; one element per thread of a flat index.
HP_DEV void dq_convert_body(const Params& p, int64_t idx) {
  const int64_t hd = static_cast<int64_t>(p.heads) * p.head_dim;
  if (idx >= static_cast<int64_t>(p.batch) * p.seq * hd) return;
  const int64_t row = idx / hd, col = idx % hd;
  static_cast<bf16raw*>(p.dq)[row * p.ld_qkv + col] = f32_to_bf16(p.dq_acc[idx] * p.scale);
}

}  // namespace hp::cuda::attn
