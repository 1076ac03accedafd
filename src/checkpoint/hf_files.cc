// generation_config.json and the byte-level tokenizer files of a checkpoint.
#include "checkpoint/hf_files.h"

namespace hp {

namespace {

bool printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::string utf8(uint32_t cp) {  // code points below U+0800 are all this alphabet needs
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

bool token_id(const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }

bool has_byte_vocab(const nlohmann::json& config) {
  return config.is_object() && config.contains("vocab_size") &&
         config["vocab_size"].is_number_integer() && config["vocab_size"].get<int64_t>() >= 256;
}

}  // namespace

std::string byte_level_symbol(uint8_t b) {
  if (printable_byte(b)) return utf8(b);
  uint32_t n = 0;  // the bytes below b that are not printable
  for (int c = 0; c < b; ++c) n += printable_byte(c) ? 0 : 1;
  return utf8(256 + n);
}

nlohmann::json generation_config_json(const nlohmann::json& config) {
  nlohmann::json g = nlohmann::json::object();
  if (!config.is_object()) return g;
  if (config.contains("bos_token_id") && token_id(config["bos_token_id"]))
    g["bos_token_id"] = config["bos_token_id"];
  if (config.contains("eos_token_id")) {
    const nlohmann::json& e = config["eos_token_id"];
    bool ok = token_id(e);
    if (e.is_array() && !e.empty()) {
      ok = true;
      for (const auto& x : e) ok = ok && token_id(x);
    }
    if (ok) g["eos_token_id"] = e;
  }
  if (config.contains("max_position_embeddings") &&
      config["max_position_embeddings"].is_number_integer())
    g["max_length"] = config["max_position_embeddings"];
  return g;
}

std::optional<nlohmann::json> byte_tokenizer_json(const nlohmann::json& config) {
  if (!has_byte_vocab(config)) return std::nullopt;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_symbol(static_cast<uint8_t>(b))] = b;
  // ByteLevel without a prefix space and without the GPT-2 word split: the text's bytes become
  // the 256 symbols one for one, and a BPE model without merges makes each symbol its own token.
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", false}};
  return nlohmann::json{{"version", "1.0"},
                        {"truncation", nullptr},
                        {"padding", nullptr},
                        {"added_tokens", nlohmann::json::array()},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", byte_level},
                        {"post_processor", nullptr},
                        {"decoder", byte_level},
                        {"model",
                         {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"vocab", vocab},
                          {"merges", nlohmann::json::array()}}}};
}

std::optional<nlohmann::json> byte_tokenizer_config_json(const nlohmann::json& config) {
  if (!has_byte_vocab(config)) return std::nullopt;
  nlohmann::json t = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                      // Decoding must give back the bytes, not a text with spaces "cleaned up".
                      {"clean_up_tokenization_spaces", false},
                      {"bos_token", nullptr},
                      {"eos_token", nullptr},
                      {"unk_token", nullptr},
                      {"pad_token", nullptr},
                      {"added_tokens_decoder", nlohmann::json::object()}};
  if (config.contains("max_position_embeddings") &&
      config["max_position_embeddings"].is_number_integer())
    t["model_max_length"] = config["max_position_embeddings"];
  return t;
}

}  // namespace hp
