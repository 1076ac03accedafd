// Parsing JSON files whole. nlohmann's parser treats a NUL byte as the end of the input, so
// "{...}\0garbage" would parse as "{...}" and the rest be silently ignored; these files are
// refused instead (a NUL never belongs in JSON text: the file is binary or was overwritten).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace hp {

// Throws hp::Error naming `where` and the offset when `text` holds a NUL byte.
void check_no_nul(std::string_view text, const std::string& where);

// check_no_nul, then nlohmann::json::parse of all of `text` (its exceptions pass through, so
// callers keep their own "not valid JSON" messages).
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

}  // namespace hp
