// CUDA attention benchmark: hp::cuda::flash_attention_forward / _backward (bf16 unless --dtype=f32)
// timed with CUDA events, one JSON line per (shape, pass). tools/attn_bench_compare.py runs it
// beside tools/sdpa_bench.py (PyTorch SDPA, flash backend) and prints the ratio table.
//   build/bench/bench_attention_cuda [--quick] [--seqs=8192,16384,32768,65536] [--tokens=65536]
//       [--heads=16] [--kv-heads=16,4] [--head-dim=128] [--reps=10] [--dtype=bf16|f32]
// batch = max(1, tokens / seq). FLOPs (causal, the standard count): forward
// 4 * batch * seq^2 * heads * head_dim / 2, backward 2.5x forward. Each shape gets fresh uniform
// random inputs (filled on the device), one untimed warm-up call of each pass, then the median of
// --reps calls, each between its own pair of events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/flash_attention.h"
#include "util/error.h"

namespace {

void check(cudaError_t e, const char* what) {
  HP_CHECK(e == cudaSuccess, "{}: CUDA error {}", what, cudaGetErrorString(e));
}

struct Options {
  std::vector<int64_t> seqs = {8192, 16384, 32768, 65536}, kv_heads = {16, 4};
  int64_t tokens = 65536, heads = 16, head_dim = 128;
  int reps = 10;
  hp::DType dtype = hp::DType::kBF16;
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    HP_CHECK(end != p, "bench_attention_cuda: bad number list '{}'", s);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* key) -> const char* {
      const size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? argv[i] + n : nullptr;
    };
    const char* v = nullptr;
    if (a == "--quick") {
      o.seqs = {512, 1000};
      o.tokens = 2048;
      o.heads = 4;
      o.kv_heads = {4, 2};
      o.reps = 3;
    } else if ((v = val("--seqs="))) {
      o.seqs = parse_list(v);
    } else if ((v = val("--kv-heads="))) {
      o.kv_heads = parse_list(v);
    } else if ((v = val("--tokens="))) {
      o.tokens = std::atoll(v);
    } else if ((v = val("--heads="))) {
      o.heads = std::atoll(v);
    } else if ((v = val("--head-dim="))) {
      o.head_dim = std::atoll(v);
    } else if ((v = val("--reps="))) {
      o.reps = std::max(1, std::atoi(v));
    } else if ((v = val("--dtype="))) {
      o.dtype = std::strcmp(v, "f32") == 0 ? hp::DType::kF32 : hp::DType::kBF16;
    } else {
      hp::fail("bench_attention_cuda: unknown argument '{}' (see the header of the source)", a);
    }
  }
  return o;
}

class DevBuf {
 public:
  explicit DevBuf(size_t bytes) {
    check(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), "cudaMalloc");
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
};

// Median milliseconds of reps calls of f (after one untimed call).
template <typename F>
double median_ms(int reps, cudaStream_t stream, F&& f) {
  f();
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(ev[2 * r], stream), "cudaEventRecord");
    f();
    check(cudaEventRecord(ev[2 * r + 1], stream), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(stream), "run");
  std::vector<double> ms(reps);
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    check(cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]), "cudaEventElapsedTime");
    ms[r] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
}

void run_shape(const Options& opt, int64_t seq, int64_t kv, uint64_t seed, cudaStream_t stream) {
  hp::AttnShape s;
  s.batch = std::max<int64_t>(1, opt.tokens / seq);
  s.seq = seq;
  s.heads = opt.heads;
  s.kv_heads = kv;
  s.head_dim = opt.head_dim;
  s.ld_qkv = (s.heads + 2 * kv) * s.head_dim;  // q, k, v: slices of one row, as in the model
  s.ld_o = s.heads * s.head_dim;
  const int64_t rows = s.batch * s.seq, esz = hp::dtype_bytes(opt.dtype);
  const bool bf16 = opt.dtype == hp::DType::kBF16;
  DevBuf qkv(rows * s.ld_qkv * esz), dqkv(rows * s.ld_qkv * esz), o(rows * s.ld_o * esz),
      dout(rows * s.ld_o * esz), lse(s.batch * s.heads * s.seq * sizeof(float)),
      ws(hp::cuda::flash_attention_backward_workspace(opt.dtype, s));
  check(hp::cuda::attn::launch_fill_uniform(bf16, qkv.get(), rows * s.ld_qkv, seed, -1, 1, stream),
        "fill");
  check(
      hp::cuda::attn::launch_fill_uniform(bf16, dout.get(), rows * s.ld_o, seed + 1, -1, 1, stream),
      "fill");
  const char* q = qkv.get();
  const char* k = q + s.heads * s.head_dim * esz;
  const char* v = k + kv * s.head_dim * esz;
  char* dq = dqkv.get();
  char* dk = dq + s.heads * s.head_dim * esz;
  char* dv = dk + kv * s.head_dim * esz;
  float* lsep = reinterpret_cast<float*>(lse.get());
  const double fwd_ms = median_ms(opt.reps, stream, [&] {
    hp::cuda::flash_attention_forward(opt.dtype, s, q, k, v, o.get(), lsep, stream);
  });
  const double bwd_ms = median_ms(opt.reps, stream, [&] {
    hp::cuda::flash_attention_backward(opt.dtype, s, q, k, v, o.get(), dout.get(), lsep, dq, dk, dv,
                                       ws.get(), stream);
  });
  const double fwd_flops = 4.0 * s.batch * double(seq) * double(seq) * s.heads * s.head_dim / 2;
  for (int pass = 0; pass < 2; ++pass) {
    const double ms = pass == 0 ? fwd_ms : bwd_ms;
    const double flops = pass == 0 ? fwd_flops : 2.5 * fwd_flops;
    std::printf(
        "{\"impl\": \"helixpipe\", \"dtype\": \"%s\", \"pass\": \"%s\", \"batch\": %lld, "
        "\"seq\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, \"ms\": %.4f, "
        "\"tflops\": %.2f}\n",
        hp::dtype_name(opt.dtype), pass == 0 ? "fwd" : "bwd", static_cast<long long>(s.batch),
        static_cast<long long>(seq), static_cast<long long>(s.heads), static_cast<long long>(kv),
        static_cast<long long>(s.head_dim), ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    uint64_t seed = 1;
    for (int64_t seq : opt.seqs)
      for (int64_t kv : opt.kv_heads) run_shape(opt, seq, kv, seed += 2, stream);
    cudaStreamDestroy(stream);
  } catch (const hp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
