// Elementwise kernels and the ISA table, built for AVX512 (per-file flags in
// src/kernels/CMakeLists.txt).
#include "kernels/cpu/elementwise_impl.h"
