#include "util/nearest_name.h"

#include <algorithm>

namespace hp {

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view strip_flag(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return s.substr(0, s.find('='));
}

}  // namespace

std::string nearest_name(std::string_view given, const std::vector<std::string>& names) {
  const std::string_view g = strip_flag(given);
  std::string best;
  size_t best_d = std::string::npos;
  for (const std::string& n : names) {
    const size_t d = edit_distance(g, strip_flag(n));
    if (d < best_d) best_d = d, best = n;
  }
  const size_t limit = std::max<size_t>(2, g.size() / 3);
  return best_d <= limit ? best : "";
}

std::string did_you_mean(std::string_view given, const std::vector<std::string>& names) {
  const std::string n = nearest_name(given, names);
  return n.empty() ? "" : " (did you mean " + n + "?)";
}

}  // namespace hp
