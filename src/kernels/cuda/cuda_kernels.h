// CudaKernels: the Kernels interface (kernels.h) on one device and one stream. This class checks
// shapes and types (hp::Error naming the argument), keeps per-call scratch in grow-only buffers
// from its backend, and queues cuBLASLt calls or the launchers of launch.h. Made and owned by the
// CUDA backend (cuda_backend.h); supports fp32 and bf16 precision.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernels.h"

namespace hp::cuda {

class LtGemm;

// Makes `device` current for the lifetime of the guard (restores the previous one after).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_;
};

class CudaKernels final : public Kernels {
 public:
  static constexpr int64_t kGemmWorkspaceBytes = 32 << 20;

  // `backend` provides the memory and outlives this object; stream belongs to it.
  CudaKernels(Backend& backend, int device, cudaStream_t stream);
  ~CudaKernels() override;

  std::string name() const override;
  bool supports(const Precision& p) const override;

  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
            ConstDataPtr A, int64_t lda, ConstDataPtr B, int64_t ldb, double beta, DataPtr C,
            int64_t ldc) override;
  void rmsnorm_forward(DataPtr y, DataPtr rstd, ConstDataPtr x, ConstDataPtr g, int64_t rows,
                       int64_t dim, double eps) override;
  void rmsnorm_backward(DataPtr dx, DataPtr dg, ConstDataPtr dy, ConstDataPtr x, ConstDataPtr g,
                        ConstDataPtr rstd, int64_t rows, int64_t dim, bool accumulate) override;
  void rope(DataPtr x, int64_t rows, int64_t ld, int64_t seq, int64_t n_heads, int64_t head_dim,
            double theta, bool inverse) override;
  void attention_forward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                         DataPtr o, DataPtr lse) override;
  void attention_backward(const AttnShape& s, ConstDataPtr q, ConstDataPtr k, ConstDataPtr v,
                          ConstDataPtr o, ConstDataPtr dout, ConstDataPtr lse, DataPtr dq,
                          DataPtr dk, DataPtr dv) override;
  void swiglu_forward(DataPtr h, ConstDataPtr g, ConstDataPtr u, int64_t n) override;
  void swiglu_backward(DataPtr dg, DataPtr du, ConstDataPtr dh, ConstDataPtr g, ConstDataPtr u,
                       int64_t n) override;
  void cross_entropy_forward(ConstDataPtr logits, int64_t ld, const int32_t* targets, int64_t rows,
                             int64_t vocab, DataPtr lse, DataPtr loss_sum) override;
  void cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld, ConstDataPtr lse,
                              const int32_t* targets, int64_t rows, int64_t vocab,
                              double scale) override;
  void embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                         int64_t dim) override;
  void embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                          int64_t dim) override;
  void vocab_embedding_forward(DataPtr x, const int32_t* tokens, ConstDataPtr table, VocabSlice v,
                               int64_t n, int64_t dim) override;
  void vocab_embedding_backward(DataPtr dtable, const int32_t* tokens, ConstDataPtr dx,
                                VocabSlice v, int64_t n, int64_t dim) override;
  void vocab_cross_entropy_stats(ConstDataPtr logits, int64_t ld, const int32_t* targets,
                                 VocabSlice v, int64_t rows, DataPtr parts) override;
  void vocab_cross_entropy_combine(ConstDataPtr parts, int64_t nparts, int64_t rows, DataPtr lse,
                                   DataPtr loss_sum) override;
  void vocab_cross_entropy_backward(DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                                    ConstDataPtr lse, const int32_t* targets, VocabSlice v,
                                    int64_t rows, double scale) override;
  void axpy(DataPtr y, ConstDataPtr x, double alpha, int64_t n) override;
  void convert(DataPtr dst, ConstDataPtr src, int64_t n) override;
  double sum_squares(ConstDataPtr x, int64_t n) override;
  void adamw(DataPtr param, ConstDataPtr grad, DataPtr m, DataPtr v, int64_t n, double lr,
             double beta1, double beta2, double eps, double weight_decay, int64_t step,
             double grad_scale, DataPtr weight_copy) override;

  // Bad input found by kernels (launch.h's DeviceErrorRecord) reaches the host in two steps
  // around a stream synchronization: queue the copy of the record, synchronize, then check,
  // which throws hp::Error describing the first event and clears the record.
  void queue_error_fetch();
  void check_reported_errors();

  // Number of GEMM plans cached so far (one per distinct shape), and how many of them run through
  // cublasGemmEx because cuBLASLt had no algorithm (or HP_CUDA_GEMM=cublas).
  size_t gemm_plans() const;
  size_t gemm_fallback_plans() const;

 private:
  enum Slot { kNormPartial, kRowLoss, kSumPartial, kSumResult, kEmbedding, kAttention, kSlots };
  // The bodies shared by the whole-vocabulary kernels and their vocabulary-slice forms.
  void ce_backward(const char* k, DataPtr dlogits, ConstDataPtr logits, int64_t ld,
                   ConstDataPtr lse, const int32_t* targets, int64_t rows, VocabSlice v,
                   double scale);
  void embed_rows(const char* k, DataPtr x, const int32_t* tokens, ConstDataPtr table, int64_t n,
                  int64_t dim, int64_t begin, int64_t count);
  void embed_add(const char* k, DataPtr dtable, const int32_t* tokens, ConstDataPtr dx, int64_t n,
                 int64_t dim, int64_t begin, int64_t count);
  // At least `bytes` of device scratch for `slot`, kept and reused by later calls (grow-only).
  void* scratch(Slot slot, int64_t bytes);
  // The (cos, sin) table for rope covering positions [0, seq) at least.
  const float2* rope_table(int64_t seq, int64_t head_dim, double theta);
  LaunchContext ctx() const;

  Backend& backend_;
  int device_;
  cudaStream_t stream_;
  int sm_count_ = 1;
  int max_shared_bytes_ = 48 << 10;  // per block, with the opt-in
  std::string device_name_;
  Buffer gemm_workspace_;
  std::unique_ptr<LtGemm> gemm_;
  std::array<Buffer, kSlots> scratch_;
  Buffer errors_device_;  // one DeviceErrorRecord
  // Pinned host memory the device copies small results into.
  struct HostSlots {
    DeviceErrorRecord errors;
    double result;  // sum_squares
  };
  HostSlots* host_slots_ = nullptr;
  struct RopeTable {
    int64_t positions = 0;
    Buffer buffer;  // positions x head_dim/2 float2 (cos, sin)
  };
  std::map<std::pair<int64_t, double>, RopeTable> rope_tables_;  // by (head_dim, theta)
};

}  // namespace hp::cuda
