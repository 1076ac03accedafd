// The staging buffers of a tensor-parallel group and the reduction of the replicated gradients.
#include "model/tensor_parallel.h"

#include <algorithm>

#include "util/error.h"

namespace hp {

DataPtr TpGroup::staging(int slot, DType t, int64_t elems) {
  HP_CHECK(slot >= 0 && slot < kStagingSlots, "internal: tensor-parallel staging slot {}", slot);
  Buffer& b = staging_[static_cast<size_t>(slot)];
  if (b.dtype() != t || b.elems() < elems) b = Buffer(be_, t, std::max(elems, b.elems()));
  return b.ptr();
}

void reduce_replicated_grads(Params& params, TpGroup& tp) {
  HP_CHECK(params.tp() == tp.shard(),
           "reduce_replicated_grads: the parameters are tensor-parallel rank {} of {}, the group "
           "rank {} of {}",
           params.tp().rank, params.tp().size, tp.rank(), tp.size());
  if (tp.size() == 1) return;
  // The replicated tensors (the RMSNorm gains) lie in runs in the arena: one collective per
  // run of neighbours.
  const std::vector<ParamTensor>& ts = params.tensors();
  for (size_t i = 0; i < ts.size();) {
    if (ts[i].split_dim >= 0) {
      ++i;
      continue;
    }
    size_t j = i;
    int64_t n = 0;
    while (j < ts.size() && ts[j].split_dim < 0 && ts[j].offset == ts[i].offset + n) n += ts[j++].numel;
    tp.all_reduce(params.grads().at(ts[i].offset), n, "all-reduce of the gradient of " + ts[i].name);
    i = j;
  }
}

}  // namespace hp
