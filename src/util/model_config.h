// The transformer's dimensions (a Hugging Face LlamaConfig subset) shared by the schedule layer
// (message and stash sizes), the simulator (FLOPs) and the model (parameter layout).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hp {

struct ModelConfig {
  // Largest sizes a config may have (validate() refuses more). Far above any real model; they
  // keep every product of sizes inside int64 and parameter counts within reach of real memory.
  static constexpr int64_t kMaxHidden = int64_t{1} << 20;        // hidden_size, heads, kv_heads
  static constexpr int64_t kMaxIntermediate = int64_t{1} << 22;  // intermediate_size
  static constexpr int64_t kMaxLayers = int64_t{1} << 16;        // as schedules (schedule/text_io)
  static constexpr int64_t kMaxVocab = int64_t{1} << 24;         // vocab_size
  static constexpr int64_t kMaxPositions = int64_t{1} << 24;     // max_position_embeddings
  static constexpr int64_t kMaxParams = int64_t{1} << 40;        // 1.1e12 parameters

  std::string name = "custom";
  int64_t hidden = 256;         // h
  int64_t intermediate = 768;   // ffn, SwiGLU width
  int64_t heads = 4;            // query heads
  int64_t kv_heads = 4;         // key/value heads (GQA when < heads)
  int64_t layers = 4;           // L
  int64_t vocab = 256;          // byte-level by default
  int64_t max_positions = 131072;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  // Special token ids a Hugging Face config.json may carry (bos_token_id; eos_token_id, one id or
  // a list). Nothing here uses them; they are kept so that a checkpoint saved from such a model
  // passes them on (config.json, generation_config.json). Ids outside [0, vocab) are dropped.
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }   // h_kv
  int64_t qkv_dim() const { return hidden + 2 * kv_dim(); }  // rows of W_qkv

  // Throws hp::Error naming the field and the rule it breaks.
  void validate() const;

  // Parameter counts (elements).
  int64_t params_per_layer() const;
  int64_t params_total() const;

  // Reads our own form or a Hugging Face config.json (same keys). `where` names the source for errors.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  // Loads a JSON file, or a built-in preset when `path_or_preset` names one (see presets()).
  static ModelConfig load(const std::string& path_or_preset);
  // Hugging Face LlamaConfig form (architectures, model_type, torch_dtype included).
  nlohmann::json to_hf_json() const;
};

// Tensor parallelism over `tp` ranks (docs/tensor-parallel.md) splits the attention heads, the
// key/value heads, the MLP width and (sequence parallelism) a micro-batch's `tokens` (<= 0: not
// checked) into tp equal parts: throws hp::Error naming the numbers and the group sizes that work.
void check_tensor_parallel(const ModelConfig& cfg, int tp, int64_t tokens = 0);

// Built-in presets by name ("tiny", "small", ...), documented in docs/formats.md.
const std::vector<std::pair<std::string, ModelConfig>>& model_presets();

}  // namespace hp
