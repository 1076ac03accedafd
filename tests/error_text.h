// The message of the hp::Error a call throws ("" when it throws none), for tests that check what
// an error says.
#pragma once

#include <functional>
#include <string>

#include "util/error.h"

namespace hp::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace hp::test
