// Tensor + sequence parallelism as the model's parts see it (docs/tensor-parallel.md): the
// collectives of one tensor-parallel group over the backend's memory, and the step's last reduction
// (the gradients of the replicated tensors). Implementations: runtime/tp_group.h (over a Comm).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/params.h"

namespace hp {

// One rank of a group of size() ranks that split every layer Megatron-style: column-parallel
// W_qkv, gate and up, row-parallel W_o and down, and the token rows of everything between them
// (sequence parallelism). Every rank of the group calls the collectives in the same order with the
// same sizes. Sums run over the ranks in rank order, so a result does not depend on timing.
// `what` names the value for the watchdog ("all-gather of A:3").
class TpGroup {
 public:
  explicit TpGroup(Backend& be) : be_(be) {}
  virtual ~TpGroup() = default;
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  TpShard shard() const { return {rank(), size()}; }
  Backend& backend() const { return be_; }

  // full (size() * n elements) = the `shard` (n elements) of every rank, in rank order.
  virtual void all_gather(ConstDataPtr shard, DataPtr full, int64_t n, const std::string& what) = 0;
  // shard (n) = the sum over ranks of block rank() (elements [rank()*n, (rank()+1)*n)) of every
  // rank's `full` (size() * n elements). `shard` may not alias `full`.
  virtual void reduce_scatter(ConstDataPtr full, DataPtr shard, int64_t n,
                              const std::string& what) = 0;
  // x (n) = the sum over ranks of x, the same bits on every rank.
  virtual void all_reduce(DataPtr x, int64_t n, const std::string& what) = 0;
  virtual double all_reduce(double x, const std::string& what) = 0;

  // What the group's collectives cost this rank since the last reset: how many, the bytes this
  // rank sent, and the wall time from a collective's start to its result (waiting included).
  struct Stats {
    int64_t collectives = 0, bytes_sent = 0;
    double seconds = 0;
    std::vector<double> each;         // the seconds of every collective, in call order
    std::vector<int64_t> each_bytes;  // and the bytes this rank sent in it
  };
  const Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  void restore_stats(const Stats& s) { stats_ = s; }

  // Staging for gathered rows and partial sums: grow-only backend buffers, one per slot, valid
  // until the next call with the same slot.
  static constexpr int kStagingSlots = 3;
  DataPtr staging(int slot, DType t, int64_t elems);

 protected:
  Stats stats_;

 private:
  Backend& be_;
  std::array<Buffer, kStagingSlots> staging_;
};

// The gradients of the tensors every rank holds whole (the RMSNorm gains) are partial sums
// over each rank's token rows: sums them over the group (the step's last reduction, before the
// optimizer and any data-parallel reduction). A no-op for a group of one.
void reduce_replicated_grads(Params& params, TpGroup& tp);

}  // namespace hp
