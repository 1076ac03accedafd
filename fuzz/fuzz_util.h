// What the libFuzzer targets share: a crash that libFuzzer records, and the JSON text parse that
// every JSON reader starts with (malformed text is the callers' to report, not a finding).
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_text.h"

namespace hp::fuzz {

inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

// The parsed JSON, or nothing when the text is not JSON (parse_json_text refused it).
inline std::optional<nlohmann::json> parse_or_skip(std::string_view text, const char* name) {
  try {
    return parse_json_text(text, name);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace hp::fuzz
