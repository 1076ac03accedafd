// CudaKernels' attention calls (the flash-attention kernels behind flash_attention.h) against the
// reference, with q, k and v interleaved in one padded QKV row as the model stores them: this
// checks the wiring (strides, GQA head mapping, the lse layout, the backward's workspace). The
// kernels' own accuracy tests are in tests/cuda_attn.
//
// Tolerances (relative to the largest reference value): fp32 2e-5 forward, 5e-5 backward (as the
// CPU attention); bf16 3e-2 and 6e-2 (inputs, probabilities and outputs each rounded to bf16):
// loose, but a wrong stride or head mapping is off by O(1).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/reference/reference_math.h"

namespace hp::cudatest {
namespace {

class CudaAttentionTest : public CudaTypedTest {
 protected:
  ReferenceMath<double> ref_;
};

INSTANTIATE_TEST_SUITE_P(Types, CudaAttentionTest, ::testing::Values(DType::kF32, DType::kBF16),
                         type_param_name);

TEST_P(CudaAttentionTest, MatchesReferenceThroughKernels) {
  struct Case {
    int64_t batch, seq, heads, kv_heads, head_dim;
  };
  const double tol_fwd = t() == DType::kF32 ? 2e-5 : 3e-2;
  const double tol_bwd = t() == DType::kF32 ? 5e-5 : 6e-2;
  for (const Case& c : {Case{2, 37, 4, 2, 64}, Case{1, 130, 2, 1, 128}, Case{1, 1, 1, 1, 64},
                        Case{3, 65, 2, 2, 64}}) {
    SCOPED_TRACE(::testing::Message()
                 << "batch=" << c.batch << " seq=" << c.seq << " heads=" << c.heads
                 << " kv_heads=" << c.kv_heads << " head_dim=" << c.head_dim);
    AttnShape s;
    s.batch = c.batch;
    s.seq = c.seq;
    s.heads = c.heads;
    s.kv_heads = c.kv_heads;
    s.head_dim = c.head_dim;
    s.ld_qkv = (c.heads + 2 * c.kv_heads) * c.head_dim + 8;
    s.ld_o = c.heads * c.head_dim + 8;
    const int64_t rows = c.batch * c.seq, k_off = c.heads * c.head_dim;
    const int64_t v_off = (c.heads + c.kv_heads) * c.head_dim, kv_width = c.kv_heads * c.head_dim;
    const FVec qkv = rounded(randn(rows * s.ld_qkv), t());
    const FVec dout = rounded(randn(rows * s.ld_o), t());
    Buffer bqkv = to_dev(qkv, t()), bdout = to_dev(dout, t());
    Buffer o = poisoned(t(), rows * s.ld_o), lse = poisoned(DType::kF32, c.batch * c.heads * c.seq);
    const DataPtr q = bqkv.ptr(), k = bqkv.ptr().at(k_off), v = bqkv.ptr().at(v_off);
    k_->attention_forward(s, q, k, v, o.ptr(), lse.ptr());
    const DVec qd = to_d(qkv), dod = to_d(dout);
    DVec ro(rows * s.ld_o, 0.0);
    DVec rlse(c.batch * c.heads * c.seq);
    ref_.attention_forward(s, qd.data(), qd.data() + k_off, qd.data() + v_off, ro.data(),
                           rlse.data());
    EXPECT_TRUE(near(from_dev(o), ro, tol_fwd, "o", rows, k_off, s.ld_o));
    EXPECT_TRUE(near(from_dev(lse), rlse, 1e-5, "lse"));

    Buffer dqkv = poisoned(t(), rows * s.ld_qkv);
    k_->attention_backward(s, q, k, v, o.ptr(), bdout.ptr(), lse.ptr(), dqkv.ptr(),
                           dqkv.ptr().at(k_off), dqkv.ptr().at(v_off));
    DVec rd(rows * s.ld_qkv, 0.0);
    ref_.attention_backward(s, qd.data(), qd.data() + k_off, qd.data() + v_off, ro.data(),
                            dod.data(), rlse.data(), rd.data(), rd.data() + k_off,
                            rd.data() + v_off);
    const FVec got = from_dev(dqkv);
    auto part = [](const auto& vec, int64_t off) {
      using V = std::decay_t<decltype(vec)>;
      return V(vec.begin() + off, vec.end());
    };
    EXPECT_TRUE(near(got, rd, tol_bwd, "dq", rows, k_off, s.ld_qkv));
    EXPECT_TRUE(near(part(got, k_off), part(rd, k_off), tol_bwd, "dk", rows, kv_width, s.ld_qkv));
    EXPECT_TRUE(near(part(got, v_off), part(rd, v_off), tol_bwd, "dv", rows, kv_width, s.ld_qkv));
  }
}

}  // namespace
}  // namespace hp::cudatest
