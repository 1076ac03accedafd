// The host side of the CUDA attention: shape and pointer checks (hp::Error), the choice between
// the bf16 tensor-core kernels and the SIMT kernels, the workspace layout, and CUDA error checks.
// The kernels themselves are in attention_kernels.cu.
#include "kernels/cuda/flash_attention.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/cuda/attention_launch.h"
#include "util/error.h"

namespace hp::cuda {
namespace {

using attn::Params;

void check_dtype(const char* fn, DType dtype) {
  HP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
           "{}: element type {} is not supported by the CUDA attention; use f32 or bf16", fn,
           dtype_name(dtype));
}

void check_shape(const char* fn, const AttnShape& s) {
  HP_CHECK(s.batch >= 1 && s.seq >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1 &&
               s.heads % s.kv_heads == 0,
           "{}: bad shape batch={} seq={} heads={} kv_heads={} head_dim={} (all >= 1, heads a "
           "multiple of kv_heads)",
           fn, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  HP_CHECK(s.head_dim <= attn::kSimtMaxHeadDim,
           "{}: head_dim {} is above {}, the largest the CUDA attention supports; use more heads "
           "of a smaller head_dim",
           fn, s.head_dim, attn::kSimtMaxHeadDim);
  HP_CHECK(s.ld_qkv >= s.heads * s.head_dim && s.ld_o >= s.heads * s.head_dim,
           "{}: row strides ld_qkv={} and ld_o={} must be at least heads*head_dim={}", fn, s.ld_qkv,
           s.ld_o, s.heads * s.head_dim);
  // Grid limits: the SIMT kernels put seq / 32 tiles on gridDim.y (at most 65535).
  constexpr int64_t kMaxSeq = int64_t{65535} * attn::kSimtTile;
  HP_CHECK(s.seq <= kMaxSeq,
           "{}: seq={} is above {}, the longest the CUDA attention supports; "
           "split the sequence",
           fn, s.seq, kMaxSeq);
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  HP_CHECK(s.batch * s.heads <= kIntMax && s.batch * s.seq * s.heads <= kIntMax,
           "{}: batch={} x seq={} x heads={} is too large for one call; split the batch", fn,
           s.batch, s.seq, s.heads);
}

void check_cuda(cudaError_t e, const char* fn) {
  HP_CHECK(e == cudaSuccess, "{}: CUDA error {}: {}", fn, cudaGetErrorName(e),
           cudaGetErrorString(e));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The tensor-core kernels need bf16, head_dim 64 or 128, and every row of every operand 16-byte
// aligned (cp.async moves 16 bytes); other calls take the SIMT kernels.
bool use_mma(DType dtype, const AttnShape& s, std::initializer_list<const void*> ptrs) {
  if (dtype != DType::kBF16 || (s.head_dim != 64 && s.head_dim != 128)) return false;
  if (s.ld_qkv % 8 != 0 || s.ld_o % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

Params make_params(const AttnShape& s) {
  Params p;
  p.ld_qkv = s.ld_qkv;
  p.ld_o = s.ld_o;
  p.batch = static_cast<int>(s.batch);
  p.seq = static_cast<int>(s.seq);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.head_dim = static_cast<int>(s.head_dim);
  p.group = p.heads / p.kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.scale_log2 = p.scale * attn::kLog2e;
  return p;
}

constexpr size_t round_up(size_t n) { return (n + 255) / 256 * 256; }
// Workspace: D_i (f32, [batch][heads][seq]), then for bf16 the f32 dQ accumulator
// [batch * seq][heads * head_dim].
size_t dvec_bytes(const AttnShape& s) {
  return round_up(s.batch * s.heads * s.seq * sizeof(float));
}
size_t dq_acc_bytes(DType dtype, const AttnShape& s) {
  return dtype == DType::kBF16 ? round_up(s.batch * s.seq * s.heads * s.head_dim * sizeof(float))
                               : 0;
}

}  // namespace

void flash_attention_forward(DType dtype, const AttnShape& s, const void* q, const void* k,
                             const void* v, void* o, float* lse, cudaStream_t stream) {
  constexpr const char* kFn = "flash_attention_forward";
  check_dtype(kFn, dtype);
  check_shape(kFn, s);
  HP_CHECK(q && k && v && o && lse, "{}: q, k, v, o and lse must all be device pointers", kFn);
  Params p = make_params(s);
  p.q = q;
  p.k = k;
  p.v = v;
  p.o_out = o;
  p.lse_out = lse;
  const cudaError_t e = use_mma(dtype, s, {q, k, v, o})
                            ? attn::launch_forward_mma(p, stream)
                            : attn::launch_forward_simt(dtype == DType::kBF16, p, stream);
  check_cuda(e, kFn);
}

size_t flash_attention_backward_workspace(DType dtype, const AttnShape& s) {
  constexpr const char* kFn = "flash_attention_backward_workspace";
  check_dtype(kFn, dtype);
  check_shape(kFn, s);
  return dvec_bytes(s) + dq_acc_bytes(dtype, s);
}

void flash_attention_backward(DType dtype, const AttnShape& s, const void* q, const void* k,
                              const void* v, const void* o, const void* dout, const float* lse,
                              void* dq, void* dk, void* dv, void* workspace, cudaStream_t stream) {
  constexpr const char* kFn = "flash_attention_backward";
  check_dtype(kFn, dtype);
  check_shape(kFn, s);
  HP_CHECK(q && k && v && o && dout && lse && dq && dk && dv,
           "{}: q, k, v, o, dout, lse, dq, dk and dv must all be device pointers", kFn);
  HP_CHECK(workspace != nullptr && aligned16(workspace),
           "{}: workspace is null or not 16-byte aligned; pass {} bytes of device memory "
           "(flash_attention_backward_workspace)",
           kFn, flash_attention_backward_workspace(dtype, s));
  Params p = make_params(s);
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.dout = dout;
  p.lse = lse;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.dvec = static_cast<float*>(workspace);
  const bool bf16 = dtype == DType::kBF16;
  check_cuda(attn::launch_row_dot(bf16, p, stream), kFn);
  if (use_mma(dtype, s, {q, k, v, o, dout, dq, dk, dv})) {
    p.dq_acc = reinterpret_cast<float*>(static_cast<char*>(workspace) + dvec_bytes(s));
    check_cuda(attn::launch_backward_mma(p, stream), kFn);
  } else {
    check_cuda(attn::launch_backward_simt(bf16, p, stream), kFn);
  }
}

}  // namespace hp::cuda
