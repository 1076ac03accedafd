// The parameters of a set of model parts in one flat arena, with a twin gradient arena and named
// views under the Hugging Face Llama tensor names. Not the optimizer state (runtime/optimizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schedule/ir.h"
#include "util/model_config.h"

namespace hp {

// The kinds of parameter tensors a part owns.
//   embed: kEmbed (vocab, h)                              model.embed_tokens.weight
//   pre:l: kNorm1 (h), kWqkv (q, h) = rows q | k | v      input_layernorm, self_attn.{q,k,v}_proj
//   post:l: kWo (h, h), kNorm2 (h), kGate (f, h), kUp (f, h), kDown (h, f)
//   head: kFinalNorm (h), kLmHead (vocab, h)              model.norm.weight, lm_head.weight
enum class Slot : uint8_t { kEmbed, kNorm1, kWqkv, kWo, kNorm2, kGate, kUp, kDown, kFinalNorm, kLmHead };

// One named tensor in the arena. W_qkv is stored as three named tensors q_proj, k_proj, v_proj that
// lie back to back, so together they are the (q, h) matrix the model multiplies with.
struct ParamTensor {
  std::string name;            // Hugging Face name, layers numbered from 0
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // elements from the start of the arena
  int64_t numel = 0;
  Part part;                   // the part that owns it
  bool decay = false;          // matrices decay, norm gains do not
};

// Tied embeddings: the head multiplies with the embedding table, so a Params that holds the head
// of a tied model must also hold embed (HelixPipe puts both on stage 0; a schedule that splits them
// over two stages is refused with a message). Its checkpoint has no lm_head.weight.
template <typename T>
class ParamsT {
 public:
  // Lays out the parameters of `parts` (attention parts own none and are ignored; duplicates are
  // ignored). Arenas are zero until init() or a load writes them.
  ParamsT(const ModelConfig& cfg, std::vector<Part> parts);
  // Every part of the model with parameters: embed, pre:1, post:1, ..., head.
  static std::vector<Part> all_parts(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<Part>& parts() const { return parts_; }  // model order
  bool owns(Part p) const;

  const std::vector<ParamTensor>& tensors() const { return tensors_; }  // arena order
  const ParamTensor* find(std::string_view name) const;                 // nullptr when absent
  T* param(std::string_view name);  // throws hp::Error naming the tensor when absent
  T* grad(std::string_view name);

  T* data() { return data_.data(); }
  T* grads() { return grad_.data(); }
  const T* data() const { return data_.data(); }
  const T* grads() const { return grad_.data(); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }  // elements in each arena

  // The start of slot `s` of layer `layer` (1..L; 0 for embed/head slots) in the parameter or the
  // gradient arena. kWqkv is the (q, h) block; kLmHead is the embedding table when tied. Throws
  // when this Params does not own it.
  T* at(Slot s, int layer = 0);
  T* grad_at(Slot s, int layer = 0);

  // Deterministic initialization: each tensor from its own random stream seeded by (seed, name),
  // so a stage holding some parts gets exactly the values the whole model would have.
  // Matrices ~ N(0, 0.02^2), norm gains = 1.
  void init(uint64_t seed);
  void zero_grad();
  // Copies the values of every tensor `other` also has (by name); returns how many were copied.
  template <typename U>
  int copy_from(const ParamsT<U>& other);

 private:
  int64_t slot_offset(Slot s, int layer) const;

  ModelConfig cfg_;
  std::vector<Part> parts_;
  std::vector<ParamTensor> tensors_;
  std::vector<int64_t> slot_index_;  // (slot, layer) -> offset, -1 when not held
  std::vector<T> data_, grad_;
};

using Params = ParamsT<float>;

template <typename T>
template <typename U>
int ParamsT<T>::copy_from(const ParamsT<U>& other) {
  int n = 0;
  for (const ParamTensor& t : tensors_) {
    const ParamTensor* o = other.find(t.name);
    if (!o) continue;
    const U* src = other.data() + o->offset;
    for (int64_t i = 0; i < t.numel; ++i) data_[t.offset + i] = static_cast<T>(src[i]);
    ++n;
  }
  return n;
}

}  // namespace hp
