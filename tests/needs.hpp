// Tests that need something a machine may lack: named "[avx2] ..." (AVX2 with FMA), "[avx512] ..."
// (AVX-512F) or "[gpu] ..." (a CUDA device). A suite's main runs them through run_tests, so that
// they are never a silent pass:
//
//   test_x                    every test; those whose need is missing are left out, with one line
//   test_x --needs=NAME       only the [NAME] tests; exit 77 (meson's SKIP) when NAME is missing
//   test_x --without=NAME,..  every test but the [NAME] ones
//
// meson.build registers a suite twice where it has such tests: once --without=NAME (the rest) and
// once --needs=NAME, so a machine without it shows a SKIP, not a pass. A whole suite run with
// TAPEGRAD_CPU_PATH forcing a CPU path (src/kernels/cpu/simd.hpp) that is one of its needs, and
// missing, exits 77 too.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
  std::string only;
  std::vector<std::string> without;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--needs=", 0) == 0) {
      only = arg.substr(8);
    } else if (arg.rfind("--without=", 0) == 0) {
      for (size_t from = 10, comma; from <= arg.size(); from = comma + 1) {
        comma = std::min(arg.find(',', from), arg.size());
        without.push_back(arg.substr(from, comma - from));
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  context.applyCommandLine(static_cast<int>(rest.size()), rest.data());
  const char* forced = std::getenv("TAPEGRAD_CPU_PATH");
  for (const Need& need : needs) {
    if (forced && need.name == forced && !need.available) {
      std::printf("%s: SKIP: TAPEGRAD_CPU_PATH=%s forces the [%s] path, which this machine lacks: %s\n", suite, forced,
                  need.name.c_str(), need.reason.c_str());
      return 77;
    }
  }
  for (const Need& need : needs) {
    const std::string tag = "*[" + need.name + "]*";
    const bool left_out = std::find(without.begin(), without.end(), need.name) != without.end();
    if (need.name == only) {
      if (!need.available) {
        std::printf("%s: SKIP: the [%s] tests need what this machine lacks: %s\n", suite, need.name.c_str(),
                    need.reason.c_str());
        return 77;
      }
      context.addFilter("test-case", tag.c_str());
    } else if (left_out || !need.available) {
      if (!left_out)
        std::printf("%s: the [%s] tests are left out: %s\n", suite, need.name.c_str(), need.reason.c_str());
      context.addFilter("test-case-exclude", tag.c_str());
    }
  }
  std::fflush(stdout);
  return context.run();
}

// The CPU's vector paths, as src/kernels/cpu/simd.cpp decides them (tests/bob checks that the two
// agree): AVX2 with FMA, and AVX-512F, on this CPU and in this build.
inline Need cpu_path_need(const char* name, bool has, const char* lacking) {
#if defined(__SANITIZE_ADDRESS__)
  (void)has, (void)lacking;
  return {name, false, "an AddressSanitizer build runs the scalar path only"};
#elif defined(__x86_64__)
  return {name, has, lacking};
#else
  (void)has, (void)lacking;
  return {name, false, "this CPU is not x86-64"};
#endif
}
inline Need avx2_need() {
#if defined(__x86_64__)
  const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool has = false;
#endif
  return cpu_path_need("avx2", has, "this CPU lacks AVX2 or FMA");
}
inline Need avx512_need() {
#if defined(__x86_64__)
  const bool has = __builtin_cpu_supports("avx512f");
#else
  const bool has = false;
#endif
  return cpu_path_need("avx512", has, "this CPU lacks AVX-512F");
}

}  // namespace tapegrad::testing
