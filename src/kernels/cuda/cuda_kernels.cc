// CudaKernels (cuda_kernels.h): argument checks, scratch, rope tables, the AdamW constants, the
// bad-input record, and dispatch to cuBLASLt (cuda_gemm.h) and the launchers (launch.h).
#include "kernels/cuda/cuda_kernels.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_gemm.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/rope_angles.h"
#include "util/error.h"

namespace hp::cuda {
namespace {

Elem elem_of(DType t, const char* kernel) {
  HP_CHECK(t == DType::kF32 || t == DType::kBF16,
           "{}: {} values are not supported by the CUDA backend (it computes in f32 and bf16; "
           "f64 is for gradient checks on the reference backend)",
           kernel, dtype_name(t));
  return t == DType::kF32 ? Elem::kF32 : Elem::kBF16;
}

void expect_type(ConstDataPtr p, DType t, const char* kernel, const char* arg) {
  HP_CHECK(p.dtype == t, "{}: {} holds {} values, expected {}", kernel, arg, dtype_name(p.dtype),
           dtype_name(t));
}

void expect_ptr(const void* p, const char* kernel, const char* arg) {
  HP_CHECK(p != nullptr, "{}: {} is a null pointer", kernel, arg);
}

// Kernels that put one row per block need rows within the grid's x limit.
void expect_grid_rows(int64_t rows, const char* kernel) {
  HP_CHECK(rows <= INT_MAX, "{}: {} rows exceed the CUDA grid limit ({}); split the call", kernel,
           rows, INT_MAX);
}

cudaDataType_t cuda_type(DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

}  // namespace

DeviceGuard::DeviceGuard(int device) : device_(device) {
  HP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) HP_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

CudaKernels::CudaKernels(Backend& backend, int device, cudaStream_t stream)
    : backend_(backend), device_(device), stream_(stream) {
  DeviceGuard guard(device_);
  HP_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  HP_CUDA_CHECK(
      cudaDeviceGetAttribute(&max_shared_bytes_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
  cudaDeviceProp prop{};
  HP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  gemm_workspace_ = Buffer(backend_, DType::kF32, kGemmWorkspaceBytes / 4);
  gemm_ = std::make_unique<LtGemm>(gemm_workspace_.data(), kGemmWorkspaceBytes);
  errors_device_ = Buffer(backend_, DType::kF32, (sizeof(DeviceErrorRecord) + 3) / 4);
  HP_CUDA_CHECK(cudaMemsetAsync(errors_device_.data(), 0, sizeof(DeviceErrorRecord), stream_));
  void* slots = nullptr;
  HP_CUDA_CHECK(cudaMallocHost(&slots, sizeof(HostSlots)));
  host_slots_ = static_cast<HostSlots*>(slots);
  *host_slots_ = HostSlots{};
}

CudaKernels::~CudaKernels() {
  try {
    DeviceGuard guard(device_);
    gemm_.reset();
    if (host_slots_) HP_CUDA_CHECK(cudaFreeHost(host_slots_));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda:%d: error while destroying the kernels: %s\n", device_, e.what());
  }
}

std::string CudaKernels::name() const { return fmt::format("cuda:{} {}", device_, device_name_); }

bool CudaKernels::supports(const Precision& p) const {
  return p.master == DType::kF32 && (p.compute == DType::kF32 || p.compute == DType::kBF16);
}

size_t CudaKernels::gemm_plans() const { return gemm_->cached_plans(); }
size_t CudaKernels::gemm_fallback_plans() const { return gemm_->fallback_plans(); }

LaunchContext CudaKernels::ctx() const {
  LaunchContext c;
  c.stream = stream_;
  c.sm_count = sm_count_;
  c.errors = static_cast<DeviceErrorRecord*>(errors_device_.data());
  return c;
}

void* CudaKernels::scratch(Slot slot, int64_t bytes) {
  Buffer& buf = scratch_[slot];
  if (buf.bytes() < bytes) {
    // Grow by half again so a slowly growing size does not reallocate every call. The old block
    // goes back to the cache; work already queued on this stream finishes with it first.
    const int64_t want = std::max(bytes, buf.bytes() + buf.bytes() / 2);
    buf.reset();
    buf = Buffer(backend_, DType::kF32, (want + 3) / 4);
  }
  return buf.data();
}

void CudaKernels::queue_error_fetch() {
  DeviceGuard guard(device_);
  HP_CUDA_CHECK(cudaMemcpyAsync(&host_slots_->errors, errors_device_.data(),
                                sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, stream_));
}

void CudaKernels::check_reported_errors() {
  const DeviceErrorRecord rec = host_slots_->errors;
  if (rec.code == 0) return;
  host_slots_->errors = DeviceErrorRecord{};
  {
    DeviceGuard guard(device_);
    HP_CUDA_CHECK(cudaMemsetAsync(errors_device_.data(), 0, sizeof(DeviceErrorRecord), stream_));
  }
  const char* when =
      "(found by a kernel queued before this synchronization; its output for that "
      "row holds NaN)";
  switch (rec.code) {
    case kErrCrossEntropyTarget:
      fail("cuda:{}: cross_entropy_forward: target {} of row {} is outside [0, {}) {}", device_,
           rec.b, rec.a, rec.c, when);
    case kErrCrossEntropyBackwardTarget:
      fail("cuda:{}: cross_entropy_backward: target {} of row {} is outside [0, {}) {}", device_,
           rec.b, rec.a, rec.c, when);
    case kErrEmbeddingToken:
      fail("cuda:{}: embedding_forward: token {} at position {} is negative {}", device_, rec.b,
           rec.a, when);
    case kErrEmbeddingBackwardToken:
      fail(
          "cuda:{}: embedding_backward: token {} at position {} is negative (its row was "
          "skipped; found by a kernel queued before this synchronization)",
          device_, rec.b, rec.a);
    default:
      fail("cuda:{}: a kernel reported an unknown error code {}", device_, rec.code);
  }
}

void CudaKernels::gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                       ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb, double beta,
                       DataPtr C, int64_t ldc) {
  HP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  HP_CHECK(A.dtype == B.dtype, "gemm: A holds {} and B {} values; they must have one type",
           dtype_name(A.dtype), dtype_name(B.dtype));
  elem_of(A.dtype, "gemm");
  const Elem c_elem = elem_of(C.dtype, "gemm");
  HP_CHECK(C.dtype == A.dtype || C.dtype == DType::kF32,
           "gemm: C holds {} values for {} inputs; C must have the inputs' type or f32",
           dtype_name(C.dtype), dtype_name(A.dtype));
  HP_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K),
           "gemm: lda={} is less than the {} columns of A{}", lda, trans_a ? M : K,
           trans_a ? " (transposed: A is K x M)" : "");
  HP_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N),
           "gemm: ldb={} is less than the {} columns of B{}", ldb, trans_b ? K : N,
           trans_b ? " (transposed: B is N x K)" : "");
  HP_CHECK(ldc >= std::max<int64_t>(1, N), "gemm: ldc={} is less than the {} columns of C", ldc, N);
  if (M == 0 || N == 0) return;
  expect_ptr(C.data, "gemm", "C");
  DeviceGuard guard(device_);
  if (K == 0) {  // empty product: C = beta * C
    scale_matrix(ctx(), c_elem, C.data, M, N, ldc, static_cast<float>(beta));
    return;
  }
  expect_ptr(A.data, "gemm", "A");
  expect_ptr(B.data, "gemm", "B");
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = M;
  g.n = N;
  g.k = K;
  g.alpha = static_cast<float>(alpha);
  g.beta = static_cast<float>(beta);
  g.a = A.data;
  g.lda = lda;
  g.b = B.data;
  g.ldb = ldb;
  g.c = C.data;
  g.ldc = ldc;
  g.ab_type = cuda_type(A.dtype);
  g.c_type = cuda_type(C.dtype);
  gemm_->run(g, stream_);
}

void CudaKernels::rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g,
                                  int64_t rows, int64_t dim, double eps) {
  const char* k = "rmsnorm_forward";
  const Elem t = elem_of(x.dtype, k);
  expect_type(y, x.dtype, k, "y");
  expect_type(g, x.dtype, k, "g");
  expect_type(rstd, DType::kF32, k, "rstd");
  HP_CHECK(rows >= 0 && dim >= 1, "{}: bad shape rows={} dim={}", k, rows, dim);
  expect_grid_rows(rows, k);
  if (rows == 0) return;
  expect_ptr(y.data, k, "y");
  expect_ptr(x.data, k, "x");
  expect_ptr(g.data, k, "g");
  expect_ptr(rstd.data, k, "rstd");
  DeviceGuard guard(device_);
  ::hp::cuda::rmsnorm_forward(ctx(), t, y.data, static_cast<float*>(rstd.data), x.data, g.data,
                              rows, dim, static_cast<float>(eps));
}

void CudaKernels::rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x,
                                   ConstDataPtr g, ConstDataPtr rstd, int64_t rows, int64_t dim,
                                   bool accumulate) {
  const char* k = "rmsnorm_backward";
  const Elem t = elem_of(x.dtype, k);
  expect_type(dx, x.dtype, k, "dx");
  expect_type(dy, x.dtype, k, "dy");
  expect_type(g, x.dtype, k, "g");
  expect_type(dg, DType::kF32, k, "dg");
  expect_type(rstd, DType::kF32, k, "rstd");
  HP_CHECK(rows >= 0 && dim >= 1, "{}: bad shape rows={} dim={}", k, rows, dim);
  const int64_t shared = dim * 4 + 1024;
  HP_CHECK(shared <= max_shared_bytes_,
           "{}: dim {} needs {} bytes of shared memory per block, this GPU allows {}", k, dim,
           shared, max_shared_bytes_);
  if (rows == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{dx.data, "dx"},
                         {dg.data, "dg"},
                         {dy.data, "dy"},
                         {x.data, "x"},
                         {g.data, "g"},
                         {rstd.data, "rstd"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  const LaunchContext c = ctx();
  const int64_t blocks = rmsnorm_backward_blocks(c, rows);
  auto* partial = static_cast<float*>(scratch(kNormPartial, blocks * dim * 4));
  ::hp::cuda::rmsnorm_backward(c, t, dx.data, static_cast<float*>(dg.data), partial, dy.data,
                               x.data, g.data, static_cast<const float*>(rstd.data), rows, dim,
                               accumulate);
}

const float2* CudaKernels::rope_table(int64_t seq, int64_t head_dim, double theta) {
  // One table per (head_dim, theta), grown to the longest sequence seen: row p holds the
  // (cos, sin) of position p, whatever the sequence length of the call.
  RopeTable& table = rope_tables_[{head_dim, theta}];
  if (table.positions < seq) {
    const int64_t positions = std::max(seq, 2 * table.positions);
    const int64_t half = head_dim / 2;
    std::vector<float2> host(static_cast<size_t>(positions * half));
    for (int64_t pos = 0; pos < positions; ++pos) {
      for (int64_t j = 0; j < half; ++j) {
        float2& cs = host[static_cast<size_t>(pos * half + j)];
        rope_cos_sin(pos, j, head_dim, theta, &cs.x, &cs.y);
      }
    }
    table.buffer.reset();
    table.buffer = Buffer(backend_, DType::kF32, positions * half * 2);
    backend_.upload(table.buffer.data(), host.data(), table.buffer.bytes());
    table.positions = positions;
  }
  return static_cast<const float2*>(table.buffer.data());
}

void CudaKernels::rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads,
                       int64_t head_dim, double theta, bool inverse) {
  const char* k = "rope";
  const Elem t = elem_of(x.dtype, k);
  HP_CHECK(head_dim >= 2 && head_dim % 2 == 0, "{}: head_dim {} must be even", k, head_dim);
  HP_CHECK(rows >= 0 && seq >= 1 && n_heads >= 0, "{}: bad shape rows={} seq={} n_heads={}", k,
           rows, seq, n_heads);
  HP_CHECK(ld >= n_heads * head_dim, "{}: ld={} is less than n_heads*head_dim={}", k, ld,
           n_heads * head_dim);
  if (rows == 0 || n_heads == 0) return;
  expect_ptr(x.data, k, "x");
  DeviceGuard guard(device_);
  const float2* table = rope_table(seq, head_dim, theta);
  ::hp::cuda::rope(ctx(), t, x.data, table, rows, ld, seq, n_heads, head_dim, inverse);
}

}  // namespace hp::cuda

namespace hp::cuda {
namespace {

void check_attention(const char* k, const AttnShape& s, ConstDataPtr q, ConstDataPtr kk,
                     ConstDataPtr v, ConstDataPtr o, ConstDataPtr lse) {
  elem_of(q.dtype, k);
  expect_type(kk, q.dtype, k, "k");
  expect_type(v, q.dtype, k, "v");
  expect_type(o, q.dtype, k, "o");
  expect_type(lse, DType::kF32, k, "lse");
  HP_CHECK(
      s.batch >= 1 && s.seq >= 1 && s.head_dim >= 1 && s.kv_heads >= 1 && s.heads % s.kv_heads == 0,
      "{}: bad shape batch={} seq={} heads={} kv_heads={} head_dim={} (heads must be a "
      "multiple of kv_heads)",
      k, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  HP_CHECK(s.ld_qkv >= s.heads * s.head_dim && s.ld_o >= s.heads * s.head_dim,
           "{}: strides ld_qkv={} ld_o={} are smaller than heads*head_dim={}", k, s.ld_qkv, s.ld_o,
           s.heads * s.head_dim);
  for (auto [p, name] : {std::pair<const void*, const char*>{q.data, "q"},
                         {kk.data, "k"},
                         {v.data, "v"},
                         {o.data, "o"},
                         {lse.data, "lse"}}) {
    expect_ptr(p, k, name);
  }
}

}  // namespace

void CudaKernels::attention_forward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                    ConstDataPtr v, DataPtr o, DataPtr lse) {
  check_attention("attention_forward", s, q, k, v, o, lse);
  DeviceGuard guard(device_);
  flash_attention_forward(q.dtype, s, q.data, k.data, v.data, o.data, static_cast<float*>(lse.data),
                          stream_);
  HP_CUDA_CHECK_LAUNCH("flash_attention_forward");
}

void CudaKernels::attention_backward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k,
                                     ConstDataPtr v, ConstDataPtr o, ConstDataPtr dout,
                                     ConstDataPtr lse, DataPtr dq, DataPtr dk, DataPtr dv) {
  const char* kn = "attention_backward";
  check_attention(kn, s, q, k, v, o, lse);
  expect_type(dout, q.dtype, kn, "dout");
  expect_type(dq, q.dtype, kn, "dq");
  expect_type(dk, q.dtype, kn, "dk");
  expect_type(dv, q.dtype, kn, "dv");
  for (auto [p, name] : {std::pair<const void*, const char*>{dout.data, "dout"},
                         {dq.data, "dq"},
                         {dk.data, "dk"},
                         {dv.data, "dv"}}) {
    expect_ptr(p, kn, name);
  }
  DeviceGuard guard(device_);
  const size_t bytes = flash_attention_backward_workspace(q.dtype, s);
  void* workspace = scratch(kAttention, static_cast<int64_t>(bytes));
  flash_attention_backward(q.dtype, s, q.data, k.data, v.data, o.data, dout.data,
                           static_cast<const float*>(lse.data), dq.data, dk.data, dv.data,
                           workspace, stream_);
  HP_CUDA_CHECK_LAUNCH("flash_attention_backward");
}

void CudaKernels::swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) {
  const char* k = "swiglu_forward";
  const Elem t = elem_of(g.dtype, k);
  expect_type(h, g.dtype, k, "h");
  expect_type(u, g.dtype, k, "u");
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return;
  expect_ptr(h.data, k, "h");
  expect_ptr(g.data, k, "g");
  expect_ptr(u.data, k, "u");
  DeviceGuard guard(device_);
  ::hp::cuda::swiglu_forward(ctx(), t, h.data, g.data, u.data, n);
}

void CudaKernels::swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g,
                                  ConstDataPtr u, int64_t n) {
  const char* k = "swiglu_backward";
  const Elem t = elem_of(g.dtype, k);
  expect_type(dg, g.dtype, k, "dg");
  expect_type(du, g.dtype, k, "du");
  expect_type(dh, g.dtype, k, "dh");
  expect_type(u, g.dtype, k, "u");
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{dg.data, "dg"},
                         {du.data, "du"},
                         {dh.data, "dh"},
                         {g.data, "g"},
                         {u.data, "u"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  ::hp::cuda::swiglu_backward(ctx(), t, dg.data, du.data, dh.data, g.data, u.data, n);
}

void CudaKernels::cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                        int64_t rows, int64_t vocab, DataPtr lse,
                                        DataPtr loss_sum) {
  const char* k = "cross_entropy_forward";
  const Elem t = elem_of(logits.dtype, k);
  expect_type(lse, DType::kF32, k, "lse");
  expect_type(loss_sum, DType::kF64, k, "loss_sum");
  HP_CHECK(rows >= 0 && vocab >= 1 && ld >= vocab, "{}: bad shape rows={} vocab={} ld={}", k, rows,
           vocab, ld);
  expect_grid_rows(rows, k);
  if (rows == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{logits.data, "logits"},
                         {targets, "targets"},
                         {lse.data, "lse"},
                         {loss_sum.data, "loss_sum"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  auto* row_loss = static_cast<double*>(scratch(kRowLoss, rows * 8));
  ::hp::cuda::cross_entropy_forward(ctx(), t, logits.data, ld, targets, rows, vocab,
                                    static_cast<float*>(lse.data), row_loss,
                                    static_cast<double*>(loss_sum.data));
}

void CudaKernels::cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                         ConstDataPtr lse, const int32_t* targets, int64_t rows,
                                         int64_t vocab, double scale) {
  ce_backward("cross_entropy_backward", dlogits, logits, ld, lse, targets, rows,
              VocabSlice::whole(vocab), scale);
}

void CudaKernels::vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                               ConstDataPtr lse, const int32_t* targets,
                                               VocabSlice v, int64_t rows, double scale) {
  ce_backward("vocab_cross_entropy_backward", dlogits, logits, ld, lse, targets, rows, v, scale);
}

void CudaKernels::vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld,
                                            const int32_t* targets, VocabSlice v, int64_t rows,
                                            DataPtr parts) {
  const char* k = "vocab_cross_entropy_stats";
  const Elem t = elem_of(logits.dtype, k);
  expect_type(parts, DType::kF32, k, "parts");
  HP_CHECK(rows >= 0 && v.count >= 1 && ld >= v.count && v.begin >= 0 &&
               v.begin + v.count <= v.total,
           "{}: bad shape rows={} slice [{}, {}) of {} ld={}", k, rows, v.begin,
           v.begin + v.count, v.total, ld);
  expect_grid_rows(rows, k);
  if (rows == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{logits.data, "logits"},
                         {targets, "targets"},
                         {parts.data, "parts"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  ::hp::cuda::vocab_cross_entropy_stats(ctx(), t, logits.data, ld, targets, rows, v.begin, v.count,
                                        v.total, static_cast<float*>(parts.data));
}

void CudaKernels::vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows,
                                              DataPtr lse, DataPtr loss_sum) {
  const char* k = "vocab_cross_entropy_combine";
  expect_type(parts, DType::kF32, k, "parts");
  expect_type(lse, DType::kF32, k, "lse");
  expect_type(loss_sum, DType::kF64, k, "loss_sum");
  HP_CHECK(rows >= 0 && nparts >= 1, "{}: bad shape rows={} parts={}", k, rows, nparts);
  if (rows == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{parts.data, "parts"},
                         {lse.data, "lse"},
                         {loss_sum.data, "loss_sum"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  auto* row_loss = static_cast<double*>(scratch(kRowLoss, rows * 8));
  ::hp::cuda::vocab_cross_entropy_combine(ctx(), static_cast<const float*>(parts.data), nparts,
                                          rows, static_cast<float*>(lse.data), row_loss,
                                          static_cast<double*>(loss_sum.data));
}

void CudaKernels::ce_backward(const char* k, DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                              ConstDataPtr lse, const int32_t* targets, int64_t rows,
                              VocabSlice v, double scale) {
  const int64_t vocab = v.count;
  const Elem dt = elem_of(dlogits.dtype, k);
  const Elem lt = elem_of(logits.dtype, k);
  expect_type(lse, DType::kF32, k, "lse");
  HP_CHECK(dlogits.data != logits.data || dlogits.dtype == logits.dtype,
           "{}: dlogits ({}) aliases logits ({}); in place needs one type", k,
           dtype_name(dlogits.dtype), dtype_name(logits.dtype));
  HP_CHECK(rows >= 0 && vocab >= 1 && ld >= vocab, "{}: bad shape rows={} vocab={} ld={}", k, rows,
           vocab, ld);
  expect_grid_rows(rows, k);
  if (rows == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{dlogits.data, "dlogits"},
                         {logits.data, "logits"},
                         {targets, "targets"},
                         {lse.data, "lse"}}) {
    expect_ptr(p, k, name);
  }
  DeviceGuard guard(device_);
  ::hp::cuda::cross_entropy_backward(ctx(), dt, dlogits.data, lt, logits.data, ld,
                                     static_cast<const float*>(lse.data), targets, rows, vocab,
                                     static_cast<float>(scale), v.begin, v.total);
}

void CudaKernels::embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                                    int64_t dim) {
  embed_rows("embedding_forward", x, tokens, table, n, dim, 0, INT64_MAX);
}

void CudaKernels::vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table,
                                          VocabSlice v, int64_t n, int64_t dim) {
  embed_rows("vocab_embedding_forward", x, tokens, table, n, dim, v.begin, v.count);
}

void CudaKernels::embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                     int64_t n, int64_t dim) {
  embed_add("embedding_backward", dtable, tokens, dx, n, dim, 0, INT64_MAX);
}

void CudaKernels::vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                           VocabSlice v, int64_t n, int64_t dim) {
  embed_add("vocab_embedding_backward", dtable, tokens, dx, n, dim, v.begin, v.count);
}

void CudaKernels::embed_rows(const char* k, DataPtr x, const int32_t* tokens, ConstDataPtr table,
                             int64_t n, int64_t dim, int64_t begin, int64_t count) {
  const Elem t = elem_of(table.dtype, k);
  expect_type(x, table.dtype, k, "x");
  HP_CHECK(n >= 0 && dim >= 1, "{}: bad shape n={} dim={}", k, n, dim);
  if (n == 0) return;
  expect_ptr(x.data, k, "x");
  expect_ptr(tokens, k, "tokens");
  expect_ptr(table.data, k, "table");
  DeviceGuard guard(device_);
  ::hp::cuda::embedding_forward(ctx(), t, x.data, tokens, table.data, n, dim, begin, count);
}

void CudaKernels::embed_add(const char* k, DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                            int64_t n, int64_t dim, int64_t begin, int64_t count) {
  const Elem t = elem_of(dx.dtype, k);
  expect_type(dtable, DType::kF32, k, "dtable");
  HP_CHECK(n >= 0 && dim >= 1, "{}: bad shape n={} dim={}", k, n, dim);
  HP_CHECK(n <= INT_MAX, "{}: {} tokens exceed the sort's limit of {}; split the call", k, n,
           INT_MAX);
  if (n == 0) return;
  expect_ptr(dtable.data, k, "dtable");
  expect_ptr(tokens, k, "tokens");
  expect_ptr(dx.data, k, "dx");
  DeviceGuard guard(device_);
  const size_t bytes = embedding_backward_scratch(n);
  void* work = scratch(kEmbedding, static_cast<int64_t>(bytes));
  ::hp::cuda::embedding_backward(ctx(), t, static_cast<float*>(dtable.data), tokens, dx.data, n,
                                 dim, work, bytes, begin, count);
}

void CudaKernels::axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) {
  const char* k = "axpy";
  const Elem t = elem_of(y.dtype, k);
  expect_type(x, y.dtype, k, "x");
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return;
  expect_ptr(y.data, k, "y");
  expect_ptr(x.data, k, "x");
  DeviceGuard guard(device_);
  ::hp::cuda::axpy(ctx(), t, y.data, x.data, static_cast<float>(alpha), n);
}

void CudaKernels::convert(DataPtr dst, ConstDataPtr src, int64_t n) {
  const char* k = "convert";
  const Elem dt = elem_of(dst.dtype, k);
  const Elem st = elem_of(src.dtype, k);
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return;
  expect_ptr(dst.data, k, "dst");
  expect_ptr(src.data, k, "src");
  DeviceGuard guard(device_);
  if (dt == st) {
    if (dst.data != src.data) {
      HP_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, n * dtype_bytes(dst.dtype),
                                    cudaMemcpyDeviceToDevice, stream_));
    }
    return;
  }
  ::hp::cuda::convert(ctx(), dt, dst.data, st, src.data, n);
}

double CudaKernels::sum_squares(ConstDataPtr x, int64_t n) {
  const char* k = "sum_squares";
  const Elem t = elem_of(x.dtype, k);
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return 0.0;
  expect_ptr(x.data, k, "x");
  DeviceGuard guard(device_);
  const LaunchContext c = ctx();
  auto* partial = static_cast<double*>(scratch(kSumPartial, sum_squares_blocks(c, n) * 8));
  auto* out = static_cast<double*>(scratch(kSumResult, 8));
  ::hp::cuda::sum_squares(c, t, x.data, n, partial, out);
  HP_CUDA_CHECK(
      cudaMemcpyAsync(&host_slots_->result, out, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  queue_error_fetch();
  HP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_reported_errors();
  return host_slots_->result;
}

void CudaKernels::adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n,
                        double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t step, double grad_scale, DataPtr weight_copy) {
  const char* k = "adamw";
  expect_type(param, DType::kF32, k, "param");
  expect_type(grad, DType::kF32, k, "grad");
  expect_type(m, DType::kF32, k, "m");
  expect_type(v, DType::kF32, k, "v");
  const Elem copy_t = weight_copy ? elem_of(weight_copy.dtype, k) : Elem::kF32;
  HP_CHECK(step >= 1, "{}: step {} must count from 1", k, step);
  HP_CHECK(n >= 0, "{}: negative size {}", k, n);
  if (n == 0) return;
  for (auto [p, name] : {std::pair<const void*, const char*>{param.data, "param"},
                         {grad.data, "grad"},
                         {m.data, "m"},
                         {v.data, "v"}}) {
    expect_ptr(p, k, name);
  }
  // The reference's constants, computed as reference_math.h computes them.
  HP_CHECK(step >= 1, "{}: step {} must count from 1", k, step);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  AdamWConsts c;
  c.beta1 = beta1;
  c.one_minus_beta1 = 1.0 - beta1;
  c.beta2 = beta2;
  c.one_minus_beta2 = 1.0 - beta2;
  c.shrink = 1.0 - lr * weight_decay;
  c.step_size = lr / bc1;
  c.inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  c.eps = eps;
  c.grad_scale = grad_scale;
  DeviceGuard guard(device_);
  ::hp::cuda::adamw(ctx(), static_cast<float*>(param.data), static_cast<const float*>(grad.data),
                    static_cast<float*>(m.data), static_cast<float*>(v.data), n, c, copy_t,
                    weight_copy.data);
}

}  // namespace hp::cuda
