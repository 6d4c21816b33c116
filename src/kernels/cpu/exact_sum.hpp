// exact_sum: the correctly rounded sum of doubles, bit-identical to CPython's math.fsum.
//
// Rule: the result is the exact real sum of the inputs rounded once, half-even, so it does not
// depend on their order; it is the sum the Python reference computes wherever it calls math.fsum
// (matmul, softmax, losses), and the f64 CPU kernels use it to keep bit parity with it.
// Header-only and allocation-free up to 32 partials (the common case is n <= 8, a few partials);
// compile without -ffast-math, which would reassociate the error-free transformations away.
// See Note [fsum partials] for the algorithm.
#pragma once

#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace tapegrad::cpu {

// Note [fsum partials]
// A port of math_fsum (CPython 3.11, Modules/mathmodule.c; Shewchuk, "Adaptive Precision
// Floating-Point Arithmetic", 1997). The running total is kept exactly as a list of partials:
// non-zero, non-overlapping doubles in increasing magnitude whose exact sum is the total. Adding
// x walks the list with the error-free two-sum (hi = x + y; lo = y - (hi - x), valid for
// |x| >= |y|): each lo is kept as a smaller partial, hi carries on and becomes the top partial.
// At the end the partials are summed from the top down until the first inexact addition; if the
// rounding error lo of that addition and the next partial below it point the same way, the exact
// sum lies beyond the half-way point that a naive half-even rounding would have assumed, so hi
// is moved one ulp in lo's direction when 2*lo is exactly representable next to hi
// (sum([1e-16, 1, 1e16]) is 1e16 + 2, not 1e16).
// Specials: an inf or nan input resets the partials and is added to special_sum, the result
// whenever one occurred (inf + -inf gives nan there; CPython raises ValueError instead). A
// finite input whose addition overflows is where CPython raises OverflowError; here the
// overflowed infinity is treated as a special, so the result is that infinity (or nan if an
// infinity of the other sign occurs too).

// Sum of x[0], x[stride], ..., x[(n - 1) * stride], correctly rounded (= math.fsum).
inline double exact_sum(const double* x, size_t n, size_t stride = 1) {
  // One or two finite, non-zero-sum terms: a single IEEE addition is already the correctly
  // rounded exact sum. (Zero results keep to the general path, which gives fsum's +0.0.)
  if (n <= 2 && n > 0) {
    const double r = n == 1 ? x[0] : x[0] + x[stride];
    if (r != 0.0 && std::isfinite(r)) return r;
  }
  constexpr size_t kStackPartials = 32;  // 2098 bits of exponent range need at most ~40 partials
  double stack[kStackPartials];
  std::vector<double> heap;  // holds the partials only once there are more than 32
  double* partials = stack;
  size_t capacity = kStackPartials;
  size_t count = 0;
  double special_sum = 0.0;  // sum of the inf and nan inputs (and of overflowed totals)

  for (size_t k = 0; k < n; ++k) {
    const double input = x[k * stride];
    double v = input;
    size_t kept = 0;
    for (size_t j = 0; j < count; ++j) {  // two-sum v with each partial, keep the non-zero errors
      double y = partials[j];
      if (std::fabs(v) < std::fabs(y)) std::swap(v, y);
      const double hi = v + y;
      const double lo = y - (hi - v);
      if (lo != 0.0) partials[kept++] = lo;
      v = hi;
    }
    count = kept;
    if (v == 0.0) continue;
    if (!std::isfinite(v)) {  // an inf/nan input, or the total overflowed (Note [fsum partials])
      special_sum += std::isfinite(input) ? v : input;
      count = 0;
      continue;
    }
    if (count == capacity) {  // rare: move to (or grow) the heap buffer
      if (partials == stack) heap.assign(stack, stack + count);
      heap.resize(2 * capacity);
      partials = heap.data();
      capacity = heap.size();
    }
    partials[count++] = v;
  }
  if (special_sum != 0.0) return special_sum;  // inf, -inf or nan: never 0 once set

  if (count == 0) return 0.0;
  double hi = partials[--count];
  double lo = 0.0;
  while (count > 0) {  // sum from the top down while the additions stay exact
    const double v = hi;
    const double y = partials[--count];
    hi = v + y;
    lo = y - (hi - v);
    if (lo != 0.0) break;
  }
  // Half-even across partials: lo and the partial below it on the same side of zero -> round away.
  if (count > 0 && ((lo < 0.0 && partials[count - 1] < 0.0) || (lo > 0.0 && partials[count - 1] > 0.0))) {
    const double y = lo * 2.0;
    const double v = hi + y;
    if (y == v - hi) hi = v;
  }
  return hi;
}

}  // namespace tapegrad::cpu
