// CPU backend specifics: which SIMD code path to run and which OpenBLAS core is doing the GEMMs.
// The backend itself is reached through KernelsT<float> (kernels.h).
#pragma once

#include <memory>
#include <string>

#include "kernels/kernels.h"

namespace hp {

// kAuto picks AVX-512 when the CPU has it (F, BW, DQ, VL), else AVX2+FMA.
enum class CpuIsa { kAuto, kAvx512, kAvx2 };

// The thread count the CPU kernels use for `threads`: itself when > 0, else OMP_NUM_THREADS if
// set, else the cores this process may run on (its affinity mask, as mpirun binds it).
int cpu_threads(int threads);

// threads <= 0: cpu_threads(threads). Throws hp::Error if `isa` is not
// supported by this CPU.
std::unique_ptr<KernelsT<float>> make_cpu_kernels(int threads, CpuIsa isa);

// True when this CPU can run `isa` (kAuto: always).
bool cpu_supports(CpuIsa isa);
// The ISA kAuto resolves to on this CPU.
CpuIsa cpu_best_isa();
const char* cpu_isa_name(CpuIsa isa);

// The OpenBLAS kernel family in use (openblas_get_corename), e.g. "SkylakeX" or "Haswell".
std::string blas_core_name();

}  // namespace hp
