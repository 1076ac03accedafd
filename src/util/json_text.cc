// JSON text parsing that refuses NUL bytes.
#include "util/json_text.h"

#include "util/error.h"

namespace hp {

void check_no_nul(std::string_view text, const std::string& where) {
  const size_t at = text.find('\0');
  HP_CHECK(at == std::string_view::npos,
           "{}: NUL byte at offset {} of {}: a JSON file holds text only (is it binary, truncated "
           "or overwritten?); regenerate or fix the file",
           where, at, text.size());
}

nlohmann::json parse_json_text(std::string_view text, const std::string& where) {
  check_no_nul(text, where);
  return nlohmann::json::parse(text.begin(), text.end());
}

}  // namespace hp
