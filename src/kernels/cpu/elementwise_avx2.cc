// Elementwise kernels and the ISA table, built for AVX2 (per-file flags in
// src/kernels/CMakeLists.txt).
#include "kernels/cpu/elementwise_impl.h"
