// CPU backend specifics: which SIMD code path to run and which OpenBLAS core is doing the GEMMs.
// The kernels are reached through Kernels (kernels.h), the backend through Backend (backend.h).
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/kernels.h"

namespace hp {

// kAuto picks AVX-512 with AVX512-BF16 when the CPU has both (f32 kernels as kAvx512, plus the
// bf16 kernels: the only ISA under which supports(Precision::bf16()) is true), else AVX-512 (F, BW,
// DQ, VL), else AVX2+FMA.
enum class CpuIsa { kAuto, kAvx512, kAvx512Bf16, kAvx2 };

// The thread count the CPU kernels use for `threads`: itself when > 0, else OMP_NUM_THREADS if
// set, else the cores this process may run on (its affinity mask, as mpirun binds it).
int cpu_threads(int threads);

// threads <= 0: cpu_threads(threads). Throws hp::Error if `isa` is not
// supported by this CPU. (make_cpu_kernels(threads) and make_cpu_backend(threads) use kAuto, or
// HP_CPU_ISA=avx2|avx512|avx512bf16|auto when set.)
std::unique_ptr<Kernels> make_cpu_kernels(int threads, CpuIsa isa);
std::unique_ptr<Backend> make_cpu_backend(int threads, CpuIsa isa);

// The ISA HP_CPU_ISA=avx2|avx512|avx512bf16|auto asks for (kAuto when unset); hp::Error on
// another value.
CpuIsa cpu_isa_from_env();

// True when this CPU can run `isa` (kAuto: always).
bool cpu_supports(CpuIsa isa);
// The ISA kAuto resolves to on this CPU.
CpuIsa cpu_best_isa();
const char* cpu_isa_name(CpuIsa isa);

// The OpenBLAS kernel family in use (openblas_get_corename), e.g. "SkylakeX" or "Haswell".
std::string blas_core_name();

}  // namespace hp
