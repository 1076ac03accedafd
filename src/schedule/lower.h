// The lowering pass: adds the communication of a compute-only schedule. Whenever a value produced
// by a part on one stage is consumed by a part on another stage (forward activations, backward
// gradients; in HelixPipe's weights mode also W:l forward and dW:l back), lower() adds a Message
// and the four lowered ops that move it: send.start / send.wait on the producer's stage,
// recv.start / recv.wait on the consumer's stage.
//
// Placement of the communication ops on a stage (the step / batched-exchange form of docs/design.md
// section 6; for schedules without folds every op is its own fold-0 step):
//   - right after a compute op: its send.starts, then the recv.starts of every message the *next
//     op of the same fold* consumes (one batched exchange per step);
//   - right before a compute op: the recv.waits of the messages it consumes;
//   - the send.waits of an op's messages come right after the compute of the next op of the same
//     fold (so at most one exchange per fold is in flight), or at the end of the program.
//     Where that would block forever under rendezvous semantics (a sender running several ops
//     ahead of its receiver, as in interleaved 1F1B's warm-up), the wait moves later, one op at a
//     time, until a walk of the programs under rendezvous FIFO matching (walker.h) finishes.
// Receives on a link (src, dst) are posted in the order the sender starts its sends, so a FIFO
// link (the simulator's model) never blocks on a later message.
//
// Message ids are 0..N-1 in a deterministic order (stage, then op, then part). Message::tag is the
// message's position on its (src, dst) link; use it as the MPI tag (it stays in the hundreds for
// realistic sizes, far below the 32767 every MPI guarantees). Ids can exceed 32767 for very large
// schedules (p=8, m=64, L=64 has ~16k), so do not use them as tags directly.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/ir.h"
#include "schedule/values.h"
#include "util/model_config.h"

namespace hp {

// Where one (part, micro-batch, phase) runs.
struct PartLocation {
  int stage = -1;  // -1: nowhere
  int op = -1;     // index into stages[stage].ops
  int pos = -1;    // index into that op's parts
  bool found() const { return stage >= 0; }
};

// Lookup of where every part of every micro-batch runs: its forward (F), its input backward (the
// B or I op) and its weight backward (the W op, or the B op again). Parts or micro-batches out of
// the schedule's range are ignored (the validator reports them); a repeated entry keeps the first.
class ScheduleIndex {
 public:
  explicit ScheduleIndex(const Schedule& s);

  const PartLocation& forward(Part part, int mb) const { return at(fwd_, part, mb); }
  const PartLocation& backward(Part part, int mb) const { return at(bwd_, part, mb); }
  const PartLocation& weight(Part part, int mb) const { return at(wgt_, part, mb); }

  // attn:l of micro-batch mb runs on another stage than pre:l (false when either is missing).
  bool attn_remote(int layer, int mb) const;

  // The PartContext of part k of op `op` on `stage` (policy, transfer, first_in_op,
  // attn_remote, feeds_next_in_op). The model and the executor use it to decide what a part keeps
  // and ships; the validator uses it for the stash and the lowering for message contents.
  // For B/I/W ops first_in_op / feeds_next_in_op follow the op's own (descending) order; what a
  // part stashed was decided by its forward, so use forward_context() to know what to free.
  PartContext context(int stage, int op, int k) const;
  // The context of (part, mb) in the op that runs its forward (default context if none does).
  PartContext forward_context(Part part, int mb) const;

 private:
  const PartLocation& at(const std::vector<PartLocation>& v, Part part, int mb) const;
  const Schedule* s_;
  int parts_ = 0;  // 3L + 2
  std::vector<PartLocation> fwd_, bwd_, wgt_;
};

// Convenience: ScheduleIndex(s).context(stage, op, k). Builds the index each call; use a
// ScheduleIndex when asking for many parts.
PartContext part_context(const Schedule& s, int stage, int op, int k);

// Adds messages and lowered ops (replacing any earlier lowering). Message bytes are the sizes of
// the values for micro-batches of `tokens_per_mb` = b*s tokens under `cfg` at `eb` bytes per
// element (fp32 by default); 0 without a config.
// Throws hp::Error when a part's producer or consumer runs nowhere (validate first for a full
// report), or for a split backward (I/W) of attention away from pre:l in weights mode (dW:l would
// have no op to travel with).
void lower(Schedule& s, const ModelConfig* cfg = nullptr, int64_t tokens_per_mb = 0,
           ElemBytes eb = {});

// The last step of lower(), on its own for hand-edited programs: walks the lowered programs under
// rendezvous FIFO matching (walker.h); whenever every unfinished stage is held, each stage held at
// a send.wait moves that wait past its next start or compute op (it frees the buffer later but lets
// the stage go on). Stops when every stage finishes or nothing moves (a real deadlock: the
// validator reports it).
void defer_blocking_send_waits(Schedule& s);

}  // namespace hp
