// Python-compatible numerics for the tiny step: round(x, n) and random.Random(seed), bit-identical
// to CPython 3.11 (repr(float) and json.dumps' strings come from the library's JSON writer).
//
// Rule: these exist so that a C++ app prints exactly what the Python reference prints; every
// function is checked against CPython's own answers (tests/fixtures/gen_python_compat.py). Where
// CPython raises, we throw tapegrad::Error with the function in brackets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tapegrad/io/json_text.hpp"  // float_repr, json_string

namespace tapegrad::py {

// round(x, ndigits) for a float: the exact binary value of x rounded to a multiple of
// 10^-ndigits, half-even on exact ties (round(0.125, 2) == 0.12; round(2.675, 2) == 2.67 since
// 2.675 is stored as 2.67499999...). Negative ndigits round to tens, hundreds, ...; inf and nan
// come back unchanged. Throws tapegrad::Error when the result overflows, as CPython does.
double round(double x, int ndigits);

// random.Random(seed) for an integer seed: MT19937 seeded by init_by_array with the 32-bit
// little-endian words of |seed| (one word 0 for seed 0), exactly as CPython's random_seed does.
class Random {
 public:
  explicit Random(uint64_t seed_magnitude);
  // random.Random(seed) for any int64 seed: CPython seeds with |seed| (INT64_MIN included).
  static Random from_int(int64_t seed);

  uint32_t genrand_uint32();
  // random(): 53 random bits in [0, 1): (a * 2^26 + b) / 2^53 with a = 27 bits, b = 26 bits.
  double random();
  // uniform(a, b) = a + (b - a) * random(), as Python 3.11 writes it.
  double uniform(double a, double b);

 private:
  static constexpr size_t kN = 624;  // state words
  static constexpr size_t kM = 397;  // the recurrence's middle offset
  void init_genrand(uint32_t s);
  void init_by_array(const uint32_t* key, size_t key_length);

  std::array<uint32_t, kN> mt_{};
  size_t index_ = kN;  // next word of mt_ to temper; kN: generate a new block first
};

}  // namespace tapegrad::py
