// What every program's main shares (tiny_step, value_embed, bob, tape; header-only, so each
// includes it without a library): the documented exit codes for every way out, and validators that
// refuse a numeric option out of range by name.
//
// Exit codes (README.md, docs/bob.md "Exit codes"): 0 done (--help included); 2 bad input: a
// command-line error, a refusal (tapegrad::Error) or a size too large for memory (std::bad_alloc);
// 1 an internal failure (any other exception), or what the program's body returns.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <string>

#include "tapegrad/tensor/error.hpp"

namespace apps {

// Parses the command line, then runs `body` (its return value is the exit code), mapping the
// command line's errors and every exception to the codes above with "PROGRAM: message" on stderr.
inline int run_main(CLI::App& app, const char* program, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: the help on stdout
    std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", program, e.what());
    return 2;
  }
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: out of memory: the sizes asked for do not fit in this machine's memory\n", program);
    return 2;
  } catch (const tapegrad::Error& e) {  // also RefusedFile and DeviceError
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: internal failure: %s\n", program, e.what());
    return 1;
  }
}

// An integer option from lo to hi, checked on the text before CLI11 converts it (CLI11 reads "-1"
// into an unsigned option as 2^64 - 1): plain decimal digits with an optional leading '-'.
inline CLI::Validator integer_range(long long lo, unsigned long long hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const bool negative = !text.empty() && text[0] == '-';
        const std::string digits = negative ? text.substr(1) : text;
        bool ok = !digits.empty() && digits.size() <= 20 && digits.find_first_not_of("0123456789") == std::string::npos;
        if (ok) {
          errno = 0;
          if (negative) {
            const long long v = std::strtoll(text.c_str(), nullptr, 10);
            ok = errno == 0 && v >= lo;
          } else {
            const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
            ok = errno == 0 && v <= hi && (lo <= 0 || v >= static_cast<unsigned long long>(lo));
          }
        }
        return ok ? std::string() : "must be " + range + ", got '" + text + "'";
      },
      range);
}

// A positive finite number that stays positive and finite as a float (a learning rate).
inline CLI::Validator positive_float() {
  const std::string what = "a positive finite number";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(v) && v > 0 &&
                        v <= std::numeric_limits<float>::max() && v >= std::numeric_limits<float>::min();
        return ok ? std::string() : "must be " + what + " (as a float), got '" + text + "'";
      },
      what);
}

}  // namespace apps
