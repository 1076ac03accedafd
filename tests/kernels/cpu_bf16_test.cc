// The CPU bf16 kernels (bf16_ops.h: AVX512-BF16 attention and elementwise kernels; bf16_gemm.h:
// oneDNN GEMMs) against the reference kernels run in double. Inputs are drawn in f32 and rounded
// to bf16 first, and the reference reads those same rounded values, so what is measured is the
// kernels' own error: f32 accumulation plus the bf16 roundings they make.
//
// Tolerances (u = 2^-8 = 0.0039, the unit roundoff of bf16's 8-bit significand; errors as
// max|got - ref| / max|ref| over an output unless said otherwise):
//   - one rounding of an f32 result to bf16: per element |err| <= u |ref|, plus the f32 error
//     of the math before it (exp to 1.24 ulp, sums of <= 5000 terms: < 1e-5 relative);
//   - f32 outputs of f32 math over exact bf16 inputs (rstd, lse, dg, embedding gradient):
//     the fp32 kernels' tolerances, 1e-5;
//   - GEMM: products of bf16 values are exact in f32; K <= 300 f32 additions: 2e-5 into f32 C,
//     plus u into bf16 C;
//   - attention: P (forward and backward) and dS are rounded to bf16 before the products that
//     read them, which adds noise well below u to each output (the weights sum to 1 and the
//     roundings are independent), and the output is rounded once: forward 6e-3 (1.5 u; measured
//     <= 3.9e-3 over the shapes below), backward (two such products in a row, and D = do.o from
//     the rounded o) 1.2e-2 (3 u; measured <= 5.4e-3); lse stays f32-accurate (its sums read
//     unrounded f32 scores, and its exp, vexp_softmax, is within 3.5e-7 + 1e-7 |x|): 2e-5.
// Every test is skipped on a CPU without AVX512-BF16 (and the GEMM tests on a build without
// oneDNN), with a message saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/dtype.h"
#include "kernels/reference/reference_math.h"
#include "kernels/rope_angles.h"
#include "util/error.h"

namespace hp {
namespace {

using FVec = std::vector<float>;
using DVec = std::vector<double>;
using BVec = std::vector<bf16>;
constexpr double kU = 1.0 / 256;  // bf16 unit roundoff (8-bit significand)

// n values ~ N(0, scale^2) rounded to bf16, with the same values as doubles.
struct Data {
  BVec b;
  DVec d;
};
Data randb(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Data out{BVec(n), DVec(n)};
  for (size_t i = 0; i < n; ++i) {
    out.b[i] = to_bf16(dist(gen));
    out.d[i] = to_float(out.b[i]);
  }
  return out;
}
template <typename T>
double val(const T& x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_float(x);
  else
    return static_cast<double>(x);
}

// max|got - ref| / max(max|ref|, floor) over n elements in rows of `width` values `stride` apart.
template <typename T>
double rel_err(const T* got, const double* ref, size_t n, size_t stride = 0, size_t width = 0,
               double floor = 1e-30) {
  if (width == 0) width = stride = n;
  double worst = 0, mag = floor;
  for (size_t i = 0; i < n; ++i) {
    const size_t at = (i / width) * stride + i % width;
    worst = std::max(worst, std::abs(val(got[at]) - ref[at]));
    mag = std::max(mag, std::abs(ref[at]));
  }
  return worst / mag;
}
template <typename T>
double rel_err(const std::vector<T>& got, const DVec& ref) {
  return rel_err(got.data(), ref.data(), got.size());
}
// The largest per-element error in units of that element's own magnitude plus abs_floor.
template <typename T>
double elem_err(const std::vector<T>& got, const DVec& ref, double abs_floor) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(val(got[i]) - ref[i]) / (std::abs(ref[i]) + abs_floor));
  return worst;
}
bool same_bits(const BVec& a, const BVec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 2 * a.size()) == 0;
}

class Bf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::cpu_has_avx512bf16())
      GTEST_SKIP() << "this CPU has no AVX512-BF16: the CPU backend computes in fp32 only here";
  }
  const cpu::Bf16Ops& ops_ = cpu::avx512bf16_ops();
  ReferenceMath<double> ref_;
};

// ------------------------------------------------------------------------------------------------
// Conversions

TEST_F(Bf16Test, ConvertRoundsToNearestEvenLikeToBf16) {
  for (int64_t n : {1, 15, 33, 4099, 70001}) {
    std::mt19937 gen(static_cast<uint32_t>(n));
    std::uniform_int_distribution<uint32_t> bits;
    FVec x(n);
    for (auto& v : x) {  // random finite normal floats of every exponent and sign
      uint32_t u = bits(gen);
      const uint32_t e = (u >> 23) & 0xff;
      if (e == 0 || e == 0xff) u = (u & ~(0xffu << 23)) | (0x70u << 23);
      std::memcpy(&v, &u, 4);
    }
    if (n > 20) {
      x[0] = std::numeric_limits<float>::infinity();
      x[1] = -x[0];
      x[2] = 0.0f;
      x[3] = -0.0f;
      x[4] = std::numeric_limits<float>::quiet_NaN();
      x[5] = 1.0f + 1.0f / 256;  // a tie: stays at 1 (even)
      x[6] = 1.0f + 3.0f / 256;  // a tie: rounds up to 1 + 4/256 (even)
      x[7] = 3.3895314e38f;      // rounds to the largest finite bf16, not to inf
    }
    for (int threads : {1, 2}) {
      BVec b(n);
      ops_.to_bf16(b.data(), x.data(), n, threads);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(to_float(b[i])));
          continue;
        }
        ASSERT_EQ(b[i].bits, to_bf16(x[i]).bits) << "x=" << x[i] << " i=" << i << " n=" << n;
      }
      FVec back(n);
      ops_.to_f32(back.data(), b.data(), n, threads);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(x[i])) {
          ASSERT_EQ(back[i], to_float(b[i]));
        }
    }
  }
}

// The instruction flushes f32 subnormals to zero (hp::to_bf16 rounds them); documented in
// docs/kernels.md.
TEST_F(Bf16Test, ConvertFlushesSubnormalsToZero) {
  const FVec x = {1e-39f, -1e-39f, 1.2e-38f};
  BVec b(3);
  ops_.to_bf16(b.data(), x.data(), 3, 1);
  EXPECT_EQ(to_float(b[0]), 0.0f);
  EXPECT_EQ(to_float(b[1]), 0.0f);
  EXPECT_EQ(b[2].bits, to_bf16(1.2e-38f).bits);  // the smallest normals round as usual
}

// ------------------------------------------------------------------------------------------------
// GEMM (oneDNN)

class Bf16GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::Bf16Gemm::available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
    // oneDNN has bf16 GEMM primitives only on CPUs with bf16 instructions.
    if (!cpu::cpu_has_avx512bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  }
};

// One GEMM into C of type TC, against the double reference on the same bf16 inputs.
template <typename TC>
void check_gemm(cpu::Bf16Gemm& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                float beta, int64_t pad, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                    << " K=" << K << " alpha=" << alpha << " beta=" << beta
                                    << " C=" << (std::is_same_v<TC, float> ? "f32" : "bf16"));
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const Data A = randb((ta ? K : M) * lda, seed), B = randb((tb ? N : K) * ldb, seed + 1);
  const Data C0 = randb(M * ldc, seed + 2);
  std::vector<TC> C(M * ldc);
  for (int64_t i = 0; i < M * ldc; ++i) {
    if constexpr (std::is_same_v<TC, float>)
      C[i] = static_cast<float>(C0.d[i]);
    else
      C[i] = C0.b[i];
  }
  if (beta == 0.0f)  // beta == 0: C is not read, so NaN there must not leak into the result
    for (int64_t i = 0; i < M * ldc; ++i) {
      if constexpr (std::is_same_v<TC, float>)
        C[i] = std::numeric_limits<float>::quiet_NaN();
      else
        C[i] = to_bf16(std::numeric_limits<float>::quiet_NaN());
    }
  const std::vector<TC> C_in = C;
  g.run(ta, tb, M, N, K, alpha, A.b.data(), lda, B.b.data(), ldb, beta, C.data(), ldc);
  DVec R = C0.d;
  ReferenceMath<double>().gemm(ta, tb, M, N, K, alpha, A.d.data(), lda, B.d.data(), ldb, beta,
                               R.data(), ldc);
  const double tol = std::is_same_v<TC, float> ? 2e-5 : kU + 2e-5;
  EXPECT_LT(rel_err(C.data(), R.data(), M * N, ldc, N), tol);
  for (int64_t i = 0; i < M; ++i)  // padding columns are left alone
    for (int64_t j = N; j < ldc; ++j)
      ASSERT_EQ(std::memcmp(&C[i * ldc + j], &C_in[i * ldc + j], sizeof(TC)), 0);
}

TEST_F(Bf16GemmTest, AllTransposesTypesAlphasBetasOddSizes) {
  cpu::Bf16Gemm g(1);
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (float alpha : {1.0f, -0.75f}) {
          check_gemm<bf16>(g, ta, tb, 37, 29, 13, alpha, beta, 3, seed++);
          check_gemm<float>(g, ta, tb, 37, 29, 13, alpha, beta, 0, seed++);
          check_gemm<float>(g, ta, tb, 67, 130, 257, alpha, beta, 5, seed++);
          if (HasFailure()) return;
        }
}

// The model's shapes (dense strides, alpha 1, beta 0 or 1): weight GEMMs into bf16 activations
// and weight gradients accumulating into f32, on 1 and 2 threads.
TEST_F(Bf16GemmTest, ModelShapesOnOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    cpu::Bf16Gemm g(threads);
    check_gemm<bf16>(g, false, true, 300, 768, 256, 1.0f, 0.0f, 0, 11);   // x W^T
    check_gemm<bf16>(g, false, false, 300, 256, 768, 1.0f, 1.0f, 0, 12);  // dy W, += residual
    check_gemm<float>(g, true, false, 768, 256, 300, 1.0f, 1.0f, 0, 13);  // dW += dy^T x
  }
}

TEST_F(Bf16GemmTest, RepeatedShapesReusePrimitives) {
  cpu::Bf16Gemm g(1);
  const Data A = randb(64 * 48, 1), B = randb(48 * 32, 2);
  BVec C(64 * 32);
  FVec Cf(64 * 32, 0.0f);
  g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 0.0f, C.data(), 32);
  g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 1.0f, Cf.data(), 32);
  EXPECT_EQ(g.primitives_built(), 2);
  const BVec first = C;
  for (int i = 0; i < 5; ++i) {
    g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 0.0f, C.data(), 32);
    g.run(false, false, 64, 32, 48, 1.0f, A.b.data(), 48, B.b.data(), 32, 1.0f, Cf.data(), 32);
  }
  EXPECT_EQ(g.primitives_built(), 2) << "a repeated shape built a new primitive";
  EXPECT_TRUE(same_bits(C, first));
  // Accumulating 6 times into Cf gives 6 x the product.
  DVec R(64 * 32, 0.0);
  ReferenceMath<double>().gemm(false, false, 64, 32, 48, 6.0, A.d.data(), 48, B.d.data(), 32, 0.0,
                               R.data(), 32);
  EXPECT_LT(rel_err(Cf, R), 2e-5);
}

TEST_F(Bf16GemmTest, EmptyAndZeroDepth) {
  cpu::Bf16Gemm g(1);
  BVec C(6, to_bf16(2.0f));
  const BVec A(6), B(6);
  g.run(false, false, 0, 3, 2, 1.0f, A.data(), 2, B.data(), 3, 0.0f, C.data(), 3);  // M = 0
  EXPECT_EQ(to_float(C[0]), 2.0f);
  g.run(false, false, 2, 3, 0, 1.0f, A.data(), 1, B.data(), 3, 0.5f, C.data(), 3);  // K = 0
  for (const bf16& c : C) EXPECT_EQ(to_float(c), 1.0f);
  g.run(false, false, 2, 3, 0, 1.0f, A.data(), 1, B.data(), 3, 0.0f, C.data(), 3);
  for (const bf16& c : C) EXPECT_EQ(to_float(c), 0.0f);
}

TEST_F(Bf16GemmTest, RejectsSmallLeadingDimension) {
  cpu::Bf16Gemm g(1);
  BVec A(64), B(64), C(64);
  EXPECT_THROW(g.run(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
               Error);
  EXPECT_THROW(g.run(false, true, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 2),
               Error);
}

// ------------------------------------------------------------------------------------------------
// Attention

void check_attention(const cpu::Bf16Ops& ops, int64_t batch, int64_t seq, int64_t heads,
                     int64_t kv_heads, int64_t d, float q_amp = 1.0f) {
  SCOPED_TRACE(::testing::Message() << "batch=" << batch << " seq=" << seq << " heads=" << heads
                                    << " kv_heads=" << kv_heads << " d=" << d);
  AttnShape s{batch, seq, heads, kv_heads, d, (heads + 2 * kv_heads) * d + 6, heads * d + 3};
  const int64_t rows = batch * seq, nlse = batch * heads * seq;
  const uint32_t seed = static_cast<uint32_t>(seq * 131 + heads * 17 + d + batch * 7);
  Data qkv = randb(rows * s.ld_qkv, seed);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < heads * d; ++c) {
      qkv.b[r * s.ld_qkv + c] = to_bf16(q_amp * to_float(qkv.b[r * s.ld_qkv + c]));
      qkv.d[r * s.ld_qkv + c] = to_float(qkv.b[r * s.ld_qkv + c]);
    }
  const Data dout = randb(rows * s.ld_o, seed + 1);
  const bf16* q = qkv.b.data();
  const bf16* k = q + heads * d;
  const bf16* v = k + kv_heads * d;

  auto forward = [&](int threads, BVec& o, FVec& lse) {
    std::vector<float> scratch(ops.attn_fwd_scratch(s, threads) + 16);
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                              ~uintptr_t(63));
    ops.attn_fwd(s, q, k, v, o.data(), lse.data(), aligned, threads);
  };
  BVec o1(rows * s.ld_o, to_bf16(7.0f)), o2 = o1;
  FVec lse1(nlse), lse2(nlse);
  forward(1, o1, lse1);
  forward(2, o2, lse2);

  DVec od(rows * s.ld_o, 0.0), lse_ref(nlse);
  const double* qd = qkv.d.data();
  ReferenceMath<double> ref;
  ref.attention_forward(s, qd, qd + heads * d, qd + (heads + kv_heads) * d, od.data(),
                        lse_ref.data());
  EXPECT_LT(rel_err(o1.data(), od.data(), rows * heads * d, s.ld_o, heads * d), 6e-3) << "o";
  EXPECT_LT(rel_err(lse1, lse_ref), 2e-5) << "lse";
  EXPECT_TRUE(same_bits(o1, o2)) << "forward differs between 1 and 2 threads";
  EXPECT_EQ(lse1, lse2);
  for (int64_t r = 0; r < rows; ++r)  // o's padding columns are left alone
    for (int64_t c = heads * d; c < s.ld_o; ++c) ASSERT_EQ(to_float(o1[r * s.ld_o + c]), 7.0f);

  // Backward from this forward's o and lse; the reference recomputes its softmax in double.
  auto backward = [&](int threads, BVec& g) {
    std::vector<float> scratch(ops.attn_bwd_scratch(s, threads) + 16);
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                              ~uintptr_t(63));
    ops.attn_bwd(s, q, k, v, o1.data(), dout.b.data(), lse1.data(), g.data(), g.data() + heads * d,
                 g.data() + (heads + kv_heads) * d, aligned, threads);
  };
  BVec g1(rows * s.ld_qkv, to_bf16(7.0f)), g2 = g1;
  backward(1, g1);
  backward(2, g2);
  DVec gd(rows * s.ld_qkv, 7.0);
  ref.attention_backward(s, qd, qd + heads * d, qd + (heads + kv_heads) * d, od.data(),
                         dout.d.data(), lse_ref.data(), gd.data(), gd.data() + heads * d,
                         gd.data() + (heads + kv_heads) * d);
  // With one key dq and dk are exactly 0 (dS = p (dp - do.o) and o = v): errors are then
  // measured against 1e-3, far below the gradients' size for any longer sequence.
  const int64_t dk_at = heads * d, dv_at = (heads + kv_heads) * d;
  auto grad_err = [&](int64_t at, int64_t width) {
    return rel_err(g1.data() + at, gd.data() + at, rows * width, s.ld_qkv, width, 1e-3);
  };
  EXPECT_LT(grad_err(0, heads * d), 1.2e-2) << "dq";
  EXPECT_LT(grad_err(dk_at, kv_heads * d), 1.2e-2) << "dk";
  EXPECT_LT(grad_err(dv_at, kv_heads * d), 1.2e-2) << "dv";
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = (heads + 2 * kv_heads) * d; c < s.ld_qkv; ++c)
      ASSERT_EQ(to_float(g1[r * s.ld_qkv + c]), 7.0f);
  EXPECT_TRUE(same_bits(g1, g2)) << "backward differs between 1 and 2 threads";
}

TEST_F(Bf16Test, AttentionOddShapesAgainstReference) {
  int i = 0;
  for (int64_t seq : {1, 7, 63, 130, 257}) {
    for (int64_t group : {1, 2, 4}) {
      for (int64_t d : {32, 64, 80, 128}) {
        const int64_t batch = 1 + (i++ % 2);
        check_attention(ops_, batch, seq, 2 * group, 2, d);
        if (HasFailure()) return;
      }
    }
  }
}

TEST_F(Bf16Test, AttentionSmallAndOddHeadDims) {
  for (int64_t d : {2, 6, 8, 24, 40, 56}) check_attention(ops_, 2, 70, 3, 1, d);
  check_attention(ops_, 1, 200, 4, 1, 64);
}

// Peaked softmax (scores ~30): the online rescaling must hold up in the bf16 path too.
TEST_F(Bf16Test, AttentionLargeScores) { check_attention(ops_, 1, 300, 4, 2, 64, 30.0f); }

// ------------------------------------------------------------------------------------------------
// Elementwise kernels

TEST_F(Bf16Test, RmsNormForwardBackward) {
  for (int64_t dim : {1, 17, 256, 1000}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "dim=" << dim << " threads=" << threads);
      const int64_t rows = 2 + 70000 / dim;  // crosses the threaded backward's size threshold
      const Data x = randb(rows * dim, 1), g = randb(dim, 2), dy = randb(rows * dim, 3);
      BVec y(rows * dim);
      FVec rstd(rows);
      ops_.rmsnorm_fwd(y.data(), rstd.data(), x.b.data(), g.b.data(), rows, dim, 1e-5f, threads);
      DVec yr(rows * dim), rr(rows);
      ref_.rmsnorm_forward(yr.data(), rr.data(), x.d.data(), g.d.data(), rows, dim, 1e-5);
      EXPECT_LT(elem_err(y, yr, 1e-6), kU + 1e-5) << "y";
      EXPECT_LT(rel_err(rstd, rr), 1e-5) << "rstd";

      for (bool accumulate : {false, true}) {
        const Data dx0 = randb(rows * dim, 4);
        BVec dx = dx0.b;
        FVec dg(dim, 0.5f);
        std::vector<float> part(threads * dim);
        ops_.rmsnorm_bwd(dx.data(), dg.data(), dy.b.data(), x.b.data(), g.b.data(), rstd.data(),
                         rows, dim, accumulate, part.data(), threads);
        DVec dxr = dx0.d, dgr(dim, 0.5);
        const DVec rstd_d(rstd.begin(), rstd.end());
        ref_.rmsnorm_backward(dxr.data(), dgr.data(), dy.d.data(), x.d.data(), g.d.data(),
                              rstd_d.data(), rows, dim, accumulate);
        // dx = r g dy - x c cancels, so it is measured against the output's scale.
        EXPECT_LT(rel_err(dx, dxr), 2 * kU) << "dx accumulate=" << accumulate;
        EXPECT_LT(rel_err(dg, dgr), 1e-5) << "dg";
      }
    }
  }
}

TEST_F(Bf16Test, RopeForwardAndInverse) {
  const int64_t rows = 37, seq = 13, heads = 3, hd = 40, ld = heads * hd + 8;
  const int64_t half = hd / 2;
  FVec cs(seq * half), sn(seq * half);
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t j = 0; j < half; ++j)
      rope_cos_sin(p, j, hd, 10000.0, &cs[p * half + j], &sn[p * half + j]);
  for (bool inverse : {false, true})
    for (int threads : {1, 2}) {
      const Data x = randb(rows * ld, 5);
      BVec y = x.b;
      ops_.rope(y.data(), rows, ld, seq, heads, hd, cs.data(), sn.data(), inverse, threads);
      DVec yr = x.d;
      ref_.rope(yr.data(), rows, ld, seq, heads, hd, 10000.0, inverse);
      EXPECT_LT(elem_err(y, yr, 1e-3), kU + 1e-5) << "inverse=" << inverse;
      for (int64_t r = 0; r < rows; ++r)  // columns past n_heads*head_dim are left alone
        for (int64_t c = heads * hd; c < ld; ++c)
          ASSERT_EQ(y[r * ld + c].bits, x.b[r * ld + c].bits);
    }
}

TEST_F(Bf16Test, SwiGluForwardBackward) {
  const int64_t n = 70001;
  const Data g = randb(n, 6, 3.0f), u = randb(n, 7), dh = randb(n, 8);
  for (int threads : {1, 2}) {
    BVec h(n), dg(n), du(n);
    ops_.swiglu_fwd(h.data(), g.b.data(), u.b.data(), n, threads);
    ops_.swiglu_bwd(dg.data(), du.data(), dh.b.data(), g.b.data(), u.b.data(), n, threads);
    DVec hr(n), dgr(n), dur(n);
    ref_.swiglu_forward(hr.data(), g.d.data(), u.d.data(), n);
    ref_.swiglu_backward(dgr.data(), dur.data(), dh.d.data(), g.d.data(), u.d.data(), n);
    EXPECT_LT(elem_err(h, hr, 1e-6), kU + 1e-5);
    EXPECT_LT(elem_err(du, dur, 1e-6), kU + 1e-5);
    EXPECT_LT(elem_err(dg, dgr, 1e-6), kU + 1e-5);
  }
}

TEST_F(Bf16Test, CrossEntropyFromBf16AndF32Logits) {
  for (int64_t vocab : {5, 256, 5003}) {
    const int64_t rows = 9, ld = vocab + 3;
    const Data logits = randb(rows * ld, 9, 4.0f);
    std::vector<int32_t> targets(rows);
    for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 7919) % vocab);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "vocab=" << vocab << " threads=" << threads);
      FVec lse(rows);
      ops_.ce_fwd(logits.b.data(), ld, rows, vocab, lse.data(), threads);
      DVec lse_ref(rows);
      const double loss_ref = ref_.cross_entropy_forward(logits.d.data(), ld, targets.data(), rows,
                                                         vocab, lse_ref.data());
      EXPECT_LT(rel_err(lse, lse_ref), 1e-5);
      double loss = 0;
      for (int64_t r = 0; r < rows; ++r) loss += lse[r] - to_float(logits.b[r * ld + targets[r]]);
      EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));

      const float scale = 1.0f / rows;
      DVec dr(rows * ld, 0.0);
      ref_.cross_entropy_backward(dr.data(), logits.d.data(), ld, lse_ref.data(), targets.data(),
                                  rows, vocab, scale);
      BVec d(rows * ld, to_bf16(0.0f));
      ops_.ce_bwd(d.data(), logits.b.data(), ld, lse.data(), targets.data(), rows, vocab, scale,
                  threads);
      EXPECT_LT(rel_err(d.data(), dr.data(), rows * vocab, ld, vocab), kU + 1e-5) << "bf16";
      BVec in_place = logits.b;  // dlogits aliasing logits
      ops_.ce_bwd(in_place.data(), in_place.data(), ld, lse.data(), targets.data(), rows, vocab,
                  scale, threads);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < vocab; ++c)
          ASSERT_EQ(in_place[r * ld + c].bits, d[r * ld + c].bits);
      const FVec lf(logits.d.begin(), logits.d.end());  // the same values as f32 logits
      BVec df(rows * ld, to_bf16(0.0f));
      ops_.ce_bwd_f32(df.data(), lf.data(), ld, lse.data(), targets.data(), rows, vocab, scale,
                      threads);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < vocab; ++c) ASSERT_EQ(df[r * ld + c].bits, d[r * ld + c].bits);
    }
  }
}

TEST_F(Bf16Test, EmbeddingGradientAxpySumSquares) {
  const int64_t n = 300, dim = 700, vocab = 11;
  std::vector<int32_t> tokens(n);
  for (int64_t t = 0; t < n; ++t) tokens[t] = static_cast<int32_t>((t * 5) % vocab);
  const Data dx = randb(n * dim, 10);
  FVec g1(vocab * dim, 0.25f), g2 = g1;
  ops_.embedding_bwd(g1.data(), tokens.data(), dx.b.data(), n, dim, 1);
  ops_.embedding_bwd(g2.data(), tokens.data(), dx.b.data(), n, dim, 2);
  DVec gr(vocab * dim, 0.25);
  ref_.embedding_backward(gr.data(), tokens.data(), dx.d.data(), n, dim);
  EXPECT_LT(rel_err(g1, gr), 1e-6);
  EXPECT_EQ(g1, g2) << "embedding gradient differs between 1 and 2 threads";

  const int64_t m = 40003;
  const Data x = randb(m, 11), y0 = randb(m, 12);
  BVec y = y0.b;
  ops_.axpy(y.data(), x.b.data(), -0.375f, m, 2);
  DVec yr = y0.d;
  ref_.axpy(yr.data(), x.d.data(), -0.375, m);
  EXPECT_LT(elem_err(y, yr, 1e-6), kU + 1e-6);

  std::vector<double> part1((m + cpu::kSumBlock - 1) / cpu::kSumBlock), part2 = part1;
  ops_.sum_squares_blocks(x.b.data(), m, part1.data(), 1);
  ops_.sum_squares_blocks(x.b.data(), m, part2.data(), 2);
  double total = 0;
  for (double p : part1) total += p;
  EXPECT_NEAR(total, ref_.sum_squares(x.d.data(), m), 1e-12 * total);
  EXPECT_EQ(part1, part2);
}

// ------------------------------------------------------------------------------------------------
// Dispatch

// The cpuid test agrees with what the kernel reports in /proc/cpuinfo (Linux).
TEST(Bf16Dispatch, CpuidAgreesWithProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  if (!f) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  bool flag = false, found_flags = false;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      found_flags = true;
      flag = line.find(" avx512_bf16") != std::string::npos;
      break;
    }
  if (!found_flags) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  EXPECT_EQ(cpu::cpu_has_avx512bf16(), flag);
}

}  // namespace
}  // namespace hp
