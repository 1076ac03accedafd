// The parameters of a set of model parts in one flat arena in backend memory, with a twin gradient
// arena and named views under the Hugging Face Llama tensor names. Not the optimizer state
// (runtime/optimizer.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "schedule/ir.h"
#include "util/error.h"
#include "util/model_config.h"

namespace hp {

// Standard deviation of the normal distribution Params::init draws matrix weights from (norm gains
// start at 1). The trainer's learning-rate warnings compare step sizes with it.
inline constexpr double kInitStd = 0.02;

// The kinds of parameter tensors a part owns.
//   embed: kEmbed (vocab, h)                              model.embed_tokens.weight
//   pre:l: kNorm1 (h), kWqkv (q, h) = rows q | k | v      input_layernorm, self_attn.{q,k,v}_proj
//   post:l: kWo (h, h), kNorm2 (h), kGate (f, h), kUp (f, h), kDown (h, f)
//   head: kFinalNorm (h), kLmHead (vocab, h)              model.norm.weight, lm_head.weight
enum class Slot : uint8_t { kEmbed, kNorm1, kWqkv, kWo, kNorm2, kGate, kUp, kDown, kFinalNorm, kLmHead };

// This rank's place in a tensor-parallel group of `size` ranks (docs/tensor-parallel.md). Its
// Params hold the rows of W_qkv of heads/size query heads and kv_heads/size key/value heads, the
// matching columns of W_o, intermediate/size rows of gate and up and columns of down; everything
// else (embedding, norms, LM head) whole on every rank of the group.
struct TpShard {
  int rank = 0, size = 1;
  bool operator==(const TpShard&) const = default;
};

// One named tensor in the arena. W_qkv is stored as three named tensors q_proj, k_proj, v_proj that
// lie back to back, so together they are the (q, h) matrix the model multiplies with.
struct ParamTensor {
  std::string name;            // Hugging Face name, layers numbered from 0
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // elements from the start of the arena
  int64_t numel = 0;
  Part part;                   // the part that owns it
  bool decay = false;          // matrices decay, norm gains do not
  // Tensor parallelism: the whole tensor's shape, and which dimension this rank holds a block of
  // (block `rank` of `size` equal blocks), or -1 when it holds the whole tensor (replicated).
  std::vector<int64_t> full_shape;
  int split_dim = -1;
};

// The block of a tensor this rank holds, cut from the whole tensor's values (row-major
// full_shape), and the inverse: `block` written into its place in `full`.
template <typename T>
void cut_shard(const ParamTensor& t, const TpShard& tp, const T* full, T* block);
template <typename T>
void place_shard(const ParamTensor& t, const TpShard& tp, const T* block, T* full);

// The arenas live in a backend's memory: master weights and their gradients in the precision's
// master type, and, when Precision::weight_copy(), a compute-type copy of the weights that the
// parts read (refreshed by the optimizer's AdamW, by init() and by refresh_weight_copy()).
// Tied embeddings: the head multiplies with the embedding table, so a Params that holds the head
// of a tied model must also hold embed (HelixPipe puts both on stage 0; a schedule that splits them
// over two stages is refused with a message). Its checkpoint has no lm_head.weight.
class Params {
 public:
  // Lays out the parameters of `parts` (attention parts own none and are ignored; duplicates are
  // ignored) in `be`'s memory (which must outlive this). Arenas are zero until init() or a load
  // writes them.
  // With `tp`, the tensors are this rank's blocks (TpShard); tp.size must divide heads, kv_heads
  // and intermediate.
  Params(const ModelConfig& cfg, std::vector<Part> parts, Backend& be,
         Precision prec = Precision::fp32(), TpShard tp = {});
  // Every part of the model with parameters: embed, pre:1, post:1, ..., head.
  static std::vector<Part> all_parts(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<Part>& parts() const { return parts_; }  // model order
  const TpShard& tp() const { return tp_; }
  bool owns(Part p) const;
  Backend& backend() const { return *be_; }
  const Precision& precision() const { return prec_; }

  const std::vector<ParamTensor>& tensors() const { return tensors_; }  // arena order
  const ParamTensor* find(std::string_view name) const;                 // nullptr when absent
  const ParamTensor& tensor(std::string_view name) const;  // throws hp::Error naming it if absent
  DataPtr param(std::string_view name) const;  // master weights of a tensor (throws when absent)
  DataPtr grad(std::string_view name) const;

  DataPtr data() const { return data_.ptr(); }  // master weights, size() elements
  DataPtr grads() const { return grad_.ptr(); }
  // The weights the parts read: the compute-type copy, or the master weights without one.
  DataPtr compute_data() const { return copy_.data() ? copy_.ptr() : data_.ptr(); }
  int64_t size() const { return size_; }  // elements in each arena

  // The start of slot `s` of layer `layer` (1..L; 0 for embed/head slots) in the weights the parts
  // read (compute type) or in the gradient arena (master type). kWqkv is the (q, h) block; kLmHead
  // is the embedding table when tied. Throws when this Params does not own it.
  DataPtr at(Slot s, int layer = 0) const;
  DataPtr grad_at(Slot s, int layer = 0) const;

  // Deterministic initialization: each tensor from its own random stream seeded by (seed, name),
  // so a stage holding some parts, or a tensor-parallel rank holding blocks of them, gets exactly
  // the values the whole model would have.
  // Matrices ~ N(0, 0.02^2), norm gains = 1. Computed on the host, then uploaded.
  void init(uint64_t seed);
  void zero_grad();
  // Rewrites the compute-type copy from the master weights (no-op without a copy). Call after
  // writing master weights any way other than init(), set_values() or the optimizer.
  void refresh_weight_copy();
  // Copies the values of every tensor `other` also has (by name, converting between master
  // types, through the host); returns how many were copied. `other` holds whole tensors or the
  // same tensor-parallel blocks as this.
  int copy_from(const Params& other);

  // Host copies of a whole arena as T (the master type, or double for any master type), and an
  // arena from the host (T the master type, or double: converted); set_values refreshes the copy.
  template <typename T>
  std::vector<T> host_values() const {
    return to_host<T>(data_);
  }
  template <typename T>
  std::vector<T> host_grads() const {
    return to_host<T>(grad_);
  }
  template <typename T>
  void set_values(const std::vector<T>& host) {
    from_host(data_, host);
    refresh_weight_copy();
  }
  template <typename T>
  void set_grads(const std::vector<T>& host) {
    from_host(grad_, host);
  }

 private:
  int64_t slot_offset(Slot s, int layer) const;
  template <typename T>
  std::vector<T> to_host(const Buffer& b) const;
  template <typename T>
  void from_host(Buffer& b, const std::vector<T>& host);

  ModelConfig cfg_;
  Backend* be_;
  Precision prec_;
  TpShard tp_;
  std::vector<Part> parts_;
  std::vector<ParamTensor> tensors_;
  std::vector<int64_t> slot_index_;  // (slot, layer) -> offset, -1 when not held
  int64_t size_ = 0;
  Buffer data_, grad_, copy_;
};

template <typename T>
std::vector<T> Params::to_host(const Buffer& b) const {
  std::vector<T> out(static_cast<size_t>(size_));
  if (size_ == 0) return out;
  if (b.dtype() == dtype_of<T>()) {
    be_->download(out.data(), b.data(), b.bytes());
    return out;
  }
  HP_CHECK((std::is_same_v<T, double>) && b.dtype() == DType::kF32,
           "Params: the arena holds {} values, asked for {}", dtype_name(b.dtype()),
           dtype_name(dtype_of<T>()));
  std::vector<float> f(static_cast<size_t>(size_));
  be_->download(f.data(), b.data(), b.bytes());
  std::copy(f.begin(), f.end(), out.begin());
  return out;
}

template <typename T>
void Params::from_host(Buffer& b, const std::vector<T>& host) {
  HP_CHECK(static_cast<int64_t>(host.size()) == size_,
           "Params: {} host values for an arena of {}", host.size(), size_);
  if (size_ == 0) return;
  if (b.dtype() == dtype_of<T>()) {
    be_->upload(b.data(), host.data(), b.bytes());
    return;
  }
  HP_CHECK((std::is_same_v<T, double>) && b.dtype() == DType::kF32,
           "Params: the arena holds {} values, given {}", dtype_name(b.dtype()),
           dtype_name(dtype_of<T>()));
  const std::vector<float> f(host.begin(), host.end());
  be_->upload(b.data(), f.data(), b.bytes());
}

// Calls copy(full_offset, block_offset, n) for each contiguous run of rank tp's block of t (the
// whole tensor when t is not split): the one place that knows a block's layout.
template <typename F>
void for_each_shard_run(const ParamTensor& t, const TpShard& tp, F&& copy) {
  if (t.split_dim < 0) {
    copy(0, 0, t.numel);
    return;
  }
  const int64_t rows = t.full_shape[0], cols = t.full_shape.size() > 1 ? t.full_shape[1] : 1;
  if (t.split_dim == 0) {
    const int64_t n = rows / tp.size * cols;
    copy(tp.rank * n, 0, n);
    return;
  }
  const int64_t w = cols / tp.size;
  for (int64_t r = 0; r < rows; ++r) copy(r * cols + tp.rank * w, r * w, w);
}

template <typename T>
void cut_shard(const ParamTensor& t, const TpShard& tp, const T* full, T* block) {
  for_each_shard_run(t, tp, [&](int64_t f, int64_t b, int64_t n) {
    std::copy(full + f, full + f + n, block + b);
  });
}

template <typename T>
void place_shard(const ParamTensor& t, const TpShard& tp, const T* block, T* full) {
  for_each_shard_run(t, tp, [&](int64_t f, int64_t b, int64_t n) {
    std::copy(block + b, block + b + n, full + f);
  });
}

}  // namespace hp
