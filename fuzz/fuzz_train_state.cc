// libFuzzer target: trainer_state.json (runtime/train_state.h), the checkpoint file that carries a
// run's position, optimizer settings and loss history. Text that is not JSON is the JSON parser's
// business (the caller reports it); anything that parses must be read or refused with hp::Error.
// A state that is read must lie in the documented ranges and survive a write and a second read
// unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "runtime/train_state.h"
#include "util/error.h"
#include "util/json_text.h"

using hp::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<nlohmann::json> parsed = fuzz::parse_or_skip(text, "trainer_state.json");
  if (!parsed) return 0;
  const nlohmann::json& j = *parsed;
  TrainState s;
  try {
    s = TrainState::from_json(j, "trainer_state.json");
  } catch (const Error&) {
    return 0;
  }
  check(s.step >= 0 && s.step <= TrainState::kMaxSteps);
  check(s.seq_len >= 1 && s.seq_len <= TrainState::kMaxSeqLen);
  check(s.next_sequence >= 0 && s.next_sequence <= TrainState::kMaxTokens / s.seq_len);
  check(s.tokens_seen >= 0 && s.tokens_seen <= TrainState::kMaxTokens);
  check(std::isfinite(s.clip) && s.clip >= 0);
  check(std::isfinite(s.adamw.eps) && s.adamw.eps > 0);
  check(std::isfinite(s.lr.peak) && s.lr.peak > 0);
  // Re-expressing the data position for another sequence length must not overflow.
  (void)s.next_sequence_for(1);
  (void)s.next_sequence_for(TrainState::kMaxSeqLen);
  for (int64_t step : {int64_t{0}, s.step, s.lr.total, s.lr.warmup})
    check(std::isfinite(s.lr.at(step)));
  const nlohmann::json once = s.to_json();
  TrainState again;
  try {
    again = TrainState::from_json(once, "rewritten");
  } catch (const Error&) {
    __builtin_trap();  // the writer produced a state its own reader refuses
  }
  check(again.to_json() == once);
  return 0;
}
