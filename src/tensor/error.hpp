// tapegrad errors: what a user did wrong (Error, thrown) and broken internal invariants (TG_CHECK, abort).
//
// Rule: user mistakes throw tapegrad::Error with the op in brackets, what is wrong, both shapes and a
// hint when there is an obvious fix: "[matmul] cannot multiply (3, 2) by (3, 2): inner sizes 2 and 3 differ".
// Internal invariants abort with file and line; they are bugs in tapegrad, not in the caller.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tapegrad {

// A mistake by the caller: bad shapes, bad indices, bad files, misuse of the tape.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A file or record that was refused (bad magic, CRC, identity, ...): apps exit 2 and leave it untouched.
struct RefusedFile : Error {
  using Error::Error;
};

// The device cannot run what was asked (no CUDA build, no device, out of device memory): apps exit 2.
struct DeviceError : Error {
  using Error::Error;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "tapegrad internal error: %s:%d: check failed: %s%s%s\n", file, line, expr,
               msg[0] ? ": " : "", msg);
  std::abort();
}

}  // namespace tapegrad

// Internal invariant; always on (also in release builds).
#define TG_CHECK(cond, msg)                                                   \
  do {                                                                        \
    if (!(cond)) ::tapegrad::check_failed(#cond, __FILE__, __LINE__, (msg));  \
  } while (0)
