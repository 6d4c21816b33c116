// AVX-512 paths for f32 CPU kernels whose reference loop is too slow one element at a time
// (bob's update: AdamW, the cross-entropy backward). Compiled for AVX-512F by a function
// attribute and taken only when the CPU has it, so the library still runs on any x86-64.
//
// Rule: a path here computes exactly what its kernel's reference loop computes, lane by lane:
// the same IEEE operations in the same order (no fused multiply-add, no reassociation, no
// approximate reciprocals), so the bits agree with the reference on every input. Each function
// handles whole vectors of 16 and returns how many elements it did; the caller's reference loop
// does the rest.
#pragma once

// GCC 12 reports the undefined upper lanes its own AVX-512 intrinsics start from as
// uninitialized (GCC bug 105593); the warning is about the header, not about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>
#include <cstdint>

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::cpu::avx512 {

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
inline bool available() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#define TG_AVX512 __attribute__((target("avx512f")))
#else
inline bool available() { return false; }  // ASan builds check the reference loops only
#define TG_AVX512
#endif

// Note [adamw zero fast path]
// An element whose gradient, m and v are all +0 (a table row no input touched yet, the common
// case for an embedding) gets m = beta1*0 + (1-beta1)*0 = +0, v = +0 and
// w = w*decay - step_size*(0 / (sqrt(0)/bc2_sqrt + eps)) = w*decay - (+0) = w*decay, bit for bit,
// whenever beta1 and beta2 are finite, eps > 0, bc2_sqrt > 0 and step_size is finite and >= 0
// (then 0/bc2_sqrt = +0, 0/eps = +0, step_size * +0 = +0, and x - (+0) = x for every x, -0 and
// NaN included). A vector of 16 such elements therefore only needs w *= decay; m and v stay.
inline bool adamw_zero_fast_path_exact(const kernels::AdamWScalars& s) {
  return std::isfinite(s.beta1) && std::isfinite(s.beta2) && s.eps > 0 && s.bc2_sqrt > 0 &&
         std::isfinite(s.step_size) && s.step_size >= 0;
}

// The AdamW update of docs/bob.md, "Learner", over n elements (see cpu::adamw_step for the reference
// loop).
TG_AVX512 inline int64_t adamw_step(float* w, const float* g, float* m, float* v, int64_t n,
                                    const kernels::AdamWScalars& s) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  const __m512 decay = _mm512_set1_ps(1.0f - s.lr * s.weight_decay);
  const __m512 beta1 = _mm512_set1_ps(s.beta1), one_minus_beta1 = _mm512_set1_ps(1.0f - s.beta1);
  const __m512 beta2 = _mm512_set1_ps(s.beta2), one_minus_beta2 = _mm512_set1_ps(1.0f - s.beta2);
  const __m512 step_size = _mm512_set1_ps(s.step_size), bc2_sqrt = _mm512_set1_ps(s.bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(s.eps);
  const bool zero_fast_path = adamw_zero_fast_path_exact(s);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gi = _mm512_loadu_ps(g + i), mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
    __m512 wi = _mm512_mul_ps(_mm512_loadu_ps(w + i), decay);  // w = w * (1 - lr*wd)
    const __m512i any_bits = _mm512_or_si512(_mm512_castps_si512(gi),
                                             _mm512_or_si512(_mm512_castps_si512(mi), _mm512_castps_si512(vi)));
    if (zero_fast_path && _mm512_test_epi32_mask(any_bits, any_bits) == 0) {
      _mm512_storeu_ps(w + i, wi);
      continue;
    }
    const __m512 m_new = _mm512_add_ps(_mm512_mul_ps(beta1, mi), _mm512_mul_ps(one_minus_beta1, gi));
    const __m512 v_new = _mm512_add_ps(_mm512_mul_ps(beta2, vi), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, gi), gi));
    const __m512 denominator = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v_new), bc2_sqrt), eps);
    wi = _mm512_sub_ps(wi, _mm512_mul_ps(step_size, _mm512_div_ps(m_new, denominator)));
    _mm512_storeu_ps(w + i, wi);
    _mm512_storeu_ps(m + i, m_new);
    _mm512_storeu_ps(v + i, v_new);
  }
  return i;
#else
  (void)w, (void)g, (void)m, (void)v, (void)n, (void)s;
  return 0;
#endif
}

// w[j] = w[j] * s (AdamW's decay alone, on a block known to take the zero fast path).
TG_AVX512 inline int64_t scale_in_place(float* w, int64_t n, float s) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  const __m512 factor = _mm512_set1_ps(s);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(w + j, _mm512_mul_ps(_mm512_loadu_ps(w + j), factor));
  return j;
#else
  (void)w, (void)n, (void)s;
  return 0;
#endif
}

// Whether the first n16 = n - n % 16 elements of each of a and b are all +0 (every bit clear);
// the caller checks the rest.
TG_AVX512 inline bool all_zero_bits(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  __m512i any = _mm512_setzero_si512();
  for (int64_t j = 0; j + 16 <= n; j += 16)
    any = _mm512_or_si512(any, _mm512_or_si512(_mm512_castps_si512(_mm512_loadu_ps(a + j)),
                                                _mm512_castps_si512(_mm512_loadu_ps(b + j))));
  return _mm512_test_epi32_mask(any, any) == 0;
#else
  (void)a, (void)b, (void)n;
  return false;
#endif
}

// d[j] = (p[j] * s) * g when multiply, else (p[j] / s) * g (the cross-entropy backward's rows).
TG_AVX512 inline int64_t scale_row(const float* p, float* d, int64_t n, float s, bool multiply, float g) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  const __m512 scale = _mm512_set1_ps(s), gradient = _mm512_set1_ps(g);
  int64_t j = 0;
  if (multiply)
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(d + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + j), scale), gradient));
  else
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(d + j, _mm512_mul_ps(_mm512_div_ps(_mm512_loadu_ps(p + j), scale), gradient));
  return j;
#else
  (void)p, (void)d, (void)n, (void)s, (void)multiply, (void)g;
  return 0;
#endif
}

// o[j] = o[j] + s[j] (the gather backward's row adds).
TG_AVX512 inline int64_t add_row(float* o, const float* s, int64_t n) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(o + j, _mm512_add_ps(_mm512_loadu_ps(o + j), _mm512_loadu_ps(s + j)));
  return j;
#else
  (void)o, (void)s, (void)n;
  return 0;
#endif
}

// o[j] = 0 + s[j] (a row's first addition into a zero gradient: +0 + -0 is +0, as the add gives).
TG_AVX512 inline int64_t zero_plus_row(float* o, const float* s, int64_t n) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(o + j, _mm512_add_ps(_mm512_setzero_ps(), _mm512_loadu_ps(s + j)));
  return j;
#else
  (void)o, (void)s, (void)n;
  return 0;
#endif
}

// The largest of x[0..n), into *top, when n >= 16 and no x is NaN; otherwise returns false and
// the caller runs its own loop. Between +0 and -0 it may pick the other zero than a left-to-right
// loop would; softmax's results do not depend on that (Note [softmax max] in rows.cpp).
TG_AVX512 inline bool row_max(const float* x, int64_t n, float* top) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  if (n < 16) return false;
  __m512 best = _mm512_loadu_ps(x);
  __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
  int64_t j = 16;
  for (; j + 16 <= n; j += 16) {
    const __m512 xj = _mm512_loadu_ps(x + j);
    nan |= _mm512_cmp_ps_mask(xj, xj, _CMP_UNORD_Q);
    best = _mm512_max_ps(best, xj);
  }
  float result = _mm512_reduce_max_ps(best);
  for (; j < n; ++j) {
    if (std::isnan(x[j])) return false;
    result = x[j] > result ? x[j] : result;
  }
  if (nan) return false;
  *top = result;
  return true;
#else
  (void)x, (void)n, (void)top;
  return false;
#endif
}

}  // namespace tapegrad::cpu::avx512
