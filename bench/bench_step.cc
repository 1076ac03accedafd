// One full training step of the model (forward + backward + AdamW) on the CPU backend, reported as
// model GFLOP/s, as a ratio to sgemm measured in the same run, tokens/s and peak RSS; with --torch
// the same step in PyTorch (tools/bench_step_torch.py) on the same threads, as ratios.
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_step [--seq 4096] [--threads 1]
//       [--steps 3] [--layers 4] [--hidden 256] [--heads 4] [--vocab 256] [--ffn 768]
//       [--mlp-chunk 0] [--recompute none|full|no-attn] [--torch]
// Memory cap for both (the torch child inherits it): prlimit --as=BYTES build/bench/bench_step ...
// Model FLOPs per step (no recomputation counted): 3x every matmul of the forward, and causal
// attention counted once per FLOP as bench_kernels does: forward 2*s^2*h, backward 2.5x that.
// With one thread the clock is the process CPU time (the machine is shared); else wall clock.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "model/model.h"
#include "runtime/optimizer.h"
#include "runtime/trainer.h"
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

double sgemm_gflops(hp::Kernels& k, int64_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  auto once = [&] { k.gemm(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n); };
  once();
  double best = 1e30, total = 0;
  for (int i = 0; i < 3 || total < 1.0; ++i) {
    const double t0 = now_seconds();
    once();
    const double dt = now_seconds() - t0;
    best = std::min(best, dt);
    total += dt;
  }
  return 2.0 * n * n * n / best * 1e-9;
}

struct Args {
  int64_t seq = 4096, layers = 4, hidden = 256, heads = 4, vocab = 256, ffn = 768, mlp_chunk = 0;
  int threads = 1, steps = 3;
  std::string recompute = "none";
  bool torch = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
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
    else if (k == "--recompute") a.recompute = next();
    else if (k == "--torch") a.torch = true;
    else hp::fail("bench_step: unknown flag '{}' (see the usage at the top of bench_step.cc)", k);
  }
  return a;
}

// {"key": number} from the torch script's last line.
double json_number(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\":";
  auto p = line.find(k);
  HP_CHECK(p != std::string::npos, "bench_step: no '{}' in the torch script's output: {}", key, line);
  return std::atof(line.c_str() + p + k.size());
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
  auto be = hp::make_cpu_backend(a.threads);
  hp::Kernels& kern = be->kernels();
  hp::Params params(cfg, hp::Params::all_parts(cfg), *be);
  params.init(1);
  hp::Model model(params, hp::ModelOptions{a.mlp_chunk, 1024});
  hp::AdamW opt(*be, hp::AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  const std::vector<hp::ParamRef> refs = hp::param_refs(params);
  hp::Rng rng(3);
  std::vector<int32_t> tok(a.seq + 1);
  for (auto& t : tok) t = static_cast<int32_t>(rng.next_u64() % a.vocab);
  hp::TokenBuffer tok_dev;
  tok_dev.upload(*be, tok, cfg.vocab, "token");
  hp::StepOptions so{hp::parse_recompute(a.recompute), hp::TransferMode::kWeights};
  hp::ValueStore store(*be);

  const double T = static_cast<double>(a.seq), h = a.hidden, q = cfg.qkv_dim(), f = a.ffn;
  const double matmul_fwd = a.layers * 2 * T * (h * q + h * h + 3 * h * f) + 2 * T * h * a.vocab;
  const double attn_fwd = a.layers * 2 * T * T * h;
  const double step_flops = 3 * matmul_fwd + 3.5 * attn_fwd;

  std::printf("bench_step: L=%lld h=%lld heads=%lld ffn=%lld vocab=%lld s=%lld b=1 threads=%d "
              "recompute=%s mlp_chunk=%lld kernels=%s (timed by %s)\n",
              (long long)a.layers, (long long)a.hidden, (long long)a.heads, (long long)a.ffn,
              (long long)a.vocab, (long long)a.seq, a.threads, a.recompute.c_str(),
              (long long)a.mlp_chunk, kern.name().c_str(),
              g_cpu_clock ? "process CPU time" : "wall clock");
  double best = 1e30, loss = 0;
  for (int step = 0; step <= a.steps; ++step) {  // step 0 warms up (pool, workspace)
    const double t0 = now_seconds();
    params.zero_grad();
    loss = hp::loss_and_grads(model, tok_dev.data(), tok_dev.data() + 1, 1, a.seq, 1, so, &store);
    opt.step(refs, 1e-3, 1.0);
    const double dt = now_seconds() - t0;
    if (step > 0) best = std::min(best, dt);
    std::printf("  step %d: %.3f s, loss %.4f\n", step, dt, loss);
  }
  const double sg = sgemm_gflops(kern, 1024);
  const double gf = step_flops / best * 1e-9;
  const double tps = a.seq / best;
  std::printf("sgemm 1024^3:        %8.1f GFLOP/s\n", sg);
  std::printf("step (fwd+bwd+adamw): %7.3f s, %.1f GFLOP model FLOPs, %.1f GFLOP/s = %.2f x sgemm\n",
              best, step_flops * 1e-9, gf, gf / sg);
  std::printf("tokens/s:            %8.1f\n", tps);
  std::printf("peak RSS:            %8.1f MB (value store peak %.1f MB, workspace %.1f MB, "
              "params+grads+adam %.1f MB)\n",
              peak_rss_mb(), store.peak_bytes() / 1048576.0, model.workspace_bytes() / 1048576.0,
              params.size() * 16.0 / 1048576.0);
  if (a.torch) {
    char cmd[512];
    std::snprintf(cmd, sizeof cmd,
                  "/usr/bin/python3 %s/tools/bench_step_torch.py --seq %lld --layers %lld "
                  "--hidden %lld --heads %lld --vocab %lld --ffn %lld --threads %d --steps %d",
                  HP_SOURCE_DIR, (long long)a.seq, (long long)a.layers, (long long)a.hidden,
                  (long long)a.heads, (long long)a.vocab, (long long)a.ffn, a.threads, a.steps);
    std::printf("running: %s\n", cmd);
    std::fflush(stdout);
    FILE* p = popen(cmd, "r");
    HP_CHECK(p, "bench_step: cannot run the torch script");
    std::string last, line;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) {
      std::fputs(buf, stdout);
      line = buf;
      if (line.find("\"tokens_per_s\"") != std::string::npos) last = line;
    }
    const int rc = pclose(p);
    if (rc != 0 || last.empty()) {
      std::printf("torch: no result (exit status %d): it ran out of memory or is not installed\n", rc);
      return 0;
    }
    const double ttps = json_number(last, "tokens_per_s"), trss = json_number(last, "peak_rss_mb");
    std::printf("vs PyTorch: %.2f x its tokens/s, %.2f x its peak RSS (its sgemm: %.1f GFLOP/s = "
                "%.2f x ours)\n",
                tps / ttps, peak_rss_mb() / trss, json_number(last, "sgemm_gflops"),
                json_number(last, "sgemm_gflops") / sg);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_step: %s\n", e.what());
  return 1;
}
