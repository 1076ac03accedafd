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

TrainState TrainState::from_json(const nlohmann::json& j, const std::string& where) {
  TrainState s;
  try {
    HP_CHECK(j.value("format", "") == "helixpipe-trainer-state",
             "{}: not a helixpipe trainer state", where);
    HP_CHECK(j.at("version").get<int>() == 1, "{}: trainer state version {} is not supported",
             where, j.at("version").dump());
    s.step = j.at("step").get<int64_t>();
    s.next_sequence = j.at("data").at("next_sequence").get<int64_t>();
    s.seq_len = j.at("data").at("seq_len").get<int64_t>();
    s.microbatch_size = j.at("data").value("microbatch_size", int64_t{0});
    s.microbatches = j.at("data").value("microbatches", int64_t{0});
    s.tokens_seen = j.at("tokens_seen").get<int64_t>();
    s.seed = j.at("rng").at("seed").get<uint64_t>();
    s.lr = LrSchedule::from_json(j.at("lr_schedule"), where);
    s.adamw = AdamWConfig::from_json(j.at("adamw"), where);
    s.clip = j.at("clip").get<double>();
    s.precision = j.value("precision", "fp32");
    HP_CHECK(s.precision == "fp32" || s.precision == "bf16",
             "{}: precision '{}' is not fp32 or bf16", where, s.precision);
    for (const auto& r : j.at("loss_history")) s.history.push_back(StepRecord::from_json(r));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed trainer state ({})", where, e.what());
  }
  HP_CHECK(s.step >= 0 && s.next_sequence >= 0 && s.seq_len > 0,
           "{}: trainer state has impossible values (step {}, next_sequence {}, seq_len {})", where,
           s.step, s.next_sequence, s.seq_len);
  return s;
}

int64_t TrainState::next_sequence_for(int64_t new_seq_len) const {
  if (new_seq_len == seq_len) return next_sequence;
  const int64_t tokens = next_sequence * seq_len;
  return (tokens + new_seq_len - 1) / new_seq_len;
}

}  // namespace hp
