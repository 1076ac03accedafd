// Parameter layout (Hugging Face names), per-name seeded initialization, slot lookup.
#include "model/params.h"

#include <algorithm>
#include <new>

#include "util/error.h"
#include "util/rng.h"

namespace hp {

namespace {

constexpr int kSlots = 10;

// FNV-1a: a stable hash of the tensor name, mixed into the seed so every tensor has its own stream.
uint64_t name_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

const char* slot_name(Slot s) {
  switch (s) {
    case Slot::kEmbed: return "embed";
    case Slot::kNorm1: return "norm1";
    case Slot::kWqkv: return "W_qkv";
    case Slot::kWo: return "W_o";
    case Slot::kNorm2: return "norm2";
    case Slot::kGate: return "gate";
    case Slot::kUp: return "up";
    case Slot::kDown: return "down";
    case Slot::kFinalNorm: return "final norm";
    case Slot::kLmHead: return "lm_head";
  }
  return "?";
}

}  // namespace

std::vector<Part> Params::all_parts(const ModelConfig& cfg) {
  cfg.validate();  // bounds layers, so the loop below is short and its int cannot overflow
  std::vector<Part> v{Part::embed()};
  for (int l = 1; l <= static_cast<int>(cfg.layers); ++l) {
    v.push_back(Part::pre(l));
    v.push_back(Part::post(l));
  }
  v.push_back(Part::head());
  return v;
}

Params::Params(const ModelConfig& cfg, std::vector<Part> parts, Backend& be, Precision prec,
               TpShard tp)
    : cfg_(cfg), be_(&be), prec_(prec), tp_(tp) {
  cfg_.validate();
  cfg_.check_runtime_supported();  // the layers here are LLaMA-style only
  HP_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size,
           "Params: tensor-parallel rank {} of a group of {} is out of range", tp.rank, tp.size);
  check_tensor_parallel(cfg_, tp.size);
  HP_CHECK(be.kernels().supports(prec), "Params: backend {} does not support precision {}",
           be.name(), prec.name());
  const int L = static_cast<int>(cfg_.layers);
  for (const Part& p : parts) {
    HP_CHECK(p.kind == PartKind::kEmbed || p.kind == PartKind::kHead || (p.layer >= 1 && p.layer <= L),
             "Params: part {} is outside the model's {} layers", p.str(), L);
    if (!p.has_params()) continue;
    if (std::find(parts_.begin(), parts_.end(), p) == parts_.end()) parts_.push_back(p);
  }
  std::sort(parts_.begin(), parts_.end());
  if (cfg_.tie_embeddings && owns(Part::head())) {
    HP_CHECK(owns(Part::embed()),
             "Params: the model ties lm_head to the embedding table, but this stage holds the head "
             "without embed; place embed and head on the same stage (HelixPipe does) or use an "
             "untied model (tie_word_embeddings = false)");
  }
  slot_index_.assign(static_cast<size_t>(kSlots) * (L + 1), -1);
  const int64_t h = cfg_.hidden, kv = cfg_.kv_dim(), f = cfg_.intermediate, V = cfg_.vocab;
  int64_t off = 0;
  // split: -1 whole, 0 a block of rows, 1 a block of columns (TpShard).
  auto add = [&](Part p, Slot s, int layer, std::string name, std::vector<int64_t> shape,
                 int split = -1, bool mark_slot = true) {
    ParamTensor t;
    t.name = std::move(name);
    t.full_shape = shape;
    t.split_dim = tp.size > 1 ? split : -1;
    if (t.split_dim >= 0) shape[static_cast<size_t>(t.split_dim)] /= tp.size;
    t.shape = std::move(shape);
    t.numel = 1;
    for (int64_t d : t.shape) t.numel *= d;
    t.offset = off;
    t.part = p;
    t.decay = t.shape.size() >= 2;
    if (mark_slot) slot_index_[static_cast<size_t>(s) * (L + 1) + layer] = off;
    off += t.numel;
    tensors_.push_back(std::move(t));
  };
  for (const Part& p : parts_) {
    const int l = p.layer;
    const std::string pre = "model.layers." + std::to_string(l - 1) + ".";
    switch (p.kind) {
      case PartKind::kEmbed: add(p, Slot::kEmbed, 0, "model.embed_tokens.weight", {V, h}, 0); break;
      case PartKind::kPre:
        add(p, Slot::kNorm1, l, pre + "input_layernorm.weight", {h});
        add(p, Slot::kWqkv, l, pre + "self_attn.q_proj.weight", {h, h}, 0);
        add(p, Slot::kWqkv, l, pre + "self_attn.k_proj.weight", {kv, h}, 0, false);
        add(p, Slot::kWqkv, l, pre + "self_attn.v_proj.weight", {kv, h}, 0, false);
        break;
      case PartKind::kPost:
        add(p, Slot::kWo, l, pre + "self_attn.o_proj.weight", {h, h}, 1);
        add(p, Slot::kNorm2, l, pre + "post_attention_layernorm.weight", {h});
        add(p, Slot::kGate, l, pre + "mlp.gate_proj.weight", {f, h}, 0);
        add(p, Slot::kUp, l, pre + "mlp.up_proj.weight", {f, h}, 0);
        add(p, Slot::kDown, l, pre + "mlp.down_proj.weight", {h, f}, 1);
        break;
      case PartKind::kHead:
        add(p, Slot::kFinalNorm, 0, "model.norm.weight", {h});
        if (!cfg_.tie_embeddings) add(p, Slot::kLmHead, 0, "lm_head.weight", {V, h}, 0);
        break;
      case PartKind::kAttn: break;
    }
  }
  size_ = off;
  try {
    data_ = Buffer(be, prec_.master, size_);
    grad_ = Buffer(be, prec_.master, size_);
    if (prec_.weight_copy()) copy_ = Buffer(be, prec_.compute, size_);
  } catch (const std::bad_alloc&) {
    const double gib = static_cast<double>(size_) *
                       (2.0 * dtype_bytes(prec_.master) +
                        (prec_.weight_copy() ? dtype_bytes(prec_.compute) : 0)) /
                       (1 << 30);
    fail("cannot allocate {:.1f} GiB for the weights and gradients of {} parameters ({} parts of "
         "model '{}') on {}; use a smaller model, more pipeline stages, or a machine with more "
         "memory",
         gib, size_, parts_.size(), cfg_.name, be.name());
  }
  if (size_ > 0) {
    be.zero(data_.data(), data_.bytes());
    be.zero(grad_.data(), grad_.bytes());
    if (copy_.data()) be.zero(copy_.data(), copy_.bytes());
  }
}

bool Params::owns(Part p) const {
  if (!p.has_params()) return false;
  return std::find(parts_.begin(), parts_.end(), p) != parts_.end();
}

const ParamTensor* Params::find(std::string_view name) const {
  for (const ParamTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamTensor& Params::tensor(std::string_view name) const {
  const ParamTensor* t = find(name);
  HP_CHECK(t, "Params: no tensor '{}' here (this stage holds {} tensors of {} parts)", name,
           tensors_.size(), parts_.size());
  return *t;
}

DataPtr Params::param(std::string_view name) const { return data().at(tensor(name).offset); }

DataPtr Params::grad(std::string_view name) const { return grads().at(tensor(name).offset); }

int64_t Params::slot_offset(Slot s, int layer) const {
  if (s == Slot::kLmHead && cfg_.tie_embeddings) s = Slot::kEmbed;
  const int L = static_cast<int>(cfg_.layers);
  HP_CHECK(layer >= 0 && layer <= L, "Params: layer {} of {} is out of range", layer, slot_name(s));
  const int64_t off = slot_index_[static_cast<size_t>(s) * (L + 1) + layer];
  HP_CHECK(off >= 0, "Params: this stage does not hold {}{} (it holds {} parts)", slot_name(s),
           layer ? " of layer " + std::to_string(layer) : std::string(), parts_.size());
  return off;
}

DataPtr Params::at(Slot s, int layer) const { return compute_data().at(slot_offset(s, layer)); }

DataPtr Params::grad_at(Slot s, int layer) const { return grads().at(slot_offset(s, layer)); }

void Params::init(uint64_t seed) {
  std::vector<double> host(static_cast<size_t>(size_));
  for (const ParamTensor& t : tensors_) {
    double* p = host.data() + t.offset;
    if (t.shape.size() == 1) {
      std::fill(p, p + t.numel, 1.0);
      continue;
    }
    Rng rng(seed * 0x9E3779B97F4A7C15ull ^ name_hash(t.name));
    if (t.split_dim < 0) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = kInitStd * rng.normal();
      continue;
    }
    std::vector<double> full(static_cast<size_t>(t.numel) * static_cast<size_t>(tp_.size));
    for (double& v : full) v = kInitStd * rng.normal();
    cut_shard(t, tp_, full.data(), p);
  }
  set_values(host);
}

void Params::zero_grad() {
  if (size_ > 0) be_->zero(grad_.data(), grad_.bytes());
}

void Params::refresh_weight_copy() {
  if (copy_.data()) be_->kernels().convert(copy_.ptr(), data_.ptr(), size_);
}

int Params::copy_from(const Params& other) {
  std::vector<double> src = other.host_values<double>();
  std::vector<double> dst = host_values<double>();
  int n = 0;
  for (const ParamTensor& t : tensors_) {
    const ParamTensor* o = other.find(t.name);
    if (!o) continue;
    if (other.tp_.size == 1 && tp_.size > 1) {  // whole tensors into this rank's blocks
      cut_shard(t, tp_, src.data() + o->offset, dst.data() + t.offset);
    } else {
      HP_CHECK(other.tp_ == tp_, "Params: cannot copy tensor-parallel rank {} of {} into rank {} of {}",
               other.tp_.rank, other.tp_.size, tp_.rank, tp_.size);
      std::copy(src.begin() + o->offset, src.begin() + o->offset + t.numel, dst.begin() + t.offset);
    }
    ++n;
  }
  set_values(dst);
  return n;
}

}  // namespace hp
