// Flash-style attention built for AVX2 (per-file flags in src/kernels/CMakeLists.txt).
#include "kernels/cpu/attention_impl.h"
