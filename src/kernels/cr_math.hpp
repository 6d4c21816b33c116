// cr_math: correctly rounded exp and log of doubles (every function is __host__ __device__ under
// nvcc), used by the CUDA kernels' f64 exp and log and by the tests that check them.
//
// Rule: cr_exp(x) and cr_log(x) are the exact results rounded once to nearest-even, so they do
// not depend on the device or the compiler. Which device uses what, and why the CPU keeps the C
// library's: Note [exp and log on each device]. Compile without FMA
// contraction (-ffp-contract=off, nvcc --fmad=false): the explicit fma() calls below are the only
// fused operations, and they are exact by construction.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TG_HD __host__ __device__
#else
#define TG_HD
#endif

namespace tapegrad {

// Note [exp and log on each device]
// The tiny step's trace must equal the Python reference's byte for byte, and one of its lines,
// floor(log10(max gradient error)), can move when a single loss in the central differences moves
// by one ulp. So the CPU's f64 kernels call the C library's exp and log: the very functions the
// reference calls through Python on the same machine, whichever x86-64 variant (FMA or SSE2)
// glibc picks there. That makes CPU-versus-Python parity hold by construction.
// The GPU cannot call glibc. CUDA's own exp and log are 1-ulp functions, so the CUDA kernels use
// these correctly rounded ones instead: they equal glibc wherever glibc rounds correctly, which
// measured against a 113-bit reference is all but about 1 call in 1,300 (exp) and 1 in 2,800
// (log). Where glibc is one ulp off, CPU and CUDA f64 results can differ by that ulp; on the
// GPU every tiny_step trace we compare (the shipped one, --overwrite-bug, 25 configs) was
// identical on both devices (scripts/gpu_check.sh checks it on every GPU run). Choosing correctly rounded functions on the
// CPU too would make the devices agree always but let the CPU drift from the reference wherever
// glibc misrounds; the reference is the contract, so the CPU keeps glibc.
//
// Method: double-double arithmetic (a value is hi + lo with |lo| <= ulp(hi)/2; the sums and
// products are the error-free transformations of Dekker and Knuth), carried to a relative error
// near 2^-100 before the one final rounding. Results within about 2^-100 of a rounding midpoint
// could round the wrong way; none is known among inputs that occur in practice, and CPU and GPU
// compute the same bits either way, because they run this same code.

namespace cr_detail {

struct DD {
  double hi, lo;
};

TG_HD inline DD two_sum(double a, double b) {  // a + b exactly
  const double s = a + b;
  const double bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
TG_HD inline DD fast_two_sum(double a, double b) {  // a + b exactly, needs |a| >= |b|
  const double s = a + b;
  return {s, b - (s - a)};
}
TG_HD inline DD two_prod(double a, double b) {  // a * b exactly
  const double p = a * b;
  return {p, std::fma(a, b, -p)};
}
TG_HD inline DD add(DD a, DD b) {
  DD s = two_sum(a.hi, b.hi);
  const DD t = two_sum(a.lo, b.lo);
  s = fast_two_sum(s.hi, s.lo + t.hi);
  return fast_two_sum(s.hi, s.lo + t.lo);
}
TG_HD inline DD add(DD a, double b) {
  const DD s = two_sum(a.hi, b);
  return fast_two_sum(s.hi, s.lo + a.lo);
}
TG_HD inline DD mul(DD a, DD b) {
  const DD p = two_prod(a.hi, b.hi);
  return fast_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}
TG_HD inline DD mul(DD a, double b) {
  const DD p = two_prod(a.hi, b);
  return fast_two_sum(p.hi, p.lo + a.lo * b);
}
TG_HD inline DD div(DD a, double b) {  // two quotient digits, the second from the remainder of the first
  const double q1 = a.hi / b;
  const DD p = two_prod(q1, b);
  const double q2 = (((a.hi - p.hi) - p.lo) + a.lo) / b;  // a.hi - p.hi is exact (Sterbenz)
  return fast_two_sum(q1, q2);
}
TG_HD inline DD div(DD a, DD b) {  // three quotient digits, each from the remainder of the last
  const double q1 = a.hi / b.hi;
  DD r = add(a, mul(b, -q1));
  const double q2 = r.hi / b.hi;
  r = add(r, mul(b, -q2));
  const double q3 = r.hi / b.hi;
  return add(fast_two_sum(q1, q2), q3);
}

TG_HD inline uint64_t bits_of(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
TG_HD inline double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// ln 2 = kLn2A + kLn2B + kLn2C to about 137 bits; A and B have 42 significant bits, so k * A and
// k * B are exact for every |k| < 2^11 (all the exponents a double can have).
constexpr double kLn2A = 0x1.62e42fefa3800p-1;
constexpr double kLn2B = 0x1.ef35793c76000p-45;
constexpr double kLn2C = 0x1.cc01f97b57a08p-87;
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
constexpr uint64_t kInfBits = 0x7ff0000000000000ULL, kNanBits = 0x7ff8000000000000ULL;

// k * ln 2 as a double-double.
TG_HD inline DD k_ln2(double k) { return add(two_sum(k * kLn2A, k * kLn2B), two_prod(k, kLn2C)); }

// Rounds (v.hi + v.lo) * 2^k to the nearest multiple of 2^-1074 (ties to even) and returns it:
// the correctly rounded result when it is subnormal. c is that spacing in units of v.
TG_HD inline double round_subnormal(DD v, int k) {
  const double c = std::ldexp(1.0, -1074 - k);
  const double big = 0x1.8p52 * c;  // ulp(big) == c, so hi + big rounds hi to a multiple of c
  double s = (v.hi + big) - big;
  const double dropped = v.hi - s;  // exact, |dropped| <= c/2
  const double above = (dropped - 0.5 * c) + v.lo;  // sign of (v - (s + c/2)), exact up to the last add
  const double below = (dropped + 0.5 * c) + v.lo;  // sign of (v - (s - c/2))
  const bool s_odd = std::fmod(s / c, 2.0) != 0.0;
  if (above > 0.0 || (above == 0.0 && s_odd)) s += c;
  else if (below < 0.0 || (below == 0.0 && s_odd)) s -= c;
  return std::ldexp(s, k);  // exact: s * 2^k is a multiple of 2^-1074 no larger than 2^-1022
}

}  // namespace cr_detail

// e^x rounded to nearest. x = k ln2 + r with |r| <= ln2/2 (r as a double-double), e^r by the
// nested Taylor form 1 + r(1 + r/2(1 + r/3(... (1 + r/27)))), whose truncation is below 2^-130.
TG_HD inline double cr_exp(double x) {
  using namespace cr_detail;
  if (x != x) return x + x;       // nan
  if (x > 710.0) return from_bits(kInfBits);  // beyond ln(DBL_MAX) = 709.78...: overflows
  if (x < -746.0) return 0.0;      // below ln(2^-1075) = -745.13...: rounds to +0
  const double k = std::rint(x * kInvLn2);
  const DD kc = two_prod(k, kLn2C);
  const DD r = add(two_sum(x - k * kLn2A, -k * kLn2B), DD{-kc.hi, -kc.lo});  // x - k A is exact (Sterbenz)
  DD p{1.0, 0.0};
  for (int n = 27; n >= 1; --n) p = add(mul(div(r, static_cast<double>(n)), p), 1.0);
  const int ki = static_cast<int>(k);
  if (ki <= -1022) return round_subnormal(p, ki);
  return std::ldexp(p.hi, ki);  // exact scaling; overflows to inf exactly when the rounded value does
}

// log(x) rounded to nearest. x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s),
// s = (m - 1)/(m + 1), |s| <= 0.172, by the series 2s(1 + s^2/3 + s^4/5 + ... + s^44/45),
// whose truncation is below 2^-112; then e ln2 + log m.
TG_HD inline double cr_log(double x) {
  using namespace cr_detail;
  if (x != x) return x + x;             // nan
  if (x < 0.0) return from_bits(kNanBits);  // log of a negative number
  if (x == 0.0) return -from_bits(kInfBits);
  if (x == from_bits(kInfBits)) return x;
  int e = 0;
  if (x < 0x1p-1022) {  // subnormal: scale into the normal range first
    x *= 0x1p54;
    e = -54;
  }
  const uint64_t u = bits_of(x);
  e += static_cast<int>((u >> 52) & 0x7ff) - 1022;
  double m = from_bits((u & 0x000fffffffffffffULL) | 0x3fe0000000000000ULL);  // [0.5, 1)
  if (m < kSqrtHalf) {
    m *= 2.0;
    e -= 1;
  }
  if (e == 0 && m == 1.0) return 0.0;
  const DD s = div(DD{m - 1.0, 0.0}, two_sum(m, 1.0));  // m - 1 is exact (Sterbenz)
  const DD t = mul(s, s);
  DD series = div(DD{1.0, 0.0}, 45.0);
  for (int j = 21; j >= 0; --j) series = add(mul(series, t), div(DD{1.0, 0.0}, 2.0 * j + 1.0));
  const DD log_m = mul(mul(s, series), 2.0);
  return add(k_ln2(static_cast<double>(e)), log_m).hi;
}

}  // namespace tapegrad
