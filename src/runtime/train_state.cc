// TrainState <-> JSON.
#include "runtime/train_state.h"

#include "util/error.h"

namespace hp {

nlohmann::json StepRecord::to_json() const {
  return {{"step", step},           {"loss", loss},       {"lr", lr},
          {"grad_norm", grad_norm}, {"seconds", seconds}, {"tokens_per_s", tokens_per_s}};
}

StepRecord StepRecord::from_json(const nlohmann::json& j) {
  StepRecord r;
  r.step = j.at("step").get<int64_t>();
  r.loss = j.at("loss").get<double>();
  r.lr = j.at("lr").get<double>();
  r.grad_norm = j.at("grad_norm").get<double>();
  r.seconds = j.at("seconds").get<double>();
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  return r;
}

nlohmann::json TrainState::to_json() const {
  nlohmann::json hist = nlohmann::json::array();
  for (const StepRecord& r : history) hist.push_back(r.to_json());
  return {{"format", "helixpipe-trainer-state"},
          {"version", 1},
          {"step", step},
          {"data",
           {{"next_sequence", next_sequence},
            {"seq_len", seq_len},
            {"microbatch_size", microbatch_size},
            {"microbatches", microbatches}}},
          {"tokens_seen", tokens_seen},
          {"rng", {{"seed", seed}, {"draws_per_step", 0}}},
          {"lr_schedule", lr.to_json()},
          {"adamw", adamw.to_json()},
          {"clip", clip},
          {"precision", precision.empty() ? "fp32" : precision},
          {"loss_history", hist}};
}

namespace {

// An integer field in [lo, hi]: refuses non-integers (1e308 would not convert), values beyond
// int64 and values out of range, naming the field and the file.
int64_t get_count(const nlohmann::json& obj, const char* key, const char* field, int64_t lo,
                  int64_t hi, const std::string& where, const char* as) {
  HP_CHECK(obj.is_object() && obj.contains(key),
           "{}: {} is missing; the trainer state is corrupt or was edited by hand", where, field);
  const nlohmann::json& v = obj[key];
  const bool integer =
      v.is_number_integer() &&
      (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
  HP_CHECK(integer && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
           "{}: {} must be an integer in [{}, {}]{}, got {}; the trainer state is corrupt or was "
           "edited by hand",
           where, field, lo, hi, as, v.dump());
  return v.get<int64_t>();
}

}  // namespace

TrainState TrainState::from_json(const nlohmann::json& j, const std::string& where) {
  TrainState s;
  HP_CHECK(j.is_object() && j.contains("format") && j["format"] == "helixpipe-trainer-state",
           "{}: not a helixpipe trainer state (no \"format\": \"helixpipe-trainer-state\")", where);
  HP_CHECK(j.contains("version") && j["version"].is_number_integer() && j["version"] == 1,
           "{}: trainer state version {} is not supported (this helixpipe reads version 1)", where,
           j.contains("version") ? j["version"].dump() : "(none)");
  HP_CHECK(j.contains("data") && j["data"].is_object(), "{}: data is missing or not an object",
           where);
  const nlohmann::json& data = j["data"];
  s.step = get_count(j, "step", "step", 0, kMaxSteps, where, "");
  s.seq_len = get_count(data, "seq_len", "data.seq_len", 1, kMaxSeqLen, where, " (as --seq-len)");
  // The data position in tokens stays below 2^53 (exact in a double, and no overflow when it is
  // re-expressed for another sequence length).
  s.next_sequence =
      get_count(data, "next_sequence", "data.next_sequence", 0, kMaxTokens / s.seq_len, where, "");
  // 0 = not recorded (older files).
  if (data.contains("microbatch_size"))
    s.microbatch_size =
        get_count(data, "microbatch_size", "data.microbatch_size", 0, kMaxMicrobatch, where,
                  " (0: not recorded; as --microbatch-size)");
  if (data.contains("microbatches"))
    s.microbatches = get_count(data, "microbatches", "data.microbatches", 0, kMaxMicrobatch, where,
                               " (0: not recorded; as --microbatches)");
  s.tokens_seen = get_count(j, "tokens_seen", "tokens_seen", 0, kMaxTokens, where, "");
  // (get<uint64_t> of a float such as 1e308 would be undefined: only integers are read.)
  HP_CHECK(j.contains("rng") && j["rng"].is_object() && j["rng"].contains("seed") &&
               j["rng"]["seed"].is_number_integer(),
           "{}: rng.seed is missing or not an integer; the trainer state is corrupt", where);
  s.seed = j["rng"]["seed"].get<uint64_t>();
  HP_CHECK(j.contains("lr_schedule") && j.contains("adamw"),
           "{}: lr_schedule or adamw is missing; the trainer state is corrupt", where);
  s.lr = LrSchedule::from_json(j["lr_schedule"], where);
  s.adamw = AdamWConfig::from_json(j["adamw"], where);
  HP_CHECK(j.contains("clip") && j["clip"].is_number(), "{}: clip is missing or not a number",
           where);
  s.clip = j["clip"].get<double>();
  HP_CHECK(s.clip >= 0 && s.clip <= kMaxClip,
           "{}: clip must be in [0, {}] (as --clip; 0: no clipping), got {}", where, kMaxClip,
           s.clip);
  const nlohmann::json precision = j.contains("precision") ? j["precision"] : "fp32";
  HP_CHECK(precision == "fp32" || precision == "bf16",
           "{}: precision {} is not \"fp32\" or \"bf16\"; the trainer state is corrupt or was "
           "edited by hand",
           where, precision.dump());
  s.precision = precision.get<std::string>();
  HP_CHECK(j.contains("loss_history") && j["loss_history"].is_array(),
           "{}: loss_history is missing or not a list", where);
  try {
    for (const auto& r : j["loss_history"]) {
      // get<int64_t> of a huge float is undefined: refuse anything but an integer step.
      HP_CHECK(r.is_object() && r.contains("step") && r["step"].is_number_integer(),
               "{}: loss_history entry {} has no integer step; the trainer state is corrupt", where,
               r.dump().substr(0, 80));
      s.history.push_back(StepRecord::from_json(r));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed loss_history entry ({})", where, e.what());
  }
  return s;
}

int64_t TrainState::next_sequence_for(int64_t new_seq_len) const {
  if (new_seq_len == seq_len) return next_sequence;
  const int64_t tokens = next_sequence * seq_len;
  return (tokens + new_seq_len - 1) / new_seq_len;
}

}  // namespace hp
