// libFuzzer target: model config JSON (ours or a Hugging Face config.json; util/model_config.h).
// A config that is accepted must have sizes within the documented limits and a parameter count
// that is computed without overflow.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<nlohmann::json> parsed = fuzz::parse_or_skip(text, "fuzz.json");
  if (!parsed) return 0;  // malformed JSON text: the callers turn it into their own message
  const nlohmann::json& j = *parsed;
  // Past the parser, only hp::Error may come out (a json type_error would be an unclear message).
  try {
    const ModelConfig c = ModelConfig::from_json(j, "fuzz.json");
    c.validate();
    if (c.layers > ModelConfig::kMaxLayers || c.vocab > ModelConfig::kMaxVocab) __builtin_trap();
    if (c.params_total() <= 0 || c.params_total() > ModelConfig::kMaxParams) __builtin_trap();
    (void)c.to_hf_json().dump();
  } catch (const Error&) {
  }
  return 0;
}
