// Runs tools/bench_step_torch.py (PyTorch's version of bench_step's training step) as a child
// process and reads its result: once tuned the way an informed user would run it (a better
// allocator through LD_PRELOAD, or glibc's malloc tunables; OMP_NUM_THREADS set to the same thread
// count) and, for comparison, once untuned (the default glibc malloc). Not here: the step itself.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace hp::bench {

struct TorchArgs {
  int64_t seq, layers, hidden, heads, vocab, ffn;
  int threads, steps, warmup;
};

struct TorchResult {
  bool ok = false;
  std::string allocator, why;  // why: the reason when !ok
  double tokens_per_s = 0, step_s = 0, peak_rss_mb = 0, sgemm_gflops = 0, bf16_gemm_gflops = 0;
};

// The environment prefix for a tuned run: `alloc` is auto (jemalloc, else tcmalloc, else glibc
// tunables), jemalloc, tcmalloc or glibc. Throws hp::Error for another name or a missing library.
inline std::string torch_alloc_env(const std::string& alloc) {
  const std::string dir = "/usr/lib/x86_64-linux-gnu/";
  const std::string je = dir + "libjemalloc.so.2", tc = dir + "libtcmalloc_minimal.so.4";
  // jemalloc keeps freed pages (no decay) and sends large blocks to their own arena; tcmalloc as
  // it comes; glibc: no mmap for large blocks and no trimming, so freed memory is reused.
  const std::string je_env = "LD_PRELOAD=" + je +
                             " MALLOC_CONF=oversize_threshold:1,background_thread:true,"
                             "metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1";
  const std::string tc_env = "LD_PRELOAD=" + tc;
  const std::string glibc_env =
      "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=34359738368";
  auto have = [](const std::string& p) { return access(p.c_str(), R_OK) == 0; };
  if (alloc == "auto") return have(je) ? je_env : have(tc) ? tc_env : glibc_env;
  if (alloc == "jemalloc" || alloc == "tcmalloc") {
    const std::string& lib = alloc == "jemalloc" ? je : tc;
    HP_CHECK(have(lib), "bench_step: --torch-alloc={} but {} is missing (apt-get install {})",
             alloc, lib, alloc == "jemalloc" ? "libjemalloc2" : "libtcmalloc-minimal4");
    return alloc == "jemalloc" ? je_env : tc_env;
  }
  HP_CHECK(alloc == "glibc",
           "bench_step: --torch-alloc={} is not auto, jemalloc, tcmalloc or glibc", alloc);
  return glibc_env;
}

namespace detail {
inline double json_number(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\": ";
  const auto p = line.find(k);
  return p == std::string::npos ? 0.0 : std::atof(line.c_str() + p + k.size());
}
inline std::string json_string(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\": \"";
  const auto p = line.find(k);
  if (p == std::string::npos) return "?";
  const auto e = line.find('"', p + k.size());
  return line.substr(p + k.size(), e - p - k.size());
}
}  // namespace detail

// Runs the script once (its step lines are echoed, indented) and returns its result. env: the
// allocator part of the environment ("" for untuned); precision: fp32 or bf16 (autocast).
inline TorchResult run_torch(const TorchArgs& a, const std::string& env,
                             const std::string& precision, const char* source_dir) {
  char cmd[1536];
  std::snprintf(
      cmd, sizeof cmd,
      "env OMP_NUM_THREADS=%d %s /usr/bin/python3 %s/tools/bench_step_torch.py --seq %lld "
      "--layers %lld --hidden %lld --heads %lld --vocab %lld --ffn %lld --threads %d "
      "--steps %d --warmup %d --precision %s 2>&1",
      a.threads, env.c_str(), source_dir, (long long)a.seq, (long long)a.layers,
      (long long)a.hidden, (long long)a.heads, (long long)a.vocab, (long long)a.ffn, a.threads,
      a.steps, a.warmup, precision.c_str());
  std::printf("running: %s\n", cmd);
  std::fflush(stdout);
  TorchResult r;
  FILE* p = popen(cmd, "r");
  if (!p) {
    r.why = "cannot start /usr/bin/python3";
    return r;
  }
  std::string last, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    line = buf;
    std::printf("    %s", buf);
    if (line.find("\"tokens_per_s\"") != std::string::npos) last = line;
  }
  const int rc = pclose(p);
  if (rc != 0 || last.empty()) {
    r.why = "exit status " + std::to_string(rc) +
            ": it ran out of memory, or python3-torch is not installed (apt-get install "
            "python3-torch)";
    return r;
  }
  r.ok = true;
  r.tokens_per_s = detail::json_number(last, "tokens_per_s");
  r.step_s = detail::json_number(last, "step_s");
  r.peak_rss_mb = detail::json_number(last, "peak_rss_mb");
  r.sgemm_gflops = detail::json_number(last, "sgemm_gflops");
  r.bf16_gemm_gflops = detail::json_number(last, "bf16_gemm_gflops");
  r.allocator = detail::json_string(last, "allocator");
  return r;
}

}  // namespace hp::bench
