// A tensor-parallel group over a Comm (comm/comm.h): the collectives of model/tensor_parallel.h as
// point-to-point messages between the group's ranks, summed on each rank in rank order. Host
// backends work on their memory directly; a device backend is staged through host memory (correct,
// not fast: a device group belongs on NCCL).
#pragma once

#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/tensor_parallel.h"

namespace hp {

class CommTpGroup : public TpGroup {
 public:
  // `comm` holds exactly the group's ranks (split_grid's tensor comm) and must outlive this.
  CommTpGroup(Comm& comm, Backend& be);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(ConstDataPtr shard, DataPtr full, int64_t n, const std::string& what) override;
  void reduce_scatter(ConstDataPtr full, DataPtr shard, int64_t n, const std::string& what) override;
  void all_reduce(DataPtr x, int64_t n, const std::string& what) override;
  double all_reduce(double x, const std::string& what) override;

 private:
  // Host views of backend memory: the pointer itself on a host backend, else a staged copy.
  const void* host_in(ConstDataPtr p, int64_t bytes, std::vector<char>& stage);
  void* host_out(DataPtr p, int64_t bytes, std::vector<char>& stage);
  void flush_out(DataPtr p, int64_t bytes, const std::vector<char>& stage);
  std::string label(const std::string& what) const;
  void count(int64_t bytes_sent, double t0);  // one collective finished: add it to stats_

  Comm& comm_;
  std::vector<char> in_stage_, out_stage_, recv_;
};

}  // namespace hp
