// The vector paths of the f32 CPU kernels whose reference loops are too slow one element at a time
// (bob's update: AdamW, the softmax and cross-entropy rows, the gather backward's row adds), and
// the choice among them at run time.
//
// Rule: every path gives its kernel's reference-loop bits on every input: the same IEEE
// operations in the same order, lane by lane (no fused multiply-add where the loop has none, no
// reassociation, no approximate reciprocals), or an order the notes of simd_paths.inc prove
// gives the same result. Each function handles whole vectors and returns how many elements it
// did (the caller's reference loop does the rest), or says it could not (false) so that the
// caller runs its loop. The exceptions are the f32 math of ops that no pinned result reads
// (tanh, sigmoid, silu, gelu_tanh, gelu: Note [vector unary math]; ops::softmax's rows: Note [vector
// softmax rows]; the softmax backward's dot_row): there the paths differ from each other in the
// last bits (the vector math is the more accurate), and each is deterministic and independent of
// the thread count.
//
// Note [cpu paths]
// The paths are written once (simd_paths.inc) and compiled twice, for AVX2 with FMA and for
// AVX-512F, by function attributes: the library holds both whatever -march it was built with,
// and runs on any x86-64. The path is chosen once per process: TAPEGRAD_CPU_PATH=scalar, avx2 or
// avx512 forces one (an error when the CPU lacks it), unset takes the best the CPU has.
// set_path changes it at run time (tests, benchmarks). The scalar path runs the reference
// loops alone, as every path does in an AddressSanitizer build or on a CPU other than x86-64.
// Outside those exceptions every path gives the same bits, so the choice changes only the time a
// kernel takes.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::cpu::simd {

enum class Path : int { scalar = 0, avx2 = 1, avx512 = 2 };
inline constexpr Path all_paths[] = {Path::scalar, Path::avx2, Path::avx512};

const char* name(Path p);       // "scalar", "avx2", "avx512"
bool supported(Path p);         // this CPU has it, and this build runs vector paths
std::string missing(Path p);    // why not, when not supported
Path best();                    // the widest supported path
Path active();                  // TAPEGRAD_CPU_PATH, or best() (Note [cpu paths])
void set_path(Path p);          // throws when !supported(p)

// One path's kernels. A function that cannot do a row returns 0 (or false) and leaves it to the
// caller's reference loop, as the scalar path does always.
struct Kernels {
  Path path;
  int lanes;  // f32 elements per vector (1 on the scalar path)
  // The AdamW update of docs/bob.md, "Learner", over n elements (cpu::adamw_step's loop).
  int64_t (*adamw_step)(float* w, const float* g, float* m, float* v, int64_t n, const kernels::AdamWScalars& s);
  // w[j] = w[j] * s (AdamW's decay alone, on a block known to take the zero fast path).
  int64_t (*scale_in_place)(float* w, int64_t n, float s);
  // Whether every bit of a[0..n) and b[0..n) is clear (all n elements, the tail included).
  bool (*all_zero_bits)(const float* a, const float* b, int64_t n);
  // d[j] = (p[j] * s) * g when multiply, else (p[j] / s) * g (the cross-entropy backward's rows).
  int64_t (*scale_row)(const float* p, float* d, int64_t n, float s, bool multiply, float g);
  // o[j] = o[j] + s[j] (the gather backward's row adds).
  int64_t (*add_row)(float* o, const float* s, int64_t n);
  // o[j] = 0 + s[j] (a row's first addition into a zero gradient: +0 + -0 is +0, as the add gives).
  int64_t (*zero_plus_row)(float* o, const float* s, int64_t n);
  // The largest of x[0..n) into *top when no x is NaN (and n is at least a vector); else false.
  // Between +0 and -0 it may pick the other zero than a left-to-right loop would (Note [softmax
  // max] in rows.cpp).
  bool (*row_max)(const float* x, int64_t n, float* top);
  // y[j] = scalar_exp(x[j] - top) (Note [vectorized expf]); use only where reproduces() holds.
  int64_t (*exp_row)(const float* x, float top, float* y, int64_t n, float (*scalar_exp)(float));
  // The left-to-right double sum of y[0..m) when Note [exact f32 sums] proves any order gives it.
  bool (*sum_if_exact)(const float* y, int64_t m, double* total);
  // The left-to-right double sum of y[0..m), always (Note [block sums]).
  double (*sum_blocks)(const float* y, int64_t m);
  // y[j] = (float)(y[j] / total) (Note [division by the total]).
  int64_t (*divide_row)(float* y, int64_t m, double total);
  // y[j] = op(x[j]) for every j < n, the tail included, when vector_unary(op) and the path is a
  // vector one; else false (Note [vector unary math]).
  bool (*unary_row)(kernels::Unary op, const float* x, float* y, int64_t n);
  // dx[j] = dy[j] * op'(x[j]) likewise, when vector_unary_backward(op).
  bool (*unary_backward_row)(kernels::Unary op, const float* x, const float* dy, float* dx, int64_t n);
  // The double sum of the float products a[j] * b[j], j < m (the softmax backward's sum(dy * y)):
  // left to right on the scalar path; the vector paths keep 8 vectors of kD partial sums (simd_paths.inc) and
  // add them up at the end, so AVX2 and AVX-512 (and the scalar loop) differ in the last bits. Each
  // row is one call on one thread: the bits do not depend on the thread count.
  double (*dot_row)(const float* a, const float* b, int64_t m);
  // y = softmax(x[0..m)) by Note [vector softmax rows], or false (a NaN or infinite max, a row
  // shorter than a vector, the scalar path) for the reference row.
  bool (*softmax_row)(const float* x, float* y, int64_t m);
};

// Note [vector softmax rows]
// ops::softmax's f32 rows on a vector path (not bob's cross-entropy rows, which keep the C
// library's expf bits, Note [vectorized expf]): the max, then e_j = exp(x_j - max) in double lanes
// (exp_lanes; x_j - max taken as -150 where it is below, a float 0 once scaled), summed in kD
// running sums and stored as floats, then each multiplied in double by 1/sum and rounded once.
// Within 2 ulps of the double softmax (tests/kernels/test_vector_math.cpp); the sums' lanes make
// AVX2 and AVX-512 differ in the last bits. A row is one call on one thread, so the thread count
// does not enter.

// Note [vector unary math]
// The scalar path computes tanh, sigmoid, silu, gelu_tanh and gelu (erf) in f32 through the C
// library's tanhf, expf and erff, one element at a time. The vector paths compute each element in
// double lanes from exp_lanes (glibc's expf steps without the final rounding, simd_paths.inc) and
// round once to float: sigmoid as 1/(1 + e) or e/(1 + e) with e = exp(-|x|), gelu_tanh as
// x sigmoid(2u) (the same function as x/2 (1 + tanh u)), tanh by a Taylor polynomial below 1/4 and
// (1 - e)/(1 + e) with e = exp(-2|x|) above. gelu (erf) is x Phi(x) with Phi(x) = erfc(a)/2 for
// x < 0 and 1 - erfc(a)/2 for x >= 0, a = |x|/sqrt(2), and erfc(a) = exp(-a^2) f(a), f a degree-16
// polynomial in Schonfelder's variable (a - 4)/(a + 4) fitted offline (tests/fixtures/
// gen_gelu_erfc.py, relative error below 3e-14 for a in [0, 10.5]); its derivative Phi(x) + x phi(x)
// shares exp(-a^2) = sqrt(2 pi) phi(x) and factors it out of the two terms that cancel near
// x = -0.75. Past a = 10.5 (x < -14.85) gelu gives -0 and gelu' 0 (the rounded values from
// x = -14.36 on), past x = 14.85 x and 1; so -inf gives -0 and 0, +inf gives +inf and 1, NaN stays
// NaN (the scalar formula's gelu'(-inf) is -inf * 0 = NaN).
// So the paths differ from each other: the vector results are within one ulp of the correctly
// rounded value (tests/kernels/test_vector_math.cpp measures it against the double functions over
// many inputs, and against libm's f32 functions), while the f32 formulas of the scalar path lose
// more where they cancel (gelu_tanh, silu and gelu for negative x).
// AVX2 and AVX-512 do the same double operations per lane (FMA in both), so they agree with each
// other bit for bit. On each path every element goes through the same code whatever the thread
// split (a short tail runs as a zero-padded vector), so the bits do not depend on the thread count.
// The backward rules of tanh and sigmoid read y only (no exp) and stay the scalar loops.
constexpr bool vector_unary(kernels::Unary op) {
  return op == kernels::Unary::tanh || op == kernels::Unary::sigmoid || op == kernels::Unary::silu ||
         op == kernels::Unary::gelu_tanh || op == kernels::Unary::gelu_erf;
}
constexpr bool vector_unary_backward(kernels::Unary op) {
  return op == kernels::Unary::silu || op == kernels::Unary::gelu_tanh || op == kernels::Unary::gelu_erf;
}

const Kernels& kernels_of(Path p);  // p's kernels (the scalar ones where p is not built)
inline const Kernels& active_kernels() { return kernels_of(active()); }

// Below this x the correctly rounded expf(x) is +0 (glibc returns it through its slow underflow
// handler): exp_f32 (rows.cpp) and exp_row's special lanes answer +0 themselves.
inline constexpr float kExpfZeroBelow = -0x1.9fe368p6f;  // about -103.97

// Whether k.exp_row gives scalar_exp's bits on a sample of 4,096 inputs spread over the shifted
// logits' range (Note [vectorized expf]); false on the scalar path.
bool reproduces(const Kernels& k, float (*scalar_exp)(float));

// Note [adamw zero fast path]
// An element whose gradient, m and v are all +0 (a table row no input touched yet, the common
// case for an embedding) gets m = beta1*0 + (1-beta1)*0 = +0, v = +0 and
// w = w*decay - step_size*(0 / (sqrt(0)/bc2_sqrt + eps)) = w*decay - (+0) = w*decay, bit for bit,
// whenever beta1 and beta2 are finite, eps > 0, bc2_sqrt > 0 and step_size is finite and >= 0
// (then 0/bc2_sqrt = +0, 0/eps = +0, step_size * +0 = +0, and x - (+0) = x for every x, -0 and
// NaN included). A vector of such elements therefore only needs w *= decay; m and v stay.
inline bool adamw_zero_fast_path_exact(const kernels::AdamWScalars& s) {
  return std::isfinite(s.beta1) && std::isfinite(s.beta2) && s.eps > 0 && s.bc2_sqrt > 0 &&
         std::isfinite(s.step_size) && s.step_size >= 0;
}

}  // namespace tapegrad::cpu::simd
