// The CUDA attention kernel bodies (src/kernels/cuda/attention_mma.cuh, attention_simt.cuh) run on
// a CPU emulation of thread blocks (warp_emulator.h) over small shapes, against the double
// reference. Needs no GPU: it checks the tiling, causal masking, fragment layouts, ldmatrix lane
// addresses, cp.async pipelining and barriers of the real kernel source on every build. The grids
// come from the same helpers the launchers use; what it cannot check (register spills, real
// concurrency, timing) the GPU test (tests/cuda_attn) does. Tolerances: see that test.
// clang-format off
#include "warp_emulator.h"  // first: the kernel bodies included below call its primitives
// clang-format on

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../cuda_attn/attention_reference.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_params.h"
#include "kernels/cuda/attention_simt.cuh"

namespace hp {
namespace {

using cuda::attn::bf16raw;
using cuda::attn::Grid;
using cuda::attn::Params;
using Body = std::function<void(int bx, int by, int tid, unsigned char* smem)>;

// Every block of the grid, each on a fresh emulated block with its own scheduling seed.
void run_grid(Grid g, int threads, int smem_bytes, const Body& body) {
  std::vector<unsigned char> smem(smem_bytes);
  uint32_t seed = 1;
  for (int64_t by = 0; by < g.y; ++by)
    for (int64_t bx = 0; bx < g.x; ++bx)
      cuda::attn::emu::run_block(threads, smem, seed++, [&](int tid) {
        body(static_cast<int>(bx), static_cast<int>(by), tid, smem.data());
      });
}

template <typename T>
std::vector<T> to_storage(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return attn_test::bf16_bits(x);
}
template <typename T>
std::vector<float> to_f32(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return attn_test::from_bf16_bits(x);
}
template <typename T>
std::vector<T> poisoned(size_t n) {  // all bits set: NaN in f32 and in bf16
  std::vector<T> v(n);
  std::memset(v.data(), 0xff, n * sizeof(T));
  return v;
}

enum class Path { kMma, kSimt };

// One emulated forward + backward, mirroring flash_attention.cc's sequence of launches.
template <typename T, int D, int NC>
void check_case(Path path, const AttnShape& s, uint32_t seed, attn_test::Tolerance tol) {
  const bool bf16 = std::is_same_v<T, bf16raw>;
  const attn_test::Problem pb = attn_test::make_problem(s, bf16, seed, 1.5f);
  const attn_test::Reference ref = attn_test::reference(pb);
  const int64_t rows = pb.rows(), d = s.head_dim;

  std::vector<T> qkv = to_storage<T>(pb.qkv), dout = to_storage<T>(pb.dout);
  std::vector<T> o = poisoned<T>(rows * s.ld_o), dqkv = poisoned<T>(rows * s.ld_qkv);
  std::vector<float> lse = poisoned<float>(s.batch * s.heads * s.seq);
  std::vector<float> dvec = poisoned<float>(s.batch * s.heads * s.seq);
  std::vector<float> dq_acc(rows * s.heads * d, 0.0f);  // the launcher's cudaMemsetAsync

  Params p;
  p.q = qkv.data() + pb.q_off();
  p.k = qkv.data() + pb.k_off();
  p.v = qkv.data() + pb.v_off();
  p.o = o.data();
  p.o_out = o.data();
  p.dout = dout.data();
  p.lse = lse.data();
  p.lse_out = lse.data();
  p.dvec = dvec.data();
  p.dq_acc = dq_acc.data();
  p.dq = dqkv.data() + pb.q_off();
  p.dk = dqkv.data() + pb.k_off();
  p.dv = dqkv.data() + pb.v_off();
  p.ld_qkv = s.ld_qkv;
  p.ld_o = s.ld_o;
  p.batch = static_cast<int>(s.batch);
  p.seq = static_cast<int>(s.seq);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.head_dim = static_cast<int>(d);
  p.group = p.heads / p.kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.scale_log2 = p.scale * cuda::attn::kLog2e;

  using namespace cuda::attn;
  if (path == Path::kMma) {
    if constexpr (D != 0) {
      run_grid(
          fwd_mma_grid(p), MmaFwdCfg<D>::kThreads, MmaFwdCfg<D>::kSmemBytes,
          [&](int bx, int by, int tid, unsigned char* sm) { fwd_mma_body<D>(p, bx, by, tid, sm); });
    }
  } else {
    run_grid(simt_q_grid(p), kSimtThreads, simt_fwd_smem_bytes(NC),
             [&](int bx, int by, int tid, unsigned char* sm) {
               fwd_simt_body<T, NC>(p, bx, by, tid, sm);
             });
  }
  run_grid({row_dot_blocks(p), 1}, kRowDotWarps * 32, 0, [&](int bx, int, int tid, unsigned char*) {
    row_dot_body<T>(p, int64_t{bx} * kRowDotWarps + tid / 32, tid % 32);
  });
  if (path == Path::kMma) {
    if constexpr (D != 0) {
      run_grid(
          bwd_mma_grid(p), MmaBwdCfg<D>::kThreads, MmaBwdCfg<D>::kSmemBytes,
          [&](int bx, int by, int tid, unsigned char* sm) { bwd_mma_body<D>(p, bx, by, tid, sm); });
      for (int64_t i = 0; i < rows * s.heads * d; ++i) dq_convert_body(p, i);
    }
  } else {
    run_grid(simt_kv_grid(p), kSimtThreads, simt_bwd_smem_bytes(NC),
             [&](int bx, int by, int tid, unsigned char* sm) {
               bwd_simt_dkdv_body<T, NC>(p, bx, by, tid, sm);
             });
    run_grid(simt_q_grid(p), kSimtThreads, simt_bwd_smem_bytes(NC),
             [&](int bx, int by, int tid, unsigned char* sm) {
               bwd_simt_dq_body<T, NC>(p, bx, by, tid, sm);
             });
  }

  attn_test::expect_matches(pb, ref, to_f32(o), lse, to_f32(dqkv), tol);
}

constexpr attn_test::Tolerance kBf16Tol{1e-2, 1e-3}, kF32Tol{1e-5, 1e-5};

// Tensor-core path, head_dim 64: GQA 2, two query tiles (forward), two key tiles and four query
// tiles (backward), a ragged last tile.
TEST(CudaAttentionEmulated, MmaHeadDim64Gqa) {
  check_case<bf16raw, 64, 0>(Path::kMma, attn_test::make_shape(1, 200, 2, 1, 64, 8, 8), 11,
                             kBf16Tol);
}

// head_dim 128, batch 2, MHA, sequence shorter than one tile.
TEST(CudaAttentionEmulated, MmaHeadDim128ShortSeq) {
  check_case<bf16raw, 128, 0>(Path::kMma, attn_test::make_shape(2, 7, 2, 2, 128, 8, 16), 12,
                              kBf16Tol);
}

// head_dim 128 over three query tiles of the forward and two key tiles of the backward, GQA 2.
TEST(CudaAttentionEmulated, MmaHeadDim128Tiles) {
  check_case<bf16raw, 128, 0>(Path::kMma, attn_test::make_shape(1, 257, 2, 1, 128, 8, 8), 13,
                              kBf16Tol);
}

// One token: dq and dk are exactly zero (checked as an RMS), o = v.
TEST(CudaAttentionEmulated, SingleToken) {
  check_case<bf16raw, 64, 0>(Path::kMma, attn_test::make_shape(2, 1, 4, 1, 64, 8, 8), 16, kBf16Tol);
  check_case<float, 0, 2>(Path::kSimt, attn_test::make_shape(2, 1, 2, 1, 64, 8, 8), 17, kF32Tol);
}

// f32 SIMT path: GQA 2, head_dim padded (40 -> 64), three tiles.
TEST(CudaAttentionEmulated, SimtF32) {
  check_case<float, 0, 2>(Path::kSimt, attn_test::make_shape(2, 70, 2, 1, 40, 3, 5), 14, kF32Tol);
}

// bf16 through the SIMT path (head_dims the tensor-core path does not take).
TEST(CudaAttentionEmulated, SimtBf16) {
  check_case<bf16raw, 0, 1>(Path::kSimt, attn_test::make_shape(1, 45, 4, 2, 16, 1, 0), 15,
                            kBf16Tol);
}

}  // namespace
}  // namespace hp
