// One full training step of the model (forward + backward + AdamW) on the CPU
// backend, in fp32 and, with --precision=bf16, also in mixed precision (bf16
// compute over f32 master weights); reported as model GFLOP/s, as a fraction of
// what the step's own GEMMs reach (every GEMM shape of the step timed in the
// same run, in the step's precision), tokens/s and peak memory; with --torch
// the same step in PyTorch (tools/bench_step_torch.py) on the same threads,
// tuned and untuned, as ratios.
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_step [--seq
//   4096]
//       [--threads 1] [--steps 5] [--warmup 1] [--layers 4] [--hidden 256]
//       [--heads 4]
//       [--vocab 256] [--ffn 768] [--mlp-chunk 0] [--recompute
//       none|full|no-attn]
//       [--precision fp32|bf16] [--torch] [--torch-alloc
//       auto|jemalloc|tcmalloc|glibc] [--no-torch-untuned]
// --no-torch-untuned skips the untuned PyTorch run (a labelled comparison only, and at s=8192 on
// one thread it alone takes tens of minutes); the tuned runs, the baseline, always run.
// Memory cap for both (the torch child inherits it): prlimit --as=BYTES
// build/bench/bench_step ... Model FLOPs per step (no recomputation counted):
// 3x every matmul of the forward, and causal attention counted once per FLOP as
// bench_kernels does: forward 2*s^2*h, backward 2.5x that. Step times are the
// median of --steps timed steps after --warmup untimed ones (the minimum is
// printed too). With one thread the clock is the process CPU time (the machine
// is shared); else the wall clock.
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
#include "kernels/cpu_kernels.h"
#include "model/model.h"
#include "runtime/optimizer.h"
#include "runtime/trainer.h"
#include "torch_baseline.h"
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
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  int64_t seq = 4096, layers = 4, hidden = 256, heads = 4, vocab = 256,
          ffn = 768, mlp_chunk = 0;
  int threads = 1, steps = 5, warmup = 1;
  std::string recompute = "none", precision = "fp32", torch_alloc = "auto";
  bool torch = false, torch_untuned = true;
};

Args parse(int argc, char **argv) {
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
      if (inline_value)
        return v;
      HP_CHECK(i + 1 < argc, "bench_step: {} needs a value", k);
      return argv[++i];
    };
    if (k == "--seq")
      a.seq = std::stoll(next());
    else if (k == "--layers")
      a.layers = std::stoll(next());
    else if (k == "--hidden")
      a.hidden = std::stoll(next());
    else if (k == "--heads")
      a.heads = std::stoll(next());
    else if (k == "--vocab")
      a.vocab = std::stoll(next());
    else if (k == "--ffn")
      a.ffn = std::stoll(next());
    else if (k == "--mlp-chunk")
      a.mlp_chunk = std::stoll(next());
    else if (k == "--threads")
      a.threads = std::stoi(next());
    else if (k == "--steps")
      a.steps = std::stoi(next());
    else if (k == "--warmup")
      a.warmup = std::stoi(next());
    else if (k == "--recompute")
      a.recompute = next();
    else if (k == "--precision")
      a.precision = next();
    else if (k == "--torch-alloc")
      a.torch_alloc = next();
    else if (k == "--torch")
      a.torch = true;
    else if (k == "--no-torch-untuned")
      a.torch_untuned = false;
    else
      hp::fail("bench_step: unknown flag '{}' (see the usage at the top of "
               "bench_step.cc)",
               k);
  }
  HP_CHECK(a.steps >= 1 && a.warmup >= 0,
           "bench_step: --steps {} must be >= 1, --warmup {} >= 0", a.steps,
           a.warmup);
  HP_CHECK(a.precision == "fp32" || a.precision == "bf16",
           "bench_step: --precision={} is not fp32 or bf16", a.precision);
  return a;
}

struct StepResult {
  double median_s = 0, min_s = 0;
  double backend_peak_mb = 0, store_peak_mb = 0, workspace_mb = 0;
};

// Runs warmup + steps training steps of a fresh model in `prec` on `be`.
StepResult run_steps(const Args &a, const hp::ModelConfig &cfg,
                     const hp::ModelOptions &mo, hp::Backend &be,
                     hp::Precision prec) {
  be.reset_peak();
  hp::Params params(cfg, hp::Params::all_parts(cfg), be, prec);
  params.init(1);
  hp::Model model(params, mo);
  hp::AdamW opt(be, hp::AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  const std::vector<hp::ParamRef> refs = hp::param_refs(params);
  hp::Rng rng(3);
  std::vector<int32_t> tok(a.seq + 1);
  for (auto &t : tok)
    t = static_cast<int32_t>(rng.next_u64() % a.vocab);
  hp::TokenBuffer tok_dev;
  tok_dev.upload(be, tok, cfg.vocab, "token");
  const hp::StepOptions so{hp::parse_recompute(a.recompute),
                           hp::TransferMode::kWeights};
  hp::ValueStore store(be, prec);
  std::vector<double> times;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const double t0 = now_seconds();
    params.zero_grad();
    const double loss = hp::loss_and_grads(
        model, tok_dev.data(), tok_dev.data() + 1, 1, a.seq, 1, so, &store);
    opt.step(refs, 1e-3, 1.0);
    const double dt = now_seconds() - t0;
    if (step >= a.warmup)
      times.push_back(dt);
    std::printf("  %s step %d: %.3f s, loss %.4f%s\n", prec.name(), step, dt,
                loss, step < a.warmup ? " (warm-up, not timed)" : "");
  }
  StepResult r;
  r.median_s = median(times);
  r.min_s = *std::min_element(times.begin(), times.end());
  r.backend_peak_mb = be.memory_stats().peak / 1048576.0;
  r.store_peak_mb = store.peak_bytes() / 1048576.0;
  r.workspace_mb = model.workspace_bytes() / 1048576.0;
  return r;
}

// GFLOP/s of the step's GEMMs through the backend's kernels: f32 (OpenBLAS) or
// bf16 (oneDNN, the weight gradients into f32 as in the step), each shape timed
// in this run.
double step_gemm_rate(hp::Kernels &k,
                      const std::vector<hp::bench::GemmShape> &shapes,
                      bool bf16) {
  int64_t most = 0;
  for (const auto &s : shapes)
    most = std::max({most, s.M * s.K, s.K * s.N, s.M * s.N});
  std::vector<float> a(most, 0.5f), b(most, 0.25f), c(most, 0.0f);
  std::vector<hp::bf16> a16(most, hp::to_bf16(0.5f)),
      b16(most, hp::to_bf16(0.25f)), c16(most);
  return hp::bench::step_gemm_gflops(
      shapes, [&](const hp::bench::GemmShape &s) {
        const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
        const hp::ConstDataPtr A =
            bf16 ? hp::ConstDataPtr(a16.data()) : hp::ConstDataPtr(a.data());
        const hp::ConstDataPtr B =
            bf16 ? hp::ConstDataPtr(b16.data()) : hp::ConstDataPtr(b.data());
        const hp::DataPtr C =
            bf16 && !s.grad ? hp::DataPtr(c16.data()) : hp::DataPtr(c.data());
        const double t0 = now_seconds();
        k.gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0, A, lda, B, ldb,
               s.grad ? 1.0 : 0.0, C, s.N);
        return now_seconds() - t0;
      });
}

void print_step(const char *name, const StepResult &r, double flops,
                double gemm_rate) {
  const double gf = flops / r.median_s * 1e-9;
  std::printf(
      "%s step (fwd+bwd+adamw): %.3f s (min %.3f), %.1f GFLOP/s = %.2f of its "
      "GEMMs' %.1f "
      "GFLOP/s; backend peak %.1f MB (value store %.1f, workspace %.1f)\n",
      name, r.median_s, r.min_s, gf, gf / gemm_rate, gemm_rate,
      r.backend_peak_mb, r.store_peak_mb, r.workspace_mb);
}

// The PyTorch runs and the ratios of our tokens/s to theirs.
void compare_torch(const Args &a, const StepResult &f32,
                   const StepResult *b16) {
  const hp::bench::TorchArgs ta{a.seq,     a.layers, a.hidden,
                                a.heads,   a.vocab,  a.ffn,
                                a.threads, a.steps,  std::max(a.warmup, 2)};
  const std::string tuned_env = hp::bench::torch_alloc_env(a.torch_alloc);
  const auto tuned = hp::bench::run_torch(ta, tuned_env, "fp32", HP_SOURCE_DIR);
  hp::bench::TorchResult untuned;
  if (a.torch_untuned)
    untuned = hp::bench::run_torch(ta, "", "fp32", HP_SOURCE_DIR);
  else
    untuned.why = "skipped (--no-torch-untuned)";
  hp::bench::TorchResult tuned16;
  if (b16)
    tuned16 = hp::bench::run_torch(ta, tuned_env, "bf16", HP_SOURCE_DIR);
  auto line = [&](const char *label, const hp::bench::TorchResult &r,
                  const char *ours_name, const StepResult &ours) {
    if (!r.ok) {
      std::printf("%-36s no result (%s)\n", label, r.why.c_str());
      return;
    }
    std::printf("%-36s %8.1f tokens/s (%s malloc, peak RSS %.0f MB): ours %s = "
                "%.2f x its "
                "tokens/s\n",
                label, r.tokens_per_s, r.allocator.c_str(), r.peak_rss_mb,
                ours_name, a.seq / ours.median_s / r.tokens_per_s);
  };
  line("PyTorch fp32, tuned:", tuned, "fp32", f32);
  line("PyTorch fp32, untuned (default):", untuned, "fp32", f32);
  if (b16) {
    line("PyTorch bf16 autocast, tuned:", tuned16, "bf16", *b16);
    // Against the faster of PyTorch's two, whichever precision that is.
    const double best = std::max(tuned.ok ? tuned.tokens_per_s : 0.0,
                                 tuned16.ok ? tuned16.tokens_per_s : 0.0);
    if (best > 0)
      std::printf("%-36s %8.1f tokens/s: ours bf16 = %.2f x\n",
                  "PyTorch best tuned:", best, a.seq / b16->median_s / best);
  }
  if (tuned.ok)
    std::printf("PyTorch's own GEMMs at 1024^3: fp32 %.1f, bf16 %.1f GFLOP/s\n",
                tuned.sgemm_gflops, tuned.bf16_gemm_gflops);
}

} // namespace

int main(int argc, char **argv) try {
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
  auto be = hp::make_cpu_backend(a.threads);
  hp::Kernels &kern = be->kernels();
  const bool bf16 = a.precision == "bf16";
  HP_CHECK(!bf16 || kern.supports(hp::Precision::bf16()),
           "--precision=bf16 needs the CPU backend's avx512bf16 path (a CPU with AVX512-BF16, a "
           "build with oneDNN, HP_CPU_ISA unset or auto); this backend is {}",
           be->name());
  const hp::ModelOptions mo{a.mlp_chunk, 1024};

  const double T = static_cast<double>(a.seq), h = a.hidden, q = cfg.qkv_dim(),
               f = a.ffn;
  const double matmul_fwd =
      a.layers * 2 * T * (h * q + h * h + 3 * h * f) + 2 * T * h * a.vocab;
  const double attn_fwd = a.layers * 2 * T * T * h;
  const double step_flops = 3 * matmul_fwd + 3.5 * attn_fwd;

  std::printf("bench_step: L=%lld h=%lld heads=%lld ffn=%lld vocab=%lld s=%lld "
              "b=1 threads=%d "
              "recompute=%s mlp_chunk=%lld backend=%s (timed by %s; median of "
              "%d steps after %d "
              "warm-up); %.1f GFLOP model FLOPs per step\n",
              (long long)a.layers, (long long)a.hidden, (long long)a.heads,
              (long long)a.ffn, (long long)a.vocab, (long long)a.seq, a.threads,
              a.recompute.c_str(), (long long)a.mlp_chunk, be->name().c_str(),
              g_cpu_clock ? "process CPU time" : "wall clock", a.steps,
              a.warmup, step_flops * 1e-9);
  const StepResult f32 = run_steps(a, cfg, mo, *be, hp::Precision::fp32());
  StepResult b16;
  if (bf16)
    b16 = run_steps(a, cfg, mo, *be, hp::Precision::bf16());
  const auto shapes =
      hp::bench::step_gemms(a.seq, a.layers, a.hidden, cfg.qkv_dim(), a.ffn,
                            a.vocab, a.mlp_chunk, mo.head_chunk);
  const double rate32 = step_gemm_rate(kern, shapes, false);
  const double rate16 = bf16 ? step_gemm_rate(kern, shapes, true) : 0.0;
  std::printf("step GEMMs: %zu shapes, %.1f GFLOP per step; fp32 (OpenBLAS) "
              "%.1f GFLOP/s",
              shapes.size(), hp::bench::step_gemm_flops(shapes) * 1e-9, rate32);
  if (bf16)
    std::printf(", bf16 (oneDNN) %.1f GFLOP/s = %.2f x fp32", rate16,
                rate16 / rate32);
  std::printf("\n");
  print_step("fp32", f32, step_flops, rate32);
  if (bf16) {
    print_step("bf16", b16, step_flops, rate16);
    std::printf("bf16 / fp32 step speed: %.2f x\n",
                f32.median_s / b16.median_s);
  }
  std::printf("tokens/s: fp32 %.1f", a.seq / f32.median_s);
  if (bf16)
    std::printf(", bf16 %.1f", a.seq / b16.median_s);
  std::printf("; peak RSS of this process %.1f MB\n", peak_rss_mb());
  if (a.torch)
    compare_torch(a, f32, bf16 ? &b16 : nullptr);
  return 0;
} catch (const std::exception &e) {
  std::fprintf(stderr, "bench_step: %s\n", e.what());
  return 1;
}
