// Deterministic random numbers: the same seed gives the same stream on every host and rank.
// (std::normal_distribution is not specified bit-for-bit across library versions, so we roll ours.)
#pragma once

#include <cmath>
#include <cstdint>

namespace hp {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // SplitMix64: good statistical quality, one 64-bit state, trivially reproducible.
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal by Box-Muller (one value per call; the pair's twin is dropped for simplicity).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace hp
