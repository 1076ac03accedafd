// One full training step of the model (forward + backward + AdamW) on the CPU backend, reported as
// model GFLOP/s, as a fraction of what the step's own GEMMs reach (every GEMM shape of the step
// timed in the same run), tokens/s and peak RSS; with --torch the same step in PyTorch
// (tools/bench_step_torch.py) on the same threads, tuned and untuned, as ratios.
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_step [--seq 4096]
//       [--threads 1] [--steps 5] [--warmup 1] [--layers 4] [--hidden 256] [--heads 4]
//       [--vocab 256] [--ffn 768] [--mlp-chunk 0] [--recompute none|full|no-attn]
//       [--precision fp32|bf16] [--torch] [--torch-alloc auto|jemalloc|tcmalloc|glibc]
// --precision bf16 also measures the bf16 GEMMs (oneDNN) at the step's shapes; the bf16 step
// itself runs once the CPU backend computes in bf16.
// Memory cap for both (the torch child inherits it): prlimit --as=BYTES build/bench/bench_step ...
// Model FLOPs per step (no recomputation counted): 3x every matmul of the forward, and causal
// attention counted once per FLOP as bench_kernels does: forward 2*s^2*h, backward 2.5x that.
// Step times are the median of --steps timed steps after --warmup untimed ones (the minimum is
// printed too). With one thread the clock is the process CPU time (the machine is shared); else
// the wall clock.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "gemm_mix.h"
#include "torch_baseline.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu_kernels.h"
#include "model/model.h"
#include "util/error.h"
#include "util/rng.h"

namespace {

bool g_cpu_clock = false;

double now_seconds() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Args {
  int64_t seq = 4096, layers = 4, hidden = 256, heads = 4, vocab = 256, ffn = 768, mlp_chunk = 0;
  int threads = 1, steps = 5, warmup = 1;
  std::string recompute = "none", precision = "fp32", torch_alloc = "auto";
  bool torch = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i], v;
    const auto eq = k.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
    }
    auto next = [&]() -> std::string {
      if (inline_value) return v;
      HP_CHECK(i + 1 < argc, "bench_step: {} needs a value", k);
      return argv[++i];
    };
    if (k == "--seq") a.seq = std::stoll(next());
    else if (k == "--layers") a.layers = std::stoll(next());
    else if (k == "--hidden") a.hidden = std::stoll(next());
    else if (k == "--heads") a.heads = std::stoll(next());
    else if (k == "--vocab") a.vocab = std::stoll(next());
    else if (k == "--ffn") a.ffn = std::stoll(next());
    else if (k == "--mlp-chunk") a.mlp_chunk = std::stoll(next());
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--steps") a.steps = std::stoi(next());
    else if (k == "--warmup") a.warmup = std::stoi(next());
    else if (k == "--recompute") a.recompute = next();
    else if (k == "--precision") a.precision = next();
    else if (k == "--torch-alloc") a.torch_alloc = next();
    else if (k == "--torch") a.torch = true;
    else hp::fail("bench_step: unknown flag '{}' (see the usage at the top of bench_step.cc)", k);
  }
  HP_CHECK(a.steps >= 1 && a.warmup >= 0, "bench_step: --steps {} must be >= 1, --warmup {} >= 0",
           a.steps, a.warmup);
  HP_CHECK(a.precision == "fp32" || a.precision == "bf16",
           "bench_step: --precision={} is not fp32 or bf16", a.precision);
  return a;
}

// GFLOP/s of the step's GEMMs in f32 (the kernels' sgemm) and in bf16 (oneDNN; 0 when this CPU or
// build has none), each shape timed in this run.
struct GemmRates {
  double f32 = 0, bf16 = 0;
};

GemmRates step_gemm_rates(hp::KernelsT<float>& k, const std::vector<hp::bench::GemmShape>& shapes,
                          int threads, bool with_bf16) {
  int64_t most = 0;
  for (const auto& s : shapes) most = std::max({most, s.M * s.K, s.K * s.N, s.M * s.N});
  std::vector<float> a(most, 0.5f), b(most, 0.25f), c(most, 0.0f);
  GemmRates r;
  r.f32 = hp::bench::step_gemm_gflops(shapes, [&](const hp::bench::GemmShape& s) {
    const double t0 = now_seconds();
    k.gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), s.ta ? s.M : s.K, b.data(),
           s.tb ? s.K : s.N, s.grad ? 1.0f : 0.0f, c.data(), s.N);
    return now_seconds() - t0;
  });
  if (!with_bf16) return r;
  hp::cpu::Bf16Gemm g(threads);
  std::vector<hp::bf16> a16(most, hp::to_bf16(0.5f)), b16(most, hp::to_bf16(0.25f)), c16(most);
  r.bf16 = hp::bench::step_gemm_gflops(shapes, [&](const hp::bench::GemmShape& s) {
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const double t0 = now_seconds();
    if (s.grad)  // weight gradients accumulate into the f32 master gradient
      g.run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a16.data(), lda, b16.data(), ldb, 1.0f, c.data(), s.N);
    else
      g.run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a16.data(), lda, b16.data(), ldb, 0.0f, c16.data(),
            s.N);
    return now_seconds() - t0;
  });
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  g_cpu_clock = a.threads == 1;
  hp::ModelConfig cfg;
  cfg.name = "bench";
  cfg.hidden = a.hidden;
  cfg.intermediate = a.ffn;
  cfg.heads = cfg.kv_heads = a.heads;
  cfg.layers = a.layers;
  cfg.vocab = a.vocab;
  cfg.max_positions = std::max<int64_t>(cfg.max_positions, a.seq);
  cfg.validate();
  const bool bf16_cpu = hp::cpu::cpu_has_avx512bf16() && hp::cpu::Bf16Gemm::available();
  HP_CHECK(a.precision == "fp32" || bf16_cpu,
           "bench_step: --precision=bf16 needs a CPU with AVX512-BF16 and a build with oneDNN "
           "(libdnnl-dev); this one has {}",
           hp::cpu::cpu_has_avx512bf16() ? "no oneDNN" : "no AVX512-BF16");
  auto kern = hp::make_cpu_kernels(a.threads);
  hp::Params params(cfg, hp::Params::all_parts(cfg));
  params.init(1);
  const hp::ModelOptions mo{a.mlp_chunk, 1024};
  hp::Model model(cfg, *kern, params, mo);
  std::vector<float> m(params.size(), 0.0f), v(params.size(), 0.0f);
  hp::Rng rng(3);
  std::vector<int32_t> tok(a.seq + 1);
  for (auto& t : tok) t = static_cast<int32_t>(rng.next_u64() % a.vocab);
  hp::StepOptions so{hp::parse_recompute(a.recompute), hp::TransferMode::kWeights};
  hp::ValueStore store;

  const double T = static_cast<double>(a.seq), h = a.hidden, q = cfg.qkv_dim(), f = a.ffn;
  const double matmul_fwd = a.layers * 2 * T * (h * q + h * h + 3 * h * f) + 2 * T * h * a.vocab;
  const double attn_fwd = a.layers * 2 * T * T * h;
  const double step_flops = 3 * matmul_fwd + 3.5 * attn_fwd;

  std::printf("bench_step: L=%lld h=%lld heads=%lld ffn=%lld vocab=%lld s=%lld b=1 threads=%d "
              "recompute=%s mlp_chunk=%lld kernels=%s (timed by %s; median of %d steps after %d "
              "warm-up)\n",
              (long long)a.layers, (long long)a.hidden, (long long)a.heads, (long long)a.ffn,
              (long long)a.vocab, (long long)a.seq, a.threads, a.recompute.c_str(),
              (long long)a.mlp_chunk, kern->name().c_str(),
              g_cpu_clock ? "process CPU time" : "wall clock", a.steps, a.warmup);
  std::vector<double> times;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const double t0 = now_seconds();
    params.zero_grad();
    const double loss =
        hp::loss_and_grads(model, tok.data(), tok.data() + 1, 1, a.seq, 1, so, &store);
    for (const hp::ParamTensor& t : params.tensors())
      kern->adamw(params.data() + t.offset, params.grads() + t.offset, m.data() + t.offset,
                  v.data() + t.offset, t.numel, 1e-3, 0.9, 0.95, 1e-8, t.decay ? 0.1 : 0.0,
                  step + 1);
    const double dt = now_seconds() - t0;
    if (step >= a.warmup) times.push_back(dt);
    std::printf("  fp32 step %d: %.3f s, loss %.4f%s\n", step, dt, loss,
                step < a.warmup ? " (warm-up, not timed)" : "");
  }
  const double step_s = median(times);
  const double gf = step_flops / step_s * 1e-9;
  const double tps = a.seq / step_s;
  const auto shapes = hp::bench::step_gemms(a.seq, a.layers, a.hidden, cfg.qkv_dim(), a.ffn,
                                            a.vocab, a.mlp_chunk, mo.head_chunk);
  const GemmRates rates = step_gemm_rates(*kern, shapes, a.threads, a.precision == "bf16");
  std::printf("step GEMMs (%zu shapes, %.1f GFLOP per step) in fp32: %8.1f GFLOP/s\n",
              shapes.size(), hp::bench::step_gemm_flops(shapes) * 1e-9, rates.f32);
  if (a.precision == "bf16")
    std::printf("step GEMMs in bf16 (oneDNN):          %8.1f GFLOP/s = %.2f x fp32\n",
                rates.bf16, rates.bf16 / rates.f32);
  std::printf("fp32 step (fwd+bwd+adamw): %.3f s (min %.3f), %.1f GFLOP model FLOPs, %.1f "
              "GFLOP/s = %.2f of its GEMMs' rate\n",
              step_s, *std::min_element(times.begin(), times.end()), step_flops * 1e-9, gf,
              gf / rates.f32);
  if (a.precision == "bf16")
    std::printf("bf16 step: not run (the CPU backend does not compute in bf16 yet); at the bf16 "
                "GEMMs' rate the step could reach %.2f x the fp32 step\n",
                rates.bf16 / rates.f32);
  std::printf("tokens/s:            %8.1f\n", tps);
  std::printf("peak RSS:            %8.1f MB (value store peak %.1f MB, workspace %.1f MB, "
              "params+grads+adam %.1f MB)\n",
              peak_rss_mb(), store.peak_bytes() / 1048576.0, model.workspace_bytes() / 1048576.0,
              params.size() * 16.0 / 1048576.0);
  if (a.torch) {
    const hp::bench::TorchArgs ta{a.seq, a.layers, a.hidden, a.heads, a.vocab, a.ffn,
                                  a.threads, a.steps, std::max(a.warmup, 2)};
    const hp::bench::TorchResult tuned =
        hp::bench::run_torch(ta, hp::bench::torch_alloc_env(a.torch_alloc), "fp32", HP_SOURCE_DIR);
    const hp::bench::TorchResult untuned = hp::bench::run_torch(ta, "", "fp32", HP_SOURCE_DIR);
    auto line = [&](const char* label, const hp::bench::TorchResult& r, double ours_tps) {
      if (!r.ok) {
        std::printf("%-34s no result (%s)\n", label, r.why.c_str());
        return;
      }
      std::printf("%-34s %8.1f tokens/s (%s malloc): ours = %.2f x its tokens/s, %.2f x its peak "
                  "RSS (%.0f MB); its sgemm %.1f GFLOP/s\n",
                  label, r.tokens_per_s, r.allocator.c_str(), ours_tps / r.tokens_per_s,
                  peak_rss_mb() / r.peak_rss_mb, r.peak_rss_mb, r.sgemm_gflops);
    };
    line("PyTorch fp32, tuned:", tuned, tps);
    line("PyTorch fp32, untuned (default):", untuned, tps);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_step: %s\n", e.what());
  return 1;
}
