// Model files in the Hugging Face Llama layout: config.json (LlamaConfig keys) <-> ModelConfig, and
// model.safetensors (HF tensor names) <-> the model's parameters. It does not know how parameters
// are stored: callers hand it a locator that maps a tensor name to memory (or to nothing, when this
// process does not hold that tensor, e.g. a pipeline stage).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "util/model_config.h"

namespace hp {

// One tensor of the Hugging Face Llama layout.
struct HfTensorSpec {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for linear weights (PyTorch nn.Linear layout)
  int64_t numel() const;
};

// Every tensor a model with config `c` has, in file order: embed_tokens, then per layer (N from 0)
// input_layernorm, q/k/v/o_proj, post_attention_layernorm, gate/up/down_proj, then model.norm and
// lm_head (absent when tie_word_embeddings: the head uses embed_tokens).
std::vector<HfTensorSpec> hf_tensor_specs(const ModelConfig& c);

// config.json content for `c` (LlamaConfig keys plus architectures/model_type/torch_dtype).
nlohmann::json model_config_to_hf(const ModelConfig& c);

// Reads a checkpoint's config.json. Stricter than ModelConfig::from_json: the sizes must be present
// (transformers' defaults describe a 7B model, not ours), and absent optional keys take
// transformers' LlamaConfig defaults (rms_norm_eps 1e-6, max_position_embeddings 2048) so a file
// written by transformers means the same model here. `where` names the file in errors.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where);

// Memory of tensor `name` (numel(shape) floats, row-major), or nullptr when the caller does not
// hold it.
using TensorLocator = std::function<float*(const std::string& name)>;
using ConstTensorLocator = std::function<const float*(const std::string& name)>;

// Checks, from the headers alone, that the model's tensors (model.safetensors, or the shards of a
// model.safetensors.index.json: checkpoint/model_files.h) are exactly those of config `c` with
// their shapes (rotary inv_freq buffers and a tied lm_head.weight are ignored), so a config that
// does not belong to the files is refused before anything is allocated for it.
void check_model_safetensors(const ModelTensorFiles& files, const ModelConfig& c);
void check_model_safetensors(const std::string& path, const ModelConfig& c);

// Throws hp::Error naming `file`, `tensor` and the element when one of the n values is NaN or
// infinite.
void check_finite_values(const float* v, int64_t n, const std::string& file,
                         const std::string& tensor);

// Loads model.safetensors, or a sharded model from its index (`path` ends in ".index.json"), into
// the tensors the locator returns memory for. Every tensor of the layout must be in the file(s)
// with exactly its shape and a floating dtype (F32; F16/BF16/F64 are widened or narrowed to f32);
// unknown tensors are an error (a different architecture), except rotary inv_freq buffers that old
// transformers versions saved; lm_head.weight is ignored when tied; a NaN or infinite value is an
// error. Errors name the file and the tensor and say what to do.
void load_model_safetensors(const std::string& path, const ModelConfig& c,
                            const TensorLocator& locate);

// The tensors to write for a model (the locator must return memory for every one), in file order.
// The views point at the caller's memory: keep it alive while writing.
std::vector<StWriteTensor> model_write_tensors(const ModelConfig& c,
                                               const ConstTensorLocator& locate);

}  // namespace hp
