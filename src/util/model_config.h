// The transformer's dimensions (a Hugging Face LlamaConfig subset) shared by the schedule layer
// (message and stash sizes), the simulator (FLOPs) and the model (parameter layout).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hp {

// The model's architecture. The runtime (src/model) implements kLlama only; the simulator costs
// both (docs/simulator.md "Model kinds").
enum class ModelKind : uint8_t {
  kLlama,  // RMSNorm, SwiGLU MLP (gate, up, down), rotary positions, no biases
  kGpt,    // LayerNorm (weight + bias), GeLU MLP (two matrices), learned positions, biases
};

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
  ModelKind kind = ModelKind::kLlama;  // JSON key "model_kind": "llama" (default) or "gpt"
  int64_t hidden = 256;         // h
  int64_t intermediate = 768;   // ffn: SwiGLU width (LLaMA), GeLU width, usually 4h (GPT)
  int64_t heads = 4;            // query heads
  int64_t kv_heads = 4;         // key/value heads (GQA when < heads)
  int64_t layers = 4;           // L
  int64_t vocab = 256;          // byte-level by default
  int64_t max_positions = 131072;  // GPT: rows of the learned position table
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
  bool is_gpt() const { return kind == ModelKind::kGpt; }
  const char* kind_name() const { return is_gpt() ? "gpt" : "llama"; }
  // GPT's linear layers carry biases; LLaMA's do not.
  bool has_bias() const { return is_gpt(); }
  // Rows of the learned position table (GPT; rotary positions have none).
  int64_t position_rows() const { return is_gpt() ? max_positions : 0; }

  // Throws hp::Error naming the field and the rule it breaks.
  void validate() const;
  // Throws hp::Error unless the runtime (train, grad, eval, generate, init, bench, profile) can
  // run this model: it implements LLaMA-style models only.
  void check_runtime_supported() const;
  // The config a run of `seq_len` tokens per sequence uses: a learned position table grows to
  // seq_len rows when shorter (Megatron needs max_position_embeddings >= seq_length). The same
  // config for rotary positions.
  ModelConfig for_sequence(int64_t seq_len) const;

  // Parameter counts (elements), per part: embed = token (+ position) table; pre = norm 1 and
  // W_qkv (+ its bias); post = W_o, norm 2 and the MLP (+ biases); head = the final norm and, when
  // untied, the LM head. A norm has a gain (RMSNorm) or a gain and a bias (LayerNorm).
  int64_t qkv_weight_elems() const;  // W_qkv (+ b_qkv): what weights mode ships per layer
  int64_t embed_params() const;
  int64_t pre_params() const;
  int64_t post_params() const;
  int64_t head_params() const;
  int64_t params_per_layer() const { return pre_params() + post_params(); }
  int64_t params_total() const;

  // Reads our own form or a Hugging Face config.json (same keys). `where` names the source for errors.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  // Loads a JSON file, or a built-in preset when `path_or_preset` names one (see presets()).
  static ModelConfig load(const std::string& path_or_preset);
  // load(), then check_runtime_supported(): for the commands that run the real model.
  static ModelConfig load_for_runtime(const std::string& path_or_preset);
  // Hugging Face LlamaConfig form (architectures, model_type, torch_dtype included); a GPT-kind
  // config has no such form (check_runtime_supported's error).
  nlohmann::json to_hf_json() const;
};

// Tensor parallelism over `tp` ranks (docs/tensor-parallel.md) splits the attention heads, the
// key/value heads, the MLP width and (sequence parallelism) a micro-batch's `tokens` (<= 0: not
// checked) into tp equal parts: throws hp::Error naming the numbers and the group sizes that work.
void check_tensor_parallel(const ModelConfig& cfg, int tp, int64_t tokens = 0);
// Whether check_tensor_parallel accepts `tp` (without throwing).
bool tensor_parallel_divides(const ModelConfig& cfg, int tp, int64_t tokens = 0);

// Built-in presets by name ("tiny", "small", ...), documented in docs/formats.md.
const std::vector<std::pair<std::string, ModelConfig>>& model_presets();

}  // namespace hp
