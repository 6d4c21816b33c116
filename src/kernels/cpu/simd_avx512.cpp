// The AVX-512F path of simd.hpp: the lanes simd_paths.inc is written against, as 16 f32 / 8 f64
// lanes with mask registers, and the paths compiled for them. Every function carries
// target("avx512f") (Note [cpu paths]); nothing else in the library does, and simd.cpp calls
// these only where the CPU has AVX-512F.
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "tapegrad/kernels/cpu/simd.hpp"

#if defined(__x86_64__)

// GCC 12 reports the undefined upper lanes its own AVX-512 intrinsics start from as
// uninitialized (GCC bug 105593); the warning is about the header, not about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace tapegrad::cpu::simd {
namespace {

#define TG_TARGET __attribute__((target("avx512f")))

constexpr Path path = Path::avx512;
constexpr int kF = 16, kD = 8;
using F = __m512;
using H = __m256;
using D = __m512d;
using I = __m512i;
using FMask = __mmask16;
using DMask = __mmask8;

// f32, 16 lanes
TG_TARGET inline F setf(float x) { return _mm512_set1_ps(x); }
TG_TARGET inline F loadf(const float* p) { return _mm512_loadu_ps(p); }
TG_TARGET inline void storef(float* p, F x) { _mm512_storeu_ps(p, x); }
TG_TARGET inline F load_first(const float* p, int64_t n) {
  return _mm512_maskz_loadu_ps(n >= kF ? FMask{0xffff} : static_cast<FMask>((1u << n) - 1), p);
}
TG_TARGET inline F add(F a, F b) { return _mm512_add_ps(a, b); }
TG_TARGET inline F sub(F a, F b) { return _mm512_sub_ps(a, b); }
TG_TARGET inline F mul(F a, F b) { return _mm512_mul_ps(a, b); }
TG_TARGET inline F div(F a, F b) { return _mm512_div_ps(a, b); }
TG_TARGET inline F sqrt(F a) { return _mm512_sqrt_ps(a); }
TG_TARGET inline F max(F a, F b) { return _mm512_max_ps(a, b); }
TG_TARGET inline float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
TG_TARGET inline F bits_or(F a, F b) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
TG_TARGET inline bool all_bits_clear(F a) { return _mm512_test_epi32_mask(_mm512_castps_si512(a), _mm512_castps_si512(a)) == 0; }
TG_TARGET inline FMask ge(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
TG_TARGET inline FMask le(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
TG_TARGET inline FMask unordered(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
TG_TARGET inline FMask every_lane() { return 0xffff; }
TG_TARGET inline FMask mask_and(FMask a, FMask b) { return a & b; }
TG_TARGET inline FMask mask_or(FMask a, FMask b) { return a | b; }
TG_TARGET inline bool all(FMask a) { return a == 0xffff; }
TG_TARGET inline bool any(FMask a) { return a != 0; }
TG_TARGET inline D widen_low(F a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
TG_TARGET inline D widen_high(F a) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

// f32, 8 lanes (the expf's and the division's inputs and outputs)
TG_TARGET inline H seth(float x) { return _mm256_set1_ps(x); }
TG_TARGET inline H loadh(const float* p) { return _mm256_loadu_ps(p); }
TG_TARGET inline void storeh(float* p, H x) { _mm256_storeu_ps(p, x); }
TG_TARGET inline H sub(H a, H b) { return _mm256_sub_ps(a, b); }
TG_TARGET inline D widen(H a) { return _mm512_cvtps_pd(a); }
TG_TARGET inline H narrow(D a) { return _mm512_cvtpd_ps(a); }
// The lanes whose |x| is at least 88 (or inf, NaN), from the top 12 bits as glibc tests them.
TG_TARGET inline unsigned at_least_88(H x) {
  const __m256i abs_top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  const __m256i at_least = _mm256_cmpgt_epi32(abs_top, _mm256_set1_epi32(0x42a));  // top12(88.0f) = 0x42b
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(at_least)));
}

// f64, 8 lanes
TG_TARGET inline D setd(double x) { return _mm512_set1_pd(x); }
TG_TARGET inline D add(D a, D b) { return _mm512_add_pd(a, b); }
TG_TARGET inline D sub(D a, D b) { return _mm512_sub_pd(a, b); }
TG_TARGET inline D mul(D a, D b) { return _mm512_mul_pd(a, b); }
TG_TARGET inline D div(D a, D b) { return _mm512_div_pd(a, b); }
TG_TARGET inline D fmadd(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
TG_TARGET inline D fmsub(D a, D b, D c) { return _mm512_fmsub_pd(a, b, c); }
TG_TARGET inline double reduce_add(D a) { return _mm512_reduce_add_pd(a); }
TG_TARGET inline double reduce_min(D a) { return _mm512_reduce_min_pd(a); }
TG_TARGET inline DMask ge(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
TG_TARGET inline DMask le(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_LE_OQ); }
TG_TARGET inline DMask lt(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
TG_TARGET inline DMask mask_and(DMask a, DMask b) { return a & b; }
TG_TARGET inline DMask mask_or(DMask a, DMask b) { return a | b; }
TG_TARGET inline bool all(DMask a) { return a == 0xff; }
TG_TARGET inline bool any(DMask a) { return a != 0; }
TG_TARGET inline unsigned lane_bits(DMask a) { return a; }
TG_TARGET inline D add_where(DMask m, D a, D b) { return _mm512_mask_add_pd(a, m, a, b); }
TG_TARGET inline D min_where(DMask m, D a, D b) { return _mm512_mask_min_pd(a, m, a, b); }
TG_TARGET inline D select(DMask m, D a, D b) { return _mm512_mask_blend_pd(m, b, a); }
TG_TARGET inline D min(D a, D b) { return _mm512_min_pd(a, b); }  // b where either is NaN
TG_TARGET inline D max(D a, D b) { return _mm512_max_pd(a, b); }  // b where either is NaN

// 64-bit integers, 8 lanes
TG_TARGET inline I seti(int64_t x) { return _mm512_set1_epi64(x); }
TG_TARGET inline I as_int(D a) { return _mm512_castpd_si512(a); }
TG_TARGET inline D as_double(I a) { return _mm512_castsi512_pd(a); }
TG_TARGET inline I bits_and(I a, I b) { return _mm512_and_si512(a, b); }
TG_TARGET inline I add(I a, I b) { return _mm512_add_epi64(a, b); }
TG_TARGET inline I bits_or(I a, I b) { return _mm512_or_si512(a, b); }
TG_TARGET inline I shift_left_47(I a) { return _mm512_slli_epi64(a, 47); }
TG_TARGET inline DMask far_from(I x, int64_t center, int64_t distance) {
  return _mm512_cmp_epi64_mask(_mm512_abs_epi64(_mm512_sub_epi64(x, seti(center))), seti(distance), _MM_CMPINT_GT);
}
// table[index] for indices in [0, 32), table 64-byte aligned: two permutes and a blend.
TG_TARGET inline I lookup32(const uint64_t* table, I index) {
  const __m512i* t = reinterpret_cast<const __m512i*>(table);
  const __m512i low = _mm512_permutex2var_epi64(_mm512_load_si512(t), index, _mm512_load_si512(t + 1));
  const __m512i high = _mm512_permutex2var_epi64(_mm512_load_si512(t + 2), index, _mm512_load_si512(t + 3));
  return _mm512_mask_blend_epi64(_mm512_test_epi64_mask(index, seti(16)), low, high);
}

#include "tapegrad/kernels/cpu/simd_paths.inc"

#undef TG_TARGET

}  // namespace

namespace detail {
extern const Kernels avx512_kernels;
const Kernels avx512_kernels = path_kernels;
}  // namespace detail

}  // namespace tapegrad::cpu::simd

#endif
