// Helpers for the CUDA tests: a fixture that skips without a GPU, host <-> device copies of float
// data as f32 or bf16 (bf16 rounded on the host first, so the reference sees exactly the values
// the device does), NaN-poisoned outputs, and comparisons that fail on any unwritten (NaN) output.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"

namespace hp::cudatest {

using FVec = std::vector<float>;
using DVec = std::vector<double>;

// Seed of this process's random inputs: HP_TEST_SEED if set, else fresh; printed on failures.
inline uint32_t base_seed() {
  static const uint32_t seed = [] {
    if (const char* s = std::getenv("HP_TEST_SEED"))
      return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
    return static_cast<uint32_t>(std::random_device{}());
  }();
  return seed;
}

inline float round_to(float x, DType t) { return t == DType::kBF16 ? to_float(to_bf16(x)) : x; }
inline FVec rounded(FVec v, DType t) {
  for (float& x : v) x = round_to(x, t);
  return v;
}
inline DVec to_d(const FVec& v) { return DVec(v.begin(), v.end()); }

// Bits of a float, for exact comparisons that also match NaNs.
inline uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// max|got - ref| / max|ref| over rows x width values at row stride ld; fails if that exceeds tol
// or if any got value is not finite where ref is (an output the kernel did not write stays NaN).
inline ::testing::AssertionResult near(const FVec& got, const DVec& ref, double tol,
                                       const std::string& what, int64_t rows = -1,
                                       int64_t width = -1, int64_t ld = -1) {
  if (rows < 0) {
    rows = 1;
    width = ld = static_cast<int64_t>(ref.size());
  }
  if (got.size() < static_cast<size_t>((rows - 1) * ld + width) ||
      ref.size() < static_cast<size_t>((rows - 1) * ld + width)) {
    return ::testing::AssertionFailure()
           << what << ": output sizes " << got.size() << "/" << ref.size() << " are too small";
  }
  double worst = 0, mag = 1e-30;
  int64_t worst_at = 0, bad = 0, first_bad = -1;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      const int64_t i = r * ld + c;
      const double g = got[static_cast<size_t>(i)], e = ref[static_cast<size_t>(i)];
      if (std::isfinite(e) && !std::isfinite(g)) {
        if (bad++ == 0) first_bad = i;
        continue;
      }
      if (std::abs(g - e) > worst) {
        worst = std::abs(g - e);
        worst_at = i;
      }
      if (std::isfinite(e)) mag = std::max(mag, std::abs(e));
    }
  }
  if (bad > 0) {
    return ::testing::AssertionFailure()
           << what << ": " << bad << " outputs not finite (not written?), first at index "
           << first_bad << " (row " << first_bad / ld << ", column " << first_bad % ld << "): got "
           << got[static_cast<size_t>(first_bad)] << ", reference "
           << ref[static_cast<size_t>(first_bad)] << "; seed " << base_seed();
  }
  const double err = worst / mag;
  if (err > tol) {
    return ::testing::AssertionFailure()
           << what << ": max|got - ref| / max|ref| = " << err << " > tolerance " << tol
           << " (worst at index " << worst_at << ": got " << got[static_cast<size_t>(worst_at)]
           << ", reference " << ref[static_cast<size_t>(worst_at)] << ", max|ref| " << mag
           << "); seed " << base_seed();
  }
  return ::testing::AssertionSuccess();
}

// Bitwise equality of two float vectors (NaN payloads included).
inline ::testing::AssertionResult same_bits(const FVec& a, const FVec& b, const std::string& what) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " and " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (bits(a[i]) != bits(b[i])) {
      return ::testing::AssertionFailure()
             << what << ": first difference at index " << i << ": " << a[i] << " (0x" << std::hex
             << bits(a[i]) << ") vs " << b[i] << " (0x" << bits(b[i]) << std::dec << "); seed "
             << base_seed();
    }
  }
  return ::testing::AssertionSuccess();
}

// Columns [width, ld) of each row must still hold their old bits (the kernel wrote nothing there).
inline ::testing::AssertionResult padding_kept(const FVec& got, const FVec& before, int64_t rows,
                                               int64_t width, int64_t ld, const std::string& what) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = width; c < ld; ++c) {
      const size_t i = static_cast<size_t>(r * ld + c);
      if (i < got.size() && bits(got[i]) != bits(before[i])) {
        return ::testing::AssertionFailure()
               << what << ": wrote outside its rows at row " << r << ", column " << c;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device (" << cuda_unavailable_reason() << ")";
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const uint32_t salt = static_cast<uint32_t>(
        std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()));
    rng_.seed(base_seed() ^ salt);
    RecordProperty("seed", std::to_string(base_seed()));
    be_ = make_cuda_backend(0);
    k_ = &be_->kernels();
  }

  FVec randn(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    FVec v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  FVec uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    FVec v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::vector<int32_t> tokens(size_t n, int32_t vocab) {
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(rng_);
    return v;
  }

  // A device copy of host values as type t (bf16: rounded to nearest even).
  Buffer to_dev(const FVec& host, DType t) {
    Buffer b(*be_, t, static_cast<int64_t>(host.size()));
    if (host.empty()) return b;
    if (t == DType::kF32) {
      be_->upload(b.data(), host.data(), b.bytes());
    } else if (t == DType::kBF16) {
      std::vector<bf16> h(host.size());
      for (size_t i = 0; i < host.size(); ++i) h[i] = to_bf16(host[i]);
      be_->upload(b.data(), h.data(), b.bytes());
    } else {
      DVec h(host.begin(), host.end());
      be_->upload(b.data(), h.data(), b.bytes());
    }
    return b;
  }
  // int32 data (tokens, targets) live in a 4-byte-element buffer.
  Buffer to_dev(const std::vector<int32_t>& host) {
    Buffer b(*be_, DType::kF32, static_cast<int64_t>(host.size()));
    be_->upload(b.data(), host.data(), b.bytes());
    return b;
  }
  static const int32_t* ints(const Buffer& b) { return static_cast<const int32_t*>(b.data()); }

  // n NaNs of type t: outputs start poisoned, so anything not written shows up.
  Buffer poisoned(DType t, int64_t n) {
    return to_dev(FVec(static_cast<size_t>(n), std::nanf("")), t);
  }

  FVec from_dev(const Buffer& b) {
    FVec out(static_cast<size_t>(b.elems()));
    if (b.elems() == 0) return out;
    if (b.dtype() == DType::kF32) {
      be_->download(out.data(), b.data(), b.bytes());
    } else if (b.dtype() == DType::kBF16) {
      std::vector<bf16> h(out.size());
      be_->download(h.data(), b.data(), b.bytes());
      for (size_t i = 0; i < h.size(); ++i) out[i] = to_float(h[i]);
    } else {
      DVec h(out.size());
      be_->download(h.data(), b.data(), b.bytes());
      for (size_t i = 0; i < h.size(); ++i) out[i] = static_cast<float>(h[i]);
    }
    return out;
  }
  double f64_from_dev(const Buffer& b) {
    double v = 0;
    be_->download(&v, b.data(), 8);
    return v;
  }

  std::mt19937 rng_;
  std::unique_ptr<Backend> be_;
  Kernels* k_ = nullptr;
};

// The same fixture over the two compute types.
class CudaTypedTest : public CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType t() const { return GetParam(); }
  // Tolerance of a bf16 output relative to the largest reference value: one rounding to bf16
  // (half an ulp, 2^-8 relative) on top of the f32 error `f32_tol`; f32 outputs get f32_tol.
  double tol(double f32_tol) const { return t() == DType::kBF16 ? 1.0 / 256 + f32_tol : f32_tol; }
};

inline std::string type_param_name(const ::testing::TestParamInfo<DType>& info) {
  return dtype_name(info.param);
}

}  // namespace hp::cudatest
