// The rotary angle of (position, pair j) computed the way Hugging Face Llama does it in fp32, so
// every backend rotates by bit-identical cos/sin. Not a kernel: a shared formula.
#pragma once

#include <cmath>
#include <cstdint>

namespace hp {

// HF: inv_freq = 1 / theta^(arange(0, d, 2).float() / d) and freqs = pos * inv_freq, all in fp32.
inline void rope_cos_sin(int64_t pos, int64_t j, int64_t head_dim, double theta, float* c,
                         float* s) {
  const float expo = static_cast<float>(2 * j) / static_cast<float>(head_dim);
  const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), expo);
  const float angle = static_cast<float>(pos) * inv_freq;
  *c = std::cos(angle);
  *s = std::sin(angle);
}

}  // namespace hp
