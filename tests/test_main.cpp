// The doctest main shared by the CPU suites: tests named "[avx2] ..." or "[avx512] ..." run where
// the CPU has that vector path and are otherwise left out, or SKIP with --needs=avx2 or
// --needs=avx512; a suite forced onto a missing path by TAPEGRAD_CPU_PATH SKIPs (tests/needs.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "needs.hpp"

int main(int argc, char** argv) {
  using namespace tapegrad::testing;
  return run_tests(argc, argv, argc > 0 ? argv[0] : "test", {avx2_need(), avx512_need()});
}
