// Without a GPU (or driver), the CUDA build must still run: cuda_device_count() is 0, quietly, and
// making a backend fails with a message that says why and what to use instead.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "util/error.h"

namespace hp {
namespace {

TEST(CudaNoDevice, CountIsZeroAndBackendSaysWhy) {
  if (cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_EQ(cuda_device_count(), 0) << "a second call must not crash or change its answer";
  EXPECT_FALSE(cuda_unavailable_reason().empty());
  try {
    make_cuda_backend(0);
    FAIL() << "make_cuda_backend succeeded without a device";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no CUDA device is usable"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu backend"), std::string::npos) << msg;
  }
  EXPECT_THROW(cuda_device_description(0), Error);
}

}  // namespace
}  // namespace hp
