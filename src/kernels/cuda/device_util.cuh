// Device helpers shared by the kernel bodies (*_kernels.cuh): bf16 storage and rounding
// (bit-identical to dtype.h's to_bf16), 4/8/16-byte vector loads and stores, deterministic warp
// and block sums, the bad-input record, and host-side launch geometry. The bodies compile under
// nvcc, and on the CPU under tests/cuda_emu/kernel_emulator.h (HP_CUDA_EMULATION), which defines
// the CUDA names used here (threadIdx, __syncthreads, __shfl_xor_sync, ...) before including them.
//
// Dispatchers in the *_kernels.cuh headers start kernels through a launch object L:
//   launch(name, kernel, blocks, threads, shared_bytes, args...)
// cuda_launch.cuh's CudaLaunch queues it on a stream; the emulator runs it on CPU fibers.
#pragma once

#ifndef HP_CUDA_EMULATION
#include <cuda_runtime.h>
// Dynamic shared memory of the block, as an array of T.
#define HP_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/kernel_types.h"

namespace hp::cuda {

// bf16 in device memory: the top 16 bits of an IEEE float (same layout as hp::bf16).
struct Bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(Bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

// Round to nearest even; NaN stays NaN with its sign and top payload bits (dtype.h's to_bf16).
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename T>
__device__ __forceinline__ T from_float(float f);
template <>
__device__ __forceinline__ float from_float<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ Bf16 from_float<Bf16>(float f) {
  return Bf16{bf16_bits(f)};
}

__device__ __forceinline__ float nan_f() { return __uint_as_float(0x7fc00000u); }

// An unsigned integer type of kBytes bytes, for vector memory access.
template <int kBytes>
struct RawVec;
template <>
struct RawVec<16> {
  using Type = uint4;
};
template <>
struct RawVec<8> {
  using Type = uint2;
};
template <>
struct RawVec<4> {
  using Type = unsigned int;
};
template <>
struct RawVec<2> {
  using Type = unsigned short;
};

// N consecutive elements at p (aligned to N * sizeof(T) bytes) in one access, as floats.
template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[N]) {
  using Raw = typename RawVec<static_cast<int>(sizeof(T)) * N>::Type;
  union {
    Raw raw;
    T v[N];
  } u;
  u.raw = *reinterpret_cast<const Raw*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = to_float(u.v[j]);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[N]) {
  using Raw = typename RawVec<static_cast<int>(sizeof(T)) * N>::Type;
  union {
    Raw raw;
    T v[N];
  } u;
#pragma unroll
  for (int j = 0; j < N; ++j) u.v[j] = from_float<T>(in[j]);
  *reinterpret_cast<Raw*>(p) = u.raw;
}

// Butterfly sum over a warp: every lane ends with the same bits (each step adds the same two
// values, and addition is commutative).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block in a fixed order; every thread gets the same value. blockDim.x must be a
// multiple of 32 and every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : T(0));
}

// Records the first bad-input event of a kernel (see DeviceErrorRecord); later ones are dropped.
__device__ __forceinline__ void report_error(DeviceErrorRecord* rec, int code, long long a,
                                             long long b, long long c) {
  if (atomicCAS(&rec->code, 0, code) == 0) {
    rec->a = a;
    rec->b = b;
    rec->c = c;
  }
}

// Host side: launch geometry and alignment.
inline bool is_aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}
inline bool all_aligned(std::initializer_list<const void*> ptrs, int bytes) {
  for (const void* p : ptrs) {
    if (!is_aligned(p, bytes)) return false;
  }
  return true;
}
// Threads for a block that spreads `units` work items over one row: a multiple of 32 in [32, 1024].
inline int row_block_threads(int64_t units) {
  const int64_t warps = std::clamp<int64_t>((units + 31) / 32, 1, 32);
  return static_cast<int>(warps * 32);
}
// Blocks of `threads` for `work` items in a grid-stride loop, at most `cap`.
inline unsigned grid_blocks(int64_t work, int threads, int64_t cap) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, cap));
}

}  // namespace hp::cuda
