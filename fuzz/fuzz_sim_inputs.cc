// libFuzzer target: the simulator's JSON inputs (sim/cost_model.h, sim/device.h), a part-cost
// file (--costs) and a device profile (--device FILE.json). The input is read as both. What is
// accepted is used as `simulate` would use it, on a small 1F1B schedule: every time that comes
// out (makespan, bubble) must be finite and >= 0, so no accepted file prints "inf" or "nan".
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "schedule/generate.h"
#include "schedule/lower.h"
#include "sim/cost_model.h"
#include "sim/device.h"
#include "sim/simulator.h"
#include "util/error.h"
#include "util/json_text.h"

namespace {

using hp::fuzz::check;

// 1F1B on 2 stages, 3 micro-batches, 2 layers, lowered with the tiny model's message sizes.
const hp::Schedule& schedule() {
  static const hp::Schedule s = [] {
    hp::ScheduleSpec spec;
    spec.name = "1f1b";
    spec.stages = 2;
    spec.microbatches = 3;
    spec.layers = 2;
    hp::Schedule out = hp::generate(spec);
    hp::ModelConfig cfg;
    cfg.layers = 2;
    hp::lower(out, &cfg, 64);
    return out;
  }();
  return s;
}

void check_result(const hp::CostModel& cost) {
  hp::SimOptions opt;
  opt.record_timeline = false;
  const hp::SimResult r = hp::simulate(schedule(), cost, opt);
  check(std::isfinite(r.makespan) && r.makespan >= 0);
  check(std::isfinite(r.bubble) && r.bubble >= 0);
  check(std::isfinite(r.bubble_fraction));
  check(std::isfinite(r.mfu));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hp;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<nlohmann::json> parsed = fuzz::parse_or_skip(text, "fuzz.json");
  if (!parsed) return 0;
  const nlohmann::json& j = *parsed;
  try {
    const CostModel cost = CostModel::from_part_costs(j, "fuzz.json");
    check_result(cost);
    // The written form reads back.
    (void)CostModel::from_part_costs(cost.to_json(), "rewritten");
  } catch (const Error&) {
  }
  try {
    const DeviceProfile dev = DeviceProfile::from_json(j, "fuzz.json");
    ModelConfig cfg;
    cfg.layers = 2;
    check_result(CostModel::from_model(cfg, 32, 2, dev));
  } catch (const Error&) {
  }
  return 0;
}
