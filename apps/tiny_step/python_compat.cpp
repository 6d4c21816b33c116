// Python-compatible numerics and strings (see python_compat.hpp): ports of CPython 3.11's
// float_repr_style 'r', float.__round__, _randommodule.c and the ensure_ascii JSON encoder.
//
// Rule: decimal conversions go through exact routines only (std::to_chars for shortest digits,
// glibc printf for exact decimal expansion, strtod for correctly rounded reading), so no result
// depends on an intermediate binary rounding. The process keeps the default "C" locale.
#include "python_compat.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::py {

namespace {

// Note [round with negative ndigits]
// printf has no negative precision, so |x| is split into its integer part w (exact: trunc) and
// whether a fraction remains. The decimal digits of w (exact with %.0f, w being an integer) are
// cut k places from the right; the cut-off tail decides: above 50...0 rounds up, below rounds
// down, equal rounds up if a fraction remains and half-even otherwise.
std::string rounded_to_power_of_ten(double x, int k) {
  const double whole = std::trunc(std::fabs(x));
  const bool has_fraction = std::fabs(x) != whole;
  char buf[400];  // DBL_MAX has 309 integer digits
  std::snprintf(buf, sizeof buf, "%.0f", whole);
  std::string digits = buf;
  const size_t places = static_cast<size_t>(k);
  if (digits.size() < places + 1) digits.insert(0, places + 1 - digits.size(), '0');
  const size_t keep = digits.size() - places;

  int tail_vs_half = digits[keep] - '5';  // compare the tail with 5 followed by zeros
  if (tail_vs_half == 0) {
    const bool rest_zero = digits.find_first_not_of('0', keep + 1) == std::string::npos;
    tail_vs_half = (!rest_zero || has_fraction) ? 1 : 0;
  }
  const bool last_odd = (digits[keep - 1] - '0') % 2 == 1;
  digits.resize(keep);
  if (tail_vs_half > 0 || (tail_vs_half == 0 && last_odd)) {  // add one at the last kept digit
    size_t i = keep;
    while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
    if (i == 0) digits.insert(0, 1, '1');
    else ++digits[i - 1];
  }
  return (std::signbit(x) ? "-" : "") + digits + "e" + std::to_string(k);
}

}  // namespace

double round(double x, int ndigits) {
  // CPython's limits: beyond 323 digits every double is already exact; below -308 every double
  // rounds to a signed zero.
  constexpr int kMaxDigits = 323;   // (DBL_MANT_DIG - DBL_MIN_EXP) * log10(2)
  constexpr int kMinDigits = -308;  // -(DBL_MAX_EXP + 1) * log10(2)
  if (!std::isfinite(x) || ndigits > kMaxDigits) return x;
  if (ndigits < kMinDigits) return 0.0 * x;

  std::string text;
  if (ndigits >= 0) {
    // glibc prints the exact binary value rounded half-even to ndigits places ("-0.00" keeps the sign).
    char buf[700];  // sign + 309 integer digits + point + 323 digits
    std::snprintf(buf, sizeof buf, "%.*f", ndigits, x);
    text = buf;
  } else {
    text = rounded_to_power_of_ten(x, -ndigits);  // Note [round with negative ndigits]
  }
  errno = 0;
  const double rounded = std::strtod(text.c_str(), nullptr);
  if (errno == ERANGE && std::fabs(rounded) >= 1.0)
    throw Error("[round] rounded value too large to represent: round(" + float_repr(x) + ", " +
                std::to_string(ndigits) + ")");
  return rounded;
}

// ---- random.Random ------------------------------------------------------------------------------

Random::Random(uint64_t seed_magnitude) {
  // CPython splits |seed| into 32-bit words, least significant first, and keeps at least one.
  const uint32_t key[2] = {static_cast<uint32_t>(seed_magnitude), static_cast<uint32_t>(seed_magnitude >> 32)};
  init_by_array(key, key[1] != 0 ? 2U : 1U);
}

Random Random::from_int(int64_t seed) {
  // Negate in unsigned arithmetic so that |INT64_MIN| = 2^63 does not overflow.
  const auto bits = static_cast<uint64_t>(seed);
  return Random(seed < 0 ? ~bits + 1 : bits);
}

void Random::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (size_t i = 1; i < kN; ++i)
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  index_ = kN;
}

void Random::init_by_array(const uint32_t* key, size_t key_length) {
  init_genrand(19650218U);
  size_t i = 1;
  size_t j = 0;
  for (size_t k = kN > key_length ? kN : key_length; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;  // the most significant bit is 1: a non-zero initial state
}

uint32_t Random::genrand_uint32() {
  constexpr uint32_t kUpper = 0x80000000U;
  constexpr uint32_t kLower = 0x7fffffffU;
  constexpr uint32_t kMag01[2] = {0x0U, 0x9908b0dfU};
  if (index_ >= kN) {  // generate the next kN words at once
    size_t kk = 0;
    for (; kk < kN - kM; ++kk) {
      const uint32_t y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ kMag01[y & 1U];
    }
    for (; kk < kN - 1; ++kk) {
      const uint32_t y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + kM - kN] ^ (y >> 1) ^ kMag01[y & 1U];
    }
    const uint32_t y = (mt_[kN - 1] & kUpper) | (mt_[0] & kLower);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ kMag01[y & 1U];
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);  // tempering
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

double Random::random() {
  const uint32_t a = genrand_uint32() >> 5;
  const uint32_t b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

double Random::uniform(double a, double b) { return a + (b - a) * random(); }

}  // namespace tapegrad::py
