// Memory figures of a schedule: the peak activation stash of each stage, from the value table
// (schedule/values.h), replayed op by op in each stage's program order.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/ir.h"
#include "schedule/values.h"
#include "util/model_config.h"

namespace hp {

// Peak stashed activation bytes of each stage of a (lowered or compute-only) schedule. Each stage
// keeps a set of (value, micro-batch): an F op adds its parts' forward_stash (the first part of an
// op keeps its inputs under full/no-attn), a B op frees it, an I op frees it and adds the part's
// weight_stash, which the W op frees. A value two parts hold is counted once. Whether attention is
// remote and whether a part feeds the next one in its op come from ScheduleIndex::context. The peak
// is taken after each op, at `eb` bytes per element of each value kind for micro-batches of
// `tokens`; with `tp` > 1, one rank's of a tensor-parallel group (value_elems' per-rank sizes; tp
// must divide the model, check_tensor_parallel).
std::vector<int64_t> stash_peaks(const Schedule& s, const ModelConfig& cfg, int64_t tokens,
                                 ElemBytes eb, int tp = 1);

// One rank's peak stash per stage in a tensor-parallel group of `tp`: stash_peaks with `tp` where
// the group divides the model (exact: the loss's log-sum-exp, for one, is whole on every rank),
// else the stage's peak / tp. Every rank of a group holds the same, so a group holds tp times it.
std::vector<int64_t> rank_stash_peaks(const Schedule& s, const ModelConfig& cfg, int64_t tokens,
                                      ElemBytes eb, int tp);

// Bytes one forward op keeps for its backward (the same count stash_peaks makes for an F op):
// `parts` run as one op in model order under `policy`, every part on this stage (no remote
// attention), each value counted once. A 1F1B stage holding k micro-batches in flight peaks at k
// times this.
int64_t op_stash_bytes(const std::vector<Part>& parts, Recompute policy, TransferMode transfer,
                       const ModelConfig& cfg, int layers, int64_t tokens, ElemBytes eb);

}  // namespace hp
