// Flash-style attention built for AVX512 (per-file flags in src/kernels/CMakeLists.txt).
#define HP_SIMD_AVX512 1
#include "kernels/cpu/attention_impl.h"
