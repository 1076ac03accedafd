// A CPU emulation of one CUDA thread block, enough to run the attention kernel bodies of
// src/kernels/cuda (attention_mma.cuh, attention_simt.cuh) without a GPU: it defines the
// primitives of attention_primitives.cuh on the host. Each thread is a ucontext fiber on the one
// OS thread; the scheduler runs them in a seeded random order, so any missing barrier shows up as
// wrong numbers rather than luck. Not a simulator of timing, memory spaces or occupancy.
//
// What it checks beyond the arithmetic:
//   - __syncthreads: every thread of the block must arrive (a thread that skipped it deadlocks,
//     which is reported); warp collectives (ldmatrix, mma, shuffles) need all 32 lanes at the
//     same collective, else "warp divergence" is reported;
//   - ldmatrix: each lane's row address is 16-byte aligned and inside the block's shared memory;
//     the fragment layouts follow the PTX ISA (ldmatrix .x4 with and without .trans, mma.sync
//     m16n8k16 row.col bf16 -> f32);
//   - cp.async: destination inside shared memory, both addresses aligned to the copy size; the
//     destination is poisoned (all bits set: NaN in f32 and bf16) when the copy is issued and
//     written only when the issuing thread waits for it, so reading a stage before the wait and
//     barrier, or issuing into a stage another warp still reads, turns results into NaN.
// Problems are reported on stderr and abort the test binary.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "kernels/dtype.h"

#define HP_DEV inline
#define HP_ATTN_HOST_PRIMITIVES 1

namespace hp::cuda::attn {

using bf16raw = uint16_t;

namespace emu {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "warp emulator: %s\n", what);
  std::abort();
}

struct CopyOp {
  unsigned char* dst;
  const unsigned char* src;
  int bytes;
  bool valid;
};

struct Fiber {
  ucontext_t ctx;
  bool done = false, runnable = true;
  std::vector<CopyOp> open;                 // issued, not yet committed
  std::vector<std::vector<CopyOp>> groups;  // committed, not yet waited for
};

struct Warp {
  int arrived = 0;
  std::vector<int> waiting;
  int op[32] = {};
  const void* ptr[32] = {};
  uint32_t u[32][6] = {};
  float f[32] = {};
};

struct Block {
  int nthreads = 0;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int arrived = 0;
  std::vector<int> waiting;
  ucontext_t sched;
  int current = -1;
  std::mt19937 rng;
  std::function<void(int)> body;
};

inline Block*& block() {
  static Block* b = nullptr;
  return b;
}
inline Fiber& self() { return block()->fibers[block()->current]; }
inline int lane() { return block()->current & 31; }
inline Warp& warp() { return block()->warps[block()->current >> 5]; }

// Gives the scheduler the turn; blocked = true waits until a barrier releases this thread.
inline void yield(bool blocked) {
  Fiber& f = self();
  f.runnable = !blocked;
  swapcontext(&f.ctx, &block()->sched);
}

inline void block_barrier() {
  Block& b = *block();
  if (++b.arrived == b.nthreads) {
    b.arrived = 0;
    for (int w : b.waiting) b.fibers[w].runnable = true;
    b.waiting.clear();
    yield(false);
  } else {
    b.waiting.push_back(b.current);
    yield(true);
  }
}

inline void warp_barrier() {
  Block& b = *block();
  Warp& w = warp();
  if (++w.arrived == 32) {
    w.arrived = 0;
    for (int x : w.waiting) b.fibers[x].runnable = true;
    w.waiting.clear();
  } else {
    w.waiting.push_back(b.current);
    yield(true);
  }
}

// First half of a collective: publish this lane's operation id, wait for the warp, check that
// every lane is at the same collective.
inline void collective_enter(int op) {
  Warp& w = warp();
  w.op[lane()] = op;
  warp_barrier();
  for (int l = 0; l < 32; ++l)
    if (w.op[l] != op) die("warp divergence: lanes of one warp at different collectives");
}

inline void check_smem(const void* p, int bytes, int align, const char* what) {
  const Block& b = *block();
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < b.smem || c + bytes > b.smem + b.smem_bytes) {
    std::fprintf(stderr, "warp emulator: %s address outside shared memory (offset %td of %zu)\n",
                 what, c - b.smem, b.smem_bytes);
    std::abort();
  }
  if (reinterpret_cast<uintptr_t>(p) % align != 0) die("misaligned shared memory address");
}

inline void fiber_main() {
  Block& b = *block();
  b.body(b.current);
  Fiber& f = self();
  if (!f.open.empty() || !f.groups.empty()) die("thread exited with cp.async copies pending");
  f.done = true;
}

// Runs body(tid) for tid in [0, nthreads) as one thread block with `smem_bytes` of shared memory
// (filled with garbage first). Returns when every thread has finished.
inline void run_block(int nthreads, std::vector<unsigned char>& smem, uint32_t seed,
                      const std::function<void(int)>& body) {
  constexpr size_t kStack = 256 * 1024;
  static std::vector<std::unique_ptr<char[]>> stacks;  // reused by every block
  while (stacks.size() < static_cast<size_t>(nthreads))
    stacks.push_back(std::unique_ptr<char[]>(new char[kStack]));
  Block b;
  b.nthreads = nthreads;
  b.smem = smem.data();
  b.smem_bytes = smem.size();
  std::memset(smem.data(), 0x7f, smem.size());  // garbage: large finite values
  b.fibers.resize(nthreads);
  b.warps.resize((nthreads + 31) / 32);
  if (nthreads % 32 != 0) die("block size must be a multiple of 32");
  b.rng.seed(seed);
  b.body = body;
  block() = &b;
  for (int i = 0; i < nthreads; ++i) {
    Fiber& f = b.fibers[i];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks[i].get();
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, fiber_main, 0);
  }
  std::vector<int> ready;
  for (;;) {
    ready.clear();
    int done = 0;
    for (int i = 0; i < nthreads; ++i) {
      if (b.fibers[i].done)
        ++done;
      else if (b.fibers[i].runnable)
        ready.push_back(i);
    }
    if (done == nthreads) break;
    if (ready.empty()) {
      std::fprintf(stderr, "warp emulator: deadlock, %d of %d threads at __syncthreads\n",
                   b.arrived, nthreads);
      std::abort();
    }
    b.current = ready[b.rng() % ready.size()];
    swapcontext(&b.sched, &b.fibers[b.current].ctx);
  }
  block() = nullptr;
}

inline void unpack(uint32_t u, float& lo, float& hi) {
  lo = to_float(bf16{static_cast<uint16_t>(u & 0xffffu)});
  hi = to_float(bf16{static_cast<uint16_t>(u >> 16)});
}

inline void ldsm(uint32_t (&r)[4], const void* row, bool trans) {
  check_smem(row, 16, 16, "ldmatrix");
  Warp& w = warp();
  const int l = lane();
  w.ptr[l] = row;
  collective_enter(trans ? 2 : 1);
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {  // row l / 4 of matrix i, elements 2 (l % 4), + 1
      const auto* p = static_cast<const unsigned char*>(w.ptr[8 * i + l / 4]);
      std::memcpy(&lo, p + 4 * (l % 4), 2);
      std::memcpy(&hi, p + 4 * (l % 4) + 2, 2);
    } else {  // column l / 4 of matrix i, rows 2 (l % 4), + 1
      const auto* p0 = static_cast<const unsigned char*>(w.ptr[8 * i + 2 * (l % 4)]);
      const auto* p1 = static_cast<const unsigned char*>(w.ptr[8 * i + 2 * (l % 4) + 1]);
      std::memcpy(&lo, p0 + 2 * (l / 4), 2);
      std::memcpy(&hi, p1 + 2 * (l / 4), 2);
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  warp_barrier();
}

inline void cp_async(void* dst, const void* src, int bytes, bool valid) {
  check_smem(dst, bytes, bytes, "cp.async destination");
  if (reinterpret_cast<uintptr_t>(src) % bytes != 0) die("misaligned cp.async source");
  std::memset(dst, 0xff, bytes);
  self().open.push_back(
      {static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes, valid});
}

}  // namespace emu

inline void ldsm_x4(uint32_t (&r)[4], const void* row) { emu::ldsm(r, row, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], const void* row) { emu::ldsm(r, row, true); }

inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::Warp& w = emu::warp();
  const int l = emu::lane();
  for (int i = 0; i < 4; ++i) w.u[l][i] = a[i];
  w.u[l][4] = b0;
  w.u[l][5] = b1;
  emu::collective_enter(3);
  float A[16][16], B[16][8];
  for (int x = 0; x < 32; ++x) {
    const int g = x / 4, t = x % 4;
    emu::unpack(w.u[x][0], A[g][2 * t], A[g][2 * t + 1]);
    emu::unpack(w.u[x][1], A[g + 8][2 * t], A[g + 8][2 * t + 1]);
    emu::unpack(w.u[x][2], A[g][2 * t + 8], A[g][2 * t + 9]);
    emu::unpack(w.u[x][3], A[g + 8][2 * t + 8], A[g + 8][2 * t + 9]);
    emu::unpack(w.u[x][4], B[2 * t][g], B[2 * t + 1][g]);
    emu::unpack(w.u[x][5], B[2 * t + 8][g], B[2 * t + 9][g]);
  }
  emu::warp_barrier();
  const int g = l / 4, t = l % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

inline void cp_async16(void* dst, const void* src, bool valid) {
  emu::cp_async(dst, src, 16, valid);
}
inline void cp_async4(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, 4, valid); }
inline void cp_async_commit() {
  emu::Fiber& f = emu::self();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
inline void cp_async_wait_all() {
  emu::Fiber& f = emu::self();
  if (!f.open.empty()) emu::die("cp.async.wait_group with uncommitted copies");
  for (const auto& group : f.groups)
    for (const auto& op : group) {
      if (op.valid)
        std::memcpy(op.dst, op.src, op.bytes);
      else
        std::memset(op.dst, 0, op.bytes);
    }
  f.groups.clear();
}

inline void block_sync() { emu::block_barrier(); }

inline float fast_exp2(float x) { return std::exp2(x); }

inline float shfl_xor(float v, int mask) {
  emu::Warp& w = emu::warp();
  const int l = emu::lane();
  w.f[l] = v;
  emu::collective_enter(4);
  const float r = w.f[l ^ mask];
  emu::warp_barrier();
  return r;
}
inline float shfl_idx(float v, int src) {
  emu::Warp& w = emu::warp();
  const int l = emu::lane();
  w.f[l] = v;
  emu::collective_enter(5);
  const float r = w.f[src & 31];
  emu::warp_barrier();
  return r;
}

inline uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(to_bf16(lo).bits) | (static_cast<uint32_t>(to_bf16(hi).bits) << 16);
}
inline float bf16_to_f32(bf16raw b) { return to_float(bf16{b}); }
inline bf16raw f32_to_bf16(float f) { return to_bf16(f).bits; }

inline void red_add2(float* p, float a, float b) {
  if (reinterpret_cast<uintptr_t>(p) % 8 != 0) emu::die("misaligned float2 atomic");
  p[0] += a;
  p[1] += b;
}

}  // namespace hp::cuda::attn
