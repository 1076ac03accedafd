// Declarations of the per-ISA attention entry points (defined in attention_impl.h, compiled once
// per ISA into namespace hp::avx512 or hp::avx2); elementwise_impl.h puts them in the ISA table.
#pragma once

#include <cstddef>

#include "kernels/kernels.h"
#include "kernels/cpu/simd.h"

namespace hp {
namespace HP_SIMD_NS {

size_t attn_fwd_scratch(const AttnShape& s, int threads);
void attn_fwd(const AttnShape& s, const float* q, const float* k, const float* v, float* o,
              float* lse, float* scratch, int threads);
size_t attn_bwd_scratch(const AttnShape& s, int threads);
void attn_bwd(const AttnShape& s, const float* q, const float* k, const float* v, const float* o,
              const float* dout, const float* lse, float* dq, float* dk, float* dv,
              float* scratch, int threads);

}  // namespace HP_SIMD_NS
}  // namespace hp
