// CommTpGroup (see tp_group.h).
#include "runtime/tp_group.h"

#include <cstring>

#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

constexpr int kGatherTag = 1, kScatterTag = 2;

double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return to_float(static_cast<const bf16*>(p)[i]);
  }
  return 0;
}

// dst (n of type t) = the sum of `parts` blocks, block 0 first, each added in the accumulation
// type (f64 for f64 values, f32 otherwise: bf16 is summed in f32 and rounded once).
void sum_blocks(const std::vector<const void*>& parts, DType t, int64_t n, void* dst) {
  if (t == DType::kF64) {
    auto* out = static_cast<double*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      double acc = load(parts[0], t, i);
      for (size_t p = 1; p < parts.size(); ++p) acc += load(parts[p], t, i);
      out[i] = acc;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float acc = static_cast<float>(load(parts[0], t, i));
    for (size_t p = 1; p < parts.size(); ++p) acc += static_cast<float>(load(parts[p], t, i));
    if (t == DType::kF32) {
      static_cast<float*>(dst)[i] = acc;
    } else {
      static_cast<bf16*>(dst)[i] = to_bf16(acc);
    }
  }
}

}  // namespace

CommTpGroup::CommTpGroup(Comm& comm, Backend& be) : TpGroup(be), comm_(comm) {}

std::string CommTpGroup::label(const std::string& what) const {
  return "tensor-parallel " + what + " (rank " + std::to_string(rank()) + " of a group of " +
         std::to_string(size()) + ")";
}

const void* CommTpGroup::host_in(ConstDataPtr p, int64_t bytes, std::vector<char>& stage) {
  if (backend().device() == Device::kHost) return p.data;
  stage.resize(static_cast<size_t>(bytes));
  backend().download(stage.data(), p.data, bytes);
  return stage.data();
}

void* CommTpGroup::host_out(DataPtr p, int64_t bytes, std::vector<char>& stage) {
  if (backend().device() == Device::kHost) {
    backend().synchronize();
    return p.data;
  }
  stage.resize(static_cast<size_t>(bytes));
  return stage.data();
}

void CommTpGroup::flush_out(DataPtr p, int64_t bytes, const std::vector<char>& stage) {
  if (backend().device() != Device::kHost) backend().upload(p.data, stage.data(), bytes);
}

void CommTpGroup::all_gather(ConstDataPtr shard, DataPtr full, int64_t n, const std::string& what) {
  HP_CHECK(shard.dtype == full.dtype, "internal: {} gathers {} into {}", what,
           dtype_name(shard.dtype), dtype_name(full.dtype));
  const double t0 = now_seconds();
  const int me = rank(), p = size();
  const int64_t bytes = n * dtype_bytes(shard.dtype);
  const auto* mine = static_cast<const char*>(host_in(shard, bytes, in_stage_));
  auto* all = static_cast<char*>(host_out(full, bytes * p, out_stage_));
  std::vector<Request> rs;
  for (int r = 0; r < p; ++r) {
    if (r == me) continue;
    rs.push_back(comm_.isend(mine, bytes, r, kGatherTag));
    rs.push_back(comm_.irecv(all + r * bytes, bytes, r, kGatherTag));
  }
  std::memmove(all + me * bytes, mine, static_cast<size_t>(bytes));
  comm_.wait_all(rs, label(what));
  flush_out(full, bytes * p, out_stage_);
  count(bytes * (p - 1), t0);
}

void CommTpGroup::reduce_scatter(ConstDataPtr full, DataPtr shard, int64_t n,
                                 const std::string& what) {
  HP_CHECK(shard.dtype == full.dtype, "internal: {} sums {} into {}", what,
           dtype_name(full.dtype), dtype_name(shard.dtype));
  const double t0 = now_seconds();
  const int me = rank(), p = size();
  const int64_t bytes = n * dtype_bytes(full.dtype);
  const auto* all = static_cast<const char*>(host_in(full, bytes * p, in_stage_));
  recv_.resize(static_cast<size_t>(bytes * p));
  std::vector<Request> rs;
  std::vector<const void*> blocks(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    if (r == me) {
      blocks[static_cast<size_t>(r)] = all + me * bytes;
      continue;
    }
    rs.push_back(comm_.isend(all + r * bytes, bytes, r, kScatterTag));
    rs.push_back(comm_.irecv(recv_.data() + r * bytes, bytes, r, kScatterTag));
    blocks[static_cast<size_t>(r)] = recv_.data() + r * bytes;
  }
  comm_.wait_all(rs, label(what));
  void* out = host_out(shard, bytes, out_stage_);
  sum_blocks(blocks, full.dtype, n, out);
  flush_out(shard, bytes, out_stage_);
  count(bytes * (p - 1), t0);
}

void CommTpGroup::all_reduce(DataPtr x, int64_t n, const std::string& what) {
  const double t0 = now_seconds();
  const int p = size();
  const int64_t bytes = n * dtype_bytes(x.dtype);
  // Every rank gathers every rank's x and sums them in rank order: the same bits everywhere.
  const auto* mine = static_cast<const char*>(host_in(x, bytes, in_stage_));
  recv_.resize(static_cast<size_t>(bytes * p));
  std::vector<Request> rs;
  for (int r = 0; r < p; ++r) {
    if (r == rank()) continue;
    rs.push_back(comm_.isend(mine, bytes, r, kGatherTag));
    rs.push_back(comm_.irecv(recv_.data() + r * bytes, bytes, r, kGatherTag));
  }
  std::memcpy(recv_.data() + rank() * bytes, mine, static_cast<size_t>(bytes));
  comm_.wait_all(rs, label(what));
  std::vector<const void*> blocks;
  for (int r = 0; r < p; ++r) blocks.push_back(recv_.data() + r * bytes);
  void* out = host_out(x, bytes, out_stage_);
  sum_blocks(blocks, x.dtype, n, out);
  flush_out(x, bytes, out_stage_);
  count(bytes * (p - 1), t0);
}

double CommTpGroup::all_reduce(double x, const std::string& what) {
  (void)what;  // the Comm's own collective names itself to the watchdog
  const double t0 = now_seconds();
  comm_.allreduce_sum(&x, 1);
  count(static_cast<int64_t>(sizeof x), t0);
  return x;
}

void CommTpGroup::count(int64_t bytes_sent, double t0) {
  stats_.collectives += 1;
  stats_.bytes_sent += bytes_sent;
  const double dt = now_seconds() - t0;
  stats_.seconds += dt;
  stats_.each.push_back(dt);
  stats_.each_bytes.push_back(bytes_sent);
}

}  // namespace hp
