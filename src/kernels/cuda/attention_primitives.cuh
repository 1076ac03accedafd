// The device primitives the attention kernel bodies are written against (ldmatrix, mma.sync,
// cp.async, shuffles, barriers, bf16 bits), for nvcc. tests/cuda_emu/warp_emulator.h defines the
// same names on the host so the same bodies run on a CPU emulation of a CTA.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#define HP_DEV __device__ __forceinline__

namespace hp::cuda::attn {

using bf16raw = uint16_t;  // bf16 bits; kernels never do arithmetic on them directly

HP_DEV uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, r[i] receives it.
HP_DEV void ldsm_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row))
               : "memory");
}
// The same, each matrix transposed on the way.
HP_DEV void ldsm_x4_t(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row))
               : "memory");
}

// d[16x8] += a[16x16] b[16x8], bf16 inputs, f32 accumulators.
HP_DEV void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Asynchronous global -> shared copies; valid = false writes zeros and reads nothing.
HP_DEV void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
HP_DEV void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
HP_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits for every committed group of this thread (a block_sync must follow before other
// threads read the data).
HP_DEV void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

HP_DEV void block_sync() { __syncthreads(); }

// 2^x by the special-function unit (relative error ~2^-22, -inf -> +0, denormals flushed): the
// bf16 path's exponential, where P is rounded to bf16 right after.
HP_DEV float fast_exp2(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

HP_DEV float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
HP_DEV float shfl_idx(float v, int lane) { return __shfl_sync(0xffffffffu, v, lane); }

// lo in the low 16 bits (the lower column of a fragment pair), round to nearest even.
HP_DEV uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return (static_cast<uint32_t>(__bfloat16_as_ushort(h.y)) << 16) |
         static_cast<uint32_t>(__bfloat16_as_ushort(h.x));
}
HP_DEV float bf16_to_f32(bf16raw b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
HP_DEV bf16raw f32_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// p[0] += a, p[1] += b (p 8-byte aligned); one vector reduction on sm_90.
HP_DEV void red_add2(float* p, float a, float b) {
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
}

}  // namespace hp::cuda::attn
