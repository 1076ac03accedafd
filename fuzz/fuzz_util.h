// What the libFuzzer targets share: a crash that libFuzzer records, the JSON text parse that every
// JSON reader starts with (malformed text is the callers' to report, not a finding), and the
// removal of a target's scratch folder when the fuzzer exits.
#pragma once

#include <filesystem>
#include <optional>
#include <system_error>
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

// A static one of these removes folder() (the target's scratch folder) when the process exits.
template <const std::filesystem::path& (*folder)()>
struct RemoveAtExit {
  ~RemoveAtExit() {
    std::error_code ec;
    std::filesystem::remove_all(folder(), ec);
  }
};

}  // namespace hp::fuzz
