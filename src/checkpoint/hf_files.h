// The files a checkpoint save writes beside config.json so that Hugging Face tools can use the
// folder on its own: generation_config.json (generation defaults) and the byte-level tokenizer
// (tokenizer.json in the `tokenizers` library's JSON form, and tokenizer_config.json). The
// tokenizer describes src/data/tokenizer.h exactly: token id = byte value, 256 tokens, no merges
// (docs/formats/checkpoint.md explains the representation).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace hp {

inline constexpr const char* kGenerationConfigFile = "generation_config.json";
inline constexpr const char* kTokenizerFile = "tokenizer.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";

// The character that GPT-2's byte-level alphabet (the `tokenizers` ByteLevel pre-tokenizer and
// decoder) writes byte `b` as, UTF-8 encoded: printable bytes ('!'..'~', U+00A1..U+00AC,
// U+00AE..U+00FF) stand for themselves, the other 68 take U+0100, U+0101, ... in byte order.
std::string byte_level_symbol(uint8_t b);

// generation_config.json for a model with Hugging Face config `config`: bos_token_id and
// eos_token_id when the config has them, max_length = max_position_embeddings when it has one.
nlohmann::json generation_config_json(const nlohmann::json& config);

// tokenizer.json and tokenizer_config.json of the byte-level tokenizer, or nullopt when the
// model's vocab_size is missing or below 256 (byte tokens would lie outside its embedding).
std::optional<nlohmann::json> byte_tokenizer_json(const nlohmann::json& config);
std::optional<nlohmann::json> byte_tokenizer_config_json(const nlohmann::json& config);

}  // namespace hp
