// The model's parts: forward, backward-for-inputs and backward-for-weights of embed, pre, attn,
// post and head, driven one compute op at a time (see model.h).
#include "model/model.h"

#include <algorithm>

#include "util/error.h"

namespace hp {

std::vector<Value> part_stash(const ComputeOp& op, size_t index, const PartContext& ctx,
                              int layers) {
  const Part part = op.parts.at(index);
  std::vector<Value> s = forward_stash(part, ctx, layers);
  if (part.kind == PartKind::kAttn && ctx.first_in_op && ctx.policy != Recompute::kNone) {
    // post:l follows attn:l in this op (model order) and its recomputation needs X:l.
    const bool post_follows = std::find(op.parts.begin(), op.parts.end(),
                                        Part::post(part.layer)) != op.parts.end();
    const Value x{ValueKind::kX, part.layer};
    if (post_follows && std::find(s.begin(), s.end(), x) == s.end()) s.push_back(x);
  }
  return s;
}

std::vector<PartContext> local_contexts(const ComputeOp& op, Recompute policy,
                                        TransferMode transfer) {
  std::vector<PartContext> ctx(op.parts.size());
  if (op.parts.empty()) return ctx;
  Part first = *std::min_element(op.parts.begin(), op.parts.end());
  for (size_t i = 0; i < op.parts.size(); ++i) {
    ctx[i].policy = policy;
    ctx[i].transfer = transfer;
    ctx[i].first_in_op = op.parts[i] == first;
    ctx[i].attn_remote = false;
  }
  return ctx;
}

template <typename T>
struct ModelT<T>::Impl {};

template <typename T>
ModelT<T>::ModelT(const ModelConfig& cfg, Kernels<T>& kernels, ParamsT<T>& params, ModelOptions opt)
    : cfg_(cfg), kernels_(kernels), params_(params), opt_(opt), impl_(std::make_unique<Impl>()) {}

template <typename T>
ModelT<T>::~ModelT() = default;

template <typename T>
double ModelT<T>::run(const ComputeOp& op, const std::vector<PartContext>& ctx,
                      ValueStoreT<T>& store, const Batch& mb) {
  fail("Model::run: not implemented yet");
}

template <typename T>
int64_t ModelT<T>::workspace_bytes() const {
  return 0;
}

template <typename T>
double loss_and_grads(ModelT<T>& model, const int32_t* tokens, const int32_t* targets,
                      int64_t batch, int64_t seq, int microbatches, StepOptions opt,
                      ValueStoreT<T>* store) {
  fail("loss_and_grads: not implemented yet");
}

template <typename T>
double eval_loss(ModelT<T>& model, const int32_t* tokens, const int32_t* targets, int64_t batch,
                 int64_t seq) {
  fail("eval_loss: not implemented yet");
}

template <typename T>
void forward_logits(ModelT<T>& model, const int32_t* tokens, int64_t batch, int64_t seq, T* out,
                    bool last_only) {
  fail("forward_logits: not implemented yet");
}

#define HP_INSTANTIATE(T)                                                                         \
  template class ModelT<T>;                                                                       \
  template double loss_and_grads<T>(ModelT<T>&, const int32_t*, const int32_t*, int64_t, int64_t, \
                                    int, StepOptions, ValueStoreT<T>*);                           \
  template double eval_loss<T>(ModelT<T>&, const int32_t*, const int32_t*, int64_t, int64_t);     \
  template void forward_logits<T>(ModelT<T>&, const int32_t*, int64_t, int64_t, T*, bool);
HP_INSTANTIATE(float)
HP_INSTANTIATE(double)

}  // namespace hp
