// The CPU backend in bf16 through the type-erased Kernels interface: which ISA
// offers bf16 (and the errors when it is asked for where it is not offered),
// and that every entry point given bf16 pointers runs the bf16 kernel with the
// right arguments: its results are bitwise those of the typed kernel called
// directly (cpu_bf16_test.cc checks those against the double reference).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa_ops.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/rope_angles.h"
#include "util/error.h"

namespace hp {
namespace {

using BVec = std::vector<bf16>;
using FVec = std::vector<float>;

bool bf16_here() {
  return cpu::cpu_has_avx512bf16() && cpu::Bf16Gemm::available();
}

BVec randb(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  BVec out(n);
  for (auto &x : out)
    x = to_bf16(dist(gen));
  return out;
}
bool same(const BVec &a, const BVec &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), 2 * a.size()) == 0;
}

// Scratch for a direct attention call, 64-byte aligned.
struct Aligned {
  std::vector<float> buf;
  float *get(size_t floats) {
    buf.assign(floats + 16, 0.0f);
    return reinterpret_cast<float *>(
        (reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
  }
};

TEST(CpuBf16Dispatch, OfferedExactlyOnTheAvx512Bf16Path) {
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx512Bf16), cpu::cpu_has_avx512bf16());
  auto k = make_cpu_kernels(1, CpuIsa::kAuto);
  EXPECT_TRUE(k->supports(Precision::fp32()));
  EXPECT_EQ(k->supports(Precision::bf16()), bf16_here());
  EXPECT_FALSE(k->supports(Precision::fp64()));
  EXPECT_FALSE(make_cpu_kernels(1, CpuIsa::kAvx2)->supports(Precision::bf16()));
  if (cpu_supports(CpuIsa::kAvx512)) {
    EXPECT_FALSE(
        make_cpu_kernels(1, CpuIsa::kAvx512)->supports(Precision::bf16()));
  }
  if (bf16_here()) {
    EXPECT_EQ(cpu_best_isa(), CpuIsa::kAvx512Bf16);
    EXPECT_EQ(k->name(), "cpu-avx512bf16");
  } else if (!cpu::cpu_has_avx512bf16()) {
    EXPECT_THROW(make_cpu_kernels(1, CpuIsa::kAvx512Bf16), Error);
  }
}

// A path without bf16 (forced, or the only one this CPU has) refuses bf16
// values with a message that says what is needed, for a GEMM and for the other
// kernels alike.
TEST(CpuBf16Dispatch, PathWithoutBf16GivesAClearError) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAuto}) {
    if (!cpu_supports(isa))
      continue;
    auto k = make_cpu_kernels(1, isa);
    if (k->supports(Precision::bf16()))
      continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    BVec a(16), y(16), g(4);
    FVec rstd(4);
    try {
      k->gemm(false, false, 4, 4, 4, 1.0, a.data(), 4, a.data(), 4, 0.0,
              y.data(), 4);
      ADD_FAILURE() << "a bf16 GEMM ran without the bf16 path";
    } catch (const Error &e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
      EXPECT_NE(msg.find("fp32"), std::string::npos)
          << "the message offers no way out: " << msg;
    }
    EXPECT_THROW(k->rmsnorm_forward(y.data(), rstd.data(), a.data(), g.data(),
                                    4, 4, 1e-5),
                 Error);
    EXPECT_THROW(k->swiglu_forward(y.data(), a.data(), a.data(), 16), Error);
  }
}

TEST(CpuBf16Dispatch, EnvironmentSelectsThePath) {
  ASSERT_EQ(setenv("HP_CPU_ISA", "avx512bf16", 1), 0);
  if (cpu::cpu_has_avx512bf16()) {
    EXPECT_EQ(make_cpu_kernels(1)->name(), "cpu-avx512bf16");
  } else {
    EXPECT_THROW(make_cpu_kernels(1), Error);
  }
  if (cpu_supports(CpuIsa::kAvx512)) {
    ASSERT_EQ(setenv("HP_CPU_ISA", "avx512", 1),
              0); // the f32-only path on any AVX-512 CPU
    EXPECT_FALSE(make_cpu_kernels(1)->supports(Precision::bf16()));
  }
  ASSERT_EQ(unsetenv("HP_CPU_ISA"), 0);
}

class CpuBf16Backend : public ::testing::Test {
protected:
  void SetUp() override {
    if (!bf16_here())
      GTEST_SKIP() << "this CPU has no AVX512-BF16 (or this build no oneDNN): "
                      "the CPU backend "
                      "offers fp32 only here";
    k_ = make_cpu_kernels(2, CpuIsa::kAvx512Bf16);
  }
  std::unique_ptr<Kernels> k_;
  const cpu::Bf16Ops &ops_ = cpu::avx512bf16_ops();
};

TEST_F(CpuBf16Backend, GemmIsTheOneDnnGemm) {
  const int64_t M = 37, N = 29, K = 41;
  const BVec a = randb(K * M, 1), b = randb(N * K, 2), c0 = randb(M * N, 3);
  cpu::Bf16Gemm direct(2);
  BVec want = c0, got = c0;
  direct.run(true, true, M, N, K, 0.5f, a.data(), M, b.data(), K, 1.0f,
             want.data(), N);
  k_->gemm(true, true, M, N, K, 0.5, a.data(), M, b.data(), K, 1.0, got.data(),
           N);
  EXPECT_TRUE(same(got, want));
  FVec wf(M * N, 1.0f), gf(M * N, 1.0f);
  direct.run(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 1.0f,
             wf.data(), N);
  k_->gemm(false, false, M, N, K, 1.0, a.data(), K, b.data(), N, 1.0, gf.data(),
           N);
  EXPECT_EQ(gf, wf);
  FVec f(M * N);
  EXPECT_THROW(k_->gemm(false, false, M, N, K, 1.0, f.data(), K, b.data(), N,
                        0.0, got.data(), N),
               Error); // A and B of one type
}

TEST_F(CpuBf16Backend, NormRopeSwigluMatchTheTypedKernels) {
  const int64_t rows = 33, dim = 40;
  const BVec x = randb(rows * dim, 4), g = randb(dim, 5),
             dy = randb(rows * dim, 6);
  BVec y1(rows * dim), y2(rows * dim);
  FVec r1(rows), r2(rows);
  ops_.rmsnorm_fwd(y1.data(), r1.data(), x.data(), g.data(), rows, dim, 1e-5f,
                   2);
  k_->rmsnorm_forward(y2.data(), r2.data(), x.data(), g.data(), rows, dim,
                      1e-5);
  EXPECT_TRUE(same(y1, y2));
  EXPECT_EQ(r1, r2);
  BVec dx1 = dy, dx2 = dy;
  FVec dg1(dim, 0.5f), dg2(dim, 0.5f), part(2 * dim);
  ops_.rmsnorm_bwd(dx1.data(), dg1.data(), dy.data(), x.data(), g.data(),
                   r1.data(), rows, dim, true, part.data(), 2);
  k_->rmsnorm_backward(dx2.data(), dg2.data(), dy.data(), x.data(), g.data(),
                       r1.data(), rows, dim, true);
  EXPECT_TRUE(same(dx1, dx2));
  EXPECT_EQ(dg1, dg2);
  BVec bad_rstd(rows);
  EXPECT_THROW(k_->rmsnorm_forward(y2.data(), bad_rstd.data(), x.data(),
                                   g.data(), rows, dim, 1e-5),
               Error); // stats are f32

  const int64_t seq = 7, heads = 2, hd = dim / heads, half = hd / 2;
  FVec cs(seq * half), sn(seq * half);
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t j = 0; j < half; ++j)
      rope_cos_sin(p, j, hd, 500000.0, &cs[p * half + j], &sn[p * half + j]);
  BVec q1 = x, q2 = x;
  ops_.rope(q1.data(), rows, dim, seq, heads, hd, cs.data(), sn.data(), true,
            2);
  k_->rope(q2.data(), rows, dim, seq, heads, hd, 500000.0, true);
  EXPECT_TRUE(same(q1, q2));

  const int64_t n = rows * dim;
  BVec h1(n), h2(n), a1(n), a2(n), b1(n), b2(n);
  ops_.swiglu_fwd(h1.data(), x.data(), dy.data(), n, 2);
  k_->swiglu_forward(h2.data(), x.data(), dy.data(), n);
  EXPECT_TRUE(same(h1, h2));
  ops_.swiglu_bwd(a1.data(), b1.data(), h1.data(), x.data(), dy.data(), n, 2);
  k_->swiglu_backward(a2.data(), b2.data(), h1.data(), x.data(), dy.data(), n);
  EXPECT_TRUE(same(a1, a2));
  EXPECT_TRUE(same(b1, b2));
}

TEST_F(CpuBf16Backend, AttentionMatchesTheTypedKernel) {
  const AttnShape s{2, 90, 4, 2, 32, 4 * 32 + 2 * 2 * 32 + 4, 4 * 32 + 2};
  const int64_t T = s.batch * s.seq, qw = s.heads * s.head_dim,
                kw = s.kv_heads * s.head_dim;
  const BVec qkv = randb(T * s.ld_qkv, 7), dout = randb(T * s.ld_o, 8);
  const bf16 *q = qkv.data();
  BVec o1(T * s.ld_o), o2(T * s.ld_o);
  FVec l1(s.batch * s.heads * s.seq), l2(l1.size());
  Aligned sc;
  ops_.attn_fwd(s, q, q + qw, q + qw + kw, o1.data(), l1.data(),
                sc.get(ops_.attn_fwd_scratch(s, 2)), 2);
  k_->attention_forward(s, q, q + qw, q + qw + kw, o2.data(), l2.data());
  EXPECT_TRUE(same(o1, o2));
  EXPECT_EQ(l1, l2);
  BVec g1(T * s.ld_qkv), g2(T * s.ld_qkv);
  ops_.attn_bwd(s, q, q + qw, q + qw + kw, o1.data(), dout.data(), l1.data(),
                g1.data(), g1.data() + qw, g1.data() + qw + kw,
                sc.get(ops_.attn_bwd_scratch(s, 2)), 2);
  k_->attention_backward(s, q, q + qw, q + qw + kw, o1.data(), dout.data(),
                         l1.data(), g2.data(), g2.data() + qw,
                         g2.data() + qw + kw);
  EXPECT_TRUE(same(g1, g2));
  AttnShape odd = s;
  odd.head_dim = 3;
  EXPECT_THROW(
      k_->attention_forward(odd, q, q + 12, q + 18, o2.data(), l2.data()),
      Error);
}

TEST_F(CpuBf16Backend, CrossEntropyEmbeddingConvertAxpySumSquares) {
  const int64_t rows = 6, vocab = 300, ld = vocab + 4;
  const BVec logits = randb(rows * ld, 9, 3.0f);
  std::vector<int32_t> tgt(rows);
  for (int64_t r = 0; r < rows; ++r)
    tgt[r] = static_cast<int32_t>((r * 41) % vocab);
  FVec l1(rows), l2(rows);
  ops_.ce_fwd(logits.data(), ld, rows, vocab, l1.data(), 2);
  double loss = 0.5; // the kernel adds to it
  k_->cross_entropy_forward(logits.data(), ld, tgt.data(), rows, vocab,
                            l2.data(), &loss);
  EXPECT_EQ(l1, l2);
  double want = 0.5, sum = 0;
  for (int64_t r = 0; r < rows; ++r)
    sum += double(l1[r]) - to_float(logits[r * ld + tgt[r]]);
  want += sum;
  EXPECT_EQ(loss, want);
  BVec d1(rows * ld), d2 = logits; // the interface call in place
  ops_.ce_bwd(d1.data(), logits.data(), ld, l1.data(), tgt.data(), rows, vocab,
              0.25f, 2);
  k_->cross_entropy_backward(d2.data(), d2.data(), ld, l1.data(), tgt.data(),
                             rows, vocab, 0.25);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(0, std::memcmp(d1.data() + r * ld, d2.data() + r * ld, 2 * vocab))
        << r;
  FVec lf(rows * ld); // f32 logits into bf16 dlogits
  for (size_t i = 0; i < lf.size(); ++i)
    lf[i] = to_float(logits[i]);
  BVec d3(rows * ld);
  k_->cross_entropy_backward(d3.data(), lf.data(), ld, l1.data(), tgt.data(),
                             rows, vocab, 0.25);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(0, std::memcmp(d1.data() + r * ld, d3.data() + r * ld, 2 * vocab))
        << r;

  const int64_t n = 50, dim = 24;
  const BVec table = randb(vocab * dim, 10), dx = randb(n * dim, 11);
  std::vector<int32_t> tok(n);
  for (int64_t t = 0; t < n; ++t)
    tok[t] = static_cast<int32_t>((t * 7) % 9);
  BVec x(n * dim);
  k_->embedding_forward(x.data(), tok.data(), table.data(), n, dim);
  for (int64_t t = 0; t < n; ++t)
    ASSERT_EQ(0, std::memcmp(x.data() + t * dim, table.data() + tok[t] * dim,
                             2 * dim));
  FVec e1(vocab * dim, 0.0f), e2(vocab * dim, 0.0f);
  ops_.embedding_bwd(e1.data(), tok.data(), dx.data(), n, dim, 2);
  k_->embedding_backward(e2.data(), tok.data(), dx.data(), n, dim);
  EXPECT_EQ(e1, e2);

  const int64_t m = 1000;
  FVec wide(m);
  for (int64_t i = 0; i < m; ++i)
    wide[i] = 0.001f * static_cast<float>(i * i) - 3.0f;
  BVec narrow(m);
  k_->convert(narrow.data(), wide.data(), m);
  for (int64_t i = 0; i < m; ++i)
    ASSERT_EQ(narrow[i].bits, to_bf16(wide[i]).bits);
  FVec back(m);
  k_->convert(back.data(), narrow.data(), m);
  for (int64_t i = 0; i < m; ++i)
    ASSERT_EQ(back[i], to_float(narrow[i]));
  BVec y1 = narrow, y2 = narrow;
  ops_.axpy(y1.data(), table.data(), 0.5f, m, 2);
  k_->axpy(y2.data(), table.data(), 0.5, m);
  EXPECT_TRUE(same(y1, y2));
  double squares = 0;
  for (int64_t i = 0; i < m; ++i)
    squares += double(to_float(narrow[i])) * to_float(narrow[i]);
  EXPECT_NEAR(k_->sum_squares(narrow.data(), m), squares, 1e-12 * squares);
}

// AdamW keeps its f32 master update (bitwise the fp32 backend's) and writes the
// bf16 weight copy as the rounding of the updated values.
TEST_F(CpuBf16Backend, AdamWWritesTheWeightCopy) {
  const int64_t n = 70000;
  FVec p(n), g(n), m(n, 0.01f), v(n, 0.02f);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.001f * static_cast<float>(i % 977) - 0.4f;
    g[i] = 0.003f * static_cast<float>(i % 131) - 0.2f;
  }
  FVec p2 = p, m2 = m, v2 = v;
  BVec copy(n);
  k_->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.95, 1e-8,
            0.1, 3, 0.5, copy.data());
  make_cpu_kernels(2, CpuIsa::kAvx512)
      ->adamw(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-3, 0.9, 0.95,
              1e-8, 0.1, 3, 0.5, DataPtr());
  EXPECT_EQ(p, p2);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(copy[i].bits, to_bf16(p[i]).bits);
}

} // namespace
} // namespace hp
