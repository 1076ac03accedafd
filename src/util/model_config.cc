// ModelConfig parsing, validation and presets.
#include "util/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <tuple>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp {

namespace {

ModelConfig make(std::string name, int64_t h, int64_t ffn, int64_t heads, int64_t kv, int64_t layers,
                 int64_t vocab, bool tie) {
  ModelConfig c;
  c.name = std::move(name);
  c.hidden = h;
  c.intermediate = ffn;
  c.heads = heads;
  c.kv_heads = kv;
  c.layers = layers;
  c.vocab = vocab;
  c.tie_embeddings = tie;
  return c;
}

}  // namespace

const std::vector<std::pair<std::string, ModelConfig>>& model_presets() {
  static const std::vector<std::pair<std::string, ModelConfig>> presets = [] {
    std::vector<std::pair<std::string, ModelConfig>> v;
    // tests: GQA 2:1, odd ffn, small enough for double-precision gradient checks.
    v.emplace_back("tiny", make("tiny", 32, 88, 4, 2, 2, 256, false));
    // the README demo and the benchmarks: byte-level, attention-heavy at long s.
    v.emplace_back("small", make("small", 256, 768, 4, 4, 4, 256, false));
    v.emplace_back("bench8", make("bench8", 256, 768, 4, 4, 8, 256, false));
    // The paper's sizes as LLaMA-style models (simulation only): SwiGLU width about 8h/3 rounded
    // to a multiple of 128, vocab 32000, L divisible by 8 so 8-, 16- and 32-stage helices fit.
    //   1.3b: 1.34e9 parameters; 3b: 2.7e9; 7b: the LLaMA-2 7B shape, 6.7e9.
    for (auto [name, h, ffn, heads, layers] :
         {std::tuple{"1.3b", 2048, 5504, 16, 24}, std::tuple{"3b", 2560, 6912, 32, 32},
          std::tuple{"7b", 4096, 11008, 32, 32}}) {
      ModelConfig c = make(name, h, ffn, heads, heads, layers, 32000, false);
      c.max_positions = 262144;
      v.emplace_back(name, c);
    }
    // The same sizes as GPT-style models, the shapes of the GPT-3 paper's table (1.3B: h=2048,
    // L=24, 16 heads; 2.7B: h=2560, L=32, 32 heads; 6.7B: h=4096, L=32, 32 heads) that Megatron's
    // GPT examples and the HelixPipe reference train: GeLU MLP of 4h, LayerNorm, biases, learned
    // positions (2048 rows here; the simulator grows the table to the sequence it runs), GPT-2's
    // 50257 tokens padded to 50304 as Megatron pads for TP=1 (a multiple of 128; 50257 is odd,
    // so no tensor-parallel group would divide it), input and output embeddings tied.
    for (auto [name, h, heads, layers] :
         {std::tuple{"gpt-1.3b", 2048, 16, 24}, std::tuple{"gpt-3b", 2560, 32, 32},
          std::tuple{"gpt-7b", 4096, 32, 32}}) {
      ModelConfig c = make(name, h, 4 * h, heads, heads, layers, 50304, true);
      c.kind = ModelKind::kGpt;
      c.max_positions = 2048;
      v.emplace_back(name, c);
    }
    return v;
  }();
  return presets;
}

void ModelConfig::validate() const {
  // Each size within [1, max]: the maxima lie far above any real model and keep every product of
  // sizes (parameter counts, offsets) well inside int64.
  auto in_range = [](const char* field, int64_t v, int64_t max) {
    HP_CHECK(v > 0, "model config: {} must be positive, got {}", field, v);
    HP_CHECK(v <= max,
             "model config: {} = {} is larger than helixpipe supports (at most {}); fix the value "
             "in the config",
             field, v, max);
  };
  in_range("hidden_size", hidden, kMaxHidden);
  in_range("intermediate_size", intermediate, kMaxIntermediate);
  in_range("num_attention_heads", heads, kMaxHidden);
  in_range("num_key_value_heads", kv_heads, kMaxHidden);
  in_range("num_hidden_layers", layers, kMaxLayers);
  in_range("vocab_size", vocab, kMaxVocab);
  in_range("max_position_embeddings", max_positions, kMaxPositions);
  HP_CHECK(hidden % heads == 0,
           "model config: hidden_size {} is not a multiple of num_attention_heads {}; pick sizes "
           "with hidden_size = heads * head_dim",
           hidden, heads);
  HP_CHECK(heads % kv_heads == 0,
           "model config: num_attention_heads {} is not a multiple of num_key_value_heads {} "
           "(grouped-query attention shares each key/value head among heads/kv_heads query heads)",
           heads, kv_heads);
  HP_CHECK(is_gpt() || head_dim() % 2 == 0,
           "model config: head_dim {} must be even for rotary positions", head_dim());
  HP_CHECK(std::isfinite(rms_eps) && rms_eps > 0 && rms_eps <= 1,
           "model config: rms_norm_eps must be in (0, 1] (typically 1e-5 or 1e-6), got {}",
           rms_eps);
  HP_CHECK(std::isfinite(rope_theta) && rope_theta > 0 && rope_theta <= 1e12,
           "model config: rope_theta must be in (0, 1e12] (typically 10000 or 500000), got {}",
           rope_theta);
  // The sizes above bound this product below 2^61, so it is computed exactly.
  HP_CHECK(params_total() <= kMaxParams,
           "model config: {} parameters is more than helixpipe supports (at most {}); reduce "
           "num_hidden_layers, hidden_size, intermediate_size or vocab_size",
           params_total(), kMaxParams);
}

void ModelConfig::check_runtime_supported() const {
  HP_CHECK(!is_gpt(),
           "model '{}' is GPT-style; helixpipe trains LLaMA-style models only; it can be simulated "
           "with simulate/compare/plan/sweep",
           name);
}

ModelConfig ModelConfig::for_sequence(int64_t seq_len) const {
  ModelConfig c = *this;
  if (is_gpt() && seq_len > c.max_positions) c.max_positions = seq_len;
  return c;
}

int64_t ModelConfig::qkv_weight_elems() const {
  return qkv_dim() * hidden + (has_bias() ? qkv_dim() : 0);
}

int64_t ModelConfig::embed_params() const { return (vocab + position_rows()) * hidden; }

int64_t ModelConfig::pre_params() const {
  const int64_t norm = is_gpt() ? 2 * hidden : hidden;
  return norm + qkv_weight_elems();
}

int64_t ModelConfig::post_params() const {
  const int64_t h = hidden, f = intermediate;
  const int64_t norm = is_gpt() ? 2 * h : h;
  const int64_t attn_out = h * h + (has_bias() ? h : 0);
  // GPT: fc1 (f x h, bias f) and fc2 (h x f, bias h); LLaMA: gate, up (f x h) and down (h x f).
  const int64_t mlp = is_gpt() ? 2 * h * f + f + h : 3 * h * f;
  return attn_out + norm + mlp;
}

int64_t ModelConfig::head_params() const {
  const int64_t norm = is_gpt() ? 2 * hidden : hidden;
  return norm + (tie_embeddings ? 0 : vocab * hidden);
}

int64_t ModelConfig::params_total() const {
  return embed_params() + layers * params_per_layer() + head_params();
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: a model config must be a JSON object", where);
  ModelConfig c;
  static const char* const kKnown[] = {
      "name",          "model_kind",   "hidden_size",  "intermediate_size", "num_attention_heads",
      "num_key_value_heads", "num_hidden_layers", "vocab_size", "rms_norm_eps",
      "rope_theta",    "max_position_embeddings", "tie_word_embeddings", "head_dim",
      // Hugging Face keys that we accept and ignore (their values do not change the math here)
      "architectures", "model_type", "torch_dtype", "hidden_act", "attention_bias",
      "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
      "mlp_bias", "pretraining_tp", "rope_scaling", "transformers_version", "use_cache",
      // newer transformers: "dtype" replaces torch_dtype; rope settings under rope_parameters
      "dtype", "_name_or_path", "rope_parameters"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    HP_CHECK(known, "{}: unknown model config key '{}' (known: model_kind, hidden_size, "
                    "intermediate_size, num_attention_heads, num_key_value_heads, "
                    "num_hidden_layers, vocab_size, rms_norm_eps, rope_theta, "
                    "max_position_embeddings, tie_word_embeddings)",
             where, it.key());
  }
  // A Hugging Face config.json (it names its architecture) must state the sizes: transformers'
  // defaults describe a 7B model, and ours a small byte-level one, so neither may fill them in.
  if (j.contains("model_type") || j.contains("architectures")) {
    for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                            "num_hidden_layers", "vocab_size"}) {
      HP_CHECK(j.contains(key),
               "{}: '{}' is missing; a Hugging Face config.json must state the model's sizes (add "
               "it, or write the config with 'helixpipe init')",
               where, key);
    }
  }
  auto get_int = [&](const char* key, int64_t& out) {
    if (!j.contains(key)) return;
    HP_CHECK(j[key].is_number_integer(), "{}: '{}' must be an integer, got {}", where, key,
             j[key].dump());
    HP_CHECK(!j[key].is_number_unsigned() ||
                 j[key].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
             "{}: '{}' = {} is far larger than any supported model; fix the value", where, key,
             j[key].dump());
    out = j[key].get<int64_t>();
  };
  auto get_num = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    HP_CHECK(j[key].is_number(), "{}: '{}' must be a number, got {}", where, key, j[key].dump());
    out = j[key].get<double>();
  };
  if (j.contains("name")) {
    HP_CHECK(j["name"].is_string(), "{}: 'name' must be a string", where);
    c.name = j["name"].get<std::string>();
  }
  if (j.contains("model_kind")) {
    HP_CHECK(j["model_kind"] == "llama" || j["model_kind"] == "gpt",
             "{}: 'model_kind' must be \"llama\" (the default) or \"gpt\", got {}", where,
             j["model_kind"].dump());
    if (j["model_kind"] == "gpt") c.kind = ModelKind::kGpt;
  }
  get_int("hidden_size", c.hidden);
  get_int("intermediate_size", c.intermediate);
  get_int("num_attention_heads", c.heads);
  c.kv_heads = c.heads;
  get_int("num_key_value_heads", c.kv_heads);
  get_int("num_hidden_layers", c.layers);
  get_int("vocab_size", c.vocab);
  get_int("max_position_embeddings", c.max_positions);
  get_num("rms_norm_eps", c.rms_eps);
  get_num("rope_theta", c.rope_theta);
  if (j.contains("tie_word_embeddings")) {
    HP_CHECK(j["tie_word_embeddings"].is_boolean(), "{}: 'tie_word_embeddings' must be true or false",
             where);
    c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    HP_CHECK(j["head_dim"].is_number_integer() && c.heads > 0 &&
                 j["head_dim"].get<int64_t>() * c.heads == c.hidden,
             "{}: head_dim must equal hidden_size / num_attention_heads (we do not support a "
             "separate head_dim)",
             where);
  }
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const nlohmann::json& rp = j["rope_parameters"];
    HP_CHECK(rp.is_object(), "{}: rope_parameters must be an object", where);
    HP_CHECK(!rp.contains("rope_type") || rp["rope_type"] == "default",
             "{}: rope_parameters.rope_type {} is not supported (only \"default\" rotary)", where,
             rp.value("rope_type", nlohmann::json()).dump());
    if (rp.contains("rope_theta")) {
      HP_CHECK(rp["rope_theta"].is_number(), "{}: rope_parameters.rope_theta must be a number",
               where);
      c.rope_theta = rp["rope_theta"].get<double>();
    }
  }
  // Special token ids: kept when they are ids of this vocabulary, else ignored as before.
  auto token_id = [&](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c.vocab;
  };
  if (j.contains("bos_token_id") && token_id(j["bos_token_id"]))
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id")) {
    const nlohmann::json& e = j["eos_token_id"];
    if (token_id(e)) {
      c.eos_token_ids = {e.get<int64_t>()};
    } else if (e.is_array() && !e.empty() && std::all_of(e.begin(), e.end(), token_id)) {
      for (const auto& x : e) c.eos_token_ids.push_back(x.get<int64_t>());
    }
  }
  if (j.contains("rope_scaling")) {
    HP_CHECK(j["rope_scaling"].is_null(), "{}: rope_scaling is not supported; remove it or set null",
             where);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& path_or_preset) {
  for (const auto& [name, cfg] : model_presets()) {
    if (name == path_or_preset) return cfg;
  }
  std::ifstream in(path_or_preset);
  if (!in.is_open()) {
    std::string names;
    for (const auto& [name, cfg] : model_presets()) names += (names.empty() ? "" : ", ") + name;
    fail("model config '{}': no such file and no such preset (presets: {})", path_or_preset, names);
  }
  nlohmann::json j;
  try {
    j = parse_json_text(read_file(path_or_preset), "model config '" + path_or_preset + "'");
  } catch (const nlohmann::json::exception& e) {
    fail("model config '{}': not valid JSON ({})", path_or_preset, e.what());
  }
  return from_json(j, path_or_preset);
}

ModelConfig ModelConfig::load_for_runtime(const std::string& path_or_preset) {
  ModelConfig c = load(path_or_preset);
  c.check_runtime_supported();
  return c;
}

nlohmann::json ModelConfig::to_hf_json() const {
  check_runtime_supported();
  nlohmann::json j{{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"torch_dtype", "float32"},
                   {"hidden_act", "silu"},
                   {"hidden_size", hidden},
                   {"intermediate_size", intermediate},
                   {"num_attention_heads", heads},
                   {"num_key_value_heads", kv_heads},
                   {"num_hidden_layers", layers},
                   {"vocab_size", vocab},
                   {"rms_norm_eps", rms_eps},
                   {"rope_theta", rope_theta},
                   {"max_position_embeddings", max_positions},
                   {"tie_word_embeddings", tie_embeddings},
                   {"attention_bias", false},
                   {"mlp_bias", false}};
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  return j;
}

bool tensor_parallel_divides(const ModelConfig& cfg, int tp, int64_t tokens) {
  return tp >= 1 && cfg.heads % tp == 0 && cfg.kv_heads % tp == 0 && cfg.intermediate % tp == 0 &&
         cfg.vocab % tp == 0 && (tokens <= 0 || tokens % tp == 0);
}

void check_tensor_parallel(const ModelConfig& cfg, int tp, int64_t tokens) {
  auto divides = [&](int64_t n) {
    return tensor_parallel_divides(cfg, static_cast<int>(n), tokens);
  };
  if (divides(tp)) return;
  std::string ok;
  for (int64_t n = 1; n <= cfg.kv_heads; ++n)
    if (divides(n)) ok += (ok.empty() ? "" : ", ") + std::to_string(n);
  const std::string tok = tokens > 0 ? fmt::format(" and the {} tokens of a micro-batch", tokens) : "";
  throw Error(fmt::format("model '{}': a tensor-parallel group of {} must divide its {} attention "
                          "heads, {} key/value heads, MLP width {}, vocabulary of {}{}; groups "
                          "that work: {} (pad vocab_size in config.json to a multiple of the "
                          "group for a vocabulary that does not divide)",
                          cfg.name, tp, cfg.heads, cfg.kv_heads, cfg.intermediate, cfg.vocab, tok,
                          ok));
}

}  // namespace hp
