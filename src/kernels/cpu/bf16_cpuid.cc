// Whether this CPU may run the AVX512-BF16 kernels (bf16_ops.h). Built with the default flags.
#include "kernels/cpu/bf16_ops.h"

namespace hp::cpu {

bool cpu_has_avx512bf16() {
  // GCC's checks include the OS support for the AVX-512 register state (XGETBV).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bf16");
}

}  // namespace hp::cpu
