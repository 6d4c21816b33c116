// The doctest main shared by the CPU suites: tests named "[avx512] ..." run where the CPU has
// AVX-512F and are otherwise left out, or SKIP with --needs=avx512 (tests/needs.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "needs.hpp"

int main(int argc, char** argv) {
  return tapegrad::testing::run_tests(argc, argv, argc > 0 ? argv[0] : "test", {tapegrad::testing::avx512_need()});
}
