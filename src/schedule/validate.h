// The schedule validator. For any schedule (generated, or hand-written and loaded from a file) it
// checks, in this order, stopping after the first group that fails:
//   1. shape: stage count, micro-batch and layer ranges, each op a contiguous run of the model
//      order (ascending for F, descending for B/I/W), recompute lists as the policy says;
//   2. exactly once: every (part, micro-batch) has one forward and either one B or one I and one W;
//   3. ownership: a part with parameters runs on one stage for every micro-batch and phase; every
//      part's backward runs where its forward ran (the stash lives there);
//   4. order on a stage: F before its B/I, I before W, and a local producer before its consumer;
//   5. lowering: lowers a copy when the schedule is compute-only; checks every message's four ops
//      (once each, on the right stage, start before wait, after the producer, before the consumer)
//      and its contents and size against the value table;
//   6. matching: on every ordered pair of stages the receives are posted in the order the sends
//      start (count, size, order; a recv.wait without a recv.start posts where it stands);
//   7. execution: walks the lowered programs (schedule/walker.h) under rendezvous FIFO matching (a
//      transfer needs its send and its receive posted and every earlier message on its link moved;
//      a wait blocks until it moved), checking at every part that each input value of its
//      micro-batch is on the stage (dataflow over values.h). A deadlock reports each stuck stage,
//      its op and what it waits for, and a grid of the ops around it;
//   8. memory: the stash (a set of (value, micro-batch) per stage, from forward_stash/weight_stash)
//      after every compute op, and its peak per stage, in bytes for a model config.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "schedule/ir.h"
#include "schedule/values.h"
#include "util/model_config.h"

namespace hp {

struct ValidateOptions {
  const ModelConfig* model = nullptr;  // for message and stash bytes; counts only without it
  int64_t tokens_per_mb = 0;           // b*s of one micro-batch (bytes need it)
  ElemBytes elem_bytes{};              // of stashed values and messages (fp32 by default)
  // Ranks T of a tensor-parallel group per stage (docs/tensor-parallel.md): the stash and message
  // bytes are then also given per rank, each rank holding and sending its block of every value.
  int tensor_parallel = 1;
};

struct ValidationReport {
  std::vector<std::string> errors;  // each names the stage, the op and what is wrong
  std::string deadlock_grid;        // on deadlock: the ops around each stuck stage
  // Per stage: peak stash bytes (0 without a model), and the number of (value, mb) items then.
  std::vector<int64_t> peak_stash_bytes;
  std::vector<int> peak_stash_items;
  std::vector<int> peak_after_op;  // compute op after which the peak is first reached (-1: empty)
  int compute_ops = 0;
  int messages = 0;
  int64_t message_bytes = 0;
  // With tensor_parallel = T: what one rank of a group holds and sends (each message goes from a
  // rank to the same-numbered rank of the next stage's group, so this is the bytes per link).
  std::vector<int64_t> peak_stash_bytes_per_rank;
  int64_t message_bytes_per_rank = 0;

  bool ok() const { return errors.empty(); }
  // Human-readable: "ok: ..." with per-stage peaks, or every error and the grid.
  std::string text(const Schedule& s) const;
};

ValidationReport validate(const Schedule& s, const ValidateOptions& opt = {});

// One stashed value of one micro-batch.
struct StashItem {
  Value value;
  int mb = 0;
  friend bool operator==(const StashItem& a, const StashItem& b) { return a.value == b.value && a.mb == b.mb; }
  friend bool operator<(const StashItem& a, const StashItem& b) {
    return a.mb != b.mb ? a.mb < b.mb : a.value < b.value;
  }
};

// The stash of `stage` after each of its compute ops (entry i = after ops[i]), sorted. A value kept
// by two parts of the stage counts once. F adds forward_stash; B removes it; I adds weight_stash
// and removes forward_stash; W removes weight_stash. The executor compares its measured stash with
// this. A walk of the stage's program with a stash observer; requires a schedule whose shape
// checks pass (validate() first).
std::vector<std::vector<StashItem>> stash_trace(const Schedule& s, int stage);

// Bytes of a stash set for a model config.
int64_t stash_bytes(const std::vector<StashItem>& items, const ModelConfig& cfg,
                    int64_t tokens_per_mb, ElemBytes eb = {}, int tp = 1);

}  // namespace hp
