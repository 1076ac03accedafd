// The GEMMs of one training step of bench_step's model, by shape, and their combined rate: what a
// step's GEMMs could reach on this machine, measured in the same run as the step, so that a step's
// GFLOP/s can be read as a fraction of it. Each weight matrix W (N x K) of the forward gives three
// GEMMs: y = x W^T (M x N x K), dx = dy W (M x K x N) and dW += dy^T x (N x K x M, into the f32
// gradient when the activations are bf16); M is the tokens of one call (the MLP and the head run
// in chunks of tokens). Not here: attention, which is no GEMM.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace hp::bench {

struct GemmShape {
  bool ta, tb;
  int64_t M, N, K;
  bool grad;      // a weight gradient: C accumulates (beta 1) in the master type
  int64_t count;  // calls of this shape per step
};

// The step's GEMMs for `layers` layers over `tokens` tokens (MLP chunks of mlp_chunk tokens, 0 =
// all; the head in chunks of head_chunk), weights: qkv (q x h), out (h x h), gate and up (f x h),
// down (h x f), lm head (vocab x h).
inline std::vector<GemmShape> step_gemms(int64_t tokens, int64_t layers, int64_t h, int64_t q,
                                         int64_t f, int64_t vocab, int64_t mlp_chunk,
                                         int64_t head_chunk) {
  std::vector<GemmShape> out;
  // Adds the three GEMMs of W (n x k) applied to `tokens` rows in calls of `chunk` rows.
  auto weight = [&](int64_t n, int64_t k, int64_t chunk, int64_t times) {
    chunk = chunk <= 0 ? tokens : std::min(chunk, tokens);
    const int64_t full = tokens / chunk, rest = tokens % chunk;
    for (auto [m, c] : {std::pair<int64_t, int64_t>{chunk, full}, {rest, rest > 0 ? 1 : 0}}) {
      if (c == 0) continue;
      out.push_back({false, true, m, n, k, false, c * times});
      out.push_back({false, false, m, k, n, false, c * times});
      out.push_back({true, false, n, k, m, true, c * times});
    }
  };
  weight(q, h, 0, layers);
  weight(h, h, 0, layers);
  weight(f, h, mlp_chunk, 2 * layers);  // gate and up
  weight(h, f, mlp_chunk, layers);
  weight(vocab, h, head_chunk, 1);
  return out;
}

inline double step_gemm_flops(const std::vector<GemmShape>& shapes) {
  double total = 0;
  for (const GemmShape& s : shapes) total += 2.0 * s.M * s.N * s.K * s.count;
  return total;
}

// GFLOP/s of the whole mix: sum of FLOPs over the sum of (count x best time of one call), each
// shape timed by `seconds(shape)` (which runs it once and returns its time) after one warm-up call,
// best of `repeats`.
inline double step_gemm_gflops(const std::vector<GemmShape>& shapes,
                               const std::function<double(const GemmShape&)>& seconds,
                               int repeats = 3) {
  double time = 0;
  for (const GemmShape& s : shapes) {
    seconds(s);
    double best = 1e30;
    for (int i = 0; i < repeats; ++i) best = std::min(best, seconds(s));
    time += best * s.count;
  }
  return step_gemm_flops(shapes) / time * 1e-9;
}

}  // namespace hp::bench
