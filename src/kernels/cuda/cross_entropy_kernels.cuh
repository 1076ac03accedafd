// Cross-entropy kernels and their launch geometry (cross_entropy.cu launches them; tests/cuda_emu
// runs the same bodies on a CPU emulation). Forward: one block per row keeps a running (max, sum
// of exp) per thread, merges them in a fixed tree into lse, and writes the row's loss
// (lse - logit[target], f64); a second kernel adds the row losses into loss_sum in a fixed order
// (deterministic, no float atomics). Backward: one block per row writes (softmax - onehot) * scale
// from the given lse. A target outside [0, vocab) is recorded for the host and turns the row's
// outputs into NaN. Vocabulary-parallel forms (docs/tensor-parallel.md): a slice's logits give
// per-row (lse, target logit) parts; a combine kernel merges the group's parts in slice order into
// the whole lse and the row losses; the backward takes the slice's first id (`begin`) and the
// whole vocabulary (`total`) so the one-hot falls in the right slice.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

// Running log-sum-exp state: m the largest value seen, s the sum of exp(x - m).
__device__ __forceinline__ void lse_add(float& m, float& s, float x) {
  if (x > m) {
    s = __fadd_rn(__fmul_rn(s, expf(m - x)), 1.0f);
    m = x;
  } else if (x != -INFINITY) {  // -inf adds nothing (and would give exp(nan) when m is -inf)
    s = __fadd_rn(s, expf(x - m));
  }
}

// Merge (m2, s2) into (m, s); symmetric bit for bit, so every lane of a butterfly agrees.
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) {  // nothing finite on either side: s is 0, or NaN from a NaN logit
    s = __fadd_rn(s, s2);
    return;
  }
  s = __fadd_rn(__fmul_rn(s, expf(m - mx)), __fmul_rn(s2, expf(m2 - mx)));
  m = mx;
}

__device__ __forceinline__ void block_lse(float& m, float& s) {
  __shared__ float pm[32], ps[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
              __shfl_xor_sync(0xffffffffu, s, offset));
  }
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) {
    pm[warp] = m;
    ps[warp] = s;
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) >> 5;
  m = lane < warps ? pm[lane] : -INFINITY;
  s = lane < warps ? ps[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
              __shfl_xor_sync(0xffffffffu, s, offset));
  }
}

// The block's (max, sum of exp) over one row of `vocab` logits, the same on every thread: N-wide
// loads over the packs, then the tail, then the fixed merge tree.
template <typename T, int N>
__device__ __forceinline__ void row_lse(const T* row, int64_t vocab, float& m, float& s) {
  m = -INFINITY;
  s = 0.0f;
  const int64_t packs = vocab / N;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_vec<T, N>(row + p * N, v);
#pragma unroll
    for (int j = 0; j < N; ++j) lse_add(m, s, v[j]);
  }
  for (int64_t c = packs * N + threadIdx.x; c < vocab; c += blockDim.x)
    lse_add(m, s, to_float(row[c]));
  block_lse(m, s);
}

template <typename T, int N>
__global__ void cross_entropy_forward_kernel(const T* logits, int64_t ld, const int32_t* targets,
                                             int64_t vocab, float* lse, double* row_loss,
                                             DeviceErrorRecord* errors) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  float m, s;
  row_lse<T, N>(row, vocab, m, s);
  if (threadIdx.x == 0) {
    const float l = m + logf(s);
    lse[r] = l;
    const int32_t t = targets[r];
    if (t < 0 || t >= vocab) {
      report_error(errors, kErrCrossEntropyTarget, r, t, vocab);
      row_loss[r] = nan_f();
    } else {
      row_loss[r] = static_cast<double>(__fsub_rn(l, to_float(row[t])));
    }
  }
}

// loss_sum[0] += sum of row_loss: thread i adds a contiguous run of rows in order, then a fixed
// tree over the threads.
__global__ void sum_rows_kernel(const double* row_loss, int64_t rows, double* loss_sum) {
  const int64_t chunk = (rows + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * chunk;
  const int64_t end = begin + chunk < rows ? begin + chunk : rows;
  double acc = 0.0;
  for (int64_t r = begin; r < end; ++r) acc += row_loss[r];
  acc = block_sum(acc);
  if (threadIdx.x == 0) loss_sum[0] += acc;
}

// A slice's parts of one row: parts[r] = lse over the slice's `vocab` columns, parts[rows + r] =
// the target's logit when the target lies in [begin, begin + vocab), else 0.
template <typename T, int N>
__global__ void vocab_cross_entropy_stats_kernel(const T* logits, int64_t ld,
                                                 const int32_t* targets, int64_t begin,
                                                 int64_t vocab, int64_t total, int64_t rows,
                                                 float* parts, DeviceErrorRecord* errors) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  float m, s;
  row_lse<T, N>(row, vocab, m, s);
  if (threadIdx.x == 0) {
    parts[r] = m + logf(s);
    const int64_t t = targets[r];
    if (t < 0 || t >= total) {
      report_error(errors, kErrCrossEntropyTarget, r, t, total);
      parts[rows + r] = nan_f();
    } else {
      parts[rows + r] = t >= begin && t < begin + vocab ? to_float(row[t - begin]) : 0.0f;
    }
  }
}

// One thread per row: lse[r] = the logsumexp of the nparts slices' lse (largest first, then the
// sum in slice order, in f64) and row_loss[r] = lse[r] - the sum of the slices' target logits.
__global__ void vocab_cross_entropy_combine_kernel(const float* parts, int64_t nparts, int64_t rows,
                                                   float* lse, double* row_loss) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double mx = -INFINITY, sum = 0.0, target = 0.0;
  for (int64_t p = 0; p < nparts; ++p) mx = fmax(mx, static_cast<double>(parts[p * 2 * rows + r]));
  for (int64_t p = 0; p < nparts; ++p) {
    sum += exp(static_cast<double>(parts[p * 2 * rows + r]) - mx);
    target += static_cast<double>(parts[p * 2 * rows + rows + r]);
  }
  const float l = static_cast<float>(mx + log(sum));
  lse[r] = l;
  row_loss[r] = static_cast<double>(l) - target;
}

// dlogits may alias logits (same type): every element is read, then written, by one thread. The
// row's columns are ids begin .. begin + vocab - 1 of `total` (the whole vocabulary: 0 and vocab).
template <typename TD, typename TL, int N>
__global__ void cross_entropy_backward_kernel(TD* dlogits, const TL* logits, int64_t ld,
                                              const float* lse, const int32_t* targets,
                                              int64_t begin, int64_t vocab, int64_t total,
                                              float scale, DeviceErrorRecord* errors) {
  const int64_t r = blockIdx.x;
  const float l = lse[r];
  const int64_t t = static_cast<int64_t>(targets[r]) - begin;  // the one-hot's column, if any
  const bool bad = targets[r] < 0 || targets[r] >= total;
  if (bad && threadIdx.x == 0)
    report_error(errors, kErrCrossEntropyBackwardTarget, r, targets[r], total);
  const TL* in = logits + r * ld;
  TD* out = dlogits + r * ld;
  const int64_t packs = vocab / N;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_vec<TL, N>(in + p * N, v);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float onehot = (p * N + j == t) ? 1.0f : 0.0f;
      v[j] = bad ? nan_f() : __fmul_rn(__fsub_rn(expf(v[j] - l), onehot), scale);
    }
    store_vec<TD, N>(out + p * N, v);
  }
  for (int64_t c = packs * N + threadIdx.x; c < vocab; c += blockDim.x) {
    const float onehot = c == t ? 1.0f : 0.0f;
    const float d = bad ? nan_f() : __fmul_rn(__fsub_rn(expf(to_float(in[c]) - l), onehot), scale);
    out[c] = from_float<TD>(d);
  }
}

template <typename T, class L>
void cross_entropy_forward_as(L& launch, DeviceErrorRecord* errors, const void* logits, int64_t ld,
                              const int32_t* targets, int64_t rows, int64_t vocab, float* lse,
                              double* row_loss) {
  constexpr int kN = 16 / sizeof(T);
  const T* lt = static_cast<const T*>(logits);
  if (ld % kN == 0 && is_aligned(logits, 16)) {
    launch("cross_entropy_forward", cross_entropy_forward_kernel<T, kN>,
           static_cast<unsigned>(rows), row_block_threads(vocab / kN), 0, lt, ld, targets, vocab,
           lse, row_loss, errors);
  } else {
    launch("cross_entropy_forward", cross_entropy_forward_kernel<T, 1>, static_cast<unsigned>(rows),
           row_block_threads(vocab), 0, lt, ld, targets, vocab, lse, row_loss, errors);
  }
}

// row_loss: rows doubles of scratch; loss_sum[0] += the sum of the rows' losses.
template <class L>
void cross_entropy_forward_run(L& launch, DeviceErrorRecord* errors, Elem t, const void* logits,
                               int64_t ld, const int32_t* targets, int64_t rows, int64_t vocab,
                               float* lse, double* row_loss, double* loss_sum) {
  if (rows == 0) return;
  if (t == Elem::kF32) {
    cross_entropy_forward_as<float>(launch, errors, logits, ld, targets, rows, vocab, lse,
                                    row_loss);
  } else {
    cross_entropy_forward_as<Bf16>(launch, errors, logits, ld, targets, rows, vocab, lse, row_loss);
  }
  launch("cross_entropy_forward (row sum)", sum_rows_kernel, 1u, 256, 0,
         static_cast<const double*>(row_loss), rows, loss_sum);
}

// The columns of a row of logits: ids begin .. begin + vocab - 1 of a vocabulary of `total`.
struct VocabCols {
  int64_t begin, vocab, total;
};

template <typename TD, typename TL, class L>
void cross_entropy_backward_as(L& launch, DeviceErrorRecord* errors, void* dlogits,
                               const void* logits, int64_t ld, const float* lse,
                               const int32_t* targets, int64_t rows, VocabCols v, float scale) {
  constexpr int kN = 16 / (sizeof(TD) > sizeof(TL) ? sizeof(TD) : sizeof(TL));
  TD* dt = static_cast<TD*>(dlogits);
  const TL* lt = static_cast<const TL*>(logits);
  if (ld % kN == 0 && is_aligned(dlogits, kN * sizeof(TD)) && is_aligned(logits, kN * sizeof(TL))) {
    launch("cross_entropy_backward", cross_entropy_backward_kernel<TD, TL, kN>,
           static_cast<unsigned>(rows), row_block_threads(v.vocab / kN), 0, dt, lt, ld, lse,
           targets, v.begin, v.vocab, v.total, scale, errors);
  } else {
    launch("cross_entropy_backward", cross_entropy_backward_kernel<TD, TL, 1>,
           static_cast<unsigned>(rows), row_block_threads(v.vocab), 0, dt, lt, ld, lse, targets,
           v.begin, v.vocab, v.total, scale, errors);
  }
}

// The whole vocabulary's backward, or a slice's (v: its columns).
template <class L>
void cross_entropy_backward_run(L& launch, DeviceErrorRecord* errors, Elem dt, void* dlogits,
                                Elem lt, const void* logits, int64_t ld, const float* lse,
                                const int32_t* targets, int64_t rows, VocabCols v, float scale) {
  if (rows == 0) return;
  if (dt == Elem::kF32 && lt == Elem::kF32) {
    return cross_entropy_backward_as<float, float>(launch, errors, dlogits, logits, ld, lse,
                                                   targets, rows, v, scale);
  }
  if (dt == Elem::kBF16 && lt == Elem::kBF16) {
    return cross_entropy_backward_as<Bf16, Bf16>(launch, errors, dlogits, logits, ld, lse, targets,
                                                 rows, v, scale);
  }
  if (dt == Elem::kBF16 && lt == Elem::kF32) {
    return cross_entropy_backward_as<Bf16, float>(launch, errors, dlogits, logits, ld, lse, targets,
                                                  rows, v, scale);
  }
  cross_entropy_backward_as<float, Bf16>(launch, errors, dlogits, logits, ld, lse, targets, rows, v,
                                         scale);
}
template <class L>
void cross_entropy_backward_run(L& launch, DeviceErrorRecord* errors, Elem dt, void* dlogits,
                                Elem lt, const void* logits, int64_t ld, const float* lse,
                                const int32_t* targets, int64_t rows, int64_t vocab, float scale) {
  cross_entropy_backward_run(launch, errors, dt, dlogits, lt, logits, ld, lse, targets, rows,
                             VocabCols{0, vocab, vocab}, scale);
}

template <typename T, class L>
void vocab_cross_entropy_stats_as(L& launch, DeviceErrorRecord* errors, const void* logits,
                                  int64_t ld, const int32_t* targets, int64_t rows, VocabCols v,
                                  float* parts) {
  constexpr int kN = 16 / sizeof(T);
  const T* lt = static_cast<const T*>(logits);
  if (ld % kN == 0 && is_aligned(logits, 16)) {
    launch("vocab_cross_entropy_stats", vocab_cross_entropy_stats_kernel<T, kN>,
           static_cast<unsigned>(rows), row_block_threads(v.vocab / kN), 0, lt, ld, targets,
           v.begin, v.vocab, v.total, rows, parts, errors);
  } else {
    launch("vocab_cross_entropy_stats", vocab_cross_entropy_stats_kernel<T, 1>,
           static_cast<unsigned>(rows), row_block_threads(v.vocab), 0, lt, ld, targets, v.begin,
           v.vocab, v.total, rows, parts, errors);
  }
}

// parts: 2 * rows floats, [lse of the slice | target logit or 0].
template <class L>
void vocab_cross_entropy_stats_run(L& launch, DeviceErrorRecord* errors, Elem t, const void* logits,
                                   int64_t ld, const int32_t* targets, int64_t rows, VocabCols v,
                                   float* parts) {
  if (rows == 0) return;
  if (t == Elem::kF32) {
    vocab_cross_entropy_stats_as<float>(launch, errors, logits, ld, targets, rows, v, parts);
  } else {
    vocab_cross_entropy_stats_as<Bf16>(launch, errors, logits, ld, targets, rows, v, parts);
  }
}

// row_loss: rows doubles of scratch; loss_sum[0] += the rows' losses summed in a fixed order.
template <class L>
void vocab_cross_entropy_combine_run(L& launch, const float* parts, int64_t nparts, int64_t rows,
                                     float* lse, double* row_loss, double* loss_sum) {
  if (rows == 0) return;
  constexpr int kThreads = 256;
  launch("vocab_cross_entropy_combine", vocab_cross_entropy_combine_kernel,
         static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, parts, nparts, rows,
         lse, row_loss);
  launch("vocab_cross_entropy_combine (row sum)", sum_rows_kernel, 1u, 256, 0,
         static_cast<const double*>(row_loss), rows, loss_sum);
}

}  // namespace
}  // namespace hp::cuda
