// The plain-data parameter block and the tile sizes of the CUDA attention kernels, shared by the
// host dispatcher, the kernels (attention_mma.cuh, attention_simt.cuh) and the CPU emulation test
// that runs those kernel bodies. Plain C++: no CUDA header, no fmt.
#pragma once

#include <cstdint>

// Helpers below run on both sides under nvcc.
#if defined(__CUDACC__)
#define HP_HOST_DEVICE __host__ __device__
#else
#define HP_HOST_DEVICE
#endif

namespace hp::cuda::attn {

// One call's shape and pointers. Element pointers are bf16 (as raw uint16_t bits) or f32 as the
// path requires; rows t = b * seq + i with stride ld_qkv (q, k, v, dq, dk, dv) or ld_o (o, dout).
struct Params {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;     // forward output, read by the backward
  const void* dout = nullptr;  // backward only
  void* o_out = nullptr;       // forward only
  float* lse_out = nullptr;    // forward only
  const float* lse = nullptr;  // backward only
  float* dvec = nullptr;       // backward: D_i = rowsum(dO_i * O_i), [batch][heads][seq]
  float* dq_acc = nullptr;  // backward, tensor-core path: f32 dQ, [batch * seq][heads * head_dim]
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t ld_qkv = 0, ld_o = 0;
  int batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 1, group = 1;
  float scale = 1.0f;       // 1 / sqrt(head_dim)
  float scale_log2 = 1.0f;  // scale * log2(e): scores in the exp2 domain
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tensor-core forward (bf16, head_dim D in {64, 128}): a CTA of 8 warps owns 128 query rows (16
// per warp) of one (batch, head) and walks key/value tiles of 64 rows, double-buffered. Shared
// rows are padded by 8 elements (16 bytes) so ldmatrix's 8 row addresses hit 8 distinct 16-byte
// bank groups. head_dim 64 fits two CTAs per SM in 128 registers; 128 needs ~190 registers (the
// O accumulator alone is 64), one CTA of 8 warps per SM.
template <int D>
struct MmaFwdCfg {
  static constexpr int kWarps = 8, kThreads = kWarps * 32, kMinBlocks = D <= 64 ? 2 : 1;
  static constexpr int kBq = 128, kBk = 64;
  static constexpr int kLds = D + 8;  // smem row stride in elements
  static constexpr int kQBytes = kBq * kLds * 2;
  static constexpr int kKVBytes = kBk * kLds * 2;            // one of K or V, one stage
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;  // Q + 2 stages x (K, V)
};

// Tensor-core backward: a CTA of 8 warps owns 128 keys (16 per warp) of one (batch, kv head),
// keeps their dK and dV in registers and walks the query tiles of 64 rows at or below the
// diagonal for every query head of the group (Q, dO, lse, D double-buffered); dS goes through
// shared memory for dQ, which is added into an f32 accumulator with atomics.
template <int D>
struct MmaBwdCfg {
  static constexpr int kWarps = 8, kThreads = kWarps * 32;
  static constexpr int kBk = 128, kBq = 64;
  static constexpr int kLds = D + 8;               // K, V, Q, dO rows
  static constexpr int kLdsS = kBq + 8;            // dS^T rows (one per key)
  static constexpr int kKVBytes = kBk * kLds * 2;  // one of K or V
  static constexpr int kQBytes = kBq * kLds * 2;   // one of Q or dO, one stage
  static constexpr int kSBytes = kBk * kLdsS * 2;
  static constexpr int kRowBytes = kBq * 4;  // lse or D of one stage
  static constexpr int kSmemBytes = 2 * kKVBytes + 4 * kQBytes + kSBytes + 4 * kRowBytes;
};

// The f32 (and any-head_dim) SIMT path: 8 warps, tiles of 32 queries x 32 keys, rows staged in
// shared memory as f32 with head_dim padded to 32 * nc and one extra float per row (no bank
// conflicts when lanes read 32 different rows).
constexpr int kSimtThreads = 256, kSimtTile = 32, kSimtMaxHeadDim = 256;
// head_dim is padded to 32 * nc, nc in {1, 2, 3, 4, 8} (kernels exist for these).
constexpr int simt_nc(int head_dim) { return (head_dim + 31) / 32 <= 4 ? (head_dim + 31) / 32 : 8; }
HP_HOST_DEVICE constexpr int simt_lds(int nc) { return 32 * nc + 1; }
HP_HOST_DEVICE constexpr int simt_fwd_smem_bytes(int nc) {
  return 3 * kSimtTile * simt_lds(nc) * 4;
}
HP_HOST_DEVICE constexpr int simt_bwd_smem_bytes(int nc) {
  return 4 * kSimtTile * simt_lds(nc) * 4 + 2 * kSimtTile * 4;
}

// The D_i kernel: one warp per (token, head) row.
constexpr int kRowDotWarps = 8;

HP_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Launch grids (x, y) of the kernels; the launchers and the CPU emulation test both use these.
struct Grid {
  int64_t x = 1, y = 1;
};
inline Grid fwd_mma_grid(const Params& p) {
  return {int64_t{p.batch} * p.heads, ceil_div(p.seq, MmaFwdCfg<64>::kBq)};
}
inline Grid bwd_mma_grid(const Params& p) {
  return {int64_t{p.batch} * p.kv_heads, ceil_div(p.seq, MmaBwdCfg<64>::kBk)};
}
inline Grid simt_q_grid(const Params& p) {  // forward and dQ: one block per (b, h, query tile)
  return {int64_t{p.batch} * p.heads, ceil_div(p.seq, kSimtTile)};
}
inline Grid simt_kv_grid(const Params& p) {  // dK, dV: one block per (b, kv head, key tile)
  return {int64_t{p.batch} * p.kv_heads, ceil_div(p.seq, kSimtTile)};
}
inline int64_t row_dot_blocks(const Params& p) {
  return ceil_div(int64_t{p.batch} * p.seq * p.heads, kRowDotWarps);
}

}  // namespace hp::cuda::attn
