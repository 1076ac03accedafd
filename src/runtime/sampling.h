// Picking the next token from logits: greedy, temperature, top-k. Deterministic for a given Rng.
#pragma once

#include <cstdint>
#include <span>

#include "util/rng.h"

namespace hp {

// Samples an id below `limit` (<= logits.size()) from softmax(logits / temperature) restricted to
// the top_k largest (top_k <= 0: all). temperature <= 0 picks the argmax (lowest id on ties).
int32_t sample_token(std::span<const float> logits, int64_t limit, double temperature,
                     int64_t top_k, Rng& rng);

}  // namespace hp
