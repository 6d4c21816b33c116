// Tests that need something a machine may lack: named "[avx512] ..." (AVX-512F) or "[gpu] ..." (a
// CUDA device). A suite's main runs them through run_tests, so that they are never a silent pass:
//
//   test_x                  every test; those whose need is missing are left out, with one line
//   test_x --needs=NAME     only the [NAME] tests; exit 77 (meson's SKIP) when NAME is missing
//   test_x --without=NAME   every test but the [NAME] ones
//
// meson.build registers a suite twice where it has such tests: once --without=NAME (the rest) and
// once --needs=NAME, so a machine without it shows a SKIP, not a pass.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace tapegrad::testing {

struct Need {
  std::string name;    // the tag, without brackets
  bool available;
  std::string reason;  // why not, when not
};

inline int run_tests(int argc, char** argv, const char* suite, const std::vector<Need>& needs) {
  doctest::Context context;
  std::vector<char*> rest;
  std::string only, without;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--needs=", 0) == 0) only = arg.substr(8);
    else if (arg.rfind("--without=", 0) == 0) without = arg.substr(10);
    else rest.push_back(argv[i]);
  }
  context.applyCommandLine(static_cast<int>(rest.size()), rest.data());
  for (const Need& need : needs) {
    const std::string tag = "*[" + need.name + "]*";
    if (need.name == only) {
      if (!need.available) {
        std::printf("%s: SKIP: the [%s] tests need what this machine lacks: %s\n", suite, need.name.c_str(),
                    need.reason.c_str());
        return 77;
      }
      context.addFilter("test-case", tag.c_str());
    } else if (need.name == without || !need.available) {
      if (need.name != without)
        std::printf("%s: the [%s] tests are left out: %s\n", suite, need.name.c_str(), need.reason.c_str());
      context.addFilter("test-case-exclude", tag.c_str());
    }
  }
  std::fflush(stdout);
  return context.run();
}

// AVX-512F on this CPU and in this build (what the kernels' vector paths need: src/kernels/cpu/avx512.hpp).
inline Need avx512_need() {
#if defined(__SANITIZE_ADDRESS__)
  return {"avx512", false, "an AddressSanitizer build runs the reference loops only"};
#elif defined(__x86_64__)
  return {"avx512", __builtin_cpu_supports("avx512f") != 0, "this CPU has no AVX-512F"};
#else
  return {"avx512", false, "this CPU is not x86-64"};
#endif
}

}  // namespace tapegrad::testing
