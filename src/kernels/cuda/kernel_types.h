// Plain types shared by the kernel sources, their launchers and the CPU emulation test: element
// types, the bad-input record kernels write instead of throwing, and AdamW's constants. No CUDA
// headers here, so tests/cuda_emu compiles the kernel bodies without the toolkit.
#pragma once

#include <cstdint>

namespace hp::cuda {

enum class Elem : int { kF32, kBF16 };
inline int elem_bytes(Elem e) { return e == Elem::kF32 ? 4 : 2; }

// A kernel that meets bad input it cannot throw for (a target outside the vocabulary, a negative
// token) records the first such event here (device memory) and writes NaN into its output; the
// backend copies the record back at its next synchronization and throws hp::Error from it.
struct DeviceErrorRecord {
  int code;  // 0: none, else one of the codes below
  int pad;
  long long a, b, c;
};
enum : int {
  kErrCrossEntropyTarget = 1,          // a: row, b: target, c: vocab
  kErrCrossEntropyBackwardTarget = 2,  // a: row, b: target, c: vocab
  kErrEmbeddingToken = 3,              // a: position, b: token
  kErrEmbeddingBackwardToken = 4,      // a: position, b: token
};

// AdamW constants, computed on the host in the reference's order (see adamw in cuda_kernels.cc).
// AdamW's per-step constants, in double: the update runs in double, as the host backends' does.
struct AdamWConsts {
  double beta1, one_minus_beta1, beta2, one_minus_beta2;
  double shrink;        // 1 - lr * weight_decay
  double step_size;     // lr / (1 - beta1^step)
  double inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
  double eps;
  double grad_scale;
};

}  // namespace hp::cuda
