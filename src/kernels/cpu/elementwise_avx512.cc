// Elementwise kernels and the ISA table, built for AVX512 (per-file flags in
// src/kernels/CMakeLists.txt).
#define HP_SIMD_AVX512 1
#include "kernels/cpu/elementwise_impl.h"
