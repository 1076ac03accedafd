// Kernel benchmark: OpenBLAS sgemm against our attention forward/backward, every number printed as
// a ratio to the sgemm rate measured in the same run with the same thread count; on a CPU with
// AVX512-BF16 also the bf16 GEMM (oneDNN) and the bf16 attention, as ratios to that bf16 GEMM.
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_kernels [--quick]
//   build/bench/bench_kernels --one SEQ HEADS D THREADS avx2|avx512|bf16   (one attention case)
// FLOP convention (causal attention, every FLOP counted once): forward 2 matmuls over the lower
// triangle = 2 * 2 * b * heads * (s^2 / 2) * d; backward 5 such matmuls = 2.5x forward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

// With one thread the clock is the process CPU time: on a shared, overloaded machine the wall
// clock mostly measures how long the scheduler kept us waiting. With more threads it is the wall
// clock (CPU time would count the threads' idle spinning).
bool g_cpu_clock = false;

double now_seconds() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Best seconds per call: repeat until min_s has passed (at least 2 calls after a warm-up).
template <class F>
double best_seconds(F&& f, double min_s) {
  f();
  double best = 1e30, total = 0;
  int n = 0;
  while (total < min_s || n < 3) {
    const double t0 = now_seconds();
    f();
    const double dt = now_seconds() - t0;
    best = std::min(best, dt);
    total += dt;
    ++n;
  }
  return best;
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

double sgemm_gflops(hp::Kernels& k, int64_t M, int64_t N, int64_t K, double min_s) {
  const auto a = randn(M * K, 1), b = randn(K * N, 2);
  std::vector<float> c(M * N);
  const double t = best_seconds(
      [&] { k.gemm(false, false, M, N, K, 1.0, a.data(), K, b.data(), N, 0.0, c.data(), N); },
      min_s);
  return 2.0 * M * N * K / t * 1e-9;
}

struct AttnRate {
  double fwd, bwd;
};

AttnRate attention_gflops(hp::Kernels& k, int64_t seq, int64_t heads, int64_t d,
                          double min_s) {
  hp::AttnShape s;
  s.batch = 1;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = heads;
  s.head_dim = d;
  s.ld_qkv = 3 * heads * d;
  s.ld_o = heads * d;
  const auto qkv = randn(seq * s.ld_qkv, 3), dout = randn(seq * s.ld_o, 4);
  std::vector<float> o(seq * s.ld_o), lse(heads * seq), g(seq * s.ld_qkv);
  const float* q = qkv.data();
  const float* kk = q + heads * d;
  const float* v = kk + heads * d;
  const double fwd_flops = 2.0 * 2.0 * heads * (double(seq) * seq / 2) * d;
  const double tf = best_seconds([&] { k.attention_forward(s, q, kk, v, o.data(), lse.data()); }, min_s);
  const double tb = best_seconds(
      [&] {
        k.attention_backward(s, q, kk, v, o.data(), dout.data(), lse.data(), g.data(),
                             g.data() + heads * d, g.data() + 2 * heads * d);
      },
      min_s);
  return {fwd_flops / tf * 1e-9, 2.5 * fwd_flops / tb * 1e-9};
}

std::vector<hp::bf16> randb(size_t n, unsigned seed) {
  const auto f = randn(n, seed);
  std::vector<hp::bf16> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = hp::to_bf16(f[i]);
  return out;
}

// bf16 GEMM (oneDNN) into a bf16 C.
double bf16_gemm_gflops(hp::cpu::Bf16Gemm& g, int64_t M, int64_t N, int64_t K, double min_s) {
  const auto a = randb(M * K, 1), b = randb(K * N, 2);
  std::vector<hp::bf16> c(M * N);
  const double t = best_seconds(
      [&] { g.run(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N); },
      min_s);
  return 2.0 * M * N * K / t * 1e-9;
}

AttnRate bf16_attention_gflops(int threads, int64_t seq, int64_t heads, int64_t d, double min_s) {
  const hp::cpu::Bf16Ops& ops = hp::cpu::avx512bf16_ops();
  const hp::AttnShape s{1, seq, heads, heads, d, 3 * heads * d, heads * d};
  const auto qkv = randb(seq * s.ld_qkv, 3), dout = randb(seq * s.ld_o, 4);
  std::vector<hp::bf16> o(seq * s.ld_o), g(seq * s.ld_qkv);
  std::vector<float> lse(heads * seq);
  std::vector<float> fs(ops.attn_fwd_scratch(s, threads) + 16), bs(ops.attn_bwd_scratch(s, threads) + 16);
  auto align = [](std::vector<float>& v) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
  };
  const hp::bf16* q = qkv.data();
  const double fwd_flops = 2.0 * 2.0 * heads * (double(seq) * seq / 2) * d;
  const double tf = best_seconds(
      [&] { ops.attn_fwd(s, q, q + heads * d, q + 2 * heads * d, o.data(), lse.data(), align(fs), threads); },
      min_s);
  const double tb = best_seconds(
      [&] {
        ops.attn_bwd(s, q, q + heads * d, q + 2 * heads * d, o.data(), dout.data(), lse.data(),
                     g.data(), g.data() + heads * d, g.data() + 2 * heads * d, align(bs), threads);
      },
      min_s);
  return {fwd_flops / tf * 1e-9, 2.5 * fwd_flops / tb * 1e-9};
}

// The bf16 rows of one thread count: the GEMM rates and the attention as a ratio to them.
void bf16_rows(int threads, const std::vector<int64_t>& seqs, double min_s) {
  if (!hp::cpu::cpu_has_avx512bf16() || !hp::cpu::Bf16Gemm::available()) {
    std::printf("%-7d %-7s (no AVX512-BF16 on this CPU or no oneDNN in this build: skipped)\n",
                threads, "bf16");
    return;
  }
  hp::cpu::Bf16Gemm g(threads);
  const double sq = bf16_gemm_gflops(g, 1024, 1024, 1024, min_s);
  const double qkv = bf16_gemm_gflops(g, 4096, 768, 256, min_s);
  std::printf("%-7d %-7s %-24s %10.1f %10.2f   (%s)\n", threads, "bf16", "bf16 gemm 1024^3", sq, 1.0,
              g.implementation(false, false, 1024, 1024, 1024, 1024, 1024, 1024, hp::DType::kBF16).c_str());
  std::printf("%-7d %-7s %-24s %10.1f %10.2f\n", threads, "bf16", "bf16 gemm 4096x768x256", qkv, qkv / sq);
  for (int64_t seq : seqs) {
    for (auto [heads, d] : {std::pair<int64_t, int64_t>{4, 64}, {2, 128}}) {
      const double sq_here = bf16_gemm_gflops(g, 1024, 1024, 1024, min_s / 2);
      const AttnRate r = bf16_attention_gflops(threads, seq, heads, d, min_s);
      char name[64];
      std::snprintf(name, sizeof name, "attn fwd s=%lld h%lldxd%lld", (long long)seq,
                    (long long)heads, (long long)d);
      std::printf("%-7d %-7s %-24s %10.1f %10.2f   (bf16 gemm next to it: %.1f)\n", threads,
                  "bf16", name, r.fwd, r.fwd / sq_here, sq_here);
      std::snprintf(name, sizeof name, "attn bwd s=%lld h%lldxd%lld", (long long)seq,
                    (long long)heads, (long long)d);
      std::printf("%-7d %-7s %-24s %10.1f %10.2f\n", threads, "bf16", name, r.bwd, r.bwd / sq_here);
      std::fflush(stdout);
    }
  }
}

// Row/elementwise kernels: GB/s of compulsory traffic, and the speedup over the reference
// backend (plain loops) on the same data, both timed in this run.
void elementwise_rows(hp::Kernels& k, hp::Kernels& ref, double min_s) {
  struct Case {
    const char* name;
    double bytes;
    std::function<void(hp::Kernels&)> run;
  };
  const int64_t T = 4096, h = 256, f = 1024, rows_ce = 512, vocab = 32000;
  auto x = randn(T * h, 5), g = randn(h, 6), y = std::vector<float>(T * h), rs = std::vector<float>(T);
  auto dy = randn(T * h, 7), dx = std::vector<float>(T * h), dg = std::vector<float>(h);
  auto gg = randn(T * f, 8), uu = randn(T * f, 9), hh = std::vector<float>(T * f);
  auto logits = randn(rows_ce * vocab, 10), dl = std::vector<float>(rows_ce * vocab);
  std::vector<int32_t> tgt(rows_ce);
  for (int64_t r = 0; r < rows_ce; ++r) tgt[r] = static_cast<int32_t>((r * 7919) % vocab);
  std::vector<float> lse(rows_ce);
  double loss = 0;
  const double fl = sizeof(float);
  const std::vector<Case> cases = {
      {"rmsnorm fwd 4096x256", 2.0 * T * h * fl,
       [&](hp::Kernels& kk) { kk.rmsnorm_forward(y.data(), rs.data(), x.data(), g.data(), T, h, 1e-5); }},
      {"rmsnorm bwd 4096x256", 3.0 * T * h * fl,
       [&](hp::Kernels& kk) {
         kk.rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), g.data(), rs.data(), T, h, false);
       }},
      {"swiglu fwd 4096x1024", 3.0 * T * f * fl,
       [&](hp::Kernels& kk) { kk.swiglu_forward(hh.data(), gg.data(), uu.data(), T * f); }},
      {"xent fwd 512x32000", 1.0 * rows_ce * vocab * fl,
       [&](hp::Kernels& kk) {
         kk.cross_entropy_forward(logits.data(), vocab, tgt.data(), rows_ce, vocab, lse.data(), &loss);
       }},
      {"xent bwd 512x32000", 2.0 * rows_ce * vocab * fl,
       [&](hp::Kernels& kk) {
         kk.cross_entropy_backward(dl.data(), logits.data(), vocab, lse.data(), tgt.data(), rows_ce,
                                   vocab, 1.0);
       }},
  };
  for (const Case& c : cases) {
    const double t = best_seconds([&] { c.run(k); }, min_s);
    const double tr = best_seconds([&] { c.run(ref); }, min_s / 4);
    std::printf("%-7s %-7s %-24s %8.1f GB/s  x%.1f vs reference\n", "", "", c.name,
                c.bytes / t * 1e-9, tr / t);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --one SEQ HEADS D THREADS avx2|avx512|bf16: only that attention case (for profilers).
  if (argc == 7 && std::strcmp(argv[1], "--one") == 0 && std::strcmp(argv[6], "bf16") == 0) {
    g_cpu_clock = std::atoi(argv[5]) == 1;
    const AttnRate r = bf16_attention_gflops(std::atoi(argv[5]), std::atoll(argv[2]),
                                             std::atoll(argv[3]), std::atoll(argv[4]), 2.0);
    std::printf("bf16 fwd %.1f GFLOP/s  bwd %.1f GFLOP/s\n", r.fwd, r.bwd);
    return 0;
  }
  if (argc == 7 && std::strcmp(argv[1], "--one") == 0) {
    const hp::CpuIsa isa = std::strcmp(argv[6], "avx2") == 0 ? hp::CpuIsa::kAvx2 : hp::CpuIsa::kAvx512;
    g_cpu_clock = std::atoi(argv[5]) == 1;
    auto k = hp::make_cpu_kernels(std::atoi(argv[5]), isa);
    const AttnRate r = attention_gflops(*k, std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]), 2.0);
    std::printf("fwd %.1f GFLOP/s  bwd %.1f GFLOP/s\n", r.fwd, r.bwd);
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const double min_s = quick ? 0.05 : 0.4;
  // The f32 paths (the avx512bf16 path runs the avx512 f32 kernels; its bf16 rows come after).
  std::vector<hp::CpuIsa> isas = {hp::CpuIsa::kAvx2};
  if (hp::cpu_supports(hp::CpuIsa::kAvx512)) isas.insert(isas.begin(), hp::CpuIsa::kAvx512);
  std::printf("BLAS core: %s   best ISA: %s\n", hp::blas_core_name().c_str(),
              hp::cpu_isa_name(hp::cpu_best_isa()));
  std::printf("FLOPs: causal counted once; attention fwd = 4*heads*s^2/2*d, bwd = 2.5 x fwd\n\n");
  std::printf("%-7s %-7s %-24s %10s %10s\n", "threads", "isa", "kernel", "GFLOP/s",
              "/sgemm (bf16 rows: /bf16 gemm)");
  const std::vector<int64_t> seqs = quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 4096};
  for (int threads : {1, 2}) {
    g_cpu_clock = threads == 1;
    std::printf("-- %d thread(s), timed by %s\n", threads,
                threads == 1 ? "process CPU time" : "wall clock");
    for (hp::CpuIsa isa : isas) {
      auto k = hp::make_cpu_kernels(threads, isa);
      const char* in = hp::cpu_isa_name(isa);
      // sgemm: square 1024^3 (the reference rate of every ratio), and the model's QKV projection
      // (4096 tokens x 256 -> 768). The load of a shared machine drifts, so the square sgemm is
      // measured again next to each attention case and that case's ratio uses it.
      const double sq = sgemm_gflops(*k, 1024, 1024, 1024, min_s);
      const double qkv = sgemm_gflops(*k, 4096, 768, 256, min_s);
      std::printf("%-7d %-7s %-24s %10.1f %10.2f\n", threads, in, "sgemm 1024^3", sq, 1.0);
      std::printf("%-7d %-7s %-24s %10.1f %10.2f\n", threads, in, "sgemm 4096x768x256", qkv, qkv / sq);
      for (int64_t seq : seqs) {
        for (auto [heads, d] : {std::pair<int64_t, int64_t>{4, 64}, {2, 128}}) {
          const double sq_here = sgemm_gflops(*k, 1024, 1024, 1024, min_s / 2);
          const AttnRate r = attention_gflops(*k, seq, heads, d, min_s);
          char name[64];
          std::snprintf(name, sizeof name, "attn fwd s=%lld h%lldxd%lld", (long long)seq,
                        (long long)heads, (long long)d);
          std::printf("%-7d %-7s %-24s %10.1f %10.2f   (sgemm next to it: %.1f)\n", threads, in,
                      name, r.fwd, r.fwd / sq_here, sq_here);
          std::snprintf(name, sizeof name, "attn bwd s=%lld h%lldxd%lld", (long long)seq,
                        (long long)heads, (long long)d);
          std::printf("%-7d %-7s %-24s %10.1f %10.2f\n", threads, in, name, r.bwd, r.bwd / sq_here);
          std::fflush(stdout);
        }
      }
      if (threads == 1) {
        auto ref = hp::make_reference_kernels();
        elementwise_rows(*k, *ref, min_s / 2);
      }
    }
    bf16_rows(threads, seqs, min_s);
  }
  return 0;
}
