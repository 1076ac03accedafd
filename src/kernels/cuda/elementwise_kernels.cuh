// Elementwise kernels and their launch geometry (elementwise.cu launches them; tests/cuda_emu runs
// the same bodies on a CPU emulation): SwiGLU forward/backward, axpy, type conversion, AdamW, sum
// of squares, and C = beta * C for an empty GEMM. Each thread takes packs of elements loaded with
// one 8- or 16-byte access when every pointer is aligned for it, and a scalar tail; arithmetic in
// f32 (f64 for the sum of squares) in the reference's order, bf16 rounded once on store.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace hp::cuda {
namespace {

constexpr int kElementwiseThreads = 256;

// op.run<W>(i) handles elements [i, i + W): packs of N first, then the tail one by one.
template <int N, typename Op>
__global__ void elementwise_kernel(int64_t n, Op op) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / N;
  for (int64_t p = tid; p < packs; p += stride) op.template run<N>(p * N);
  for (int64_t i = packs * N + tid; i < n; i += stride) op.template run<1>(i);
}

// h = silu(g) * u = g / (1 + exp(-g)) * u.
template <typename T>
struct SwigluForward {
  T* h;
  const T* g;
  const T* u;
  template <int W>
  __device__ void run(int64_t i) const {
    float gv[W], uv[W], hv[W];
    load_vec<T, W>(g + i, gv);
    load_vec<T, W>(u + i, uv);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      hv[j] = __fmul_rn(__fdiv_rn(gv[j], __fadd_rn(1.0f, expf(-gv[j]))), uv[j]);
    }
    store_vec<T, W>(h + i, hv);
  }
};

// sig = 1 / (1 + exp(-g)); du = dh * g * sig; dg = dh * u * sig * (1 + g * (1 - sig)).
// Outputs may alias inputs (each element is read before it is written, by one thread).
template <typename T>
struct SwigluBackward {
  T* dg;
  T* du;
  const T* dh;
  const T* g;
  const T* u;
  template <int W>
  __device__ void run(int64_t i) const {
    float dhv[W], gv[W], uv[W], dgv[W], duv[W];
    load_vec<T, W>(dh + i, dhv);
    load_vec<T, W>(g + i, gv);
    load_vec<T, W>(u + i, uv);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gv[j])));
      duv[j] = __fmul_rn(__fmul_rn(dhv[j], gv[j]), sig);
      const float dsilu = __fadd_rn(1.0f, __fmul_rn(gv[j], __fsub_rn(1.0f, sig)));
      dgv[j] = __fmul_rn(__fmul_rn(__fmul_rn(dhv[j], uv[j]), sig), dsilu);
    }
    store_vec<T, W>(du + i, duv);
    store_vec<T, W>(dg + i, dgv);
  }
};

// y += alpha * x
template <typename T>
struct Axpy {
  T* y;
  const T* x;
  float alpha;
  template <int W>
  __device__ void run(int64_t i) const {
    float yv[W], xv[W];
    load_vec<T, W>(y + i, yv);
    load_vec<T, W>(x + i, xv);
#pragma unroll
    for (int j = 0; j < W; ++j) yv[j] = __fadd_rn(yv[j], __fmul_rn(alpha, xv[j]));
    store_vec<T, W>(y + i, yv);
  }
};

template <typename D, typename S>
struct Convert {
  D* dst;
  const S* src;
  template <int W>
  __device__ void run(int64_t i) const {
    float v[W];
    load_vec<S, W>(src + i, v);
    store_vec<D, W>(dst + i, v);
  }
};

// The reference's AdamW step (reference_math.h): double arithmetic in its order, one rounding
// per operation (no FMA contraction), so fp32 training matches the host backends bit for bit.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v,
                                              const AdamWConsts& c) {
  const double gi = __dmul_rn(static_cast<double>(g), c.grad_scale);
  const double mi =
      __dadd_rn(__dmul_rn(c.beta1, static_cast<double>(m)), __dmul_rn(c.one_minus_beta1, gi));
  const double vi = __dadd_rn(__dmul_rn(c.beta2, static_cast<double>(v)),
                              __dmul_rn(__dmul_rn(c.one_minus_beta2, gi), gi));
  m = __double2float_rn(mi);
  v = __double2float_rn(vi);
  const double denom = __dadd_rn(__dmul_rn(__dsqrt_rn(vi), c.inv_sqrt_bc2), c.eps);
  p = __double2float_rn(__dsub_rn(__dmul_rn(static_cast<double>(p), c.shrink),
                                  __ddiv_rn(__dmul_rn(c.step_size, mi), denom)));
}

// W: the weight copy's type (unused when kCopy is false).
template <typename W, bool kCopy>
struct AdamW {
  float* param;
  const float* grad;
  float* m;
  float* v;
  W* copy;
  AdamWConsts c;
  template <int N>
  __device__ void run(int64_t i) const {
    float pv[N], gv[N], mv[N], vv[N];
    load_vec<float, N>(param + i, pv);
    load_vec<float, N>(grad + i, gv);
    load_vec<float, N>(m + i, mv);
    load_vec<float, N>(v + i, vv);
#pragma unroll
    for (int j = 0; j < N; ++j) adamw_element(pv[j], gv[j], mv[j], vv[j], c);
    store_vec<float, N>(param + i, pv);
    store_vec<float, N>(m + i, mv);
    store_vec<float, N>(v + i, vv);
    if constexpr (kCopy) store_vec<W, N>(copy + i, pv);
  }
};

// Per-block sums of x^2 in f64 (grid-stride), then one block adds them in block order.
template <typename T, int N>
__global__ void sum_squares_kernel(const T* x, int64_t n, double* partial) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / N;
  double acc = 0.0;
  for (int64_t p = tid; p < packs; p += stride) {
    float v[N];
    load_vec<T, N>(x + p * N, v);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += static_cast<double>(v[j]) * static_cast<double>(v[j]);
  }
  for (int64_t i = packs * N + tid; i < n; i += stride) {
    const double v = to_float(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* partial, int64_t count, double* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = acc;
}

template <typename T>
__global__ void scale_matrix_kernel(T* c, int64_t rows, int64_t cols, int64_t ld, float beta) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    T* p = c + (i / cols) * ld + i % cols;
    *p = from_float<T>(beta == 0.0f ? 0.0f : __fmul_rn(beta, to_float(*p)));
  }
}

template <int N, typename Op, class L>
void elementwise_launch(L& launch, int sm_count, int64_t n, const Op& op, const char* name) {
  if (n == 0) return;
  launch(name, elementwise_kernel<N, Op>,
         grid_blocks((n + N - 1) / N, kElementwiseThreads, 16LL * sm_count), kElementwiseThreads, 0,
         n, op);
}

template <typename T, class L>
void swiglu_forward_as(L& launch, int sm_count, void* h, const void* g, const void* u, int64_t n) {
  const SwigluForward<T> op{static_cast<T*>(h), static_cast<const T*>(g), static_cast<const T*>(u)};
  if (all_aligned({h, g, u}, 16)) {
    return elementwise_launch<16 / sizeof(T)>(launch, sm_count, n, op, "swiglu_forward");
  }
  elementwise_launch<1>(launch, sm_count, n, op, "swiglu_forward");
}

template <typename T, class L>
void swiglu_backward_as(L& launch, int sm_count, void* dg, void* du, const void* dh, const void* g,
                        const void* u, int64_t n) {
  const SwigluBackward<T> op{static_cast<T*>(dg), static_cast<T*>(du), static_cast<const T*>(dh),
                             static_cast<const T*>(g), static_cast<const T*>(u)};
  if (all_aligned({dg, du, dh, g, u}, 16)) {
    return elementwise_launch<16 / sizeof(T)>(launch, sm_count, n, op, "swiglu_backward");
  }
  elementwise_launch<1>(launch, sm_count, n, op, "swiglu_backward");
}

template <typename T, class L>
void axpy_as(L& launch, int sm_count, void* y, const void* x, float alpha, int64_t n) {
  const Axpy<T> op{static_cast<T*>(y), static_cast<const T*>(x), alpha};
  if (all_aligned({y, x}, 16)) {
    return elementwise_launch<16 / sizeof(T)>(launch, sm_count, n, op, "axpy");
  }
  elementwise_launch<1>(launch, sm_count, n, op, "axpy");
}

// Packs of 4: 16 bytes of f32, 8 of bf16.
template <typename D, typename S, class L>
void convert_as(L& launch, int sm_count, void* dst, const void* src, int64_t n) {
  const Convert<D, S> op{static_cast<D*>(dst), static_cast<const S*>(src)};
  if (is_aligned(dst, 4 * sizeof(D)) && is_aligned(src, 4 * sizeof(S))) {
    return elementwise_launch<4>(launch, sm_count, n, op, "convert");
  }
  elementwise_launch<1>(launch, sm_count, n, op, "convert");
}

template <typename W, bool kCopy, class L>
void adamw_as(L& launch, int sm_count, float* param, const float* grad, float* m, float* v,
              int64_t n, const AdamWConsts& c, void* copy) {
  const AdamW<W, kCopy> op{param, grad, m, v, static_cast<W*>(copy), c};
  const bool copy_ok = !kCopy || is_aligned(copy, 4 * sizeof(W));
  if (copy_ok && all_aligned({param, grad, m, v}, 16)) {
    return elementwise_launch<4>(launch, sm_count, n, op, "adamw");
  }
  elementwise_launch<1>(launch, sm_count, n, op, "adamw");
}

// Blocks of the sum of squares' first kernel (its partial sums): a fixed function of n.
inline int64_t sum_squares_grid(int sm_count, int64_t n) {
  return std::clamp<int64_t>((n + 2047) / 2048, 1, 4 * static_cast<int64_t>(sm_count));
}

// partial: sum_squares_grid(sm_count, n) doubles; *out (device) receives the sum.
template <typename T, class L>
void sum_squares_as(L& launch, int sm_count, const void* x, int64_t n, double* partial,
                    double* out) {
  const int64_t blocks = sum_squares_grid(sm_count, n);
  const T* xt = static_cast<const T*>(x);
  if (is_aligned(x, 16)) {
    launch("sum_squares", sum_squares_kernel<T, 16 / sizeof(T)>, static_cast<unsigned>(blocks),
           kElementwiseThreads, 0, xt, n, partial);
  } else {
    launch("sum_squares", sum_squares_kernel<T, 1>, static_cast<unsigned>(blocks),
           kElementwiseThreads, 0, xt, n, partial);
  }
  launch("sum_squares (block sums)", sum_partials_kernel, 1u, kElementwiseThreads, 0,
         static_cast<const double*>(partial), blocks, out);
}

template <typename T, class L>
void scale_matrix_as(L& launch, int sm_count, void* c, int64_t rows, int64_t cols, int64_t ld,
                     float beta) {
  launch("gemm (C = beta * C for K = 0)", scale_matrix_kernel<T>,
         grid_blocks(rows * cols, kElementwiseThreads, 16LL * sm_count), kElementwiseThreads, 0,
         static_cast<T*>(c), rows, cols, ld, beta);
}

template <class L>
void swiglu_forward_run(L& launch, int sm_count, Elem t, void* h, const void* g, const void* u,
                        int64_t n) {
  if (t == Elem::kF32) return swiglu_forward_as<float>(launch, sm_count, h, g, u, n);
  swiglu_forward_as<Bf16>(launch, sm_count, h, g, u, n);
}

template <class L>
void swiglu_backward_run(L& launch, int sm_count, Elem t, void* dg, void* du, const void* dh,
                         const void* g, const void* u, int64_t n) {
  if (t == Elem::kF32) return swiglu_backward_as<float>(launch, sm_count, dg, du, dh, g, u, n);
  swiglu_backward_as<Bf16>(launch, sm_count, dg, du, dh, g, u, n);
}

template <class L>
void axpy_run(L& launch, int sm_count, Elem t, void* y, const void* x, float alpha, int64_t n) {
  if (t == Elem::kF32) return axpy_as<float>(launch, sm_count, y, x, alpha, n);
  axpy_as<Bf16>(launch, sm_count, y, x, alpha, n);
}

// Different types only (the caller copies same types).
template <class L>
void convert_run(L& launch, int sm_count, Elem dst_t, void* dst, Elem src_t, const void* src,
                 int64_t n) {
  if (dst_t == Elem::kBF16 && src_t == Elem::kF32) {
    return convert_as<Bf16, float>(launch, sm_count, dst, src, n);
  }
  if (dst_t == Elem::kF32 && src_t == Elem::kBF16) {
    return convert_as<float, Bf16>(launch, sm_count, dst, src, n);
  }
}

template <class L>
void sum_squares_run(L& launch, int sm_count, Elem t, const void* x, int64_t n, double* partial,
                     double* out) {
  if (t == Elem::kF32) return sum_squares_as<float>(launch, sm_count, x, n, partial, out);
  sum_squares_as<Bf16>(launch, sm_count, x, n, partial, out);
}

template <class L>
void adamw_run(L& launch, int sm_count, float* param, const float* grad, float* m, float* v,
               int64_t n, const AdamWConsts& c, Elem copy_t, void* copy) {
  if (!copy) return adamw_as<float, false>(launch, sm_count, param, grad, m, v, n, c, nullptr);
  if (copy_t == Elem::kF32) {
    return adamw_as<float, true>(launch, sm_count, param, grad, m, v, n, c, copy);
  }
  adamw_as<Bf16, true>(launch, sm_count, param, grad, m, v, n, c, copy);
}

template <class L>
void scale_matrix_run(L& launch, int sm_count, Elem t, void* c, int64_t rows, int64_t cols,
                      int64_t ld, float beta) {
  if (rows == 0 || cols == 0) return;
  if (t == Elem::kF32) return scale_matrix_as<float>(launch, sm_count, c, rows, cols, ld, beta);
  scale_matrix_as<Bf16>(launch, sm_count, c, rows, cols, ld, beta);
}

}  // namespace
}  // namespace hp::cuda
