// libFuzzer target: schedule files (schedule/text_io.h), in the form load_schedule would pick:
// JSON when the first non-blank character is '{', else the text form. A schedule that parses is
// written back as text and read again: the second reading must give the same text (the writer
// and the reader agree on everything the reader accepts).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "schedule/lower.h"
#include "schedule/text_io.h"
#include "schedule/validate.h"
#include "util/error.h"
#include "util/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t first = text.find_first_not_of(" \t\r\n");
  Schedule s;
  try {
    if (first != std::string_view::npos && text[first] == '{') {
      const std::optional<nlohmann::json> parsed = fuzz::parse_or_skip(text, "fuzz.json");
      if (!parsed) return 0;
      const nlohmann::json& j = *parsed;
      s = schedule_from_json(j, "fuzz.json");
    } else {
      s = schedule_from_text(text, "fuzz.txt");
    }
  } catch (const Error&) {
    return 0;
  }
  const std::string once = schedule_to_text(s);
  Schedule again;
  try {
    again = schedule_from_text(once, "rewritten");
  } catch (const Error&) {
    __builtin_trap();  // the writer produced text its own reader refuses
  }
  if (schedule_to_text(again) != once) __builtin_trap();
  // What `helixpipe validate` does next: the validator reports problems, it never throws past a
  // parsed schedule. A valid one (kept small) is lowered as the runtime would.
  try {
    const ValidationReport r = validate(s);
    if (r.ok() && r.compute_ops <= 4096) {
      Schedule lowered = s;
      lower(lowered);
    }
  } catch (const Error&) {
  }
  return 0;
}
