// Temperature / top-k sampling.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "util/error.h"

namespace hp {

int32_t sample_token(std::span<const float> logits, int64_t limit, double temperature,
                     int64_t top_k, Rng& rng) {
  HP_CHECK(limit > 0 && limit <= static_cast<int64_t>(logits.size()),
           "sampling limit {} outside 1..{}", limit, logits.size());
  if (temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + limit) -
                                logits.begin());
  }
  std::vector<int32_t> ids(limit);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t k = top_k > 0 ? std::min(top_k, limit) : limit;
  // Largest first; ties by id so the result never depends on the sort implementation.
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(k);
  std::vector<double> p(k);
  const double top = logits[ids[0]];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((static_cast<double>(logits[ids[i]]) - top) / temperature);
    total += p[i];
  }
  double u = rng.uniform() * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[k - 1];
}

}  // namespace hp
