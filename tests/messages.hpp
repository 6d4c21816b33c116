// Test helper shared by suites that check error messages whole: the message a call throws.
#pragma once

#include <functional>
#include <string>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::testing {

// The what() of the tapegrad::Error that f throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tapegrad::testing
