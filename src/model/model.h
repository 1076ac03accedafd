// The LLaMA-style model as parts (embed, pre:l, attn:l, post:l, head) with explicit forward,
// backward-for-inputs and backward-for-weights, run one schedule compute op at a time against a
// ValueStore. Values, stash and recomputation follow schedule/values.h (docs/memory.md);
// docs/model.md explains the parts. Not here: communication (runtime), the optimizer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
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

// One micro-batch of data. Rows are sequences: token t = r * seq + i.
struct Batch {
  const int32_t* tokens = nullptr;   // (batch * seq) inputs, read by embed
  const int32_t* targets = nullptr;  // (batch * seq) next tokens, read by head
  int64_t batch = 1, seq = 1;
  // The head's loss and gradients are scaled by this: 1 / (number of target tokens of the whole
  // step) makes the summed op losses the step's mean loss and the gradients its gradient.
  double loss_scale = 1.0;
  int64_t tokens_count() const { return batch * seq; }
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

template <typename T>
class ModelT {
 public:
  // Keeps references to kernels and params (both must outlive the model).
  ModelT(const ModelConfig& cfg, KernelsT<T>& kernels, ParamsT<T>& params, ModelOptions opt = {});
  ~ModelT();

  // Runs one compute op for micro-batch op.mb; ctx[i] describes op.parts[i].
  //   F: the inputs of the first part (values.h forward_inputs) must be live in the store (embed
  //      reads mb.tokens instead); runs the parts in order; releases the op's inputs, marks each
  //      part's stash, leaves the last part's outputs live for the next op or a send.
  //   B / I: the backward inputs of the op's first part (in backward order) must be live
  //      (head needs none); recomputes op.recompute parts, backpropagates, unmarks the forward
  //      stash, leaves the gradient outputs live. I marks values.h's weight_stash instead of
  //      computing weight gradients; W consumes it. Parameter gradients accumulate (+=) into the
  //      gradient arena; in weights mode, attn away from pre:l reads W:l from the store and
  //      leaves dW:l live, and pre:l adds a received dW:l into its W_qkv gradient.
  // Returns this op's share of the loss (sum of token losses * loss_scale) for an F op that runs
  // the head, else 0.
  double run(const ComputeOp& op, const std::vector<PartContext>& ctx, ValueStoreT<T>& store,
             const Batch& mb);

  const ModelConfig& config() const { return cfg_; }
  ParamsT<T>& params() { return params_; }
  KernelsT<T>& kernels() { return kernels_; }
  const ModelOptions& options() const { return opt_; }
  // Bytes of transient workspace (not values) reserved so far; it only grows, to the largest op.
  int64_t workspace_bytes() const;
  // When set, the head's forward also writes its logits to `out`: (tokens, vocab), or with
  // last_only (batch, vocab) for the last position of each row. nullptr turns it off.
  void set_logits_sink(T* out, bool last_only);

 private:
  struct Impl;
  const ModelConfig cfg_;
  KernelsT<T>& kernels_;
  ParamsT<T>& params_;
  ModelOptions opt_;
  std::unique_ptr<Impl> impl_;
};

using Model = ModelT<float>;

// Single process, one stage: the mean loss over all batch*seq*microbatches target tokens and its
// gradient, accumulated (+=) into model.params().grads() (zero them first for a fresh gradient).
// tokens/targets hold micro-batch j, row r, position i at ((j * batch + r) * seq + i). Runs
// micro-batch j = 0..M-1 in turn: F ops [embed] [pre:l attn:l post:l].. [head], then their B ops in
// reverse (one op per layer, so recomputation works layer by layer). Any split of the model into
// ops gives bitwise the same result.
struct StepOptions {
  Recompute recompute = Recompute::kNone;
  TransferMode transfer = TransferMode::kWeights;
};
template <typename T>
double loss_and_grads(ModelT<T>& model, const int32_t* tokens, const int32_t* targets,
                      int64_t batch, int64_t seq, int microbatches, StepOptions opt = {},
                      ValueStoreT<T>* store = nullptr);

// Forward only (evaluation): the mean token loss over `batch` rows of `seq` tokens; keeps nothing.
template <typename T>
double eval_loss(ModelT<T>& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq);

// Forward only: logits (batch * seq, vocab) of every position, or with last_only (batch, vocab)
// of the last position of each row. For sampling.
template <typename T>
void forward_logits(ModelT<T>& model, const int32_t* tokens, int64_t batch, int64_t seq, T* out,
                    bool last_only);

}  // namespace hp
