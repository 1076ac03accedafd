// "Did you mean ...?" for names a user typed: flags, commands, schedules, device profiles, formats.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hp {

// The name of `names` nearest to `given` by edit distance (leading dashes and any "=value" are
// ignored on both sides, so flags compare by their names), when near enough to be a likely typo:
// at most max(2, |given| / 3) edits. "" otherwise.
std::string nearest_name(std::string_view given, const std::vector<std::string>& names);

// " (did you mean NAME?)" for the nearest name, or "" when none is near: for the end of a message.
std::string did_you_mean(std::string_view given, const std::vector<std::string>& names);

}  // namespace hp
