// hp::Error and the HP_CHECK macro: every failure in library code says what went wrong, the value
// that was wrong, and what to do. Only the CLI turns an Error into an exit code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws hp::Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace hp

// HP_CHECK(cond, "fmt", args...): always on (also in release builds).
#define HP_CHECK(cond, ...)          \
  do {                               \
    if (!(cond)) ::hp::fail(__VA_ARGS__); \
  } while (0)
