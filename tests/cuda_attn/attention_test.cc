// The CUDA flash attention (src/kernels/cuda/flash_attention.h) against the reference backend in
// double on the same inputs (bf16 inputs are rounded to bf16 first, so both see the same values;
// from 1000 tokens on, the row-parallel double reference fast_reference(), itself checked against
// the reference backend here),
// over head_dim 64 and 128 (the tensor-core path for bf16) and 16, 32, 96, 256 (the SIMT path),
// GQA ratios 1, 2, 4, batch 2, sequences of 1 to 4096 tokens (most not multiples of any tile),
// and q, k, v as slices of one row with padding. Outputs are poisoned with NaN before each call;
// every output value must be written and no padding touched. Skips (GTEST_SKIP) without a GPU,
// except the argument checks, which run everywhere.
//
// Tolerances (normwise ||x - ref|| / ||ref|| for o, dq, dk, dv -- the RMS of x where ref is
// exactly zero, as dq and dk are at seq = 1; max abs for lse):
//   f32: 1e-5 and 1e-5. Every product is an f32 FMA chain over <= 4096 terms with exact expf /
//     logf; on random data that is a few 1e-7 (measured ~3e-7 on the emulation).
//   bf16: 1e-2 and 1e-3. The inputs are exact in both; the error comes from rounding P and dS to
//     bf16 as operands of the tensor-core products (unit roundoff 2^-9 = 2e-3 per element, random
//     in sign, so ~1e-3 normwise) and rounding the outputs to bf16 (~1e-3 normwise); f32
//     accumulation adds ~1e-6. Measured 2e-3 to 4e-3, so 1e-2 leaves a margin of 2.5x while a
//     wrong mask, scale or tile is off by O(1). lse is computed in f32 from exact products:
//     ~1e-6, bounded by 1e-3.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "kernels/cuda/flash_attention.h"
#include "util/error.h"

namespace hp {
namespace {

using attn_test::Problem;
using attn_test::Tolerance;

constexpr Tolerance kF32Tol{1e-5, 1e-5}, kBf16Tol{1e-2, 1e-3};

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                                                                            \
  do {                                                                                           \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or found none)"; \
  } while (0)

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class DevBuf {
 public:
  explicit DevBuf(size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&p_, bytes > 0 ? bytes : 1), "cudaMalloc");
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  char* get() const { return static_cast<char*>(p_); }
  void poison() const { check(cudaMemset(p_, 0xff, bytes_), "cudaMemset"); }  // NaN
  template <typename T>
  void upload(const std::vector<T>& v) const {
    check(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    check(cudaMemcpy(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// One problem's buffers on the device, outputs poisoned.
struct Device {
  const Problem& pb;
  DType dtype;
  int64_t esz;
  DevBuf qkv, dout, o, lse, dqkv, ws;
  cudaStream_t stream = nullptr;

  Device(const Problem& problem, DType t)
      : pb(problem),
        dtype(t),
        esz(dtype_bytes(t)),
        qkv(pb.qkv.size() * esz),
        dout(pb.dout.size() * esz),
        o(pb.rows() * pb.s.ld_o * esz),
        lse(pb.s.batch * pb.s.heads * pb.s.seq * sizeof(float)),
        dqkv(pb.rows() * pb.s.ld_qkv * esz),
        ws(cuda::flash_attention_backward_workspace(t, pb.s)) {
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    set_inputs(pb.qkv);
    upload(dout, pb.dout);
  }
  ~Device() { cudaStreamDestroy(stream); }

  void upload(const DevBuf& b, const std::vector<float>& v) const {
    if (dtype == DType::kBF16)
      b.upload(attn_test::bf16_bits(v));
    else
      b.upload(v);
  }
  std::vector<float> download(const DevBuf& b, size_t n) const {
    if (dtype == DType::kBF16) return attn_test::from_bf16_bits(b.download<uint16_t>(n));
    return b.download<float>(n);
  }
  void set_inputs(const std::vector<float>& values) const { upload(qkv, values); }
  const char* at(const DevBuf& b, int64_t off) const { return b.get() + off * esz; }

  void forward() {
    o.poison();
    lse.poison();
    cuda::flash_attention_forward(dtype, pb.s, at(qkv, pb.q_off()), at(qkv, pb.k_off()),
                                  at(qkv, pb.v_off()), o.get(), reinterpret_cast<float*>(lse.get()),
                                  stream);
    check(cudaStreamSynchronize(stream), "forward");
  }
  void backward() {
    dqkv.poison();
    cuda::flash_attention_backward(
        dtype, pb.s, at(qkv, pb.q_off()), at(qkv, pb.k_off()), at(qkv, pb.v_off()), o.get(),
        dout.get(), reinterpret_cast<const float*>(lse.get()),
        const_cast<char*>(at(dqkv, pb.q_off())), const_cast<char*>(at(dqkv, pb.k_off())),
        const_cast<char*>(at(dqkv, pb.v_off())), ws.get(), stream);
    check(cudaStreamSynchronize(stream), "backward");
  }
  std::vector<float> o_host() const { return download(o, pb.rows() * pb.s.ld_o); }
  std::vector<float> lse_host() const {
    return lse.download<float>(pb.s.batch * pb.s.heads * pb.s.seq);
  }
  std::vector<float> dqkv_host() const { return download(dqkv, pb.rows() * pb.s.ld_qkv); }
};

void check_problem(DType dtype, const AttnShape& s, uint32_t seed) {
  const bool bf16 = dtype == DType::kBF16;
  const Problem pb = attn_test::make_problem(s, bf16, seed, 1.5f);
  const attn_test::Reference ref =
      s.seq >= 1000 ? attn_test::fast_reference(pb) : attn_test::reference(pb);
  Device dev(pb, dtype);
  dev.forward();
  dev.backward();
  attn_test::expect_matches(pb, ref, dev.o_host(), dev.lse_host(), dev.dqkv_host(),
                            bf16 ? kBf16Tol : kF32Tol);
}

// ---- the sweep: dtype x head_dim {64, 128} x seq x GQA ratio, batch 2, padded rows ----------

struct SweepCase {
  DType dtype;
  int64_t head_dim, seq, kv_heads;
};

void PrintTo(const SweepCase& c, std::ostream* os) {
  *os << dtype_name(c.dtype) << " head_dim " << c.head_dim << " seq " << c.seq << " kv_heads "
      << c.kv_heads;
}

class CudaAttentionSweep : public testing::TestWithParam<SweepCase> {};

TEST_P(CudaAttentionSweep, MatchesReference) {
  REQUIRE_GPU();
  const SweepCase c = GetParam();
  // 4 query heads; ld_qkv and ld_o padded by 8 elements (16-byte rows: the tensor-core path).
  check_problem(c.dtype, attn_test::make_shape(2, c.seq, 4, c.kv_heads, c.head_dim, 8, 8),
                static_cast<uint32_t>(c.seq * 7 + c.head_dim + c.kv_heads));
}

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> out;
  for (DType t : {DType::kF32, DType::kBF16})
    for (int64_t d : {64, 128})
      for (int64_t n : {1, 7, 100, 257, 1000})
        for (int64_t kv : {4, 2, 1}) out.push_back({t, d, n, kv});
  return out;
}

std::string sweep_name(const testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) + "_s" +
         std::to_string(c.seq) + "_gqa" + std::to_string(4 / c.kv_heads);
}

INSTANTIATE_TEST_SUITE_P(All, CudaAttentionSweep, testing::ValuesIn(sweep_cases()), sweep_name);

// ---- other head dims (SIMT path for both dtypes), unaligned rows, a long sequence ------------

TEST(CudaAttention, OtherHeadDims) {
  REQUIRE_GPU();
  for (DType t : {DType::kF32, DType::kBF16})
    for (int64_t d : {16, 32, 40, 96, 256}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " head_dim " + std::to_string(d));
      check_problem(t, attn_test::make_shape(2, 257, 4, 2, d, 3, 1), static_cast<uint32_t>(d));
    }
}

// bf16 head_dim 64 / 128 with rows that are not 16-byte aligned take the SIMT path.
TEST(CudaAttention, Bf16UnalignedRows) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    check_problem(DType::kBF16, attn_test::make_shape(2, 100, 4, 2, d, 3, 5), 77);
  }
}

TEST(CudaAttention, LongSequence) {
  REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    check_problem(t, attn_test::make_shape(2, 4096, 2, 1, 128, 8, 8), 4096);
  }
}

// ---- causality, determinism -----------------------------------------------------------------

// Changing keys and values after position `cut` of sequence 0 changes no output of positions
// <= cut (bitwise: masked scores contribute exact zeros), changes some later ones, and leaves
// sequence 1 alone. For f32 (deterministic backward) dq of those rows is bitwise unchanged too.
TEST(CudaAttention, FutureKeysChangeNothing) {
  REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF32}) {
    for (int64_t d : {64, 128}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " head_dim " + std::to_string(d));
      const AttnShape s = attn_test::make_shape(2, 300, 4, 2, d, 8, 8);
      const int64_t cut = 150;
      const Problem pb = attn_test::make_problem(s, t == DType::kBF16, 5);
      Device dev(pb, t);
      dev.forward();
      dev.backward();
      const auto o0 = dev.o_host(), lse0 = dev.lse_host(), dq0 = dev.dqkv_host();
      std::vector<float> changed = pb.qkv;
      for (int64_t i = cut + 1; i < s.seq; ++i)
        for (int64_t c = pb.k_off(); c < pb.v_off() + s.kv_heads * d; ++c)
          changed[i * s.ld_qkv + c] = -2.0f * changed[i * s.ld_qkv + c] + 0.5f;
      dev.set_inputs(changed);
      dev.forward();
      dev.backward();
      const auto o1 = dev.o_host(), lse1 = dev.lse_host(), dq1 = dev.dqkv_host();
      const int64_t hd = s.heads * d;
      int64_t later_changed = 0;
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t i = 0; i < s.seq; ++i) {
          const bool same = b == 1 || i <= cut;
          const int64_t t_row = b * s.seq + i;
          const bool eq =
              std::memcmp(&o0[t_row * s.ld_o], &o1[t_row * s.ld_o], hd * sizeof(float)) == 0;
          if (same) {
            EXPECT_TRUE(eq) << "o of sequence " << b << " row " << i << " changed";
          } else {
            later_changed += !eq;
          }
          for (int64_t h = 0; h < s.heads && same; ++h)
            EXPECT_EQ(lse0[(b * s.heads + h) * s.seq + i], lse1[(b * s.heads + h) * s.seq + i]);
          if (same && t == DType::kF32) {
            EXPECT_EQ(
                std::memcmp(&dq0[t_row * s.ld_qkv], &dq1[t_row * s.ld_qkv], hd * sizeof(float)), 0)
                << "dq of sequence " << b << " row " << i << " changed";
          }
        }
      EXPECT_EQ(later_changed, s.seq - cut - 1) << "the perturbation must reach later rows";
    }
  }
}

// Two runs give bitwise equal outputs, except the bf16 tensor-core dq (f32 atomics: the order of
// additions varies) -- which must still agree to within its tolerance.
TEST(CudaAttention, Deterministic) {
  REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    const AttnShape s = attn_test::make_shape(2, 1000, 4, 2, 128, 8, 8);
    const Problem pb = attn_test::make_problem(s, t == DType::kBF16, 9);
    Device dev(pb, t);
    dev.forward();
    dev.backward();
    const auto o0 = dev.o_host(), lse0 = dev.lse_host(), g0 = dev.dqkv_host();
    dev.forward();
    dev.backward();
    const auto o1 = dev.o_host(), lse1 = dev.lse_host(), g1 = dev.dqkv_host();
    const auto bits_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(bits_equal(o0, o1));
    EXPECT_TRUE(bits_equal(lse0, lse1));
    if (t == DType::kF32) {
      EXPECT_TRUE(bits_equal(g0, g1));
    } else {
      const int64_t hd = s.heads * s.head_dim, kd = s.kv_heads * s.head_dim;
      for (int64_t r = 0; r < pb.rows(); ++r) {
        const float* a = &g0[r * s.ld_qkv];
        const float* b = &g1[r * s.ld_qkv];
        ASSERT_EQ(std::memcmp(a + hd, b + hd, 2 * kd * sizeof(float)), 0) << "dk/dv row " << r;
        for (int64_t c = 0; c < hd; ++c) ASSERT_NEAR(a[c], b[c], 1e-2 * std::abs(a[c]) + 1e-6);
      }
    }
  }
}

// ---- no GPU needed ---------------------------------------------------------------------------

// The row-parallel reference used for long sequences equals the reference backend (both double;
// the backend stores lse as f32).
TEST(CudaAttention, FastReferenceMatchesReferenceBackend) {
  for (const AttnShape& s :
       {attn_test::make_shape(2, 100, 4, 2, 32, 3, 1), attn_test::make_shape(1, 37, 2, 1, 64, 0, 0),
        attn_test::make_shape(2, 1, 4, 4, 16, 8, 8)}) {
    const Problem pb = attn_test::make_problem(s, false, 21, 1.5f);
    const attn_test::Reference a = attn_test::fast_reference(pb), b = attn_test::reference(pb);
    EXPECT_LE(attn_test::normwise(a.o, b.o), 1e-12);
    EXPECT_LE(attn_test::normwise(a.dq, b.dq), 1e-12);
    EXPECT_LE(attn_test::normwise(a.dk, b.dk), 1e-12);
    EXPECT_LE(attn_test::normwise(a.dv, b.dv), 1e-12);
    for (size_t i = 0; i < a.lse.size(); ++i) EXPECT_NEAR(a.lse[i], b.lse[i], 1e-6);
  }
}

// Argument checks fail before any CUDA call.

TEST(CudaAttention, RejectsBadArguments) {
  const AttnShape ok = attn_test::make_shape(1, 16, 4, 2, 64, 0, 0);
  alignas(16) char dummy[16];
  void* p = dummy;
  float* f = reinterpret_cast<float*>(dummy);
  auto fwd = [&](DType t, const AttnShape& s) {
    cuda::flash_attention_forward(t, s, p, p, p, p, f, nullptr);
  };
  auto expect_error = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { fwd(DType::kF64, ok); }, "use f32 or bf16");
  AttnShape s = ok;
  s.kv_heads = 3;
  expect_error([&] { fwd(DType::kF32, s); }, "multiple of kv_heads");
  s = ok;
  s.head_dim = 300;
  s.ld_qkv = s.ld_o = 4 * 300;
  expect_error([&] { fwd(DType::kBF16, s); }, "head_dim 300 is above 256");
  s = ok;
  s.ld_o = 100;
  expect_error([&] { fwd(DType::kF32, s); }, "must be at least heads*head_dim=256");
  s = ok;
  s.seq = 0;
  expect_error([&] { fwd(DType::kF32, s); }, "bad shape");
  expect_error(
      [&] {
        cuda::flash_attention_backward(DType::kBF16, ok, p, p, p, p, p, f, p, p, p, nullptr,
                                       nullptr);
      },
      "workspace is null");
  expect_error([&] { cuda::flash_attention_forward(DType::kF32, ok, p, p, nullptr, p, f, 0); },
               "must all be device pointers");
  EXPECT_GT(cuda::flash_attention_backward_workspace(DType::kBF16, ok),
            cuda::flash_attention_backward_workspace(DType::kF32, ok));
}

}  // namespace
}  // namespace hp
