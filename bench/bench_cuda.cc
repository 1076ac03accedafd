// CUDA kernel benchmark: time per call of the CudaKernels calls a training step makes, at model
// sizes, with the rate each reaches (TFLOP/s for GEMMs and attention, GB/s of compulsory memory
// traffic for the rest). Run on an idle GPU: build/bench/bench_cuda [--quick]
// Each number is the median of 10 timed calls after 3 warm-ups, timed by the host around a
// backend synchronize (so it includes launch overhead, which matters for small calls).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "util/error.h"

namespace hp {
namespace {

double median_seconds(Backend& be, const std::function<void()>& f, int iters = 10) {
  for (int i = 0; i < 3; ++i) f();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Buffer random_buffer(Backend& be, DType t, int64_t n, float scale = 1.0f) {
  std::mt19937 gen(static_cast<uint32_t>(n));
  std::normal_distribution<float> dist(0.0f, scale);
  Buffer b(be, t, n);
  if (t == DType::kF32) {
    std::vector<float> h(static_cast<size_t>(n));
    for (auto& x : h) x = dist(gen);
    be.upload(b.data(), h.data(), b.bytes());
  } else {
    std::vector<bf16> h(static_cast<size_t>(n));
    for (auto& x : h) x = to_bf16(dist(gen));
    be.upload(b.data(), h.data(), b.bytes());
  }
  return b;
}

void report(const char* what, const std::string& shape, double s, double flops, double bytes) {
  std::printf("%-26s %-34s %9.3f ms", what, shape.c_str(), s * 1e3);
  if (flops > 0) std::printf("  %8.1f TFLOP/s", flops / s * 1e-12);
  if (bytes > 0) std::printf("  %8.1f GB/s", bytes / s * 1e-9);
  std::printf("\n");
  std::fflush(stdout);
}

void bench_gemms(Backend& be, int64_t n) {
  Kernels& k = be.kernels();
  for (DType t : {DType::kBF16, DType::kF32}) {
    Buffer a = random_buffer(be, t, n * n), b = random_buffer(be, t, n * n);
    Buffer c = random_buffer(be, t, n * n), c32 = random_buffer(be, DType::kF32, n * n);
    const std::string shape = std::to_string(n) + "^3 " + dtype_name(t);
    const double flops = 2.0 * n * n * n;
    report("gemm NT", shape,
           median_seconds(
               be,
               [&] { k.gemm(false, true, n, n, n, 1.0, a.ptr(), n, b.ptr(), n, 0.0, c.ptr(), n); }),
           flops, 0);
    if (t == DType::kBF16) {
      report("gemm TN += into f32", shape,
             median_seconds(be,
                            [&] {
                              k.gemm(true, false, n, n, n, 1.0, a.ptr(), n, b.ptr(), n, 1.0,
                                     c32.ptr(), n);
                            }),
             flops, 0);
    }
  }
}

void bench_rows(Backend& be, DType t, int64_t rows, int64_t dim, int64_t vocab) {
  Kernels& k = be.kernels();
  const int64_t e = dtype_bytes(t);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(dim) + " " + dtype_name(t);
  Buffer x = random_buffer(be, t, rows * dim), g = random_buffer(be, t, dim);
  Buffer y = random_buffer(be, t, rows * dim), dy = random_buffer(be, t, rows * dim);
  Buffer rstd(be, DType::kF32, rows), dg = random_buffer(be, DType::kF32, dim);
  report(
      "rmsnorm_forward", shape,
      median_seconds(
          be, [&] { k.rmsnorm_forward(y.ptr(), rstd.ptr(), x.ptr(), g.ptr(), rows, dim, 1e-5); }),
      0, 2.0 * rows * dim * e);
  report("rmsnorm_backward", shape,
         median_seconds(be,
                        [&] {
                          k.rmsnorm_backward(y.ptr(), dg.ptr(), dy.ptr(), x.ptr(), g.ptr(),
                                             rstd.ptr(), rows, dim, false);
                        }),
         0, 3.0 * rows * dim * e);
  report("rope", shape,
         median_seconds(be, [&] { k.rope(x.ptr(), rows, dim, rows, dim / 128, 128, 1e4, false); }),
         0, 2.0 * rows * dim * e);
  report("swiglu_forward", shape,
         median_seconds(be, [&] { k.swiglu_forward(y.ptr(), x.ptr(), dy.ptr(), rows * dim); }), 0,
         3.0 * rows * dim * e);
  report("swiglu_backward", shape,
         median_seconds(
             be,
             [&] { k.swiglu_backward(y.ptr(), x.ptr(), dy.ptr(), x.ptr(), dy.ptr(), rows * dim); }),
         0, 5.0 * rows * dim * e);

  std::vector<int32_t> host_tokens(static_cast<size_t>(rows));
  std::mt19937 gen(7);
  for (auto& tok : host_tokens) tok = static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab));
  Buffer tokens(be, DType::kF32, rows);
  be.upload(tokens.data(), host_tokens.data(), rows * 4);
  const auto* tk = static_cast<const int32_t*>(tokens.data());
  Buffer table = random_buffer(be, t, vocab * dim),
         dtable = random_buffer(be, DType::kF32, vocab * dim);
  report("embedding_forward", shape,
         median_seconds(be, [&] { k.embedding_forward(x.ptr(), tk, table.ptr(), rows, dim); }), 0,
         2.0 * rows * dim * e);
  report("embedding_backward", shape,
         median_seconds(be, [&] { k.embedding_backward(dtable.ptr(), tk, dy.ptr(), rows, dim); }),
         0, rows * dim * (e + 8.0));

  const std::string ce_shape =
      std::to_string(rows) + "x" + std::to_string(vocab) + " " + dtype_name(t);
  Buffer logits = random_buffer(be, t, rows * vocab, 3.0f), lse(be, DType::kF32, rows);
  Buffer loss(be, DType::kF64, 1);
  be.zero(loss.data(), 8);
  report("cross_entropy_forward", ce_shape,
         median_seconds(be,
                        [&] {
                          k.cross_entropy_forward(logits.ptr(), vocab, tk, rows, vocab, lse.ptr(),
                                                  loss.ptr());
                        }),
         0, 1.0 * rows * vocab * e);
  report("cross_entropy_backward", ce_shape,
         median_seconds(be,
                        [&] {
                          k.cross_entropy_backward(logits.ptr(), logits.ptr(), vocab, lse.ptr(), tk,
                                                   rows, vocab, 1e-4);
                        }),
         0, 2.0 * rows * vocab * e);
}

void bench_update(Backend& be, int64_t n) {
  Kernels& k = be.kernels();
  Buffer p = random_buffer(be, DType::kF32, n), g = random_buffer(be, DType::kF32, n, 1e-3f);
  Buffer m = random_buffer(be, DType::kF32, n, 1e-3f), v(be, DType::kF32, n);
  Buffer copy(be, DType::kBF16, n);
  be.zero(v.data(), v.bytes());
  const std::string shape = std::to_string(n) + " f32 (+bf16 copy)";
  report("adamw", shape,
         median_seconds(be,
                        [&] {
                          k.adamw(p.ptr(), g.ptr(), m.ptr(), v.ptr(), n, 1e-4, 0.9, 0.95, 1e-8, 0.1,
                                  3, 1.0, copy.ptr());
                        }),
         0, n * (7 * 4.0 + 2));
  report("sum_squares", std::to_string(n) + " f32",
         median_seconds(be, [&] { (void)k.sum_squares(g.ptr(), n); }), 0, n * 4.0);
  report("convert f32->bf16", std::to_string(n),
         median_seconds(be, [&] { k.convert(copy.ptr(), p.ptr(), n); }), 0, n * 6.0);
}

void bench_attention(Backend& be, DType t, int64_t seq) {
  AttnShape s;
  s.batch = 1;
  s.seq = seq;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.ld_qkv = (s.heads + 2 * s.kv_heads) * s.head_dim;
  s.ld_o = s.heads * s.head_dim;
  Kernels& k = be.kernels();
  Buffer qkv = random_buffer(be, t, seq * s.ld_qkv), o(be, t, seq * s.ld_o);
  Buffer dqkv(be, t, seq * s.ld_qkv), dout = random_buffer(be, t, seq * s.ld_o);
  Buffer lse(be, DType::kF32, s.heads * seq);
  const DataPtr q = qkv.ptr(), kk = qkv.ptr().at(s.heads * s.head_dim);
  const DataPtr v = qkv.ptr().at((s.heads + s.kv_heads) * s.head_dim);
  const std::string shape = "s=" + std::to_string(seq) + " h=32/8 d=128 " + dtype_name(t);
  const double fwd_flops = 2.0 * 2.0 * s.heads * (0.5 * seq * seq) * s.head_dim;
  try {
    report("attention_forward", shape,
           median_seconds(be, [&] { k.attention_forward(s, q, kk, v, o.ptr(), lse.ptr()); }),
           fwd_flops, 0);
    report("attention_backward", shape,
           median_seconds(be,
                          [&] {
                            k.attention_backward(
                                s, q, kk, v, o.ptr(), dout.ptr(), lse.ptr(), dqkv.ptr(),
                                dqkv.ptr().at(s.heads * s.head_dim),
                                dqkv.ptr().at((s.heads + s.kv_heads) * s.head_dim));
                          }),
           2.5 * fwd_flops, 0);
  } catch (const Error& e) {
    std::printf("attention: %s\n", e.what());
  }
}

}  // namespace
}  // namespace hp

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  try {
    if (hp::cuda_device_count() == 0) {
      std::printf("bench_cuda: no CUDA device (%s)\n", hp::cuda_unavailable_reason().c_str());
      return 0;
    }
    auto be = hp::make_cuda_backend(0);
    std::printf("%s\n", be->name().c_str());
    hp::bench_gemms(*be, quick ? 1024 : 4096);
    for (hp::DType t : {hp::DType::kBF16, hp::DType::kF32}) {
      hp::bench_rows(*be, t, quick ? 1024 : 16384, 4096, quick ? 4096 : 32000);
    }
    hp::bench_update(*be, quick ? (1 << 20) : (1 << 26));
    for (hp::DType t : {hp::DType::kBF16, hp::DType::kF32}) {
      hp::bench_attention(*be, t, quick ? 1024 : 8192);
    }
    const hp::MemoryStats st = be->memory_stats();
    std::printf("memory: peak %.2f GiB in use, %.2f GiB reserved, %lld cudaMalloc calls\n",
                st.peak / 1073741824.0, st.reserved / 1073741824.0,
                static_cast<long long>(st.system_allocations));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
