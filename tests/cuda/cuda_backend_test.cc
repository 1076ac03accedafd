// The CUDA backend's memory and copies on a GPU (each test skips without one): transfers of every
// size class through the pinned staging buffers, the caching allocator on the device, the
// out-of-memory message, backends sharing a device from two threads, and bad input reported by a
// kernel at the next synchronization.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "util/error.h"

namespace hp::cudatest {
namespace {

using CudaBackendTest = CudaTest;

TEST_F(CudaBackendTest, Describes) {
  const std::string d = cuda_device_description(0);
  EXPECT_NE(d.find("cuda:0"), std::string::npos) << d;
  EXPECT_NE(d.find("sm_"), std::string::npos) << d;
  EXPECT_EQ(be_->device(), Device::kCuda);
  EXPECT_EQ(be_->name(), d);
  RecordProperty("device", d);
  EXPECT_TRUE(k_->supports(Precision::fp32()));
  EXPECT_TRUE(k_->supports(Precision::bf16()));
  EXPECT_FALSE(k_->supports(Precision::fp64()));
  EXPECT_THROW(make_cuda_backend(cuda_device_count()), Error);
}

// Sizes around the 4 MiB staging buffers: one piece, exactly one, one more byte, several.
TEST_F(CudaBackendTest, UploadDownloadRoundTrip) {
  for (int64_t bytes : {int64_t{1}, int64_t{3}, int64_t{4103}, int64_t{4} << 20,
                        (int64_t{4} << 20) + 1, (int64_t{9} << 20) + 5}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> host(static_cast<size_t>(bytes));
    for (auto& c : host) c = static_cast<unsigned char>(rng_());
    const std::vector<unsigned char> original = host;
    void* dev = be_->allocate(bytes);
    be_->upload(dev, host.data(), bytes);
    // upload has copied the bytes out by the time it returns: the host buffer is free again.
    std::memset(host.data(), 0xAB, host.size());
    std::vector<unsigned char> back(host.size(), 0);
    be_->download(back.data(), dev, bytes);
    EXPECT_EQ(back, original);
    // A device-to-device copy of the middle, then zeroing the start.
    void* dev2 = be_->allocate(bytes);
    be_->zero(dev2, bytes);
    be_->copy(dev2, dev, bytes);
    const int64_t zeroed = bytes / 3;
    be_->zero(dev2, zeroed);
    be_->download(back.data(), dev2, bytes);
    for (int64_t i = 0; i < bytes; ++i) {
      const unsigned char want = i < zeroed ? 0 : original[static_cast<size_t>(i)];
      ASSERT_EQ(back[static_cast<size_t>(i)], want) << "byte " << i;
    }
    be_->deallocate(dev);
    be_->deallocate(dev2);
  }
  be_->synchronize();
}

TEST_F(CudaBackendTest, RepeatedAllocationsComeFromTheCache) {
  const std::vector<int64_t> sizes = {256, 1000, 1 << 20, 12345678, 3, 1 << 20};
  MemoryStats first;
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> ptrs;
    for (int64_t s : sizes) {
      void* p = be_->allocate(s);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << "blocks are 256-byte aligned";
      be_->zero(p, s);  // touch it on the stream
      ptrs.push_back(p);
    }
    const MemoryStats st = be_->memory_stats();
    if (round == 0) {
      first = st;
    } else {
      EXPECT_EQ(st.system_allocations, first.system_allocations) << "round " << round;
      EXPECT_EQ(st.reserved, first.reserved);
      EXPECT_EQ(st.in_use, first.in_use);
    }
    for (void* p : ptrs) be_->deallocate(p);
  }
  EXPECT_GE(first.peak, first.in_use);
  be_->synchronize();
}

TEST_F(CudaBackendTest, OutOfMemorySaysHowMuch) {
  const int64_t huge = int64_t{1} << 50;  // 1 PiB
  try {
    be_->allocate(huge);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 1125899906842624 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("in use"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB free of"), std::string::npos) << msg;
  }
  // The backend still works afterwards (the failed cudaMalloc left no sticky error behind).
  const FVec x = randn(1000);
  Buffer b = to_dev(x, DType::kF32);
  EXPECT_TRUE(same_bits(from_dev(b), x, "round trip after out-of-memory"));
}

// Two backends on one device, each with its own stream, driven from two threads at once.
TEST_F(CudaBackendTest, TwoBackendsOnOneDeviceFromTwoThreads) {
  auto other = make_cuda_backend(0);
  const int64_t n = (1 << 20) + 3;
  const FVec x = randn(static_cast<size_t>(n)), y = randn(static_cast<size_t>(n));
  auto work = [&](Backend& be, float alpha, FVec* out, std::string* error) {
    try {
      Buffer bx(be, DType::kF32, n), by(be, DType::kF32, n);
      be.upload(bx.data(), x.data(), bx.bytes());
      be.upload(by.data(), y.data(), by.bytes());
      for (int i = 0; i < 20; ++i) be.kernels().axpy(by.ptr(), bx.ptr(), alpha, n);
      out->resize(static_cast<size_t>(n));
      be.download(out->data(), by.data(), by.bytes());
    } catch (const std::exception& e) {
      *error = e.what();
    }
  };
  FVec out1, out2;
  std::string err1, err2;
  std::thread t1(work, std::ref(*be_), 0.5f, &out1, &err1);
  std::thread t2(work, std::ref(*other), -0.25f, &out2, &err2);
  t1.join();
  t2.join();
  ASSERT_EQ(err1, "");
  ASSERT_EQ(err2, "");
  for (int64_t i = 0; i < n; i += 997) {
    float e1 = y[static_cast<size_t>(i)], e2 = e1;
    for (int r = 0; r < 20; ++r) {
      e1 = e1 + 0.5f * x[static_cast<size_t>(i)];
      e2 = e2 + -0.25f * x[static_cast<size_t>(i)];
    }
    ASSERT_EQ(out1[static_cast<size_t>(i)], e1) << i;
    ASSERT_EQ(out2[static_cast<size_t>(i)], e2) << i;
  }
}

// A kernel cannot throw; the backend reports its bad input at the next synchronization, once.
TEST_F(CudaBackendTest, BadTargetIsReportedAtSynchronize) {
  const int64_t rows = 4, vocab = 10;
  Buffer logits = to_dev(randn(rows * vocab), DType::kF32);
  Buffer targets = to_dev(std::vector<int32_t>{1, 2, 10, 3});  // row 2 is out of range
  Buffer lse = poisoned(DType::kF32, rows);
  Buffer loss = to_dev(FVec{0.0f}, DType::kF64);
  k_->cross_entropy_forward(logits.ptr(), vocab, ints(targets), rows, vocab, lse.ptr(), loss.ptr());
  try {
    be_->synchronize();
    FAIL() << "an out-of-range target went unreported";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cross_entropy_forward: target 10 of row 2 is outside [0, 10)"),
              std::string::npos)
        << msg;
  }
  be_->synchronize();  // reported once, then cleared
  EXPECT_TRUE(std::isnan(f64_from_dev(loss))) << "the loss of a bad row must be NaN";
  Buffer tokens = to_dev(std::vector<int32_t>{0, -5, 1});
  Buffer table = to_dev(randn(3 * 8), DType::kF32);
  Buffer x = poisoned(DType::kF32, 3 * 8);
  k_->embedding_forward(x.ptr(), ints(tokens), table.ptr(), 3, 8);
  FVec got(24);
  EXPECT_THROW(be_->download(got.data(), x.data(), x.bytes()), Error);
}

TEST_F(CudaBackendTest, KernelsRejectBadArguments) {
  Buffer a = to_dev(randn(16), DType::kF32);
  Buffer d = to_dev(randn(16), DType::kF64);
  Buffer h = to_dev(randn(16), DType::kBF16);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1, d.ptr(), 4, d.ptr(), 4, 0, d.ptr(), 4), Error);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1, a.ptr(), 4, h.ptr(), 4, 0, a.ptr(), 4), Error);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1, a.ptr(), 3, a.ptr(), 4, 0, a.ptr(), 4), Error);
  EXPECT_THROW(k_->gemm(false, false, 4, 4, 4, 1, a.ptr(), 4, a.ptr(), 4, 0, h.ptr(), 4), Error)
      << "f32 inputs into a bf16 C are not a supported combination";
  EXPECT_THROW(k_->axpy(a.ptr(), h.ptr(), 1.0, 16), Error);
  EXPECT_THROW(k_->rope(a.ptr(), 1, 16, 1, 1, 15, 1e4, false), Error);
  Buffer targets = to_dev(std::vector<int32_t>{3});
  EXPECT_THROW(k_->cross_entropy_backward(DataPtr(a.data(), DType::kBF16), a.ptr(), 16, a.ptr(),
                                          ints(targets), 1, 16, 1.0),
               Error)
      << "in-place dlogits over logits of another type";
  EXPECT_THROW(k_->cross_entropy_backward(h.ptr(), a.ptr(), 16, a.ptr(), nullptr, 1, 16, 1.0),
               Error)
      << "null targets";
  EXPECT_THROW(
      k_->adamw(h.ptr(), a.ptr(), a.ptr(), a.ptr(), 16, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1, DataPtr()),
      Error)
      << "master weights are f32";
  be_->synchronize();
}

}  // namespace
}  // namespace hp::cudatest
