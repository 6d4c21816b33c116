// The AVX2 path of simd.hpp (with FMA, which every AVX2 CPU but a few early VIA ones has): the
// lanes simd_paths.inc is written against, as 8 f32 / 4 f64 lanes whose masks are vectors of all-
// ones lanes, and the paths compiled for them. Every function carries target("avx2,fma") (Note
// [cpu paths]); simd.cpp calls these only where the CPU has both.
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "tapegrad/kernels/cpu/simd.hpp"

#if defined(__x86_64__)

#include <immintrin.h>

namespace tapegrad::cpu::simd {
namespace {

#define TG_TARGET __attribute__((target("avx2,fma")))

constexpr Path path = Path::avx2;
constexpr int kF = 8, kD = 4;
using F = __m256;
using H = __m128;
using D = __m256d;
using I = __m256i;
using FMask = __m256;   // lanes of all ones or all zeros
using DMask = __m256d;

// f32, 8 lanes
TG_TARGET inline F setf(float x) { return _mm256_set1_ps(x); }
TG_TARGET inline F loadf(const float* p) { return _mm256_loadu_ps(p); }
TG_TARGET inline void storef(float* p, F x) { _mm256_storeu_ps(p, x); }
TG_TARGET inline F load_first(const float* p, int64_t n) {
  if (n >= kF) return _mm256_loadu_ps(p);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes));
}
TG_TARGET inline F add(F a, F b) { return _mm256_add_ps(a, b); }
TG_TARGET inline F sub(F a, F b) { return _mm256_sub_ps(a, b); }
TG_TARGET inline F mul(F a, F b) { return _mm256_mul_ps(a, b); }
TG_TARGET inline F div(F a, F b) { return _mm256_div_ps(a, b); }
TG_TARGET inline F sqrt(F a) { return _mm256_sqrt_ps(a); }
TG_TARGET inline F max(F a, F b) { return _mm256_max_ps(a, b); }
TG_TARGET inline float reduce_max(F a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
TG_TARGET inline F bits_or(F a, F b) { return _mm256_or_ps(a, b); }
TG_TARGET inline bool all_bits_clear(F a) { return _mm256_testz_si256(_mm256_castps_si256(a), _mm256_castps_si256(a)); }
TG_TARGET inline FMask ge(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
TG_TARGET inline FMask le(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
TG_TARGET inline FMask unordered(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
TG_TARGET inline FMask every_lane() { return _mm256_castsi256_ps(_mm256_set1_epi32(-1)); }
TG_TARGET inline FMask mask_and(FMask a, FMask b) { return _mm256_and_ps(a, b); }
TG_TARGET inline FMask mask_or(FMask a, FMask b) { return _mm256_or_ps(a, b); }
TG_TARGET inline bool all(FMask a) { return _mm256_movemask_ps(a) == 0xff; }
TG_TARGET inline bool any(FMask a) { return _mm256_movemask_ps(a) != 0; }
TG_TARGET inline D widen_low(F a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
TG_TARGET inline D widen_high(F a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }

// f32, 4 lanes (the expf's and the division's inputs and outputs)
TG_TARGET inline H seth(float x) { return _mm_set1_ps(x); }
TG_TARGET inline H loadh(const float* p) { return _mm_loadu_ps(p); }
TG_TARGET inline void storeh(float* p, H x) { _mm_storeu_ps(p, x); }
TG_TARGET inline H sub(H a, H b) { return _mm_sub_ps(a, b); }
TG_TARGET inline D widen(H a) { return _mm256_cvtps_pd(a); }
TG_TARGET inline H narrow(D a) { return _mm256_cvtpd_ps(a); }
// The lanes whose |x| is at least 88 (or inf, NaN), from the top 12 bits as glibc tests them.
TG_TARGET inline unsigned at_least_88(H x) {
  const __m128i abs_top = _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(x), 20), _mm_set1_epi32(0x7ff));
  const __m128i at_least = _mm_cmpgt_epi32(abs_top, _mm_set1_epi32(0x42a));  // top12(88.0f) = 0x42b
  return static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(at_least)));
}

// f64, 4 lanes
TG_TARGET inline D setd(double x) { return _mm256_set1_pd(x); }
TG_TARGET inline D add(D a, D b) { return _mm256_add_pd(a, b); }
TG_TARGET inline D sub(D a, D b) { return _mm256_sub_pd(a, b); }
TG_TARGET inline D mul(D a, D b) { return _mm256_mul_pd(a, b); }
TG_TARGET inline D div(D a, D b) { return _mm256_div_pd(a, b); }
TG_TARGET inline D fmadd(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
TG_TARGET inline D fmsub(D a, D b, D c) { return _mm256_fmsub_pd(a, b, c); }
TG_TARGET inline double reduce_add(D a) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
TG_TARGET inline double reduce_min(D a) {
  const __m128d s = _mm_min_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_min_sd(s, _mm_unpackhi_pd(s, s)));
}
TG_TARGET inline DMask ge(D a, D b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
TG_TARGET inline DMask le(D a, D b) { return _mm256_cmp_pd(a, b, _CMP_LE_OQ); }
TG_TARGET inline DMask lt(D a, D b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
TG_TARGET inline DMask mask_and(DMask a, DMask b) { return _mm256_and_pd(a, b); }
TG_TARGET inline DMask mask_or(DMask a, DMask b) { return _mm256_or_pd(a, b); }
TG_TARGET inline bool all(DMask a) { return _mm256_movemask_pd(a) == 0xf; }
TG_TARGET inline bool any(DMask a) { return _mm256_movemask_pd(a) != 0; }
TG_TARGET inline unsigned lane_bits(DMask a) { return static_cast<unsigned>(_mm256_movemask_pd(a)); }
TG_TARGET inline D select(DMask m, D a, D b) { return _mm256_blendv_pd(b, a, m); }
TG_TARGET inline D add_where(DMask m, D a, D b) { return select(m, add(a, b), a); }
TG_TARGET inline D min(D a, D b) { return _mm256_min_pd(a, b); }  // b where either is NaN
TG_TARGET inline D max(D a, D b) { return _mm256_max_pd(a, b); }  // b where either is NaN
TG_TARGET inline D min_where(DMask m, D a, D b) { return select(m, _mm256_min_pd(a, b), a); }

// 64-bit integers, 4 lanes
TG_TARGET inline I seti(int64_t x) { return _mm256_set1_epi64x(x); }
TG_TARGET inline I as_int(D a) { return _mm256_castpd_si256(a); }
TG_TARGET inline D as_double(I a) { return _mm256_castsi256_pd(a); }
TG_TARGET inline I bits_and(I a, I b) { return _mm256_and_si256(a, b); }
TG_TARGET inline I add(I a, I b) { return _mm256_add_epi64(a, b); }
TG_TARGET inline I bits_or(I a, I b) { return _mm256_or_si256(a, b); }
TG_TARGET inline I shift_left_47(I a) { return _mm256_slli_epi64(a, 47); }
TG_TARGET inline DMask far_from(I x, int64_t center, int64_t distance) {  // x > c + d or x < c - d
  return _mm256_castsi256_pd(_mm256_or_si256(_mm256_cmpgt_epi64(x, seti(center + distance)),
                                             _mm256_cmpgt_epi64(seti(center - distance), x)));
}
// table[index] for indices in [0, 32): one gather.
TG_TARGET inline I lookup32(const uint64_t* table, I index) {
  return _mm256_i64gather_epi64(reinterpret_cast<const long long*>(table), index, 8);
}

#include "tapegrad/kernels/cpu/simd_paths.inc"

#undef TG_TARGET

}  // namespace

namespace detail {
extern const Kernels avx2_kernels;
const Kernels avx2_kernels = path_kernels;
}  // namespace detail

}  // namespace tapegrad::cpu::simd

#endif
