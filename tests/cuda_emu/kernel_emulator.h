// The CUDA names the backend's kernel bodies (src/kernels/cuda/*_kernels.cuh) use, defined on the
// host over warp_emulator.h's fibers, so those bodies and their dispatchers (launch geometry,
// vector or scalar path) run on a CPU: threadIdx/blockIdx/blockDim/gridDim, __syncthreads,
// __shfl_xor_sync (every lane of the warp must take part, else "warp divergence" aborts),
// atomicCAS, the _rn arithmetic intrinsics, float bit casts, the vector types, dynamic and static
// shared memory (one block runs at a time, so function-level statics stand in for __shared__).
// Include this first, then the *_kernels.cuh headers. Not emulated: CUB (tests sort on the host).
#pragma once

// clang-format off
#include "warp_emulator.h"  // fibers and barriers; first, before the CUDA names below exist
// clang-format on

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#define HP_CUDA_EMULATION 1
#define __global__ [[maybe_unused]]
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define HP_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::hp::cuda::attn::emu::block()->smem)

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};

namespace hp::cuda::kemu {

struct Dim {
  unsigned x, y, z;
};
inline Dim& grid_dim() {
  static Dim d{1, 1, 1};
  return d;
}
inline Dim& block_idx() {
  static Dim d{0, 0, 0};
  return d;
}
inline Dim thread_idx() { return {static_cast<unsigned>(attn::emu::block()->current), 0, 0}; }
inline Dim block_dim() { return {static_cast<unsigned>(attn::emu::block()->nthreads), 1, 1}; }

// A warp shuffle of any 4- or 8-byte value through a per-warp exchange.
template <typename T>
T shfl_xor(T v, int offset) {
  static_assert(sizeof(T) <= 8);
  static std::vector<std::array<uint64_t, 32>> slots;
  attn::emu::Block& b = *attn::emu::block();
  const int warp = b.current >> 5, lane = b.current & 31;
  if (slots.size() < b.warps.size()) slots.resize(b.warps.size());
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[warp][lane] = bits;
  attn::emu::collective_enter(100 + static_cast<int>(sizeof(T)));
  const uint64_t got = slots[warp][lane ^ offset];
  attn::emu::warp_barrier();  // nobody overwrites a slot before every lane has read
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}

}  // namespace hp::cuda::kemu

#define threadIdx (::hp::cuda::kemu::thread_idx())
#define blockIdx (::hp::cuda::kemu::block_idx())
#define blockDim (::hp::cuda::kemu::block_dim())
#define gridDim (::hp::cuda::kemu::grid_dim())

inline void __syncthreads() { hp::cuda::attn::emu::block_barrier(); }
template <typename T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  return hp::cuda::kemu::shfl_xor(v, offset);
}
inline int atomicCAS(int* p, int compare, int value) {
  const int old = *p;
  if (old == compare) *p = value;
  return old;
}
// The host computes each of these with one rounding (no FMA contraction without -mfma).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }

namespace hp::cuda::kemu {

// Which ready thread runs next. kRandom (warp_emulator.h's order) rarely lets one warp run far
// ahead of another; the two greedy orders do exactly that (the lowest, or highest, numbered ready
// thread runs until it blocks), which exposes a missing barrier between a warp that writes shared
// memory again and a warp still reading the previous value.
enum class Schedule { kRandom, kLowFirst, kHighFirst };

// warp_emulator.h's run_block with a choice of schedule.
inline void run_block(int nthreads, std::vector<unsigned char>& smem, uint32_t seed,
                      Schedule schedule, const std::function<void(int)>& body) {
  namespace emu = attn::emu;
  constexpr size_t kStack = 256 * 1024;
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() < static_cast<size_t>(nthreads)) {
    stacks.push_back(std::unique_ptr<char[]>(new char[kStack]));
  }
  if (nthreads % 32 != 0) emu::die("block size must be a multiple of 32");
  emu::Block b;
  b.nthreads = nthreads;
  b.smem = smem.data();
  b.smem_bytes = smem.size();
  std::memset(smem.data(), 0x7f, smem.size());  // garbage: large finite values
  b.fibers.resize(nthreads);
  b.warps.resize(nthreads / 32);
  b.rng.seed(seed);
  b.body = body;
  emu::block() = &b;
  for (int i = 0; i < nthreads; ++i) {
    emu::Fiber& f = b.fibers[i];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks[i].get();
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, emu::fiber_main, 0);
  }
  std::vector<int> ready;
  for (;;) {
    ready.clear();
    int done = 0;
    for (int i = 0; i < nthreads; ++i) {
      if (b.fibers[i].done) {
        ++done;
      } else if (b.fibers[i].runnable) {
        ready.push_back(i);
      }
    }
    if (done == nthreads) break;
    if (ready.empty()) {
      std::fprintf(stderr, "kernel emulator: deadlock, %d of %d threads at __syncthreads\n",
                   b.arrived, nthreads);
      std::abort();
    }
    switch (schedule) {
      case Schedule::kRandom:
        b.current = ready[b.rng() % ready.size()];
        break;
      case Schedule::kLowFirst:
        b.current = ready.front();
        break;
      case Schedule::kHighFirst:
        b.current = ready.back();
        break;
    }
    swapcontext(&b.sched, &b.fibers[b.current].ctx);
  }
  emu::block() = nullptr;
}

// The launch object of the dispatchers: every block of the grid, one after another, each on a
// fresh emulated block (shared memory filled with garbage), the schedule rotating over blocks and
// launches so every kernel meets all three.
struct EmuLaunch {
  uint32_t seed = 1;
  std::vector<std::string> launched;  // kernel names, in launch order

  template <typename... KArgs, typename... Args>
  void operator()(const char* name, void (*kernel)(KArgs...), unsigned blocks, int threads,
                  size_t shared_bytes, Args... args) {
    launched.push_back(name);
    std::vector<unsigned char> smem(std::max<size_t>(shared_bytes, 16));
    grid_dim() = {blocks, 1, 1};
    for (unsigned b = 0; b < blocks; ++b) {
      block_idx() = {b, 0, 0};
      const auto schedule = static_cast<Schedule>((launched.size() + b) % 3);
      run_block(threads, smem, seed++, schedule, [&](int) { kernel(static_cast<KArgs>(args)...); });
    }
  }
};

}  // namespace hp::cuda::kemu
