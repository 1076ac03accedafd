// The op runner: runs one schedule compute op at a time over the model's parts (parts.h) against a
// ValueStore, on the backend and precision of its Params. Values, stash and recomputation follow
// schedule/values.h (docs/memory.md); docs/model.md explains the parts. Not here: the parts' math
// (parts.h), communication (runtime), the optimizer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "model/params.h"
#include "model/value_store.h"
#include "schedule/ir.h"
#include "schedule/values.h"
#include "util/model_config.h"

namespace hp {

struct ModelOptions {
  // post:l runs its MLP over chunks of this many tokens (0: all tokens of the micro-batch at
  // once). Temporaries are chunk x ffn; weight gradients accumulate chunk by chunk. The stash of
  // the none policy still holds full G:l and U:l (values.h); recomputing policies never do.
  int64_t mlp_chunk = 0;
  // The head computes logits over chunks of this many tokens (0: all at once).
  int64_t head_chunk = 1024;
};

// One micro-batch of data. Rows are sequences: token t = r * seq + i. The ids live in the
// backend's memory (a TokenBuffer: checked against the vocabulary when uploaded).
struct Batch {
  const int32_t* tokens = nullptr;   // (batch * seq) inputs, read by embed
  const int32_t* targets = nullptr;  // (batch * seq) next tokens, read by head
  int64_t batch = 1, seq = 1;
  // The head's loss and gradients are scaled by this: 1 / (number of target tokens of the whole
  // step) makes the summed op losses the step's mean loss and the gradients its gradient.
  double loss_scale = 1.0;
};

// Token ids in backend memory, what Batch points to. upload() checks every id against the
// vocabulary on the host first (the model never reads backend memory on the host, so this is where
// a bad id is caught, with a message naming it), then copies them; the buffer grows to the
// largest upload and is reused.
class TokenBuffer {
 public:
  // `what` names the ids in the message ("tokens", "targets").
  void upload(Backend& be, std::span<const int32_t> ids, int64_t vocab, std::string_view what);
  const int32_t* data() const { return static_cast<const int32_t*>(buf_.data()); }
  int64_t size() const { return size_; }

 private:
  RawBuffer buf_;
  int64_t size_ = 0;
};

// What op.parts[index] keeps from its forward for its backward: values.h's forward_stash() with
// first_in_op and feeds_next_in_op judged in model order (as the F op runs), whatever order the
// given context was built in, so F and the matching B/I agree. (Attention starting an op that goes
// on to post:l keeps X:l: post's recomputation needs the residual.)
std::vector<Value> part_stash(const ComputeOp& op, size_t index, const PartContext& ctx, int layers);

// Contexts for every part of `op` run on one stage with everything local (attn_remote = false),
// in the op's execution order like lower.h's part_context(). ctx[i] describes op.parts[i].
std::vector<PartContext> local_contexts(const ComputeOp& op, Recompute policy,
                                        TransferMode transfer);

class TpGroup;

class Model {
 public:
  // Runs on params.backend() in params.precision(); keeps a reference to params (it must outlive
  // the model). With `tp` (model/tensor_parallel.h; it must outlive the model) the model is one
  // rank of a tensor-parallel group: params must be that rank's blocks (Params' TpShard), every
  // rank of the group runs the same ops in the same order, the values are the rank's shares
  // (values.h value_elems), and the gradients of the replicated tensors stay partial until
  // reduce_replicated_grads().
  explicit Model(Params& params, ModelOptions opt = {}, TpGroup* tp = nullptr);
  ~Model();

  // Runs one compute op for micro-batch op.mb; ctx[i] describes op.parts[i]. The store must be on
  // this model's backend and precision.
  //   F: the inputs of the first part (values.h forward_inputs) must be live in the store (embed
  //      reads mb.tokens instead); runs the parts in order; releases the op's inputs, marks each
  //      part's stash, leaves the last part's outputs live for the next op or a send. An F op that
  //      runs the head adds its loss (sum of token losses) into a scalar in backend memory.
  //   B / I: the backward inputs of the op's first part (in backward order) must be live
  //      (head needs none); recomputes op.recompute parts, backpropagates, unmarks the forward
  //      stash, leaves the gradient outputs live. I marks values.h's weight_stash instead of
  //      computing weight gradients; W consumes it. Parameter gradients accumulate (+=) into the
  //      gradient arena; in weights mode, attn away from pre:l reads W:l from the store and
  //      leaves dW:l live, and pre:l adds a received dW:l into its W_qkv gradient.
  void run(const ComputeOp& op, const std::vector<PartContext>& ctx, ValueStore& store,
           const Batch& mb);
  // The loss of the head F ops run since the last call: each op's sum of token losses times its
  // Batch::loss_scale, added in op order (one download for all of them). 0 when none ran. Under
  // tensor parallelism, summed over the group (a collective when head ops ran).
  double take_loss();

  const ModelConfig& config() const { return cfg_; }
  Params& params() { return params_; }
  Backend& backend() { return params_.backend(); }
  const Precision& precision() const { return params_.precision(); }
  const ModelOptions& options() const { return opt_; }
  // Bytes of transient workspace (not values) reserved so far; it only grows, to the largest op.
  int64_t workspace_bytes() const;
  // When set, the head's forward also writes its logits to `out`, host memory of f32 or f64:
  // (tokens, vocab), or with last_only (batch, vocab) for the last position of each row. A null
  // pointer turns it off.
  void set_logits_sink(DataPtr out, bool last_only);

 private:
  struct Impl;
  const ModelConfig cfg_;
  Params& params_;
  ModelOptions opt_;
  std::unique_ptr<Impl> impl_;
};

// Single process, one stage: the mean loss over all batch*seq*microbatches target tokens and its
// gradient, accumulated (+=) into model.params().grads() (zero them first for a fresh gradient).
// tokens/targets (backend memory, e.g. a TokenBuffer) hold micro-batch j, row r, position i at
// ((j * batch + r) * seq + i). Runs
// micro-batch j = 0..M-1 in turn: F ops [embed] [pre:l attn:l post:l].. [head], then their B ops in
// reverse (one op per layer, so recomputation works layer by layer). Any split of the model into
// ops gives bitwise the same result.
struct StepOptions {
  Recompute recompute = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
};
double loss_and_grads(Model& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                      int64_t seq, int microbatches, StepOptions opt = {},
                      ValueStore* store = nullptr);

// Forward only (evaluation): the mean token loss over `batch` rows of `seq` tokens (backend
// memory); keeps nothing.
double eval_loss(Model& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq);

// Forward only: logits (batch * seq, vocab) of every position, or with last_only (batch, vocab)
// of the last position of each row, into host memory `out` (f32 or f64). For sampling.
void forward_logits(Model& model, const int32_t* tokens, int64_t batch, int64_t seq, DataPtr out,
                    bool last_only);

}  // namespace hp
