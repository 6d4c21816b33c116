// The f32 softmax's exponentials, their sum and the division by it, 8 and 16 lanes at a time
// (AVX-512F), giving the bits of the scalar loop they stand in for: y[j] = expf(x[j] - top),
// total = sum of the y[j] left to right in double, y[j] = (float)(y[j] / total).
//
// Note [vectorized expf]
// The scalar loop calls the C library's expf. On x86-64 glibc (2.28 and later) that is the
// algorithm of sysdeps/ieee754/flt-32/e_expf.c, and on every CPU with AVX-512 glibc picks its
// FMA build (__expf_fma): for |x| < 88 it computes, in double,
//   kd' = fma(InvLn2N, x, SHIFT); ki = bits(kd'); kd = kd' - SHIFT; r = fma(InvLn2N, x, -kd)
//   s = bits-as-double(T[ki % 32] + (ki << 47))
//   y = fma(fma(r, C0, C1), r*r, fma(r, C2, 1)) * s,   rounded once to float,
// with the constants and the 32-entry table below (read from glibc's __exp2f_data). exp_row does
// exactly these operations per lane and hands every other lane (|x| >= 88, inf, NaN) to the
// scalar function. Because a different C library (or a future glibc) may compute expf otherwise,
// the vector path is used only after it reproduced the scalar function bit for bit on a sample of
// inputs (reproduces()); otherwise the scalar loop runs, as it always does without AVX-512.
//
// Note [exact f32 sums]
// The scalar loop adds the y[j] left to right in double; another order gives the same double
// when every partial sum is exact. Each y is a float in (0, 1] (x - top <= 0); if every y is at
// least 2^e, each is a multiple of 2^(e - 23), so is every partial sum of any subset, and such a
// sum is at most m. All are then exact in double as long as m * 2^(23 - e) <= 2^53, that is
// e >= ceil(log2 m) - 30 (2^-22 for 256 classes, exp(-15.2)). sum_if_exact checks that bound and
// adds in vector order; a row with a smaller (or NaN) y goes to sum_blocks.
//
// Note [block sums]
// A sharply trained row has most exponentials far below its largest, so sum_if_exact's bound
// fails; yet adding such a y to the running sum s changes nothing. sum_blocks goes left to right
// in blocks of 32. With s in the binade [2^E, 2^(E+1)), where a double's last bit is U = 2^(E-52):
// - y < U/2 leaves s unchanged (s + y rounds back to s), and so it does as s grows (U only grows);
// - a float y >= 2^(F-29) has its last bit at or above 2^(F-29-23) = 2^(F-52), for any F.
// Let the block's large values be those >= 2^(E-29), T = s + their sum, and F the binade of T.
// (Small means 0 <= y < U/2: a negative y is neither, and its block takes the loop.)
// When every y of the block is small or large, every large y is >= 2^(F-29), and s is a multiple
// of 2^(F-52), then every sum of s and large values is a multiple of 2^(F-52) no larger than T <
// 2^(F+1): exact in double, in any order. The left-to-right loop therefore adds the large values
// exactly and skips the small ones, and s plus their vector sum is its result. The vector sum
// tells F itself: had some partial sum reached 2^(F+1), it would have rounded to at least that
// (2^(F+1) is a double) and so would the total. Any other block (a y in between, a NaN, an
// infinity) runs the left-to-right loop itself, so every row gets the loop's bits; but that loop
// leaves out the small y (0 <= y < U/2 with U taken at the block's start): each would leave s
// unchanged, since s only grows (a block with a negative y, which may lower s, adds every value).
// On a sharply trained row most of a block is small and only its few middle and large values wait
// on the 4-cycle chain of additions, picked from a mask without a branch per value.
// Blocks still wait on each other (a block's thresholds come from the s the last one left), so
// each time s enters a new binade E, sum_blocks first tries the rest of the row at once: if every
// remaining y is small or large for E and T = s + (their large values' sum) is still in binade E,
// every partial sum of the loop lies in [s, T], a multiple of 2^(E-52) below 2^(E+1): exact, so the
// loop's result is T, which the vector sum computes exactly in any order. It is tried only once s
// is in the binade a sum of the row in any order ends in (before that it would fail). A sharp
// softmax row reaches that binade at its top value (y = 1) and typically passes there, one pass
// instead of a chain of blocks; if it does not, the blocks go on as above.
//
// Note [division by the total]
// y / total (y a float, total a double >= 1, the quotient rounded to double and then to float)
// costs a double division per element. divide_row multiplies by r = 1/total instead: r is within
// half an ulp of 1/total and q = y * r within another half, so q and the correctly rounded
// quotient are less than 4 ulps (of double) apart. Rounding to float then gives them the same
// value unless a float rounding boundary (a midpoint between two floats) lies within those 4 ulps:
// the 29 bits a float drops are then within 4 of 2^28. Lanes within 8 of it, and lanes whose
// quotient is below 2^-125 (where floats are subnormal and round elsewhere) or not finite, divide.
#pragma once

#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tapegrad/kernels/cpu/avx512.hpp"

namespace tapegrad::cpu::avx512 {

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)

namespace expf_constants {
inline constexpr double inv_ln2_n = 0x1.71547652b82fep+5;  // 32 / ln 2
inline constexpr double shift = 0x1.8p+52;
inline constexpr double c0 = 0x1.c6af84b912394p-20, c1 = 0x1.ebfce50fac4f3p-13, c2 = 0x1.62e42ff0c52d6p-6;
// T[i] = bits(2^(i/32)) - (i << 47)
alignas(64) inline constexpr uint64_t table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
}  // namespace expf_constants

// glibc's expf main path on 8 lanes; lanes with |x| >= 88 (or inf, NaN) are set in *special.
TG_AVX512 inline __m256 expf8(__m256 x, __mmask8* special) {
  namespace k = expf_constants;
  const __m256i abs_top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  const __m256i at_least_88 = _mm256_cmpgt_epi32(abs_top, _mm256_set1_epi32(0x42a));  // top12(88.0f) = 0x42b
  *special = static_cast<__mmask8>(_mm256_movemask_ps(_mm256_castsi256_ps(at_least_88)));
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv_ln2_n = _mm512_set1_pd(k::inv_ln2_n), shift = _mm512_set1_pd(k::shift);
  const __m512d kd_shifted = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d kd = _mm512_sub_pd(kd_shifted, shift);
  const __m512d r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
  const __m512i index = _mm512_and_si512(ki, _mm512_set1_epi64(31));
  const __m512i* table = reinterpret_cast<const __m512i*>(k::table);
  const __m512i low = _mm512_permutex2var_epi64(_mm512_load_si512(table), index, _mm512_load_si512(table + 1));
  const __m512i high = _mm512_permutex2var_epi64(_mm512_load_si512(table + 2), index, _mm512_load_si512(table + 3));
  const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(index, _mm512_set1_epi64(16)), low, high);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
  const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(k::c0), _mm512_set1_pd(k::c1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(k::c2), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

// y[j] = scalar_exp(x[j] - top) for whole vectors of 8 (the vector path for the main lanes, the
// scalar function for the others); returns how many it did, the caller does the rest.
TG_AVX512 inline int64_t exp_row(const float* x, float top, float* y, int64_t n, float (*scalar_exp)(float)) {
  const __m256 shift_by = _mm256_set1_ps(top);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), shift_by);
    __mmask8 special = 0;
    _mm256_storeu_ps(y + j, expf8(d, &special));
    for (int lane = 0; special != 0; ++lane, special >>= 1)
      if (special & 1) y[j + lane] = scalar_exp(x[j + lane] - top);
  }
  return j;
}

// Whether exp_row gives scalar_exp's bits: checked once per function on 4,096 inputs spread over
// the bit patterns of [-104, 0] (the shifted logits' range, subnormal results included) plus a
// few positive ones.
inline bool reproduces(float (*scalar_exp)(float)) {
  constexpr size_t count = 4096, spread = count - 16;  // a multiple of 8: exp_row does them all
  std::vector<float> x(count), have(count);
  const uint32_t from = std::bit_cast<uint32_t>(-0.0f), to = std::bit_cast<uint32_t>(-104.0f);
  for (size_t i = 0; i < spread; ++i) x[i] = std::bit_cast<float>(static_cast<uint32_t>(from + uint64_t{to - from} * i / spread));
  for (size_t i = spread; i < count; ++i) x[i] = static_cast<float>(i - spread) * 0.37f;
  exp_row(x.data(), 0.0f, have.data(), static_cast<int64_t>(count), scalar_exp);
  for (size_t i = 0; i < count; ++i)
    if (std::bit_cast<uint32_t>(scalar_exp(x[i])) != std::bit_cast<uint32_t>(have[i])) return false;
  return true;
}

// The sum of y[0..m) in double when Note [exact f32 sums] proves every order gives the same
// value; otherwise returns false and leaves the sum to the caller's loop.
TG_AVX512 inline bool sum_if_exact(const float* y, int64_t m, double* total) {
  if (m < 16 || m > (int64_t{1} << 24)) return false;
  const int smallest_exponent = static_cast<int>(std::ceil(std::log2(static_cast<double>(m)))) - 30;
  const __m512 low = _mm512_set1_ps(std::ldexp(1.0f, smallest_exponent)), one = _mm512_set1_ps(1.0f);
  __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
  __mmask16 in_range = 0xffff;
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const __m512 v = _mm512_loadu_ps(y + j);
    in_range &= _mm512_cmp_ps_mask(v, low, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, one, _CMP_LE_OQ);
    a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  if (in_range != 0xffff) return false;
  double sum = _mm512_reduce_add_pd(_mm512_add_pd(a, b));
  for (; j < m; ++j) {
    if (!(y[j] >= std::ldexp(1.0f, smallest_exponent) && y[j] <= 1.0f)) return false;
    sum += y[j];
  }
  *total = sum;
  return true;
}

// y[k..k+16) widened to two vectors of 8 doubles; lanes at or past n load as +0, and `valid` has
// a bit for each lane before n (bit i of lo, bit 8 + i of hi).
struct Sixteen {
  __m512d lo, hi;
  __mmask16 valid;
};
TG_AVX512 inline Sixteen load_sixteen(const float* y, int64_t k, int64_t n) {
  const __mmask16 valid = n - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - k)) - 1);
  const __m512 both = _mm512_maskz_loadu_ps(valid, y + k);
  return {_mm512_cvtps_pd(_mm512_castps512_ps256(both)),
          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(both), 1))), valid};
}

// The lanes of v that cannot change a sum whose half ulp is `small`: 0 <= v < small (Note [block sums]).
TG_AVX512 inline __mmask8 small_lanes(__m512d v, __m512d small) {
  return _mm512_cmp_pd_mask(v, small, _CMP_LT_OQ) & _mm512_cmp_pd_mask(v, _mm512_setzero_pd(), _CMP_GE_OQ);
}

// The left-to-right double sum of y[0..m) (floats), in blocks of 32 (the last one shorter) where
// Note [block sums] proves a block's result, one by one elsewhere.
TG_AVX512 inline double sum_blocks(const float* y, int64_t m) {
  auto binade = [](double x) { return static_cast<int>((std::bit_cast<uint64_t>(x) >> 52) & 0x7ff) - 1023; };
  auto power_of_two = [](int e) { return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52); };
  double s = 0.0;
  int64_t j = 0;
  for (; j < m && s == 0.0; ++j) s += y[j];  // up to the first nonzero value (0 has no binade)
  // The binade the total will end in, from a sum in any order (close enough to say which binade,
  // and only used to choose when to try the rest of the row: a wrong guess costs a pass, no bits).
  __m512d approx = _mm512_setzero_pd();
  for (int64_t k = j; k < m; k += 16) {
    const Sixteen x = load_sixteen(y, k, m);
    approx = _mm512_add_pd(approx, _mm512_add_pd(x.lo, x.hi));
  }
  const int final_binade = binade(s + _mm512_reduce_add_pd(approx));
  int tried = INT_MIN;  // the binade of s for which the rest of the row was tried at once
  for (; j < m; j += 32) {
    const int64_t count = m - j < 32 ? m - j : 32;
    if (!(s >= 0x1p-900 && s <= 0x1p900)) {  // far outside a softmax's sums, NaN
      for (int64_t k = 0; k < count; ++k) s += y[j + k];
      continue;
    }
    const int e = binade(s);
    const __m512d small = _mm512_set1_pd(power_of_two(e - 53)), large = _mm512_set1_pd(power_of_two(e - 29));
    if (e != tried && e == final_binade) {  // the rest of the row in one pass, if it stays in this binade
      tried = e;
      __m512d rest = _mm512_setzero_pd();
      bool classified = true;
      for (int64_t k = j; k < m; k += 16) {  // lanes past the end load as +0: small
        const Sixteen x = load_sixteen(y, k, m);
        for (const __m512d v : {x.lo, x.hi}) {
          const __mmask8 is_large = _mm512_cmp_pd_mask(v, large, _CMP_GE_OQ);
          classified = classified && (is_large | small_lanes(v, small)) == 0xff;
          rest = _mm512_mask_add_pd(rest, is_large, rest, v);
        }
      }
      if (classified) {
        const double total = s + _mm512_reduce_add_pd(rest);
        if (binade(total) == e) return total;
      }
    }
    __m512d sum = _mm512_setzero_pd(), least = _mm512_set1_pd(INFINITY);
    bool classified = true, negative = false;
    uint32_t keep = 0;  // the values that can change s: not small (a NaN is kept)
    for (int64_t k = 0; k < count; k += 16) {  // lanes past the end load as +0: small, and not there
      const Sixteen x = load_sixteen(y + j, k, count);
      for (int half = 0; half < 2; ++half) {
        const __m512d v = half ? x.hi : x.lo;
        const __mmask8 is_large = _mm512_cmp_pd_mask(v, large, _CMP_GE_OQ), is_small = small_lanes(v, small);
        classified = classified && (is_large | is_small) == 0xff;
        negative = negative || _mm512_cmp_pd_mask(v, _mm512_setzero_pd(), _CMP_LT_OQ) != 0;
        keep |= static_cast<uint32_t>(static_cast<__mmask8>(x.valid >> (8 * half)) & ~is_small) << (k + 8 * half);
        sum = _mm512_mask_add_pd(sum, is_large, sum, v);
        least = _mm512_mask_min_pd(least, is_large, least, v);
      }
    }
    bool exact = false;
    if (classified) {  // the vector sum, when the large values' sum is exact (the reductions only here)
      const double next = s + _mm512_reduce_add_pd(sum);
      exact = next <= 0x1p900;
      if (exact && binade(next) != e) {  // T in a higher binade F: its last bit 2^(F-52) must divide all
        const int f = binade(next);
        exact = f - e <= 52 && _mm512_reduce_min_pd(least) >= power_of_two(f - 29) &&
                (std::bit_cast<uint64_t>(s) & ((uint64_t{1} << (f - e)) - 1)) == 0;
      }
      if (exact) s = next;
    }
    if (!exact) {
      if (negative) {  // s may decrease: every value, in order
        for (int64_t k = 0; k < count; ++k) s += y[j + k];
      } else {  // the loop over the values that can change s
        for (; keep != 0; keep &= keep - 1) s += y[j + std::countr_zero(keep)];
      }
    }
  }
  return s;
}

// y[j] = (float)(y[j] / total) for whole vectors of 8 (Note [division by the total]); returns how
// many it did (0 when total is not in [1, 2^1000]), the caller divides the rest.
TG_AVX512 inline int64_t divide_row(float* y, int64_t m, double total) {
  if (!(total >= 1.0 && total <= 0x1p1000)) return 0;
  const __m512d t = _mm512_set1_pd(total), r = _mm512_set1_pd(1.0 / total);
  const __m512i low_bits = _mm512_set1_epi64((int64_t{1} << 29) - 1), midpoint = _mm512_set1_epi64(int64_t{1} << 28);
  const __m512i margin = _mm512_set1_epi64(8);
  const __m512d smallest = _mm512_set1_pd(0x1p-125), huge = _mm512_set1_pd(0x1p1000);
  int64_t j = 0;
  for (; j + 8 <= m; j += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(y + j));
    __m512d q = _mm512_mul_pd(v, r);
    const __m512i dropped = _mm512_and_si512(_mm512_castpd_si512(q), low_bits);
    const __m512i distance = _mm512_abs_epi64(_mm512_sub_epi64(dropped, midpoint));
    const __mmask8 safe = _mm512_cmp_epi64_mask(distance, margin, _MM_CMPINT_GT) &
                          _mm512_cmp_pd_mask(q, smallest, _CMP_GE_OQ) & _mm512_cmp_pd_mask(q, huge, _CMP_LE_OQ);
    if (safe != 0xff) q = _mm512_mask_div_pd(q, static_cast<__mmask8>(~safe), v, t);
    _mm256_storeu_ps(y + j, _mm512_cvtpd_ps(q));
  }
  return j;
}

#else

inline double sum_blocks(const float* y, int64_t m) {
  double s = 0.0;
  for (int64_t j = 0; j < m; ++j) s += y[j];
  return s;
}
inline int64_t divide_row(float*, int64_t, double) { return 0; }
inline int64_t exp_row(const float*, float, float*, int64_t, float (*)(float)) { return 0; }
inline bool reproduces(float (*)(float)) { return false; }
inline bool sum_if_exact(const float*, int64_t, double*) { return false; }

#endif

}  // namespace tapegrad::cpu::avx512
