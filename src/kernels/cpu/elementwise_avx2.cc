// Elementwise kernels and the ISA table, built for AVX2 (per-file flags in
// src/kernels/CMakeLists.txt).
#define HP_SIMD_AVX2 1
#include "kernels/cpu/elementwise_impl.h"
