// The f32 master-weight kernels and conversions on CUDA: AdamW against the reference (with the
// gradient scaled first, and the bf16/f32 weight copy written in the same kernel), convert's
// rounding against dtype.h's to_bf16 bit for bit (ties, infinities, NaNs, subnormals), and a
// training-like sequence of calls that must not allocate once warmed up.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/reference/reference_math.h"

namespace hp::cudatest {
namespace {

using CudaUpdateTest = CudaTest;

// Tolerance: the kernel repeats the reference's f32 operations in order, so it usually matches
// bit for bit (recorded as a property); the check allows 2e-7 of the largest value (a few ulps).
TEST_F(CudaUpdateTest, AdamW) {
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1, grad_scale = 0.5;
  bool all_bitwise = true;
  for (int64_t n : {int64_t{1}, int64_t{1003}, int64_t{4096}}) {
    for (int64_t step : {int64_t{1}, int64_t{7}}) {
      for (int copy = 0; copy < 3; ++copy) {  // none, f32, bf16
        SCOPED_TRACE(::testing::Message() << "n=" << n << " step=" << step << " copy=" << copy);
        const FVec p0 = randn(n), g = randn(n, 0.1f), m0 = randn(n, 0.01f);
        const FVec v0 = uniform(n, 0.0f, 1e-3f);
        Buffer bp = to_dev(p0, DType::kF32), bg = to_dev(g, DType::kF32);
        Buffer bm = to_dev(m0, DType::kF32), bv = to_dev(v0, DType::kF32);
        const DType copy_t = copy == 2 ? DType::kBF16 : DType::kF32;
        Buffer bc = copy > 0 ? poisoned(copy_t, n) : Buffer();
        k_->adamw(bp.ptr(), bg.ptr(), bm.ptr(), bv.ptr(), n, lr, beta1, beta2, eps, wd, step,
                  grad_scale, copy > 0 ? bc.ptr() : DataPtr());
        FVec rp = p0, rm = m0, rv = v0;
        ReferenceMath<float>().adamw(rp.data(), g.data(), rm.data(), rv.data(), n, lr, beta1,
                                     beta2, eps, wd, step, grad_scale);
        const FVec got_p = from_dev(bp), got_m = from_dev(bm), got_v = from_dev(bv);
        EXPECT_TRUE(near(got_p, to_d(rp), 2e-7, "param"));
        EXPECT_TRUE(near(got_m, to_d(rm), 2e-7, "m"));
        EXPECT_TRUE(near(got_v, to_d(rv), 2e-7, "v"));
        all_bitwise = all_bitwise && same_bits(got_p, rp, "") && same_bits(got_m, rm, "") &&
                      same_bits(got_v, rv, "");
        if (copy > 0) {
          EXPECT_TRUE(same_bits(from_dev(bc), rounded(got_p, copy_t), "weight copy"));
        }
      }
    }
  }
  RecordProperty("adamw_bitwise_equal_to_reference", all_bitwise ? "yes" : "no");
}

TEST_F(CudaUpdateTest, ConvertRoundsLikeTheHost) {
  const float inf = std::numeric_limits<float>::infinity();
  FVec x = {0.0f,
            -0.0f,
            1.0f,
            -1.0f,
            std::bit_cast<float>(0x3f808000u),  // 1 + 2^-8: a tie, rounds to even (1)
            std::bit_cast<float>(0x3f818000u),  // a tie that rounds up
            std::bit_cast<float>(0x3f808001u),  // just above a tie
            inf,
            -inf,
            std::bit_cast<float>(0x7fc00001u),
            std::bit_cast<float>(0xff800001u),
            1e-40f,
            -1e-45f,
            std::numeric_limits<float>::max(),
            std::bit_cast<float>(0x7f7f8000u),  // rounds up to infinity
            65504.0f,
            3.14159265f};
  const FVec more = randn(5003, 100.0f);
  x.insert(x.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(x.size());
  for (int64_t off : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "offset=" << off);
    FVec src(off, 0.0f);
    src.insert(src.end(), x.begin(), x.end());
    Buffer bs = to_dev(src, DType::kF32), bh = poisoned(DType::kBF16, n + off);
    k_->convert(bh.ptr().at(off), bs.ptr().at(off), n);
    const FVec got = from_dev(bh);
    const FVec want = rounded(x, DType::kBF16);
    EXPECT_TRUE(same_bits(FVec(got.begin() + off, got.end()), want, "f32 -> bf16"));
    Buffer bf = poisoned(DType::kF32, n + off);
    k_->convert(bf.ptr().at(off), bh.ptr().at(off), n);
    const FVec back = from_dev(bf);
    EXPECT_TRUE(same_bits(FVec(back.begin() + off, back.end()), want, "bf16 -> f32"));
    Buffer same = poisoned(DType::kF32, n + off);
    k_->convert(same.ptr().at(off), bs.ptr().at(off), n);
    const FVec copied = from_dev(same);
    EXPECT_TRUE(same_bits(FVec(copied.begin() + off, copied.end()), x, "f32 -> f32"));
  }
}

// One micro-batch's worth of calls, twice: the second pass makes no system allocation and ends
// with the same memory in use (scratch, plans and angle tables are kept).
TEST_F(CudaUpdateTest, NoAllocationInSteadyState) {
  const int64_t rows = 64, dim = 256, vocab = 300, ff = 512;
  Buffer x = to_dev(randn(rows * dim), DType::kBF16), g = to_dev(randn(dim), DType::kBF16);
  Buffer y = poisoned(DType::kBF16, rows * dim), rstd = poisoned(DType::kF32, rows);
  Buffer dg = to_dev(FVec(dim, 0.0f), DType::kF32), w = to_dev(randn(ff * dim), DType::kBF16);
  Buffer h = poisoned(DType::kBF16, rows * ff), wgrad = to_dev(FVec(ff * dim, 0.0f), DType::kF32);
  Buffer logits = to_dev(randn(rows * vocab), DType::kF32), lse = poisoned(DType::kF32, rows);
  Buffer loss = to_dev(FVec{0.0f}, DType::kF64), tok = to_dev(tokens(rows, vocab));
  Buffer table = to_dev(randn(vocab * dim), DType::kBF16);
  Buffer dtable = to_dev(FVec(vocab * dim, 0.0f), DType::kF32);
  Buffer master = to_dev(randn(ff * dim), DType::kF32),
         mom = to_dev(FVec(ff * dim, 0.0f), DType::kF32);
  Buffer var = to_dev(FVec(ff * dim, 0.0f), DType::kF32);
  auto pass = [&] {
    k_->embedding_forward(x.ptr(), ints(tok), table.ptr(), rows, dim);
    k_->rmsnorm_forward(y.ptr(), rstd.ptr(), x.ptr(), g.ptr(), rows, dim, 1e-5);
    k_->rope(y.ptr(), rows, dim, 32, 4, 64, 1e4, false);
    k_->gemm(false, true, rows, ff, dim, 1.0, y.ptr(), dim, w.ptr(), dim, 0.0, h.ptr(), ff);
    k_->gemm(true, false, ff, dim, rows, 1.0, h.ptr(), ff, y.ptr(), dim, 1.0, wgrad.ptr(), dim);
    k_->cross_entropy_forward(logits.ptr(), vocab, ints(tok), rows, vocab, lse.ptr(), loss.ptr());
    k_->cross_entropy_backward(logits.ptr(), logits.ptr(), vocab, lse.ptr(), ints(tok), rows, vocab,
                               1.0 / rows);
    k_->rmsnorm_backward(x.ptr(), dg.ptr(), y.ptr(), x.ptr(), g.ptr(), rstd.ptr(), rows, dim,
                         false);
    k_->embedding_backward(dtable.ptr(), ints(tok), x.ptr(), rows, dim);
    const double norm = k_->sum_squares(wgrad.ptr(), ff * dim);
    EXPECT_TRUE(std::isfinite(norm));
    k_->adamw(master.ptr(), wgrad.ptr(), mom.ptr(), var.ptr(), ff * dim, 1e-3, 0.9, 0.95, 1e-8, 0.0,
              1, 1.0, w.ptr());
    be_->synchronize();
  };
  pass();
  const MemoryStats warm = be_->memory_stats();
  pass();
  const MemoryStats again = be_->memory_stats();
  EXPECT_EQ(again.system_allocations, warm.system_allocations);
  EXPECT_EQ(again.in_use, warm.in_use);
}

}  // namespace
}  // namespace hp::cudatest
