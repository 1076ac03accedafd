// Hugging Face Llama layout: config keys and tensor names.
#include "runtime/model_io.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "util/error.h"

namespace hp {

int64_t HfTensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<HfTensorSpec> hf_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden, kv = c.kv_dim(), f = c.intermediate;
  std::vector<HfTensorSpec> v;
  v.push_back({"model.embed_tokens.weight", {c.vocab, h}});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    v.push_back({p + "input_layernorm.weight", {h}});
    v.push_back({p + "self_attn.q_proj.weight", {h, h}});
    v.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    v.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    v.push_back({p + "self_attn.o_proj.weight", {h, h}});
    v.push_back({p + "post_attention_layernorm.weight", {h}});
    v.push_back({p + "mlp.gate_proj.weight", {f, h}});
    v.push_back({p + "mlp.up_proj.weight", {f, h}});
    v.push_back({p + "mlp.down_proj.weight", {h, f}});
  }
  v.push_back({"model.norm.weight", {h}});
  if (!c.tie_embeddings) v.push_back({"lm_head.weight", {c.vocab, h}});
  return v;
}

nlohmann::json model_config_to_hf(const ModelConfig& c) {
  c.validate();
  return c.to_hf_json();
}

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: config.json must be a JSON object", where);
  if (j.contains("model_type")) {
    HP_CHECK(j["model_type"].is_string() && j["model_type"].get<std::string>() == "llama",
             "{}: model_type is {}, but helixpipe only reads Llama models (model_type \"llama\")",
             where, j["model_type"].dump());
  }
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                          "num_hidden_layers", "vocab_size"}) {
    HP_CHECK(j.contains(key),
             "{}: '{}' is missing; a checkpoint's config.json must state the model's sizes (write "
             "it with 'helixpipe init')",
             where, key);
  }
  nlohmann::json full = j;
  // transformers' LlamaConfig defaults for keys it may leave out.
  if (!full.contains("rms_norm_eps")) full["rms_norm_eps"] = 1e-6;
  if (!full.contains("max_position_embeddings")) full["max_position_embeddings"] = 2048;
  if (!full.contains("tie_word_embeddings")) full["tie_word_embeddings"] = false;
  for (const char* key : {"hidden_act"}) {
    if (full.contains(key)) {
      HP_CHECK(full[key] == "silu", "{}: hidden_act {} is not supported (helixpipe's MLP is SwiGLU "
                                    "with silu)",
               where, full[key].dump());
    }
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (full.contains(key)) {
      HP_CHECK(full[key] == false, "{}: {} = true is not supported (helixpipe's layers have no "
                                   "biases)",
               where, key);
    }
  }
  return ModelConfig::from_json(full, where);
}

namespace {

bool ignorable_extra(const std::string& name) {
  // Old transformers versions saved the rotary frequencies as a buffer; we compute them.
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void check_finite_values(const float* v, int64_t n, const std::string& file,
                         const std::string& tensor) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      fail("'{}': tensor '{}' holds {} at element {}; the file is corrupt or was saved after "
           "training diverged: use an earlier checkpoint",
           file, tensor, v[i], i);
    }
  }
}

void check_model_safetensors(const ModelTensorFiles& file, const ModelConfig& c) {
  const std::string& path = file.path();
  const std::vector<HfTensorSpec> specs = hf_tensor_specs(c);
  std::set<std::string> expected;
  for (const HfTensorSpec& s : specs) expected.insert(s.name);
  if (c.tie_embeddings) expected.insert("lm_head.weight");  // may be present; tied wins
  std::string unknown;
  int n_unknown = 0;
  for (const StTensorInfo& t : file.tensors()) {
    if (expected.count(t.name) || ignorable_extra(t.name)) continue;
    if (n_unknown++ < 5) unknown += (unknown.empty() ? "" : ", ") + t.name;
  }
  HP_CHECK(n_unknown == 0,
           "safetensors '{}' has {} tensor(s) that a Llama model of this config does not have ({}{}); "
           "is config.json (layers {}, tie_word_embeddings {}) the one this file was saved with?",
           path, n_unknown, unknown, n_unknown > 5 ? ", ..." : "", c.layers, c.tie_embeddings);
  for (const HfTensorSpec& s : specs) {
    const StTensorInfo* t = file.find(s.name);
    HP_CHECK(t != nullptr,
             "safetensors '{}' has no tensor '{}' (expected by config.json: layers {}, "
             "tie_word_embeddings {}); the checkpoint is incomplete or belongs to another config",
             path, s.name, c.layers, c.tie_embeddings);
    HP_CHECK(t->shape == s.shape,
             "safetensors '{}': tensor '{}' has shape {} but {} was expected from config.json "
             "(hidden_size {}, intermediate_size {}, vocab_size {}, num_key_value_heads {}); is "
             "config.json the one this file was saved with?",
             path, s.name, shape_string(t->shape), shape_string(s.shape), c.hidden, c.intermediate,
             c.vocab, c.kv_heads);
  }
}

void check_model_safetensors(const std::string& path, const ModelConfig& c) {
  check_model_safetensors(ModelTensorFiles::open(path), c);
}

void load_model_safetensors(const std::string& path, const ModelConfig& c,
                            const TensorLocator& locate) {
  const ModelTensorFiles file = ModelTensorFiles::open(path);
  check_model_safetensors(file, c);
  for (const HfTensorSpec& s : hf_tensor_specs(c)) {
    float* dst = locate(s.name);
    if (dst == nullptr) continue;
    file.read_f32(s.name, s.shape, dst);  // checks shape and dtype
    check_finite_values(dst, s.numel(), file.file_of(s.name).path(), s.name);
  }
}

std::vector<StWriteTensor> model_write_tensors(const ModelConfig& c,
                                               const ConstTensorLocator& locate) {
  std::vector<StWriteTensor> out;
  for (HfTensorSpec& s : hf_tensor_specs(c)) {
    const float* p = locate(s.name);
    HP_CHECK(p != nullptr, "internal: no memory for tensor '{}' while saving the model", s.name);
    out.push_back({std::move(s.name), StDType::kF32, std::move(s.shape), p});
  }
  return out;
}

}  // namespace hp
