// The vector exponentials of kernels/cpu/simd.h, AVX-512 copy, over plain arrays for
// simd_exp_test.cc. Built with the AVX-512 flags (tests/CMakeLists.txt) and called only on a CPU
// that has them; like the kernels' own ISA files it uses no out-of-line template (simd.h's rule).
#define HP_SIMD_AVX512 1
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace hp::test {

// y = e^x elementwise; softmax picks vexp_softmax, else vexp. n a multiple of 16.
void simd_exp_avx512(const float* x, float* y, int64_t n, bool softmax) {
  for (int64_t i = 0; i < n; i += avx512::kW) {
    const avx512::vf v = avx512::vload(x + i);
    avx512::vstore(y + i, softmax ? avx512::vexp_softmax(v) : avx512::vexp(v));
  }
}

}  // namespace hp::test
