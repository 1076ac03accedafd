// What a training run must remember to continue exactly: steps done, the global data position,
// the optimizer and schedule settings, the seed, and the loss history. Stored as
// trainer_state.json in a checkpoint (docs/formats/checkpoint.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/optimizer.h"

namespace hp {

// One optimizer step's numbers (also one JSONL metrics line).
struct StepRecord {
  int64_t step = 0;          // 1-based number of this update
  double loss = 0;           // mean token loss over the global batch
  double lr = 0;             // learning rate used
  double grad_norm = 0;      // global norm before clipping
  double seconds = 0;        // wall time of the step
  double tokens_per_s = 0;   // global batch tokens / seconds
  nlohmann::json to_json() const;
  static StepRecord from_json(const nlohmann::json& j);
};

struct TrainState {
  // Ranges from_json enforces (besides LrSchedule's and AdamWConfig's own).
  static constexpr int64_t kMaxSteps = LrSchedule::kMaxSteps;
  static constexpr int64_t kMaxSeqLen = int64_t{1} << 24;      // as max_position_embeddings
  static constexpr int64_t kMaxMicrobatch = int64_t{1} << 20;  // B and M each
  static constexpr int64_t kMaxTokens = int64_t{1} << 53;      // data position and tokens_seen
  static constexpr double kMaxClip = 1e9;

  int64_t step = 0;           // updates completed
  int64_t next_sequence = 0;  // global index of the next sequence to read (docs/formats/data.md)
  int64_t seq_len = 0;        // the S that next_sequence counts in
  int64_t microbatch_size = 0;  // B and M of the run that saved this (0 = not recorded); resume
  int64_t microbatches = 0;     // uses them as defaults so an identical continuation needs no flags
  int64_t tokens_seen = 0;    // target tokens trained on so far
  uint64_t seed = 0;          // initialization seed (training itself draws no random numbers)
  LrSchedule lr;
  AdamWConfig adamw;
  double clip = 1.0;          // max global grad norm; <= 0 disables clipping
  std::string precision;      // "fp32" or "bf16" (Precision::name()); empty: not recorded (fp32)
  std::vector<StepRecord> history;

  nlohmann::json to_json() const;
  // Throws hp::Error naming `where` and the field on a missing, malformed or out-of-range field
  // (the same ranges as the train flags).
  static TrainState from_json(const nlohmann::json& j, const std::string& where);

  // The data position re-expressed for another sequence length (rounded up to whole sequences,
  // so no token is trained on twice).
  int64_t next_sequence_for(int64_t new_seq_len) const;
};

}  // namespace hp
